"""QLoRA as bitsandbytes runs it, against published peaks (validation/cases/training-memory.yaml).

LitGPT's QLoRA configs (pure bf16, NF4 base without double quantization, AdamW, LoRA dropout 0.05, no activation
checkpointing) print ``torch.cuda.max_memory_allocated()`` after training. Modelled as those runs were made
(``framework="litgpt"``: every linear quantized from fp16, the lm_head too, LitGPT's chunked bf16 loss and its loop
holding the previous logits; ``bnb_keeps_inputs``: bitsandbytes 0.42.0, which LitGPT pinned, keeps each quantized
matmul's input until the graph is freed), each row is held to the issue's 15 %.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import aicalc
from aicalc.core import train_memory as tm

ROOT = Path(__file__).resolve().parent.parent
CASES = yaml.safe_load((ROOT / "validation" / "cases" / "training-memory.yaml").read_text())
SETTINGS = ("framework", "lora_dropout", "bnb_keeps_inputs")


def _estimate(c, **over):
    kw = {k: c[k] for k in SETTINGS if k in c} | over
    return aicalc.train_memory(c["model"], batch=c["batch"], seq=c["seq"], precision="bf16", quant="nf4",
                               lora_rank=c["lora_rank"], lora_targets=c["lora_targets"], lora_dtype="bf16", **kw)


def test_cases_are_sourced():
    assert len(CASES) >= 4
    for c in CASES:
        assert c["source"].startswith("https://github.com/Lightning-AI/litgpt/") and c["quote"], c["id"]
        assert f"{c['measured_bytes'] / 1e9:.2f} GB" in c["quote"], c["id"]
        assert c["framework"] == "litgpt" and c["bnb_keeps_inputs"] is True, c["id"]


@pytest.mark.parametrize("c", CASES, ids=[c["id"] for c in CASES])
def test_litgpt_qlora_peaks(c):
    peak = float(_estimate(c)["peak_allocated_bytes"][0])
    assert abs(peak / c["measured_bytes"] - 1) < 0.15, (c["id"], peak / 1e9)
    # without the recipe's mechanisms (transformers' model of the step, a bitsandbytes that frees the inputs) the
    # estimate is more than 15 % low: the rows check the mechanisms, not a constant
    plain = float(_estimate(c, framework="hf", bnb_keeps_inputs=False)["peak_allocated_bytes"][0])
    assert plain < 0.85 * c["measured_bytes"], c["id"]


def test_bnb_kept_inputs_llama_3_1_8b():
    """bitsandbytes 0.42's MatMul4Bit keeps the input of each quantized linear (``ctx.tensors = (A, B)``): per
    Llama-3.1-8B layer the QKV and MLP inputs (4096 each), the output projection's (32 heads × 128) and the down
    projection's (14336), 2 bytes per element for 2 × 512 tokens; the previous micro-batch adds all 32 layers,
    the lm_head input (4096) less the first layer's QKV input, and its bf16 logits (128256)."""
    from aicalc.api.catalog import load_model

    arch = load_model("llama-3.1-8b").arch
    tokens = 2 * 512
    layer = 2 * tokens * (4096 + 4096 + 32 * 128 + 14336)
    assert float(tm.bnb_kept_inputs(2, 512, arch, 2.0, per_layer=True)) == layer
    assert float(tm.bnb_kept_inputs(2, 512, arch, 2.0)) == 32 * layer + 2 * tokens * 128256


def test_litgpt_head_quantized_from_fp16():
    """Lightning's ``_Linear4bit.quantize`` quantizes ``weight.to(torch.half)``: ``dequantize_4bit`` returns fp16
    and MatMul4Bit's ``.to(bf16)`` makes a second copy, both of the largest quantized weight, which under LitGPT
    is the lm_head (128256 × 4096 for Llama-3.1-8B); with transformers the head stays 16-bit."""
    from aicalc.api.catalog import load_model

    arch = load_model("llama-3.1-8b").arch
    assert tm.dequantized_weight_bytes(arch, 2.0, head=True, from_fp16=True) == 128256 * 4096 * (2 + 2)
    lit = aicalc.train_memory("llama-3.1-8b", batch=2, seq=512, precision="bf16", quant="nf4", lora_rank=32,
                              lora_dtype="bf16", framework="litgpt")
    hf = aicalc.train_memory("llama-3.1-8b", batch=2, seq=512, precision="bf16", quant="nf4", lora_rank=32,
                             lora_dtype="bf16")
    # the head at 4.5 bits instead of 16
    head = 128256 * 4096
    assert float(hf["weights_bytes"][0] - lit["weights_bytes"][0]) == pytest.approx(head * (2 - 4.5 / 8))


def test_nf4_storage_and_dequantized_buffer():
    """NF4 stores 4 bits per weight plus one fp32 absmax per 64-value block (4.5 bits); double quantization
    stores the absmax in 8 bits with one fp32 scale per 256 of them, 4 + 8/64 + 32/(64·256) = 4.127 bits
    (Dettmers et al. 2023, §3, TM-08). bitsandbytes dequantizes one weight at a time to the compute dtype for
    each matmul: the largest linear of Llama-3.1-8B, 4096 × 14336 × 2 B."""
    from aicalc.core.dtypes import qlora_bytes_per_param

    assert qlora_bytes_per_param("nf4") == pytest.approx(4.5 / 8)
    assert qlora_bytes_per_param("nf4-dq") == pytest.approx((4 + 8 / 64 + 32 / (64 * 256)) / 8)
    from aicalc.api.catalog import load_model

    arch = load_model("llama-3.1-8b").arch
    assert tm.dequantized_weight_bytes(arch, 2.0) == 4096 * 14336 * 2
    with_q = aicalc.train_memory("llama-3.1-8b", batch=2, seq=512, precision="bf16", quant="nf4", lora_rank=32)
    without = aicalc.train_memory("llama-3.1-8b", batch=2, seq=512, precision="bf16", lora_rank=32)
    assert float(with_q["workspace_bytes"][0] - without["workspace_bytes"][0]) == 4096 * 14336 * 2


TRACE = json.loads((ROOT / "tests" / "data" / "validation" / "litgpt_qlora.json").read_text())


@pytest.mark.parametrize("rec", TRACE["records"], ids=[r["id"] for r in TRACE["records"]])
def test_litgpt_trace(rec):
    """LitGPT's own model code traced on fake tensors through its loop (validation/record_litgpt_qlora.py) with
    bitsandbytes 0.42's MatMul4Bit re-implemented for its memory: the traced peak is within 2 % of the published
    one, and aicalc within 10 % of the trace, with and without the kept inputs; the NF4 weights match to 0.5 %."""
    c = next(c for c in CASES if c["id"] == rec["id"])
    assert abs(rec["bnb_0_42"]["peak_bytes"] / c["measured_bytes"] - 1) < 0.02, rec["id"]
    for key, keep in (("bnb_0_42", True), ("bnb_frees_inputs", False)):
        r = _estimate(c, bnb_keeps_inputs=keep)
        assert abs(float(r["peak_allocated_bytes"][0]) / rec[key]["peak_bytes"] - 1) < 0.10, (rec["id"], key)
        assert float(r["weights_bytes"][0]) == pytest.approx(rec[key]["weights_bytes"], rel=0.005), rec["id"]


def test_litgpt_layouts_are_data_parallel():
    from aicalc.errors import ParameterError

    with pytest.raises(ParameterError, match="not a LitGPT layout"):
        aicalc.train_memory("llama-3.1-8b", pp=2, framework="litgpt", lora_rank=8)
    with pytest.raises(ParameterError, match="one layout per device count"):
        aicalc.search_layouts("llama-3.1-8b", chip="h100-sxm", chips=8, framework="litgpt")
    r = aicalc.train_memory("llama-3.1-8b", dp=8, zero=3, framework="litgpt", lora_rank=8)
    assert float(r["peak_allocated_bytes"][0]) > 0


def test_qlora_under_fsdp2_gathers_the_4bit_layer():
    """QLoRA under --zero 3 is FSDP2 (torchtune's NF4 tensors, bitsandbytes' FSDP-QLoRA): the sharded base and the
    layer all-gathered at the loss are both in the 4-bit bytes (NF4: 4 + 32/64 bits = 0.5625 B per linear weight).
    Llama-3.1-8B, q,v adapters in bf16, batch 4 × 4096 with full recompute at dp 8, where both runs peak at the loss:
    LoRA over a bf16 base holds (2 - 0.5625)·(32 layers' linear weights / 8 + one layer's) more, by hand."""

    kw = dict(batch=4, seq=4096, zero=3, dp=8, precision="bf16", recompute="full", lora_rank=8, lora_targets="q,v",
              lora_dtype="bf16")
    lora, qlora = aicalc.train_memory("llama-3.1-8b", **kw), aicalc.train_memory("llama-3.1-8b", quant="nf4", **kw)
    assert lora["peak_phase"][0] == qlora["peak_phase"][0] == "loss"
    H, kv, F = 4096, 1024, 14336
    linear = 2 * H * H + 2 * H * kv + 3 * H * F  # q, o; k, v; gate, up, down
    by_hand = (2 - 0.5625) * (32 * linear / 8 + linear)
    diff = float(lora["peak_allocated_bytes"][0] - qlora["peak_allocated_bytes"][0])
    assert diff == pytest.approx(by_hand, rel=1e-6)


def test_int8_has_no_fsdp_units(capsys):
    from aicalc.cli import main

    assert main(["train-mem", "llama-3.1-8b", "--zero", "3", "--dp", "4", "--lora-rank", "8", "--quant", "int8",
                 "--fsdp-units", "split"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--quant int8" in err[0]
