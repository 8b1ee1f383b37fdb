"""One table across the values of a choice option: ``--dtype bf16,fp8,int4`` runs the command per value and
stacks the rows, the value as the first column."""

from __future__ import annotations

from collections.abc import Callable

from aicalc.result import Result


def choices(text) -> list[str]:
    """``"bf16,fp8"`` → ["bf16", "fp8"]; a single value → [value]."""
    return [t.strip() for t in str(text).split(",") if t.strip()] or [str(text)]


def over(key: str, values: list, run: Callable[[object], Result]) -> Result:
    """``run(value)`` for each value, stacked; a single value is the plain result."""
    if not values:
        from aicalc.errors import ParameterError

        raise ParameterError(key, "", "names nothing: give at least one value")
    if len(values) == 1:
        return run(values[0])
    parts = [run(v) for v in values]
    first = parts[0]
    rows, warnings = [], []
    for v, r in zip(values, parts, strict=True):
        rows += [{key: v, **{k: x for k, x in row.items() if k != key}} for row in r.rows]
        warnings += [f"{key} {v}: {w}" for w in r.warnings]
    columns = [key] + [c for c in (first.columns or []) if c != key] if first.columns else None
    inputs = {**first.inputs, key: values}
    return Result(first.command, inputs, rows, warnings=warnings, exit_code=max(r.exit_code for r in parts),
                  title=joint_title([r.title or "" for r in parts], key, values),
                  notes=list(dict.fromkeys(n for r in parts for n in r.notes)), columns=columns)


def joint_title(titles: list[str], key: str, values: list) -> str:
    """One title for stacked results: the same title once with the values after it, or, where the titles
    differ (``… on 1 × NVIDIA L4 24GB (TP 1 …`` and ``… H100 SXM5 80GB …``), their common start and end around
    the parts that differ, joined by " / " (each part with balanced brackets)."""
    import re

    if len(set(titles)) == 1:
        return f"{titles[0]} — {key.replace('_', '-')} {', '.join(map(str, values))}".lstrip(" —")
    split = [re.findall(r"\w[\w.]*|\s+|[^\w\s]", t) for t in titles]
    shortest = min(map(len, split))
    head = next((i for i in range(shortest) if len({tuple(t[i:i + 1]) for t in split}) > 1), shortest)
    tail = next((i for i in range(shortest - head) if len({t[len(t) - 1 - i] for t in split}) > 1),
                shortest - head)

    def excess(t: list[str]) -> int:  # opening minus closing brackets of a title's differing part
        text = "".join(t[head:len(t) - tail])
        return text.count("(") + text.count("[") - text.count(")") - text.count("]")

    while any(excess(t) for t in split) and (head or tail):
        grow_end = any(excess(t) > 0 for t in split) and tail
        head, tail = (head, tail - 1) if grow_end else (head - 1, tail) if head else (head, tail - 1)
    start, end = "".join(split[0][:head]), "".join(split[0][len(split[0]) - tail:])
    middles = ["".join(t[head:len(t) - tail]).strip() for t in split]
    if len(middles) <= 3 and all("," not in m and len(m) <= 40 for m in middles):
        return start + " / ".join(middles) + end
    return _elided(split, key, values)


def _elided(split: list[list[str]], key: str, values: list) -> str:
    """Titles that differ in several places (``on 2 × … (TP 2, 1 replica …`` / ``on 8 × … (TP 8 …``): the
    first title with every part that is not the same in all of them shown as "…", and the swept values after."""
    import difflib
    import re

    first = split[0]
    common = set(range(len(first)))
    for other in split[1:]:
        m = difflib.SequenceMatcher(None, first, other, autojunk=False)
        common &= {i for a, _, n in m.get_matching_blocks() for i in range(a, a + n)}
    out: list[str] = []
    for i, tok in enumerate(first):
        if i in common:
            out.append(tok)
        elif not out or out[-1] != "…":
            out.append("…")
    text = re.sub(r"…(\s*…)+", "…", "".join(out))  # elided words in a row: one "…"
    return f"{text} — {key.replace('_', '-')} {', '.join(map(str, values))}"


def over_chips(chips, run: Callable[[str], Result]) -> Result:
    """``run(chip)`` for every chip given (a repeated ``--chip``, a comma list, or both), stacked into one
    table with the chip as the first column."""
    chips = chips if isinstance(chips, (list, tuple)) else [chips]
    return over("chip", [c.strip() for x in chips for c in str(x).split(",") if c.strip()], run)
