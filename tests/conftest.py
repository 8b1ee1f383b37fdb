import io
import json
from pathlib import Path

import pytest

from aicalc.cli import main
from aicalc.env import Env

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
DATA = Path(__file__).resolve().parent / "data"


def fixture_config(name: str) -> dict:
    """A real published config.json of tests/data/configs/NAME (SOURCES.md there)."""
    return json.loads((DATA / "configs" / name / "config.json").read_text())


# the keys of a released config.json that a model preset leaves out (presets/models/*.yaml header)
BOOKKEEPING = {"_name_or_path", "transformers_version", "auto_map", "quantization_config"}


def model_preset(name: str) -> dict:
    """presets/models/NAME.yaml as written (id, release, notes, config)."""
    import yaml

    return yaml.safe_load((ROOT / "presets" / "models" / f"{name}.yaml").read_text())


def preset_config(name: str) -> dict:
    """The config.json keys a model preset holds."""
    return model_preset(name)["config"]


def preset_params(name: str):
    """aicalc's parameter count (``aicalc.core.params.ParamCount``) of a model preset's config."""
    from aicalc.catalog.hf_config import arch_from_config
    from aicalc.core.params import count_params

    return count_params(arch_from_config(preset_config(name)))


def fixture_records() -> dict:
    """validation/record_params.py's records of those fixtures by name (a preset of the same name is another
    record: its config leaves out the file's bookkeeping keys)."""
    records = json.loads((DATA / "validation" / "params.json").read_text())["records"]
    return {r["name"]: r for r in records if r["kind"] == "config"}


def check_preset_answers(cli, name: str, params: int) -> None:
    """A new built-in model preset through the CLI: ``presets show`` names it with ``params`` parameters, and
    kv-cache, serve and train-mem answer for it (exit 1 is a 'does not fit' verdict, not an error)."""
    shown = cli("presets", "show", name, "--json")
    row = shown.json["rows"][0]
    assert shown.code == 0 and row["id"] == name and row["params"] == params
    for args in (("kv-cache", name, "--chip", "h200"), ("serve", name, "--chip", "h200", "--chips", 8),
                 ("train-mem", name, "--chip", "h100-sxm")):
        r = cli(*args, "--json")
        assert r.code in (0, 1) and not r.err.startswith("Traceback"), args
        assert r.json


class Run:
    def __init__(self, code, out, err):
        self.code, self.out, self.err = code, out, err

    @property
    def json(self):
        return json.loads(self.out)


@pytest.fixture
def cli():
    """Run aicalc in-process with a fake environment: ``cli("kv-cache", "gpt2", tty=False)``."""

    def run(*args, tty=False, width=None):
        out, err = io.StringIO(), io.StringIO()
        code = main([str(a) for a in args], env=Env(stdout=out, stderr=err, stdout_isatty=tty, width=width))
        return Run(code, out.getvalue(), err.getvalue())

    return run
