"""Human units in and out.

Input: bytes (`80GB` = 80·10⁹, `80GiB` = 80·2³⁰, pydantic.ByteSize's units), token counts
(`4k` = 4000, `128k`, `1M`, `1.4T`, `4Ki` = 4096), rates (`3.35TB/s`, `989TFLOPS`), durations
(`200ms`, `2s`), fractions (`0.9`, `90%`). Every parser rejects zero, negative and non-finite values.
Output: ``fmt_*`` helpers render base units for people.
"""

from __future__ import annotations

import math
import re

from aicalc.errors import AicalcError

_DECIMAL = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}
_BINARY = {"ki": 2.0**10, "mi": 2.0**20, "gi": 2.0**30, "ti": 2.0**40}
# One unambiguous pattern (no nested or overlapping repeats, so no catastrophic backtracking), ASCII digits only.
_NUM = r"((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e[+-]?[0-9]+)?)"
MAX_TEXT = 64  # characters in one quantity: longer is not a number a person wrote


def _quantity(text: str, units) -> tuple[str, str] | None:
    r"""``re.fullmatch(_NUM + r"\s*(unit)?", text)``'s (number, unit or "") for a unit among ``units``, read
    without compiling the pattern (~2 M instructions each, most of a one-off query's parsing): the number is the
    longest prefix _NUM reads (no shorter one leaves a text a unit could begin), then whitespace, then a unit
    or nothing. tests/test_units.py holds it to the pattern."""
    number = _number(text)
    if number is None:
        return None
    unit = text[len(number):].lstrip()  # str.lstrip and re's \s skip the same (Unicode) whitespace
    return (number, unit) if unit == "" or unit in units else None


def _number(text: str) -> str | None:
    """The prefix of ``text`` that _NUM matches, greedily; None when it does not begin with a number."""
    n = len(text)
    i = 0
    while i < n and "0" <= text[i] <= "9":
        i += 1
    if i < n and text[i] == ".":
        j = i + 1
        while j < n and "0" <= text[j] <= "9":
            j += 1
        if i == 0 and j == 1:  # "." with no digit on either side
            return None
        i = j
    elif i == 0:
        return None
    if i < n and text[i] == "e":
        j = i + 1 + (i + 1 < n and text[i + 1] in "+-")
        k = j
        while k < n and "0" <= text[k] <= "9":
            k += 1
        if k > j:  # an exponent only with its digits
            i = k
    return text[:i]


def _text(text, what: str, example: str) -> str:
    s = str(text).strip()
    if len(s) > MAX_TEXT:
        raise AicalcError(f"cannot read {what} '{s[:20]}…' ({len(s):,} characters; examples: {example})")
    return s


def _positive(value: float, text: str, what: str) -> float:
    if not math.isfinite(value) or value <= 0:
        raise AicalcError(f"{what} must be a positive finite number, got '{text}'")
    from aicalc.api.inputs import cap

    return cap(what.lstrip("-").replace("-", "_"), value)  # the documented cap of the option, if it has one


def parse_count(text: str, what: str = "count") -> float:
    """Token or item count: ``4k`` = 4000, ``1M``, ``1.4T``, ``4Ki`` = 4096, plain numbers."""
    m = _quantity(_text(text, what, "4096, 4k").lower(), _COUNT_UNITS)
    if not m:
        raise AicalcError(f"cannot read {what} '{text}' (examples: 4096, 4k, 128k, 4Ki, 1.4T)")
    scale = _BINARY.get(m[1]) or _DECIMAL[m[1]]
    return _positive(float(m[0]) * scale, text, what)


_COUNT_UNITS = ("ki", "mi", "gi", "ti", "k", "m", "b", "g", "t")


def parse_int(text: str, what: str = "count") -> int:
    value = parse_count(text, what)
    if value != int(value):
        raise AicalcError(f"{what} must be a whole number, got '{text}'")
    return int(value)


_BYTES = {"": 1.0, "b": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15, "eb": 1e18,
          "kib": 2.0**10, "mib": 2.0**20, "gib": 2.0**30, "tib": 2.0**40, "pib": 2.0**50, "eib": 2.0**60}


def parse_bytes(text: str, what: str = "size") -> int:
    """Byte size with pydantic.ByteSize's units: ``80GB`` is 80·10⁹ B, ``80GiB`` is 80·2³⁰ B (KB … EB,
    KiB … EiB, any case), a bare number is bytes; ASCII digits only, the whole text must be read."""
    raw = _text(text, what, "80GB, 80GiB")
    m = _quantity(raw.lower(), _BYTES)
    if not m:
        raise AicalcError(f"cannot read {what} '{text}' (examples: 80GB, 80GiB, 512MiB)")
    value = float(m[0]) * _BYTES[m[1]]
    if 0 < value < 1:
        raise AicalcError(f"{what} must be at least one byte, got '{text}'")
    return int(_positive(value, raw, what))


_RATE = _NUM + r"\s*([kmgtpe]?)(i?)(b/s|bps|flop/s|flops|ops|tops|op/s)?"  # compiled when first used


def parse_rate(text: str, unit: str, what: str = "rate") -> float:
    """``3.35TB/s`` → bytes/s (``unit='bytes'``) or ``989TFLOPS`` → FLOP/s (``unit='flop'``)."""
    s = _text(text, what, "3.35TB/s").lower().replace(" ", "")
    m = re.fullmatch(_RATE, s)
    if not m or (m[4] and (("b" in m[4]) != (unit == "bytes"))):
        example = "3.35TB/s" if unit == "bytes" else "989TFLOPS"
        raise AicalcError(f"cannot read {what} '{text}' (example: {example})")
    prefix = m[2] + ("i" if m[3] else "")
    scale = _RATE_SCALE.get(prefix)
    if scale is None:
        raise AicalcError(f"cannot read {what} '{text}' (the prefix '{prefix}' is no unit prefix)")
    return _positive(float(m[1]) * scale, text, what)


# rate prefixes: k … E decimal, Ki … Ei binary ("1EFLOPS" was read as 1 FLOP/s, "1PiB/s" as 1 B/s)
_RATE_SCALE = {**{k: v for k, v in _DECIMAL.items() if k != "b"}, "e": 1e18,
               **_BINARY, "pi": 2.0**50, "ei": 2.0**60}


def parse_duration(text: str, what: str = "duration") -> float:
    """``200ms``, ``1.5s``, ``50us``, ``2min``, ``3h``, ``7d`` → seconds (a bare number is seconds)."""
    m = _quantity(_text(text, what, "200ms").lower(), _SECONDS)
    if not m:
        raise AicalcError(f"cannot read {what} '{text}' (examples: 200ms, 1.5s)")
    return _positive(float(m[0]) * _SECONDS[m[1] or "s"], text, what)


_SECONDS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_fraction(text: str, what: str = "fraction") -> float:
    """``0.9`` or ``90%`` → 0.9; must lie in (0, 1]."""
    s = _text(text, what, "0.9, 90%")
    try:
        low = s.lower()
        number = _number(low)
        if number is None or low[len(number):] not in ("", "%"):
            raise ValueError(s)
        value = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise AicalcError(f"cannot read {what} '{text}' (examples: 0.9, 90%)") from None
    if not (0 < value <= 1):
        raise AicalcError(f"{what} must lie in (0, 1], got '{text}'")
    return value


def fmt_bytes(n: float, binary: bool = True) -> str:
    """``fmt_bytes(2**34)`` → '16.00 GiB'."""
    if n is None or not math.isfinite(n):
        return "—"
    base, units = (1024.0, ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]) if binary else (1000.0, ["B", "kB", "MB", "GB", "TB", "PB"])
    i = 0
    x = float(n)
    while abs(x) >= base and i < len(units) - 1:
        x /= base
        i += 1
    return f"{x:.0f} {units[i]}" if i == 0 else f"{x:.2f} {units[i]}"


def fmt_count(n: float) -> str:
    """``fmt_count(8.03e9)`` → '8.03B'."""
    if n is None or not math.isfinite(n):
        return "—"
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:g}"


def fmt_seconds(s: float) -> str:
    if s is None or not math.isfinite(s):
        return "—"
    for limit, scale, unit in ((1e-3, 1e6, "µs"), (1.0, 1e3, "ms"), (120.0, 1.0, "s"), (7200.0, 1 / 60, "min"), (172800.0, 1 / 3600, "h")):
        if abs(s) < limit:
            return f"{s * scale:.3g} {unit}"
    if abs(s) < 1000 * 86400:
        return f"{s / 86400:.3g} d"
    return f"{s / (365.25 * 86400):,.3g} y" if abs(s) < 1e4 * 365.25 * 86400 else f"{s / (365.25 * 86400):,.0f} y"


def fmt_rate(x: float, unit: str) -> str:
    """``fmt_rate(9.89e14, 'FLOP/s')`` → '989 TFLOP/s'."""
    if x is None or not math.isfinite(x):
        return "—"
    for scale, prefix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"
