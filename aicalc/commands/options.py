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
