"""kv-cache speed: configurations per second in the core, and a cold single query vs importing numpy.

Run: python benchmarks/bench_kv_cache.py   (targets from issue 3: ≥ 1e7 configurations/s on one core;
a cold query close to the cost of importing numpy; issue 25: ≥ 5e7 configurations/s through the Python API,
``aicalc.kv_cache``, over a 10⁶-point batch × context grid, printed as a ratio to that goal and to one numpy
``sqrt(b*s*8+3)`` over the same grid)
"""

import subprocess
import sys
import time

import numpy as np

from aicalc.catalog import store
from aicalc.core import capacity
from aicalc.core.kv_cache import kv_cache_bytes, kv_shape


def core_rate(model: str, n: int = 10_000_000) -> float:
    shape = kv_shape(store.resolve_model(model).arch, "bf16", 1)
    rng = np.random.default_rng(0)
    B = rng.integers(1, 512, n).astype(np.float64)
    S = rng.integers(1, 131_072, n).astype(np.float64)
    t = time.perf_counter()
    kv = kv_cache_bytes(shape, B, S, 16)
    capacity.max_batch(shape, 60e9 - kv * 0, S, 16)
    return n / (time.perf_counter() - t)


def cold(cmd: list[str], repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        best = min(best, time.perf_counter() - t)
    return best


API_GOAL = 5e7


def api_rate(model: str, n: int = 1_000_000) -> tuple[float, float]:
    """(configurations/s through aicalc.kv_cache with a chip, its time over one numpy pass), best of 5, CPU time."""
    import aicalc

    rng = np.random.default_rng(0)
    B = rng.integers(1, 512, n).astype(np.float64)
    S = rng.integers(1, 131_072, n).astype(np.float64)
    best, floor = float("inf"), float("inf")
    for _ in range(5):
        t = time.process_time()
        aicalc.kv_cache(model, batch=B, context=S, chip="h100-sxm")
        best = min(best, time.process_time() - t)
        t = time.process_time()
        np.sqrt(B * S * 8 + 3)
        floor = min(floor, time.process_time() - t)
    return n / best, best / floor


if __name__ == "__main__":
    for model in ("llama-3.1-8b", "gemma-2-9b"):
        print(f"core kv-cache + max_batch, {model}: {core_rate(model):,.0f} configurations/s")
        rate, floor = api_rate(model)
        print(f"  through aicalc.kv_cache over 10⁶ points: {rate:,.0f} configurations/s = {rate / API_GOAL:.2f}x the "
              f"goal of {API_GOAL:.0e}/s, {floor:.1f}x one numpy pass")
    py = sys.executable
    base = cold([py, "-c", "pass"])
    numpy_t = cold([py, "-c", "import numpy"])
    query = cold([py, "-m", "aicalc", "kv-cache", "llama-3.1-8b", "--context", "8k", "--json"])
    helpt = cold([py, "-m", "aicalc", "--help"])
    print(f"python startup {base * 1e3:.0f} ms; import numpy {numpy_t * 1e3:.0f} ms; "
          f"aicalc --help {helpt * 1e3:.0f} ms; cold kv-cache query {query * 1e3:.0f} ms")
