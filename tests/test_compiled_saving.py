"""``activations.compiled_saving`` against what torch.compile'd layers saved for backward
(``validation/record_compiled.py``: saved-tensor hooks around compiled and eager Llama- and Qwen3-style layers,
bf16, torch AMP and fp32, five shapes each; PEFT LoRA over several target sets, adapter dtypes and shapes): the
bytes per token a compiled layer does not save, exactly. The ``selective-op`` records do the same under
torchtitan's op-level selective activation checkpointing, compiled after wrapping as torchtitan does
(``activations.compiled_selective_saving``; the eager side is ``hf_selective_op_layer``, and the keyword-argument
tensors the checkpoints hold are ``hf_outside``'s)."""

from __future__ import annotations

import json

import pytest

from aicalc.catalog.hf_config import arch_from_config

from conftest import ROOT

DOC = json.loads((ROOT / "tests" / "data" / "validation" / "compiled_saving.json").read_text())
PLAIN = [r for r in DOC["records"] if "recompute" not in r]
SAC = [r for r in DOC["records"] if r.get("recompute") == "selective-op"]


@pytest.mark.parametrize("rec", PLAIN, ids=[r["name"] for r in PLAIN])
def test_compiled_saving_per_token(rec):
    from aicalc.core.activations import compiled_saving
    from aicalc.core.train_peak import lora_compiled_merge

    arch = arch_from_config(rec["config"])
    a = 4.0 if rec["precision"] == "fp32" else 2.0
    if "lora" in rec:
        lora = rec["lora"]
        saved = float(compiled_saving(1, 1, arch, a, 1, frozen=True)) + lora_compiled_merge(
            arch, tuple(lora["targets"]), 1, 1, a, 1, lora["adapter_dtype"] == "fp32")
    else:
        saved = float(compiled_saving(1, 1, arch, a, 1, rec["precision"] == "bf16-mixed"))
    assert saved == rec["eager_bytes_per_token"] - rec["compiled_bytes_per_token"]


def test_selective_records_cover_the_shapes_and_precisions():
    """Every precision and family of the plain records, and the four-mm layers (Qwen2, Phi-3)."""
    assert {(r["config"]["model_type"], r["precision"]) for r in PLAIN if "lora" not in r} | {
        ("qwen2", "bf16"), ("phi3", "bf16")} == {(r["config"]["model_type"], r["precision"]) for r in SAC}
    assert len(SAC) == 26


@pytest.mark.parametrize("rec", SAC, ids=[r["name"] for r in SAC])
def test_compiled_selective_saving_per_token(rec):
    from aicalc.core.activations import compiled_selective_saving, hf_selective_op_layer

    arch = arch_from_config(rec["config"])
    a = 4.0 if rec["precision"] == "fp32" else 2.0
    saved = float(compiled_selective_saving(1, 1, arch, a))
    assert saved == rec["eager_bytes_per_token"] - rec["compiled_bytes_per_token"]
    # the eager side is the eager model's (torch AMP: the checkpoint keeps the fp32 residual stream as its input)
    a_in = 4.0 if rec["precision"] == "bf16-mixed" else a
    B, S = rec["batch"], rec["seq"]
    eager = hf_selective_op_layer(B, S, arch, a) + (a_in - a) * B * S * arch.hidden
    assert float(eager) == rec["eager_bytes_per_token"] * B * S


@pytest.mark.parametrize("rec", SAC, ids=[r["name"] for r in SAC])
def test_compiled_selective_checkpoints_hold_no_position_ids(rec):
    """The eager checkpoints' closures hold the layer's keyword tensors; the compiled graphs save the RoPE tables
    they read and not the int64 position ids: ``hf_outside(compiled=True)`` is 8S less."""
    from aicalc.core.activations import hf_outside

    arch = arch_from_config(rec["config"])
    a = 4.0 if rec["precision"] == "fp32" else 2.0
    B, S = rec["batch"], rec["seq"]
    kw = dict(recompute="selective-op", stage="first")
    less = float(hf_outside(B, S, arch, a, **kw) - hf_outside(B, S, arch, a, compiled=True, **kw))
    assert less == (rec["eager_kwargs_bytes_per_token"] - rec["compiled_kwargs_bytes_per_token"]) * B * S
