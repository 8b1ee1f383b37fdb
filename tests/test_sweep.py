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


def test_an_arithmetic_count_range_is_a_list_of_its_ints_that_keeps_the_range():
    """``1:80000:+1``'s values are the ints of ``range(1, 80001)``; the grid makes the same float64 array of them
    as of the plain list (numpy.arange, not a look at each value), and a copy keeps the range."""
    from aicalc.sweep import Counts, int_sweep

    values = int_sweep("3:80000:+7", "--batch")
    assert values == list(range(3, 80001, 7)) and {type(v) for v in values} == {int}
    assert type(values) is Counts and values.range == range(3, 80001, 7)
    ours, plain = grid(batch=values, context=[1, 2]), grid(batch=list(values), context=[1, 2])
    for key in ours:
        assert ours[key].dtype == plain[key].dtype and np.array_equal(ours[key], plain[key])
    copy = values.copy()
    assert type(copy) is Counts and copy == values and copy is not values and copy.range == values.range
    assert type(int_sweep("1:64:x2", "--batch")) is list and type(int_sweep("1,8", "--batch")) is list


KEPT = """
import ctypes, sys
import numpy as np
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                                "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
if sys.argv[1] == "keep":
    from aicalc.sweep import keep_freed_memory
    keep_freed_memory()
a = np.ones(20 << 17)  # 20 MiB, freed at once
del a
print(libc.mallinfo2().fordblks >> 20)  # MiB free in the heap: kept for the next array
"""


def test_a_long_sweep_keeps_the_memory_it_frees():
    """After keep_freed_memory (what a grid of 10,000 points or more calls), a freed 20 MiB array stays in the
    heap for the next one to use; by default glibc unmaps it (so the next is paged in afresh)."""
    import ctypes
    import subprocess
    import sys

    if not hasattr(ctypes.CDLL(None), "mallinfo2"):
        pytest.skip("glibc's allocator (mallinfo2) only")
    free = {how: int(subprocess.run([sys.executable, "-c", KEPT, how], capture_output=True, text=True,
                                    check=True).stdout) for how in ("default", "keep")}
    assert free["keep"] >= 20 and free["default"] < 20
