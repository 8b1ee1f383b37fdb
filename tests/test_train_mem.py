"""train-mem: model-state oracles (TM-01…TM-14), Korthikanti activations (TM-15…TM-20), LoRA (TM-27),
the CLI contract, and measured rows (TM-26, TM-27, TM-32) within stated tolerances.

Every expected number below is published (validation-cases.md ids) or derived by hand from a published
formula in the test itself; none is read back from aicalc.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from aicalc.catalog import store
from aicalc.cli import main
from aicalc.core import activations as act
from aicalc.core import train_memory as tm
from aicalc.errors import AicalcError

GiB = 2**30
MiB = 2**20


# ---------------------------------------------------------------- TM-01…TM-08: bytes per parameter


@pytest.mark.parametrize(
    "case, precision, optimizer, kw, expected",
    [
        ("TM-01", "fp32", "adamw", {}, 16),
        ("TM-02", "bf16-mixed", "adamw", {}, 16),
        ("TM-02 fp16", "fp16-mixed", "adam", {}, 16),
        ("TM-03", "bf16-mixed", "adamw", {"grad_dtype": "fp32"}, 18),
        ("TM-05", "bf16", "adamw", {}, 8),
        ("TM-06 EleutherAI", "bf16-mixed", "adam8bit", {}, 2 + 2 + 6),
        ("TM-06 HF", "bf16", "adam8bit", {}, 2 + 2 + 2),
        ("TM-07 EleutherAI", "bf16-mixed", "sgd-momentum", {}, 2 + 2 + 8),
        ("TM-07 HF", "fp32", "sgd-momentum", {}, 4 + 4 + 4),
        ("SGD no momentum", "fp32", "sgd", {}, 8),
        ("Lion", "fp32", "lion", {}, 12),
    ],
)
def test_bytes_per_param(case, precision, optimizer, kw, expected):
    assert tm.state_bytes(precision, optimizer, **kw).total == expected, case


def test_tm06_tm07_optimizer_parts():
    # TM-06: 8-bit Adam optimizer = 6 (master 4 + 1 + 1) in mixed precision, 2 (states only) per HF
    sb = tm.state_bytes("bf16-mixed", "adam8bit")
    assert sb.master + sb.optimizer == 6
    assert tm.state_bytes("bf16", "adam8bit").optimizer == 2
    # TM-07: SGD+momentum optimizer = 8 (master 4 + momentum 4) vs 4 (HF, fp32 momentum)
    sb = tm.state_bytes("bf16-mixed", "sgd-momentum")
    assert sb.master + sb.optimizer == 8
    assert tm.state_bytes("fp32", "sgd-momentum").optimizer == 4


def test_tm04_megatron_distributed_optimizer():
    # TM-04: 6 + 12/d bytes per param (bf16 params, fp32 grads unsharded, master+Adam sharded)
    sb = tm.state_bytes("bf16-mixed", "adam", grad_dtype="fp32")
    for d in (1, 2, 8, 64):
        w, g, o = tm.shard_states(1.0, 1.0, sb, 1, d)
        assert float(w + g + o) == pytest.approx(6 + 12 / d)


def test_tm08_qlora_storage():
    # TM-08: NF4 4.5 bits (0.5625 B); with double quantization 4.127 bits (0.516 B)
    from aicalc.core.dtypes import qlora_bytes_per_param

    assert qlora_bytes_per_param("nf4") == 0.5625
    assert qlora_bytes_per_param("nf4-dq") * 8 == pytest.approx(4.127, abs=5e-4)
    assert qlora_bytes_per_param("nf4-dq") == pytest.approx(0.516, abs=5e-4)


# ---------------------------------------------------------------- TM-09: ZeRO paper


@pytest.mark.parametrize(
    "nd, expected",
    [
        (1, (120, 120, 120, 120)),
        (4, (120, 52.5, 41.25, 30)),
        (16, (120, 35.6, 21.6, 7.5)),
        (64, (120, 31.4, 16.6, 1.88)),
        (256, (120, 30.4, 15.4, 0.47)),
        (1024, (120, 30.1, 15.1, 0.12)),
    ],
)
def test_tm09_zero_table(nd, expected):
    got = tm.zero_paper(7.5e9, nd, np.arange(4)) / 1e9
    # the paper rounds to 3 significant figures
    assert got == pytest.approx(np.array(expected), rel=6e-3, abs=5e-3)


def test_tm09_figure1():
    got = tm.zero_paper(7.5e9, 64, np.arange(4)) / 1e9
    assert np.round(got, 1).tolist() == [120.0, 31.4, 16.6, 1.9]


def test_tm09_via_cli_rows():
    # the same figure through the command: a 7.5B-parameter view of the sharding (per-param bytes × Ψ)
    sb = tm.state_bytes("bf16-mixed", "adamw")
    w, g, o = tm.shard_states(7.5e9, 7.5e9, sb, np.array([0, 1, 2, 3]), 64)
    assert np.round((w + g + o) / 1e9, 1).tolist() == [120.0, 31.4, 16.6, 1.9]


# ---------------------------------------------------------------- TM-10…TM-14: DeepSpeed estimators


def test_tm11_zero2_t5_3b():
    for P, want_cpu in ((2_851_598_336, 127.48), (2851e6, 127.45)):  # live count, cold count
        cpu, gpu = tm.deepspeed_zero2_estimate(P, 8, 1, offload_optimizer=True)
        assert (round(cpu / GiB, 2), round(gpu / GiB, 2)) == (want_cpu, 5.31)
        cpu, gpu = tm.deepspeed_zero2_estimate(P, 8, 1, offload_optimizer=False)
        assert (round(cpu / GiB, 2), round(gpu / GiB, 2)) == (want_cpu, 15.93)


@pytest.mark.parametrize(
    "P, LL, expected",
    [
        # live: 2851M params, 32M largest layer (DeepSpeed prints rounded counts; the exact ones are
        # t5-3b's 2,851,598,336 and its 32,899,072-param shared embedding)
        (2_851_598_336, 32_899_072, [(71.71, 0.12), (127.48, 0.12), (63.74, 0.79), (127.48, 0.79),
                                     (1.47, 6.10), (127.48, 6.10)]),
        (2851e6, 32e6, [(71.69, 0.12), (127.45, 0.12), (63.72, 0.78), (127.45, 0.78), (1.43, 6.09),
                        (127.45, 6.09)]),
    ],
)
def test_tm12_zero3_t5_3b(P, LL, expected):
    order = [(True, True, True), (True, True, False), (False, True, True), (False, True, False),
             (False, False, True), (False, False, False)]
    got = []
    for op, oo, zi in order:
        cpu, gpu = tm.deepspeed_zero3_estimate(P, LL, 8, 1, op, oo, zi)
        got.append((round(cpu / GiB, 2), round(gpu / GiB, 2)))
    assert got == expected


def test_tm13_zero3_t5_large_hand_calculation():
    # the docs print MB as ``int(bytes) >> 20`` (§0), i.e. truncated
    P, LL = 737.67e6, 32.90e6
    assert int(4 * LL) >> 20 == 125
    assert int(tm.deepspeed_zero3_estimate(P, LL, 4, 1, False, False)[1]) >> 20 == 3291
    assert int(tm.deepspeed_zero3_estimate(P, LL, 4, 1, True, True)[1]) >> 20 == 125
    assert int(tm.deepspeed_zero3_estimate(P, LL, 4, 1, False, True)[1]) >> 20 == 477


def test_tm14_zero3_t5_small():
    # t5-small: 60,506,624 params; largest layer = shared embedding 32128 × 512 = 16,449,536
    P, LL = 60_506_624, 32128 * 512
    want = [(1.52, 0.06), (1.52, 0.06), (1.35, 0.17), (1.35, 0.17), (0.09, 1.08), (0.34, 1.08)]
    order = [(True, True, True), (True, True, False), (False, True, True), (False, True, False),
             (False, False, True), (False, False, False)]
    got = [tuple(round(x / GiB, 2) for x in tm.deepspeed_zero3_estimate(P, LL, 1, 1, *o)) for o in order]
    assert got == want


# ---------------------------------------------------------------- TM-15…TM-20: Korthikanti / Megatron


def test_tm15_table2_forms():
    s, b, h, a, t = 2048, 2, 4096, 32, 4
    sbh = s * b * h
    assert act.korthikanti_layer(s, b, h, a) == pytest.approx(sbh * (34 + 5 * a * s / h))
    assert act.korthikanti_layer(s, b, h, a, t) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert act.korthikanti_layer(s, b, h, a, t, sp=True) == pytest.approx(sbh * (34 / t + 5 * a * s / (h * t)))
    assert act.korthikanti_layer(s, b, h, a, t, recompute="selective") == pytest.approx(sbh * (10 + 24 / t))
    assert act.korthikanti_layer(s, b, h, a, t, True, "selective") == pytest.approx(sbh * 34 / t)
    assert act.korthikanti_layer(s, b, h, a, t, recompute="full") == pytest.approx(2 * sbh)
    # flash attention removes the 5as²b term
    assert act.korthikanti_layer(s, b, h, a, 1, flash=True) == pytest.approx(sbh * 34)


TM19 = [
    # model, a, h, L, t, p, mbs, interleave m, (TP, TP+SP, TP+sel, TP+SP+sel, full) GiB
    ("22B", 64, 6144, 48, 8, 1, 4, 1, (59.2, 39.6, 29.2, 9.6, 4.5)),
    ("175B", 96, 12288, 96, 8, 8, 1, 3, (66.8, 41.4, 37.8, 12.4, 5.8)),
    ("530B", 128, 20480, 105, 8, 35, 1, 3, (114.0, 66.5, 70.6, 23.1, 10.9)),
    ("1T", 160, 25600, 128, 8, 64, 1, 1, (131.2, 76.6, 81.2, 26.6, 12.5)),
]


@pytest.mark.parametrize("name, a, h, L, t, p, b, m, expected", TM19)
def test_tm19_table3_first_stage(name, a, h, L, t, p, b, m, expected):
    s = 2048
    settings = [(False, "none"), (True, "none"), (False, "selective"), (True, "selective"), (False, "full")]
    got = [act.korthikanti_first_stage(s, b, h, a, L, t, p, sp, rc, virtual_stages=m) / GiB for sp, rc in settings]
    assert np.round(got, 1).tolist() == list(expected), name


def test_tm19_ratios_22b():
    s, a, h, L, t, b = 2048, 64, 6144, 48, 8, 4
    base = act.korthikanti_first_stage(s, b, h, a, L, t)
    ratios = [act.korthikanti_first_stage(s, b, h, a, L, t, 1, sp, rc) / base
              for sp, rc in [(True, "none"), (False, "selective"), (True, "selective"), (False, "full")]]
    assert np.round(np.array(ratios) * 100).tolist() == [67, 49, 16, 8]


def test_tm16_interleave_and_microbatches():
    assert act.interleave_factor(8, 3) == pytest.approx(1 + 7 / 24)
    one = act.korthikanti_first_stage(2048, 1, 4096, 32, 32, 1, 4)
    # with fewer micro-batches than stages only that many are in flight
    two = act.korthikanti_first_stage(2048, 1, 4096, 32, 32, 1, 4, microbatches=2)
    assert two == pytest.approx(one / 2)


def test_tm17_outside_terms():
    s, b, h, v, t = 2048, 1, 6144, 51200, 8
    assert act.korthikanti_outside(s, b, h, v, t, 1) == pytest.approx(s * b * h / t + 4 * s * b * h / t * (1 + v / h))
    assert act.korthikanti_outside(s, b, h, v, t, 4) == pytest.approx(s * b * h * 4 / t)
    # TM-17: at v = 128,256, fp32 logits ≈ 0.5 MB per token per copy
    assert 4 * 128_256 / 1e6 == pytest.approx(0.51, abs=0.01)


def test_tm20_megatron_lm_code():
    s, b, h, L, v, t, p = 2048, 1, 6144, 48, 51200, 8, 1
    sbh = s * b * h
    want = (sbh * 34 * L + 8 * s * b * p + sbh * p + 4 * sbh * (1 + v / h)) / t
    assert act.megatron_lm_activation(s, b, h, L, v, t=t, p=p) == pytest.approx(want)
    want = (sbh * (10 + 24 / t) * L + 8 * s * b * p + sbh * p + (s * b * v / t + sbh) * 2) * 1.05
    assert act.megatron_lm_activation(s, b, h, L, v, t=t, p=p, sp=False, selective=False) == pytest.approx(want)
    # interleaving with p = 4, m = 2
    want = (sbh * 34 * L + 8 * s * b * 4 + sbh * 4) * (1 + 3 / 8) / t
    assert act.megatron_lm_activation(s, b, h, L, v, t=t, p=4, virtual_stages=2) == pytest.approx(want)


def test_tm35_output_deallocation_term():
    # TM-35: output-tensor deallocation saves sbhp = 2.73 GB (2^30 units; 2·s·b·h·p bytes = 2.936e9 B)
    s, b, h, p = 2048, 1, 20480, 35
    assert act.pipeline_outputs(s, b, h, p) == pytest.approx(2.936e9, rel=1e-3)
    assert round(act.pipeline_outputs(s, b, h, p) / GiB, 2) == 2.73


# ---------------------------------------------------------------- LoRA (TM-27 trainable count)


def test_tm27_lora_trainable_params():
    arch = store.resolve_model("llama-3.2-3b").arch
    assert tm.lora_params(arch, 32, tm.lora_targets("q_proj,v_proj")) == 9_175_040


def test_tm26_llama32_3b_param_count():
    assert tm.split_params(store.resolve_model("llama-3.2-3b").arch).total == 3_212_749_824


# ---------------------------------------------------------------- CLI contract


def _json(capsys, *argv):
    code = main(["train-mem", *argv, "--json"])
    out = json.loads(capsys.readouterr().out)
    return code, out


CONTRACT_KEYS = {"params", "trainable_params", "weights_bytes", "gradients_bytes", "optimizer_bytes",
                 "activations_bytes", "peak_bytes"}


def test_contract_keys_and_sweep(capsys):
    code, out = _json(capsys, "llama-3.1-8b", "--batch", "1,2,4", "--seq", "1Ki:4Ki:x2")
    assert code == 0 and out["command"] == "train-mem"
    assert len(out["rows"]) == 9
    assert CONTRACT_KEYS <= set(out["rows"][0])
    # activations grow with batch (hf: linear in B at fixed S)
    r = {(x["batch"], x["seq"]): x["activations_bytes"] for x in out["rows"]}
    assert r[(4, 1024)] == pytest.approx(4 * r[(1, 1024)], rel=1e-4)  # RoPE tables do not scale with B


def test_states_bytes_through_cli(capsys):
    # TM-01/TM-02/TM-05 per param through the command; 70B, one device
    n = 70_553_706_496  # llama-3.1-70b exact count (tests/data/validation/params.json)
    for precision, per in (("fp32", 16), ("bf16-mixed", 16), ("bf16", 8)):
        code, out = _json(capsys, "llama-3.1-70b", "--precision", precision)
        r = out["rows"][0]
        assert r["params"] == n
        assert r["weights_bytes"] + r["gradients_bytes"] + r["optimizer_bytes"] == pytest.approx(per * n)


def test_zero3_dp_cli(capsys):
    code, out = _json(capsys, "llama-3.1-70b", "--zero", "0,1,2,3", "--dp", "64")
    n = out["rows"][0]["params"]
    got = [(r["weights_bytes"] + r["gradients_bytes"] + r["optimizer_bytes"]) / n for r in out["rows"]]
    assert got == pytest.approx([16, 4 + 12 / 64, 2 + 14 / 64, 16 / 64])


def test_budget_exit_1(capsys):
    code = main(["train-mem", "llama-3.1-70b", "--budget", "80GiB"])
    err = capsys.readouterr().err
    assert code == 1 and "row(s) 1" in err


def test_chip_fit_exit_codes(capsys):
    assert main(["train-mem", "gpt2", "--chip", "h100-sxm"]) == 0
    assert main(["train-mem", "llama-3.1-70b", "--chip", "h100-sxm"]) == 1


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--tp", "3"], "does not divide"),
        (["--pp", "40"], "--pp 40 leaves a pipeline stage empty"),
        (["--precision", "fp8"], "--precision"),
        (["--zero", "4"], "--zero"),
        (["--recompute", "selective"], "Megatron"),
        (["--offload", "params"], "--zero 3"),
        (["--quant", "nf4"], "--lora-rank"),
        (["--ep", "2"], "no experts"),
        (["--sp", "--tp", "2"], "--framework megatron"),
    ],
)
def test_bad_input_exit_2(capsys, argv, needle):
    code = main(["train-mem", "llama-3.1-8b", *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_megatron_framework_through_cli(capsys):
    # 22B-shaped config? use gpt3-175b: h 12288, a 96, L 96, TP 8, PP 8, mbs 1, interleave 3 → TM-19 66.8 GiB
    code, out = _json(capsys, "gpt3-175b", "--framework", "megatron", "--attention", "eager", "--tp", "8",
                      "--pp", "8", "--virtual-stages", "3", "--seq", "2048")
    r = out["rows"][0]
    layers_only = r["activations_bytes"] - act.korthikanti_outside(2048, 1, 12288, 50257, 8, 8)
    assert round(layers_only / GiB, 1) == 66.8


def test_lora_states(capsys):
    code, out = _json(capsys, "llama-3.2-3b", "--precision", "bf16", "--lora-rank", "32")
    r = out["rows"][0]
    assert r["trainable_params"] == 9_175_040
    # frozen base in bf16 (2 B) + fp32 adapters (4 B); adapter grads 4 B; AdamW fp32 states 8 B
    assert r["weights_bytes"] == pytest.approx(3_212_749_824 * 2 + 9_175_040 * 4)
    assert r["gradients_bytes"] == pytest.approx(9_175_040 * 4)
    assert r["optimizer_bytes"] == pytest.approx(9_175_040 * 8)


def test_qlora_weights(capsys):
    arch = store.resolve_model("llama-3.1-8b").arch
    split = tm.split_params(arch)
    code, out = _json(capsys, "llama-3.1-8b", "--precision", "bf16", "--lora-rank", "8", "--quant", "nf4")
    r = out["rows"][0]
    # decoder linears at 0.5625 B (TM-08), embeddings/lm_head/norms at 2 B
    want = split.linear * 0.5625 + (split.total - split.linear) * 2 + r["trainable_params"] * 4
    assert r["weights_bytes"] == pytest.approx(want)
    # linear weights of Llama-3.1-8B: 32 layers × (4096·(4096+1024+1024+4096) + 3·4096·14336)
    assert split.linear == 32 * (4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336)


def test_search(capsys):
    code, out = _json(capsys, "llama-3.1-70b", "--search", "--chip", "h100-sxm", "--chips", "64",
                      "--batch", "8", "--seq", "4096")
    assert code == 0 and out["rows"]
    # most headroom first: the reserved peak is what is judged (the overhead differs by layout: NCCL's buffers per
    # parallel group, so the allocated peak alone need not be in order)
    heads = [r["peak_reserved_bytes"] for r in out["rows"]]
    assert heads == sorted(heads)
    assert all(r["peak_reserved_bytes"] <= 79.18 * GiB for r in out["rows"])  # what CUDA gives of an 80 GB H100
    assert all(r["tp"] * r["pp"] * r["dp"] == 64 for r in out["rows"])
    code, out = _json(capsys, "llama-3.1-405b", "--search", "--chip", "rtx-4090", "--chips", "2")
    # nothing fits: the closest layouts, each with what it lacks (peak - memory), smallest first
    assert code == 1 and out["rows"] and not any(r["fits"] for r in out["rows"])
    short = [r["shortfall_bytes"] for r in out["rows"]]
    assert short == sorted(short) and all(s > 0 for s in short)
    # RTX 4090: 23.68 GiB of its 24 for CUDA (PyTorch's out-of-memory message, the preset's usable_memory)
    assert all(r["shortfall_bytes"] == pytest.approx(r["peak_reserved_bytes"] - 23.68 * GiB, abs=1.0)
               for r in out["rows"])


def test_vectorized_core_shapes():
    # one call evaluates a million configurations (speed is measured by benchmarks/bench_train_mem.py)
    from aicalc.core.train_peak import TrainSetup, evaluate

    arch = store.resolve_model("llama-3.1-70b").arch
    n = 1_000_000
    rng = np.random.default_rng(0)
    g = {"batch": rng.integers(1, 16, n).astype(float), "seq": np.full(n, 4096.0),
         "dp": np.full(n, 8.0), "tp": np.full(n, 8.0), "pp": np.full(n, 4.0), "zero": rng.integers(0, 4, n).astype(float)}
    cols = evaluate(arch, TrainSetup(), g)
    assert cols["peak_bytes"].shape == (n,)
    assert np.all(np.isfinite(cols["peak_bytes"]))


def test_errors_are_aicalc_errors():
    with pytest.raises(AicalcError):
        tm.state_bytes("int8")
    with pytest.raises(AicalcError):
        tm.lora_targets("q,mlp")


def test_tm20_most_loaded_shard_params():
    # Megatron's (P_block/p + embedding)/t for Llama-3.1-70B at t 8, p 4, by hand: per layer
    # attention 8192·(8192 + 2·1024) + 8192·8192, MLP 3·8192·28672, two RMSNorms 2·8192; the last stage
    # adds the final norm and the 128256 × 8192 lm_head.
    per_layer = 8192 * (8192 + 2 * 1024) + 8192 * 8192 + 3 * 8192 * 28672 + 2 * 8192
    want = (80 * per_layer / 4 + 128256 * 8192 + 8192) / 8
    split = tm.split_params(store.resolve_model("llama-3.1-70b").arch)
    assert float(tm.params_per_device(split, 8, 4)) == want
    assert float(tm.params_per_device(split, 1, 1)) == 70_553_706_496


# ---------------------------------------------------------------- context parallelism (--cp)


def test_cp_megatron_layers_scale_with_local_sequence(capsys):
    # Korthikanti TP + SP + selective: sbh·34/t per layer with s → s/cp; gpt3-175b (h 12288, 96 layers), t 8,
    # p 8 (so outside the layers only the embedding-dropout mask s·b·h·p/t), s 8192, cp 4 → s/cp = 2048.
    code, out = _json(capsys, "gpt3-175b", "--framework", "megatron", "--tp", "8", "--pp", "8", "--sp",
                      "--recompute", "selective", "--seq", "8192", "--cp", "4")
    r = out["rows"][0]
    layers = 96 * 2048 * 12288 * 34 / 8  # 10,267,656,192
    embedding_mask = 2048 * 12288 * 8 / 8  # 25,165,824
    assert code == 0 and r["cp"] == 4
    assert r["activations_bytes"] == pytest.approx(layers + embedding_mask, rel=1e-12)


def test_cp_states_shard_over_dp_times_cp(capsys):
    # Megatron distributed optimizer over the dp×cp group: TM-04's 6 + 12/d with d = dp·cp = 4·2 = 8 → 7.5 B/param
    code, out = _json(capsys, "llama-3.1-8b", "--framework", "megatron", "--zero", "1", "--dp", "4", "--cp", "2")
    r = out["rows"][0]
    assert (r["weights_bytes"] + r["gradients_bytes"] + r["optimizer_bytes"]) / r["params"] == pytest.approx(7.5)
    # FSDP full shard over dp·cp = 8: 16 B/param / 8 = 2; with ZeRO 0 the CP ranks replicate everything (16)
    code, out = _json(capsys, "llama-3.1-8b", "--zero", "0,3", "--dp", "4", "--cp", "2")
    got = [(x["weights_bytes"] + x["gradients_bytes"] + x["optimizer_bytes"]) / x["params"] for x in out["rows"]]
    assert got == pytest.approx([16, 2])


def test_cp_hf_activations_equal_the_local_sequence(capsys):
    # each CP rank keeps the activations of S/cp tokens: cp 4 at 8192 tokens = cp 1 at 2048 tokens
    _, a = _json(capsys, "llama-3.1-8b", "--seq", "8192", "--cp", "4")
    _, b = _json(capsys, "llama-3.1-8b", "--seq", "2048")
    assert a["rows"][0]["activations_bytes"] == pytest.approx(b["rows"][0]["activations_bytes"], rel=1e-12)


def test_cp_kv_buffers_by_hand():
    # Llama-3.1-8B: 8 kv heads × 128; one K+V chunk = 2·a·B·(S/cp)·K·d. Forward keeps all cp chunks, backward 4.
    arch = store.resolve_model("llama-3.1-8b").arch
    assert float(tm.cp_kv_buffers(1, 32768, arch, 2, 1, 8)) == 8 * (2 * 2 * 1 * 4096 * 1024)  # 128 MiB
    assert float(tm.cp_kv_buffers(1, 32768, arch, 2, 1, 2)) == 4 * (2 * 2 * 1 * 16384 * 1024)  # 256 MiB
    assert float(tm.cp_kv_buffers(1, 32768, arch, 2, 1, 1)) == 0.0


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--cp", "3", "--seq", "2048"], "does not divide the sequence"),
        (["--cp", "2", "--attention", "eager"], "--attention"),
        (["--cp", "0"], "--cp"),
    ],
)
def test_cp_bad_layouts_exit_2(capsys, argv, needle):
    code = main(["train-mem", "llama-3.1-8b", *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert needle in err and "Traceback" not in err


def test_cp_in_search(capsys):
    code, out = _json(capsys, "llama-3.1-70b", "--search", "--chip", "h100-sxm", "--chips", "64", "--batch", "1",
                      "--seq", "131072", "--cp", "1,2,4,8")
    assert code == 0 and out["rows"]
    assert all(r["tp"] * r["pp"] * r["cp"] * r["dp"] == 64 for r in out["rows"])
    assert any(r["cp"] > 1 for r in out["rows"])


# ---------------------------------------------------------------- loss, optimizer-in-backward, adapter dtype


def test_chunked_loss_saves_logits_in_activation_dtype():
    # full: fp32 log-softmax 4·BS·V; chunked (compiled): the a-byte logits, a·BS·V → (4 − 2)·4096·128256 less
    arch = store.resolve_model("llama-3.1-8b").arch
    full = act.hf_outside(2, 2048, arch, 2)
    chunked = act.hf_outside(2, 2048, arch, 2, loss="chunked")
    assert float(full - chunked) == 2 * 4096 * 128256
    # transient: one of 8 chunks upcast, (8 + a)·BS·V/8, instead of max(a + 4, 8)·BS·V
    loss_c = tm.transient_bytes(2, 2048, arch, 2, loss_kind="chunked")[0]
    loss_f = tm.transient_bytes(2, 2048, arch, 2)[0]
    assert float(loss_c) == 10 * 4096 * 128256 / 8
    assert float(loss_f) == 8 * 4096 * 128256


def test_optimizer_in_backward_keeps_one_gradient(capsys):
    # Llama-3.1-8B's largest tensor is the 128256 × 4096 embedding (= lm_head); bf16 grad → 2 B each
    code, out = _json(capsys, "llama-3.1-8b", "--precision", "bf16", "--optimizer-in-backward")
    assert out["rows"][0]["gradients_bytes"] == 128256 * 4096 * 2
    # LoRA r 8: the largest adapter matrix is r × F = 8 × 14336
    assert tm.largest_param_tensor(store.resolve_model("llama-3.1-8b").arch, 8) == 8 * 14336
    code = main(["train-mem", "llama-3.1-8b", "--optimizer-in-backward", "--microbatches", "4"])
    assert code == 2 and "--microbatches" in capsys.readouterr().err


def test_lora_adapters_in_model_dtype(capsys):
    # torchtune keeps adapters in bf16: 2 B weights, 2 B grads, torch AdamW states in bf16 (2 + 2)
    code, out = _json(capsys, "llama-3.2-3b", "--precision", "bf16", "--lora-rank", "32", "--lora-dtype", "bf16")
    r = out["rows"][0]
    assert r["weights_bytes"] == pytest.approx(3_212_749_824 * 2 + 9_175_040 * 2)
    assert r["gradients_bytes"] == pytest.approx(9_175_040 * 2)
    assert r["optimizer_bytes"] == pytest.approx(9_175_040 * 4)


def test_loss_option_errors(capsys):
    assert main(["train-mem", "llama-3.1-8b", "--loss", "fused"]) == 2
    assert main(["train-mem", "llama-3.1-8b", "--framework", "megatron", "--loss", "chunked"]) == 2
    assert main(["train-mem", "llama-3.1-8b", "--lora-rank", "8", "--lora-dtype", "int8"]) == 2
    capsys.readouterr()


def test_hf_pipeline_peak_is_the_busier_of_first_and_last_stage(cli):
    """1F1B with 2 stages, Llama-3.1-8B (V = 128,256), full recompute under torch AMP (the default bf16-mixed):
    the last stage keeps 16 layer inputs (fp32 under AMP, 4·B·S·H each: the fp32 embedding's output and residual
    adds) plus the fp32 loss (4·B·S·V ≈ 2.1 GB) and outranks the first stage (2 in-flight micro-batches × 16 layer
    inputs ≈ 2.1 GB). So stage 2 holds everything of the one-stage run except 16 layer inputs and the embedding's
    int64 token ids (8·B·S)."""
    def act(pp):
        return cli("train-mem", "llama-3.1-8b", "--batch", "1", "--seq", "4096", "--recompute", "full", "--pp", pp,
                   "--json").json["rows"][0]["activations_bytes"]

    B, S, H = 1, 4096, 4096
    assert act(1) - act(2) == 16 * 4 * B * S * H + 8 * B * S


def test_search_reports_progress_in_slices():
    from aicalc.commands.train_mem import run
    from aicalc.core.layout_search import SLICE as SEARCH_STEP

    calls = []
    seqs = ",".join(str(s) for s in range(1024, 1024 * 41, 1024))  # enough layouts for several slices
    res = run("llama-3.1-70b", chip="h100-sxm", search=True, chips=4096, seq=seqs, batch="256",
              progress=lambda done, total: calls.append((done, total)))
    assert res.rows and len(calls) > 1
    assert all(b[0] > a[0] for a, b in zip(calls, calls[1:], strict=False))
    assert calls[-1][0] == calls[-1][1] and calls[0][0] <= SEARCH_STEP
    assert "progress" not in res.inputs


def test_progress_bar_only_on_a_terminal_for_long_work():
    import io

    from aicalc import cli
    from aicalc.env import Env

    err = io.StringIO()
    with cli.progress_bar("x", min_total=10, env=Env(io.StringIO(), err, False, stderr_isatty=True)) as p:
        p(5, 10)
        p(10, 10)
    assert err.getvalue()  # drawn on a terminal
    err2 = io.StringIO()
    with cli.progress_bar("x", min_total=10, env=Env(io.StringIO(), err2, False, stderr_isatty=False)) as p:
        p(10, 10)
    assert err2.getvalue() == ""  # never into a pipe or a log


# ---------------------------------------------------------------- hf selective activation checkpointing (issue 13)


def test_hf_selective_op_through_cli(cli):
    """torchtitan's op-level SAC (``selective_ac_option = "op"``) on Llama-3.1-8B (H 4096, A 32, K 8, d 128,
    F 14336, V 128,256, 32 layers), bf16, sdpa, B 1, S 4096, derived by hand from torchtitan's policy: each layer
    keeps its input and the 1st, 3rd, 5th, 7th of its seven ``aten.mm`` outputs (q, v, gate, down; k, o, up are
    recomputed) plus the SDPA output and fp32 log-sum-exp; outside the layers the token ids, the RoPE tables and
    position ids the checkpoints hold, the final RMSNorm, the lm_head input and the fp32 log-softmax."""
    B, S, H, A, K, d, F, V, L, a = 1, 4096, 4096, 32, 8, 128, 14336, 128256, 32, 2
    layer = a * B * S * (H + A * d + K * d + F + H) + a * B * S * A * d + 4 * B * A * S
    outside = (8 * B * S + 2 * a * S * d + 8 * S + (4 * B * S * H + 2 * a * B * S * H + 4 * B * S)
               + 4 * B * S * V + 8 * B * (S + 1) + 4)
    r = cli("train-mem", "llama-3.1-8b", "--precision", "bf16", "--seq", S, "--recompute", "selective-op",
            "--json").json["rows"][0]
    assert r["recompute"] == "selective-op"
    assert r["activations_bytes"] == pytest.approx(L * layer + outside, rel=1e-9)
    # the recompute workspace: one rebuilt layer plus its gradients, as with full recompute
    full = cli("train-mem", "llama-3.1-8b", "--precision", "bf16", "--seq", S, "--recompute", "full",
               "--json").json["rows"][0]
    assert r["transient_bytes"] == pytest.approx(full["transient_bytes"])
    assert full["activations_bytes"] < r["activations_bytes"]


def test_hf_every_n_layers_through_cli(cli):
    """``--recompute every-2`` (torchtitan ``selective_ac_option = "2"``): 16 of Llama-3.1-8B's 32 layers keep
    only their input a·BSH, the other 16 everything (hf sdpa layer, by hand: two RMSNorms 4BSH + 2aBSH + 4BS
    each, q and o a·BS·Ad, k and v a·BS·Kd, fp32 LSE 4·B·A·S, SwiGLU 4·a·BSF); the checkpoints also hold the
    int64 position ids (8S). ``every-4`` checkpoints 8 layers, ``every-1`` is full recompute, ``every-64``
    (more than the layers) none."""
    B, S, H, A, K, d, F, a = 1, 4096, 4096, 32, 8, 128, 14336, 2
    hf_layer = (2 * (4 * B * S * H + 2 * a * B * S * H + 4 * B * S) + a * B * S * (2 * A * d + 2 * K * d)
                + 4 * B * A * S + 4 * a * B * S * F)

    def act(rc):
        r = cli("train-mem", "llama-3.1-8b", "--precision", "bf16", "--seq", S, "--recompute", rc, "--json")
        assert r.code == 0, r.err
        return r.json["rows"][0]["activations_bytes"]

    none = act("none")
    assert none - act("every-2") == pytest.approx(16 * (hf_layer - a * B * S * H) - 8 * S, rel=1e-9)
    assert none - act("every-4") == pytest.approx(8 * (hf_layer - a * B * S * H) - 8 * S, rel=1e-9)
    assert act("every-1") == act("full")
    assert act("every-64") == none


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--recompute", "selective"], "selective-op"),
        (["--recompute", "every-0"], "every-N"),
        (["--recompute", "everytwo"], "every-N"),
        (["--recompute", "every-N"], "N ≥ 1"),
        (["--recompute", "selective-op", "--framework", "megatron"], "--framework megatron"),
        (["--recompute", "every-2", "--framework", "megatron"], "--framework megatron"),
        (["--recompute", "selective-op", "--lora-rank", "8"], "--lora-rank"),
    ],
)
def test_hf_selective_bad_input_exit_2(cli, argv, needle):
    r = cli("train-mem", "llama-3.1-8b", *argv)
    assert r.code == 2, r.err
    assert needle in r.err and "Traceback" not in r.err


def test_search_tries_the_selective_modes():
    import aicalc

    res = aicalc.search_layouts("llama-3.1-8b", "h100-sxm", 8, seq=4096, max_batch=4, top=10_000)
    assert set(res.columns["recompute"]) == {"none", "full", "selective-op", "every-2"}
    res = aicalc.search_layouts("llama-3.1-8b", "h100-sxm", 8, seq=4096, max_batch=4, top=10_000, lora_rank=8)
    assert set(res.columns["recompute"]) == {"none", "full", "every-2"}
    res = aicalc.search_layouts("llama-3.1-8b", "h100-sxm", 8, seq=4096, max_batch=4, top=10_000, framework="megatron")
    assert set(res.columns["recompute"]) == {"none", "full", "selective"}


def test_fp8_training_memory_transformer_engine(cli):
    """FP8 GEMMs through TransformerEngine (Megatron): the states are bf16-mixed's, each Linear caches an FP8 copy
    of its weight and of its transpose (2 B per linear weight), and saves its input in FP8: per layer with SP
    27·sbh/t instead of 34·sbh/t (Korthikanti's 34 = 10 LayerNorm inputs, dropout masks, Q, K, V + 24 linear
    inputs and MLP tensors, of which QKV input 2, proj input 2, FC1 input 2, FC2 input 8 halve)."""
    args = ("llama-2-70b", "--framework", "megatron", "--tp", "8", "--pp", "1", "--sp", "--attention", "flash",
            "--seq", "4096", "--batch", "1", "--json")
    bf = cli("train-mem", *args, "--precision", "bf16-mixed").json["rows"][0]
    f8 = cli("train-mem", *args, "--precision", "fp8-mixed").json["rows"][0]
    from aicalc.api.catalog import load_model
    from aicalc.core.train_memory import split_params

    arch = load_model("llama-2-70b").arch
    linear = split_params(arch).linear
    assert f8["weights_bytes"] - bf["weights_bytes"] == pytest.approx(2.0 * linear / 8)
    assert (f8["gradients_bytes"], f8["optimizer_bytes"]) == (bf["gradients_bytes"], bf["optimizer_bytes"])
    sbh = 4096 * 1 * arch.hidden
    per_layer = (bf["activations_bytes"] - f8["activations_bytes"]) / arch.layers
    assert per_layer == pytest.approx(7 * sbh / 8, rel=1e-9)


def test_chips_without_search_sets_the_data_parallel_size(cli):
    """--chips was read only by --search and silently ignored otherwise (dp stayed 1)."""
    a = cli("train-mem", "llama-3.1-8b", "--chips", "8", "--tp", "2", "--zero", "3", "--json").json["rows"][0]
    b = cli("train-mem", "llama-3.1-8b", "--dp", "4", "--tp", "2", "--zero", "3", "--json").json["rows"][0]
    assert a["dp"] == 4 and a["peak_bytes"] == b["peak_bytes"]
    assert cli("train-mem", "llama-3.1-8b", "--chips", "6", "--tp", "4").code == 2
    assert cli("train-mem", "llama-3.1-8b", "--chips", "8", "--dp", "2").code == 2


def test_a_configuration_that_does_not_fit_says_what_it_gives_up_to_fit(cli):
    """The guide's question, "does Llama-3.1-70B fine-tune on 8 H100s with ZeRO-3?": no (AdamW's 16 bytes a
    parameter alone are 141 GB a device). The warning names the least each way gives up to fit, and train-mem says
    so of each: the full-training steps taken one at a time (recompute, then the optimizer offloaded) do not fit,
    the step named does; the adapters' way (LoRA at rank 16) does not fit without recompute and does with it."""
    base = ("train-mem", "llama-3.1-70b", "--chip", "h100-sxm", "--dp", "8", "--zero", "3")

    def fits(*flags):
        return cli(*base, *flags, "--json").json["rows"][0]["fits"]

    r = cli(*base, "--json")
    assert r.code == 1 and not r.json["rows"][0]["fits"]
    line = r.json["warnings"][-1]
    assert line.startswith("it fits with --recompute full --offload params (")
    assert "fine-tuning adapters instead, with --lora-rank 16 --recompute full (" in line
    assert not fits("--recompute", "full") and not fits("--recompute", "full", "--offload", "optimizer")
    assert fits("--recompute", "full", "--offload", "params")
    assert not fits("--lora-rank", "16") and fits("--lora-rank", "16", "--recompute", "full")
    # the reserved peaks it quotes are train-mem's own
    quoted = cli(*base, "--recompute", "full", "--offload", "params", "--json").json["rows"][0]["peak_reserved_bytes"]
    from aicalc.units import fmt_bytes

    assert f"--offload params ({fmt_bytes(quoted)} reserved)" in line


def test_a_unified_memory_chip_is_offered_no_offload(cli):
    """On an Apple SoC the host's memory is the chip's: CPU offload moves nothing off it. Llama-3.1-70B on one M4 Max
    (128 GiB): AdamW's 16 bytes a parameter are 1.1 TB, so full training fits with no step of its ladder once
    offload is not one (recompute, and ZeRO-3 with one device to shard over, leave the states whole); the adapters'
    way is named and fits; asking for an offload is refused in one line."""
    base = ("train-mem", "llama-3.1-70b", "--chip", "apple-m4-max")
    r = cli(*base, "--json")
    assert r.code == 1
    line = r.json["warnings"][-1]
    assert "offload" not in line
    assert line.startswith("it fits with --lora-rank 16 --recompute full --quant nf4 (")
    assert cli(*base, "--lora-rank", "16", "--recompute", "full", "--quant", "nf4", "--json").json["rows"][0]["fits"]
    # the same ladder on an 80 GB H100 host does offer it (the states can live in the host's own memory)
    assert "--offload" in cli("train-mem", "llama-3.1-70b", "--chip", "h100-sxm", "--dp", "8", "--zero", "3",
                              "--json").json["warnings"][-1]
    for where in ("optimizer", "params"):
        bad = cli(*base, "--zero", "3", "--offload", where)
        assert bad.code == 2 and bad.err.count("\n") == 1 and "unified" in bad.err and "Traceback" not in bad.err
    none = cli("train-mem", "llama-3.1-405b", "--chip", "apple-neural-engine", "--json").json["warnings"][-1]
    assert none.startswith("on these devices it fits with none of recompute, ZeRO-3, LoRA or QLoRA")


def test_no_hint_where_it_fits_and_a_plain_one_where_nothing_does(cli):
    ok = cli("train-mem", "llama-3.1-8b", "--chip", "h100-sxm", "--lora-rank", "16", "--json")
    assert ok.code == 0 and not ok.json["warnings"]
    # 405B on one 24 GB card: not even every state in host memory leaves room for a layer at work
    big = cli("train-mem", "llama-3.1-405b", "--chip", "rtx-4090", "--json")
    assert big.json["warnings"][-1].startswith("on these devices it fits with none of")
    assert not cli("train-mem", "llama-3.1-405b", "--chip", "rtx-4090", "--recompute", "full", "--zero", "3",
                   "--offload", "params", "--json").json["rows"][0]["fits"]
    # a sweep of several rows gets the plain warning only
    sweep = cli("train-mem", "llama-3.1-8b", "--chip", "h100-sxm", "--batch", "4,8", "--seq", "4096", "--json")
    assert len(sweep.json["warnings"]) == 1
