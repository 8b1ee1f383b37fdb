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


# CPython 3.11+ keeps its frames on a stack of 16 KiB chunks: a call that does not fit in the current chunk maps a
# new one and its return unmaps it again. A loop whose calls sit across a chunk's edge does that on every call
# (~11 µs here: mmap, a page fault, munmap): `serve` crossed one ~830 times a query (importing and in its core),
# `train-mem` ~815, `roofline` ~615, ~9 ms of a ~200 ms query (docs/robustness.md). A chunk is sized to the frame
# that needs it, rounded up to a power of two with 1,000 words to spare: a first frame of 66,000 stack words
# (516 KiB, never written to, so never paged in) gets a 1 MiB chunk, and every call the command makes then has the
# ~500 KiB after it (thousands of frames) in that one chunk.
WIDE_STACK_WORDS = 66_000


def on_a_wide_stack(fn):
    """``fn()`` called from a frame that opens a chunk with room for every call ``fn`` makes (see above); a plain
    call where the interpreter's code objects do not take a stack size (not CPython)."""
    try:
        code = _call.__code__.replace(co_stacksize=WIDE_STACK_WORDS)
    except (AttributeError, TypeError, ValueError):
        return fn()
    return type(_call)(code, globals())(fn)


def _call(fn):
    return fn()


def run() -> None:
    import gc

    one_blas_thread()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    on_a_wide_stack(_start)


def _start() -> None:
    try:
        from aicalc.cli import main
    except KeyboardInterrupt:
        sys.exit(130)
    main()


if __name__ == "__main__":
    run()
