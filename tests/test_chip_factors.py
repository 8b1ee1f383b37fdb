"""A chip preset's own efficiency factors (``efficiency:`` in presets/chips/ID.yaml) apply over its class's profile."""

import pytest
import yaml

import aicalc

from conftest import ROOT


def _stated(chip, factor):
    return yaml.safe_load((ROOT / "presets" / "chips" / f"{chip}.yaml").read_text())["efficiency"][factor]["value"]


def test_tpu7x_adds_its_stated_time_once_per_forward_pass():
    """TPU7x's preset states a fixed time per forward pass (the first serving releases on the chip): a decode step,
    one forward pass, takes exactly that much more than the same step with the factor set to 0, and the prefill
    too; the table names the factor's source."""
    t = _stated("tpu7x", "step_overhead_s")
    a = aicalc.roofline("qwen3-8b", "tpu7x", batch=1, prompt=1024, gen=256)
    b = aicalc.roofline("qwen3-8b", "tpu7x", batch=1, prompt=1024, gen=256, efficiency={"step_overhead_s": 0.0})
    assert float(a["tpot_s"][0] - b["tpot_s"][0]) == pytest.approx(t, rel=1e-9)
    assert float(a["ttft_s"][0] - b["ttft_s"][0]) == pytest.approx(t, rel=1e-9)
    r = aicalc.serve("qwen3-8b", "tpu7x", 8)
    assert any(s.startswith("step_overhead_s") and "tpu7x" in s for s in r.meta["setup"].sources)


def test_other_tpus_have_no_such_term():
    a = aicalc.roofline("qwen3-8b", "tpu-v6e", batch=1, prompt=1024, gen=256)
    b = aicalc.roofline("qwen3-8b", "tpu-v6e", batch=1, prompt=1024, gen=256, efficiency={"step_overhead_s": 0.0})
    assert float(a["tpot_s"][0]) == float(b["tpot_s"][0])
