"""The process environment a command writes to, injectable so tests can fake a terminal or a pipe."""

from __future__ import annotations

import os
import sys
from typing import NamedTuple, TextIO


class Env(NamedTuple):
    """The console a command writes to: streams, whether they are terminals, colour and width."""

    stdout: TextIO
    stderr: TextIO
    stdout_isatty: bool
    no_color: bool = False
    width: int | None = None  # None: the terminal's width when a terminal, unlimited when piped
    stderr_isatty: bool = False  # progress bars go to stderr, only when it is a terminal
    columns: list[str] | None = None  # the table columns a user chose (--columns)

    @classmethod
    def from_system(cls) -> Env:
        return cls(
            stdout=sys.stdout,
            stderr=sys.stderr,
            stdout_isatty=sys.stdout.isatty(),
            no_color="NO_COLOR" in os.environ and os.environ["NO_COLOR"] != "",
            stderr_isatty=sys.stderr.isatty(),
        )
