"""Scheduler simulation speed: 10,000 requests per arrival rate. Goal (issue 14): <= 2 s for 10,000 requests.

Run: python benchmarks/bench_traffic.py
"""

from __future__ import annotations

import time

import aicalc

GOAL_S = 2.0

if __name__ == "__main__":
    for model, chip, tp, rate in (("llama-3.1-8b", "h100-sxm", 1, 20.0), ("llama-3.1-70b", "h100-sxm", 4, 5.0),
                                  ("mixtral-8x7b", "h200", 2, 10.0)):
        t = time.perf_counter()
        r = aicalc.simulate(model, chip, rate=rate, num_requests=10_000, tp=tp)
        dt = time.perf_counter() - t
        print(f"{model} on {tp}x {chip} at {rate:g} req/s: 10,000 requests in {dt:.2f} s "
              f"(goal <= {GOAL_S:g} s: {'met' if dt <= GOAL_S else 'NOT met'}); p99 TTFT {r.p99_ttft_s[0]:.3g} s")
