"""Named exit codes and the errors that map to them (see docs/interface.md)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # success; every budget holds
    BUDGET = 1  # a budget was exceeded, or a configuration does not fit where a fit was asked for
    BAD_INPUT = 2  # usage, unknown preset, invalid file, impossible layout
    INTERNAL = 3  # a bug


class AicalcError(Exception):
    """Bad input from the user: reported as one line on stderr, exit code 2."""

    exit_code = ExitCode.BAD_INPUT


class UnknownPreset(AicalcError):
    def __init__(self, kind: str, name: str, known: list[str]):
        import difflib

        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; see `aicalc presets list --kind {kind}`"
        super().__init__(f"unknown {kind} '{name}'{hint}")
