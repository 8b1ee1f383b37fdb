"""Typed results: numpy columns (one entry per configuration), with rows as dicts when wanted."""

from __future__ import annotations

from typing import Any


class Table:
    """An estimate over a sweep: every column a numpy array of one length (scalars broadcast).

    Subclasses declare the columns they always carry as annotations; ``columns`` holds them all, in order,
    ``warnings`` what the estimate wants a reader to know. ``rows()`` gives plain-Python dicts."""

    def __init__(self, columns: dict[str, Any], warnings: list[str] | None = None, **meta):
        import numpy as np

        n = max((np.size(v) for v in columns.values() if np.ndim(v)), default=1)
        self.columns = Columns({k: _column(v, n) for k, v in columns.items()})
        self.warnings = list(warnings or [])
        self.meta = meta
        for k, v in self.columns.items():
            setattr(self, k, v)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def __getitem__(self, key: str):
        return self.columns[key]

    def keys(self):
        return self.columns.keys()

    def rows(self) -> list[dict[str, Any]]:
        """One dict per configuration, plain Python values, JSON-ready: a non-finite number (an infinite time of
        a configuration that never runs, say) is None, as the command line's JSON writes it."""
        import math

        import numpy as np

        def plain(v):
            return None if isinstance(v, float) and not math.isfinite(v) else v

        lists = []
        for v in self.columns.values():
            values = v.tolist()
            # a column with no non-finite float among its values is as tolist() gives it (most are)
            done = v.dtype.kind in "biuUS" or v.dtype.kind == "f" and bool(np.isfinite(v).all())
            lists.append(values if done else [plain(x) for x in values])
        return [dict(zip(self.columns, row, strict=True)) for row in zip(*lists, strict=True)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} rows: {', '.join(self.columns)})"


class Columns(dict):
    """A table's columns: reads as the list of column names (``result.columns`` → ``['batch', 'context', …]``,
    ``== [...]``, ``columns[0]``, ``list(columns)``), and maps each name to its numpy column as before
    (``result.columns["batch"]``)."""

    @property
    def names(self) -> list[str]:
        return list(self)

    def __getitem__(self, key):
        if isinstance(key, int):  # position → name, as in a list of names
            return self.names[key]
        return super().__getitem__(key)

    def __eq__(self, other):
        if isinstance(other, (list, tuple)):
            return self.names == list(other)
        return dict.__eq__(self, other)

    __hash__ = None

    def __repr__(self) -> str:
        return repr(self.names)


class Block:
    """A table's columns cut in turn from one block of memory (``rows`` rows of ``n``, each row a column), to
    write them with ``out=``: one allocation instead of one per column. Fresh memory is paid for page by page
    as it is first written, and one large block pages in much faster than many 8 MB arrays (13 columns of
    10⁶ numbers: 14 ms against 22–28 ms on Linux, benchmarks/bench_kv_cache.py). Rows never taken cost
    nothing (they are never written); the block lives as long as any column does."""

    def __init__(self, n: int, rows: int, dtype="float64"):
        import numpy as np

        self._dtype = np.dtype(dtype)
        self._n = n
        self._rows = iter(np.empty((rows, n), dtype=dtype))

    def row(self):
        return next(self._rows)

    def full(self, value):
        """A column of ``value`` where its type is the block's (as :class:`Table` would fill it), else ``value``:
        one number seen as ``n`` (a read-only broadcast view, no memory written), not a row of the block."""
        import numpy as np

        v = np.asarray(value)
        if v.dtype != self._dtype:
            return value
        return np.broadcast_to(v, (self._n,))


def _column(v, n: int):
    """``v`` as a column of ``n``: one number (a replica count, the weights per device) a read-only broadcast view
    of it, as :meth:`Block.full` gives (docs/api.md), not ``n`` copies written (80,000 rows: 0.6 MB a column)."""
    import numpy as np

    a = np.asarray(v)
    if a.ndim == 0:
        return np.broadcast_to(a, (n,))
    return a.reshape(-1) if a.size == n else np.broadcast_to(a.reshape(-1), (n,)).copy()
