"""Core speed: roofline configurations (prefill + decode, ideal + estimate) per second. Goal ≥ 10⁶/s."""

from __future__ import annotations

import time

import numpy as np

from aicalc.commands.roofline import setup
from aicalc.core import roofline as rl
from aicalc.core.efficiency import Efficiency


def main(n: int = 200_000) -> None:
    _spec, _chip, s, roofs, fm, _cdt, _w = setup("llama-3.1-70b", "h100-sxm", "bf16", "bf16")
    rng = np.random.default_rng(0)
    B = rng.integers(1, 512, n).astype(float)
    S = rng.integers(1, 32768, n).astype(float)
    G = rng.integers(1, 4096, n).astype(float)
    TP = rng.choice([1.0, 2.0, 4.0, 8.0], n)
    eff = Efficiency()
    t0 = time.perf_counter()
    rl.inference(s, roofs, fm, eff, B, S, G, TP)
    dt = time.perf_counter() - t0
    print(f"roofline core: {n:,} configurations in {dt:.2f} s = {n / dt:,.0f} configurations/s")


if __name__ == "__main__":
    main()
