"""Numbers as text a column at a time, with numpy: the characters ``repr`` writes for each value (``int.__repr__``;
``float.__repr__``, the shortest decimal that reads back as the same float, the nearest such when there are
several), for the JSON and CSV writers, where formatting 80,000 rows one value at a time took most of the run
(issue 25).

A column's text is a block of bytes, one row per value, its digits padded with NUL bytes where a value is shorter
than the longest; the writer lays a chunk of rows out in one array and deletes the NULs (its output has none
otherwise). A float is written from the 17 significant digits of its exact value, computed in double-double
arithmetic (Dekker's exact product: T. J. Dekker, "A floating-point technique for extending the available
precision", Numer. Math. 18, 1971), rounded to fewer digits while the result still reads back as the float (the
interval of half a unit in the last place either side, as Steele & White's and Gay's shortest conversions define
it): to 16 and to 15 digits, then a digit fewer for each zero the 15 end with (that interval is at most 22.2 units
of the 17th digit wide, so no other multiple of 1,000 of them can lie within it); below a power of two, whose lower interval is half as wide, the shortest that reads back can be the candidate
above when the nearer one below falls outside (2^-695: 6.083493012144512e-210), and is taken. Values whose rounding
the double-double error could decide either way (a tie, a candidate at the edge of the interval), zeros and values
outside 10⁻²⁸⁰..10²⁸⁰ take ``repr`` itself: a few in a million.
"""

from __future__ import annotations

from functools import cache, lru_cache

_EPS = 1e-7  # undecided margin, in units of the 17th digit; the double-double error is below 1e-13 of one


@cache
def _table():
    """(the four-digit groups 0..9999 as uint32s whose bytes are their ASCII digits, four rows of them: all four
    digits; leading zeros as NUL, 0 as "0"; leading zeros as NUL, 0 as nothing; leading zeros and the first other
    digit as NUL; and 10^0..10^18 as int64)."""
    import numpy as np

    d = np.arange(10_000)
    chars = np.stack([d // 1000, d // 100 % 10, d // 10 % 10, d % 10], axis=1).astype(np.uint8) + ord("0")
    lead = np.searchsorted([10, 100, 1000], d, side="right")  # digits after the first
    pos = np.arange(4)
    strip = np.where(pos >= 3 - lead[:, None], chars, 0).astype(np.uint8)
    strip0 = strip.copy()
    strip0[0, 3] = ord("0")
    strip[0] = 0
    drop = np.where(pos > 3 - lead[:, None], chars, 0).astype(np.uint8)
    drop[0] = 0
    rows = [t.view(np.uint32).ravel() for t in (chars, strip0, strip, drop)]
    return np.concatenate(rows), np.array([10**i for i in range(19)], dtype=np.int64)


_FULL, _STRIP0, _STRIP, _DROP = 0, 10_000, 20_000, 30_000


@cache
def _tens():
    """10^j as the float nearest it (0 below 10^-324, inf above 10^308) at index j + 325, j = -325 … 310."""
    import numpy as np

    return np.array([float(f"1e{j}") for j in range(-325, 311)])


@cache
def _pow10(j: int) -> tuple[float, float]:
    """10^j as a double-double (hi + lo), each part correctly rounded from exact integers."""
    if j >= 0:
        hi = float(10**j)
        return hi, float(10**j - int(hi))
    d = 10**-j
    hi = 1 / d
    p, q = hi.as_integer_ratio()
    return hi, (q - p * d) / (q * d)


@lru_cache(maxsize=64)
def _pow10_range(start: int, stop: int):
    """(hi, lo) of :func:`_pow10` for j = ``start`` … ``stop`` - 1, as two arrays (read only; a chunk's range of
    magnitudes recurs from chunk to chunk)."""
    import numpy as np

    parts = np.array([_pow10(j) for j in range(start, stop)]).T.copy()
    parts.flags.writeable = False
    return parts


def digit_chars(v, width: int, marked: bool = False, fewest: int = 0):
    """``v`` (int64, 0 ≤ v < 10^width) as ASCII digits, right-aligned in ``width`` bytes a row with NUL before them
    (a (len(v), width) uint8 array). ``marked``: v is 10^L + the number to write with L digits, zeros before it
    included (a fraction's digits), and the leading 1 is dropped. ``fewest``: digits of the shortest v."""
    import numpy as np

    groups, p10 = _table()
    ng = (width + marked + 3) // 4
    top = _DROP if marked else _STRIP0 if ng == 1 else _STRIP  # the top group: nothing above it
    if ng == 1:
        return groups.take(v + top).view(np.uint8).reshape(len(v), 4)[:, 4 - width:]
    out = np.empty((len(v), ng), dtype=np.uint32)
    parts = []  # eight digits at a time, as uint32: numpy divides those by a constant several times faster than int64
    rest = v
    for _ in range((ng - 1) // 2):
        q = rest // 100_000_000
        parts.append((rest - q * 100_000_000).astype(np.uint32))
        rest = q
    parts.append(rest.astype(np.uint32))
    for i in range(ng):  # four digits at a time from the right, through the table
        if i % 2 == 0:
            part = parts[i // 2]
            above = part // 10_000
            g = (part - above * 10_000).astype(np.intp)
        else:
            g = above.astype(np.intp)
        if i == ng - 1:
            g += top
        elif fewest <= 4 * (i + 1):  # a row may have no digits above this group: its zeros before are none
            g += (v < p10[4 * (i + 1)]) * (_DROP if marked else _STRIP0 if i == 0 else _STRIP)
        out[:, ng - 1 - i] = groups.take(g)
    return out.view(np.uint8).reshape(len(v), 4 * ng)[:, 4 * ng - width:]


def ndigits(v):
    """Decimal digits of each ``v`` (int64, 0 ≤ v < 10^18); 1 for 0."""
    import numpy as np

    _, p10 = _table()
    return np.searchsorted(p10[1:], v, side="right") + 1


def _halves(v):
    """``v`` (an array) as h + l exactly, each of 26 significant bits (Veltkamp's split, in Dekker 1971: no fused
    multiply-add in numpy); in place where it can be (fresh temporaries of this size cost more than the
    arithmetic)."""
    import numpy as np

    h = v * 134217729.0  # 2^27 + 1
    lo = h - v
    np.subtract(h, lo, out=h)
    np.subtract(v, h, out=lo)
    return h, lo


def _two_prod(x, y):
    """x·y exactly, as p + e (Dekker's product of the halves of each); in place where it can be."""
    import numpy as np

    p = x * y
    xh, xl = _halves(x)
    yh, yl = _halves(y)
    e = xh * yh
    e -= p
    np.multiply(xh, yl, out=xh)
    e += xh
    np.multiply(xl, yh, out=xh)
    e += xh
    np.multiply(xl, yl, out=xh)
    e += xh
    return p, e


def _fewer(N, frac, half, half_low, t: int):
    """(S = N + frac rounded to a multiple of ``t`` (10 or 100), in units of t; whether that reads back as the float,
    surely; whether that is too close to call), elementwise: within ``half`` above S, ``half_low`` below."""
    import numpy as np

    q = N // t
    rest = q * t  # (in place where it can be: fresh temporaries of this size cost more than the arithmetic)
    np.subtract(N, rest, out=rest)
    rest = rest + frac  # the remainder and the fraction add up exactly in a float
    half_t = t / 2
    up = rest > half_t
    d = up * float(t)
    np.subtract(d, rest, out=d)
    low = None if half_low is None else d < 0
    limit = half if half_low is None else np.where(low, half_low, half)
    np.abs(d, out=d)
    tie = d >= half_t - _EPS  # S halfway between two candidates: the nearest is t/2 away
    over = d - limit  # past the edge of the interval (inside where negative)
    ok = over < -_EPS
    unsure = over <= _EPS
    unsure ^= ok  # (every sure one is among them)
    tie &= over <= 2 * _EPS  # a tie farther than the interval (1.00390625 at 8 digits) decides nothing: it
    unsure |= tie  # does not read back either way
    ok &= ~tie
    if low is not None:  # a power of two: the nearest candidate below can fall outside its half as wide interval
        low &= ~ok  # while the one above lies inside its own (2^-695: 6.083493012144512e-210, as repr writes it)
        low &= ~unsure
        far = t - d  # from the candidate above
        above = low & (far < half - _EPS)
        unsure |= low & ~above & (far <= half + _EPS)
        ok |= above
        up = up | above
    np.add(q, up, out=q)
    return q, ok, unsure


def shortest(a, rows):
    """(digits c as int64, their count, decimal point position, decided) of positive floats ``a`` where ``rows``:
    a = 0.DIGITS × 10^point with the digits ``repr`` writes, where ``decided``; elsewhere the caller asks ``repr``."""
    import numpy as np

    _, p10 = _table()
    decided = rows & (a >= 1e-280) & (a <= 1e280)
    if not decided.all():
        a = np.where(decided, a, 1.5)
    bits = a.view(np.int64)  # (a: positive normal floats, so frexp's exponent e2 is the biased exponent - 1022)
    biased = bits >> 52
    k = biased - 1023  # floor(log10 a): floor((e2 - 1)·log10 2), exactly (78913 / 2^18 is log10 2 to within
    #                    3e-7 of it, |e2| < 1100), and one more where a reaches the next power of ten
    k *= 78913
    k >>= 18
    k += a >= _tens().take(k + 326)  # (a float 10^j is rounded: a within one unit of it can be one off, as log10 was)
    k -= 16  # S = a·10^-k has 17 digits before its point
    top = int(k.max())
    js = range(-top, int(-k.min()) + 1)
    at = top - k
    his, los = _pow10_range(js.start, js.stop)
    hi = his.take(at)  # (take: a gather numpy does faster than indexing with an array)
    p, e = _two_prod(a, hi)
    t = e + a * los.take(at) if los.any() else e  # 10^j is a float itself for 0 <= j <= 22
    s_hi = p + t
    np.subtract(s_hi, p, out=p)
    np.subtract(t, p, out=t)  # s_lo (where log10 was one off, next to a power of ten, S has 16 or 18 digits: repr's)
    floor_lo = np.floor(t)
    frac = t
    frac -= floor_lo  # S = N + frac, 0 ≤ frac < 1, known to within 1e-13
    np.minimum(s_hi, 1e18, out=s_hi)
    N = s_hi.astype(np.int64)
    N += floor_lo.astype(np.int64)
    decided &= N >= 10**16
    decided &= N < 10**17
    np.subtract(frac, 0.5, out=p)
    np.abs(p, out=p)
    decided &= p > _EPS
    biased -= 53  # half a unit in the last place of a, in units of S's last digit (0.55..11.1): hi·2^(e2 - 54),
    biased <<= 52  # that power of two built from its bits (a normal float: a ≥ 1e-280 has e2 - 54 > -1022)
    half = hi * biased.view(np.float64)
    power = (bits & ((1 << 52) - 1)) == 0  # a power of two (no fraction bits): the float below is half as far as
    #                                        the one above
    half_low = np.where(power, half / 2, half) if power.any() else None
    best = N + (frac > 0.5)  # 17 digits, correctly rounded: always within the interval
    shift = np.zeros(len(a), dtype=np.int64)
    c, ok, unsure = _fewer(N, frac, half, half_low, 10)  # 16 digits, for every value at once
    decided &= ~unsure
    live = np.flatnonzero(ok & decided)
    c = c.take(live)
    best[live] = c
    shift[live] = 1
    last = c - c // 10 * 10  # 15 digits: a multiple of 100 within 11.1 of S rounds to 16 digits ending in 0, 1 or 9
    last -= 2
    live = live[last.view(np.uint64) >= 7]  # (0, 1 and 9 less 2, unsigned)
    if len(live):
        args = [v.take(live) for v in ((N, frac, half) if half_low is None else (N, frac, half, half_low))]
        c, ok, unsure = _fewer(*args[:3], args[3] if half_low is not None else None, 100)
        if unsure.any():
            decided[live[unsure]] = False
        live = live[ok]
        best[live] = c[ok]
        shift[live] = 2
    # 14 digits and fewer: a multiple of 1,000 or more is farther apart than the widest interval (22.2), so the one
    # that can lie within it is the value found, where it ends in zeros (and a carry's power of ten, 9.96 → 10.0): a
    # digit fewer for each (the same value, so the same distance from a; the 17 and 16 digits found above end in none)
    nd = 17 - shift
    carry = best == p10.take(nd)
    nd += carry
    z = np.flatnonzero(carry & decided)
    z = np.concatenate([live, z]) if len(z) else live  # (the 15 digits found: decided)
    z = z[best.take(z) % 10 == 0]
    while len(z):
        best[z] //= 10
        shift[z] += 1
        nd[z] -= 1
        z = z[best.take(z) % 10 == 0]
    return best, nd, nd + k + shift, decided


def float_blocks(columns, null: str) -> list[list]:
    """``repr`` of each float of each of ``columns`` (1-D, one length, any float dtype up to 64 bits), ``null``
    for NaN and ±inf: for each column, a list of its text's parts (blocks, and strings where a part is the same in
    every row), for :func:`layout`."""
    import numpy as np

    m, n = len(columns), len(columns[0])
    x = np.concatenate(columns).astype(np.float64, copy=False)
    neg = np.signbit(x)
    a = np.abs(x)
    whole = a < 1e16
    whole &= a == np.trunc(np.where(whole, a, 0))  # 0 and byte counts: an integer's digits, then ".0"
    c, nd, point, decided = shortest(a, np.isfinite(a) & ~whole)
    at = np.flatnonzero(whole)
    if len(at):
        c[at] = a[at].astype(np.int64)
        nd[at] = ndigits(c[at])
        point[at] = nd[at]
        decided[at] = True
    expo = (point <= -4) | (point > 16)
    any_expo = expo.any()
    split = np.where(expo, nd - 1, nd - point) if any_expo else nd - point  # digits of c after the point
    _, p10 = _table()
    if (split < 0).any():  # 123000.0: more digits before the point than c has
        below = p10.take(np.clip(split, 0, 18))
        whole = c // below * p10.take(np.clip(-split, 0, 18))
        rest = c % below
    else:
        below = p10.take(np.minimum(split, 18))
        whole = c // below
        rest = c - whole * below
    frac_len = np.maximum(split, 1)
    if any_expo:
        frac_len = np.where(expo, nd - 1, frac_len)
    by_col = (lambda v: v.reshape(m, n)) if m > 1 else (lambda v: v[None, :])
    zeros = frac_len - 18  # "0.000" and 17 digits: 20 after the point, the first zeros written apart
    if zeros.max() > 0:
        frac_len = np.minimum(frac_len, 18)
        zeros = np.maximum(zeros, 0)
        zero_w = by_col(zeros).max(axis=1)
        zero_chars = np.where(np.arange(2, 0, -1) <= zeros[:, None], ord("0"), 0).astype(np.uint8)
    else:
        zero_w = np.zeros(m, dtype=np.int64)
    int_w, frac_w, frac_least = ndigits(by_col(whole).max(axis=1)), by_col(frac_len).max(axis=1), \
        by_col(frac_len).min(axis=1)
    int_chars = digit_chars(whole, int(int_w.max()), fewest=int(ndigits(whole.min(keepdims=True))[0]))
    frac_chars = digit_chars(rest + p10.take(frac_len), int(frac_w.max()), marked=True,
                             fewest=int(frac_least.min()) + 1)
    neg_cols, expo_cols = by_col(neg).any(axis=1), by_col(expo).any(axis=1)
    all_decided = decided.all()
    out = []
    for j in range(m):
        rows = slice(j * n, (j + 1) * n)
        parts: list = []
        if neg_cols[j]:
            parts.append(np.where(neg[rows], ord("-"), 0).astype(np.uint8)[:, None])
        parts.append(int_chars[rows, int_chars.shape[1] - int_w[j]:])
        if frac_w[j]:
            parts.append("." if frac_least[j] else np.where(frac_len[rows] > 0, ord("."), 0).astype(np.uint8)[:, None])
            if zero_w[j]:
                parts.append(zero_chars[rows, 2 - zero_w[j]:])
            parts.append(frac_chars[rows, frac_chars.shape[1] - frac_w[j]:])
        if expo_cols[j]:  # the exponent, worked out for the columns that have one (usd_per_request's 4.3e-05)
            ex, ev = expo[rows], point[rows] - 1
            every = bool(ex.all())
            e_len = np.where(ex, 2 + (np.abs(ev) >= 100), 0)
            parts.append("e" if every else np.where(ex, ord("e"), 0).astype(np.uint8)[:, None])
            e_sign = np.where(ev < 0, ord("-"), ord("+")).astype(np.uint8)[:, None]
            parts.append(e_sign if every else e_sign * ex[:, None])
            parts.append(digit_chars(np.where(ex, np.abs(ev) + p10.take(e_len), 0), int(e_len.max()), marked=True))
        fix = () if all_decided else np.flatnonzero(~decided[rows])
        if len(fix):
            block = np.concatenate([np.full((n, len(p)), ord(p), np.uint8) if isinstance(p, str) else p
                                    for p in parts], axis=1)
            vals = x[rows][fix].tolist()
            parts = [_patch(block, fix, [float.__repr__(v) if v - v == 0 else null for v in vals])]
        out.append(parts)
    return out


def int_block(v):
    """``repr`` of each integer of ``v`` (1-D), or None when one is 10^17 or more in size."""
    import numpy as np

    if not len(v):
        return digit_chars(v.astype(np.int64), 1)
    lo, hi = int(v.min()), int(v.max())
    if hi >= 10**17 or lo <= -(10**17):
        return None
    v = v.astype(np.int64, copy=False)
    if lo >= 0:  # (counts and byte counts: no signs to write)
        return digit_chars(v, len(str(hi)), fewest=len(str(lo)))
    neg = v < 0
    chars = digit_chars(np.abs(v), len(str(max(hi, -lo))))
    return np.concatenate([np.where(neg, ord("-"), 0).astype(np.uint8)[:, None], chars], axis=1)


def text_block(v, true: str, false: str):
    """``true`` or ``false`` for each boolean of ``v``."""
    import numpy as np

    w = max(len(true), len(false))
    words = np.array([false.encode(), true.encode()], dtype=f"S{w}").view(np.uint8).reshape(2, w)
    return words[v.astype(np.intp)]


def _patch(block, rows, texts: list[str]):
    """``block`` with ``rows`` holding ``texts`` (ASCII) instead (NUL-padded: where the NULs fall is no matter)."""
    import numpy as np

    w = max(block.shape[1], max(map(len, texts)))
    if w > block.shape[1]:
        block = np.concatenate([np.zeros((len(block), w - block.shape[1]), dtype=np.uint8), block], axis=1)
    block[rows] = np.array([t.encode() for t in texts], dtype=f"S{w}").view(np.uint8).reshape(len(rows), w)
    return block


_SAMPLE = 16  # every 16th row's NULs are counted to choose how they are deleted
_SPARSE = 0.035  # NULs per byte below which bytearray.replace deletes them faster than translate (~12 ns per NUL,
# 0.06 ns per byte, against translate's 0.4 ns per byte: 2048 rows of serve's JSON, 7 NULs in 1,049 bytes a row, take
# 0.35 ms rather than 0.83; its CSV's first rows, 25 NULs in 338 bytes, 0.58 ms rather than 0.32). Break-even
# 3.3 % there; on a slower machine 15 ns per NUL and 0.23 per byte against 0.9 per byte, 4.4 %: 4,096 rows of
# serve's CSV at 2.1-2.5 % NULs (most of its rows) 0.79 ms rather than 1.20, at 8 % 2.03 rather than 1.39


def layout(n: int, items: list) -> bytearray:
    """``n`` rows of UTF-8 text, each the concatenation of ``items``: a str is the same in every row, a block
    (uint8, one row per row) is that row's bytes; NULs dropped."""
    import numpy as np

    template = bytearray()
    at = []
    for item in items:
        if isinstance(item, str):
            template += item.encode()
        else:
            at.append((len(template), item))
            template += bytes(item.shape[1])
    data = template * n
    out = np.frombuffer(data, dtype=np.uint8).reshape(n, len(template))
    for start, block in at:
        w = block.shape[1]
        if w > 1 and block.strides[1] == 1:  # each row's bytes as one element: a copy a row, not a byte at a time
            out[:, start:start + w].view(f"V{w}")[:, 0] = block.view(f"V{w}")[:, 0]
        else:
            out[:, start:start + w] = block
    sample = out[::_SAMPLE]
    sparse = np.count_nonzero(sample == 0) < _SPARSE * sample.size
    del out, sample
    if sparse:  # replace copies the stretches between NULs (memchr, memcpy): faster where NULs are few
        return data.replace(b"\0", b"")
    return data.translate(None, b"\0")  # a byte at a time, at one speed however many NULs there are


def patch_rows(values: list, n: int):
    """A block of ``repr`` of each of ``values`` (Python numbers)."""
    import numpy as np

    return _patch(np.zeros((n, 1), dtype=np.uint8), np.arange(n), [repr(v) for v in values])
