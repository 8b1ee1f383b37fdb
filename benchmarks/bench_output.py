"""Output speed: 80,000 rows of JSON or CSV against a one-row run of the same command (issue 25: ≤ 2×, streamed
in constant memory).

Each pair runs the one-row query and the 80,000-row query alternately, in fresh processes with the output thrown
away; the ratio is taken pair by pair (a machine whose speed drifts does not bias it) and the median printed, for
CPU time (user + system of the child) and wall time, with the 80,000-row run's peak resident memory.

    python benchmarks/bench_output.py [--runs 7] [--pipe]

On a shared or busy machine times drift by more than the differences sought; ``--instructions`` counts instead
the instructions each run executes (valgrind's callgrind, one run each, with ``PYTHONHASHSEED=0`` and one BLAS
thread: the same count from run to run) and prints the 80,000-row run's count over the one-row run's. It leaves
out what the kernel does for a process (page faults, the writes), so it reads higher than the CPU-time ratio.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_startup import instructions  # (callgrind's count of one run, as bench_startup takes it)

ROOT = Path(__file__).resolve().parents[1]
GOAL = 2.0

# (name, one-row arguments, 80,000-row arguments): both keep their rows as numpy columns (aicalc.result.Rows); serve's
# has a dozen float columns that are not whole numbers, kv-cache's mostly integers and byte counts
CASES = [
    ("kv-cache", ["kv-cache", "llama-3.1-8b", "--chip", "h100-sxm", "--context", "1k"],
     ["kv-cache", "llama-3.1-8b", "--chip", "h100-sxm", "--context", "1k", "--batch", "1:80000:+1"]),
    ("serve", ["serve", "llama-3.1-8b", "--chip", "h100-sxm", "--concurrency", "1"],
     ["serve", "llama-3.1-8b", "--chip", "h100-sxm", "--concurrency", "1:80000:+1"]),
]


def _once(argv: list[str], pipe: bool = False) -> tuple[float, float, float]:
    """(wall s, cpu s, peak resident MiB) of one run, its output thrown away: into /dev/null, or (``pipe``) read
    from a pipe, as ``| jq`` or ``| cat`` would take it (the reader's own time not counted)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "aicalc", *argv], stdout=subprocess.PIPE if pipe else
                         subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    if pipe:
        while p.stdout.read(1 << 16):
            pass
    err = p.stderr.read()
    p.wait()
    wall = time.perf_counter() - start
    if p.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)}: exit {p.returncode}: {err.decode()[-500:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), after.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--pipe", action="store_true", help="read each run's output from a pipe (default: /dev/null)")
    parser.add_argument("--instructions", action="store_true", help="count instructions (valgrind) instead of "
                        "timing")
    args = parser.parse_args()
    runs, pipe = args.runs, args.pipe
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "aicalc")], check=True,
                   stdout=subprocess.DEVNULL)
    if args.instructions:
        if shutil.which("valgrind") is None:
            raise SystemExit("--instructions needs valgrind")
        print(f"instructions executed, one run each (valgrind callgrind); goal <= {GOAL:g}x in time")
        for name, one, many in CASES:
            for fmt in ("json", "csv"):
                i_many, i_one = (instructions([sys.executable, "-m", "aicalc", *q, "--format", fmt]) for q in (many, one))
                print(f"{name:<9} {fmt:<5} one row {i_one / 1e6:7.0f} M, 80,000 rows {i_many / 1e6:7.0f} M: "
                      f"{i_many / i_one:.2f}x")
        return
    print(f"{runs} pairs each, output into {'a pipe' if pipe else '/dev/null'}, median of (80,000 rows) / (one row) per pair; goal <= {GOAL:g}x")
    for name, one, many in CASES:
        for fmt in ("json", "csv"):
            a, b = [*many, "--format", fmt], [*one, "--format", fmt]
            _once(a, pipe), _once(b, pipe)  # warm-up: file cache, the catalog index
            cpu, wall, one_ms, many_ms = [], [], [], []
            for _ in range(runs):
                (aw, ac, _), (bw, bc, _) = _once(a, pipe), _once(b, pipe)
                cpu.append(ac / bc)
                wall.append(aw / bw)
                one_ms.append(bc * 1e3)
                many_ms.append(ac * 1e3)
            r = statistics.median(cpu)
            print(f"{name:<9} {fmt:<5} one row {statistics.median(one_ms):6.0f} ms cpu, 80,000 rows "
                  f"{statistics.median(many_ms):6.0f} ms cpu: {r:.2f}x cpu, {statistics.median(wall):.2f}x wall "
                  f"({'met' if r <= GOAL else 'NOT met'})")
    print("peak resident memory of a child (the largest run): "
          f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
