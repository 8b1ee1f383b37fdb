"""QLoRA as bitsandbytes runs it, against published peaks (validation/cases/training-memory.yaml).

LitGPT's QLoRA configs (pure bf16, NF4 base without double quantization, AdamW, no activation checkpointing)
print ``torch.cuda.max_memory_allocated()`` after training. aicalc's training-step peak is 28-41 % below those
figures (issue 23); the gap is not explained by the step (docs/train-mem.md, "QLoRA"), so these rows are held
to the inequality that holds, the model states and the step's peak both below the published peak, and the
NF4 terms are checked against their own sources.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import aicalc
from aicalc.core import train_memory as tm

ROOT = Path(__file__).resolve().parent.parent
CASES = yaml.safe_load((ROOT / "validation" / "cases" / "training-memory.yaml").read_text())


def _estimate(c):
    return aicalc.train_memory(c["model"], batch=c["batch"], seq=c["seq"], precision="bf16", quant="nf4",
                               lora_rank=c["lora_rank"], lora_targets=c["lora_targets"], lora_dtype="bf16")


def test_cases_are_sourced():
    assert len(CASES) >= 4
    for c in CASES:
        assert c["source"].startswith("https://github.com/Lightning-AI/litgpt/") and c["quote"], c["id"]
        assert f"{c['measured_bytes'] / 1e9:.2f} GB" in c["quote"], c["id"]


@pytest.mark.parametrize("c", CASES, ids=[c["id"] for c in CASES])
def test_litgpt_qlora_peaks_bound_the_step(c):
    r = _estimate(c)
    states = float(r["weights_bytes"][0] + r["gradients_bytes"][0] + r["optimizer_bytes"][0])
    peak = float(r["peak_allocated_bytes"][0])
    assert states < peak < c["measured_bytes"], c["id"]
    # the gap (28-41 %) is documented, not tuned away: it is more than the whole step's activations
    assert c["measured_bytes"] - peak > 0.2 * c["measured_bytes"], c["id"]


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
