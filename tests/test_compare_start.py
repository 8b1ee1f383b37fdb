"""compare starts its search for the fewest training chips at a count the training states alone need (issue 25):
the answer is the one the search from one chip gives."""

from __future__ import annotations

import pytest

from aicalc.api import compare
from aicalc.api.catalog import load_model, load_node_or_chip

MODELS = ["gpt2", "llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "gemma-2-27b", "falcon-40b", "phi-3-mini",
          "deepseek-v3"]
CHIPS = ["h100-sxm", "l4", "mi300x", "rtx-4090"]


@pytest.mark.parametrize("chip_id", CHIPS)
def test_the_answer_is_the_search_from_one_chip(chip_id, monkeypatch):
    chip, _ = load_node_or_chip(chip_id)
    for model in MODELS:
        spec = load_model(model)
        start = compare.fewest_possible(spec, chip)
        pruned = compare._training(spec, chip, 4096, 1e12, [])
        with monkeypatch.context() as m:
            m.setattr(compare, "fewest_possible", lambda *a: 1)
            full = compare._training(spec, chip, 4096, 1e12, [])
        assert pruned == full, model
        assert full["chips_needed"] is None or start <= full["chips_needed"]


def test_the_start_is_the_states_share():
    """70B in bf16-mixed AdamW, 16 bytes a parameter: 1.13 TB, more than 8 × 80 GB, within 16."""
    spec, (chip, _) = load_model("llama-3.1-70b"), load_node_or_chip("h100-sxm")
    assert compare.fewest_possible(spec, chip) == 16
    assert compare.fewest_possible(load_model("gpt2"), chip) == 1
