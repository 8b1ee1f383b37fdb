"""aicalc: sizing calculator for AI hardware (memory, chips, time, cost).

The library::

    import aicalc
    kv = aicalc.kv_cache("llama-3.1-8b", batch=[1, 8, 64], context="32k", chip="h200")
    kv.max_batch, kv.rows()

Every estimator takes numbers, numpy arrays (arrays broadcast: a sweep is an array argument) or human strings
(``"8k"``, ``"80GB"``, ``"200ms"``), a model (preset id, config.json path, config dict) and a chip (preset id),
and returns a typed table of numpy columns. Bad values raise :class:`aicalc.ParameterError` naming the
parameter. See docs/api.md.
"""

__version__ = "0.1.0"

_API = {
    "load_model": "aicalc.api.catalog", "load_chip": "aicalc.api.catalog",
    "kv_cache": "aicalc.api.kv_cache", "KVCache": "aicalc.api.kv_cache",
    "roofline": "aicalc.api.roofline", "Roofline": "aicalc.api.roofline",
    "serve": "aicalc.api.serving", "Serving": "aicalc.api.serving", "max_concurrency": "aicalc.api.serving",
    "simulate": "aicalc.api.traffic", "Traffic": "aicalc.api.traffic",
    "search_deployments": "aicalc.api.deployment", "disaggregated": "aicalc.api.deployment",
    "launch_commands": "aicalc.api.emit", "LaunchCommand": "aicalc.api.emit",
    "size_fleet": "aicalc.api.fleet", "Fleet": "aicalc.api.fleet", "Layout": "aicalc.api.traffic",
    "train_memory": "aicalc.api.train_memory", "search_layouts": "aicalc.api.train_memory",
    "fits_with": "aicalc.api.train_memory",
    "TrainMemory": "aicalc.api.train_memory",
    "train_time": "aicalc.api.train_time", "TrainTime": "aicalc.api.train_time",
    "search_train_layouts": "aicalc.api.train_time",
    "compare": "aicalc.api.compare", "Comparison": "aicalc.api.compare",
    "Table": "aicalc.api.results",
    "AicalcError": "aicalc.errors", "ParameterError": "aicalc.errors",
}
__all__ = ["__version__", *_API]


def __dir__() -> list[str]:
    """The public API, for tab completion (IPython, Jupyter) before anything has been imported."""
    return sorted({*globals(), *__all__})


def __getattr__(name: str):
    """The public API, imported on first use so ``import aicalc`` (and the CLI's start-up) stays light."""
    if name in _API:
        from importlib import import_module

        value = getattr(import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'aicalc' has no attribute {name!r}")
