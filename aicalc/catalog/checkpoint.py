"""Exact weight bytes of a checkpoint, read from its files' own tensor tables: safetensors headers (a local
folder, or a Hugging Face Hub repo through ``huggingface_hub``'s metadata API, no weights downloaded) and GGUF
tensor infos (the ``gguf`` package). Quantized checkpoints (GPTQ, AWQ, fp8, NVFP4, k-quants) are counted as
stored: packed integers, scales and zero-points included.

Tensors fall in three classes by name: the token embedding and the LM head ("edge"), norms, and everything else
(the block linears, "linear"); aicalc's estimators take the bytes per parameter of each class from here
(``--dtype checkpoint``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from aicalc.errors import AicalcError

MAX_HEADER_BYTES = 100 << 20  # a safetensors JSON header larger than this is refused
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I64": 8,
               "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F4": 0.5, "U32": 4, "U16": 2, "F6_E2M3": 0.75,
               "F6_E3M2": 0.75}
_EDGE = re.compile(r"(^|\.)(embed_tokens|wte|wpe|word_embeddings|tok_embeddings|lm_head|output|embed_out|"
                   r"token_embd)(\.|$)")
_NORM = re.compile(r"(norm|ln_f|ln_\d|layernorm)", re.I)


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint stores, by tensor class."""

    source: str
    bytes_by_class: dict = field(default_factory=dict)  # "edge", "norm", "linear" → bytes
    tensors: int = 0
    stored_dtypes: tuple = ()  # the storage dtypes seen, most bytes first
    quant_method: str | None = None  # from config.json's quantization_config, or the GGUF file type
    kv_dtype: str | None = None  # the KV cache format the checkpoint asks for (fp8 where it says so)

    @property
    def total_bytes(self) -> int:
        return int(sum(self.bytes_by_class.values()))


def tensor_class(name: str) -> str:
    if _EDGE.search(name):
        return "edge"
    if _NORM.search(name) and "proj" not in name:
        return "norm"
    return "linear"


def from_tensors(tensors: dict, source: str, config: dict | None = None) -> Checkpoint:
    """``tensors``: name → (storage dtype, number of elements) (or bytes for GGUF: dtype ``"bytes"``)."""
    by_class: dict[str, float] = {"edge": 0.0, "norm": 0.0, "linear": 0.0}
    by_dtype: dict[str, float] = {}
    for name, (dtype, count) in tensors.items():
        if name == "__metadata__":
            continue
        nbytes = count if dtype == "bytes" else count * DTYPE_BYTES.get(str(dtype).upper(), 2)
        by_class[tensor_class(name)] += nbytes
        by_dtype[str(dtype)] = by_dtype.get(str(dtype), 0.0) + nbytes
    qc = (config or {}).get("quantization_config") or {}
    method = qc.get("quant_method") if isinstance(qc, dict) else None
    return Checkpoint(source, by_class, len(tensors), tuple(sorted(by_dtype, key=by_dtype.get, reverse=True)),
                      method, kv_format(config or {}))


def kv_format(config: dict) -> str | None:
    """The KV cache format a checkpoint's config asks for: fp8 where ``quantization_config`` quantizes the cache
    (compressed-tensors ``kv_cache_scheme``, ModelOpt ``kv_cache_quant_algo``, fp8 ``kv_cache_dtype``)."""
    qc = config.get("quantization_config") if isinstance(config, dict) else None
    if not isinstance(qc, dict):
        return None
    scheme = qc.get("kv_cache_scheme")
    if isinstance(scheme, dict) and scheme.get("num_bits") == 8:
        return "fp8" if scheme.get("type", "float") == "float" else "int8"
    algo = str(qc.get("kv_cache_quant_algo") or qc.get("kv_cache_dtype") or "").lower()
    if "fp8" in algo:
        return "fp8"
    if "int8" in algo:
        return "int8"
    return None


def read_safetensors_header(path: Path) -> dict:
    """name → (dtype, elements) from a ``.safetensors`` file's header (8-byte little-endian length + JSON)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise AicalcError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
            n = int.from_bytes(head, "little")
            if n > MAX_HEADER_BYTES:
                raise AicalcError(f"{path}: a {n:,}-byte safetensors header is more than aicalc reads")
            header = json.loads(f.read(n))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise AicalcError(f"{path}: cannot read the safetensors header ({e})") from None
    return _tensors(header, path)


def _tensors(header, where) -> dict:
    import math

    if not isinstance(header, dict):
        raise AicalcError(f"{where}: the safetensors header is not a mapping")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            out[name] = (str(info["dtype"]), math.prod(int(x) for x in info["shape"]))
        except (KeyError, TypeError, ValueError):
            raise AicalcError(f"{where}: tensor '{name}' has no dtype and shape") from None
    return out


def from_folder(folder: Path, config: dict) -> Checkpoint | None:
    """The checkpoint of a local model folder (its ``*.safetensors``), or None when it holds none."""
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        return None
    tensors: dict = {}
    for f in files:
        tensors.update(read_safetensors_header(f))
    return from_tensors(tensors, str(folder), config)


def from_gguf(path: Path):
    """(Hugging Face-style config dict, Checkpoint) of a ``.gguf`` file: the architecture from its metadata,
    the bytes from its tensor infos (``gguf.GGUFReader``: memory-mapped, nothing loaded)."""
    try:
        from gguf import GGUFReader
    except ImportError:  # pragma: no cover - a declared dependency
        raise AicalcError("reading GGUF files needs the gguf package: pip install gguf") from None
    try:
        r = GGUFReader(str(path))
    except Exception as e:  # noqa: BLE001 - any parse failure of a foreign file is bad input
        raise AicalcError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from None

    def field_value(key):
        f = r.fields.get(key)
        if f is None:
            return None
        v = f.parts[f.data[0]] if f.data else None
        if v is None:
            return None
        if f.types and f.types[0].name == "STRING":
            return bytes(v).decode("utf-8", "replace")
        return v.tolist()[0] if hasattr(v, "tolist") and len(v) == 1 else v.tolist()

    arch = field_value("general.architecture")
    if not isinstance(arch, str):
        raise AicalcError(f"{path}: GGUF metadata has no general.architecture")

    def need(key):
        v = field_value(f"{arch}.{key}")
        if v is None:
            raise AicalcError(f"{path}: GGUF metadata has no {arch}.{key}")
        return v

    tokens = r.fields.get("tokenizer.ggml.tokens")
    vocab = len(tokens.data) if tokens is not None else field_value(f"{arch}.vocab_size")
    heads = int(need("attention.head_count"))
    hidden = int(need("embedding_length"))
    cfg = {"model_type": "llama" if arch in ("llama", "mistral") else arch,
           "hidden_size": hidden, "num_hidden_layers": int(need("block_count")),
           "num_attention_heads": heads,
           "num_key_value_heads": int(field_value(f"{arch}.attention.head_count_kv") or heads),
           "intermediate_size": int(need("feed_forward_length")), "vocab_size": int(vocab),
           "max_position_embeddings": int(field_value(f"{arch}.context_length") or 4096),
           "tie_word_embeddings": not any(t.name == "output.weight" for t in r.tensors),
           "rms_norm_eps": float(field_value(f"{arch}.attention.layer_norm_rms_epsilon") or 1e-5)}
    key_len = field_value(f"{arch}.attention.key_length")
    if key_len and int(key_len) * heads != hidden:
        cfg["head_dim"] = int(key_len)
    tensors = {t.name: ("bytes", int(t.n_bytes)) for t in r.tensors}
    ftype = field_value("general.file_type")
    ck = from_tensors(tensors, str(path), cfg)
    return cfg, Checkpoint(ck.source, ck.bytes_by_class, ck.tensors, ck.stored_dtypes,
                           f"gguf file_type {ftype}" if ftype is not None else "gguf", None)


def from_hub(repo_id: str, revision: str | None = None):
    """(config dict, Checkpoint or None) of a Hugging Face Hub repo: ``config.json`` downloaded (cached; honours
    ``HF_HUB_OFFLINE`` and ``HF_ENDPOINT``) and the safetensors headers read by range requests."""
    try:
        from huggingface_hub import get_safetensors_metadata, hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            HfHubHTTPError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
        )
    except ImportError:  # pragma: no cover - a declared dependency
        raise AicalcError("resolving a Hub id needs huggingface_hub: pip install huggingface_hub") from None
    from huggingface_hub import constants, try_to_load_from_cache

    cached = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    online = not constants.HF_HUB_OFFLINE
    if not isinstance(cached, str):
        if not online:
            raise AicalcError(f"'{repo_id}' is not in the local Hub cache and HF_HUB_OFFLINE is set")
        if not _reachable(constants.ENDPOINT):
            raise AicalcError(f"cannot reach the Hugging Face Hub at {constants.ENDPOINT} to resolve '{repo_id}' "
                              "(no network? HF_ENDPOINT sets a mirror; a cached repo works offline)")
    try:
        path = cached if isinstance(cached, str) else hf_hub_download(repo_id, "config.json", revision=revision)
        from aicalc.catalog.store import load_json

        config = load_json(Path(path))  # bounded in size and depth like every file aicalc reads
    except RepositoryNotFoundError:
        raise AicalcError(f"no Hugging Face Hub repo '{repo_id}' (or it is gated: set HF_TOKEN)") from None
    except EntryNotFoundError:
        raise AicalcError(f"Hub repo '{repo_id}' has no config.json") from None
    except LocalEntryNotFoundError:
        raise AicalcError(f"'{repo_id}' is not in the local Hub cache and HF_HUB_OFFLINE is set (or the Hub "
                          "cannot be reached)") from None
    except (HfHubHTTPError, OSError, ValueError) as e:
        raise AicalcError(f"cannot read config.json of Hub repo '{repo_id}': {e}") from None
    if not isinstance(config, dict):
        raise AicalcError(f"config.json of Hub repo '{repo_id}' is not a mapping")
    if not online or not _reachable(constants.ENDPOINT):
        return config, None  # the config alone still sizes the model
    try:
        meta = get_safetensors_metadata(repo_id, revision=revision)
    except Exception:  # noqa: BLE001 - no safetensors (or offline): the config alone still sizes the model
        return config, None
    tensors: dict = {}
    for fm in meta.files_metadata.values():
        for name, info in fm.tensors.items():
            tensors[name] = (str(info.dtype), int(info.parameter_count))
    return config, from_tensors(tensors, f"hf://{repo_id}", config)


def _reachable(endpoint: str, timeout: float = 3.0) -> bool:
    """Whether the Hub endpoint's host accepts a connection (checked first, so an offline machine answers at
    once instead of through huggingface_hub's retries)."""
    import socket
    from urllib.parse import urlparse

    u = urlparse(endpoint)
    port = u.port or (443 if u.scheme == "https" else 80)
    try:
        with socket.create_connection((u.hostname or "", port), timeout=timeout):
            return True
    except OSError:
        return False
