"""``activations.compiled_saving`` against what torch.compile'd layers saved for backward
(``validation/record_compiled.py``: saved-tensor hooks around compiled and eager Llama- and Qwen3-style layers,
bf16, torch AMP and fp32, five shapes each; PEFT LoRA over several target sets, adapter dtypes and shapes): the
bytes per token a compiled layer does not save, exactly."""

from __future__ import annotations

import json

import pytest

from aicalc.catalog.hf_config import arch_from_config

from conftest import ROOT

DOC = json.loads((ROOT / "tests" / "data" / "validation" / "compiled_saving.json").read_text())


@pytest.mark.parametrize("rec", DOC["records"], ids=[r["name"] for r in DOC["records"]])
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
