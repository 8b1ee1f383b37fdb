"""Numbers in: plain numbers, numpy arrays (a sweep is an array argument; arrays broadcast together) or
human strings (``"8k"``, ``"80GB"``), checked and named by parameter before any work starts."""

from __future__ import annotations

from aicalc.errors import ParameterError

MAX_POINTS = 10_000_000  # configurations one call may evaluate


def _parse(param: str, value, parser):
    import numpy as np

    if isinstance(value, str):
        from aicalc.sweep import parse_sweep

        return np.asarray(parse_sweep(value, lambda t: parser(t, param), param), dtype=np.float64)
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(param, value, "is not a number or an array of numbers") from None
    if arr.size == 0:
        raise ParameterError(param, value, "is empty")
    return arr


def positive(param: str, value, whole: bool = False, parser=None, minimum: float | None = None):
    """An array of finite numbers above zero (or at least ``minimum``); ``whole``: integers only."""
    import numpy as np

    from aicalc.units import parse_count

    arr = _parse(param, value, parser or parse_count)
    bad = ~np.isfinite(arr) | ((arr <= 0) if minimum is None else (arr < minimum))
    if bad.any():
        v = arr.reshape(-1)[np.flatnonzero(bad.reshape(-1))[0]]
        what = "positive" if minimum is None else f"at least {minimum:g}"
        raise ParameterError(param, v, f"must be a finite number, {what}")
    if whole and np.any(arr != np.round(arr)):
        v = arr.reshape(-1)[np.flatnonzero((arr != np.round(arr)).reshape(-1))[0]]
        raise ParameterError(param, v, "must be a whole number")
    return arr


def fraction(param: str, value) -> float:
    """A number in (0, 1] (``"90%"`` too)."""
    from aicalc.units import parse_fraction

    if isinstance(value, str):
        return parse_fraction(value, param)
    v = float(value)
    if not 0 < v <= 1:
        raise ParameterError(param, value, "must lie in (0, 1]")
    return v


def nbytes(param: str, value) -> float:
    """A byte count: a number or ``"80GB"`` / ``"80GiB"``."""
    from aicalc.units import parse_bytes

    if isinstance(value, str):
        return float(parse_bytes(value, param))
    v = float(value)
    import math

    if not (math.isfinite(v) and v >= 0):
        raise ParameterError(param, value, "must be a finite, non-negative number of bytes")
    return v


def seconds(param: str, value) -> float:
    from aicalc.units import parse_duration

    if isinstance(value, str):
        return parse_duration(value, param)
    v = float(value)
    import math

    if not (math.isfinite(v) and v > 0):
        raise ParameterError(param, value, "must be a positive, finite number of seconds")
    return v


def broadcast(**arrays):
    """The arrays broadcast to one flat length; too many points or shapes that do not broadcast: an error."""
    import math

    import numpy as np

    try:
        shape = np.broadcast_shapes(*(np.shape(a) for a in arrays.values()))
    except ValueError:
        sizes = ", ".join(f"{k} ({np.size(a)})" for k, a in arrays.items() if np.ndim(a))
        raise ParameterError(next(iter(arrays)), "…", f"and the other arrays do not broadcast together: {sizes}") \
            from None
    n = math.prod(shape)
    if n > MAX_POINTS:
        raise ParameterError(next(iter(arrays)), "…", f"with the other arrays makes {n:,} configurations; "
                             f"the limit is {MAX_POINTS:,}")
    return {k: np.broadcast_to(np.asarray(a, dtype=np.float64), shape).reshape(-1) for k, a in arrays.items()}
