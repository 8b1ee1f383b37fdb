import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aicalc.errors import AicalcError
from aicalc.units import fmt_bytes, parse_bytes, parse_count, parse_duration, parse_fraction, parse_rate


@pytest.mark.parametrize(
    "text, expected",
    [("80GB", 80 * 10**9), ("80GiB", 80 * 2**30), ("512MiB", 512 * 2**20), ("1.5 TB", 1_500_000_000_000), ("4096", 4096)],
)
def test_bytes_decimal_vs_binary(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [("4k", 4000), ("128k", 128_000), ("1M", 10**6), ("1.4T", 1.4e12), ("4Ki", 4096), ("32Ki", 32768), ("2B", 2e9), ("77", 77)],
)
def test_counts_follow_the_contract(text, expected):
    assert parse_count(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    "text, unit, expected",
    [("3.35TB/s", "bytes", 3.35e12), ("989TFLOPS", "flop", 989e12), ("2 PFLOP/s", "flop", 2e15), ("900GB/s", "bytes", 9e11)],
)
def test_rates(text, unit, expected):
    assert parse_rate(text, unit) == pytest.approx(expected)


def test_rate_unit_mismatch_is_an_error():
    with pytest.raises(AicalcError):
        parse_rate("989TFLOPS", "bytes")


@pytest.mark.parametrize("text, expected", [("200ms", 0.2), ("1.5s", 1.5), ("50us", 5e-5), ("2min", 120), ("3h", 10800)])
def test_durations(text, expected):
    assert parse_duration(text) == pytest.approx(expected)


@pytest.mark.parametrize("bad", ["0", "-4k", "abc", "nan", "inf", "1e400", ""])
def test_counts_reject_zero_negative_and_garbage(bad):
    with pytest.raises(AicalcError):
        parse_count(bad)


@pytest.mark.parametrize("bad", ["0GB", "-1GB", "80XB", "GB"])
def test_bytes_reject_bad_sizes(bad):
    with pytest.raises(AicalcError):
        parse_bytes(bad)


def test_fraction():
    assert parse_fraction("90%") == pytest.approx(0.9)
    assert parse_fraction("0.5") == 0.5
    with pytest.raises(AicalcError):
        parse_fraction("1.2")


def test_fmt_bytes_binary():
    assert fmt_bytes(16 * 2**30) == "16.00 GiB"
    assert fmt_bytes(512) == "512 B"


@given(st.integers(min_value=1, max_value=10**15))
def test_count_roundtrip_plain_integers(n):
    assert parse_count(str(n)) == n


@given(st.floats(min_value=1e-3, max_value=1e6, allow_nan=False))
def test_binary_suffix_is_exactly_1024_based(x):
    assert math.isclose(parse_count(f"{x}Ki"), x * 1024, rel_tol=1e-12)


def test_rate_prefixes_up_to_exa_and_binary_ones():
    """SI prefixes (k 10^3 … E 10^18) and IEC ones (Ki 2^10 … Ei 2^60): "1EFLOPS" was read as 1 FLOP/s."""
    from aicalc.units import parse_rate

    assert parse_rate("1EFLOPS", "flop") == 1e18
    assert parse_rate("1000PFLOPS", "flop") == 1e18
    assert parse_rate("1PiB/s", "bytes") == 2**50
    assert parse_rate("2EiB/s", "bytes") == 2 * 2**60


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(list("0123456789.e+-kmgtpbiuµsnhd% \t\u2003") + ["ki", "mib", "ms", "min", "e5", ".5"]),
                max_size=8).map("".join))
def test_quantities_are_read_as_the_pattern_reads_them(text):
    """The hand-written reader of ``number [whitespace] [unit]`` (no regex compiled on a one-off query) against
    the pattern it replaces, for each parser's units."""
    import re

    from aicalc.units import _BYTES, _COUNT_UNITS, _NUM, _SECONDS, _number, _quantity

    for pattern, units in ((r"(ki|mi|gi|ti|k|m|b|g|t)?", _COUNT_UNITS), (r"([kmgtpe]i?b|b)?", _BYTES),
                           (r"(us|µs|ms|s|min|h|d)?", _SECONDS)):
        m = re.fullmatch(_NUM + r"\s*" + pattern, text)
        assert _quantity(text, units) == (None if m is None else (m[1], m[2] or ""))
    number = _number(text)
    assert bool(re.fullmatch(_NUM + "%?", text)) == (number is not None and text[len(number):] in ("", "%"))
