"""``activations.compiled_saving`` against what torch.compile'd layers saved for backward
(``validation/record_compiled.py``: saved-tensor hooks around compiled and eager Llama- and Qwen3-style layers,
bf16, torch AMP and fp32, five shapes each; PEFT LoRA over several target sets, adapter dtypes and shapes): the
bytes per token a compiled layer does not save, exactly. The ``selective-op`` records do the same under
torchtitan's op-level selective activation checkpointing, compiled after wrapping as torchtitan does
(``activations.compiled_selective_saving``; the eager side is ``hf_selective_op_layer``, and the keyword-argument
tensors the checkpoints hold are ``hf_outside``'s). The ``qlora`` records put a 4-bit base under the adapters
(torchao's ``linear_nf4``, bitsandbytes 0.46-0.49 and 0.50's fused forward, re-implemented for their memory):
``train_peak.qlora_compiled_weights`` is what the compiled layer saves beyond the 16-bit base's."""

from __future__ import annotations

import json

import pytest

from aicalc.catalog.hf_config import arch_from_config

from conftest import ROOT

DOC = json.loads((ROOT / "tests" / "data" / "validation" / "compiled_saving.json").read_text())
PLAIN = [r for r in DOC["records"] if "recompute" not in r and "quant" not in r.get("lora", {})]
SAC = [r for r in DOC["records"] if r.get("recompute") == "selective-op"]
QLORA = [r for r in DOC["records"] if "quant" in r.get("lora", {})]


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


def _copies_by_hand(cfg, a):
    """A 16-bit (a-byte) copy of each of a Llama/Qwen3 layer's seven linear weights, from the config: q (H × A·d),
    k and v (H × K·d each), o (A·d × H), gate, up and down (H × F each); and the q, k, v part alone."""
    H, A, K, d, F = (cfg[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                                      "intermediate_size"))
    qkv = H * A * d + 2 * H * K * d
    return a * (qkv + A * d * H + 3 * H * F), a * qkv


def test_qlora_records_cover_the_styles():
    """Each style over a bf16 Llama's every target; shapes, a second sequence length and the first layer for the
    two styles that save copies."""
    styles = {r["lora"]["quant"] for r in QLORA}
    assert styles == {"torchao", "bnb", "bnb-gemm"}
    for style in ("torchao", "bnb"):
        mine = [r for r in QLORA if r["lora"]["quant"] == style]
        assert len({(r["config"]["hidden_size"], r["config"]["intermediate_size"], r["config"]["num_attention_heads"],
                     r["config"]["head_dim"]) for r in mine}) == 5
        assert {r["seq"] for r in mine} == {64, 128} and {r["layer"] for r in mine} == {0, 1}


@pytest.mark.parametrize("rec", QLORA, ids=[r["name"] for r in QLORA])
def test_compiled_qlora_saving_per_token(rec):
    """The compiled layer over a 4-bit base saves what it saves over a 16-bit one (``compiled_saving(frozen)`` and
    ``lora_compiled_merge`` less than eager) plus, unless the forward is bitsandbytes 0.50's fused op, a copy of
    each frozen weight: a fixed size a layer, so ``copies / (B·S)`` a token (the records at 64 and 128 tokens a
    sequence tell it from the per-token terms). In the first layer q, k and v need no input gradient, so their copies
    are not saved, and the compiled first norm keeps no ``a·H`` input and fp32 rstd (``4`` a token) where the eager
    one kept no fp32 upcast (``4·H``) and rstd."""
    from aicalc.core.activations import compiled_saving, hf_frozen_outside
    from aicalc.core.train_peak import lora_compiled_merge, qlora_compiled_weights

    arch = arch_from_config(rec["config"])
    lora = rec["lora"]
    a = 4.0 if rec["precision"] == "fp32" else 2.0
    tokens = rec["batch"] * rec["seq"]
    saved = float(compiled_saving(1, 1, arch, a, 1, frozen=True)) + lora_compiled_merge(
        arch, tuple(lora["targets"]), 1, 1, a, 1, lora["adapter_dtype"] == "fp32")
    copies, qkv = _copies_by_hand(rec["config"], a)
    if lora["quant"] == "bnb-gemm":
        copies = qkv = 0
    else:
        assert qlora_compiled_weights(arch, a) == copies and qlora_compiled_weights(arch, a, qkv_only=True) == qkv
    if rec["layer"] == 1:
        assert saved - copies / tokens == rec["eager_bytes_per_token"] - rec["compiled_bytes_per_token"]
        return
    H = rec["config"]["hidden_size"]
    first = (4 * H + 4) - (a * H + 4)  # the eager first norm's missing upcast less the compiled one's missing input
    assert saved - first - (copies - qkv) / tokens == rec["eager_bytes_per_token"] - rec["compiled_bytes_per_token"]
    eager_less = float(hf_frozen_outside(1, 1, arch, a, stage="first"))
    compiled_less = float(hf_frozen_outside(1, 1, arch, a, stage="first", compiled=True))
    assert (eager_less, compiled_less) == (4 * H + 4, a * H + 4)


def test_qlora_eager_saves_what_lora_saves():
    """Eagerly a 4-bit base saves nothing a 16-bit one does not (torchao saves the NF4 weight itself, a parameter;
    bitsandbytes keeps the packed weight on ``ctx``), and compiled with bitsandbytes 0.50's fused forward nothing
    more either: each qlora record against the LoRA record of the same model, targets, adapters and shape."""
    lora = {(r["config"]["model_type"], r["precision"], tuple(r["lora"]["targets"]), r["lora"]["adapter_dtype"],
             r["lora"]["rank"], r["name"].split("/")[-1]): r for r in PLAIN if "lora" in r}
    matched = 0
    for q in QLORA:
        key = (q["config"]["model_type"], q["precision"], tuple(q["lora"]["targets"]), q["lora"]["adapter_dtype"],
               q["lora"]["rank"], q["name"].split("/")[-1])
        if key not in lora:
            continue
        matched += 1
        assert q["eager_bytes_per_token"] == lora[key]["eager_bytes_per_token"], q["name"]
        if q["lora"]["quant"] == "bnb-gemm":
            assert q["compiled_bytes_per_token"] == lora[key]["compiled_bytes_per_token"], q["name"]
    assert matched >= 10
