"""Every built-in model preset passes the pydantic schema (the CLI reads built-ins without it, for speed)."""

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from aicalc.catalog.hf_config import arch_from_config
from aicalc.catalog.schema import ModelPreset

from conftest import ROOT

FILES = sorted((ROOT / "presets" / "models").glob("*.yaml"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_builtin_model_preset_is_valid(path: Path):
    data = yaml.safe_load(path.read_text())
    preset = ModelPreset.model_validate(data)
    assert preset.id == path.stem
    assert preset.source.startswith("https://")
    assert path.read_text().startswith("#")  # a schema comment at the top
    arch_from_config(dict(preset.config), str(path))


def test_user_model_preset_is_validated(cli, tmp_path):
    (tmp_path / "models").mkdir()
    text = (ROOT / "presets/models/gpt2.yaml").read_text().replace("id: gpt2", "id: my-gpt\nbogus: 1")
    (tmp_path / "models" / "my-gpt.yaml").write_text(text)
    r = cli("--presets-dir", tmp_path, "presets", "show", "my-gpt")
    assert r.code == 2 and "bogus" in r.err


def test_schema_rejects_extra_fields():
    data = yaml.safe_load((ROOT / "presets/models/gpt2.yaml").read_text()) | {"bogus": 1}
    with pytest.raises(ValidationError):
        ModelPreset.model_validate(data)
