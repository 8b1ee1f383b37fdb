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
                  title=(first.title or "") + f" — {key} {', '.join(map(str, values))}", notes=first.notes, columns=columns)


def over_chips(chips, run: Callable[[str], Result]) -> Result:
    """``run(chip)`` for every chip given (a repeated ``--chip``, a comma list, or both), stacked into one
    table with the chip as the first column."""
    chips = chips if isinstance(chips, (list, tuple)) else [chips]
    return over("chip", [c.strip() for x in chips for c in str(x).split(",") if c.strip()], run)
