"""What every command returns: flat rows in base units, plus what the renderers need."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from aicalc.errors import ExitCode

SCHEMA_VERSION = 1


class Result:
    """What a command computed: its inputs, rows, warnings and exit code, before any rendering. A plain class (its
    methods compiled with the module, where a dataclass compiles them at import, docs/robustness.md)."""

    FIELDS = ("command", "inputs", "rows", "warnings", "exit_code", "title", "notes", "columns", "chart", "keep")

    def __init__(self, command: str, inputs: dict[str, Any], rows: list[dict[str, Any]] | Rows,
                 warnings: list[str] | None = None, exit_code: ExitCode = ExitCode.OK, title: str | None = None,
                 notes: list[str] | None = None, columns: list[str] | None = None, chart: Any = None,
                 keep: list[str] | None = None):
        self.command, self.inputs = command, inputs
        self.rows = rows  # Rows: kept as columns, so that a writer streams them
        self.warnings = [] if warnings is None else warnings
        self.exit_code, self.title = exit_code, title
        self.notes = [] if notes is None else notes  # footer lines for people (tables only)
        self.columns = columns  # which keys a table shows, in order (default: all)
        self.chart = chart  # optional callable(console) drawing a terminal chart under the table
        self.keep = keep  # columns a narrow table never leaves out: the one the rows are ranked by, the answers

    def __repr__(self) -> str:
        return f"Result({', '.join(f'{k}={getattr(self, k)!r}' for k in self.FIELDS)})"

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return tuple(getattr(self, k) for k in self.FIELDS) == tuple(getattr(other, k) for k in self.FIELDS)

    __hash__ = None  # mutable, as the dataclass was

    def envelope(self, *, lazy: bool = False) -> dict[str, Any]:
        """The JSON document; ``lazy``: ``rows`` as they are held (a :class:`Rows` is not turned into a list)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "command": self.command,
            "inputs": {k: _axis(v) if k in AXES else v for k, v in self.inputs.items()},
            "rows": self.rows if lazy or isinstance(self.rows, list) else list(self.rows),
            "warnings": self.warnings,
        }


class Rows(Sequence):
    """Rows kept as the numpy columns they come from (1-D, one length): a row's dict of plain Python values
    (what ``Table.rows()`` gives) is built only when it is read, so the JSON and CSV writers stream any number
    of rows in constant memory, :meth:`chunks` at a time."""

    def __init__(self, columns: dict[str, Any]):
        self.columns = dict(columns)
        self._n = len(next(iter(self.columns.values()))) if self.columns else 0

    def __len__(self) -> int:
        return self._n

    def keys(self) -> list[str]:
        """The keys of every row, in order."""
        return list(self.columns)

    def chunks(self, size: int = 2048) -> Iterator[list[list[Any]]]:
        """The rows ``size`` at a time, as one list of plain values per column."""
        for i in range(0, self._n, size):
            yield [v[i:i + size].tolist() for v in self.columns.values()]

    def arrays(self, size: int = 2048) -> Iterator[list[Any]]:
        """The rows ``size`` at a time, as one numpy slice per column."""
        for i in range(0, self._n, size):
            yield [v[i:i + size] for v in self.columns.values()]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        j = i + self._n if i < 0 else i
        if not 0 <= j < self._n:
            raise IndexError(i)
        return {k: v[j:j + 1].tolist()[0] for k, v in self.columns.items()}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        keys = self.keys()
        for cols in self.chunks():
            for values in zip(*cols, strict=True):
                yield dict(zip(keys, values, strict=True))

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, (list, Rows)) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Rows({self._n} rows: {', '.join(self.columns)})"


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
    from aicalc.sweep import Counts

    if type(value) is Counts:  # an arithmetic range of counts: ints already
        return value.copy()
    values = value if isinstance(value, (list, tuple)) else [value]
    kinds = set(map(type, values))
    if kinds == {int}:  # counts (an 80,000-point sweep: nothing to convert)
        return list(values)
    if kinds == {float} and all(map(float.is_integer, values)):  # a sweep of counts: as integers
        return list(map(int, values))
    if kinds <= {int, float}:  # numbers: as they are, whole floats as integers
        return [int(x) if type(x) is float and x.is_integer() else x for x in values]
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
    if set(map(type, out)) == {float} and all(map(float.is_integer, out)):  # a long sweep of counts: in C
        return list(map(int, out))
    return [int(x) if isinstance(x, float) and x.is_integer() else x for x in out]
