"""The softmax's exponentials in inference pricing (aicalc.core.exponentials, aicalc.core.pricing.op_times): a fused
attention op's compute time is the longer of its matmuls and its exponentials, one per score element on 16 MUFU
units per SM and clock (CUDA C++ Programming Guide throughput table), a sixteenth of the fp32 FLOP rate on
Hopper and Blackwell (128 fp32 lanes of 2 FLOP per SM and clock), twice that on Blackwell Ultra (NVIDIA, 'Making
Softmax More Efficient with NVIDIA Blackwell Ultra'). Every expected figure is derived from the datasheet numbers
in presets/chips/*.yaml."""

from __future__ import annotations

import pytest

from aicalc.api.roofline import cost_setup
from aicalc.core.forward import forward_ops

B200_BF16, B200_FP32 = 2250e12, 75e12  # presets/chips/b200.yaml dense_tflops (HGX B200 table)


def attention_times(model, chip, prompt=8192, past=0.0, exp=True, **kw):
    """(t_est of the attention core's ops, their FLOPs) of one sequence's prefill of ``prompt`` tokens (decode: one
    token over ``past``) with memory made free and launches free, so that t_est is the compute time alone; with
    ``exp`` False the chip's exponential rate is left out."""
    from aicalc.core.pricing import op_times

    cs = cost_setup(model, chip, **kw)
    roofs = cs.roofs._replace(bandwidth_bytes_per_s=1e30)
    if not exp:
        roofs = roofs._replace(exp_per_s=0.0)
    eff = cs.efficiency._replace(kernel_overhead_s=0.0)
    ops = [o for o in forward_ops(cs.shape, cs.formats, 1.0, float(prompt), past, 1.0) if o.per == "sequence"]
    return sum(float(op_times(o, roofs, eff, 1.0)[1]) for o in ops), ops


def test_b200_exponential_rate_from_its_datasheet():
    """75 TFLOP/s fp32 / 16 = 4.6875e12 exponentials per second (the chip record and its schema alike)."""
    from aicalc.api.catalog import load_chip
    from aicalc.catalog import schema, store

    assert load_chip("b200").exp_per_s == pytest.approx(B200_FP32 / 16)
    model = schema.Chip.model_validate(store.load_yaml(store._index("chip")["b200"]))
    assert model.exp_per_s == pytest.approx(B200_FP32 / 16)
    assert load_chip("gb300").exp_per_s == pytest.approx(83.3e12 / 8)  # Blackwell Ultra: twice the SFU share
    assert load_chip("mi300x").exp_per_s == 0.0  # no SFU figure: attention priced by its tensor rate alone


def test_gpt_oss_prefill_attention_runs_at_the_exponentials_pace_on_b200():
    """gpt-oss (head_dim 64): per score element the score and value products take 2·(64 + 64) = 256 FLOPs and the
    softmax one exponential, so on a B200 the exponentials take r = 2250e12 / (75e12/16 · 256) = 1.875 times the
    matmuls at the same share of their peaks: the prefill attention core's compute time is 1.875x its tensor time."""
    r = B200_BF16 / (B200_FP32 / 16 * 2 * (64 + 64))
    assert r == pytest.approx(1.875)
    bound, ops = attention_times("gpt-oss-120b", "b200")
    free, _ = attention_times("gpt-oss-120b", "b200", exp=False)
    assert {o.name for o in ops} == {"attn_score", "attn_value"}
    assert bound / free == pytest.approx(r, rel=1e-9)
    cs = cost_setup("gpt-oss-120b", "b200")
    flop = sum(float(o.flop) for o in ops)
    assert free == pytest.approx(flop / (B200_BF16 * cs.efficiency.flop_max), rel=1e-9)


def test_hopper_and_head_dim_128_attention_are_not_exponential_bound():
    """r < 1 leaves the time as the tensor rate sets it: head_dim 128 on a B200, 2250 / (4.6875 · 512) = 0.94
    (FlashAttention-4's 'feeds and speeds': MMA and exponentials of a 128 x 128 tile take the same 1,024 cycles);
    gpt-oss on an H100, 989.4 / (66.9/16 · 256) = 0.92; gpt-oss on a GB300 (twice the SFU share),
    2500 / (83.3/8 · 256) = 0.94."""
    assert 2250 / (75 / 16 * 512) < 1 and 989.4 / (66.9 / 16 * 256) < 1 and 2500 / (83.3 / 8 * 256) < 1
    for model, chip in (("llama-3.1-8b", "b200"), ("gpt-oss-120b", "h100-sxm"), ("llama-3.1-8b", "h100-sxm"),
                        ("gpt-oss-120b", "gb300")):
        assert attention_times(model, chip)[0] == attention_times(model, chip, exp=False)[0], (model, chip)


def test_fp8_attention_doubles_the_ratio():
    """An FP8 context attention (an FP4 model with an FP8 KV cache: TensorRT-LLM's FP8 FMHA) runs its matmuls at
    the fp8 peak, 4500e12, so a head_dim-128 model's exponentials take 4500 / (4.6875 · 512) = 1.875 times the
    matmuls at the peaks' shares; priced at its share, an fp8 kernel's tensor time is flop / (peak_fp8 · flop_max ·
    low_precision_flop_factor), the exponentials' flop / 512 / (exp_per_s · flop_max)."""
    bound, ops = attention_times("llama-3.1-70b", "b200", dtype="fp4", kv_dtype="fp8", engine="trtllm")
    cs = cost_setup("llama-3.1-70b", "b200", dtype="fp4", kv_dtype="fp8", engine="trtllm")
    assert cs.formats.attention_compute == "fp8"
    e = cs.efficiency
    flop = sum(float(o.flop) for o in ops)
    tensor = flop / (2 * B200_BF16 * e.flop_max * e.low_precision_flop_factor)
    exps = flop / 512 / (B200_FP32 / 16 * e.flop_max)
    assert bound == pytest.approx(max(tensor, exps), rel=1e-9)
    assert exps > tensor


def test_materialized_attention_has_no_fused_exponentials():
    """Eager attention's softmax is its own memory-bound kernel (attn_softmax): its matmuls are plain GEMMs and
    none of its ops carries the fused kernel's exponentials."""
    kw = {"attention": "materialized"}
    assert attention_times("gpt-oss-120b", "b200", **kw)[0] == attention_times("gpt-oss-120b", "b200", exp=False,
                                                                               **kw)[0]
    assert not any(o.flop_per_exp for o in attention_times("gpt-oss-120b", "b200", **kw)[1])


def test_decode_attention_stays_bandwidth_bound():
    """A decode step's attention reads each cached key once per kv head for its query group: gpt-oss's 8 query
    heads per kv head make 8 exponentials per 2·64·1 B of an fp8 K and V row, 1 per 16 B; at 7.7 TB/s the reads
    take 16 / 7.7e12 = 2.1e-12 s per exponential against 1 / 4.6875e12 = 2.1e-13 s on the SFUs: the estimate
    (p-norm of compute and memory) moves by well under 1 %."""
    from aicalc.core.pricing import op_times

    cs = cost_setup("gpt-oss-120b", "b200", kv_dtype="fp8")
    ops = [o for o in forward_ops(cs.shape, cs.formats, 64.0, 1.0, 8192.0, 1.0) if o.per == "sequence"]
    bound = sum(float(op_times(o, cs.roofs, cs.efficiency, 1.0)[1]) for o in ops)
    free = sum(float(op_times(o, cs.roofs._replace(exp_per_s=0.0), cs.efficiency, 1.0)[1]) for o in ops)
    assert 1.0 < bound / free < 1.01
