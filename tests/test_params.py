"""Exact parameter counts: aicalc's formula equals PyTorch's ``sum(p.numel())`` of the transformers model.

The expected values were recorded by ``validation/record_params.py`` (transformers on the meta device;
versions in the file) from the same config dicts, and are re-proved in CI by ``--check``.
"""

import json

import pytest
import yaml

from aicalc.catalog.hf_config import SUPPORTED, arch_from_config
from aicalc.core.params import count_params

from conftest import DATA, ROOT

RECORDS = json.loads((DATA / "validation" / "params.json").read_text())["records"]


@pytest.mark.parametrize("rec", RECORDS, ids=[r["name"] for r in RECORDS])
def test_params_equal_pytorch(rec):
    assert count_params(arch_from_config(rec["config"])).total == rec["params"]


def test_every_preset_and_supported_config_is_recorded():
    names = {r["name"] for r in RECORDS}
    presets = {p.stem for p in (ROOT / "presets" / "models").glob("*.yaml")}
    assert presets <= names
    for folder in (DATA / "configs").iterdir():
        if folder.is_dir() and json.loads((folder / "config.json").read_text())["model_type"] in SUPPORTED:
            assert folder.name in names


@pytest.mark.parametrize("path", sorted((ROOT / "presets" / "models").glob("*.yaml")), ids=lambda p: p.stem)
def test_recorded_config_is_the_preset_config(path):
    """The record was made from exactly the config the preset ships (so it proves the preset)."""
    rec = next(r for r in RECORDS if r["name"] == path.stem)
    assert rec["config"] == yaml.safe_load(path.read_text())["config"]


@pytest.mark.parametrize(
    "model, total, active",
    [
        # published figures (specs.md §2): Mixtral 46.7B total / 12.9B active; DeepSeek-V3 671B main model
        ("mixtral-8x7b", 46.7e9, 12.9e9),
        ("mixtral-8x22b", 141e9, 39e9),
        ("deepseek-v3", 671e9, 37e9),
    ],
)
def test_moe_totals_and_active_params_match_published_rounding(model, total, active):
    from aicalc.catalog import store

    n = count_params(store.resolve_model(model).arch)
    assert n.total == pytest.approx(total, rel=0.005)
    assert n.active == pytest.approx(active, rel=0.02)


def test_gemma2_paper_embedding_and_non_embedding():
    # Gemma 2 report Table 2: 9B = 8,324,201,984 non-embedding + 917,504,000 embedding parameters
    from aicalc.catalog import store

    n = count_params(store.resolve_model("gemma-2-9b").arch)
    assert n.embedding == 917_504_000
    assert n.total - n.embedding == 8_324_201_984
