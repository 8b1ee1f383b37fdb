"""The one table from library parameter names to command-line flags, for error messages."""

from __future__ import annotations

RENAMED = {
    "utilization": "--gpu-memory-utilization",
    "kv_shared": "--kv-per-query-head",
    "efficiency": "--eff",
    "max_context": "--solve max-context",
    "interleave": "--interleave",
    "total_chips": "--chips",  # search_deployments: the chips of each deployment
}


def flag(param: str) -> str:
    """``kv_dtype`` → ``--kv-dtype``."""
    return RENAMED.get(param, "--" + param.replace("_", "-"))


def cli_message(err) -> str:
    """A ParameterError as the command line says it: ``--tp 3 does not divide the 32 attention heads``."""
    from aicalc.errors import _show, refer

    def style(name: str, value: str | None) -> str:
        return flag(name) if value is None or value == "True" else f"{flag(name)} {value}"

    head = flag(err.param) if err.value is True else f"{flag(err.param)} {_show(err.value)}"
    return f"{head} {refer(err.problem, style)}"
