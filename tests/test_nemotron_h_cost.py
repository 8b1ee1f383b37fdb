"""Nemotron-H / Nemotron 3 serving and training cost terms (``aicalc/core/mamba.py``): what a decode step moves
for the Mamba state and the attention blocks' K/V (against transformers' cache, ``validation/record_kv.py``), model
FLOPs per token against Megatron-Bridge's published rates, and the activation accounting of one-mixer blocks
against Korthikanti et al. 2022's layer."""

import json

import pytest

from aicalc.catalog.hf_config import arch_from_config

from conftest import DATA, ROOT

KV = [r for r in json.loads((DATA / "validation" / "kv_cache.json").read_text())["records"]
      if r["kind"] == "config" and r["name"].startswith("nemotron-3-")]


def _cases():
    import yaml

    rows = yaml.safe_load((ROOT / "validation" / "cases" / "moe-training.yaml").read_text())
    return [r for r in rows if r.get("model") == "nemotron-3-nano-30b-a3b"]


def test_model_flops_are_megatron_bridges():
    """aicalc's model FLOPs per token of Nemotron 3 Nano equal what Megatron-Bridge's published rates imply
    (Model TFLOP/s/GPU ÷ tokens/s/GPU), on every published row whose token rate is not rounded to a power of two:
    the two MFU / TFLOP/s figures are comparable."""
    from aicalc.api.catalog import load_model
    from aicalc.core.forward import shape_of
    from aicalc.core.train_time import flops_per_token

    s = shape_of(load_model("nemotron-3-nano-30b-a3b").arch)
    precise = [r for r in _cases() if r["measured"] % 256]
    assert len(precise) >= 4
    for r in precise:
        model, _ = flops_per_token(s, r["seq"], "none", "causal")
        implied = r["published_model_tflops_per_chip"] * 1e12 / r["measured"]
        assert model == pytest.approx(implied, rel=1e-3), r["id"]  # the TFLOP/s figure has 3 digits


def test_decode_reads_and_writes_the_state_prefill_writes_it():
    """The SSD scan op of a decode step moves the whole per-sequence state twice (read, write) and a prefill once:
    the state transformers' cache holds (record_kv: conv + SSM bytes), under the hf engine's fp32 SSM state."""
    from aicalc.core.forward import formats, forward_ops, shape_of

    rec = next(r for r in KV if r["name"] == "nemotron-3-nano-30b-a3b" and r["case"] == "b2-s300")
    state = rec["state_bytes"] / rec["batch"]  # per sequence, all Mamba layers (conv + SSM)
    arch = arch_from_config(rec["config"])
    s = shape_of(arch)
    m = arch.mamba
    io = (m.conv_dim + m.heads + m.inner) * 2.0 * arch.mamba_layers  # x·B·C, dt in and y out, per token, 16-bit

    def scan(T, P):
        return next(o for o in forward_ops(s, formats(), 1.0, T, P, 1.0) if o.name == "ssd_scan")

    assert float(scan(1.0, 300.0).bytes) == pytest.approx(2.0 * state + io)
    assert float(scan(300.0, 0.0).bytes) == pytest.approx(state + 300.0 * io)


def test_no_kv_reads_for_blocks_without_attention():
    """Decode's attention core reads the cache of the 6 attention blocks only: K/V bytes per token equal the
    transformers cache's growth per decoded token (record_kv, one decode step)."""
    from aicalc.core.forward import formats, forward_ops, shape_of

    rec = next(r for r in KV if r["name"] == "nemotron-3-nano-30b-a3b" and r["case"] == "b2-s300")
    grown = (rec["after_decode_1"]["kv_bytes"] - rec["kv_bytes"]) / rec["batch"]  # one token, every attention layer
    s = shape_of(arch_from_config(rec["config"]))
    ops = {o.name: o for o in forward_ops(s, formats(), 1.0, 1.0, 300.0, 1.0)}
    kv_io = 2.0 * float(ops["attn_score"].bytes) - 1.0 * 32 * 256 * 2.0 * 6  # less q read / output written
    assert kv_io == pytest.approx(302.0 * grown)  # the 301 tokens attended read, the new one's K/V written


def test_a_plain_pair_of_blocks_is_korthikantis_layer():
    """Nemotron-H blocks "*" then "-" with MHA, d = H/A and F = 4h are Korthikanti et al.'s transformer layer split
    in two (attention 11sbh + norm, MLP 19sbh + norm = 34sbh per pair, Table 2): the block accounting gives half a
    Korthikanti layer per block, with and without sequence parallelism."""
    from aicalc.core.mamba import megatron_layer_ratio

    H, A = 512, 8
    arch = arch_from_config({"model_type": "nemotron_h", "hidden_size": H, "num_attention_heads": A,
                             "num_key_value_heads": A, "head_dim": H // A, "intermediate_size": 4 * H,
                             "hybrid_override_pattern": "*-" * 4, "vocab_size": 1024})
    for sp, t in ((False, 1), (True, 4), (False, 4)):
        assert float(megatron_layer_ratio(arch, 2048, t, sp, "selective", True)) == pytest.approx(0.5)
    assert float(megatron_layer_ratio(arch, 2048, 1, False, "full", True)) == 1.0


def test_training_rows_are_held_out_and_scored():
    cases = _cases()
    assert len(cases) == 11 and {r["split"] for r in cases} == {"held-out"}
    calib = (ROOT / "validation" / "cases" / "calibration-training.yaml").read_text()
    assert not any(r["id"] in calib for r in cases)


def test_serve_holds_one_state_per_running_sequence(cli):
    """serve's cache per device grows per running sequence by its K/V (whole 16-token blocks of the 6 attention
    blocks' bytes per token, as transformers' cache grows) plus one Mamba state (transformers' conv + SSM state of a
    sequence): 64 more sequences, 64 states."""
    rec = next(r for r in KV if r["name"] == "nemotron-3-nano-30b-a3b" and r["case"] == "b2-s300")
    state = rec["state_bytes"] / rec["batch"]
    per_token = rec["kv_bytes"] / (rec["batch"] * rec["seq"])
    rows = cli("serve", "nemotron-3-nano-30b-a3b", "--chip", "h100-sxm", "--concurrency", "1,65", "--prompt", "1000",
               "--gen", "1000", "--json").json["rows"]
    per_seq = (rows[1]["kv_cache_bytes_per_device"] - rows[0]["kv_cache_bytes_per_device"]) / 64
    tokens = (per_seq - state) / per_token
    assert tokens == round(tokens) and round(tokens) % 16 == 0 and 1000 <= tokens <= 2000
    assert rows[0]["kv_cache_bytes_per_device"] == pytest.approx(state + tokens * per_token)
