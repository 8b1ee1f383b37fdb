"""Plain YAML, as budget files are written, read without PyYAML: importing ``yaml`` compiles its reader's and
resolver's regular expressions (~90 M instructions, more than the rest of ``aicalc check``).

Read here: block mappings and sequences, one-line flow collections (``{chip: h100-sxm, tp: 4}``, ``[a, b]``),
plain scalars and quoted ones without escapes, comments. Anything else, and anything in doubt (a scalar that
might be a date, a base-60 or octal number; a tab; an anchor; a key given twice; a multi-line scalar), returns
None and the file goes to PyYAML (:mod:`aicalc.catalog.store`), which reads all of YAML and words its errors. What
is read here is what PyYAML's safe loader reads, value for value and line for line (tests/test_plain_yaml.py).
"""

from __future__ import annotations

from typing import Any

from aicalc.catalog.store import MAX_DEPTH, MAX_INT_DIGITS, MAX_NODES


class _Doubt(Exception):
    """Not plain enough: PyYAML reads the file."""


# YAML 1.1's implicit scalars as PyYAML resolves them (yaml/resolver.py)
_BOOL = {**dict.fromkeys(("yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
         **dict.fromkeys(("no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False)}
_NULL = ("~", "null", "Null", "NULL")
# every character of YAML 1.1's ints (binary, octal, hex, base 60), floats (.inf, .nan, exponents) and dates
_NUMBER = frozenset("0123456789+-._:eExXoObBabcdefABCDEFiInN")
_DATE = _NUMBER | frozenset("tTzZ ")  # a date-time: 2001-12-14t21:59:43.10-05:00
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 -_./+,()%$=^;<>~")
_KEY = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
_FLOW_PLAIN = _PLAIN - frozenset(",")


def parse(text: str) -> tuple[Any, dict[tuple, int]] | None:
    """(data, {path: line}) as :func:`aicalc.catalog.store.load_yaml_lines` gives them, or None."""
    if not text.replace("\n", "").isprintable():  # tabs, CR, YAML's other line breaks, control characters
        return None
    entries = []
    for number, line in enumerate(text.split("\n"), 1):
        content = _uncomment(line)
        if content is None:
            return None
        content = content.rstrip(" ")
        if not content.isascii():  # beyond ASCII in comments only
            return None
        if content:
            indent = len(content) - len(content.lstrip(" "))
            if indent == 0 and content.startswith(("---", "...", "%")):  # documents, directives
                return None
            entries.append([number, indent, content[indent:]])
    if not entries:
        return None
    reader = _Reader(entries)
    try:
        data, line, end = reader.block(0, entries[0][1], (), 0)
        if end != len(entries) or not isinstance(data, (dict, list)):
            return None
    except (_Doubt, RecursionError):
        return None
    reader.lines[()] = line
    return data, reader.lines


def _uncomment(line: str) -> str | None:
    """The line without its comment; None where a quote or a ``#`` is not plainly where YAML reads it so."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
            elif ch == "\\" and quote == '"':
                return None
        elif ch in "'\"":
            before = line[:i].rstrip(" ")
            if not (i == 0 or line[i - 1] in " [{," and (not before or before[-1] in ":-[{,")):
                return None
            quote = ch
        elif ch == "#":
            if i and line[i - 1] != " ":
                return None
            return line[:i]
    return None if quote else line


class _Reader:
    def __init__(self, entries: list):
        self.entries = entries
        self.lines: dict[tuple, int] = {}
        self.nodes = 0

    def _count(self) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _Doubt

    def block(self, i: int, indent: int, where: tuple, depth: int) -> tuple[Any, int, int]:
        """(value, first line, next entry) of the block node whose first entry is ``i``."""
        if depth >= MAX_DEPTH:
            raise _Doubt
        self._count()
        content = self.entries[i][2]
        if content == "-" or content.startswith("- "):
            return self.sequence(i, indent, where, depth)
        return self.mapping(i, indent, where, depth)

    def mapping(self, i: int, indent: int, where: tuple, depth: int) -> tuple[dict, int, int]:
        entries, out, first = self.entries, {}, self.entries[i][0]
        while i < len(entries) and entries[i][1] == indent:
            number, _, content = entries[i]
            key, sep, rest = content.partition(":")
            if not sep or (rest and rest[0] != " ") or not key or not set(key) <= _KEY:
                raise _Doubt
            k = _scalar(key)
            if type(k) is not str or k in out:
                raise _Doubt
            self.lines[(*where, key)] = number
            self._count()
            rest = rest.strip(" ")
            i += 1
            if rest:
                out[k] = self.inline(rest, (*where, key), depth + 1, number)
            elif i < len(entries) and entries[i][1] > indent:
                out[k], _, i = self.block(i, entries[i][1], (*where, key), depth + 1)
            elif i < len(entries) and entries[i][1] == indent and (entries[i][2] == "-" or
                                                                   entries[i][2].startswith("- ")):
                out[k], _, i = self.sequence(i, indent, (*where, key), depth + 1)
            else:
                raise _Doubt  # an empty value
        if i < len(entries) and entries[i][1] > indent:
            raise _Doubt
        return out, first, i

    def sequence(self, i: int, indent: int, where: tuple, depth: int) -> tuple[list, int, int]:
        entries, out, first = self.entries, [], self.entries[i][0]
        while i < len(entries) and entries[i][1] == indent and (entries[i][2] == "-" or
                                                                entries[i][2].startswith("- ")):
            number, _, content = entries[i]
            path = (*where, len(out))
            rest = content[1:].lstrip(" ")
            if not rest:
                if not (i + 1 < len(entries) and entries[i + 1][1] > indent):
                    raise _Doubt  # an empty item
                value, line, i = self.block(i + 1, entries[i + 1][1], path, depth + 1)
            elif rest == "-" or rest.startswith("- ") or _is_entry(rest):  # a node begun on the item's line
                entries[i] = [number, indent + len(content) - len(rest), rest]
                value, line, i = self.block(i, entries[i][1], path, depth + 1)
            else:
                value, line, i = self.inline(rest, path, depth + 1, number), number, i + 1
            self.lines.setdefault(path, line)
            out.append(value)
        if i < len(entries) and entries[i][1] > indent:
            raise _Doubt
        return out, first, i

    def inline(self, text: str, where: tuple, depth: int, line: int) -> Any:
        """A value that ends on its line ``line``: a quoted or plain scalar, or a flow collection."""
        if text[0] in "[{":
            value, end = self.flow(text, 0, where, depth, line)
            if end != len(text):
                raise _Doubt
            return value
        self._count()
        if text[0] in "'\"":
            if len(text) < 2 or text[-1] != text[0] or text[0] in text[1:-1]:
                raise _Doubt
            return text[1:-1]
        return _scalar(_plain(text, _PLAIN))

    def flow(self, text: str, i: int, where: tuple, depth: int, line: int) -> tuple[Any, int]:
        """A flow mapping or sequence from ``text[i]`` (its bracket) on one line: (value, index after it)."""
        if depth >= MAX_DEPTH:
            raise _Doubt
        self._count()
        close = "}" if text[i] == "{" else "]"
        out: Any = {} if close == "}" else []
        i = _skip(text, i + 1)
        if i < len(text) and text[i] == close:
            return out, i + 1
        while True:
            if close == "}":
                j = i
                while j < len(text) and text[j] in _KEY:
                    j += 1
                key = text[i:j]
                if not key or text[j:j + 2] != ": ":
                    raise _Doubt
                k = _scalar(key)
                if type(k) is not str or k in out:
                    raise _Doubt
                path = (*where, key)
                self.lines[path] = line
                self._count()
                i = _skip(text, j + 1)
            else:
                path = (*where, len(out))
                self.lines.setdefault(path, line)
            if i >= len(text):
                raise _Doubt
            if text[i] in "[{":
                value, i = self.flow(text, i, path, depth + 1, line)
            elif text[i] in "'\"":
                end = text.find(text[i], i + 1)
                if end < 0:
                    raise _Doubt
                value, i = text[i + 1:end], end + 1
                self._count()
            else:
                j = i
                while j < len(text) and text[j] not in ",]}":
                    j += 1
                token = text[i:j].rstrip(" ")
                value, i = _scalar(_plain(token, _FLOW_PLAIN)), i + len(token)
                self._count()
            if close == "}":
                out[k] = value
            else:
                out.append(value)
            i = _skip(text, i)
            if i < len(text) and text[i] == close:
                return out, i + 1
            if i >= len(text) or text[i] != ",":
                raise _Doubt
            i = _skip(text, i + 1)
            if i >= len(text) or text[i] in ",]}":
                raise _Doubt  # an empty entry, a trailing comma


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] == " ":
        i += 1
    return i


def _is_entry(text: str) -> bool:
    """Whether a plain ``key: value`` (or ``key:``) begins the text."""
    key, sep, rest = text.partition(":")
    return bool(sep) and (not rest or rest[0] == " ") and bool(key) and set(key) <= _KEY


def _plain(token: str, allowed: frozenset) -> str:
    """The token, when it is plainly a plain scalar: its characters allowed, not begun by an indicator."""
    if not token or not set(token) <= allowed or token[0] in ",>%" or token[0] == "-" and token[1:2] in ("", " "):
        raise _Doubt
    return token


def _scalar(text: str) -> Any:
    """A plain scalar resolved as PyYAML's resolver would: null, bool, int, float or str; _Doubt where it might
    be anything else."""
    if text in _BOOL:
        return _BOOL[text]
    if text in _NULL:
        return None
    c = text[0]
    if c in "<=~":
        raise _Doubt
    if c not in "-+0123456789.":
        return text
    body = text[1:] if c in "-+" else text
    if body.isdigit() and (body == "0" or body[0] != "0"):
        if len(text) > MAX_INT_DIGITS:  # the loader's limit, sign included
            raise _Doubt
        return int(text)
    whole, dot, part = body.partition(".")
    if dot and whole.isdigit() and (not part or part.isdigit()):
        return float(text)
    if set(text) <= (_DATE if text[:4].isdigit() and text[4:5] == "-" else _NUMBER):
        raise _Doubt  # might be an int, a float or a date
    return text
