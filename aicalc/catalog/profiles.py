"""Efficiency profiles: what real kernels reach on a class of chip (``presets/classes/``) and in an inference
engine (``presets/engines/``), as data with a source for every figure.

An estimate composes the defaults of :class:`aicalc.core.efficiency.Efficiency`, then the chip class's factors,
then the engine's, then the caller's overrides. Each profile is one YAML file::

    id: apple
    name: Apple silicon GPU (Metal)
    factors:
      bandwidth: {value: 0.8, source: "llama.cpp discussion #4167: …"}
    pipeline_over_chips: false      # dataflow chips: a token crosses every chip that holds a share of the weights

Every profile may hold ``id`` (the file's name), ``name``, ``description``, ``factors`` (each a factor of
:class:`~aicalc.core.efficiency.Efficiency` with a ``value`` within its range in
:data:`aicalc.core.efficiency.FACTOR_RANGES` and a ``source``) and ``extends`` (the id of a profile of the same
kind whose factors and options it starts from, or an engine family's name: its latest release; at most MAX_EXTENDS deep, no loops). Each kind has its options
(:data:`OPTIONS`), each with an optional ``KEY_source`` text:

- class: ``pipeline_over_chips`` (true/false); the memory a process holds outside PyTorch's allocated tensors
  (aicalc.api.train_memory): ``context_bytes`` (CUDA context and library workspaces), ``nccl_communicator_bytes``
  (one NCCL communicator's buffers), ``nccl_all_to_all_bytes`` (what an all-to-all adds), each a number of bytes
  or null (not stated);
- engine: ``release`` (the software release the factors describe: ``{version, date: YYYY-MM[-DD], source}``;
  every built-in engine profile with factors has one), ``family`` (the engine a release belongs to: ``--engine cerebras``
  means the latest release of the family ``cerebras``, ``--engine cerebras-2024-08`` that one), ``kv_shared``
  (true/false), ``gguf_compute`` (a compute dtype) with ``gguf_compute_vendors`` (a list of vendor names),
  ``max_num_seqs`` (a whole number of sequences, 1 to 2^24: the most one scheduler runs at once by default),
  ``max_num_seqs_by_chip`` (rules that set it by the chip, the first that matches: ``{min_memory_gib, value}`` with
  an optional ``name_excludes``, a list of texts none of which may be in the chip's name: vLLM V1's
  ``device_memory >= 70 GiB and "a100" not in device_name``, and an optional ``kind_excludes``, a list of chip kinds
  (gpu, tpu, ...) the rule never matches: a platform that reports no device memory, as vLLM's TPU platform, whose
  memory reads 0; a profile that sets ``max_num_seqs`` alone drops
  the rules of the profile it extends), ``max_num_batched_tokens`` and ``max_num_batched_tokens_by_chip`` (the
  tokens one scheduler step batches by default, and rules that set it by the chip, as for ``max_num_seqs``;
  :func:`token_budget`; a rule may also hold ``min_tp``, the fewest tensor-parallel chips of a replica it matches),
  ``cuda_graph_max_bs_by_chip`` (rules for the largest batch the decode CUDA graph captures, SGLang's),
  ``mem_fraction_static_reserve`` (the constants of SGLang's default --mem-fraction-static, :func:`static_reserve`:
  an engine with one takes that share of the whole memory for weights and KV pool by default, and its reserve
  replaces the generic runtime overhead), ``max_running_from_pool`` (a cap derived from the KV
  pool one scheduler holds, SGLang's: ``{per_context_length, at_least, at_most, tokens_per_request}``, the cap
  min(T // tokens_per_request, min(max(floor(T / context_len · per_context_length), at_least), at_most)) for a pool
  of T tokens and the model's context length; :func:`max_running`), ``kv_reserve`` (``live``: a running sequence
  holds the blocks of its tokens so far; ``full``: its whole prompt + output is reserved at admission), ``kv_budget``
  (``total``: the memory fraction is of the whole memory, vLLM's; ``free``: of what the weights leave, TensorRT-LLM's), ``swa_full_tokens_ratio`` (a hybrid
  sliding-window model's SWA pool in tokens per full-pool token, SGLang's: the pools :func:`aicalc.core.capacity.
  swa_pools` sizes), ``model_defaults`` (Hugging Face model_type → ``{max_running_requests, swa_full_tokens_ratio}``,
  the engine's own defaults for that model), ``by_class`` (chip class id → ``{factors: …}``);
- framework: ``default_zero`` (a ZeRO stage, 0 to 3), ``default_recompute`` (the activation recompute its recipes
  run unless told otherwise: one of :data:`aicalc.core.train_time.RECOMPUTE`), ``reduce_dtype`` (``fp32`` or
  ``bf16``: the dtype the data-parallel gradient reduction runs in; bf16 where unset), ``release`` and ``family`` (as an engine's: ``megatron-26.04`` is a
  release of the family ``megatron``, whose latest is the file ``megatron``), ``by_generation`` (a chip generation,
  as chip presets name it, → ``{factors: …}``: what the framework's recipes do differently on that generation).

Anything else, or a value of the wrong type or range, is an error naming the file and the key (exit 2).
"""

import math
from functools import cache
from pathlib import Path

from aicalc.catalog.store import is_id
from aicalc.errors import AicalcError, ParameterError
from aicalc.tuples import Named

KINDS = {"class": "classes", "engine": "engines", "framework": "frameworks"}
DEFAULT_ENGINE = "generic"
MAX_EXTENDS = 16  # profiles in one ``extends`` chain (the built-in ones use 2)
# the compute dtypes a chip lists (aicalc.catalog.schema.DTYPES, not imported: pydantic stays off a query's path)
COMPUTE_DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp6", "fp4", "int4")


class Profile(Named):
    """An efficiency profile (chip class, engine or framework) read from presets, each factor with its source (a
    named tuple: a frozen dataclass compiles its generated methods at import, docs/robustness.md)."""

    id: str
    name: str
    factors: dict[str, float]
    sources: dict[str, str]
    options: dict  # engine kernel mapping and dataflow flags


def _folders(kind: str) -> list[Path]:
    from aicalc.catalog.store import _roots

    return [r / KINDS[kind] for r in _roots() if (r / KINDS[kind]).is_dir()]


def _roots_key() -> tuple[str, ...]:
    """The preset roots now (built-in, AICALC_PRESETS, --presets-dir): the caches below are per set of roots, so a
    second in-process run with another --presets-dir reads its own profiles."""
    from aicalc.catalog.store import _roots

    return tuple(map(str, _roots()))


def ids(kind: str) -> tuple[str, ...]:
    """Profile ids of ``kind`` (files; an engine family's name, :func:`families`, is not one)."""
    return _ids(_roots_key(), kind)


def families(kind: str = "engine") -> dict[str, tuple[str, ...]]:
    """Family → the ids of its releases, oldest first (by the ``release.date`` of each profile): engine families
    (``cerebras``: the name is no file), framework families (``megatron``: the file of that name is the latest)."""
    return _families(_roots_key(), kind)


def family(profile: Profile) -> str:
    """The family a profile's release belongs to (``megatron-26.04`` → ``megatron``), else its own id."""
    return profile.options.get("family") or profile.id


def latest(family: str) -> str:
    """The id of a family's latest release: the default whenever the family is named."""
    return families()[family][-1]


@cache
def _families(roots: tuple[str, ...], kind: str = "engine") -> dict[str, tuple[str, ...]]:
    from aicalc.catalog.store import load_yaml

    out: dict[str, list[tuple[str, str]]] = {}
    for d in _folders(kind):
        for f in _yaml_files(d):
            data = load_yaml(f)
            fam = data.get("family") if isinstance(data, dict) else None
            if isinstance(fam, str) and (kind == "framework" or fam != f.stem) and _release(data.get("release")) is None:
                out.setdefault(fam, []).append((data["release"]["date"], f.stem))
    return {k: tuple(i for _, i in sorted(v)) for k, v in out.items()}


@cache
def _ids(roots: tuple[str, ...], kind: str) -> tuple[str, ...]:
    return tuple(sorted({f.stem for d in _folders(kind) for f in _yaml_files(d)}))


def _yaml_files(folder: Path) -> list[Path]:
    """``sorted(folder.glob("*.yaml"))`` from the folder's listing (pathlib's glob compiles a pattern)."""
    import os

    return [folder / name for name in sorted(e.name for e in os.scandir(folder) if e.name.endswith(".yaml"))]


# --- what a profile file may hold -----------------------------------------------------------------------------
# Every key of a profile, by kind, with the check of its value: the options are what the code reads
# (aicalc.api.roofline: pipeline_over_chips, kv_shared, gguf_compute, gguf_compute_vendors, by_class;
# aicalc.api.train_memory: context_bytes, nccl_communicator_bytes, nccl_all_to_all_bytes; aicalc.api.serving:
# max_num_seqs, max_num_seqs_by_chip, max_running_from_pool, model_defaults (through max_running), swa_full_tokens_ratio,
# kv_reserve, kv_budget, mem_fraction_static_reserve and cuda_graph_max_bs_by_chip (through static_reserve);
# aicalc.api.traffic: scheduler, max_num_batched_tokens, max_num_batched_tokens_by_chip (through token_budget);
# aicalc.commands.train_time: default_zero, default_recompute;
# aicalc.api.train_time: reduce_dtype), each with an optional
# ``KEY_source`` text. A key no code reads is refused rather than silently ignored (a typo would change nothing).

def _show(v) -> str:
    from aicalc.catalog.store import _short

    return _short(repr(v) if not isinstance(v, str) else f"'{v}'", 60)


def _text(v) -> str | None:
    return None if isinstance(v, str) else f"must be text, got {_show(v)}"


def _flag(v) -> str | None:
    return None if isinstance(v, bool) else f"must be true or false, got {_show(v)}"


def _compute_dtype(v) -> str | None:
    return None if isinstance(v, str) and v in COMPUTE_DTYPES else \
        f"must be one of {', '.join(COMPUTE_DTYPES)}, got {_show(v)}"


def _texts(v) -> str | None:
    if isinstance(v, list) and len(v) <= 256 and all(isinstance(x, str) and x for x in v):
        return None
    return f"must be a list of texts (vendor names, e.g. [NVIDIA]), got {_show(v)}"


def _sequences(v) -> str | None:
    from aicalc.api.inputs import CAPS

    cap = int(CAPS["concurrency"][0])
    if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= cap:
        return None
    return f"must be a whole number of sequences from 1 to {cap:,}, got {_show(v)}"


def _scheduler(v) -> str | None:
    from aicalc.core.simulate import POLICIES

    return None if isinstance(v, str) and v in POLICIES else f"must be one of {', '.join(POLICIES)}, got {_show(v)}"


def _kv_reserve(v) -> str | None:
    from aicalc.core.serving import KV_RESERVE

    return None if isinstance(v, str) and v in KV_RESERVE else f"must be one of {', '.join(KV_RESERVE)}, got {_show(v)}"


def _kv_budget(v) -> str | None:
    from aicalc.core.capacity import KV_BUDGET

    return None if isinstance(v, str) and v in KV_BUDGET else f"must be one of {', '.join(KV_BUDGET)}, got {_show(v)}"


def _bytes(v) -> str | None:
    """A memory figure in bytes: a number from 0 to 1 TiB, or null (not stated for this class: a class that
    extends another without its CUDA/NCCL stack)."""
    if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 2**40):
        return None
    return f"must be a number of bytes from 0 to 1 TiB, got {_show(v)}"


def _zero_stage(v) -> str | None:
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 3:
        return None
    return f"must be a ZeRO stage, 0, 1, 2 or 3, got {_show(v)}"


def _recompute(v) -> str | None:
    from aicalc.core.train_time import RECOMPUTE

    return None if v in RECOMPUTE else f"must be one of {', '.join(RECOMPUTE)}, got {_show(v)}"


def _reduce_dtype(v) -> str | None:
    return None if v in ("fp32", "bf16") else f"must be fp32 or bf16, got {_show(v)}"


def _release(v) -> str | None:
    """An engine release: ``{version: text, date: YYYY-MM or YYYY-MM-DD, source: text}``."""
    if not isinstance(v, dict) or set(v) != {"version", "date", "source"}:
        return f"must be a mapping of version, date and source, got {_show(v)}"
    if not all(isinstance(v[k], str) and v[k] for k in ("version", "source")):
        return "needs a version and a source, each a text"
    if not isinstance(v["date"], str) or not is_release_date(v["date"]):
        return f"date must read YYYY-MM or YYYY-MM-DD (quoted), got {_show(v['date'])}"
    return None


def is_release_date(text: str) -> bool:
    """Whether ``text`` reads YYYY-MM or YYYY-MM-DD of 19xx or 20xx, the pattern
    ``(19|20)[0-9]{2}-(0[1-9]|1[0-2])(-[0-3][0-9])?`` (whole text) read by hand: compiling it cost ~2 M
    instructions of every ``train-time`` query (a framework's release date; tests/test_profiles_hostile.py holds
    the two to the same answers)."""
    if len(text) not in (7, 10) or text[4] != "-" or (len(text) == 10 and text[7] != "-"):
        return False
    digits = text[:4] + text[5:7] + text[8:]
    return (all(c in "0123456789" for c in digits) and text[:2] in ("19", "20") and "01" <= text[5:7] <= "12"
            and (len(text) == 7 or text[8] in "0123"))


CHIP_KINDS = ("gpu", "tpu", "npu", "lpu", "wafer", "soc", "accelerator")  # aicalc.catalog.schema.Chip.kind


def _kinds(v) -> str | None:
    """A rule's ``kind_excludes``: a list of chip kinds (:data:`CHIP_KINDS`)."""
    if not isinstance(v, list) or not v or len(v) > 64 or any(not isinstance(x, str) or x not in CHIP_KINDS
                                                              for x in v):
        return f"kind_excludes must be a list of chip kinds ({', '.join(CHIP_KINDS)}), got {_show(v)}"
    return None


RULE_KEYS = ("min_memory_gib", "value", "name_excludes", "kind_excludes", "min_tp")


def _seq_rules(v) -> str | None:
    """``max_num_seqs_by_chip`` (and ``max_num_batched_tokens_by_chip``, ``cuda_graph_max_bs_by_chip``): a list of
    ``{min_memory_gib: number, value: a whole number, name_excludes: [texts], kind_excludes: [chip kinds], min_tp: a
    whole number}`` (``min_tp``: the rule matches a replica of at least that many tensor-parallel chips only)."""
    if not isinstance(v, list) or not v or len(v) > 64:
        return f"must be a list of rules {{{', '.join(RULE_KEYS)}}}, got {_show(v)}"
    for rule in v:
        if not isinstance(rule, dict) or not {"min_memory_gib", "value"} <= set(rule) or set(rule) - set(RULE_KEYS):
            return (f"each rule must hold min_memory_gib and value (and may hold name_excludes, kind_excludes, "
                    f"min_tp), got {_show(rule)}")
        m = rule["min_memory_gib"]
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 <= m <= 2**20:
            return f"min_memory_gib must be a number of GiB from 0 to 2^20, got {_show(m)}"
        problem = (_sequences(rule["value"]) or (_texts(rule["name_excludes"]) if "name_excludes" in rule else None)
                   or (_kinds(rule["kind_excludes"]) if "kind_excludes" in rule else None)
                   or (f"min_tp {_sequences(rule['min_tp'])}" if "min_tp" in rule and _sequences(rule["min_tp"])
                       else None))
        if problem:
            return problem
    return None


# SGLang's reserve besides weights and KV pool (``mem_fraction_static_reserve``; :func:`static_reserve`): each a
# number of MiB or tokens from 0 to 2^20; ``prefill_graph_sizes``: [first, last or null, step] runs of the prefill
# CUDA graph's captured token counts; ``prefill_graph_vendors``: the chip vendors whose default runs that graph;
# ``prefill_graph_off``: model types whose default turns it off
RESERVE_NUMBERS = ("base_mib", "per_chunk_token_mib", "min_activation_tokens", "per_rank_mib", "per_graph_bs_mib",
                   "dp_attention_per_graph_bs_mib", "dp_attention_large_graph_bs",
                   "dp_attention_large_per_graph_bs_mib", "prefill_graph_per_size_mib", "prefill_graph_mla_mib",
                   "floor_mib", "floor_above_mib")
RESERVE_KEYS = (*RESERVE_NUMBERS, "prefill_graph_sizes", "prefill_graph_vendors", "prefill_graph_off")


def _reserve(v) -> str | None:
    """``mem_fraction_static_reserve``: the constants of SGLang's default --mem-fraction-static (every key of
    :data:`RESERVE_KEYS`)."""
    if not isinstance(v, dict) or set(v) != set(RESERVE_KEYS):
        return f"must be a mapping of {', '.join(RESERVE_KEYS)}, got {_show(v)}"
    for k in RESERVE_NUMBERS:
        x = v[k]
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= 2**20:
            return f"{k} must be a number from 0 to 2^20, got {_show(x)}"
    runs = v["prefill_graph_sizes"]
    if not isinstance(runs, list) or not runs or len(runs) > 64 or any(
            not isinstance(r, list) or len(r) != 3 or any(isinstance(x, bool) for x in r)
            or not isinstance(r[0], int) or not isinstance(r[2], int) or not (r[1] is None or isinstance(r[1], int))
            or not 1 <= r[0] <= 2**20 or not 1 <= r[2] <= 2**20 or (r[1] is not None and not r[0] <= r[1] <= 2**20)
            for r in runs):
        return (f"prefill_graph_sizes must be a list of [first, last or null, step] whole numbers from 1 to 2^20, "
                f"got {_show(runs)}")
    for k in ("prefill_graph_vendors", "prefill_graph_off"):
        if not isinstance(v[k], list) or len(v[k]) > 256 or not all(isinstance(x, str) and x for x in v[k]):
            return f"{k} must be a list of texts, got {_show(v[k])}"
    return None


POOL_RULE = ("per_context_length", "at_least", "at_most", "tokens_per_request")


def _pool_rule(v) -> str | None:
    """``max_running_from_pool``: ``{per_context_length, at_least, at_most, tokens_per_request}``, whole numbers
    (at_least <= at_most)."""
    if not isinstance(v, dict) or set(v) != set(POOL_RULE):
        return f"must be a mapping of {', '.join(POOL_RULE)}, got {_show(v)}"
    for k in POOL_RULE:
        problem = _sequences(v[k])
        if problem:
            return f"{k} {problem}"
    return None if v["at_least"] <= v["at_most"] else "at_least must not exceed at_most"


def _ratio(v) -> str | None:
    """``swa_full_tokens_ratio``: SWA-pool tokens per full-pool token, a number above 0 and at most 16."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 16:
        return None
    return f"must be a number above 0 and at most 16, got {_show(v)}"


MODEL_DEFAULTS = {"max_running_requests": _sequences, "swa_full_tokens_ratio": _ratio}


def _model_defaults(v) -> str | None:
    """``model_defaults``: Hugging Face model_type → ``{max_running_requests, swa_full_tokens_ratio}`` (either or
    both), the settings an engine picks for that model when the user gives none."""
    if not isinstance(v, dict) or not v or len(v) > 256:
        return f"must be a mapping of model types to {{{', '.join(MODEL_DEFAULTS)}}}, got {_show(v)}"
    for name, entry in v.items():
        if not isinstance(name, str) or not name or not isinstance(entry, dict) or not entry or \
                set(entry) - set(MODEL_DEFAULTS):
            return f"each entry must map a model type to some of {', '.join(MODEL_DEFAULTS)}, got {_show(entry)}"
        for key, value in entry.items():
            problem = MODEL_DEFAULTS[key](value)
            if problem:
                return f"{name}.{key} {problem}"
    return None


def model_default(options: dict, model_type: str | None, key: str):
    """The engine's default ``key`` for a model of ``model_type`` (its profile's ``model_defaults``), else None."""
    return ((options.get("model_defaults") or {}).get(model_type) or {}).get(key)


def swa_ratio(options: dict, model_type: str | None = None, given: float | None = None) -> float | None:
    """SWA-pool tokens per full-pool token an engine sizes a hybrid sliding-window model's pools with
    (SGLang's ``--swa-full-tokens-ratio``): ``given`` where the caller names it, else the model's default
    (``model_defaults``), else the profile's ``swa_full_tokens_ratio``; None for an engine without separate
    pools (vLLM, whose hybrid allocator pages every layer group from one pool)."""
    if given is not None:
        problem = _ratio(given)
        if problem:
            raise ParameterError("swa_full_tokens_ratio", given, problem.removeprefix("must be "))
        return float(given)
    r = model_default(options, model_type, "swa_full_tokens_ratio") or options.get("swa_full_tokens_ratio")
    return float(r) if r is not None else None


def _chip_rule(options: dict, key: str, chip, tp: int = 1):
    """The ``value`` of the first ``KEY_by_chip`` rule ``chip`` meets (its memory at least ``min_memory_gib`` GiB,
    its name holding none of ``name_excludes``, case-insensitive, its kind none of ``kind_excludes``: vLLM V1's
    EngineArgs._set_default_args reads the device so, and on a TPU, whose platform raises on
    get_device_total_memory, reads 0 GiB; a replica of ``tp`` chips at least the rule's ``min_tp``: SGLang's
    decode CUDA-graph batch by 'tp_size < 4'), else the profile's ``KEY``, else None. The memory is the device's
    total as the engines read it (:func:`device_mib`: vLLM's get_device_total_memory and SGLang's gpu_mem alike)."""
    memory_gib = device_mib(chip) / 1024
    name = str(getattr(chip, "name", "") or "").lower()
    kind = getattr(chip, "kind", None)
    for rule in options.get(f"{key}_by_chip") or ():
        if memory_gib >= rule["min_memory_gib"] and kind not in rule.get("kind_excludes", ()) and \
                tp >= rule.get("min_tp", 1) and not any(x.lower() in name for x in rule.get("name_excludes", ())):
            return rule["value"]
    return options.get(key)


class StaticReserve(Named):
    """SGLang's default --mem-fraction-static on a chip and layout (:func:`static_reserve`): ``fraction`` (of the
    device's memory, weights and KV pool together), ``reserved_mib`` (what it keeps for activations and CUDA
    graphs), ``gpu_mem_mib`` (the device's memory as the engine reads it), ``chunk`` (--chunked-prefill-size),
    ``graph_bs`` (the decode CUDA graph's largest batch) and ``prefill_graph_mib`` (the prefill graph's share of
    the reserve, 0 where it is off)."""

    fraction: float
    reserved_mib: float
    gpu_mem_mib: int
    chunk: int
    graph_bs: int
    prefill_graph_mib: float


def device_mib(chip) -> int:
    """A device's memory in whole MiB as an engine reads its total: the preset's measured usable memory
    (torch.cuda.mem_get_info's total, cudaMemGetInfo) where it has one, else its label."""
    return int(float(getattr(chip, "usable_memory_bytes", 0) or getattr(chip, "memory_bytes", 0) or 0) // 2**20)


def static_reserve(options: dict, chip, arch, tp: int = 1, pp: int = 1, attention_dp: int = 1) -> StaticReserve | None:
    """SGLang's default --mem-fraction-static (python/sglang/srt/arg_groups/memory_hook.py,
    handle_gpu_memory_settings) for a replica of ``tp`` chips in ``pp`` stages with ``attention_dp`` DP-attention
    ranks, from the profile's ``mem_fraction_static_reserve`` (None for an engine without one): the device's memory
    M in MiB (:func:`device_mib`) sets --chunked-prefill-size C (``max_num_batched_tokens_by_chip``) and the
    decode CUDA graph's largest batch (``cuda_graph_max_bs_by_chip``, by M and tp); the prefill CUDA graph runs on
    the ``prefill_graph_vendors``' chips at pp 1 unless the model's type is in ``prefill_graph_off``, and reserves
    ``prefill_graph_mla_mib`` for an MLA model (its backend), else ``prefill_graph_per_size_mib`` for each captured
    token count up to C; then the reserve and round((M − reserve) / M, 3)
    (:func:`aicalc.core.capacity.static_reserve_mib`)."""
    from aicalc.core.capacity import prefill_graph_sizes, static_fraction, static_reserve_mib

    rule = options.get("mem_fraction_static_reserve")
    if not rule:
        return None
    mem = device_mib(chip)
    chunk = int(_chip_rule(options, "max_num_batched_tokens", chip, tp) or 0)
    graph_bs = int(_chip_rule(options, "cuda_graph_max_bs", chip, tp) or 0)
    prefill = 0.0
    if pp == 1 and getattr(chip, "vendor", None) in rule["prefill_graph_vendors"] and \
            getattr(arch, "family", None) not in rule["prefill_graph_off"]:
        prefill = float(rule["prefill_graph_mla_mib"]) if getattr(arch, "mla", None) is not None else \
            prefill_graph_sizes(rule["prefill_graph_sizes"], chunk) * float(rule["prefill_graph_per_size_mib"])
    reserved = static_reserve_mib(mem, chunk, graph_bs, tp, pp, attention_dp, prefill, rule)
    return StaticReserve(static_fraction(mem, reserved), reserved, mem, chunk, graph_bs, prefill)


def token_budget(options: dict, chip) -> int:
    """Tokens one scheduler step of an engine may batch by default on ``chip``: its profile's
    ``max_num_batched_tokens`` (or the ``max_num_batched_tokens_by_chip`` rule the chip meets: vLLM V1's API
    server 8192 on the large chips, 2048 on the others), else :data:`aicalc.core.serving.TOKEN_BUDGET`."""
    from aicalc.core.serving import TOKEN_BUDGET

    return int(_chip_rule(options, "max_num_batched_tokens", chip) or TOKEN_BUDGET)


def max_running(options: dict, chip, pool_tokens=None, context=None, model_type: str | None = None,
                schedulers: int = 1) -> int | None:
    """The most sequences one scheduler of an engine runs at once by default on ``chip`` (None: no cap of its
    own): the ``value`` of the first ``max_num_seqs_by_chip`` rule the chip meets (its memory at least
    ``min_memory_gib`` GiB, its name holding none of ``name_excludes``, case-insensitive: vLLM V1's
    EngineArgs._set_default_args), else ``max_num_seqs``; and, with ``max_running_from_pool`` (SGLang's
    ModelRunner.init_memory_pool and TpModelWorker), min(T // tokens_per_request, min(max(floor(T / context ×
    per_context_length), at_least), at_most)) for ``pool_tokens`` T of KV pool and the model's ``context`` length
    (both needed; T < 1 gives no cap: nothing fits anyway). A ``model_defaults`` entry of the model's
    ``model_type`` with ``max_running_requests`` replaces the pool-derived cap: the engine's default for the whole
    server, shared by its ``schedulers`` (SGLang's DeepSeek-V4 hook sets --max-running-requests 256, and
    TpModelWorker gives each attention-DP rank max_running_requests // dp_size)."""
    cap = _chip_rule(options, "max_num_seqs", chip)
    pool = options.get("max_running_from_pool")
    server = model_default(options, model_type, "max_running_requests")
    if server is not None:
        share = max(1, int(server) // max(1, int(schedulers)))
        return share if cap is None else min(int(cap), share)
    if pool and pool_tokens is not None and context and pool_tokens >= 1:
        t = int(pool_tokens)
        derived = min(max(int(t / float(context) * pool["per_context_length"]), pool["at_least"]), pool["at_most"])
        derived = min(t // pool["tokens_per_request"], derived)
        cap = derived if cap is None else min(cap, derived)
    return int(cap) if cap else None


def _family(v) -> str | None:
    return None if isinstance(v, str) and is_id(v) else f"must be an engine id, got {_show(v)}"


COMMON_KEYS = ("id", "name", "description", "factors", "extends")
OPTIONS = {
    "class": {"pipeline_over_chips": _flag, "context_bytes": _bytes, "nccl_communicator_bytes": _bytes,
              "nccl_all_to_all_bytes": _bytes},
    "engine": {"release": _release, "family": _family, "kv_shared": _flag, "gguf_compute": _compute_dtype,
               "gguf_compute_vendors": _texts, "max_num_seqs": _sequences, "max_num_seqs_by_chip": _seq_rules,
               "max_num_batched_tokens": _sequences, "max_num_batched_tokens_by_chip": _seq_rules,
               "max_running_from_pool": _pool_rule, "scheduler": _scheduler,
               "cuda_graph_max_bs_by_chip": _seq_rules, "mem_fraction_static_reserve": _reserve,
               "swa_full_tokens_ratio": _ratio, "model_defaults": _model_defaults,
               "kv_reserve": _kv_reserve, "kv_budget": _kv_budget,
               "by_class": None},  # by_class: read by _read_by
    "framework": {"default_zero": _zero_stage, "default_recompute": _recompute, "reduce_dtype": _reduce_dtype,
                  "release": _release, "family": _family, "by_generation": None},  # by_generation: read by _read_by
}


def load(kind: str, profile_id: str) -> Profile:
    """The profile ``profile_id`` of ``kind`` (``class``, ``engine`` or ``framework``); a user folder overrides a
    built-in. Every file of its ``extends`` chain is validated (keys, option types, factor ranges); a chain that
    loops or is longer than MAX_EXTENDS is an error naming the file."""
    if kind not in KINDS:
        raise AicalcError(f"'{kind}' is not a kind of profile (known: {', '.join(KINDS)})")
    if not isinstance(profile_id, str):
        _find(kind, profile_id)  # refuses it, naming the parameter
    if kind == "engine" and profile_id not in ids(kind) and profile_id in families():
        profile_id = latest(profile_id)  # a family: its latest release
    return _load(_roots_key(), kind, profile_id)


def _find(kind: str, profile_id) -> Path:
    from aicalc.catalog.store import _short

    param = {"class": "efficiency_class"}.get(kind, kind)
    if not isinstance(profile_id, str) or not is_id(profile_id):
        raise ParameterError(param, _short(str(profile_id), 64),
                             f"is not a profile id (known: {', '.join(ids(kind))})")
    files = [d / f"{profile_id}.yaml" for d in _folders(kind) if (d / f"{profile_id}.yaml").is_file()]
    if not files:
        raise ParameterError(param, profile_id, f"is not a known {kind} profile (known: {', '.join(ids(kind))})")
    return files[-1]


@cache
def _load(roots: tuple[str, ...], kind: str, profile_id: str) -> Profile:
    from aicalc.catalog.store import _short

    chain: list[tuple[str, Path, dict]] = []  # the profile, then what it extends, and so on
    pid, path = profile_id, _find(kind, profile_id)
    while True:
        data = _read(kind, pid, path)
        chain.append((pid, path, data))
        base = data.get("extends")
        if base is None:
            break
        where = f"{_short(path)}: 'extends'"
        if not isinstance(base, str) or not is_id(base):
            raise AicalcError(f"{where} must be a {kind} profile id (a-z, 0-9, '.', '-', '_'; at most 64 "
                              f"characters), got {_show(base)}")
        seen = [c[0] for c in chain]
        if base in seen:
            loop = " → ".join([*seen[seen.index(base):], base])
            raise AicalcError(f"{where} makes a loop of profiles: {loop}")
        if len(chain) >= MAX_EXTENDS:
            raise AicalcError(f"{where}: a chain of profiles is limited to {MAX_EXTENDS} (from {profile_id})")
        if kind == "engine" and base not in ids(kind) and base in families():
            base = latest(base)  # a family (vllm): its latest release, as --engine reads it
        try:
            path = _find(kind, base)
        except ParameterError:
            raise AicalcError(f"{where} names '{base}', which is not a known {kind} profile (known: "
                              f"{', '.join(ids(kind))})") from None
        pid = base
    factors, sources, options, by_class, by_generation = {}, {}, {}, {}, {}
    for _, _, data in reversed(chain):  # the base first; each profile overrides what it extends
        factors.update(data["factors"][0])
        sources.update(data["factors"][1])
        for key in ("max_num_seqs", "max_num_batched_tokens"):  # a value set here is not refined by the rules
            if key in data["options"] and f"{key}_by_chip" not in data["options"]:  # of the profile it extends
                options.pop(f"{key}_by_chip", None)
        options.update(data["options"])
        by_class.update(data["by_class"])
        by_generation.update(data["by_generation"])
    options["by_class"] = by_class
    if kind == "framework":
        options["by_generation"] = by_generation
    return Profile(profile_id, chain[0][2]["name"], factors, sources, options)


def _read(kind: str, profile_id: str, path: Path) -> dict:
    """One profile file, checked: {"name", "extends", "factors": (factors, sources), "options", "by_class"}."""
    from aicalc.catalog.store import _short, load_yaml

    data = load_yaml(path)
    file = _short(path)
    if not isinstance(data, dict) or data.get("id") != profile_id:
        raise AicalcError(f"{file}: expected a mapping whose id is '{profile_id}'")
    known = OPTIONS[kind]
    for key, value in data.items():
        if not isinstance(key, str):
            raise AicalcError(f"{file}: key {_show(key)} is not a text")
        if key.endswith("_source") and key.removesuffix("_source") in known:
            problem = _text(value)
        elif key in known:
            problem = known[key](value) if known[key] else None
        elif key in ("name", "description"):
            problem = _text(value)
        elif key in COMMON_KEYS:
            continue  # id above, factors and extends below
        else:
            raise AicalcError(f"{file}: '{_short(key, 60)}' is not a key of a {kind} profile (known: "
                              f"{', '.join([*COMMON_KEYS, *known])}, and KEY_source for an option)")
        if problem:
            raise AicalcError(f"{file}: '{key}' {problem}")
    return {"name": data.get("name", profile_id), "extends": data.get("extends"),
            "factors": _read_factors(file, data.get("factors"), "factors"),
            "options": {k: v for k, v in data.items() if k not in (*COMMON_KEYS, "by_class", "by_generation")},
            "by_class": _read_by(file, data.get("by_class"), "by_class", ids("class")) if "by_class" in known else {},
            "by_generation": _read_by(file, data.get("by_generation"), "by_generation", None)
            if "by_generation" in known else {}}


def _read_factors(file: str, block, where: str) -> tuple[dict[str, float], dict[str, str]]:
    """A ``factors:`` mapping: each a known factor with a value in its range and a source."""
    from aicalc.catalog.store import _short
    from aicalc.core.efficiency import FACTOR_RANGES, factor_problem

    if block is None:
        return {}, {}
    if not isinstance(block, dict):
        raise AicalcError(f"{file}: '{where}' must be a mapping of efficiency factors to {{value, source}}, got "
                          f"{_show(block)}")
    factors, sources = {}, {}
    for name, entry in block.items():
        if name not in FACTOR_RANGES:
            raise AicalcError(f"{file}: {where}: '{_short(str(name), 60)}' is not an efficiency factor (known: "
                              f"{', '.join(sorted(FACTOR_RANGES))})")
        if not isinstance(entry, dict) or "value" not in entry or not entry.get("source"):
            raise AicalcError(f"{file}: {where}.{name} needs a value and a source")
        extra = sorted(map(str, set(entry) - {"value", "source"}))
        if extra:
            raise AicalcError(f"{file}: {where}.{name}: '{_short(extra[0], 60)}' is not a key of a factor (value, "
                              "source)")
        if not isinstance(entry["source"], str):
            raise AicalcError(f"{file}: {where}.{name}.source must be text, got {_show(entry['source'])}")
        v = entry["value"]
        problem = factor_problem(name, v)
        if problem:
            shown = f"{v:g}" if isinstance(v, float) and math.isfinite(v) else _show(v)
            raise AicalcError(f"{file}: {where}.{name} = {shown} {problem}")
        factors[name], sources[name] = float(v), entry["source"]
    return factors, sources


def _read_by(file: str, block, key: str, known) -> dict[str, tuple[dict[str, float], dict[str, str]]]:
    """An engine's ``by_class:`` (its kernels differ per backend: CUDA, Metal; ``known`` the class ids) or a
    framework's ``by_generation:`` (its recipes differ per chip generation; any generation name): name →
    {factors: …}."""
    from aicalc.catalog.store import _short

    what = "chip class ids" if known is not None else "chip generations"
    if block is None:
        return {}
    if not isinstance(block, dict):
        raise AicalcError(f"{file}: '{key}' must be a mapping of {what} to {{factors: …}}, got {_show(block)}")
    out = {}
    for name, entry in block.items():
        if not isinstance(name, str) or not name or (known is not None and name not in known):
            raise AicalcError(f"{file}: {key}: {_show(name)} is not a chip class (known: {', '.join(known)})"
                              if known is not None else f"{file}: {key}: {_show(name)} is not a generation's name")
        if entry is None:
            entry = {}
        if not isinstance(entry, dict):
            raise AicalcError(f"{file}: {key}.{name} must be a mapping holding 'factors', got {_show(entry)}")
        extra = sorted(map(str, set(entry) - {"factors", "description"}))
        if extra:
            raise AicalcError(f"{file}: {key}.{name}: '{_short(extra[0], 60)}' is not a key (known: factors, "
                              "description)")
        if not isinstance(entry.get("description", ""), str):
            raise AicalcError(f"{file}: {key}.{name}.description must be text")
        out[name] = _read_factors(file, entry.get("factors"), f"{key}.{name}.factors")
    return out


def default_engine(chip) -> str:
    """The engine a chip runs when none is given: its preset's ``default_engine`` (its own serving stack:
    groq, cerebras, vllm on TPUs (vLLM TPU, the tpu-inference plugin; JetStream is archived), llama.cpp on Apple
    GPUs), else generic."""
    return getattr(chip, "default_engine", None) or DEFAULT_ENGINE


def release_note(engine_id: str, kind: str = "engine") -> str:
    """``cerebras-2025 (Cerebras Inference, 2025 …, 2025-08)``: the profile an estimate used and the release it
    describes, for a table's notes."""
    rel = load(kind, engine_id).options.get("release")
    return f"{engine_id} ({rel['version']}, {rel['date']})" if rel else f"{engine_id} (no release of its own)"


def chip_class(chip) -> str:
    """A chip's efficiency class: its preset's ``efficiency_class``, else from its kind and vendor."""
    if getattr(chip, "efficiency_class", None):
        return chip.efficiency_class
    if chip.kind in ("lpu", "wafer"):
        return "sram-dataflow"
    if chip.kind == "tpu":
        return "tpu"
    if chip.vendor == "Apple":
        return "apple"
    if chip.vendor == "AMD":
        return "amd-gpu"
    if chip.kind in ("npu", "soc"):
        return "edge-npu"
    return "datacenter-gpu"
