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
                values = Counts(range(start, start + n * step, step))
            elif float(start).is_integer() and float(step).is_integer() and abs(start) + n * step < 2**53:
                values = list(map(float, range(int(start), int(start) + n * int(step), int(step))))  # exact too
            else:
                values = [start + i * step for i in range(n)]
        return values
    if text.count(",") >= MAX_POINTS:
        raise _too_many(what, text[:40] + "…", text.count(",") + 1)
    return [parse(item) for item in text.split(",") if item.strip()] or _empty(what)


class Counts(list):
    """The values of an arithmetic range of whole numbers (``1:80000:+1``): a list of ints that keeps the ``range``
    it was built from, so that its readers (the grid, the JSON echo of the inputs) take its values as ints without
    looking at each (80,000 of them: ~1.5 ms a look) and make an array of them with ``numpy.arange``. Read it; a
    list changed after it was built is the caller's own (``list(counts)``)."""

    __slots__ = ("range",)

    def __init__(self, values: range):
        super().__init__(values)
        self.range = values

    def copy(self) -> Counts:
        new = Counts.__new__(Counts)
        list.__init__(new, self)
        new.range = self.range
        return new

    def array(self, dtype):
        """The values as a numpy array of ``dtype``."""
        import numpy as np

        r = self.range
        return np.arange(r.start, r.stop, r.step, dtype=dtype)


def int_sweep(text: str, what: str) -> list[int]:
    """A sweep of whole numbers (counts, batch sizes, TP degrees): every expanded value must be whole, so a
    geometric range such as ``1:10:x1.5`` is rejected rather than yielding 2.25."""
    from aicalc.units import parse_int

    values = parse_sweep(str(text), lambda t: parse_int(t, what), what)
    if ":" not in str(text):  # a list: each item was read by parse_int already
        return [int(v) for v in values]
    # a range: its ends were read (and capped) by parse_int; the values between them need only be whole (read as
    # text again, 80,000 of them took half a second)
    if type(values) is Counts or set(map(type, values)) == {int}:  # an arithmetic range of whole numbers
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
    arrays = [axes[n].array(np.float64) if type(axes[n]) is Counts else np.asarray(axes[n], dtype=np.float64)
              for n in names]
    size = 1
    for a in arrays:
        size *= a.size
    if size > MAX_POINTS:
        axes_text = " × ".join(f"{n} {a.size:,}" for n, a in zip(names, arrays, strict=True) if a.size > 1)
        raise AicalcError(f"the sweep has {size:,} points ({axes_text}); a sweep is limited to {MAX_POINTS:,} points")
    if size >= LONG_SWEEP:
        keep_freed_memory()
    mesh = np.meshgrid(*arrays, indexing="ij") if arrays else []
    return {n: m.ravel() for n, m in zip(names, mesh, strict=True)}


LONG_SWEEP = 10_000  # points from which a command's arrays are large enough to be worth keeping the memory freed


def keep_freed_memory() -> None:
    """Have glibc's allocator keep the memory the process frees (up to 64 MiB at the top of its heap) instead of
    giving it back to the kernel at once, and serve arrays up to 32 MiB from that heap. By default a freed array of
    128 KiB or more is unmapped (the threshold then rises to its size) and free memory over twice that threshold
    at the heap's top is released, so a long sweep's temporaries, freed and allocated again chunk by chunk, are
    paged in afresh each time: 80,000 rows of ``serve`` made ~8,000 such page faults, 37 MB released and taken
    again (``mallopt(3)``: M_TRIM_THRESHOLD, M_MMAP_THRESHOLD and their dynamic adjustment). Elsewhere than glibc
    (no ``mallopt``), nothing."""
    import ctypes  # (numpy has imported it already)

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD (setting it turns the dynamic thresholds off,
    mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD  so this one is set too: 32 MiB is the most glibc takes on 64 bits)


def sweep(text, what: str) -> list[float]:
    """A sweep of counts in any unit parse_count reads (``4k``, ``1:64:x2``, ``1,8``); numbers pass through."""
    from aicalc.units import parse_count

    if isinstance(text, (int, float)) and not isinstance(text, bool):
        text = repr(text)
    if isinstance(text, (list, tuple)):
        text = ",".join(str(t) for t in text)
    return parse_sweep(str(text), lambda t: parse_count(t, what), what)
