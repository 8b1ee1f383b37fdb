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


class ParameterError(AicalcError):
    """A bad value of one named parameter of the library: ``tp=3 does not divide the 32 attention heads``.

    The library names its own parameters; the command line shows the same message with the option's flag
    (``--tp 3 does not divide …``), through the one table in :mod:`aicalc.flags`.

    A problem that names another parameter writes it in braces, ``needs {zero=3}`` or ``needs {lora_rank}``:
    the library shows ``zero=3``, the command line ``--zero 3``."""

    def __init__(self, param: str, value, problem: str):
        self.param, self.value, self.problem = param, value, problem
        super().__init__(f"{param}={_show(value)} {refer(problem, _library)}")


def _library(name: str, value: str | None) -> str:
    return name if value is None else f"{name}={value}"


def refer(problem: str, style) -> str:
    """``problem`` with each ``{name}`` / ``{name=value}`` written by ``style(name, value)``."""
    import re

    return re.sub(r"\{(\w+)(?:=([^}]*))?\}", lambda m: style(m[1], m[2]), problem)


def _show(value) -> str:
    if isinstance(value, float) and value.is_integer():  # False for nan and inf
        return str(int(value))
    return str(value)


def check_choice(param: str, value, choices) -> None:
    """``value`` must be one of ``choices``: else a ParameterError naming ``param``."""
    if value not in choices:
        raise ParameterError(param, value, f"is not one of {', '.join(str(c) for c in choices)}")
