"""Numbers in: plain numbers, numpy arrays (a sweep is an array argument; arrays broadcast together) or
human strings (``"8k"``, ``"80GB"``), checked and named by parameter before any work starts."""

from __future__ import annotations

import math
import sys

from aicalc.errors import AicalcError, ParameterError

MAX_POINTS = 1_000_000  # configurations one call may evaluate (about 8 MB per column)

# Physical caps (docs/robustness.md): a value above one is a typo or a hostile input, not a deployment, and
# beyond them the arithmetic would leave float64's exact integers and print wrong numbers. Each cap is
# ~1000x the largest real case. The command line applies the same table to its integer and float options.
_DEVICES = 2**20  # 1,048,576 chips; the largest clusters hold ~2·10^5
_TOKENS = 2**30  # 1.07·10^9 tokens in one sequence; the longest contexts are ~10^7
CAPS: dict[str, tuple[float, str]] = {
    "tp": (_DEVICES, "devices"), "pp": (_DEVICES, "devices"), "dp": (_DEVICES, "devices"),
    "cp": (_DEVICES, "devices"), "ep": (_DEVICES, "devices"), "chips": (_DEVICES, "chips"),
    "batch": (2**24, "sequences"), "micro_batch": (2**24, "sequences"), "microbatches": (2**24, "micro-batches"),
    "global_batch": (2**30, "sequences"), "concurrency": (2**24, "requests"), "max_batch": (2**24, "sequences"),
    "context": (_TOKENS, "tokens"), "seq": (_TOKENS, "tokens"), "prompt": (_TOKENS, "tokens"),
    "gen": (_TOKENS, "tokens"), "block_size": (_TOKENS, "tokens"), "tokens": (1e18, "tokens"),
    "requests_per_day": (1e15, "requests"), "lora_rank": (2**16, ""), "group_size": (2**20, "weights"),
    "virtual_stages": (2**10, "stages"), "interleave": (2**10, "stages"), "top": (10**4, "rows"),
    "price": (1e6, "USD per chip-hour"), "years": (1e3, "years"),
    "overhead": (2.0**60, "bytes"), "budget": (2.0**70, "bytes"), "limit": (2.0**70, "bytes"),
    "max_ttft": (1e9, "seconds"), "max_tpot": (1e9, "seconds"), "dp_bandwidth": (1e18, "bytes/s"),
    "achieved": (1e21, "FLOP/s"), "total_chips": (_DEVICES, "chips"), "prefill_tp": (_DEVICES, "devices"),
    "decode_tp": (_DEVICES, "devices"), "etp": (_DEVICES, "devices"),
    "first_stage_layers": (2**20, "layers"), "last_stage_layers": (2**20, "layers"),
    "redundant_experts": (2**20, "experts"),
}
INT_CAP = 2**40  # any other integer option
# Least values of the command line's integer and float options (the library checks its own arguments).
MINIMA: dict[str, float] = {
    **dict.fromkeys(("tp", "pp", "dp", "cp", "ep", "chips", "batch", "microbatches", "lora_rank", "group_size",
                     "virtual_stages", "interleave", "top", "block_size", "etp"), 1),
    "zero": 0, "first_stage_layers": 0, "last_stage_layers": 0, "redundant_experts": 0,
}


def _fmt(v: float) -> str:
    """A number as an error message shows it: exact when it is a modest whole number, else 6 digits."""
    import math

    if not math.isfinite(v):
        return str(v)
    return f"{int(v):,}" if float(v).is_integer() and abs(v) < 1e15 else f"{v:.6g}"


def _safe(value):
    """A value as a ParameterError may show it: modest numbers as they are, anything else as short text."""
    import math

    if isinstance(value, bool) or (isinstance(value, (int, float)) and abs(value) < 10**15):
        return value
    if isinstance(value, float):
        return _fmt(value) if math.isfinite(value) or math.isinf(value) else "nan"
    if isinstance(value, int):
        try:
            return f"{float(value):.6g}"
        except OverflowError:
            return ("-" if value < 0 else "") + "a number of more than 300 digits"
    text = str(value) if not isinstance(value, (list, tuple, dict)) or len(value) < 10 else type(value).__name__
    return text if len(text) <= 40 else text[:39] + "…"


def cap(param: str, value: float):
    """``value`` unless it lies above the cap of ``param`` (:data:`CAPS`): then a ParameterError that names
    the cap."""
    limit = CAPS.get(param)
    if limit is not None and value > limit[0]:
        unit = f" {limit[1]}" if limit[1] else ""
        raise ParameterError(param, _fmt(value), f"is above aicalc's cap of {_fmt(limit[0])}{unit} "
                             "(see docs/robustness.md)")
    return value


# numpy kinds that are no numbers: the value would be read as something else (a date as days since 1970)
_NOT_NUMBERS = {"c": "complex numbers", "M": "dates (datetime64)", "m": "time spans (timedelta64)",
                "b": "true/false values", "U": "texts", "S": "bytes", "V": "records"}


def _kind(param: str, value) -> None:
    """Refuse what numpy would turn into numbers without meaning them: complex numbers, dates, booleans, masked
    arrays (the mask would be ignored), arrays of objects other than plain numbers, arrays of more than one
    dimension (a sweep is one-dimensional: a 3×3 array would be 9 rows)."""
    import numpy as np

    if isinstance(value, (bool, np.bool_)):
        raise ParameterError(param, str(bool(value)).lower(), "is true or false, not a number")
    if isinstance(value, (int, float)):
        return
    ma = sys.modules.get("numpy.ma")  # no masked array exists before numpy.ma is imported (importing it costs ~10 ms)
    if ma is not None and isinstance(value, ma.MaskedArray):
        raise ParameterError(param, "a masked array", "is refused: its mask would be ignored (pass the values to use)")
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError, OverflowError):
        return  # a ragged or unreadable value: reported by the conversion
    if arr.dtype.kind in _NOT_NUMBERS:
        raise ParameterError(param, _safe(value), f"holds {_NOT_NUMBERS[arr.dtype.kind]}, not numbers")
    if arr.dtype.kind == "O" and not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                         for x in arr.reshape(-1)[:MAX_POINTS + 1]):
        raise ParameterError(param, _safe(value), "holds objects that are not plain numbers")
    if arr.ndim > 1:
        raise ParameterError(param, f"an array of shape {arr.shape}", "must be one number or a one-dimensional "
                             "array (arrays broadcast together into rows)")


def _parse(param: str, value, parser):
    import numpy as np

    if isinstance(value, str):
        from aicalc.sweep import parse_sweep

        values = _read_unit(param, value, lambda text, p: parse_sweep(text, lambda t: parser(t, p), p))
        return np.asarray(values, dtype=np.float64)
    _kind(param, value)
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(param, _safe(value), "is not a number or an array of numbers") from None
    except OverflowError:
        raise ParameterError(param, _safe(value), f"is above aicalc's cap of {_fmt(CAPS.get(param, (INT_CAP,))[0])} "
                             "(see docs/robustness.md)") from None
    if arr.size == 0:
        raise ParameterError(param, _safe(value), "is empty")
    return arr


def positive(param: str, value, whole: bool = False, parser=None, minimum: float | None = None):
    """An array of finite numbers above zero (or at least ``minimum``); ``whole``: integers only."""
    import numpy as np

    if type(value) in (int, float):  # one plain number (no bool) that passes: the checks below without numpy's
        v = float(value) if type(value) is float or -(2**1000) < value < 2**1000 else math.nan
        if math.isfinite(v) and (v > 0 if minimum is None else v >= minimum) and (not whole or v.is_integer()):
            cap(param, v)  # (any other value takes the path below, which names what is wrong with it)
            return np.array(v)
    from aicalc.units import parse_count

    arr = _parse(param, value, parser or parse_count)
    if arr.size > 4096 and _plain(arr, minimum, whole, CAPS.get(param, (np.inf,))[0]):
        return arr  # a large sweep in range: checked by reductions, no per-element temporaries
    bad = ~np.isfinite(arr) | ((arr <= 0) if minimum is None else (arr < minimum))
    if bad.any():
        v = float(arr.reshape(-1)[np.flatnonzero(bad.reshape(-1))[0]])
        what = "positive" if minimum is None else f"at least {minimum:g}"
        raise ParameterError(param, v if np.isfinite(v) else str(v), f"must be a finite number, {what}")
    cap(param, float(arr.max()))
    if whole and np.any(arr != np.round(arr)):
        v = arr.reshape(-1)[np.flatnonzero((arr != np.round(arr)).reshape(-1))[0]]
        raise ParameterError(param, v, "must be a whole number")
    return arr


def _plain(arr, minimum, whole: bool, limit: float) -> bool:
    """True when every value of ``arr`` is finite, above zero (or at least ``minimum``), within ``limit`` and, with
    ``whole``, a whole number: what :func:`positive` checks, by a minimum, a maximum and blocks small enough to stay
    in cache. False sends :func:`positive` to its element-wise checks, which name the first offending value."""
    import numpy as np

    lo, hi = arr.min(), arr.max()  # nan propagates: lo is nan and fails the test
    if not ((lo > 0 if minimum is None else lo >= minimum) and hi <= limit and np.isfinite(hi)):
        return False
    if whole:
        flat = arr.reshape(-1)
        step = 1 << 15
        for i in range(0, flat.size, step):
            block = flat[i:i + step]
            if not np.array_equal(block, np.round(block)):
                return False
    return True


def whole(param: str, value) -> int:
    """One whole number >= 1 within the cap of ``param`` (a device count, a batch, ``top``)."""
    return int(single(param, value, whole=True))


def single(param: str, value, whole: bool = False) -> float:
    """One finite number above zero within the cap of ``param``: a sweep where the estimate takes one value is
    refused, never read as its first value."""
    arr = positive(param, value, whole=whole)
    if arr.size != 1:
        raise ParameterError(param, _safe(value), "takes one number, not a sweep")
    return float(arr.reshape(-1)[0])


def count(param: str, value, minimum: int = 1) -> int:
    """One whole number of at least ``minimum`` within the cap of ``param`` (``lora_rank``, ``microbatches``), human
    strings (``"4k"``) read as the command line reads them."""
    arr = positive(param, value, whole=True, minimum=minimum)
    if arr.size != 1:
        raise ParameterError(param, _safe(value), "takes one number, not a sweep")
    return int(arr.reshape(-1)[0])


def share(param: str, value) -> float:
    """A share in [0, 1) (``prefix_hit``, ``dropout``): a number, or text as the command line reads it
    (``"0.75"``, ``"75%"``)."""
    import math

    if isinstance(value, str):
        t = value.strip()
        try:
            v = float(t[:-1]) / 100 if t.endswith("%") else float(t) if len(t) <= 64 else math.nan
        except ValueError:
            raise ParameterError(param, _safe(value), "is not a share (examples: 0.75, 75%)") from None
    else:
        _kind(param, value)
        v = _number(param, value)
    if not 0 <= v < 1:  # False for nan
        raise ParameterError(param, _safe(value), "must lie in [0, 1)")
    return v


def fraction(param: str, value) -> float:
    """A number in (0, 1] (``"90%"`` too)."""
    from aicalc.units import parse_fraction

    if isinstance(value, str):
        from aicalc.errors import AicalcError

        try:
            return parse_fraction(value, param)
        except AicalcError:  # named as a parameter, so the command line names its flag
            raise ParameterError(param, _safe(value), "is not a fraction in (0, 1] (examples: 0.9, 90%)") from None
    v = _number(param, value)
    if not 0 < v <= 1:
        raise ParameterError(param, _safe(value), "must lie in (0, 1]")
    return v


def nbytes(param: str, value) -> float:
    """A byte count: a number or ``"80GB"`` / ``"80GiB"``."""
    from aicalc.units import parse_bytes

    if isinstance(value, str):
        return cap(param, float(_read_unit(param, value, parse_bytes)))
    v = _number(param, value)
    import math

    if not (math.isfinite(v) and v >= 0):
        raise ParameterError(param, _safe(value), "must be a finite, non-negative number of bytes")
    return cap(param, v)


def seconds(param: str, value) -> float:
    from aicalc.units import parse_duration

    if isinstance(value, str):
        return cap(param, _read_unit(param, value, parse_duration))
    v = _number(param, value)
    import math

    if not (math.isfinite(v) and v > 0):
        raise ParameterError(param, _safe(value), "must be a positive, finite number of seconds")
    return cap(param, v)


def _read_unit(param: str, text: str, parse):
    """``parse(text, param)``, a text the parser cannot read raised as a ParameterError naming ``param`` (the
    problem says what it expected: ``max_tpot=50 parsecs is not readable (examples: 200ms, 1.5s)``)."""
    import re

    try:
        return parse(text, param)
    except ParameterError:
        raise
    except AicalcError as e:
        msg = str(e)
        hint = re.search(r"\((examples?: [^)]*)\)\s*$", msg)
        if hint and msg.startswith("cannot read"):
            problem = f"cannot be read ({hint[1]})"
        else:  # the parser's own words, less the name and the value the error repeats
            for prefix in (f"{param}: ", f"{param} "):
                msg = msg.removeprefix(prefix)
            problem = msg.replace(f", got '{text}'", "")
        raise ParameterError(param, _safe(text), problem) from None


def _number(param: str, value) -> float:
    """One plain number (not a bool, not an array, not text that is no number, not a complex number or date)."""
    import numpy as np

    try:
        if isinstance(value, (bool, np.bool_, complex, np.complexfloating, np.datetime64, np.timedelta64)):
            raise TypeError
        if isinstance(value, np.ndarray) and (value.ndim or value.dtype.kind not in "iuf"):
            raise TypeError
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise ParameterError(param, _safe(value), "is not a number") from None


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


def bound_options(command) -> None:
    """Hold every integer and float option of a click command tree (the command line) to :data:`CAPS`, or
    :data:`INT_CAP` for an option the table does not name, and to finite values, as the option is parsed:
    a value outside is a ParameterError naming the flag."""
    todo = [command]
    while todo:
        cmd = todo.pop()
        todo += list((getattr(cmd, "commands", None) or {}).values())
        for p in cmd.params:
            if getattr(p.type, "name", None) in ("int", "integer", "float") and not getattr(p, "multiple", False):
                p.callback = _bounded(p.name, p.callback)
            elif p.name == "eff":
                p.callback = _bounded_overrides(p.name, p.callback)


def _bounded_overrides(name: str, callback):
    """``--eff KEY=VALUE``: each VALUE a finite, non-negative number within INT_CAP (the factors' own ranges
    are the efficiency model's to check)."""

    def check(ctx, param, value):
        for item in value or ():
            for part in str(item).split(","):
                key, sep, text = part.partition("=")
                try:
                    v = float(text) if sep and len(text) <= 64 else 0.0
                except ValueError:
                    continue  # not a number: the option's own parser reports it
                if not (0 <= v <= INT_CAP):
                    raise ParameterError(name, part.strip()[:60], "must set a finite, non-negative number")
        return value if callback is None else callback(ctx, param, value)

    return check


def _bounded(name: str, callback):
    def check(ctx, param, value):
        if value is not None:
            check_number(name, value)
        return value if callback is None else callback(ctx, param, value)

    return check


def check_number(param: str, value) -> None:
    """A single option value: a finite number, at least its :data:`MINIMA` and within its cap in magnitude
    (other negative values are the library's to judge)."""
    import math

    try:
        v = float(value)
    except OverflowError:
        v = math.inf
    if math.isnan(v):
        raise ParameterError(param, "nan", "is not a number")
    if param in MINIMA and v < MINIMA[param]:
        raise ParameterError(param, _safe(value), f"must be at least {MINIMA[param]}")
    limit = CAPS.get(param, (INT_CAP, ""))[0]
    if abs(v) > limit:
        shown = _fmt(v) if math.isfinite(v) else (f"{str(value)[:12]}…" if len(str(value)) > 15 else str(value))
        unit = f" {CAPS[param][1]}" if CAPS.get(param, ("", ""))[1] else ""
        where = f"above aicalc's cap of {_fmt(limit)}{unit}" if v > 0 else f"below -{_fmt(limit)}{unit}"
        raise ParameterError(param, shown, f"is {where} (see docs/robustness.md)")


def distinct(values) -> list:
    """The distinct values of an array, ascending. A small array by a set: ``np.unique`` imports ``numpy.ma`` on
    its first call, a few tens of milliseconds of a one-off query (docs/robustness.md, start-up)."""
    import numpy as np

    a = np.asarray(values)
    if a.ndim == 1 and a.size and a.strides[0] == 0:  # one value broadcast (ravel would copy it out)
        a = a[:1]
    a = np.ravel(a)
    if a.size <= 4096:
        return sorted(set(a.tolist()))
    lo, hi = a.min(), a.max()  # a sweep's constant columns (one tp, one pp) need no sort of a million values
    return [lo.item()] if lo == hi else np.unique(a).tolist()
