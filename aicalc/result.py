"""What every command returns: flat rows in base units, plus what the renderers need."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aicalc.errors import ExitCode

SCHEMA_VERSION = 1


@dataclass
class Result:
    """What a command computed: its inputs, rows, warnings and exit code, before any rendering."""

    command: str
    inputs: dict[str, Any]
    rows: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    exit_code: ExitCode = ExitCode.OK
    title: str | None = None
    notes: list[str] = field(default_factory=list)  # footer lines for people (tables only)
    columns: list[str] | None = None  # which keys a table shows, in order (default: all)
    chart: Any = None  # optional callable(console) drawing a terminal chart under the table
    keep: list[str] | None = None  # columns a narrow table never leaves out: the one the rows are ranked by, the answers

    def envelope(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "command": self.command,
            "inputs": {k: _axis(v) if k in AXES else v for k, v in self.inputs.items()},
            "rows": self.rows,
            "warnings": self.warnings,
        }


def rows_from_columns(columns: dict[str, Any]) -> list[dict[str, Any]]:
    """Numpy columns of equal length → list of flat dicts with plain Python numbers."""
    import numpy as np

    names = list(columns)
    n = max((np.size(v) for v in columns.values()), default=0)
    cols = []
    for name in names:
        v = columns[name]
        arr = np.broadcast_to(np.asarray(v), (n,)) if np.ndim(v) <= 1 else np.asarray(v).ravel()
        cols.append(arr.tolist())
    return [dict(zip(names, values, strict=True)) for values in zip(*cols, strict=True)]


# inputs that are sweep axes: echoed in JSON as a list of numbers in every command (``"batch": [1, 8]``), however
# the command received them ("1,8", 8, [1.0, 8.0])
AXES = ("batch", "seq", "context", "prompt", "gen", "tp", "pp", "dp", "cp", "chips", "concurrency", "micro_batch",
        "global_batch", "zero")


def _axis(value):
    if value is None or isinstance(value, bool):
        return value
    values = value if isinstance(value, (list, tuple)) else [value]
    out = []
    for v in values:
        if isinstance(v, str):
            from aicalc.errors import AicalcError
            from aicalc.sweep import sweep

            try:
                out += sweep(v, "input")
            except AicalcError:  # not a count sweep ("max", "auto"): echoed as given
                return value
        elif hasattr(v, "item"):
            out.append(v.item())
        else:
            out.append(v)
    return [int(x) if isinstance(x, float) and x.is_integer() else x for x in out]
