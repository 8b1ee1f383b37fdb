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


def run() -> None:
    import gc

    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    try:
        from aicalc.cli import main
    except KeyboardInterrupt:
        sys.exit(130)
    main()


if __name__ == "__main__":
    run()
