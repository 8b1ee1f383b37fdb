"""Sweep syntax: a numeric option takes one value, a list or a range.

``8`` · ``1,8,64`` · ``1k:128k:x2`` (geometric, ×2 per step) · ``1:64:+8`` (arithmetic, +8 per step).
Ranges include the stop value when a step lands on it. Each element is read by the option's own unit
parser, so ``4k:32k:x2`` works for token counts and ``40GB,80GB`` for sizes.
"""

from __future__ import annotations

from collections.abc import Callable

from aicalc.errors import AicalcError

MAX_POINTS = 10_000_000


def parse_sweep(text: str, parse: Callable[[str], float], what: str) -> list[float]:
    """Expand ``text`` into the list of values it names (order kept, duplicates kept)."""
    text = str(text).strip()
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3 or parts[2][:1] not in ("x", "+", "*"):
            raise AicalcError(f"{what}: a range is START:STOP:xFACTOR or START:STOP:+STEP, got '{text}'")
        start, stop = parse(parts[0]), parse(parts[1])
        if stop < start:
            raise AicalcError(f"{what}: range stop {parts[1]} is below its start {parts[0]}")
        step_text = parts[2][1:]
        values: list[float] = []
        if parts[2][0] in "x*":
            try:
                factor = float(step_text)
            except ValueError:
                raise AicalcError(f"{what}: cannot read the factor in '{text}'") from None
            if not factor > 1:
                raise AicalcError(f"{what}: a geometric factor must exceed 1, got '{text}'")
            v = start
            while v <= stop * (1 + 1e-12):
                values.append(v)
                v *= factor
                if len(values) > MAX_POINTS:
                    break
        else:
            step = parse(step_text)
            n = int((stop - start) / step + 1e-9) + 1
            if n > MAX_POINTS:
                raise AicalcError(f"{what}: '{text}' has more than {MAX_POINTS:,} points")
            values = [start + i * step for i in range(n)]
        if len(values) > MAX_POINTS:
            raise AicalcError(f"{what}: '{text}' has more than {MAX_POINTS:,} points")
        return values
    return [parse(item) for item in text.split(",") if item.strip()] or _empty(what)


def int_sweep(text: str, what: str) -> list[int]:
    """A sweep of whole numbers (counts, batch sizes, TP degrees): every expanded value must be whole, so a
    geometric range such as ``1:10:x1.5`` is rejected rather than yielding 2.25."""
    from aicalc.units import parse_int

    return [parse_int(v, what) for v in parse_sweep(str(text), lambda t: parse_int(t, what), what)]


def _empty(what: str) -> list[float]:
    raise AicalcError(f"{what}: no value given")


def grid(**axes):
    """Cartesian product of named 1-D value lists → dict of equally long flat numpy arrays.

    The first axis varies slowest, so rows read like nested loops in the order the options are given.
    """
    import numpy as np

    names = list(axes)
    arrays = [np.asarray(axes[n], dtype=np.float64) for n in names]
    size = 1
    for a in arrays:
        size *= a.size
    if size > MAX_POINTS:
        raise AicalcError(f"the sweep has {size:,} points; the limit is {MAX_POINTS:,}")
    mesh = np.meshgrid(*arrays, indexing="ij") if arrays else []
    return {n: m.ravel() for n, m in zip(names, mesh, strict=True)}


def sweep(text, what: str) -> list[float]:
    """A sweep of counts in any unit parse_count reads (``4k``, ``1:64:x2``, ``1,8``); numbers pass through."""
    from aicalc.units import parse_count

    if isinstance(text, (int, float)) and not isinstance(text, bool):
        text = repr(text)
    if isinstance(text, (list, tuple)):
        text = ",".join(str(t) for t in text)
    return parse_sweep(str(text), lambda t: parse_count(t, what), what)
