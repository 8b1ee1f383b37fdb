"""``python -m aicalc`` and the ``aicalc`` console script (``run``): Ctrl-C while the modules are still
importing exits 130 without a traceback, as it does once the command runs."""

import sys


def run() -> None:
    try:
        from aicalc.cli import main
    except KeyboardInterrupt:
        sys.exit(130)
    main()


if __name__ == "__main__":
    run()
