"""One module per command: each ``run(model, **options)`` parses what only the command line spells (sweeps,
units, flag-shaped values), calls the library (:mod:`aicalc.api`) and returns a Result for the renderers.

``REGISTRY`` maps a command name to its ``run``, for ``aicalc check`` and anything else that runs commands
from data."""

from __future__ import annotations

from importlib import import_module

COMMANDS = {"kv-cache": "kv_cache", "train-mem": "train_mem", "roofline": "roofline", "serve": "serve",
            "train-time": "train_time", "compare": "compare"}


def command(name: str):
    """The ``run`` function of a command with rows (``kv-cache``, ``train-mem``, …)."""
    return import_module(f"aicalc.commands.{COMMANDS[name]}").run
