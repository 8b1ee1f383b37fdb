"""The fleet search's arrival times come from aicalc's cache once drawn (aicalc.api.arrivals): the same float64s
numpy's Generator draws, and a damaged file is drawn again, never trusted."""

import numpy as np
import pytest

from aicalc.api import arrivals


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AICALC_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("seed,n", [(0, 1000), (7, 1), (3, 20_000)])
def test_cached_times_are_numpys_draws_bit_for_bit(cache, seed, n):
    drawn = np.cumsum(np.random.default_rng(seed).exponential(1.0, n))
    first, second = arrivals.unit_arrivals(seed, n), arrivals.unit_arrivals(seed, n)
    assert list(cache.glob("arrivals-*"))  # the second came from the file
    assert first.dtype == second.dtype == np.float64
    assert first.tobytes() == second.tobytes() == drawn.tobytes()


@pytest.mark.parametrize("damage", [lambda b: b[:-8], lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:],
                                    lambda b: b"deadbeef\n" + b[9:]])
def test_a_damaged_file_is_drawn_again(cache, damage):
    drawn = np.cumsum(np.random.default_rng(0).exponential(1.0, 100))
    arrivals.unit_arrivals(0, 100)
    (f,) = cache.glob("arrivals-*")
    f.write_bytes(damage(f.read_bytes()))
    assert arrivals.unit_arrivals(0, 100).tobytes() == drawn.tobytes()
    assert f.read_bytes()[9:] == drawn.tobytes()  # and written again


def test_an_unwritable_cache_still_draws(monkeypatch):
    monkeypatch.setenv("AICALC_CACHE_DIR", "/proc/no-such-folder")
    drawn = np.cumsum(np.random.default_rng(1).exponential(1.0, 10))
    assert arrivals.unit_arrivals(1, 10).tobytes() == drawn.tobytes()


@pytest.mark.parametrize("forged", [[np.nan] * 5, [1.0, 2.0, np.inf, 4.0, 5.0], [3.0, 2.0, 1.0, 4.0, 5.0],
                                    [-1.0, 0.0, 1.0, 2.0, 3.0]])
def test_a_forged_file_with_a_good_checksum_is_drawn_again(cache, forged):
    """A file whose checksum matches but whose times are not arrival times (NaN, inf, out of order, negative)
    is not used."""
    import zlib

    drawn = np.cumsum(np.random.default_rng(0).exponential(1.0, 5))
    arrivals.unit_arrivals(0, 5)
    (f,) = cache.glob("arrivals-*")
    body = np.asarray(forged, dtype="<f8").tobytes()
    f.write_bytes(f"{zlib.crc32(body):08x}\n".encode() + body)
    assert arrivals.unit_arrivals(0, 5).tobytes() == drawn.tobytes()
