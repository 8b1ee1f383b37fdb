"""Sweep syntax: a numeric option takes one value, a list or a range.

``8`` · ``1,8,64`` · ``1k:128k:x2`` (geometric, ×2 per step) · ``1:64:+8`` (arithmetic, +8 per step).
Ranges include the stop value when a step lands on it. Each element is read by the option's own unit
parser, so ``4k:32k:x2`` works for token counts and ``40GB,80GB`` for sizes.
"""

from __future__ import annotations

from collections.abc import Callable

from aicalc.errors import AicalcError

MAX_POINTS = 100_000  # values of one sweep, and points of the grid of all of them (docs/robustness.md)


def _too_many(what: str, text: str, n: float) -> AicalcError:
    count = f"{n:,.0f}" if n < 1e18 else "more than 10^18"  # NaN compares False: "more than"
    return AicalcError(f"{what}: '{text}' has {count} points; a sweep is limited to {MAX_POINTS:,} points")


def parse_sweep(text: str, parse: Callable[[str], float], what: str) -> list[float]:
    """Expand ``text`` into the list of values it names (order kept, duplicates kept); the number of values
    is known, and checked against MAX_POINTS, before any is built."""
    import math

    text = str(text).strip()
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3 or parts[2][:1] not in ("x", "+", "*"):
            raise AicalcError(f"{what}: a range is START:STOP:xFACTOR or START:STOP:+STEP, got '{text[:80]}'")
        start, stop = parse(parts[0]), parse(parts[1])
        if stop < start:
            raise AicalcError(f"{what}: range stop {parts[1]} is below its start {parts[0]}")
        step_text = parts[2][1:]
        if parts[2][0] in "x*":
            try:
                factor = float(step_text) if len(step_text) <= 64 else math.nan
            except ValueError:
                raise AicalcError(f"{what}: cannot read the factor in '{text}'") from None
            if not (factor > 1 and math.isfinite(factor)):
                raise AicalcError(f"{what}: a geometric factor must be a finite number above 1, got '{text}'")
            n = math.floor((math.log(stop) - math.log(start)) / math.log(factor) + 1e-9) + 1
            if n > MAX_POINTS:
                raise _too_many(what, text, n)
            values: list[float] = []
            v = start
            while v <= stop * (1 + 1e-12) and len(values) <= n:
                values.append(v)
                v *= factor
        else:
            step = parse(step_text)
            if not step > 0:
                raise AicalcError(f"{what}: an arithmetic step must be positive, got '{text}'")
            n = (stop - start) / step
            if not n < MAX_POINTS:  # also NaN and inf
                raise _too_many(what, text, math.floor(n + 1e-9) + 1 if math.isfinite(n) else math.inf)
            n = math.floor(n + 1e-9) + 1
            if type(start) is int and type(step) is int:  # counts (int_sweep): the same values, built in C
                values = list(range(start, start + n * step, step))
            elif float(start).is_integer() and float(step).is_integer() and abs(start) + n * step < 2**53:
                values = list(map(float, range(int(start), int(start) + n * int(step), int(step))))  # exact too
            else:
                values = [start + i * step for i in range(n)]
        return values
    if text.count(",") >= MAX_POINTS:
        raise _too_many(what, text[:40] + "…", text.count(",") + 1)
    return [parse(item) for item in text.split(",") if item.strip()] or _empty(what)


def int_sweep(text: str, what: str) -> list[int]:
    """A sweep of whole numbers (counts, batch sizes, TP degrees): every expanded value must be whole, so a
    geometric range such as ``1:10:x1.5`` is rejected rather than yielding 2.25."""
    from aicalc.units import parse_int

    values = parse_sweep(str(text), lambda t: parse_int(t, what), what)
    if ":" not in str(text):  # a list: each item was read by parse_int already
        return [int(v) for v in values]
    # a range: its ends were read (and capped) by parse_int; the values between them need only be whole (read as
    # text again, 80,000 of them took half a second)
    if set(map(type, values)) == {int}:  # an arithmetic range of whole numbers
        return values
    out = []
    for v in values:
        if v != int(v):
            raise AicalcError(f"{what} must be a whole number, got '{v}'")
        out.append(int(v))
    return out


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
        axes_text = " × ".join(f"{n} {a.size:,}" for n, a in zip(names, arrays, strict=True) if a.size > 1)
        raise AicalcError(f"the sweep has {size:,} points ({axes_text}); a sweep is limited to {MAX_POINTS:,} points")
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
