"""Roofline arithmetic against hand-derived values, plus CLI behaviour of ``aicalc roofline``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from aicalc.api.roofline import cost_setup
from aicalc.catalog.store import resolve_chip, resolve_model
from aicalc.cli import main
from aicalc.core import forward as fw
from aicalc.core import latency as lt
from aicalc.core.efficiency import IDEAL, Efficiency, gemm_efficiency
from aicalc.core.params import count_params
from aicalc.errors import AicalcError


def setup(model, chip, dtype, kv_dtype, **kw):
    c = cost_setup(model, chip, dtype, kv_dtype, **kw)
    return c.model, c.chip, c.shape, c.roofs, c.formats, c.compute_dtype, list(c.warnings)


def _7b():
    return setup("llama-2-7b", "a100-80gb", "bf16", "bf16")


def test_ridge_points_dense():
    h100, _ = resolve_chip("h100-sxm")
    assert h100.peak_flop_per_s("bf16") / h100.memory_bandwidth_bytes_per_s == pytest.approx(295.3, abs=0.1)
    a100, _ = resolve_chip("a100-80gb")
    assert a100.peak_flop_per_s("bf16") / a100.memory_bandwidth_bytes_per_s == pytest.approx(153.0, abs=0.1)


def test_decode_batch1_llama2_7b_bytes_and_time():
    """Decode at batch 1 reads every weight but the embedding table once (norms included): bytes ≈ 2·(N − V·H)
    + a row of the table + KV; time = bytes / 2.039e12."""
    spec, chip, s, roofs, fm, cdt, _ = _7b()
    n = count_params(spec.arch)
    a = spec.arch
    ctx = 1000.0
    ph = lt.phase(s, roofs, fm, IDEAL, 1.0, 1.0, ctx, 1.0)
    weights = 2.0 * (n.total - a.vocab * a.hidden)
    kv = 2 * a.layers * a.kv_heads * a.head_dim * 2 * (ctx + 1)
    assert float(ph.bytes) == pytest.approx(weights + kv, rel=2e-3)
    assert float(ph.t_ideal) == pytest.approx(float(ph.bytes) / 2.039e12, rel=1e-9)  # every op memory-bound
    assert float(ph.intensity) == pytest.approx(1.0, rel=0.01)  # 2 FLOPs per 2-byte weight


def test_prefill_flops_2N_plus_attention():
    spec, chip, s, roofs, fm, cdt, _ = _7b()
    a = spec.arch
    T = 2048.0
    ph = lt.phase(s, roofs, fm, IDEAL, 1.0, T, 0.0, 1.0, logits_tokens=1.0)
    linear = 2 * T * (12 * a.hidden**2 * 0 + 4 * a.hidden * a.hidden + 3 * a.hidden * a.ffn) * a.layers
    attn = 2 * 2 * a.heads * a.head_dim * (T * (T + 1) / 2) * a.layers
    head = 2 * a.vocab * a.hidden
    gemm = sum(float(o.flop) for o in ph.ops if o.name in ("qkv_proj", "o_proj", "mlp_up", "mlp_down", "lm_head",
                                                            "attn_score", "attn_value"))
    assert gemm == pytest.approx(linear + attn + head, rel=1e-12)
    assert float(ph.intensity) > roofs.ridge_point  # a 2k prompt is compute-bound


def test_ideal_below_estimate_and_batching_raises_intensity():
    spec, chip, s, roofs, fm, cdt, _ = _7b()
    B = np.array([1, 8, 64, 512], dtype=float)
    pre, dec, out = lt.inference(s, roofs, fm, Efficiency(), B, 512.0, 256.0, 1.0)
    assert np.all(out["ideal"]["tpot_s"] < out["est"]["tpot_s"])
    assert np.all(np.diff(dec.intensity) > 0)
    assert np.all(np.diff(out["est"]["output_tokens_per_s"]) > 0)
    cb = float(lt.compute_bound_batch(s, roofs, fm, 16.0, 1.0))
    assert np.isinf(lt.compute_bound_batch(s, roofs, fm, 4096.0, 1.0))  # MHA KV reads keep decode memory-bound
    d = lt.phase(s, roofs, fm, IDEAL, cb, 1.0, 16.0, 1.0)
    d_less = lt.phase(s, roofs, fm, IDEAL, cb - 1, 1.0, 16.0, 1.0)
    assert float(d.intensity) >= roofs.ridge_point > float(d_less.intensity)


def test_quantization_halves_decode_bytes():
    s8 = setup("llama-2-7b", "a100-80gb", "int8", "bf16")
    s16 = _7b()
    b8 = float(lt.phase(s8[2], s8[3], s8[4], IDEAL, 1.0, 1.0, 0.0, 1.0).bytes)
    b16 = float(lt.phase(s16[2], s16[3], s16[4], IDEAL, 1.0, 1.0, 0.0, 1.0).bytes)
    n = count_params(s16[0].arch)
    a = s16[0].arch
    head = a.vocab * a.hidden  # the LM head and the norms stay 16-bit under int8 (the coverage rule)
    linear = n.total - n.embedding - head - n.norms
    kv_and_acts = b16 - 2.0 * (n.total - n.embedding)
    assert b8 - kv_and_acts == pytest.approx(linear + 2.0 * (head + n.norms), rel=1e-3)
    assert b8 / b16 == pytest.approx(0.51, abs=0.01)
    assert s8[4].quantized and not s16[4].quantized


def test_tp_splits_weights_and_adds_allreduce():
    spec, chip, s, roofs, fm, cdt, _ = _7b()
    one = lt.phase(s, roofs, fm, IDEAL, 1.0, 1.0, 0.0, 1.0)
    two = lt.phase(s, roofs, fm, IDEAL, 1.0, 1.0, 0.0, 2.0)
    ar = next(o for o in two.ops if o.name == "tp_allreduce")
    assert float(ar.comm_bytes) == 2 * 32 * 4096 * 2
    assert float(two.bytes) == pytest.approx(float(one.bytes) / 2, rel=0.01)


def test_moe_touches_experts():
    s = fw.shape_of(resolve_model("mixtral-8x7b").arch)
    fm = fw.formats()
    up1 = next(o for o in fw.forward_ops(s, fm, 1.0, 1.0, 0.0, 1.0) if o.name == "moe_up")
    up_big = next(o for o in fw.forward_ops(s, fm, 256.0, 1.0, 0.0, 1.0) if o.name == "moe_up")
    assert float(up_big.weight_bytes) / float(up1.weight_bytes) == pytest.approx(4.0, rel=1e-3)  # 2 of 8 → all 8


def test_dataflow_moe_experts_on_their_own_chips():
    """A MoE on SRAM dataflow chips: chips follow the total parameters; where a layer spans several chips a token
    is dispatched to its experts' chips and combined back (two more hops per MoE layer), and its expert GEMMs run
    on the chips that hold those experts only. A layer inside one chip (a wafer) pays neither."""
    s = fw.shape_of(resolve_model("mixtral-8x7b").arch)
    spread, hops = lt.dataflow(s, 407.0)  # Groq: 407 LPUs, 32 layers
    assert float(spread) == pytest.approx(407.0 / 32)
    assert float(hops) == 31 + 2 * 32
    spread1, hops1 = lt.dataflow(s, 3.0)  # three wafers: whole layers per wafer
    assert float(spread1) == 1.0 and float(hops1) == 2.0
    dense = fw.shape_of(resolve_model("llama-2-7b").arch)
    assert float(lt.dataflow(dense, 60.0)[1]) == 31.0
    import aicalc

    r = aicalc.roofline("mixtral-8x7b", chip="groq-lpu", dtype="fp16", batch=1, prompt=128, gen=128, engine="groq")
    assert int(r["chips_needed"][0]) > 400  # all 8 experts held in SRAM
    assert 400 < 1.0 / float(r["tpot_s"][0]) < 600  # SD-03: 480 tok/s published (Groq, Feb 2024)


def test_gemm_efficiency_curve_op01():
    """OP-01 shape of the curve: M=128 well below M=4096 (measured 193 vs 277.5 TFLOP/s)."""
    e = Efficiency()
    lo, hi = gemm_efficiency(e, 128, 12288, 12288), gemm_efficiency(e, 4096, 12288, 12288)
    assert 0.55 < lo / hi < 0.8


def test_fp8_on_a100_falls_back_with_warning():
    *_, cdt, warnings = setup("llama-2-7b", "a100-80gb", "fp8", "bf16")
    assert cdt == "bf16" and any("fp8" in w for w in warnings)
    *_, cdt, warnings = setup("llama-2-7b", "h100-sxm", "fp8", "fp8")
    assert cdt == "fp8" and not warnings


def test_bad_group_size():
    with pytest.raises(AicalcError):
        setup("llama-2-7b", "a100-80gb", "bf16", "bf16", group_size=32)


def _json(capsys, argv):
    code = main(argv)
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


def test_cli_json_keys_and_sweep(capsys):
    code, d = _json(capsys, ["roofline", "llama-2-7b", "--chip", "h100-sxm", "--batch", "1,8", "--prompt", "128",
                             "--json"])
    assert code == 0 and d["command"] == "roofline" and len(d["rows"]) == 4
    for r in d["rows"]:
        for k in ("phase", "batch", "bound", "arithmetic_intensity", "ridge_point", "ttft_s", "tpot_s",
                  "output_tokens_per_s", "ideal_ttft_s", "ideal_tpot_s", "ideal_output_tokens_per_s"):
            assert k in r
    assert d["rows"][1]["phase"] == "decode" and d["rows"][1]["bound"] == "memory"
    assert d["rows"][0]["ridge_point"] == pytest.approx(295.3, abs=0.1)


def test_cli_ops_and_sram_chip(capsys):
    code, d = _json(capsys, ["roofline", "llama-2-70b", "--chip", "groq-lpu", "--ops", "--json"])
    assert code == 0
    # spreading 140 GB over 230 MB chips is the deployment (a note and chips_needed), not a warning
    assert d["rows"][0]["chips_needed"] > 500 and not d["warnings"]
    assert {"qkv_proj", "attn_score", "mlp_down", "lm_head"} <= {r["op"] for r in d["rows"]}


def test_cli_bad_input_exit_2(capsys):
    assert main(["roofline", "llama-2-7b", "--chip", "a100-80gb", "--tp", "3"]) == 2
    assert main(["roofline", "llama-2-7b", "--chip", "a100-80gb", "--eff", "nope=1"]) == 2
    assert main(["roofline", "llama-2-7b", "--chip", "a100-80gb", "--dtype", "int3"]) == 2
