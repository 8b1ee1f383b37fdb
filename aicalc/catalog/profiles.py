"""Efficiency profiles: what real kernels reach on a class of chip (``presets/classes/``) and in an inference
engine (``presets/engines/``), as data with a source for every figure.

An estimate composes the defaults of :class:`aicalc.core.efficiency.Efficiency`, then the chip class's factors,
then the engine's, then the caller's overrides. Each profile is one YAML file::

    id: apple
    name: Apple silicon GPU (Metal)
    factors:
      bandwidth: {value: 0.8, source: "llama.cpp discussion #4167: …"}
    pipeline_over_chips: false      # dataflow chips: a token crosses every chip that holds a share of the weights
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from aicalc.errors import AicalcError, ParameterError

KINDS = {"class": "classes", "engine": "engines", "framework": "frameworks"}
DEFAULT_ENGINE = "generic"


@dataclass(frozen=True)
class Profile:
    """An efficiency profile (chip class, engine or framework) read from presets, each factor with its source."""

    id: str
    name: str
    factors: dict[str, float]
    sources: dict[str, str]
    options: dict = field(default_factory=dict)  # engine kernel mapping and dataflow flags


def _folders(kind: str) -> list[Path]:
    from aicalc.catalog.store import _roots

    return [r / KINDS[kind] for r in _roots() if (r / KINDS[kind]).is_dir()]


@cache
def ids(kind: str) -> tuple[str, ...]:
    return tuple(sorted({f.stem for d in _folders(kind) for f in d.glob("*.yaml")}))


@cache
def load(kind: str, profile_id: str) -> Profile:
    """The profile ``profile_id`` of ``kind`` (``class`` or ``engine``); a user folder overrides a built-in."""
    import re

    from aicalc.catalog.store import _short, load_yaml
    from aicalc.core.efficiency import Efficiency, factor_problem

    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", str(profile_id)):
        raise ParameterError({"class": "efficiency_class"}.get(kind, kind), _short(str(profile_id), 64),
                             f"is not a profile id (known: {', '.join(ids(kind))})")
    files = [d / f"{profile_id}.yaml" for d in _folders(kind) if (d / f"{profile_id}.yaml").is_file()]
    if not files:
        raise ParameterError({"class": "efficiency_class"}.get(kind, kind), profile_id,
                             f"is not a known {kind} profile (known: {', '.join(ids(kind))})")
    path = files[-1]
    data = load_yaml(path)
    if not isinstance(data, dict) or data.get("id") != profile_id:
        raise AicalcError(f"{path}: expected a mapping whose id is '{profile_id}'")
    known = set(Efficiency.__dataclass_fields__)
    def read(block, where: str):
        factors, sources = {}, {}
        for name, entry in (block or {}).items():
            if name not in known:
                raise AicalcError(f"{path}: {where}factor '{name}' is not an efficiency factor (known: "
                                  f"{', '.join(sorted(known))})")
            if not isinstance(entry, dict) or "value" not in entry or not entry.get("source"):
                raise AicalcError(f"{path}: {where}factor '{name}' needs a value and a source")
            v = entry["value"]
            problem = factor_problem(name, v)
            if problem:
                raise AicalcError(f"{path}: {where}factor '{name}' {problem}")
            factors[name], sources[name] = float(v), str(entry["source"])
        return factors, sources

    factors, sources = read(data.get("factors"), "")
    by_class = {}
    for cls, block in (data.get("by_class") or {}).items():  # an engine's kernels differ per backend (CUDA, Metal)
        by_class[cls] = read((block or {}).get("factors"), f"by_class.{cls}: ")
    options = {k: v for k, v in data.items() if k not in ("id", "name", "factors", "description", "by_class",
                                                          "extends")}
    options["by_class"] = by_class
    if data.get("extends"):  # a profile that differs from another in a few factors states only those
        base = load(kind, str(data["extends"]))
        factors, sources = {**base.factors, **factors}, {**base.sources, **sources}
        options = {**base.options, **options, "by_class": {**base.options.get("by_class", {}), **by_class}}
    return Profile(profile_id, str(data.get("name", profile_id)), factors, sources, options)


def chip_class(chip) -> str:
    """A chip's efficiency class: its preset's ``efficiency_class``, else from its kind and vendor."""
    if getattr(chip, "efficiency_class", None):
        return chip.efficiency_class
    if chip.kind in ("lpu", "wafer"):
        return "sram-dataflow"
    if chip.kind == "tpu":
        return "tpu"
    if chip.vendor == "Apple":
        return "apple"
    if chip.vendor == "AMD":
        return "amd-gpu"
    if chip.kind in ("npu", "soc"):
        return "edge-npu"
    return "datacenter-gpu"
