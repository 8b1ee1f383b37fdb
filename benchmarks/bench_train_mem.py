"""train-mem speed: configurations per second in the core, and layout searches over 2·10⁶ and 10⁷ layouts.

Run: python benchmarks/bench_train_mem.py   (targets from issue 25: ≥ 1e7 configurations/s through the Python API
over a 10⁶-point grid; a search over 1e7 layouts in ≤ 2 s with peak memory ≤ 1 GiB, and 1e8 refused before any
work, exit 2 on the command line)
"""

import time
import tracemalloc

import numpy as np

import aicalc
from aicalc.catalog import store
from aicalc.core.train_peak import TrainSetup, evaluate


def core_rate(model: str, framework: str, n: int = 1_000_000) -> float:
    arch = store.resolve_model(model).arch
    rng = np.random.default_rng(0)
    g = {"batch": rng.integers(1, 16, n).astype(float), "seq": rng.choice([2048.0, 4096.0, 8192.0], n),
         "dp": np.full(n, 8.0), "tp": np.full(n, 8.0), "pp": np.full(n, 4.0),
         "zero": rng.integers(0, 4, n).astype(float)}
    t = time.perf_counter()
    evaluate(arch, TrainSetup(framework=framework), g)
    return n / (time.perf_counter() - t)


def search(model: str, chips: int, seqs: list[float], cps=(1.0,)) -> tuple[int, float, float]:
    """(layouts searched, CPU seconds, peak traced bytes)."""
    res = aicalc.search_layouts(model, "h100-sxm", chips, seq=seqs[:1], max_batch=256, cp=list(cps))  # warm
    tracemalloc.start()
    t = time.process_time()  # CPU time: a busy machine stretches wall time, not this
    res = aicalc.search_layouts(model, "h100-sxm", chips, seq=seqs, max_batch=256, cp=list(cps))
    dt = time.process_time() - t
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    from aicalc.core.layout_search import count

    return count(res.meta["model"].arch, chips, seqs, 256, res.meta["cps"], RECOMPUTES), dt, peak


RECOMPUTES = ("none", "full", "selective-op", "every-2")  # the hf framework's modes (aicalc.api.train_memory)


API_GOAL = 1e7


def api_rate(model: str, n: int = 1_000_000) -> float:
    """Configurations/s through aicalc.train_memory over a 10⁶-point batch × seq grid, best of 3, CPU time."""
    rng = np.random.default_rng(0)
    B = rng.integers(1, 16, n).astype(float)
    S = rng.choice([2048.0, 4096.0, 8192.0], n)
    best = float("inf")
    for _ in range(3):
        t = time.process_time()
        aicalc.train_memory(model, batch=B, seq=S, dp=8, tp=8, pp=4, zero=1, chip="h100-sxm")
        best = min(best, time.process_time() - t)
    return n / best


if __name__ == "__main__":
    for fw in ("hf", "megatron"):
        print(f"core, llama-3.1-70b, {fw}: {core_rate('llama-3.1-70b', fw):,.0f} configurations/s")
    rate = api_rate("llama-3.1-70b")
    print(f"through aicalc.train_memory over 10⁶ points: {rate:,.0f} configurations/s = {rate / API_GOAL:.2f}x the "
          f"goal of {API_GOAL:.0e}/s")
    seqs = [float(s) for s in range(256, 256 * 401, 256)]
    for label, ss, cps in (("2·10⁶", seqs, (1.0,)), ("10⁷, --cp 1,2,4,8", seqs + [float(s) for s in range(
            256 * 401, 256 * 501, 256)], (1.0, 2.0, 4.0, 8.0))):
        n, dt, peak = search("llama-3.1-70b", 4096, ss, cps)
        print(f"search {label}, llama-3.1-70b on 4096 × h100-sxm: {n:,} layouts in {dt:.2f} s CPU "
              f"({n / dt:,.0f} layouts/s; 10⁷ at this rate: {1e7 / n * dt / 2:.2f}x the 2 s goal), "
              f"peak traced memory {peak / 2**30:.2f} GiB ({peak / 2**30:.2f}x the 1 GiB goal)")
    import subprocess
    import sys

    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "aicalc", "train-mem", "llama-3.1-70b", "--chip", "h100-sxm", "--chips",
                        "4096", "--search", "--batch", "256", "--seq", "256:1280000:+256", "--cp", "1,2,4,8"],
                       capture_output=True, text=True)
    print(f"search of 10⁸ layouts: exit {p.returncode} in {time.perf_counter() - t:.2f} s: {p.stderr.strip()}")
