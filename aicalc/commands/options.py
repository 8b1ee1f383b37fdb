"""Option values only the command line spells: ``--eff KEY=VALUE``."""

from __future__ import annotations

from aicalc.errors import AicalcError


def efficiency_overrides(items) -> dict[str, float]:
    """``["bandwidth=0.7", "kernel_overhead_s=5e-6"]`` (or one string) → dict; one clear error per bad item."""
    if isinstance(items, str):
        items = [items]
    out: dict[str, float] = {}
    for item in items or []:
        for part in str(item).split(","):
            if not part.strip():
                continue
            key, sep, value = part.partition("=")
            if not sep:
                raise AicalcError(f"--eff takes KEY=VALUE, got '{part}'")
            try:
                out[key.strip()] = float(value)
            except ValueError:
                raise AicalcError(f"--eff {key.strip()}: '{value}' is not a number") from None
    return out


ATTENTION = {"eager": "materialized", "sdpa": "flash"}  # one vocabulary: how the time estimators name a kernel


def time_attention(name: str) -> str:
    """``eager``/``sdpa``/``flash``/``materialized`` as the time estimators price them: a materialized score
    matrix (eager) or a fused kernel (sdpa, flash)."""
    return ATTENTION.get(name, name)


def memory_attention(name: str) -> str:
    """The same names as train-mem's activation model reads them (``materialized`` is eager)."""
    return "eager" if name == "materialized" else name


def price_per_hour(text) -> float | None:
    """``2.5``, ``$2.50``, ``$2.50/h``, ``2.5/hr`` → USD per chip-hour (None passes through)."""
    import math
    import re

    if text is None:
        return None
    m = re.fullmatch(r"\s*\$?\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(?:/\s*(?:h|hr|hour))?\s*", str(text).lower())
    if not m:
        raise AicalcError(f"--price: cannot read '{text}' (examples: 2.5, $2.50/h)")
    v = float(m[1])
    if not (math.isfinite(v) and 0 < v < 1e6):
        raise AicalcError(f"--price must be a positive USD per chip-hour below a million, got '{text}'")
    return v


def cost_note(chip, price: float | None, given: bool) -> str:
    """Where a table's cost column takes its price from, or why it has none."""
    if not price:
        return (f"cost: no on-demand price for {chip.id} in its preset (presets/chips/{chip.id}.yaml); "
                "give --price, USD per chip-hour")
    where = "--price" if given else f"{chip.id}'s preset, {getattr(chip, 'price_source', None) or 'no source'}"
    return f"cost: ${price:,.2f} per chip-hour ({where})"


def engine_default(given, chip) -> str:
    """", the chip's own stack (--engine chooses another)" where the engine was not given: the table says that
    the estimate assumed the chip's serving stack, and how to ask for another."""
    if given:
        return ""
    from aicalc.catalog.profiles import default_engine

    own = default_engine(chip)
    return f"; {chip.id}'s default engine ({own}; --engine chooses another)"


def engines_note(chip_ids, engine) -> str:
    """"engine: groq (…) on groq-lpu; generic (…) on h100-sxm": the profile and release each chip's estimate
    used, for a table across chips."""
    from aicalc.api.catalog import load_node_or_chip
    from aicalc.catalog.profiles import default_engine, load, release_note

    by: dict[str, list[str]] = {}
    for c in chip_ids:
        chip = load_node_or_chip(c)[0]
        by.setdefault(load("engine", engine or default_engine(chip)).id, []).append(chip.id)
    how = "--engine" if engine else "each chip's default engine; --engine chooses another"
    return "engine: " + "; ".join(f"{release_note(e)} on {', '.join(cs)}" for e, cs in by.items()) + f" ({how})"


def engine_release(engine_id: str) -> dict | None:
    """The release an engine profile describes (``{version, date, source}``), for a result's inputs."""
    from aicalc.catalog.profiles import load

    return load("engine", engine_id).options.get("release")
