"""The process environment a command writes to, injectable so tests can fake a terminal or a pipe."""

import os
import sys
from typing import TextIO

from aicalc.tuples import Named


class Env(Named):
    """The console a command writes to: streams, whether they are terminals, colour and width."""

    stdout: TextIO
    stderr: TextIO
    stdout_isatty: bool
    no_color: bool = False
    width: int | None = None  # None: the terminal's width when a terminal, unlimited when piped
    stderr_isatty: bool = False  # progress bars go to stderr, only when it is a terminal
    columns: list[str] | None = None  # the table columns a user chose (--columns)

    @classmethod
    def from_system(cls) -> "Env":
        """The process's own streams. A closed stream (``>&-``: Python's ``None``) is a sink that keeps nothing;
        a stream whose encoding cannot spell "×" or "µ" (``PYTHONIOENCODING=ascii``) writes "?" instead of
        failing."""
        out, err = (_usable(s) for s in (sys.stdout, sys.stderr))
        return cls(
            stdout=out,
            stderr=err,
            stdout_isatty=_isatty(out),
            no_color="NO_COLOR" in os.environ and os.environ["NO_COLOR"] != "",
            stderr_isatty=_isatty(err),
        )


def _usable(stream) -> TextIO:
    if stream is None:
        return open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
    if encoding not in ("utf8", "utf8sig") and hasattr(stream, "reconfigure"):
        try:
            stream.reconfigure(errors="replace")
        except (ValueError, OSError):
            pass
    return stream


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (ValueError, OSError, AttributeError):
        return False
