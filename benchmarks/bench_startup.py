"""Start-up of aicalc against its yardsticks, measured side by side (docs/robustness.md):

- a one-off query, ``aicalc kv-cache llama-3.1-8b --chip h100-sxm`` (a table into a pipe), against a cold
  ``python -c "import numpy, typer"`` (what any numpy + typer command line pays before it does anything);
- ``aicalc --help`` against ``--help`` of a minimal two-command Typer app.

Each pair runs A B A B …, the ratio is taken pair by pair (so that a machine whose speed drifts does not bias it)
and the median ratio is printed, for wall-clock time and for CPU time (user + system of the child). The targets
of the issue are ≤ 1.1 for both. The floor pays numpy's OpenBLAS threads spinning after its import (~80 ms of
CPU time on 2 cores); aicalc's console script starts none (``aicalc.__main__.one_blas_thread``), so a last line
measures the floor with one BLAS thread too. Bytecode is compiled first (as an installed package has it) and the built-in
catalog index is built by a warm-up run.

    python benchmarks/bench_startup.py [--runs 20]

On a shared or busy machine times drift by more than the differences sought; ``--instructions`` counts instead
the instructions each process executes (valgrind's callgrind, one run each, with ``PYTHONHASHSEED=0`` and one
BLAS thread: the same count from run to run) and prints each query's count as a ratio to the floor's. It leaves out
what the kernel does for a process (mapping numpy's libraries, page faults), so its ratios run higher than the
CPU-time ratios.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TWO_COMMANDS = '''
import typer

app = typer.Typer()


@app.command()
def hello(name: str):
    """Say hello."""
    print(f"hello {name}")


@app.command()
def bye(name: str):
    """Say bye."""
    print(f"bye {name}")


if __name__ == "__main__":
    app()
'''


# every command's typical query (issue 25: each <= 1.1x the floor)
QUERIES = [
    ["kv-cache", "llama-3.1-8b", "--chip", "h100-sxm"],
    ["train-mem", "llama-3.1-8b", "--chip", "h100-sxm", "--dp", "8", "--zero", "3"],
    ["roofline", "llama-3.1-8b", "--chip", "h100-sxm", "--batch", "1,16"],
    ["serve", "llama-3.1-8b", "--chip", "h100-sxm", "--max-tpot", "50ms"],
    ["train-time", "llama-3.1-8b", "--chip", "h100-sxm", "--chips", "64", "--tokens", "1T"],
    ["compare", "llama-3.1-70b", "--chip", "h100-sxm"],
    ["check", "docs/examples/ci/budgets.yaml"],
]


def _aicalc() -> list[str]:
    script = Path(sys.executable).with_name("aicalc")
    return [str(script)] if script.exists() else [sys.executable, "-m", "aicalc"]


def _once(argv: list[str]) -> tuple[float, float]:
    """(wall s, cpu s) of one run, its output thrown away."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    code = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT).returncode
    if code not in (0, 1):  # 1: a budget broke or a layout does not fit, still a full answer
        raise SystemExit(f"{' '.join(argv)}: exit {code}")
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def pair(a: list[str], b: list[str], runs: int) -> dict:
    for _ in range(2):  # warm-up: file cache, the catalog index
        _once(a), _once(b)
    walls, cpus, a_wall, b_wall = [], [], [], []
    for _ in range(runs):
        (aw, ac), (bw, bc) = _once(a), _once(b)
        walls.append(aw / bw)
        cpus.append(ac / bc if bc else float("nan"))
        a_wall.append(aw)
        b_wall.append(bw)
    return {"wall": statistics.median(walls), "cpu": statistics.median(cpus),
            "a_ms": 1e3 * statistics.median(a_wall), "b_ms": 1e3 * statistics.median(b_wall)}


def instructions(argv: list[str]) -> int:
    """Instructions one run of ``argv`` executes in user space (callgrind's ``I refs``)."""
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")  # BLAS threads spin a varying while
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv], cwd=ROOT,
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True).stderr
    return int(next(line for line in out.splitlines() if "I   refs" in line).split()[-1].replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--instructions", action="store_true", help="count instructions (valgrind) instead of "
                        "timing")
    args = parser.parse_args()
    runs = args.runs
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "aicalc")], check=True,
                   stdout=subprocess.DEVNULL)
    tmp = Path(tempfile.mkdtemp())
    try:
        two = tmp / "two.py"
        two.write_text(TWO_COMMANDS)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tmp)], check=True, stdout=subprocess.DEVNULL)
        floor = "python -c 'import numpy, typer'", [sys.executable, "-c", "import numpy, typer"]
        cases = [(" ".join(q[:2]), [*_aicalc(), *q], *floor) for q in QUERIES]
        cases.append(("aicalc --help", [*_aicalc(), "--help"], "two-command Typer app --help",
                      [sys.executable, str(two), "--help"]))
        if args.instructions:
            if shutil.which("valgrind") is None:
                raise SystemExit("--instructions needs valgrind")
            _once(cases[0][1]), _once(cases[0][3])  # the catalog index, once
            print(f"python {sys.version.split()[0]}; instructions executed, one run each (valgrind callgrind)")
            for name, a, yardstick, b in cases:
                ia, ib = instructions(a), instructions(b)
                print(f"{name:<28} {ia / 1e6:7.0f} M  vs {yardstick:<32} {ib / 1e6:7.0f} M:  {ia / ib:.2f}x "
                      "(target <= 1.1x)")
            return
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, {runs} pairs each; median of A/B per pair")
        for name, a, yardstick, b in cases:
            r = pair(a, b, runs)
            print(f"{name:<28} {r['a_ms']:6.1f} ms  vs {yardstick:<32} {r['b_ms']:6.1f} ms:  "
                  f"{r['wall']:.2f}x wall, {r['cpu']:.2f}x cpu  (target <= 1.1x)")
        # the floor without numpy's spinning BLAS threads, as aicalc's console script runs (aicalc.__main__)
        r = pair(["env", "OPENBLAS_NUM_THREADS=1", *floor[1]], floor[1], runs)
        print(f"{'the floor, one BLAS thread':<28} {r['a_ms']:6.1f} ms  vs {floor[0]:<32} {r['b_ms']:6.1f} ms:  "
              f"{r['wall']:.2f}x wall, {r['cpu']:.2f}x cpu  (divide a CPU ratio above by it to compare with a "
              "numpy command line that spins no threads)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
