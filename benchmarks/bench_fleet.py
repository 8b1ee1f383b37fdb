"""Fleet sizing speed: one traffic question on one chip type, as ``serve --search --rate`` asks it. Goal (issue
24): about 1 s for one chip type.

Run: python benchmarks/bench_fleet.py

Times :func:`aicalc.size_fleet` on the question issue 24 compared with aiconfigurator (Llama-3.1-70B in FP8 on
H200, 4,000 + 500 tokens, p99 TTFT ≤ 1 s and TPOT ≤ 50 ms) at 20 requests/s, and two more; each time is the
first call in this process (the catalog and the step tables built cold, as a CLI run does), then the best of
three. Prints the time over the goal as a ratio (≤ 1: met) and the simulations each took.
"""

from __future__ import annotations

import time

import aicalc

GOAL_S = 1.0
QUESTIONS = (
    ("llama-3.1-70b", "h200", dict(rate=20, prompt=4000, gen=500, dtypes=("fp8",), kv_dtypes=("fp8",))),
    ("llama-3.1-8b", "h100-sxm", dict(rate=60, prompt=1024, gen=256)),
    ("llama-2-70b", "h100-sxm", dict(requests_per_day=10e6, prompt=1024, gen=256)),
)

if __name__ == "__main__":
    for model, chip, kw in QUESTIONS:
        times = []
        for _ in range(4):
            t = time.perf_counter()
            r = aicalc.size_fleet(model, [chip], max_ttft="1s", max_tpot="50ms", **kw)
            times.append(time.perf_counter() - t)
        best = r.rows()[0] if len(r) else None
        first, warm = times[0], min(times[1:])
        answer = f"{best['chips']} chips ({best['mode']}, TP {best['tp']})" if best else "no fleet"
        print(f"{model} on {chip} at {r.meta['rate']:.4g} req/s: {answer}; first call {first:.2f} s "
              f"({first / GOAL_S:.2f}× the {GOAL_S:g} s goal), best of 3 {warm:.2f} s ({warm / GOAL_S:.2f}×), "
              f"{r.meta['simulations']} simulations")
