"""aicalc's whole-step peak against PyTorch's own memory tracker (issue 23).

``tests/data/validation/step_peak.json`` holds the peak of three full training steps (forward and loss,
backward, AdamW step, ``zero_grad``) of transformers models of several families, traced on the CPU under
``FakeTensorMode`` by ``torch.distributed._tools.mem_tracker.MemTracker`` (``validation/record_step_peak.py``;
512-byte blocks and CUDA's dropout kernel, see docs/validation-train.md). aicalc's ``peak_allocated_bytes``
must land within 5 % of every record, except the documented case below, with its reason and band.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

import aicalc

from conftest import ROOT

sys.path.insert(0, str(ROOT / "validation"))
from step_peak_doc import estimate, fsdp_estimate, not_cuda  # noqa: E402  (the record's settings through the public API)

DATA = Path(__file__).parent / "data" / "validation" / "step_peak.json"
DOC = json.loads(DATA.read_text()) if DATA.exists() else {"records": [], "excluded": []}
RECORDS = DOC["records"]
TOLERANCE = 0.05

# Records outside 5 %, the band they are held to and why (docs/validation-train.md, "Whole-step peak"): none since
# the end-of-backward phase leaves out the first layer's and the input embedding's gradients, not made yet when that
# layer's MLP backward peaks (train_peak.grads_not_yet; GPT-2 eager fp32 with full recompute was +5.6 %, now +1.3 %)
BANDS: dict[str, tuple[float, float]] = {}
# Within 5 % but high for a known reason: torch AMP (``bf16-mixed`` here) keeps fp32 weights and gradients and
# saves bf16 copies of the *linear* weights for backward; aicalc itemizes the ZeRO form (bf16 weights + fp32
# master), whose 2 bytes per parameter also cover the embedding, which autocast never copies (half of the tiny
# untied llama3-style model: +5.0 %; ≈ 7 % of Llama-3.1-8B's parameters, ≈ 1 % of its peak). With foreach AdamW
# the optimizer step sets the peak and the two forms agree exactly.


def test_records_cover_the_matrix():
    assert len(RECORDS) >= 40
    assert {r["attention"] for r in RECORDS} == {"eager", "sdpa"}
    assert {r["precision"] for r in RECORDS} == {"bf16", "fp32", "bf16-mixed"}
    assert {r["recompute"] for r in RECORDS} == {"none", "full", "selective-op", "every-2"}
    assert {r["adamw"] for r in RECORDS} == {"foreach", "fused", "loop"}
    assert any(r.get("grads_kept") for r in RECORDS) and "bert" in {r["config"]["model_type"] for r in RECORDS}
    assert any(r["microbatches"] > 1 for r in RECORDS) and any(r.get("lora") for r in RECORDS)
    assert {"mixtral", "qwen2_moe", "deepseek_v3"} <= {r["config"]["model_type"] for r in RECORDS}
    assert all(e["reason"] for e in DOC["excluded"])
    # every phase of the step sets the peak somewhere in the matrix (the forward: an encoder's LoRA on q, v, where
    # the frozen base saves little and a classifier's loss holds nothing of a vocabulary)
    assert {r["peak_phase"].split()[-1] for r in RECORDS} == {"forward", "backward", "optimizer"}


def test_foreach_adamw_allocates_one_state_in_the_step():
    """What the optimizer-step term models, read from the records: during ``step()`` foreach AdamW holds one
    more state-sized buffer than the states it leaves behind; fused AdamW none; the per-parameter loop
    (``foreach=False``) two temporaries of its largest parameter (an encoder's word embedding, V·H fp32)."""
    for r in RECORDS:
        if r["microbatches"] > 1:
            continue
        during = r["phases_last_step"]["optimizer"]["optimizer"]
        states = r["after_step"]["optimizer"]
        extra = (during - states) / (states / 2)  # in units of one state
        if r["adamw"] == "foreach":
            assert extra == pytest.approx(1.0, abs=0.03), r["name"]  # LoRA's small tensors: 512-byte blocks
        elif r["adamw"] == "loop":
            c = r["config"]
            assert during - states == 2 * 4 * c["vocab_size"] * c["hidden_size"], r["name"]
        else:
            assert extra == pytest.approx(0.0, abs=0.03), r["name"]


def _checked():
    return [r for r in RECORDS if not not_cuda(r)]


@pytest.mark.parametrize("rec", _checked(), ids=[r["name"] for r in _checked()])
def test_peak_within_5_percent(rec):
    est = float(estimate(rec)["peak_allocated_bytes"][0])
    err = est / rec["peak_bytes"] - 1
    lo, hi = BANDS.get(rec["name"], (-TOLERANCE, TOLERANCE))
    assert lo <= err <= hi, f"{rec['name']}: estimate {est:,.0f} vs traced {rec['peak_bytes']:,} ({err:+.2%})"


def test_sdpa_math_fallback_is_only_deepseek_mla():
    """The CPU's SDPA takes its math path (S² scores saved, like eager) where q/k and v head sizes differ
    (DeepSeek-V3's MLA: 48 vs 32); CUDA's memory-efficient kernel takes them, so those records do not stand for
    a GPU run and are not compared. Only they fell back."""
    fell = {r["name"] for r in RECORDS if r["sdpa_math_fallback"]}
    assert fell == {r["name"] for r in RECORDS if r["model"] == "deepseekv3-style" and r["attention"] == "sdpa"}
    for r in RECORDS:
        if r["attention"] == "sdpa" and not r["sdpa_math_fallback"]:
            assert r["sdpa_kernels"], r["name"]


def test_peak_phase_names_what_sets_it():
    # the large-vocabulary model peaks in the loss's backward; the fp32 one with foreach AdamW in the step
    by = {r["name"]: r for r in RECORDS}
    big = estimate(by["llama3-style/sdpa/bf16/foreach/b2s256"])
    assert big["peak_phase"][0] == "loss" and by["llama3-style/sdpa/bf16/foreach/b2s256"]["peak_phase"].endswith(
        "backward")
    fp32 = estimate(by["llama2-style/sdpa/fp32/foreach/b2s256"])
    assert fp32["peak_phase"][0] == "optimizer"
    assert by["llama2-style/sdpa/fp32/foreach/b2s256"]["peak_phase"].endswith("optimizer")
    fused = aicalc.train_memory(by["llama2-style/sdpa/fp32/foreach/b2s256"]["config"], batch=2, seq=256,
                                precision="fp32", adamw="fused")
    assert float(fused["optimizer_step_bytes"][0]) == 0.0
    assert float(fp32["optimizer_step_bytes"][0]) == pytest.approx(by["llama2-style/sdpa/fp32/foreach/b2s256"]
                                                                   ["params"] * 4, rel=1e-6)


# FSDP2 on a fake process group (validation/record_step_peak.py, ``measure_fsdp``): one rank of fully_shard per
# decoder layer and the root, bf16 parameters / fp32 reduce-scatter, real model sizes at dp 2 and 8.
FSDP_DATA = Path(__file__).parent / "data" / "validation" / "step_peak_fsdp.json"
FSDP = json.loads(FSDP_DATA.read_text())["records"] if FSDP_DATA.exists() else []


def test_fsdp_records_cover_the_setups():
    assert len(FSDP) >= 23
    assert {r["dp"] for r in FSDP} == {2, 4, 8}
    assert {r["config"]["model_type"] for r in FSDP} == {"llama", "qwen3", "qwen2_moe"}
    assert {r["recompute"] for r in FSDP} == {"none", "full"}
    # torchtitan's bf16-mixed and torchtune's pure bf16 (its LoRA), gradient accumulation with both
    assert {r["precision"] for r in FSDP if r.get("lora")} == {"bf16"}
    assert {(r["precision"], r["microbatches"] > 1) for r in FSDP} >= {("bf16-mixed", True), ("bf16", True)}
    assert {r["lora"]["targets"] for r in FSDP if r.get("lora")} == {"q,v", "all"}
    # the traced rank's share of the stacked experts is rounded up where dp does not divide them (60 over 8)
    moe = [r for r in FSDP if "num_experts" in r["config"]]
    assert {r["config"]["num_experts"] % r["dp"] > 0 for r in moe} == {True, False}
    # the loss, the root's reduce-scatter at the end of the backward and the optimizer step each set a peak, and
    # with torchtitan's units the end of the forward
    assert {r["peak_phase"].split()[-1] for r in FSDP} == {"backward", "optimizer", "forward"}
    assert {r.get("units", "root") for r in FSDP} == {"root", "split", "torchtitan"}
    assert any(r["peak_breakdown"]["reduce_scatter"] > 0 for r in FSDP)
    # the root's reduce-scatter sets a traced peak with tied and with untied embeddings
    at_root = {r["config"]["tie_word_embeddings"] for r in FSDP
               if fsdp_estimate(r)["peak_phase"][0] == "gradients"}
    assert at_root == {True, False}


@pytest.mark.parametrize("rec", FSDP, ids=[r["name"] for r in FSDP])
def test_fsdp_peak_within_5_percent(rec):
    est = float(fsdp_estimate(rec)["peak_allocated_bytes"][0])
    err = est / rec["peak_bytes"] - 1
    assert abs(err) <= TOLERANCE, f"{rec['name']}: estimate {est:,.0f} vs traced {rec['peak_bytes']:,} ({err:+.2%})"


def test_fsdp_split_units_worked_by_hand():
    """torchtune's custom_sharded_layers on Llama-3.1-8B's shapes (bf16 parameters unsharded, full recompute, batch
    2 × 4096, dp 8):
    at the loss's backward the root layout holds the root's parameters unsharded (embedding, output layer, final norm)
    and the last layer's all-gather output, the split layout only the output layer's all-gather output. The traced
    difference is a·(V·H + H + layer) with a = 2 bytes, the layer's parameters counted from the config."""
    name = "llama3.1-8b-style/sdpa/bf16-mixed+full/foreach/b2s4096"
    root = next(r for r in FSDP if r["name"] == f"fsdp2-dp8/{name}")
    split = next(r for r in FSDP if r["name"] == f"fsdp2-dp8+units-split/{name}")
    c = root["config"]
    h, f, kv = c["hidden_size"], c["intermediate_size"], c["num_key_value_heads"] * c["head_dim"]
    layer = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h
    by_hand = 2 * (c["vocab_size"] * h + h + layer)
    assert root["peak_bytes"] - split["peak_bytes"] == pytest.approx(by_hand, rel=1e-4)
    est = [float(fsdp_estimate(r)["peak_allocated_bytes"][0]) for r in (root, split)]
    assert est[0] - est[1] == pytest.approx(by_hand, rel=1e-3)


def _sharded_params(rec) -> float:
    """dp times the parameters on the traced rank (rank 0, the most loaded): FSDP2 shards every parameter on dim 0
    in ``torch.chunk`` pieces, rank 0 taking the largest, so of the routed experts stacked ``[E, ·, ·]`` (three
    matrices of H × moe_intermediate_size per expert and layer) it holds ceil(E/dp) experts' rows."""
    cfg = rec["config"]
    if "num_experts" not in cfg:
        return rec["params"]
    e = cfg["num_experts"]
    experts = cfg["num_hidden_layers"] * e * 3 * cfg["hidden_size"] * cfg["moe_intermediate_size"]
    return rec["params"] - experts + experts * math.ceil(e / rec["dp"]) * rec["dp"] / e


@pytest.mark.parametrize("rec", FSDP, ids=[r["name"] for r in FSDP])
def test_fsdp_sharded_states_are_the_traced_ones(rec):
    """Between steps FSDP2 holds its parameter shard and two AdamW states per trainable parameter, and no gradients
    (zero_grad(set_to_none=True)): under torchtitan's mixed precision (bf16-mixed) the fp32 shard is the master
    copy and the states are fp32, 12 bytes over dp; torchtune's LoRA (bf16) keeps the bf16 base and adapters, 2
    bytes over dp, and the adapters' two bf16 states, 4 bytes over dp; its full fine-tune (bf16 without a policy)
    the bf16 shard and two bf16 states, 6 bytes over dp. The root's parameters are unsharded in bf16 through the
    forward (tm.fsdp2_buffers)."""
    est = fsdp_estimate(rec)
    after, dp, n = rec["after_step"], rec["dp"], _sharded_params(rec)
    if rec.get("lora"):
        expect = 2 * n / dp + 4 * rec["trainable_params"] / dp
    else:
        expect = (6 if rec["precision"] == "bf16" else 12) * n / dp
    assert after["sharded_param"] + after["optstate"] == pytest.approx(expect, rel=1e-3)
    assert after["sharded_grad"] == 0
    held = float(est["weights_bytes"][0]) + float(est["optimizer_bytes"][0])
    assert held == pytest.approx(after["sharded_param"] + after["optstate"], rel=1e-3)
    h, v = rec["config"]["hidden_size"], rec["config"]["vocab_size"]
    root = h * v * (1 if rec["config"]["tie_word_embeddings"] else 2) + h
    # at the forward's peak: the root's parameters, and one layer's where that peak falls inside a layer
    layer = (n - root) / rec["config"]["num_hidden_layers"]
    if rec.get("units", "root") != "root":
        # the embedding and the output layer their own units: the root (the final norm) unsharded, and at most one
        # of the two (the output layer where the forward peaks in it, or torchtitan's kept unsharded)
        extra = rec["phases_last_step"]["forward"]["unsharded_param"] - 2 * h
        assert extra == pytest.approx(0, abs=1e6) or extra == pytest.approx(2 * h * v, rel=1e-3)
        return
    extra = rec["phases_last_step"]["forward"]["unsharded_param"] - 2 * root
    assert extra == pytest.approx(0, abs=1e6) or extra == pytest.approx(2 * layer, rel=1e-3)


def test_fsdp_expert_rows_follow_torch_chunk():
    """FSDP2 gives rank 0 ``torch.chunk``'s first piece of each stacked expert tensor: 60 experts over 8 ranks is
    chunks of 8 (8/7.5 of the even share), 64 over 8 divides; past E ranks torchtitan shards on dim 1 (even)."""
    from aicalc.core.train_memory import fsdp2_expert_rows

    assert float(fsdp2_expert_rows(60, 1, 8)) == pytest.approx(math.ceil(60 / 8) / (60 / 8))
    assert float(fsdp2_expert_rows(64, 1, 8)) == 1.0
    assert float(fsdp2_expert_rows(8, 1, 64)) == 1.0
    assert float(fsdp2_expert_rows(60, 4, 4)) == pytest.approx(math.ceil(15 / 4) / (15 / 4))  # 15 experts a rank


def test_fsdp_tied_gradient_sum_worked_by_hand():
    """Llama-3.2-1B's tied embedding (V = 128256, H = 2048) in pure bf16 (a = r = 2 bytes), batch 1 × 512 with full
    recompute at dp 8: the end of the backward peaks while autograd sums the tied weight's two gradients, the
    output layer's and the embedding's: three V·H bf16 tensors, 3 × 2 × 262,668,288 = 1,576,009,728 B (with the final
    norm's 4,096 B gradient), beside the
    root's unsharded bf16 parameters (V·H + H: 525,340,672 B) and the first layer's bf16 reduce-scatter input
    (q, k, v, o 2·2048² + 2·2048·512, MLP 3·2048·8192, two norms: 60,821,504 parameters, 121,643,008 B). With
    torchtitan's fp32 reduce-scatter (r = 4) the sum, 3a, equals a + r, so the bf16-mixed records could not tell it
    from the root's reduce-scatter; here r = a."""
    rec = next(r for r in FSDP if r["name"] == "fsdp2-dp8/llama3.2-1b-style/sdpa/bf16+full/foreach/b1s512")
    b = rec["peak_breakdown"]
    vh, h = 128256 * 2048, 2048
    layer = 2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048
    assert layer == 60_821_504
    assert b["temp"] == 3 * 2 * vh + 2 * h  # and the final norm's bf16 gradient
    assert b["unsharded_param"] == 2 * (vh + h)
    assert b["reduce_scatter"] == 2 * layer
    est = float(fsdp_estimate(rec)["peak_allocated_bytes"][0])
    assert est == pytest.approx(rec["peak_bytes"], rel=1e-4)


# FSDP1 (validation/record_step_peak.py, ``measure_fsdp1``): FullyShardedDataParallel, FULL_SHARD, flat parameters,
# one rank on the fake process group, the compute on the fake accelerator; the FSDP2 setups and pure-bf16 training.
FSDP1_DATA = FSDP_DATA.with_name("step_peak_fsdp1.json")
FSDP1 = json.loads(FSDP1_DATA.read_text())["records"] if FSDP1_DATA.exists() else []


def test_fsdp1_records_cover_the_setups():
    assert len(FSDP1) >= 26 and all(r["fsdp"] == 1 for r in FSDP1)
    assert {r["dp"] for r in FSDP1} == {2, 4, 8}
    assert {r["config"]["model_type"] for r in FSDP1} == {"llama", "qwen3", "qwen2_moe"}
    assert {(r["precision"], bool(r.get("lora"))) for r in FSDP1} == {("bf16-mixed", False), ("bf16", True),
                                                                        ("bf16", False)}
    assert any(r["microbatches"] > 1 for r in FSDP1)
    # the end of the backward sets the traced peak with tied and untied embeddings, in fp32 and bf16 reduce-scatters
    at_root = {(r["config"]["tie_word_embeddings"], r["precision"]) for r in FSDP1
               if fsdp_estimate(r)["peak_phase"][0] == "gradients"}
    assert at_root >= {(True, "bf16-mixed"), (False, "bf16-mixed"), (True, "bf16"), (False, "bf16")}


@pytest.mark.parametrize("rec", FSDP1, ids=[r["name"] for r in FSDP1])
def test_fsdp1_peak_within_5_percent(rec):
    est = float(fsdp_estimate(rec)["peak_allocated_bytes"][0])
    err = est / rec["peak_bytes"] - 1
    assert abs(err) <= TOLERANCE, f"{rec['name']}: estimate {est:,.0f} vs traced {rec['peak_bytes']:,} ({err:+.2%})"


def test_fsdp1_holds_fsdp2s_peak_at_the_loss():
    """Where the loss sets the peak, FSDP1 and FSDP2 hold the same bytes (the same setups traced both ways): the root
    unsharded through the forward, one layer's parameters and the activations; FSDP1 (flat parameters split evenly)
    only holds less where FSDP2 gives rank 0 whole experts' rows (Qwen1.5-MoE's 60 experts over 8 ranks)."""
    fsdp2 = {r["name"].replace("fsdp2-", ""): r for r in FSDP}
    pairs = [(r, fsdp2[r["name"].replace("fsdp1-", "")]) for r in FSDP1 if r["name"].replace("fsdp1-", "") in fsdp2]
    assert len(pairs) >= 20
    at_loss = [(one, two) for one, two in pairs if fsdp_estimate(one)["peak_phase"][0] == "loss"
               and "num_experts" not in one["config"]]
    assert len(at_loss) >= 10
    for one, two in at_loss:
        assert one["peak_bytes"] == pytest.approx(two["peak_bytes"], rel=2e-4), one["name"]
    uneven = [(one, two) for one, two in pairs if "num_experts" in one["config"]
              and one["config"]["num_experts"] % one["dp"]]
    assert uneven and all(one["peak_bytes"] < two["peak_bytes"] for one, two in uneven)


def test_fsdp1_root_reduce_scatter_worked_by_hand():
    """Llama-3.1-8B's root, 2·V·H + H = 1,050,677,248 parameters (V = 128256, H = 4096), at dp 8 with full recompute
    and batch 1 × 512 (the end of the backward sets the peak). FSDP1's ``_reduce_grad`` holds the bf16 gradient
    autograd made, its fp32 cast and the new fp32 shard at once: 2 + 4 bytes of the root beyond the counted shards;
    FSDP2 frees its inputs before the shard is counted, 4/8 bytes a parameter less. So the two estimates differ by
    4 × 1,050,677,248 / 8 = 525,338,624 B, and so do the two traces, to 0.1 %."""
    name = "llama3.1-8b-style/sdpa/bf16-mixed+full/foreach/b1s512"
    one = next(r for r in FSDP1 if r["name"] == f"fsdp1-dp8/{name}")
    two = next(r for r in FSDP if r["name"] == f"fsdp2-dp8/{name}")
    root = 2 * 128256 * 4096 + 4096
    assert root == 1_050_677_248
    delta = 4 * root / 8
    est1, est2 = (float(fsdp_estimate(r)["peak_allocated_bytes"][0]) for r in (one, two))
    assert est1 - est2 == pytest.approx(delta, rel=1e-9)
    assert one["peak_bytes"] - two["peak_bytes"] == pytest.approx(delta, rel=1e-3)


@pytest.mark.parametrize("kw, says", [
    ({"fsdp_version": 3}, "must be 1"),
    ({"fsdp_version": 1, "framework": "megatron"}, "distributed optimizer"),
    ({"fsdp_version": 1, "offload": "params"}, "CPUOffload"),
    ({"fsdp_version": 1, "zero": 0}, "applies with zero=3"),
    ({"fsdp_version": 1, "lora_rank": 8, "quant": "nf4"}, "not modelled with quant"),
])
def test_fsdp_version_refusals(kw, says):
    import aicalc
    from aicalc.errors import ParameterError

    with pytest.raises(ParameterError, match=says):
        aicalc.train_memory("llama-3.1-8b", **{"zero": 3, "dp": 8, **kw})


def test_fsdp_version_refused_with_expert_parallelism(capsys):
    from aicalc.cli import main

    assert main(["train-mem", "qwen3-30b-a3b", "--zero", "3", "--dp", "8", "--ep", "2", "--fsdp-version", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--fsdp-version 1 has no expert parallelism" in err[0]


# FSDP2 with CPUOffloadPolicy (validation/record_step_peak.py, ``fsdp_offload_cases``): the same runs, the compute on a
# fake accelerator (validation/fake_accelerator.py) and the sharded states on the host; peak_bytes is the device's.
OFFLOAD_DATA = FSDP_DATA.with_name("step_peak_fsdp_offload.json")
OFFLOAD = json.loads(OFFLOAD_DATA.read_text())["records"] if OFFLOAD_DATA.exists() else []


def test_fsdp_offload_records_cover_the_setups():
    assert len(OFFLOAD) >= 15
    assert all(r["offload"] == "cpu" for r in OFFLOAD)
    assert {r["dp"] for r in OFFLOAD} == {2, 4, 8}
    assert {r["config"]["model_type"] for r in OFFLOAD} == {"llama", "qwen3", "qwen2_moe"}
    assert {r["recompute"] for r in OFFLOAD} == {"none", "full"}
    assert any(r["microbatches"] > 1 for r in OFFLOAD) and any(r.get("lora") for r in OFFLOAD)
    assert {r["config"]["tie_word_embeddings"] for r in OFFLOAD} == {True, False}
    # the activations' backward and the root's reduce-scatter at the end of it each set a peak somewhere
    assert {fsdp_estimate(r)["peak_phase"][0] for r in OFFLOAD} >= {"loss", "gradients"}
    # each offloaded record lies below its run without offload, where the same shape was recorded
    same = {r["name"].replace("+offload", ""): r for r in OFFLOAD}
    pairs = [(same[r["name"]], r) for r in FSDP if r["name"] in same]
    assert len(pairs) >= 8
    assert all(off["peak_bytes"] < on["peak_bytes"] for off, on in pairs)


@pytest.mark.parametrize("rec", OFFLOAD, ids=[r["name"] for r in OFFLOAD])
def test_fsdp_offload_peak_within_5_percent(rec):
    est = float(fsdp_estimate(rec)["peak_allocated_bytes"][0])
    err = est / rec["peak_bytes"] - 1
    assert abs(err) <= TOLERANCE, f"{rec['name']}: estimate {est:,.0f} vs traced {rec['peak_bytes']:,} ({err:+.2%})"


@pytest.mark.parametrize("rec", OFFLOAD, ids=[r["name"] for r in OFFLOAD])
def test_fsdp_offload_keeps_the_sharded_states_on_the_host(rec):
    """Between steps the device holds none of FSDP2's sharded parameters or optimizer states and the host holds
    what the device holds without offload (12 bytes over dp per parameter under torchtitan's mixed precision; the
    bf16 base and adapters and the adapters' two bf16 states under torchtune's LoRA), plus AdamW's step counters
    (one 512-byte block per parameter tensor) and the padding of uneven shards: 1.0 MB in the MoE model; aicalc
    puts none of them, nor the gradients, on the device. torchtune's full fine-tune (bf16 without a policy): the bf16
    shard and two bf16 states, 6 bytes over dp."""
    after, host, dp, n = rec["after_step"], rec["host_after_step"], rec["dp"], _sharded_params(rec)
    assert after["sharded_param"] == after["optstate"] == after["sharded_grad"] == 0
    expect = (2 * n / dp + 4 * rec["trainable_params"] / dp if rec.get("lora") else
              (6 if rec["precision"] == "bf16" else 12) * n / dp)
    assert host["sharded_param"] + host["optstate"] == pytest.approx(expect, rel=1e-3)
    assert 0 <= host["sharded_param"] + host["optstate"] - expect < 2e6
    est = fsdp_estimate(rec)
    for col in ("weights_bytes", "gradients_bytes", "optimizer_bytes"):
        assert float(est[col][0]) == 0.0, col
    grads = (2 * rec["trainable_params"] if rec.get("lora") else (2 if rec["precision"] == "bf16" else 4) * n) / dp
    assert float(est["host_bytes"][0]) == pytest.approx(expect + grads, rel=1e-3)


def test_fsdp_offload_root_reduce_scatter_worked_by_hand():
    """Llama-3.1-8B's root (untied embedding and output layer, V = 128256, H = 4096, and the final norm):
    2·V·H + H = 1,050,677,248 parameters. At the end of the backward FSDP2 holds their bf16 unsharded gradients
    (2 bytes) and the fp32 reduce-scatter input (4 bytes), 6 × 1,050,677,248 = 6,304,063,488 B; then it allocates
    the fp32 output (4 bytes over dp) while the output layer's bf16 gradient (2·V·H = 1,050,673,152 B) is still
    held: 4 × 1.5 × 1,050,677,248 + 1,050,673,152 = 7,354,736,640 B at dp 2, 5,778,720,768 B at dp 8. With
    offload nothing of it counts as the sharded gradients, so the phase is the larger moment: 7,354,736,640 at
    dp 2 and 6,304,063,488 at dp 8. The records with full recompute, whose peak this is, hold that and the few
    kilobytes of token ids, labels and buffers beside it."""
    from aicalc.core.train_memory import fsdp2_buffers

    by = {r["name"]: r for r in OFFLOAD}
    root, vh = 2 * 128256 * 4096 + 4096, 128256 * 4096
    for dp, seq, expect in ((2, 2048, 7_354_736_640), (8, 512, 6_304_063_488)):
        _, _, grads = fsdp2_buffers(root, 218_112_000, 2.0, vh, dp, False, r=4.0, offload=True)
        assert float(grads) == expect
        traced = by[f"fsdp2-dp{dp}+offload/llama3.1-8b-style/sdpa/bf16-mixed+full/foreach/b1s{seq}"]["peak_bytes"]
        assert 0 <= traced - expect < 32 * 1024


def test_gradients_not_yet_made_at_the_first_layers_peak_are_the_traced_ones():
    """train_peak.grads_not_yet, worked out by hand for the GPT-2-style record (H 384, F 1536, 2 layers, V 8192, 1024
    positions, tied embeddings) and read off its trace: at the peak of full recompute (the first layer's rebuilt MLP
    backward) the tracker holds as gradients every parameter's but the tied token table's (its head gradient waits in
    the autograd engine's input buffer, a temporary, until the embedding's backward adds to it) and those of
    grads_not_yet: the first layer's norms, attention and MLP input projection, and the position table."""
    from aicalc.catalog.hf_config import arch_from_config
    from aicalc.core.train_peak import grads_not_yet

    rec = next(r for r in RECORDS if r["name"] == "gpt2-style/eager/fp32+full/foreach/b2s256")
    arch = arch_from_config(rec["config"])
    H, F, V, P = 384, 1536, 8192, 1024
    layer = 2 * (2 * H) + (H * 3 * H + 3 * H) + (H * H + H) + (H * F + F)  # ln_1, ln_2, c_attn, c_proj, mlp.c_fc
    assert grads_not_yet(arch, False) == layer == 1_184_256
    assert grads_not_yet(arch, True) == layer + P * H
    made = rec["params"] - V * H - grads_not_yet(arch, True)
    assert rec["peak_breakdown"]["gradients"] == 4 * made  # fp32 gradients


def test_torchtitan_units_forward_kept_in_a_sweep_with_amp_casts():
    """A sweep over ZeRO stages under torch AMP with recompute: the ZeRO-2 row's forward phase is autocast's (its
    weight casts cached), the ZeRO-3 row's torchtitan's units (no casts under FSDP2): each row's peak is the one
    it has alone."""
    import aicalc

    # batch 1 × 2048 with 4 micro-batches: the ZeRO-3 row peaks at the end of the forward (as its record does)
    kw = dict(batch=1, seq=2048, dp=8, precision="bf16-mixed", recompute="full", fsdp_units="torchtitan",
              microbatches=4)
    both = aicalc.train_memory("llama-3.1-8b", zero="2,3", **kw)
    assert list(both["peak_phase"]) == ["forward", "forward"]
    for i, z in enumerate((2, 3)):
        units = {} if z == 3 else {"fsdp_units": "root"}  # (units apply to zero 3 only: alone, zero 2 takes none)
        alone = aicalc.train_memory("llama-3.1-8b", zero=z, **{**kw, **units})
        assert float(both["peak_allocated_bytes"][i]) == float(alone["peak_allocated_bytes"][0])
        assert both["peak_phase"][i] == alone["peak_phase"][0]
