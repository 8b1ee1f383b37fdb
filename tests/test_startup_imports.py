"""What a one-off query imports (issue 25): ``numpy.ma`` (imported by the first ``np.unique``, a few tens of
milliseconds) and ``numpy.random`` (~35 M instructions; ``compare``'s fleet reads its arrival times from the cache
once drawn, :mod:`aicalc.api.arrivals`) stay off every command's typical query, and ``check`` reads its args
without building the click commands of the whole app."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT

QUERIES = [
    ["kv-cache", "llama-3.1-8b", "--chip", "h100-sxm"],
    ["train-mem", "llama-3.1-8b", "--chip", "h100-sxm", "--dp", "8", "--zero", "3"],
    ["roofline", "llama-3.1-8b", "--chip", "h100-sxm", "--batch", "1,16"],
    ["serve", "llama-3.1-8b", "--chip", "h100-sxm", "--max-tpot", "50ms"],
    ["train-time", "llama-3.1-8b", "--chip", "h100-sxm", "--chips", "64", "--tokens", "1T"],
    ["compare", "llama-3.1-70b", "--chip", "h100-sxm"],
    ["check", "docs/examples/ci/budgets.yaml"],
]

PROBE = """
import io, sys
from aicalc.cli import main
from aicalc.env import Env
code = main(sys.argv[1:], env=Env(stdout=io.StringIO(), stderr=io.StringIO(), stdout_isatty=False))
print(code, "numpy.ma" in sys.modules, "numpy.random" in sys.modules)
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q[0])
def test_a_typical_query_does_not_import_numpy_ma_or_random(query, cache):
    """The second run of each query (the first fills the cache: catalog index, arrival times)."""
    env = dict(os.environ, AICALC_CACHE_DIR=cache)
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", PROBE, *query], capture_output=True, text=True, cwd=ROOT,
                             env=env)
        code, ma, rnd = out.stdout.split()
        assert code in ("0", "1"), out.stderr
    assert ma == "False" and rnd == "False"


def test_distinct_is_np_unique():
    import numpy as np

    from aicalc.api.inputs import distinct

    rng = np.random.default_rng(0)
    for a in (np.array([8.0]), np.full(5, 4.0), rng.choice([1.0, 2.0, 8.0], 100), rng.integers(0, 9000, 20_000),
              np.array([[2, 1], [1, 3]]), np.array(3.0)):
        assert distinct(a) == np.unique(a).tolist()
