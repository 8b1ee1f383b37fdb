"""Find, load and validate presets: built-in ones (shipped in the wheel) plus user folders.

User folders come from ``--presets-dir`` or the ``AICALC_PRESETS`` environment variable (several
folders separated by the OS path separator); each holds ``chips/``, ``nodes/`` and ``models/``
sub-folders of YAML files, and an entry there overrides a built-in one with the same id.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from aicalc.catalog.arch import Arch
from aicalc.errors import AicalcError, UnknownPreset

KINDS = ("chip", "node", "model")
_extra_dirs: list[Path] = []


def set_user_dirs(dirs: list[Path]) -> None:
    """Called once by the CLI for ``--presets-dir``; the environment variable is read as well."""
    _extra_dirs[:] = dirs
    _index.cache_clear()


def builtin_root() -> Path:
    """``aicalc/presets`` in an installed wheel, else the repository's top-level ``presets/``."""
    here = Path(__file__).resolve().parent.parent
    shipped = here / "presets"
    return shipped if shipped.is_dir() else here.parent / "presets"


def _roots() -> list[Path]:
    env = [Path(p) for p in os.environ.get("AICALC_PRESETS", "").split(os.pathsep) if p]
    roots = [builtin_root(), *env, *_extra_dirs]
    for r in roots[1:]:
        if not r.is_dir():
            raise AicalcError(f"presets folder '{r}' does not exist")
    return roots


@cache
def _index(kind: str) -> dict[str, Path]:
    """id → file, later roots overriding earlier ones. Reads only the folder listings."""
    found: dict[str, Path] = {}
    for root in _roots():
        folder = root / f"{kind}s"
        if folder.is_dir():
            for f in sorted(folder.glob("*.yaml")):
                found[f.stem] = f
    return found


def ids(kind: str) -> list[str]:
    return sorted(_index(kind))


def load_yaml(path: Path) -> Any:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise AicalcError(f"{path}: cannot read ({e.strerror})") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the libyaml-backed safe loader when available
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise AicalcError(f"{path}: invalid YAML{where}: {problem}") from None


def validation_message(path: Path | str, err) -> str:
    """One line from a pydantic ValidationError: file, field path, message (and how many more)."""
    errors = err.errors()
    first = errors[0]
    field = ".".join(str(p) for p in first["loc"]) or "(top level)"
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return f"{path}: field '{field}': {first['msg']}{more}"


@cache
def _validated(kind: str, path: Path):
    from pydantic import ValidationError

    from aicalc.catalog import schema

    cls = {"chip": schema.Chip, "node": schema.Node, "model": schema.ModelPreset}[kind]
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise AicalcError(f"{path}: expected a mapping of fields, got {type(data).__name__}")
    try:
        obj = cls.model_validate(data)
    except ValidationError as e:
        raise AicalcError(validation_message(path, e)) from None
    if obj.id != path.stem:
        raise AicalcError(f"{path}: field 'id' is '{obj.id}' but the file is named '{path.stem}'")
    return obj


def load(kind: str, preset_id: str):
    """The validated preset object of ``kind`` with id ``preset_id``."""
    index = _index(kind)
    if preset_id not in index:
        raise UnknownPreset(kind, preset_id, list(index))
    return _validated(kind, index[preset_id])


@dataclass(frozen=True)
class ModelSpec:
    id: str
    name: str
    source: str
    arch: Arch
    official_params: str | None = None
    hf_repo: str | None = None


def looks_like_path(name: str) -> bool:
    """A MODEL argument meant as a file or folder rather than a preset id."""
    return "/" in name or os.sep in name or name.endswith(".json") or name in (".", "..")


def resolve_model(name: str) -> ModelSpec:
    """A preset id, a path to a ``config.json``, or a folder holding one."""
    from aicalc.catalog.hf_config import arch_from_config

    path = Path(name)
    if path.exists() or looks_like_path(name):
        file = path / "config.json" if path.is_dir() else path
        if not file.is_file():
            raise AicalcError(f"no config.json at '{name}'")
        try:
            cfg = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise AicalcError(f"{file}: not a readable JSON file ({e})") from None
        label = cfg.get("_name_or_path") if isinstance(cfg, dict) else None
        return ModelSpec(id=str(file), name=label or file.parent.name or str(file), source=str(file),
                         arch=arch_from_config(cfg, str(file)))
    index = _index("model")
    if name not in index:
        raise UnknownPreset("model", name, list(index))
    path = index[name]
    if path.is_relative_to(builtin_root()):
        # Built-in presets are schema-checked by the test suite (tests/test_catalog_models.py); reading the
        # YAML directly keeps pydantic off the path of a one-off query.
        data = load_yaml(path)
        meta = {k: data.get(k) for k in ("id", "name", "source", "official_params", "hf_repo")}
        cfg = data["config"]
    else:
        preset = load("model", name)
        meta = {k: getattr(preset, k) for k in ("id", "name", "source", "official_params", "hf_repo")}
        cfg = preset.config
    return ModelSpec(arch=arch_from_config(dict(cfg), str(path)), **meta)


def resolve_chip(name: str):
    """``(chip, count)``: a chip id gives one chip, a node id (``dgx-h100``) its chips."""
    if name in _index("node") and name not in _index("chip"):
        node = load("node", name)
        return load("chip", node.chip), node.count
    if name not in _index("chip"):
        raise UnknownPreset("chip", name, list(_index("chip")) + list(_index("node")))
    return load("chip", name), 1
