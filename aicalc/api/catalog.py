"""Models and chips for the library: an id, a path, a config dict or an object already loaded."""

import re

from aicalc.catalog.store import ModelSpec
from aicalc.errors import AicalcError
from aicalc.tuples import Named

SRAM_KINDS = ("lpu", "wafer")  # chips whose only memory is on-chip SRAM (aicalc.api.roofline re-exports it)


def load_model(model) -> ModelSpec:
    """A model preset id (``"llama-3.1-8b"``), a path to a ``config.json`` (or a folder holding one), a
    Hugging Face config as a dict, an Arch, or a ModelSpec (returned as is)."""
    from aicalc.catalog.arch import Arch

    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, Arch):
        return ModelSpec(id=model.family, name=model.family, source="Arch", arch=model)
    if isinstance(model, dict):
        from aicalc.catalog.hf_config import arch_from_config

        name = str(model.get("_name_or_path") or model.get("model_type") or "config")
        return ModelSpec(id=name, name=name, source="config dict", arch=arch_from_config(dict(model), "config"),
                         config=dict(model))
    return _from_files(str(model))


def load_decoder(model, command: str) -> ModelSpec:
    """:func:`load_model` for a command that prices serving (a KV cache, prefill and decode): an encoder
    (``Arch.encoder``: BERT, RoBERTa) has neither, and is refused with one line."""
    spec = load_model(model)
    if spec.arch.encoder:
        family = "" if spec.id == spec.arch.family else f" ({spec.arch.family})"
        raise AicalcError(f"{command}: {spec.id} is an encoder{family}: it keeps no KV cache and decodes "
                          "no tokens, so there is no serving to price; train-mem and train-time size its training")
    return spec


def load_chip(chip):
    """A chip preset (``"h100-sxm"``) or a chip object: the chip. A node id gives its chip; use
    :func:`load_node_or_chip` for the count too."""
    return load_node_or_chip(chip)[0]


def node_count(chip) -> int:
    """The chips a ``chip`` argument stands for: a node id (``"dgx-h100"``) its chip count, a chip 1. Where a
    command is given a node and no split, the node is the split: its chips form the TP group (roofline, serve,
    kv-cache) or the data-parallel job (train-time, train-mem --search), on the node's scale-up link."""
    return load_node_or_chip(chip)[1] if isinstance(chip, str) else 1


def node_split(chip, tp=None, chips=None) -> tuple[int, int | None]:
    """``(tp, chips)`` of a serving deployment with the node defaults: no ``tp``, one replica across a node's
    chips (TP = its count; a chip: 1); no ``chips``, the node's chips (a chip: None, one replica). ``chip``: an
    id, a chip object, or the chip count already resolved."""
    count = chip if isinstance(chip, int) else node_count(chip)
    return (count if tp is None else tp), (count if count > 1 else None) if chips is None else chips


def chip_factors(chip) -> dict[str, tuple[float, str]]:
    """A chip preset's own efficiency factors, name → (value, source): a preset record keeps each as a mapping
    ``{value, source}``, a schema.Chip as a Factor; none: {}."""
    out = {}
    for k, f in (getattr(chip, "efficiency", None) or {}).items():
        out[k] = (float(f["value"]), str(f["source"])) if isinstance(f, dict) else (float(f.value), str(f.source))
    return out


def load_node_or_chip(chip):
    """``(chip, count)``: a chip id gives one chip, a node id (``"dgx-h100"``) its chips."""
    from aicalc.catalog import store

    if not isinstance(chip, str):  # a chip object already (a preset record or a schema.Chip)
        return chip, 1
    return store.resolve_chip(chip)


_HUB_ID = r"[A-Za-z0-9][\w.-]*/[\w.-]+"  # compiled when a name is neither a preset nor a file


def _from_files(name: str):
    """A ``.gguf`` file, a Hub id, or a local folder / config.json path beside safetensors files."""
    from pathlib import Path

    from aicalc.catalog import store
    from aicalc.catalog.hf_config import arch_from_config

    path = Path(name)
    exists = store.path_is  # False for names the file system cannot hold

    if name.endswith(".gguf"):
        if not exists(path) or not path.is_file():
            raise AicalcError(f"no GGUF file at '{name}'")
        from aicalc.catalog import checkpoint

        cfg, ck = checkpoint.from_gguf(path)
        return ModelSpec(id=path.name, name=path.stem, source=str(path), arch=arch_from_config(cfg, str(path)),
                           checkpoint=ck)
    if len(name) <= 200 and "/" in name and not exists(path) and re.fullmatch(_HUB_ID, name) and not name.endswith(".json"):
        from aicalc.catalog import checkpoint

        try:
            cfg, ck = checkpoint.from_hub(name)
        except AicalcError as e:
            builtin = _offline_preset(name, e)
            if builtin is None:
                raise
            return builtin
        return ModelSpec(id=name, name=name, source=f"hf://{name}", arch=arch_from_config(cfg, name),
                           checkpoint=ck, hf_repo=name, config=cfg if isinstance(cfg, dict) else None)
    spec = store.resolve_model(name)
    if exists(path):
        folder = path if path.is_dir() else path.parent
        cfg_file = folder / "config.json"  # resolve_model read and bounded it already; this reads the same file
        cfg = store.load_json(cfg_file) if cfg_file.is_file() else {}
        from aicalc.catalog import checkpoint

        ck = checkpoint.from_folder(folder, cfg if isinstance(cfg, dict) else {})
        if ck is not None:
            return spec._replace(checkpoint=ck)
    return spec


def _offline_preset(name: str, error: AicalcError):
    """The built-in preset that copies Hub repo ``name``'s config.json (:func:`aicalc.catalog.store.preset_for_repo`)
    when the Hub cannot be reached (no connection, or HF_HUB_OFFLINE with nothing cached); None otherwise (the
    error stands). Its ``source`` says which preset stood in and why, and the id stays the preset's."""
    from aicalc.catalog import store
    from aicalc.catalog.hub import HubError

    offline = isinstance(error, HubError) and error.unreachable or "HF_HUB_OFFLINE" in str(error)
    found = store.preset_for_repo(name) if offline else None
    if found is None:
        return None
    spec = store.resolve_model(found[0])
    why = "the Hub is unreachable" if isinstance(error, HubError) else "HF_HUB_OFFLINE is set and it is not cached"
    return spec._replace(source=f"{spec.source} (built-in preset {spec.id} for hf://{name}: {why}; "
                                f"its config.json is {found[1]}'s)")


class WeightFormat(Named):
    """A weight format as the estimators take it: a dtype name (its math and coverage rule) and, for a
    checkpoint read from files, the exact bytes per parameter of its block linears and of its embedding/head;
    ``experts``: the routed experts' own format where it differs (gpt-oss's MXFP4 experts beside bf16 attention)."""

    name: str
    bytes_per_param: float | None = None
    edge_bytes_per_param: float | None = None
    experts: str | None = None

    @property
    def label(self) -> str:
        """The name tables show: ``mxfp4-experts`` (experts in MXFP4, the rest bf16), else the dtype."""
        if self.experts is None or self.experts == self.name:
            return self.name
        return f"{self.experts}-experts" if self.name == "bf16" else f"{self.name}+{self.experts}-experts"

    @property
    def expert_bytes_per_param(self) -> float | None:
        from aicalc.core.dtypes import weight_bytes_per_param

        return None if self.experts is None else weight_bytes_per_param(self.experts)


RELEASE = "release"  # the default weight format: the official checkpoint's (a preset's release:, a file's own)


def split_label(dtype: str) -> tuple[str, str | None]:
    """``mxfp4-experts`` → (bf16, mxfp4); ``fp8+mxfp4-experts`` → (fp8, mxfp4); a plain dtype → (dtype, None)."""
    if dtype.endswith("-experts"):
        head = dtype[: -len("-experts")]
        base, _, experts = head.rpartition("+")
        return (base or "bf16"), experts
    return dtype, None


def weight_format(spec, dtype: str | None) -> WeightFormat:
    """``dtype`` as given (``mxfp4-experts``: routed experts in MXFP4, the rest bf16); ``"release"`` (or None, the
    default): the official checkpoint's precision — the files' own for a model read from files, a preset's
    ``release:`` block, else bf16; ``"checkpoint"``: the bytes the model's own files store (safetensors headers,
    GGUF tensor infos, Hub metadata), under the dtype name their bits per weight correspond to."""
    from aicalc.core.dtypes import WEIGHT_BITS
    from aicalc.errors import ParameterError, check_choice

    if dtype is None or dtype == RELEASE:
        ck = getattr(spec, "checkpoint", None)
        if ck is not None and ck.bytes_by_class.get("linear", 0) > 0:
            return weight_format(spec, "checkpoint")
        rel = getattr(spec, "release", None)
        if rel is None:  # a model read from its config alone: what its quantization_config declares
            cfg = getattr(spec, "config", None)  # (a preset's config leaves quantization_config out)
            if not (isinstance(cfg, dict) and "quantization_config" in cfg):
                return WeightFormat("bf16")
            from aicalc.catalog.checkpoint import release_format

            declared = release_format(cfg)
            if declared is None:
                return WeightFormat("bf16")
            base, experts = declared
            if experts is not None and getattr(spec.arch, "moe", None) is None:
                return WeightFormat(experts)  # the expert format names every linear where there are no experts
            return WeightFormat(base, experts=experts)
        return WeightFormat(rel.dtype, experts=rel.experts if getattr(spec.arch, "moe", None) else None)
    if dtype != "checkpoint":
        base, experts = split_label(dtype)
        if experts is not None:
            check_choice("dtype", experts, tuple(WEIGHT_BITS))
            if getattr(spec.arch, "moe", None) is None:
                raise ParameterError("dtype", dtype, f"names the routed experts' format, and {spec.id} has no experts")
        check_choice("dtype", base, tuple(WEIGHT_BITS))
        return WeightFormat(base, experts=experts)
    from aicalc.core.params import count_params
    from aicalc.errors import ParameterError

    ck = getattr(spec, "checkpoint", None)
    if ck is None:
        raise ParameterError("dtype", "checkpoint", "needs a model read from its files: a folder with safetensors, "
                             "a .gguf file or a Hugging Face Hub id")
    if not ck.bytes_by_class.get("linear", 0) > 0:  # its bytes per weight would be 0: every figure from it wrong
        raise ParameterError("dtype", "checkpoint", f"needs the model's block weights, and {ck.source} holds "
                             f"{ck.tensors:,} tensor(s) of embeddings and norms only")
    n = count_params(spec.arch)
    edge_params = n.embedding + n.lm_head or n.embedding
    linear_params = max(n.total - n.embedding - n.lm_head - n.norms, 1)
    bpp = ck.bytes_by_class["linear"] / linear_params
    edge = ck.bytes_by_class["edge"] / edge_params if ck.bytes_by_class["edge"] else bpp
    bits = 8 * bpp
    gguf = str(ck.quant_method or "").startswith("gguf")
    if bits >= 15:
        name = "bf16"
    elif bits >= 7.5:
        name = "q8_0" if gguf else ("fp8" if any("F8" in d for d in ck.stored_dtypes) else "int8")
    elif bits >= 4.6 and gguf:
        name = "q5_k_m"
    else:
        name = "q4_k_m" if gguf else ("fp4" if any(d in ("F4", "U8") for d in ck.stored_dtypes[:1])
                                      and ck.quant_method == "modelopt" else "int4")
    return WeightFormat(name, bpp, edge)


def named_format(spec, dtype: str | None) -> str:
    """``dtype`` checked (:func:`weight_format`), and ``"release"`` named as tables show it (``fp8``,
    ``mxfp4-experts``) where the name carries the format whole: a model read from files keeps ``"release"``, so
    its files' exact bytes are used, not the nominal bits of the name."""
    wf = weight_format(spec, dtype)
    if dtype in (None, RELEASE) and getattr(spec, "checkpoint", None) is None:
        return wf.label
    return dtype


def kv_format(spec, kv_dtype: str) -> str:
    """``kv_dtype`` as given, or ``"auto"``: the KV format the checkpoint's quantization_config asks for (fp8 where
    it quantizes the cache), else bf16."""
    if kv_dtype != "auto":
        return kv_dtype
    ck = getattr(spec, "checkpoint", None)
    return (ck.kv_dtype if ck is not None else None) or "bf16"


def resident_weights(spec, dtype: str | None, tp=1, bytes_per_param: float | None = None, *, ep=1, attention_dp=1,
                     redundant=0, pp=1):
    """Weight bytes one device holds (:func:`aicalc.core.geometry.weight_bytes_per_device`) under ``dtype``
    (``"release"``: the official checkpoint's; ``"checkpoint"``: the files' own bytes); ``ep`` / ``attention_dp``:
    expert and attention-data parallelism inside a replica of ``tp`` chips; ``redundant``: extra expert replicas;
    ``pp``: pipeline stages, the fullest rank's (:func:`aicalc.core.stages.stage_weight_bytes`)."""
    from aicalc.core.geometry import weight_bytes

    wf = weight_format(spec, dtype)
    wb = weight_bytes(spec.arch, wf.name, tp, bytes_per_param or wf.bytes_per_param, wf.edge_bytes_per_param,
                      wf.expert_bytes_per_param, attention_dp, redundant)
    if pp == 1:
        return wb.total
    from aicalc.core.stages import stage_weight_bytes

    return stage_weight_bytes(wb, spec.arch.layers, pp, spec.arch.tied_embeddings)
