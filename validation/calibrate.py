"""Fit efficiency factors of one chip class or engine on a named calibration subset, by coordinate search.

    python validation/calibrate.py --cases ID,ID,... --factor bandwidth=0.5:1.0 --factor step_overhead_s=0:0.01

Prints the factors that minimise the geometric-mean error over those cases (each evaluated through the public API
with the factors as ``efficiency`` overrides on top of the current profiles), then the error of every case of the
same regimes with those factors, calibration and held out apart. The chosen values go into the profile YAML by
hand, with their source: "fitted on <ids> (validation/calibrate.py)".
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import perf_cases as pc  # noqa: E402


def error_of(cases, factors):
    import aicalc

    errs = []
    for c in cases:
        args = dict(c["args"])
        if factors:
            args["efficiency"] = factors
        r = getattr(aicalc, c["api"])(**args)
        est = pc.read(c, float(r[c["metric"]][0]))
        errs.append(abs(est / c["measured"] - 1.0))
    return errs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", required=True, help="comma-separated case ids of the calibration subset")
    ap.add_argument("--factor", action="append", default=[], help="NAME=LO:HI (searched on a log or linear grid)")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    every = {c["id"]: c for c in pc.cases()}
    calib = [every[i] for i in a.cases.split(",")]
    ranges = {}
    for f in a.factor:
        name, _, rng = f.partition("=")
        lo, hi = (float(x) for x in rng.split(":"))
        ranges[name] = (lo, hi)
    best = {k: (lo + hi) / 2 for k, (lo, hi) in ranges.items()}
    score = pc.geomean_error(error_of(calib, best))
    for _ in range(a.rounds):
        for k, (lo, hi) in ranges.items():
            for i in range(41):
                v = lo + (hi - lo) * i / 40
                trial = {**best, k: v}
                s = pc.geomean_error(error_of(calib, trial))
                if s < score - 1e-12:
                    best, score = trial, s
    print("fitted:", {k: float(f"{v:.4g}") for k, v in best.items()}, f"calibration geomean {score:.1%}")
    regimes = {c["regime"] for c in calib}
    for c in (c for c in every.values() if c["regime"] in regimes):
        e = error_of([c], best)[0]
        tag = "calibration" if c["id"] in a.cases.split(",") else "held out"
        print(f"  {c['id']:<10} {tag:<12} {e:6.1%}  {c['what'][:70]}")
    return 0 if math.isfinite(score) else 1


if __name__ == "__main__":
    sys.exit(main())
