"""train-mem speed: configurations per second in the core, and a layout search over ~10⁶ layouts.

Run: python benchmarks/bench_train_mem.py   (targets from issue 4: ≥ 1e6 configurations/s in the core;
a search over 1e6 layouts in ≤ 2 s with peak memory ≤ 1 GiB)
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
    tracemalloc.start()
    t = time.perf_counter()
    res = aicalc.search_layouts(model, "h100-sxm", chips, seq=seqs, max_batch=256, cp=list(cps))
    dt = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return res.meta["layouts"], dt, peak


if __name__ == "__main__":
    for fw in ("hf", "megatron"):
        print(f"core, llama-3.1-70b, {fw}: {core_rate('llama-3.1-70b', fw):,.0f} configurations/s")
    seqs = [float(s) for s in range(256, 256 * 401, 256)]
    n, dt, peak = search("llama-3.1-70b", 4096, seqs)
    print(f"search, llama-3.1-70b on 4096 × h100-sxm: {n:,} layouts in {dt:.2f} s "
          f"({n / dt:,.0f} layouts/s), peak traced memory {peak / 2**30:.2f} GiB")
    n, dt, peak = search("llama-3.1-70b", 4096, seqs[:100], cps=(1.0, 2.0, 4.0, 8.0))
    print(f"search with --cp 1,2,4,8, 100 sequence lengths: {n:,} layouts in {dt:.2f} s "
          f"({n / dt:,.0f} layouts/s), peak traced memory {peak / 2**30:.2f} GiB")
