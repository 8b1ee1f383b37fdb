"""Fleet sizing speed: one traffic question on one chip type, as ``serve --search --rate`` asks it. Goal (issue
24): about 1 s for one chip type, against aiconfigurator's answer to the same question.

Run: python benchmarks/bench_fleet.py [--runs 3]

Two parts:

- in process: :func:`aicalc.size_fleet` on the question issue 24 compared with aiconfigurator (Llama-3.1-70B in
  FP8 on H200, 4,000 + 500 tokens, p99 TTFT ≤ 1 s and TPOT ≤ 50 ms) at 20 and 60 requests/s, and two more; each
  time is the first call in this process (the step tables built cold), then the best of ``--runs``;
- the command line, as a user runs it: ``aicalc serve … --search`` for the 8-chip question and for the fleet at
  60 requests/s, each in a fresh process, wall-clock and CPU (user + system of the child) time, best of
  ``--runs``: cold (an empty catalog cache, ``AICALC_CACHE_DIR`` a new folder: the first run after an install)
  and warm (the catalog index built by a run before). Bytecode is compiled first, as an installed package has
  it (with ``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__``, every run compiles aicalc's modules anew:
  about 0.1 s more).

Each time is printed over the goal as a ratio (≤ 1: met), with the simulations each search took. CPU time is the
one to compare between versions on a shared machine (wall-clock time there includes other processes' turns).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import aicalc

GOAL_S = 1.0
ISSUE = dict(prompt=4000, gen=500, dtypes=("fp8",), kv_dtypes=("fp8",))
QUESTIONS = (
    ("llama-3.1-70b", "h200", dict(rate=20, **ISSUE)),
    ("llama-3.1-70b", "h200", dict(rate=60, **ISSUE)),
    ("llama-3.1-8b", "h100-sxm", dict(rate=60, prompt=1024, gen=256)),
    ("llama-2-70b", "h100-sxm", dict(requests_per_day=10e6, prompt=1024, gen=256)),
)
CLI = ["serve", "llama-3.1-70b", "--chip", "h200", "--dtype", "fp8", "--kv-dtype", "fp8", "--prompt", "4000",
       "--gen", "500", "--max-ttft", "1s", "--max-tpot", "50ms", "--search"]
COMMANDS = (("8-chip search", CLI + ["--chips", "8"]), ("fleet at 60 req/s", CLI + ["--rate", "60"]))


def in_process(runs: int) -> None:
    for model, chip, kw in QUESTIONS:
        times, cpus = [], []
        for _ in range(runs + 1):
            t, c = time.perf_counter(), time.process_time()
            r = aicalc.size_fleet(model, [chip], max_ttft="1s", max_tpot="50ms", **kw)
            times.append(time.perf_counter() - t)
            cpus.append(time.process_time() - c)
        best = r.rows()[0] if len(r) else None
        first, warm, warm_cpu = times[0], min(times[1:]), min(cpus[1:])
        answer = f"{best['chips']} chips ({best['mode']}, TP {best['tp']})" if best else "no fleet"
        print(f"{model} on {chip} at {r.meta['rate']:.4g} req/s: {answer}; first call {first:.2f} s "
              f"({first / GOAL_S:.2f}× the {GOAL_S:g} s goal), best of {runs} {warm:.2f} s ({warm / GOAL_S:.2f}×), "
              f"CPU {warm_cpu:.2f} s; {r.meta['simulations']} simulations")


def _child(argv: list[str], cache: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one ``python -m aicalc ARGV`` with the catalog cache in ``cache``."""
    env = dict(os.environ, AICALC_CACHE_DIR=cache)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "aicalc", *argv, "--json"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def cli(runs: int) -> None:
    import compileall
    from pathlib import Path

    compileall.compile_dir(Path(aicalc.__file__).parent, quiet=1)
    for label, argv in COMMANDS:
        for state in ("cold", "warm"):
            walls, cpus = [], []
            for _ in range(runs):
                with tempfile.TemporaryDirectory() as cache:
                    if state == "warm":
                        _child(argv, cache)
                    wall, cpu = _child(argv, cache)
                walls.append(wall)
                cpus.append(cpu)
            print(f"aicalc {' '.join(argv[:2])} … {label}, {state} catalog cache: wall {min(walls):.2f} s "
                  f"({min(walls) / GOAL_S:.2f}× the {GOAL_S:g} s goal), CPU {min(cpus):.2f} s "
                  f"({min(cpus) / GOAL_S:.2f}×), best of {runs}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    in_process(args.runs)
    cli(args.runs)
