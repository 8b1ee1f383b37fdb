"""Core speed: roofline configurations (prefill + decode, ideal + estimate) per second. Goal ≥ 10⁶/s (issue 5);
issue 25: ≥ 10⁷/s through the Python API, ``aicalc.roofline``, over a 10⁶-point batch × prompt grid (CPU time,
best of 5), printed as a ratio to that goal and to one numpy ``sqrt(b*s*8+3)`` over the same grid.

Run: python benchmarks/bench_roofline.py [N]   (N configurations, default 200,000)

Measures ``aicalc.core.latency.inference`` — the call ``aicalc roofline`` makes for its whole grid: TTFT, TPOT
and tokens/s, ideal and estimated — on N random configurations (batch, prompt, gen, tp). "first call" is the
first evaluation in a fresh process (it pays the page faults of fresh memory, as a CLI run does); "best of 5"
repeats it. numpy's elementwise kernels run on one core.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from aicalc.api.roofline import cost_setup
from aicalc.core import latency
from aicalc.core.efficiency import Efficiency

GOAL = 1_000_000


def configs(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    B = rng.integers(1, 512, n).astype(float)
    S = rng.integers(1, 32768, n).astype(float)
    G = rng.integers(1, 4096, n).astype(float)
    TP = rng.choice([1.0, 2.0, 4.0, 8.0], n)
    return B, S, G, TP


def timed(model: str, chip: str, n: int, repeat: int) -> list[float]:
    cs = cost_setup(model, chip, "bf16", "bf16", tp_needs_link=True)
    B, S, G, TP = configs(n)
    eff = Efficiency()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        latency.inference(cs.shape, cs.roofs, cs.formats, eff, B, S, G, TP)
        times.append(time.perf_counter() - t0)
    return times


API_GOAL = 1e7


def api_rate(model: str, n: int = 1_000_000, chip: str = "h100-sxm") -> tuple[float, float]:
    """(configurations/s through aicalc.roofline, its time over one numpy pass), best of 5, CPU time: random batch
    1-511 and prompt 1-32767, gen 256, the chip's TP 1."""
    import aicalc

    rng = np.random.default_rng(0)
    B = rng.integers(1, 512, n).astype(np.float64)
    S = rng.integers(1, 32768, n).astype(np.float64)
    best, floor = float("inf"), float("inf")
    for _ in range(5):
        t = time.process_time()
        aicalc.roofline(model, chip, batch=B, prompt=S, gen=256)
        best = min(best, time.process_time() - t)
        t = time.process_time()
        np.sqrt(B * S * 8 + 3)
        floor = min(floor, time.process_time() - t)
    return n / best, best / floor


def main(n: int = 200_000) -> None:
    times = timed("llama-3.1-70b", "h100-sxm", n, 5)
    first, best = times[0], min(times)
    print(f"roofline core (inference: prefill + decode, ideal + estimate), llama-3.1-70b on h100-sxm, "
          f"{n:,} configurations:")
    print(f"  first call  {first:.3f} s = {n / first:>12,.0f} configurations/s")
    print(f"  best of 5   {best:.3f} s = {n / best:>12,.0f} configurations/s")
    print(f"  goal (issue 5) ≥ {GOAL:,} configurations/s: {'met' if n / first >= GOAL else 'NOT met'}")
    for model, what in (("mixtral-8x7b", "MoE"), ("gemma-2-9b", "sliding window"), ("deepseek-v3", "MLA + MoE")):
        t = min(timed(model, "h100-sxm", n, 3))
        print(f"  {model} ({what}), best of 3: {n / t:>12,.0f} configurations/s")
    for model in ("llama-3.1-8b", "llama-3.1-70b", "gemma-2-9b", "qwen3-30b-a3b"):
        rate, floor = api_rate(model)
        print(f"through aicalc.roofline, {model} on h100-sxm over 10⁶ points: {rate:,.0f} configurations/s = "
              f"{rate / API_GOAL:.2f}x the goal of {API_GOAL:.0e}/s, {floor:.0f}x one numpy pass")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
