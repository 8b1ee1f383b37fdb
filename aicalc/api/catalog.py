"""Models and chips for the library: an id, a path, a config dict or an object already loaded."""

from __future__ import annotations

from aicalc.catalog.store import ModelSpec


def load_model(model) -> ModelSpec:
    """A model preset id (``"llama-3.1-8b"``), a path to a ``config.json`` (or a folder holding one), a
    Hugging Face config as a dict, an Arch, or a ModelSpec (returned as is)."""
    from aicalc.catalog import store
    from aicalc.catalog.arch import Arch

    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, Arch):
        return ModelSpec(id=model.family, name=model.family, source="Arch", arch=model)
    if isinstance(model, dict):
        from aicalc.catalog.hf_config import arch_from_config

        name = str(model.get("_name_or_path") or model.get("model_type") or "config")
        return ModelSpec(id=name, name=name, source="config dict", arch=arch_from_config(dict(model), "config"))
    return store.resolve_model(str(model))


def load_chip(chip):
    """A chip preset (``"h100-sxm"``) or a chip object: the chip. A node id gives its chip; use
    :func:`load_node_or_chip` for the count too."""
    return load_node_or_chip(chip)[0]


def load_node_or_chip(chip):
    """``(chip, count)``: a chip id gives one chip, a node id (``"dgx-h100"``) its chips."""
    from aicalc.catalog import store
    from aicalc.catalog.schema import Chip

    if isinstance(chip, Chip):
        return chip, 1
    return store.resolve_chip(str(chip))
