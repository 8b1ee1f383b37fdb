"""The launch commands of a serving deployment for vLLM and SGLang: one command per pool (one for an aggregated
deployment, a prefill and a decode command for a disaggregated one), each run once per replica.

Every flag and every declared choice written here exists in the engine's own argument definitions at the pinned
release (``RELEASES``): ``validation/record_engine_args.py`` extracts them from the released wheels' source and
``tests/test_emit.py`` checks each emitted flag and value against that record (tests/data/engine_args.json).
A deployment the engine cannot run (a chip it does not support, a format or layout its release has no option
for) raises :class:`aicalc.errors.AicalcError` naming why."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from aicalc.core.serving import TOKEN_BUDGET  # batched tokens per step the fixed-batch estimate assumes

# the releases whose argument definitions tests/data/engine_args.json records
RELEASES = {"vllm": "0.33.0", "sglang": "0.5.23", "trtllm": "1.2.1"}
NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
# chip vendors each engine's release runs on (vLLM: CUDA, ROCm, TPU and Gaudi platforms; SGLang: CUDA and ROCm)
VENDORS = {"vllm": ("NVIDIA", "AMD", "Google", "Intel"), "sglang": ("NVIDIA", "AMD"), "trtllm": ("NVIDIA",)}

# aicalc KV-cache formats → each engine's --kv-cache-dtype value (absent: the release has none)
_KV = {"vllm": {"bf16": "bfloat16", "fp16": "float16", "fp8": "fp8_e4m3", "int8": "int8_per_token_head",
                "int4": "int4_per_token_head"},
       "sglang": {"bf16": "bf16", "fp8": "fp8_e4m3"}}
_DTYPE = {"bf16": "bfloat16", "fp16": "float16"}


@dataclass
class LaunchCommand:
    """One pool's command: run it on each of ``replicas`` replicas of ``chips_per_replica`` chips."""

    engine: str
    version: str
    pool: str  # aggregated, prefill or decode
    chip: str
    replicas: int
    chips_per_replica: int
    argv: list[str]
    notes: list[str] = field(default_factory=list)

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    def row(self) -> dict:
        return {"engine": self.engine, "version": self.version, "pool": self.pool, "chip": self.chip,
                "replicas": self.replicas,
                "chips_per_replica": self.chips_per_replica, "command": self.command}


def launch_commands(engine: str, model, chip, deployment: dict, *, max_model_len: int, utilization: float = 0.9,
                    draft=None, draft_tokens: int = 4, token_budget: int = TOKEN_BUDGET) -> list[LaunchCommand]:
    """The commands that start ``deployment`` on ``engine`` (``"vllm"`` or ``"sglang"``; ``"trtllm"`` raises,
    its argument definitions are not recorded).

    ``deployment`` is a row of ``serve`` or ``serve --search``: ``tp`` (chips per replica; the decode pool's when
    disaggregated), ``replicas``, ``dtype``, ``kv_dtype`` and ``max_num_seqs`` (sequences one replica runs at
    once: the concurrency per replica the estimate used), and where present ``mode`` (``"disaggregated"``),
    ``prefill_replicas``, ``prefill_tp``, ``decode_tp``, ``pp``, ``ep`` (expert-parallel ranks per replica) and
    ``attention_dp`` (attention data-parallel groups per replica). ``model``: a preset id, path, Hub id or
    ModelSpec (the command names its Hugging Face repo where the preset has one, else the path);
    ``max_model_len``: prompt + generated tokens; ``utilization``: the share of each chip's memory the estimate
    gave the engine; ``draft``/``draft_tokens``: speculative decoding as ``serve --draft``."""
    from aicalc.api.catalog import load_decoder

    d = dict(deployment)
    chips = {pool: d.get(f"{pool}_chip") or chip for pool in ("prefill", "decode")}  # a pool's own chip type
    for c in {chip, *chips.values()}:
        check_engine(engine, c)
    name, version = NAMES[engine], RELEASES[engine]
    spec = load_decoder(model, "serve --emit")
    ref = spec.hf_repo or (str(model) if isinstance(model, str) else spec.id)
    disagg = d.get("mode") == "disaggregated"
    common = _format_flags(engine, name, version, spec, d["dtype"], d["kv_dtype"])
    common += _spec_flags(engine, name, version, draft, int(draft_tokens))
    common += ["--max-model-len" if engine == "vllm" else "--context-length", str(int(max_model_len))]
    common += ["--gpu-memory-utilization" if engine == "vllm" else "--mem-fraction-static", _num(utilization)]
    common += ["--max-num-batched-tokens" if engine == "vllm" else "--chunked-prefill-size", str(int(token_budget))]
    head = ["vllm", "serve", ref] if engine == "vllm" else ["python3", "-m", "sglang.launch_server", "--model-path",
                                                            ref]
    seqs = max(1, int(d["max_num_seqs"]))
    if not disagg:
        argv = head + _layout(engine, name, version, d, int(d["tp"])) + common + _seqs(engine, seqs, d)
        return [LaunchCommand(engine, version, "aggregated", _chip_id(chip), int(d["replicas"]),
                              int(d["tp"]) * int(d.get("pp") or 1), argv)]
    pre_tp = int(d.get("prefill_tp") or d["tp"])
    dec_tp = int(d.get("decode_tp") or d["tp"])
    out = []
    for pool, tp, replicas in (("prefill", pre_tp, int(d["prefill_replicas"])), ("decode", dec_tp, int(d["replicas"]))):
        argv = head + _layout(engine, name, version, d, tp) + common + _disagg(engine, pool)
        if pool == "decode":
            argv += _seqs(engine, seqs, d)
        notes = [] if pool == "decode" else ["prefill replicas batch prompts within the token budget; their "
                                             "sequence cap is left at the engine's default"]
        out.append(LaunchCommand(engine, version, pool, _chip_id(chips[pool]), replicas, tp, argv, notes))
    router = ("a proxy that sends each request to a prefill then a decode replica (vLLM's disaggregated-serving "
              "examples)" if engine == "vllm" else
              "sglang-router in PD mode: python3 -m sglang_router.launch_router --pd-disaggregation --prefill URL "
              "--decode URL")
    out[0].notes.append(f"requests enter through {router}; not emitted")
    return out


def check_engine(engine: str, chip) -> None:
    """Raise AicalcError (exit 2) naming why when ``engine`` cannot launch anything on ``chip``."""
    from aicalc.api.catalog import load_node_or_chip
    from aicalc.errors import AicalcError

    if engine not in RELEASES:
        raise AicalcError(f"--emit must be one of {', '.join(RELEASES)}, got '{engine}'")
    name, version = NAMES[engine], RELEASES[engine]
    chip_obj, _ = load_node_or_chip(chip)
    vendor = getattr(chip_obj, "vendor", None)
    if vendor not in VENDORS[engine]:
        vendors = VENDORS[engine]
        listed = vendors[0] if len(vendors) == 1 else ", ".join(vendors[:-1]) + " and " + vendors[-1]
        raise AicalcError(f"{name} {version} runs on {listed} chips, not on {chip_obj.id} "
                          f"({vendor} {getattr(chip_obj, 'kind', 'chip')})")
    if engine == "trtllm":
        raise AicalcError(f"{name} {version}'s argument definitions are not recorded (its wheels are published on "
                          "NVIDIA's package index only; PyPI holds a stub that fetches them), so no trtllm-serve flag "
                          "can be checked: record them with validation/record_engine_args.py --source "
                          f"tensorrt_llm=WHEEL, or tensorrt_llm=GIT_DIR@v{version} from a clone of NVIDIA/TensorRT-LLM")


def _chip_id(chip) -> str:
    from aicalc.api.catalog import load_node_or_chip

    return load_node_or_chip(chip)[0].id


def _num(x: float) -> str:
    return f"{float(x):.4g}"


def _format_flags(engine, name, version, spec, dtype: str, kv_dtype: str) -> list[str]:
    """Weight and KV-cache formats: 16-bit weights as ``--dtype``; fp8 quantized when loaded (both engines'
    ``--quantization fp8``); any other format must come from the checkpoint itself."""
    from aicalc.api.catalog import weight_format
    from aicalc.errors import AicalcError

    flags = []
    release = weight_format(spec, "release").label  # the official checkpoint's format (bf16 where none is recorded)
    if dtype in (None, "release") or (getattr(spec, "release", None) is not None and dtype == release
                                      and release not in _DTYPE):
        dtype = release if release in _DTYPE else "checkpoint"  # a quantized release: read from its config
    if dtype in _DTYPE:
        flags += ["--dtype", _DTYPE[dtype]]
    elif dtype == "fp8":
        flags += ["--quantization", "fp8"]
    elif dtype == "checkpoint" or getattr(spec, "checkpoint", None) is not None:
        pass  # the engine reads the format from the checkpoint's quantization_config
    else:
        raise AicalcError(f"{name} {version} quantizes 16-bit weights to fp8 when it loads them, not to {dtype}: "
                          f"{dtype} weights come from a pre-quantized checkpoint; give its folder or Hub id as "
                          "MODEL with --dtype checkpoint")
    kv = kv_dtype if kv_dtype != "auto" else None
    if kv is not None:
        if kv not in _KV[engine]:
            raise AicalcError(f"{name} {version} has no {kv} KV cache (--kv-cache-dtype: "
                              f"{', '.join(sorted(set(_KV[engine])))} here)")
        flags += ["--kv-cache-dtype", _KV[engine][kv]]
    return flags


def _layout(engine, name, version, d: dict, tp: int) -> list[str]:
    """One replica's parallel layout: ``tp`` chips; ``attention_dp`` groups of ``tp / attention_dp`` chips run
    attention, the experts are split over ``ep`` ranks; ``pp`` pipeline stages."""
    from aicalc.errors import AicalcError

    pp = int(d.get("pp") or 1)
    ep = int(d.get("ep") or 1)
    adp = int(d.get("attention_dp") or 1)
    if adp < 1 or tp % adp:
        raise AicalcError(f"attention data parallelism {adp} does not divide the replica's {tp} chips")
    if engine == "vllm":
        # vLLM: attention DP is --data-parallel-size D over TP tp/D; expert parallelism, when on, spans TP × DP
        if ep > 1 and ep != tp:
            raise AicalcError(f"{name} {version} runs experts over all of a replica's TP × DP ranks ({tp}) with "
                              f"--enable-expert-parallel, not over {ep}")
        flags = ["--tensor-parallel-size", str(tp // adp), "--pipeline-parallel-size", str(pp)]
        if adp > 1:
            flags += ["--data-parallel-size", str(adp)]
        if ep > 1:
            flags += ["--enable-expert-parallel"]
        return flags
    flags = ["--tp-size", str(tp), "--pp-size", str(pp)]  # SGLang: attention DP groups inside the TP group
    if adp > 1:
        flags += ["--attn-dp-size", str(adp)]
    if ep > 1:
        flags += ["--ep-size", str(ep)]
    return flags


def _seqs(engine, seqs: int, d: dict) -> list[str]:
    """The replica's sequence cap: vLLM's ``max_num_seqs`` applies per data-parallel rank (its SchedulerConfig
    says so), so attention-DP ranks share it; SGLang's ``max_running_requests`` is the server's, divided over its
    attention-DP ranks by SGLang itself."""
    if engine == "vllm":
        return ["--max-num-seqs", str(-(-seqs // int(d.get("attention_dp") or 1)))]
    return ["--max-running-requests", str(seqs)]


def _disagg(engine, pool: str) -> list[str]:
    """Prefill/decode roles: vLLM's NIXL KV connector (both roles ``kv_both``), SGLang's
    ``--disaggregation-mode`` over NIXL."""
    if engine == "vllm":
        return ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"},
                                                   separators=(",", ":"))]
    return ["--disaggregation-mode", pool, "--disaggregation-transfer-backend", "nixl"]


def _spec_flags(engine, name, version, draft, k: int) -> list[str]:
    """Speculative decoding as ``--draft``: ``mtp`` (the checkpoint's multi-token-prediction head) or a draft
    model (preset, path or Hub id); ``eagle`` needs a head checkpoint the estimate does not name."""
    from aicalc.errors import AicalcError

    if not draft:
        return []
    if str(draft).lower() == "eagle":
        raise AicalcError(f"{name} {version}'s EAGLE decoding needs the EAGLE head's checkpoint, which --draft eagle "
                          "does not name: give the head's folder or Hub id as --draft")
    if str(draft).lower() == "mtp":
        if engine == "vllm":
            return ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": k},
                                                       separators=(",", ":"))]
        return ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", str(k), "--speculative-eagle-topk",
                "1", "--speculative-num-draft-tokens", str(k + 1)]
    from aicalc.api.catalog import load_decoder

    spec = load_decoder(draft, "serve --emit")
    ref = spec.hf_repo or str(draft)
    if engine == "vllm":
        return ["--speculative-config", json.dumps({"method": "draft_model", "model": ref,
                                                    "num_speculative_tokens": k}, separators=(",", ":"))]
    return ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", ref,
            "--speculative-num-steps", str(k), "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens",
            str(k + 1)]
