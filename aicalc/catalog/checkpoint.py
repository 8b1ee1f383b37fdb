"""Exact weight bytes of a checkpoint, read from its files' own tensor tables: safetensors headers (a local
folder, or a Hugging Face Hub repo through ``huggingface_hub``'s metadata API, no weights downloaded) and GGUF
tensor infos (read here, the ``gguf`` package giving the block sizes). Quantized checkpoints (GPTQ, AWQ, fp8,
NVFP4, k-quants) are counted as stored: packed integers, scales and zero-points included.

Every file is foreign input, bounded before it is parsed (docs/robustness.md): only regular files are opened (a
FIFO would block), headers are capped in size, numbers in them are checked (shapes of non-negative integers,
known dtypes, data offsets inside the file, GGUF metadata of the right type) and refused with a message naming
the file and the field.

Tensors fall in three classes by name: the token embedding and the LM head ("edge"), norms, and everything else
(the block linears, "linear"); aicalc's estimators take the bytes per parameter of each class from here
(``--dtype checkpoint``).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from aicalc.errors import AicalcError

# Bounds on what is read from a checkpoint's files (docs/robustness.md), checked before the bytes are parsed. The
# largest real headers are well under 1 MiB a shard (DeepSeek-V3's 163 shards: ~90,000 tensors, ~10 MB of headers and
# ~9 MB of index in all; Kimi-K2's 61 shards: ~140,000 tensors, ~15 MB of headers); huggingface_hub itself refuses a
# header over 25 MB.
MAX_HEADER_BYTES = 16 << 20  # one safetensors JSON header, or one model.safetensors.index.json
MAX_FOLDER_BYTES = 64 << 20  # the headers and the index of one folder together
MAX_SHARDS = 4096  # safetensors files in one folder (the largest real checkpoints have ~200)
MAX_TENSORS = 1 << 20  # tensors of one checkpoint (safetensors or GGUF)
MAX_ELEMENTS = 1 << 50  # elements of one tensor (the largest real tensors have ~2^31)
MAX_GGUF_KEYS = 1 << 16  # metadata keys of one GGUF file (real ones have ~50)
MAX_GGUF_ELEMENTS = 1 << 22  # texts in a GGUF's metadata lists together (real: <1M, a vocabulary and merges)
MAX_GGUF_NAME = 1 << 16  # bytes of one GGUF key, tensor name or text that is read (ggml's names: ≤ 64 bytes)
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I64": 8,
               "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F4": 0.5, "U64": 8, "U32": 4, "U16": 2,
               "F6_E2M3": 0.75, "F6_E3M2": 0.75, "C64": 8}
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
        nbytes = count if dtype == "bytes" else count * DTYPE_BYTES[dtype]
        by_class[tensor_class(name)] += nbytes
        by_dtype[str(dtype)] = by_dtype.get(str(dtype), 0.0) + nbytes
    qc = (config or {}).get("quantization_config") or {}
    method = qc.get("quant_method") if isinstance(qc, dict) else None
    return Checkpoint(source, by_class, len(tensors), tuple(sorted(by_dtype, key=by_dtype.get, reverse=True)),
                      method, kv_format(config or {}))


def release_format(config) -> tuple[str, str | None] | None:
    """``(dtype, experts)`` of the weights a config's ``quantization_config`` declares, for a model read from its
    config alone (no safetensors headers to count): ``fp8`` for the block-scaled FP8 releases (``quant_method``
    fp8: DeepSeek-V3/R1, Kimi K2, MiniMax-M2, Qwen3 FP8; every block linear e4m3 with an fp32 scale per 128 × 128
    block, embeddings, head, norms and routers 16-bit), ``("bf16", "mxfp4")`` for gpt-oss (``mxfp4``: the routed
    experts in MXFP4, the rest bf16), ModelOpt's ``quant_algo`` (FP8, NVFP4), GPTQ/AWQ ``bits`` (4, 8),
    compressed-tensors' weight scheme (8-bit float or int, 4-bit int or float), the last two over the routed
    experts only where their ``ignore`` list keeps the attention out and bitsandbytes (nf4, int8). None where it declares none or a scheme not listed: the
    model is then taken as bf16, as before, and ``--dtype`` says otherwise."""
    qc = config.get("quantization_config") if isinstance(config, dict) else None
    if not isinstance(qc, dict):
        return None
    method = str(qc.get("quant_method") or "").lower()
    if method == "fp8":
        return "fp8", None
    if method == "mxfp4":
        return "bf16", "mxfp4"
    if method == "modelopt":
        inner = qc.get("quantization") if isinstance(qc.get("quantization"), dict) else qc
        name = {"FP8": "fp8", "NVFP4": "fp4"}.get(str(inner.get("quant_algo") or "").upper())
        return None if name is None else _coverage(name, qc.get("ignore") or inner.get("exclude_modules"))
    if method in ("gptq", "awq"):
        return {4: ("int4", None), 8: ("int8", None)}.get(qc.get("bits"))
    if method == "bitsandbytes":
        if qc.get("load_in_4bit"):
            return "nf4", None
        return ("int8", None) if qc.get("load_in_8bit") else None
    if method == "compressed-tensors":
        groups = qc.get("config_groups")
        weights = next((g.get("weights") for g in groups.values() if isinstance(g, dict)), None) \
            if isinstance(groups, dict) else None
        if not isinstance(weights, dict):
            return None
        kind = str(weights.get("type") or "int")
        name = {(8, "float"): "fp8", (8, "int"): "int8", (4, "int"): "int4", (4, "float"): "fp4"}.get(
            (weights.get("num_bits"), kind))
        if name is None:
            return None
        return _coverage(name, qc.get("ignore"))
    return None


def _coverage(name: str, ignore) -> tuple[str, str | None]:
    """A format over every block linear, or over the routed experts only where the ``ignore`` list keeps the
    attention projections out of it (NVIDIA's NVFP4 MoE releases, Kimi K2 Thinking's INT4 experts)."""
    keeps_attention = isinstance(ignore, list) and any("self_attn" in str(x) for x in ignore)
    return ("bf16", name) if keeps_attention else (name, None)


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


def _show(text, n: int = 80) -> str:
    """A name read from a file as a message shows it: at most ``n`` characters (store's _short)."""
    from aicalc.catalog.store import _short

    return _short(text, n)


_KINDS = (("S_ISDIR", "a folder"), ("S_ISFIFO", "a FIFO"), ("S_ISCHR", "a character device"),
          ("S_ISBLK", "a block device"), ("S_ISSOCK", "a socket"))


def _open_regular(path: Path):
    """(binary file, size) of a regular file (a symlink to one is followed). A FIFO, device, socket or folder is
    refused before anything is read from it: reading a FIFO would wait forever for a writer. The file is opened
    without blocking and checked again through its descriptor, so a swap between the two checks is caught too."""
    import stat

    def refuse_unless_regular(mode):
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if getattr(stat, test)(mode)), "not a plain file")
            raise AicalcError(f"{_show(path, 160)}: not a regular file ({kind})")

    try:
        refuse_unless_regular(os.stat(path).st_mode)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except (OSError, ValueError) as e:
        raise AicalcError(f"{_show(path, 160)}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    try:
        st = os.fstat(fd)
        refuse_unless_regular(st.st_mode)
        return os.fdopen(fd, "rb"), st.st_size
    except BaseException:
        os.close(fd)
        raise


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > 20:  # 2^64 has 20 digits: no shape or offset is longer
        raise ValueError(f"an integer of {len(text):,} digits")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {_show(text, 40)} is out of range")
    return value


def _json_constant(name: str):
    raise ValueError(f"{name} is not a number")


def _load_json(data: bytes, path, what: str):
    """A bounded JSON document: UTF-8, integers of at most 20 digits, finite numbers, no duplicate keys."""
    from aicalc.catalog.store import _json_pairs as store_json_pairs

    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=store_json_pairs, parse_int=_json_int,
                          parse_float=_json_float, parse_constant=_json_constant)
    except UnicodeDecodeError as e:
        raise AicalcError(f"{path}: cannot read {what} (not UTF-8 text at byte {e.start:,})") from None
    except (ValueError, RecursionError) as e:  # json.JSONDecodeError is a ValueError
        raise AicalcError(f"{path}: cannot read {what} ({_show(e, 160)})") from None


def read_safetensors_header(path: Path, budget: list | None = None) -> dict:
    """name → (dtype, elements) from a ``.safetensors`` file's header (8-byte little-endian length + JSON),
    checked against the file: a header of at most MAX_HEADER_BYTES, every tensor's dtype known, its shape a list
    of non-negative integers, its data inside the file. ``budget``: a one-item list of the header bytes a folder
    may still read, decreased here."""
    f, size = _open_regular(path)
    with f:
        try:
            head = f.read(8)
            if len(head) != 8:
                raise AicalcError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
            n = int.from_bytes(head, "little")
            if n > MAX_HEADER_BYTES:
                raise AicalcError(f"{path}: a {n:,}-byte safetensors header is more than the "
                                  f"{MAX_HEADER_BYTES >> 20} MiB aicalc reads (see docs/robustness.md)")
            if n > size - 8:
                raise AicalcError(f"{path}: its safetensors header says {n:,} bytes, but the file holds only "
                                  f"{size - 8:,} after the length (a truncated file?)")
            if budget is not None:
                if n > budget[0]:
                    raise AicalcError(f"{path}: the safetensors headers of this folder add up to more than the "
                                      f"{MAX_FOLDER_BYTES >> 20} MiB aicalc reads (see docs/robustness.md)")
                budget[0] -= n
            data = f.read(n)
        except OSError as e:
            raise AicalcError(f"{path}: cannot read the safetensors header ({e.strerror or e})") from None
    if len(data) != n:
        raise AicalcError(f"{path}: the file ended inside its {n:,}-byte safetensors header")
    return _tensors(_load_json(data, path, "the safetensors header"), path, size - 8 - n)


def _tensor(name, info, where, data_bytes: int | None = None) -> tuple[str, int]:
    """(dtype, elements) of one tensor entry, checked: a known dtype, a shape of non-negative integers (each and
    the product at most MAX_ELEMENTS) and, where ``data_bytes`` is known, data offsets inside the data."""
    def bad(why):
        return AicalcError(f"{where}: tensor '{_show(name)}' {why}")

    if not isinstance(info, dict) or "dtype" not in info or "shape" not in info:
        raise bad("has no dtype and shape")
    dtype, shape = info["dtype"], info["shape"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        raise bad(f"has an unknown dtype {_show(repr(dtype), 40)} (known: {', '.join(DTYPE_BYTES)})")
    if not isinstance(shape, (list, tuple)):
        raise bad(f"has a shape that is not a list of integers: {_show(repr(shape), 60)}")
    elements = 1
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
            raise bad(f"has a shape that is not a list of non-negative integers: {_show(repr(dim), 40)}")
        if dim > MAX_ELEMENTS:
            raise bad(f"has a dimension of {dim:,}, above aicalc's cap of 2^50 elements (see docs/robustness.md)")
        elements *= dim
        if elements > MAX_ELEMENTS:
            raise bad("has more than 2^50 elements, aicalc's cap for one tensor (see docs/robustness.md)")
    if data_bytes is not None:
        offsets = info.get("data_offsets")
        if (not isinstance(offsets, (list, tuple)) or len(offsets) != 2
                or any(isinstance(o, bool) or not isinstance(o, int) for o in offsets)):
            raise bad(f"has no data_offsets [begin, end] of integers: {_show(repr(offsets), 60)}")
        begin, end = offsets
        need = math.ceil(elements * DTYPE_BYTES[dtype])
        if not 0 <= begin <= end:
            raise bad(f"has data_offsets {_show(repr(list(offsets)), 60)} that are not 0 ≤ begin ≤ end")
        if end - begin != need:
            raise bad(f"has {end - begin:,} bytes of data, but its {dtype} shape {list(shape)} needs {need:,}")
        if end > data_bytes:
            raise bad(f"has data up to byte {end:,}, past the end of the file's {data_bytes:,} bytes of data "
                      "(a truncated file?)")
    return dtype, elements


def _tensors(header, where, data_bytes: int | None = None) -> dict:
    if not isinstance(header, dict):
        raise AicalcError(f"{where}: the safetensors header is not a mapping")
    if len(header) > MAX_TENSORS + 1:
        raise AicalcError(f"{where}: {len(header):,} tensors is more than aicalc's cap of {MAX_TENSORS:,} "
                          "(see docs/robustness.md)")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise AicalcError(f"{where}: the safetensors header's __metadata__ is not a mapping of texts")
            continue
        out[name] = _tensor(name, info, where, data_bytes)
    return out


INDEX = "model.safetensors.index.json"


def shard_names(doc, index) -> list[str]:
    """The shard file names a safetensors index (parsed JSON, read from ``index``) names, sorted: each a plain
    relative name inside the folder or repo (no ``..``, no absolute path, no backslash or NUL), at most
    MAX_SHARDS of them. Local folders and Hub repos are checked by this one function."""
    from pathlib import PurePosixPath

    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict):
        raise AicalcError(f"{index}: not a safetensors index (no 'weight_map' mapping of tensor → file)")
    names = set()
    for tensor, shard in weight_map.items():
        inside = (isinstance(shard, str) and shard and "\\" not in shard and "\0" not in shard
                  and not PurePosixPath(shard).is_absolute() and ".." not in PurePosixPath(shard).parts)
        if not inside:
            raise AicalcError(f"{index}: tensor '{_show(tensor)}' is in {_show(repr(shard), 80)}, which is not a file "
                              "name inside the model folder")
        names.add(shard)
        if len(names) > MAX_SHARDS:
            raise AicalcError(f"{index}: more than aicalc's cap of {MAX_SHARDS:,} shards (see docs/robustness.md)")
    return sorted(names)


def _shard_files(folder: Path, budget: list) -> list[Path]:
    """The safetensors files of a folder: those its ``model.safetensors.index.json`` names (each a plain relative
    name inside the folder, a regular file), else every ``*.safetensors`` in it. Empty when the index names shards
    none of which is there (a download of the configuration alone)."""
    index = folder / INDEX
    try:
        has_index = index.exists() or index.is_symlink()
    except (OSError, ValueError):
        has_index = False
    if not has_index:
        files = sorted(folder.glob("*.safetensors"))
        if len(files) > MAX_SHARDS:
            raise AicalcError(f"{folder}: {len(files):,} safetensors files is more than aicalc's cap of "
                              f"{MAX_SHARDS:,} (see docs/robustness.md)")
        return files
    f, size = _open_regular(index)
    with f:
        if size > MAX_HEADER_BYTES:
            raise AicalcError(f"{index}: {size:,} bytes is more than the {MAX_HEADER_BYTES >> 20} MiB aicalc reads "
                              "from a safetensors index (see docs/robustness.md)")
        try:
            data = f.read(MAX_HEADER_BYTES + 1)
        except OSError as e:
            raise AicalcError(f"{index}: cannot read ({e.strerror or e})") from None
    if len(data) > MAX_HEADER_BYTES:
        raise AicalcError(f"{index}: more than the {MAX_HEADER_BYTES >> 20} MiB aicalc reads from a safetensors index")
    budget[0] -= len(data)
    doc = _load_json(data, index, "the safetensors index")
    names = shard_names(doc, index)
    files = [folder / name for name in sorted(names)]
    present = []
    for path in files:
        try:
            os.stat(path)
            present.append(path)
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as e:
            raise AicalcError(f"{_show(path, 160)}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    if present and len(present) < len(files):
        missing = [p.name for p in files if p not in present]
        raise AicalcError(f"{folder}: {INDEX} names {len(files)} shards, {len(missing)} of them missing "
                          f"({_show(', '.join(missing), 160)}): an incomplete download?")
    return present


def from_folder(folder: Path, config: dict) -> Checkpoint | None:
    """The checkpoint of a local model folder (the shards its ``model.safetensors.index.json`` names, else its
    ``*.safetensors``), or None when it holds none. Every file is checked before it is read (a regular file, a
    bounded header; see :func:`read_safetensors_header`)."""
    folder = Path(folder)
    budget = [MAX_FOLDER_BYTES]
    files = _shard_files(folder, budget)
    if not files:
        return None
    tensors: dict = {}
    for f in files:
        tensors.update(read_safetensors_header(f, budget))
        if len(tensors) > MAX_TENSORS:
            raise AicalcError(f"{folder}: more than aicalc's cap of {MAX_TENSORS:,} tensors in one checkpoint "
                              "(see docs/robustness.md)")
    return from_tensors(tensors, str(folder), config)


_GGUF_INTS = ("UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64")
_GGUF_FLOATS = ("FLOAT32", "FLOAT64")
_GGUF_SCALARS = {0: ("UINT8", "B"), 1: ("INT8", "b"), 2: ("UINT16", "H"), 3: ("INT16", "h"), 4: ("UINT32", "I"),
                 5: ("INT32", "i"), 6: ("FLOAT32", "f"), 7: ("BOOL", "?"), 10: ("UINT64", "Q"), 11: ("INT64", "q"),
                 12: ("FLOAT64", "d")}
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_GGUF_ARCH = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class _GGUF:
    """The metadata and tensor infos of a GGUF file (versions 2 and 3), read from a memory map and bounded: at most
    MAX_TENSORS tensors and MAX_GGUF_KEYS keys, MAX_GGUF_ELEMENTS text elements in all metadata arrays together,
    names of at most MAX_GGUF_NAME bytes, every offset inside the file. ``fields``: key → (type names, value),
    the value a Python int, float or bool, the bytes of a text, or the element count of an array; ``tensors``: name
    → bytes; ``size``: the file's size."""

    def __init__(self, path: Path):
        import mmap

        self.path = path
        f, self.size = _open_regular(path)
        with f:
            if self.size < 24:
                raise self.bad(f"{self.size} bytes is too short for a GGUF file")
            try:
                self.buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as e:
                raise AicalcError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
        try:
            self._read()
        finally:
            self.buf.close()

    def bad(self, why: str) -> AicalcError:
        return AicalcError(f"{self.path}: not a readable GGUF file ({why})")

    def take(self, n: int) -> int:
        """The offset of the next ``n`` bytes, which must lie inside the file."""
        at = self.pos
        if n < 0 or at + n > self.size:
            raise self.bad(f"it ends inside a value at byte {at:,} (a truncated file?)")
        self.pos = at + n
        return at

    def unpack(self, code: str):
        import struct

        return struct.unpack_from(self.order + code, self.buf, self.take(struct.calcsize(code)))[0]

    def name(self, what: str) -> str:
        n = self.unpack("Q")
        if n > MAX_GGUF_NAME:
            raise self.bad(f"a {what} of {n:,} bytes, more than aicalc's cap of {MAX_GGUF_NAME:,}")
        at = self.take(n)
        try:
            return bytes(self.buf[at:at + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise self.bad(f"a {what} at byte {at:,} is not UTF-8 text") from None

    def value(self, kind: int, depth: int = 0):
        """(type names, value) of one metadata value, its bytes skipped."""
        if kind in _GGUF_SCALARS:
            name, code = _GGUF_SCALARS[kind]
            return [name], self.unpack(code)
        if kind == _GGUF_STRING:  # a list's texts are skipped, not copied
            n = self.unpack("Q")
            at = self.take(n)
            return ["STRING"], None if depth else bytes(self.buf[at:at + min(n, MAX_GGUF_NAME + 1)])
        if kind == _GGUF_ARRAY and depth >= 4:
            raise self.bad(f"metadata lists nested more than 4 deep at byte {self.pos - 4:,}")
        if kind == _GGUF_ARRAY:
            item, count = self.unpack("I"), self.unpack("Q")
            if item in _GGUF_SCALARS:  # fixed-size items: skipped at once
                import struct

                self.take(count * struct.calcsize(_GGUF_SCALARS[item][1]))
                return ["ARRAY", _GGUF_SCALARS[item][0]], count
            self.elements += count
            if self.elements > MAX_GGUF_ELEMENTS:
                raise AicalcError(f"{self.path}: more than aicalc's cap of {MAX_GGUF_ELEMENTS:,} texts and lists in "
                                  "the GGUF metadata's lists (see docs/robustness.md)")
            if item == _GGUF_STRING:  # a vocabulary: each text's length read, the text skipped
                import struct

                length, buf, end, at = struct.Struct(self.order + "Q").unpack_from, self.buf, self.size - 8, self.pos
                for _ in range(count):
                    if at > end:
                        self.take(-1)  # the file ends inside the list
                    at += 8 + length(buf, at)[0]
                self.take(at - self.pos if at <= self.size else -1)
                return ["ARRAY", "STRING"], count
            for _ in range(count):
                self.value(item, depth + 1)
            return ["ARRAY", "ARRAY" if item == _GGUF_ARRAY else "?"], count
        raise self.bad(f"an unknown metadata type {kind} at byte {self.pos - 4:,}")

    def _read(self) -> None:
        import struct

        if self.buf[:4] != b"GGUF":
            raise self.bad("no GGUF magic")
        self.order = "<" if struct.unpack_from("<I", self.buf, 4)[0] & 0xFFFF else ">"  # as GGUFReader tells them
        self.pos = 4
        version = self.unpack("I")
        if version not in (2, 3):
            raise self.bad(f"GGUF version {version}; aicalc reads versions 2 and 3")
        n_tensors, n_keys = self.unpack("Q"), self.unpack("Q")
        if n_tensors > MAX_TENSORS:
            raise AicalcError(f"{self.path}: {n_tensors:,} tensors is more than aicalc's cap of {MAX_TENSORS:,} "
                              "(see docs/robustness.md)")
        if n_keys > MAX_GGUF_KEYS:
            raise AicalcError(f"{self.path}: {n_keys:,} metadata keys is more than aicalc's cap of "
                              f"{MAX_GGUF_KEYS:,} (see docs/robustness.md)")
        self.elements = 0
        self.fields: dict = {}
        for _ in range(n_keys):
            key = self.name("metadata key")
            if key in self.fields:
                raise self.bad(f"the metadata key {_show(key)} twice")
            self.fields[key] = self.value(self.unpack("I"))
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        infos = []
        for _ in range(n_tensors):
            name = self.name("tensor name")
            n_dims = self.unpack("I")
            if n_dims > 8:
                raise self.bad(f"tensor '{_show(name)}' has {n_dims:,} dimensions")
            elements = 1
            for _ in range(n_dims):
                elements *= self.unpack("Q")
                if elements > MAX_ELEMENTS:
                    raise AicalcError(f"{self.path}: tensor '{_show(name)}' has more than 2^50 elements, aicalc's cap "
                                      "for one tensor (see docs/robustness.md)")
            kind, offset = self.unpack("I"), self.unpack("Q")
            try:
                block, nbytes = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
            except (ValueError, KeyError):
                raise self.bad(f"tensor '{_show(name)}' has an unknown type {kind}") from None
            if elements % block:
                raise self.bad(f"tensor '{_show(name)}' has {elements:,} elements, not whole blocks of {block}")
            infos.append((name, offset, elements // block * nbytes))
        align = self.fields.get("general.alignment", (["UINT32"], 32))
        if align[0] != ["UINT32"] or align[1] <= 0 or align[1] & (align[1] - 1):
            raise self.bad("general.alignment is not a power of two (UINT32)")
        start = -(-self.pos // align[1]) * align[1]
        self.tensors: dict = {}
        for name, offset, nbytes in infos:
            if name in self.tensors:
                raise self.bad(f"the tensor '{_show(name)}' twice")
            if start + offset + nbytes > self.size:
                raise self.bad(f"tensor '{_show(name)}' ends at byte {start + offset + nbytes:,}, past the end of the "
                               f"file's {self.size:,} bytes (a truncated file?)")
            self.tensors[name] = nbytes


def from_gguf(path: Path):
    """(Hugging Face-style config dict, Checkpoint) of a ``.gguf`` file: the architecture from its metadata, the
    bytes from its tensor infos (read by :class:`_GGUF`: bounded, nothing of the weights loaded). Every metadata
    value read is checked for its type (an integer, a finite number, a text) and refused by its key when it is
    not."""
    try:
        import gguf  # noqa: F401 - the tensor types' block sizes
    except ImportError:  # pragma: no cover - a declared dependency
        raise AicalcError("reading GGUF files needs the gguf package: pip install gguf") from None
    r = _GGUF(path)

    def value(key, kind):
        """The value of ``key`` (None when absent) as ``kind``: "int" (an integer type), "float" (a finite number
        ≥ 0) or "str" (a UTF-8 text); any other type, or a list, is refused naming the key."""
        if key not in r.fields:
            return None
        types, v = r.fields[key]
        want = {"int": "an integer", "float": "a finite number", "str": "a text"}[kind]
        allowed = {"int": _GGUF_INTS, "float": _GGUF_INTS + _GGUF_FLOATS, "str": ("STRING",)}[kind]
        if len(types) != 1 or types[0] not in allowed:
            raise AicalcError(f"{path}: GGUF metadata {_show(key)} is {'/'.join(types)}, not {want}")
        if kind == "str":
            try:
                return v.decode("utf-8")
            except UnicodeDecodeError:
                raise AicalcError(f"{path}: GGUF metadata {_show(key)} is not UTF-8 text") from None
        if kind == "int":
            return int(v)
        if not math.isfinite(v) or v < 0:
            raise AicalcError(f"{path}: GGUF metadata {_show(key)} is {v}, not a finite number ≥ 0")
        return float(v)

    arch = value("general.architecture", "str")
    if arch is None:
        raise AicalcError(f"{path}: GGUF metadata has no general.architecture")
    if not _GGUF_ARCH.fullmatch(arch):
        raise AicalcError(f"{path}: GGUF metadata general.architecture {_show(repr(arch), 80)} is not an "
                          "architecture name")

    def need(key, kind="int"):
        v = value(f"{arch}.{key}", kind)
        if v is None:
            raise AicalcError(f"{path}: GGUF metadata has no {arch}.{key}")
        return v

    def optional(key, default, kind="int"):
        v = value(f"{arch}.{key}", kind)
        return default if v is None else v

    tokens = r.fields.get("tokenizer.ggml.tokens")
    if tokens is not None:
        if tokens[0] != ["ARRAY", "STRING"]:
            raise AicalcError(f"{path}: GGUF metadata tokenizer.ggml.tokens is {'/'.join(tokens[0])}, not a list of "
                              "texts")
        vocab = tokens[1]
    else:
        vocab = value(f"{arch}.vocab_size", "int")
        if vocab is None:
            raise AicalcError(f"{path}: GGUF metadata has neither tokenizer.ggml.tokens nor {arch}.vocab_size")
    heads = need("attention.head_count")
    hidden = need("embedding_length")
    cfg = {"model_type": "llama" if arch in ("llama", "mistral") else arch,
           "hidden_size": hidden, "num_hidden_layers": need("block_count"),
           "num_attention_heads": heads,
           "num_key_value_heads": optional("attention.head_count_kv", heads),
           "intermediate_size": need("feed_forward_length"), "vocab_size": vocab,
           "max_position_embeddings": optional("context_length", 4096),
           "tie_word_embeddings": "output.weight" not in r.tensors,
           "rms_norm_eps": optional("attention.layer_norm_rms_epsilon", 1e-5, "float")}
    key_len = optional("attention.key_length", None)
    if key_len is not None and key_len * heads != hidden:
        cfg["head_dim"] = key_len  # the config's checks refuse one below 1 or above the cap
    ftype = value("general.file_type", "int")
    ck = from_tensors({name: ("bytes", n) for name, n in r.tensors.items()}, str(path), cfg)
    return cfg, Checkpoint(ck.source, ck.bytes_by_class, ck.tensors, ck.stored_dtypes,
                           f"gguf file_type {ftype}" if ftype is not None else "gguf", None)


def from_hub(repo_id: str, revision: str | None = None):
    """(config dict, Checkpoint or None) of a Hugging Face Hub repo: ``config.json`` (from huggingface_hub's cache,
    else downloaded and cached; honours ``HF_HUB_OFFLINE`` and ``HF_ENDPOINT``) and the safetensors index and
    headers read by range requests, no weights downloaded. Every call goes through :mod:`aicalc.catalog.hub`
    (one deadline, capped reads, transport errors as exit 2); what comes back is checked exactly like a local
    folder's files: shard names by :func:`shard_names`, headers by :func:`_tensors` with their data offsets."""
    from aicalc.catalog import hub

    hub.endpoint()  # HF_ENDPOINT checked first: huggingface_hub's import fails on a port out of range
    try:
        from huggingface_hub import constants, try_to_load_from_cache
    except ImportError:  # pragma: no cover - a declared dependency
        raise AicalcError("resolving a Hub id needs huggingface_hub: pip install huggingface_hub") from None
    from aicalc.catalog.store import load_json

    cached = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    online = not constants.HF_HUB_OFFLINE
    if not isinstance(cached, str) and not online:
        raise AicalcError(f"'{repo_id}' is not in the local Hub cache and HF_HUB_OFFLINE is set")
    if isinstance(cached, str):
        config = load_json(Path(cached))  # bounded in size and depth like every file aicalc reads
        source = None
    else:
        source = hub.Hub(repo_id, revision)
        body = source.document("config.json", hub.MAX_CONFIG_BYTES, "reading config.json")
        if body is None:
            raise AicalcError(f"Hub repo '{repo_id}' has no config.json")
        config = _load_json(body, f"hf://{repo_id}/config.json", "config.json")
    if not isinstance(config, dict):
        raise AicalcError(f"config.json of Hub repo '{repo_id}' is not a mapping")
    if source is not None:
        hub.cache_config(repo_id, revision, source.commit, body)
    if not online:
        return config, None  # the config alone still sizes the model
    try:
        source = source or hub.Hub(repo_id, revision)
        tensors = _hub_tensors(source)
    except hub.HubError as e:
        if e.unreachable and isinstance(cached, str):
            return config, None  # no network: the cached config alone sizes the model
        raise
    return config, None if tensors is None else from_tensors(tensors, f"hf://{repo_id}", config)


def _hub_tensors(source) -> dict | None:
    """name → (dtype, elements) of a Hub repo's safetensors files: those its index names, else
    ``model.safetensors``; None when it has neither. Headers are read eight at a time, all under the Hub's one
    deadline and within MAX_FOLDER_BYTES together."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    repo = source.repo_id
    budget = [MAX_FOLDER_BYTES]
    data = source.document(INDEX, MAX_HEADER_BYTES, "reading the safetensors index")
    if data is None:
        files = ["model.safetensors"]
    else:
        budget[0] -= len(data)
        files = shard_names(_load_json(data, f"hf://{repo}/{INDEX}", "the safetensors index"), f"hf://{repo}/{INDEX}")
        if not files:
            return None  # an index of no shards: as a local folder's, no checkpoint
    lock = threading.Lock()
    with ThreadPoolExecutor(max_workers=min(8, len(files))) as pool:
        futures = [pool.submit(source.header, name, budget, lock) for name in files]
        try:
            headers = [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    if data is None and headers[0] is None:
        return None  # no safetensors: the config alone sizes the model
    missing = [name for name, h in zip(files, headers, strict=True) if h is None]
    if missing:
        raise AicalcError(f"hf://{repo}: {INDEX} names {len(files)} shards, {len(missing)} of them missing on the Hub "
                          f"({_show(', '.join(missing), 160)})")
    tensors: dict = {}
    for name, (head, data_bytes) in zip(files, headers, strict=True):
        where = _show(f"hf://{repo}/{name}", 160)
        tensors.update(_tensors(_load_json(head, where, "the safetensors header"), where, data_bytes))
        if len(tensors) > MAX_TENSORS:
            raise AicalcError(f"hf://{repo}: more than aicalc's cap of {MAX_TENSORS:,} tensors in one checkpoint "
                              "(see docs/robustness.md)")
    return tensors
