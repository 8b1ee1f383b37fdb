"""Deployment search speed with expert and attention-data parallelism: an 8-GPU question, as ``serve --search``
asks it. Goals: under a second for an 8-GPU question, MoE layouts included (issue 21); 0.1 s (issue 25).

Run: python benchmarks/bench_deployment_search.py

Times :func:`aicalc.search_deployments` over TP 1-8, each TP with plain TP, EP and DEP for the MoE models
(aggregated and disaggregated): the first call in this process (catalog and profiles read cold, as a CLI run;
numpy imported before, as every command's start-up has it, docs/robustness.md), then the best of three. Prints the
time over each goal as a ratio (≤ 1: met) and the deployments ranked.
"""

from __future__ import annotations

import time

import numpy  # noqa: F401  (the floor every query pays before it computes anything: not the search's)

import aicalc

GOAL_S = 1.0
GOAL_25_S = 0.1
QUESTIONS = (
    ("deepseek-v3", "h200", dict(prompt=1000, gen=1000, max_ttft=2.0, max_tpot=0.1)),
    ("gpt-oss-120b", "h100-sxm", dict(prompt=1024, gen=1024, max_ttft=1.0, max_tpot=0.05)),
    ("llama-3.1-70b", "h200", dict(prompt=4000, gen=500, dtypes=("fp8",), max_ttft=1.0, max_tpot=0.05)),
)

if __name__ == "__main__":
    for model, chip, kw in QUESTIONS:
        times = []
        for _ in range(4):
            t = time.perf_counter()
            r = aicalc.search_deployments(model, [chip], 8, **kw)
            times.append(time.perf_counter() - t)
        best = min(times[1:])
        print(f"{model} on 8 x {chip}: first {times[0]:.3f} s, warm {best:.3f} s "
              f"({times[0] / GOAL_S:.2f}x / {best / GOAL_S:.2f}x the {GOAL_S:g} s goal, "
              f"{times[0] / GOAL_25_S:.2f}x / {best / GOAL_25_S:.2f}x the {GOAL_25_S:g} s goal), {len(r)} deployments")
