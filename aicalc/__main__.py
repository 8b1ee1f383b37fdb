"""``python -m aicalc`` and the ``aicalc`` console script (``run``): Ctrl-C while the modules are still
importing exits 130 without a traceback, as it does once the command runs."""

import sys

# The console script's garbage collector runs a young-generation pass once 100,000 container objects have been
# allocated (CPython's default: 700). Importing typer, numpy and a command's modules allocates ~45,000 and a typical
# query ~50,000 more, none of them garbage; at 700 the collector traversed them ~70 times, 5 % of a query's
# instructions (`serve` 521 M -> 496 M, `compare` 712 M -> 685 M under callgrind, docs/robustness.md). A long run
# (a 10**7-layout search, a traced step) still collects its reference cycles, every 100,000 allocations. A library
# caller keeps its own collector settings: only this entry point sets them.
GC_YOUNG_THRESHOLD = 100_000


def one_blas_thread() -> None:
    """Have numpy's OpenBLAS start no worker threads, unless the caller's environment says how many: it starts one
    per core when numpy is imported and each spins for a while before it sleeps (numpy issues #25360, #29193:
    1.3 s of CPU time for ``import numpy`` on 18 cores, 0.05 s with one thread). No aicalc command calls a BLAS
    routine (its core is element-wise numpy); on a 2-core machine the spinning was ~80 ms of CPU time a query, as
    much as the rest of the process (docs/robustness.md). Set before numpy is first imported; child processes
    inherit it (aicalc starts none)."""
    import os

    if not any(k in os.environ for k in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"


def run() -> None:
    import gc

    one_blas_thread()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    try:
        from aicalc.cli import main
    except KeyboardInterrupt:
        sys.exit(130)
    main()


if __name__ == "__main__":
    run()
