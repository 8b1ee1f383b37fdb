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
        close = suggestions(name, known)
        listing = f"aicalc presets list --kind {kind}" if kind in ("chip", "model", "node") else "aicalc presets list"
        hint = f"; did you mean {', '.join(close)}?" if close else f"; see `{listing}`"
        super().__init__(f"unknown {kind} '{name}'{hint}")


def _family(name: str) -> str:
    """The family an id belongs to: its leading letters (``llama`` of ``llama-3.1-8b``, ``h`` of ``h100``
    widened to the first part, ``h100`` of ``h100-sxm``)."""
    import re

    head = re.split(r"[-_. ]", name.lower(), maxsplit=1)[0]
    letters = re.match(r"[a-z]+", head)
    return head if letters is None or len(letters[0]) < 3 else letters[0]


def suggestions(name: str, known: list[str], n: int = 3) -> list[str]:
    """Up to ``n`` ids like ``name``: ids of its family first (``llama-3-8b`` → the llama ids, nearest
    first), then any id close in spelling."""
    import difflib
    import re

    low = name.lower()
    version = re.search(r"\d+", low)  # llama3 → 3: a family member of that version ranks first
    ratio = {k: difflib.SequenceMatcher(None, low, k.lower()).ratio() for k in known}
    if version:
        for k in known:
            first = re.search(r"\d+", k.lower())
            if first and first[0] == version[0]:
                ratio[k] += 0.25
    fam = _family(low)
    same = sorted((k for k in known if _family(k) == fam and ratio[k] >= 0.4), key=lambda k: -ratio[k])
    rest = sorted((k for k in known if k not in same and ratio[k] >= 0.6), key=lambda k: -ratio[k])
    return (same + rest)[:n]


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
