import numpy as np
import pytest

from aicalc.errors import AicalcError
from aicalc.sweep import grid, parse_sweep
from aicalc.units import parse_count


def sweep(text):
    return parse_sweep(text, parse_count, "--x")


def test_single_and_list():
    assert sweep("8") == [8]
    assert sweep("1,8,64") == [1, 8, 64]


def test_geometric_range_includes_stop():
    assert sweep("1k:16k:x2") == [1000, 2000, 4000, 8000, 16000]
    assert sweep("1Ki:128Ki:x2")[-1] == 131072


def test_arithmetic_range():
    assert sweep("1:64:+8") == [1, 9, 17, 25, 33, 41, 49, 57]
    assert sweep("8:64:+8") == [8, 16, 24, 32, 40, 48, 56, 64]


@pytest.mark.parametrize("bad", ["1:64", "64:1:x2", "1:64:x1", "1:64:-2", "1:64:y2", ",", "1:1e9:+1"])
def test_bad_ranges(bad):
    with pytest.raises(AicalcError):
        sweep(bad)


def test_grid_is_cartesian_first_axis_slowest():
    g = grid(batch=[1, 2], context=[10, 20, 30])
    assert g["batch"].tolist() == [1, 1, 1, 2, 2, 2]
    assert g["context"].tolist() == [10, 20, 30, 10, 20, 30]
    assert isinstance(g["batch"], np.ndarray)


def test_int_sweep_rejects_fractional_range_points():
    from aicalc.sweep import int_sweep

    assert int_sweep("1:64:x2", "--batch") == [1, 2, 4, 8, 16, 32, 64]
    with pytest.raises(AicalcError, match="whole number"):
        int_sweep("1:10:x1.5", "--batch")
