"""Performance validation: aicalc's estimates against the measured DE/PF/SV/TT rows of
``shared/reference/validation-cases.md``, all through the public API with the same default efficiency model.

``python validation/perf_cases.py`` writes the cases as data (``tests/data/validation/perf_cases.json``: each
case's public-API call, the metric it reads and the published measurement) and the table
``docs/validation-perf.md``; ``--check`` verifies both are current. ``tests/test_validation_perf.py`` reads the
data, evaluates every case through ``aicalc`` itself and checks the error goals.

Error of one case = |estimate / measured − 1|; the geometric mean is exp(mean(log(1 + error))) − 1.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "validation-perf.md"
TRAIN_DOC = ROOT / "docs" / "validation-train.md"
DATA = ROOT / "tests" / "data" / "validation" / "perf_cases.json"

A100, H100, H200 = "a100-80gb", "h100-sxm", "h200"
L7, L13, L70 = "llama-2-7b", "llama-2-13b", "llama-2-70b"
# TensorRT-LLM v0.5/v0.6 decode attention (masked MHA) reads K/V once per query head; the GQA-sharing XQA kernel
# came later (v0.7 release notes). gpt-fast expands K/V with repeat_interleave. Both: kv_shared=False.
PER_HEAD = {"kv_shared": False}
SELENE_IB = 25e9  # bytes/s per GPU per direction: 8× HDR 200 Gb/s per DGX A100 (Selene)


CASES_DIR = ROOT / "validation" / "cases"
# how a published figure is read off the estimate's column
TRANSFORMS = {
    "decode_tokens_per_s_per_sequence": ("tpot_s", "inverse"),
    "output_tokens_per_s": ("output_tokens_per_s", None),
    "output_tokens_per_s_per_chip": ("output_tokens_per_s", "per_tp"),
    "prefill_tokens_per_s": ("ttft_s", "prompt_rate"),
    "ttft_s": ("ttft_s", None),
    # one pool of a prefill/decode-disaggregated deployment (the entry's ``pool``), per chip: a decode pool's
    # batch emits a token per TPOT; a prefill pool's batch of prompts is done per TTFT
    "decode_pool_output_tokens_per_s_per_chip": ("tpot_s", "batch_rate_per_tp"),
    "input_tokens_per_s_per_chip": ("ttft_s", "prompt_rate_per_tp"),
}


def case(id_, kind, what, measured, unit, api, args, metric, per_gpu=False, scored=True, why_not="", regime=None,
         source="shared/reference/validation-cases.md", calibration=True):
    return {"id": id_, "kind": kind, "regime": regime or kind, "what": what, "measured": measured, "unit": unit,
            "api": api, "args": args, "metric": metric, "transform": "per_tp" if per_gpu else None,
            "per_gpu": per_gpu, "scored": scored, "why_not": why_not, "source": source, "calibration": calibration}


# published figures whose setup is too open to score (reported, never used): request mixes set by a dataset
# and a scheduler, an unnamed engine, an API latency
UNSCORED = {
    **{f"AM-{i:02d}": "MLPerf Offline/Server: variable-length OpenOrca requests, scheduler-chosen batch (as SV-01…04)"
       for i in range(7, 11)},
    **{f"TP-{i:02d}": "ShareGPT request mix (variable lengths); the batch is the server's slot count, not its occupancy"
       for i in range(1, 7)},
    "DB-16": "engine not named (IBM's PyTorch TP stack); prompt length not given",
    "PR-14": "prompt length not stated; includes API and network latency",
    "SD-07": "Cerebras' Oct 2024 stack, which implements speculative decoding (draft and acceptance not published)",
}
UNSCORED_METRICS: dict[str, dict[str, str]] = {}


# trtllm-bench throughput as TensorRT-LLM's 1.x performance overview ran it ("Number of Requests" per ISL/OSL,
# docs/source/developer-guide/perf-overview.md @ 03e27c7d): every request queued at once, identical lengths. With
# fewer requests than a steady state needs the run ends in a part-full wave, so these rows are priced by the
# traffic simulation of that many requests, not by the steady state (1000/1000 is not in the table: 3000, as
# 1024/1024). A rate of 10⁹ requests/s puts them all within microseconds of t = 0.
TRTLLM_OVERVIEW = "developer-guide/perf-overview.md"
TRTLLM_BENCH_REQUESTS = {(1024, 1024): 3000, (8192, 1024): 1500, (1024, 8192): 1500, (32768, 1024): 1000,
                         (1024, 32768): 1000}
ALL_AT_ONCE = 1e9


def engine_max_seqs(engine: str | None, chip: str) -> int | None:
    """The most sequences an engine's scheduler runs at once by default on ``chip`` (its profile's
    ``max_num_seqs`` and ``max_num_seqs_by_chip``: aicalc.catalog.profiles.max_running, no KV pool given)."""
    from aicalc.api.catalog import load_node_or_chip
    from aicalc.catalog import profiles

    return profiles.max_running(profiles.load("engine", engine or profiles.DEFAULT_ENGINE).options,
                                load_node_or_chip(chip)[0])


def default_share(args: dict):
    """An engine's own memory share for a row's deployment where it derives one (SGLang's default
    --mem-fraction-static and --chunked-prefill-size: aicalc.catalog.profiles.static_reserve), else None."""
    from aicalc.api.catalog import load_model, load_node_or_chip
    from aicalc.catalog import profiles

    return profiles.static_reserve(profiles.load("engine", args.get("engine") or profiles.DEFAULT_ENGINE).options,
                                   load_node_or_chip(args["chip"])[0], load_model(args["model"]).arch,
                                   int(args.get("tp", 1)), 1, int(args.get("attention_dp", 1)))


def _entries(calibration: str, names: tuple[str, ...]) -> tuple[list[dict], set[str]]:
    """The rows of the case files ``names`` (each tagged with its file as ``collection``) and the ids of the
    calibration subset: those listed in ``calibration`` and those whose ``split`` says so (the MoE-era files)."""
    import yaml

    calib = set()
    cpath = CASES_DIR / calibration
    if cpath.is_file():
        calib = set(yaml.safe_load(cpath.read_text(encoding="utf-8")) or [])
    entries = []
    for name in names:
        path = CASES_DIR / name
        if path.is_file():
            entries += [{**e, "collection": path.stem} for e in yaml.safe_load(path.read_text(encoding="utf-8")) or []]
    return entries, calib | {e["id"] for e in entries if e.get("split") == "calibration"}


def published_cases() -> list[dict]:
    """The sourced measurements of validation/cases/inference.yaml, moe-serving.yaml and trtllm-1x.yaml, as cases of
    the public API. Whether a case is in the calibration subset is said by validation/cases/calibration.yaml (the
    rest are held out)."""
    entries, calib = _entries("calibration-inference.yaml", ("inference.yaml", "moe-serving.yaml", "trtllm-1x.yaml"))
    out = []
    for e in entries:
        if e.get("pool") == "decode" and e["metric"] == "output_tokens_per_s_per_chip":
            e = {**e, "metric": "decode_pool_output_tokens_per_s_per_chip"}
        if e.get("pool") == "decode" and e.get("batch") is not None and e.get("attention_dp"):
            e = {**e, "batch": int(e["batch"]) * int(e["attention_dp"])}  # per GPU (one per DP rank) → the pool's
        if e.get("pool") == "prefill" and e.get("batch_per_chip") is not None:
            e = {**e, "batch": int(e["batch_per_chip"]) * int(e.get("chips") or 1)}
        if e["metric"] not in TRANSFORMS:
            e = {**e, "metric": "output_tokens_per_s",
                 "unscored": e.get("unscored") or f"{e['metric']}: a prefill-only pool, not priced by this harness"}
        if e.get("attention_dp"):  # the source's tp is the attention TP; aicalc's tp is the replica's chips
            e = {**e, "tp": int(e.get("tp") or 1) * int(e["attention_dp"])}
        if str(e.get("model", "")).startswith("gpt-oss") and e.get("dtype") in ("fp4", "fp8"):
            e = {k: v for k, v in e.items() if k != "dtype"}  # the runs load OpenAI's release: MXFP4 experts
        if e.get("prompt") == 0:
            e = {**e, "prompt": 1}  # generation from an empty context: one token in
        if e.get("chips") is None and e.get("regime") == "moe-serving" and not e.get("unscored"):
            e = {**e, "unscored": "deployment size not published"}
        metric, transform = TRANSFORMS[e["metric"]]
        if e["metric"] in UNSCORED_METRICS.get(e["id"][:2], ()) or e["id"] in UNSCORED:
            e = {**e, "unscored": UNSCORED.get(e["id"]) or UNSCORED_METRICS[e["id"][:2]][e["metric"]]}
        args = {k: e[k] for k in ("model", "chip", "dtype", "kv_dtype", "tp", "batch", "prompt", "gen", "engine", "ep",
                                  "attention_dp", "redundant_experts")
                if e.get(k) is not None and e.get(k) != "other"}
        args.setdefault("tp", 1)
        assumed = [f"{k} {v}" for k, v in (("batch", 1), ("prompt", 128), ("gen", 128)) if k not in args]
        for k, v in (("batch", 1), ("prompt", 128), ("gen", 128)):
            args.setdefault(k, v)
        if e["metric"] in ("ttft_s", "prefill_tokens_per_s"):
            args["gen"] = max(int(args["gen"]), 1)  # a prefill measurement: one token out
        if e["metric"] == "input_tokens_per_s_per_chip":  # a prefill pool: one token out, handed to the decode pool
            args["gen"] = 1
            assumed = [a for a in assumed if not a.startswith("gen")]
        if e.get("chips") and e["chip"] not in ("groq-lpu", "cerebras-wse3") and e.get("tp", 1) < e["chips"]:
            assumed.append(f"{e['chips'] // args['tp']} replicas")
        api = "roofline"
        if e["regime"] in ("serving-load", "amd", "moe-serving", "dense-fp8", "dense-fp4") and "batch" not in e \
                and not e.get("pool"):
            # throughput at full load: the scheduler keeps as many requests running as the KV cache holds
            api = "serve"
            args = {k: v for k, v in args.items() if k != "batch"} | {"concurrency": "max", "chips": args["tp"]}
            # the server's own memory flags where the row names them (what it holds at full load): SGLang's
            # --mem-fraction-static or vLLM's --gpu-memory-utilization, each a share of the whole memory (aicalc's
            # utilization), and SGLang's --swa-full-tokens-ratio
            args |= {k: e[key] for key, k in (("mem_fraction_static", "utilization"),
                                              ("gpu_memory_utilization", "utilization"),
                                              ("swa_full_tokens_ratio", "swa_full_tokens_ratio"))
                     if e.get(key) is not None}
            assumed = [a for a in assumed if not a.startswith("batch")] + ["as many requests as fit"]
            if args.get("dtype") in ("fp8", "fp4") and "kv_dtype" not in e:
                args["kv_dtype"] = "fp8"  # ModelOpt FP8/NVFP4 checkpoints quantize the KV cache to FP8 too
                assumed.append("fp8 KV cache")
            # serve(concurrency="max") runs at most the engine's default cap per scheduler; say so where it binds
            cap = engine_max_seqs(args.get("engine"), args["chip"])
            if args.get("engine"):
                from aicalc.api.serving import scheduler_limits

                fit, bound, _ = scheduler_limits(args["model"], args["chip"], tp=args["tp"], chips=args["chips"],
                                                 prompt=args["prompt"], gen=args["gen"],
                                                 dtype=args.get("dtype", "release"),
                                                 kv_dtype=args.get("kv_dtype", "bf16"), engine=args["engine"],
                                                 ep=args.get("ep", 1), attention_dp=args.get("attention_dp", 1),
                                                 utilization=args.get("utilization"),
                                                 swa_full_tokens_ratio=args.get("swa_full_tokens_ratio"))
                if bound and fit > bound:
                    per = " per attention-DP rank" if args.get("attention_dp", 1) > 1 else " per replica"
                    assumed = [f"{bound} running sequences{per} (the engine's default cap on this chip)"
                               if x == "as many requests as fit" else x for x in assumed]
                share = default_share(args)
                if share and args.get("utilization") is None:  # SGLang's own --mem-fraction-static, not the row's
                    assumed.append(f"--mem-fraction-static {share.fraction:g} and chunked prefill {share.chunk} "
                                   "(SGLang's defaults on this chip and layout)")
            if args.get("engine") == "trtllm" and TRTLLM_OVERVIEW in e["source"] and cap:
                n = TRTLLM_BENCH_REQUESTS.get((args["prompt"], args["gen"]))
                if n is None:
                    n = 3000
                    assumed.append("3000 requests (as 1024/1024)")
                api = "simulate"
                ideal_args = args
                args = {k: v for k, v in args.items() if k != "concurrency"} | {
                    "rate": ALL_AT_ONCE, "num_requests": n, "max_seqs": cap * int(args.get("attention_dp", 1))}
                assumed = [f"{n} requests queued at once (trtllm-bench), at most {cap} running per attention group"
                           if "running sequences" in x or x == "as many requests as fit" else x for x in assumed]
        unit = {"ttft_s": "s", "prefill_tokens_per_s": "prompt tok/s",
                "input_tokens_per_s_per_chip": "prompt tok/s/chip"}.get(e["metric"], "tok/s")
        prefill = e["metric"] in ("ttft_s", "prefill_tokens_per_s", "input_tokens_per_s_per_chip")
        extra = {"ideal_args": ideal_args} if api == "simulate" else {}
        out.append({**extra, "id": e["id"], "kind": "prefill" if prefill else "decode",
                    "regime": e["regime"], "what": e["what"], "measured": float(e["measured"]), "unit": unit,
                    "api": api, "args": args, "metric": metric, "transform": transform, "per_gpu": False,
                    "scored": not e.get("unscored"), "why_not": e.get("unscored", ""), "source": e["source"],
                    "calibration": e["id"] in calib, "assumed": ", ".join(assumed), "collection": e["collection"],
                    "scale": float(e["chips"] // args["tp"]) if e["metric"] == "output_tokens_per_s" and e.get("chips")
                    and e["chip"] not in ("groq-lpu", "cerebras-wse3") else 1.0})
    return out


FRAMEWORK = {"fsdp": "fsdp", "torchtitan": "torchtitan", "maxtext": "fsdp", "megatron": "megatron", "nemo": "megatron",
             "megatron-26.04": "megatron-26.04",
             "deepspeed": "deepspeed", "other": "megatron"}
RECOMPUTE = {"fsdp": "none", "torchtitan": "none", "maxtext": "full", "megatron": "selective", "nemo": "selective",
             "megatron-26.04": "selective",
             "deepspeed": "full", "other": "selective"}
TRAIN_METRICS = {"mfu": ("mfu", 1.0, "MFU"), "tokens_per_s_per_chip": ("tokens_per_s_per_chip", 1.0, "tok/s/chip"),
                 "model_tflops_per_chip": ("model_flop_per_s_per_chip", 1e-12, "TFLOP/s/chip"),
                 "step_s": ("step_s", 1.0, "s/iteration"), "gpu_hours_total": ("chip_hours", 1.0, "chip-hours")}


def model_config(e: dict):
    """A published run's model: its preset, or its architecture as a Hugging Face config."""
    if e.get("model"):
        return e["model"]
    a = e["arch"]
    if a.get("gated", True):
        cfg = {"model_type": "llama", "hidden_size": a["hidden"], "num_hidden_layers": a["layers"],
               "num_attention_heads": a["heads"], "num_key_value_heads": a.get("kv_heads", a["heads"]),
               "intermediate_size": a["ffn"], "vocab_size": a["vocab"], "max_position_embeddings": e.get("seq", 2048)}
        if a.get("head_dim"):
            cfg["head_dim"] = a["head_dim"]
        return cfg
    return {"model_type": "gpt2", "n_embd": a["hidden"], "n_layer": a["layers"], "n_head": a["heads"],
            "n_inner": a["ffn"], "vocab_size": a["vocab"], "n_positions": e.get("seq", 2048)}


def published_training_cases() -> list[dict]:
    """validation/cases/training.yaml as cases of ``aicalc.train_time``; what a source does not state takes the
    framework's default (written in the case's ``assumed``)."""
    entries, calib = _entries("calibration-training.yaml", ("training.yaml", "moe-training.yaml"))
    out = []
    for e in entries:
        fw = e.get("framework", "other")
        assumed = []
        tp, pp, cp = e.get("tp") or 1, e.get("pp") or 1, e.get("cp") or 1
        chips = e.get("chips")
        dp = e.get("dp") or (chips // (tp * pp * cp) if chips else None)
        why = ""
        if dp is None:
            why = "no chip count or layout published"
            dp = 1
        elif chips and chips > 1 and not any(e.get(k) is not None for k in ("tp", "pp", "dp")):
            why = "no layout published in text (TP, PP and DP unknown)"
        why = why or e.get("unscored", "")
        if e["group"] == "run-level":  # reported beside the step model, never scored against it
            why = why or ("run-level GPU-hours include restarts, evaluation and other stages no step model sees "
                          "(their goodput is not published)")
        mb = e.get("micro_batch") or 1
        gb = e.get("global_batch") or dp * mb * (4 * pp if pp > 1 else 1)
        if not e.get("global_batch"):
            assumed.append(f"global batch {gb}")
        rc = e.get("recompute") or RECOMPUTE[fw]
        if not e.get("recompute"):
            assumed.append(f"recompute {rc}")
        zero = e.get("zero")
        if zero is None:
            zero = 3 if FRAMEWORK[fw] in ("fsdp", "torchtitan", "deepspeed") else 1
            assumed.append(f"ZeRO {zero}")
        what = e["what"]
        attention = "materialized" if any(w in what for w in ("BLOOM", "OPT-175B")) else "flash"
        args = dict(model=model_config(e), chip=e["chip"], tokens=float(e.get("tokens") or 1e12),
                    seq=e.get("seq", 2048), global_batch=gb, micro_batch=mb, tp=tp, pp=pp, dp=dp, cp=cp,
                    ep=e.get("ep") or 1, recompute=rc, attention=attention, zero=zero,
                    precision=e.get("precision") if e.get("precision") in ("fp8", "fp4", "int8") else "bf16", framework=FRAMEWORK[fw],
                    interleave=e.get("vp") or 1,
                    # the published MFU / TFLOP/s of these sources (2021-2024 papers and READMEs) count attention
                    # over all seq keys; a row whose source counts causal attention says so
                    attention_flops=e.get("attention_flops", "full"))
        # layouts and FSDP settings as the run's framework ran them
        for k in ("etp", "first_stage_layers", "last_stage_layers", "fp8_all_gather", "fp8_attention"):
            if e.get(k) is not None:
                args[k] = e[k]
        metric, scale, unit = TRAIN_METRICS[e["metric"]]
        out.append({"id": e["id"], "kind": "training", "regime": "training-" + e["group"], "what": what,
                    "measured": float(e["measured"]) / scale if scale != 1.0 else float(e["measured"]),
                    "unit": unit, "api": "train_time", "args": args, "metric": metric, "transform": None,
                    "per_gpu": False, "scored": not why, "why_not": why, "source": e["source"],
                    "calibration": e["id"] in calib, "assumed": ", ".join(assumed), "collection": e["collection"]})
    return out


def _de(id_, model, dtype, tp, tok_s, group=None, scored=True, why=""):
    g = {"group_size": group} if group else {}
    return case(id_, "decode", regime="datacenter-batch1", what= f"gpt-fast {model} {dtype}{' G=32' if group else ''} TP{tp}, batch 1", measured=tok_s, unit="tok/s", api=
                "roofline", args=dict(model=model, chip=A100, dtype=dtype, tp=tp, batch=1, prompt=5, gen=200, **g,
                                      **PER_HEAD), metric="output_tokens_per_s", scored=scored, why_not=why)


def _pf(id_, model, chip, tp, prompt, ms):
    fp8 = chip == H100
    return case(id_, "prefill", f"TensorRT-LLM {model} {'FP8' if fp8 else 'FP16'} on {chip} TP{tp}, prompt {prompt}",
                ms / 1e3, "s", "roofline", dict(model=model, chip=chip, dtype="fp8" if fp8 else "fp16",
                                                kv_dtype="fp8" if fp8 else "fp16", tp=tp, batch=1, prompt=prompt,
                                                gen=1, **PER_HEAD), "ttft_s")


# The A100 "Peak Throughput" header says "out tok/s", not marked per GPU (§6). Read as a whole system, the TP 4
# 70B rows (SV-17…SV-19) would be 4× below what four A100s stream at their datasheet bandwidth; read per GPU
# they agree with the H100 rows' convention. All TensorRT-LLM rows are therefore compared per GPU.
def _sv(id_, model, chip, tp, batch, inp, out, tok_s):
    fp8 = chip in (H100, H200)
    return case(id_, "serving", regime="serving-load", what=f"TensorRT-LLM {model} {'FP8' if fp8 else 'FP16'} {chip} TP{tp} B{batch} {inp}/{out} "
                "per GPU", measured=tok_s, unit="tok/s", api="roofline", args=
                dict(model=model, chip=chip, dtype="fp8" if fp8 else "fp16", kv_dtype="fp8" if fp8 else "fp16",
                     tp=tp, batch=batch, prompt=inp, gen=out, **PER_HEAD), metric="output_tokens_per_s", per_gpu=True)


def gpt_config(layers: int, hidden: int, heads: int) -> dict:
    """A Megatron GPT (LayerNorm, GeLU 4H FFN, biases, learned positions, tied embeddings) as a GPT-2 config."""
    return {"model_type": "gpt2", "n_layer": layers, "n_embd": hidden, "n_head": heads, "vocab_size": 51200,
            "n_positions": 2048}


WEAK = [  # id, heads, hidden, layers, tp, pp, gpus, global batch, tok/s/GPU
    ("TT-02", 24, 2304, 24, 1, 1, 32, 512, 9290), ("TT-03", 32, 3072, 30, 2, 1, 64, 512, 4430),
    ("TT-04", 32, 4096, 36, 4, 1, 128, 512, 2216), ("TT-05", 48, 6144, 40, 8, 1, 256, 1024, 872),
    ("TT-06", 64, 8192, 48, 8, 2, 512, 1536, 425), ("TT-07", 80, 10240, 60, 8, 4, 1024, 1792, 223),
    ("TT-08", 96, 12288, 80, 8, 8, 1536, 2304, 124), ("TT-09", 128, 16384, 96, 8, 16, 1920, 2160, 61.3),
    ("TT-10", 128, 20480, 105, 8, 35, 2520, 2520, 37.9), ("TT-11", 160, 25600, 128, 8, 64, 3072, 3072, 20.0),
]
SELECTIVE = [  # id, heads, hidden, layers, tp, pp, dp, global batch, micro, interleave, iteration s
    ("TT-12", 64, 6144, 48, 8, 1, 1, 4, 4, 1, 1.10), ("TT-13", 96, 12288, 96, 8, 8, 1, 64, 1, 3, 13.75),
    ("TT-14", 128, 20480, 105, 8, 35, 1, 280, 1, 3, 37.83), ("TT-15", 160, 25600, 128, 8, 64, 1, 512, 1, 1, 71.49),
]


def _tt(id_, what, measured, unit, metric, a, h, L, tp, pp, dp, gb, mb, recompute, sp, v):
    # Megatron-LM on Selene: materialized (non-flash) attention, 25 GB/s per GPU across nodes: facts of the runs
    return case(id_, "training", what, measured, unit, "train_time",
                dict(model=gpt_config(L, h, a), chip=A100, tokens=1e9, seq=2048, global_batch=gb, micro_batch=mb,
                     tp=tp, pp=pp, dp=dp, recompute=recompute, attention="materialized", sequence_parallel=sp,
                     interleave=v, dp_bandwidth=SELENE_IB, attention_flops="full"), metric)


def cases() -> list[dict]:
    older = "older gpt-fast @ d2c5d822 before the custom collectives; superseded by DE-06…DE-11 (same configs)"
    out = [
        _de("DE-01", L7, "bf16", 1, 104.9), _de("DE-02", L7, "int8", 1, 155.58),
        _de("DE-03", L7, "int4", 1, 196.80, group=32), _de("DE-04", L70, "int8", 1, 19.13),
        _de("DE-05", L70, "int4", 1, 25.25, group=32), _de("DE-06", L7, "bf16", 2, 168.84),
        _de("DE-07", L7, "bf16", 4, 254.02), _de("DE-08", L7, "bf16", 8, 328.43),
        _de("DE-09", L70, "bf16", 2, 21.32), _de("DE-10", L70, "bf16", 4, 38.01),
        _de("DE-11", L70, "bf16", 8, 62.50), _de("DE-12", L70, "int8", 8, 80.44),
        _de("DE-13", L70, "int4", 8, 90.77, group=32),
        _de("DE-14a", L7, "bf16", 2, 136.27, scored=False, why=older),
        _de("DE-14b", L7, "bf16", 4, 168.78, scored=False, why=older),
        _de("DE-14c", L7, "bf16", 8, 179.27, scored=False, why=older),
        _de("DE-15a", L70, "bf16", 2, 20.53, scored=False, why=older),
        _de("DE-15b", L70, "bf16", 4, 34.15, scored=False, why=older),
        _de("DE-15c", L70, "bf16", 8, 47.25, scored=False, why=older),
        _pf("PF-01", L7, A100, 1, 128, 16), _pf("PF-02", L7, A100, 1, 2048, 133),
        _pf("PF-03", L7, H100, 1, 128, 7), _pf("PF-04", L7, H100, 1, 2048, 36),
        _pf("PF-05", L70, A100, 4, 128, 47), _pf("PF-06", L70, A100, 4, 2048, 377),
        _pf("PF-07", L70, H100, 4, 128, 26), _pf("PF-08", L70, H100, 4, 2048, 109),
        _pf("PF-09", L7, A100, 1, 128, 16.1), _pf("PF-10", L7, A100, 1, 2048, 120.5),
        _sv("SV-05", L7, H100, 1, 768, 128, 128, 19694), _sv("SV-06", L7, H100, 1, 112, 128, 2048, 6818),
        _sv("SV-07", L7, H100, 1, 80, 2048, 128, 2244), _sv("SV-08", L7, H100, 1, 48, 2048, 2048, 2740),
        _sv("SV-09", L70, H100, 2, 1024, 128, 128, 2657), _sv("SV-10", L70, H100, 4, 480, 128, 2048, 1486),
        _sv("SV-11", L70, H100, 2, 96, 2048, 128, 306), _sv("SV-12", L70, H100, 2, 64, 2048, 2048, 547),
        _sv("SV-13", L7, A100, 1, 384, 128, 128, 5586), _sv("SV-14", L7, A100, 1, 60, 128, 2048, 1928),
        _sv("SV-15", L7, A100, 1, 52, 2048, 128, 591), _sv("SV-16", L7, A100, 2, 64, 2048, 2048, 782),
        _sv("SV-17", L70, A100, 4, 1280, 128, 128, 670), _sv("SV-18", L70, A100, 4, 240, 128, 2048, 525),
        _sv("SV-19", L70, A100, 4, 120, 2048, 128, 79),
        _sv("SV-20", L13, H200, 1, 1024, 128, 128, 11819), _sv("SV-21", L13, H200, 1, 128, 128, 2048, 4750),
        _sv("SV-22", L13, H200, 1, 64, 2048, 128, 1349), _sv("SV-23", L70, H200, 1, 512, 128, 128, 3014),
        _sv("SV-24", L70, H200, 2, 512, 128, 2048, 1654), _sv("SV-25", L70, H200, 1, 64, 2048, 128, 341),
        _sv("SV-26", L70, H200, 1, 32, 2048, 128, 303),
    ]
    for id_, a, h, L, tp, pp, n, gb, tok in WEAK:
        out.append(_tt(id_, f"Megatron-LM weak scaling h{h} L{L} TP{tp} PP{pp} {n} A100, full recompute", tok,
                       "tok/s/GPU", "tokens_per_s_per_chip", a, h, L, tp, pp, n // (tp * pp), gb, 1, "full", False, 1))
    for id_, a, h, L, tp, pp, dp, gb, mb, v, it in SELECTIVE:
        out.append(_tt(id_, f"Korthikanti h{h} L{L} TP{tp} PP{pp}, selective recompute + SP", it, "s/iteration",
                       "step_s", a, h, L, tp, pp, dp, gb, mb, "selective", True, v))
    out.append(_tt("TT-16", "Korthikanti 530B TP8 PP35 DP8 (2240 GPUs), selective + SP; MFU", 0.542, "MFU", "mfu",
                   128, 20480, 105, 8, 35, 8, 2240, 1, "selective", True, 3))
    return out + published_cases() + published_training_cases()


LOWER_IS_BETTER = ("step_s", "chip_hours")  # training metrics that scale with time (the rest with throughput)


def estimate(c: dict) -> tuple[float, float]:
    """(estimate, ideal bound) of one case through the public API."""
    import aicalc

    r = getattr(aicalc, c["api"])(**c["args"])
    metric = c["metric"]
    ideal = {"output_tokens_per_s": "ideal_output_tokens_per_s", "ttft_s": "ideal_ttft_s", "tpot_s": "ideal_tpot_s",
             "mfu": "ideal_mfu"}.get(metric)
    if "ideal_args" in c:  # a simulated run: the bound is the steady state's bare roofline
        return read(c, float(r[metric][0])), read(c, float(aicalc.serve(**c["ideal_args"])[ideal][0]))
    if ideal is None:  # training throughput, step time and chip-hours: from the ideal total time of the same run
        est = float(r[metric][0])
        t_ideal, t_est = float(r["ideal_total_time_s"][0]), float(r["total_time_s"][0])
        return est, est * (t_ideal / t_est if metric in LOWER_IS_BETTER else t_est / t_ideal)
    return read(c, float(r[metric][0])), read(c, float(r[ideal][0]))


def read(c: dict, x: float) -> float:
    """The published figure's quantity from the estimate's column."""
    t, a = c["transform"], c["args"]
    if t == "inverse":
        x = 1.0 / x
    elif t == "per_tp":
        x = x / a["tp"]
    elif t == "prompt_rate":
        x = a["batch"] * a["prompt"] / x
    elif t == "prompt_rate_per_tp":
        x = a["batch"] * a["prompt"] / x / a["tp"]
    elif t == "batch_rate_per_tp":
        x = a["batch"] / x / a["tp"]
    return x * c.get("scale", 1.0)


def error(est: float, measured: float) -> float:
    return abs(est / measured - 1.0)


def geomean_error(errors: list[float]) -> float:
    return math.exp(sum(math.log1p(e) for e in errors) / len(errors)) - 1.0


def evaluate(cs: list[dict]) -> list[tuple[dict, float, float, float]]:
    """(case, estimate, ideal, error) of every case; a case aicalc refuses (a layout or profile it does not have
    yet) is reported, unscored, with the refusal as its reason."""
    from aicalc.errors import AicalcError

    out = []
    for c in cs:
        try:
            est, ideal = estimate(c)
        except AicalcError as e:
            c = {**c, "scored": False, "why_not": c.get("why_not") or f"refused by aicalc: {e}"}
            out.append((c, math.nan, math.nan, math.nan))
            continue
        out.append((c, est, ideal, error(est, c["measured"])))
    return out


def _fmt(v: float, unit: str) -> str:
    if unit == "s":
        return f"{v * 1e3:,.1f} ms" if v < 10 else f"{v:,.2f} s"
    return f"{v:,.3f}" if unit == "MFU" else f"{v:,.1f}"


REGIMES = ("datacenter-batch1", "prefill", "serving-load", "sram-dataflow", "apple", "consumer-gpu", "amd", "tpu",
           "training", "training-single-node", "training-fsdp-multinode", "training-megatron-tp-pp", "training-tpu",
           "training-moe", "training-run-level")


def _stats(errs: list[float]) -> str:
    return f"{len(errs)} | {geomean_error(errs):.1%} | {max(errs):.1%}" if errs else "0 | — | —"


def table(results, title: str = "Performance validation: estimates vs published measurements") -> str:
    scored = [(c, e) for c, _, _, e in results if c["scored"]]
    held = [e for c, e in scored if not c["calibration"]]
    lines = [
        f"# {title}",
        "",
        "Generated by `python validation/perf_cases.py`; do not edit by hand (a test checks it is current).",
        "Every row goes through the public API (`aicalc.roofline`, `aicalc.train_time`) with the same general",
        "defaults: the chip class's profile (`presets/classes/`) and the engine's (`presets/engines/`), each factor",
        "with its source. The ideal column is the bare roofline (no efficiency factors, no overheads).",
        "Error = |estimate / measured − 1|. Sources: `shared/reference/validation-cases.md` (DE/PF/SV/TT rows) and",
        "`validation/cases/inference.yaml` / `training.yaml` and the MoE-era rows of `moe-serving.yaml` /",
        "`moe-training.yaml`, with the rest of TensorRT-LLM 1.x's performance overview in `trtllm-1x.yaml` (TL",
        "rows, all held out; each entry names its page and quotes the figure); as data:",
        "`tests/data/validation/perf_cases.json`.",
        "",
        "**Calibration subset**: the DE/PF/SV/TT rows fitted the general model; `validation/cases/calibration-*.yaml`",
        "list the published rows each class, engine and framework profile was fitted on. Every other row is **held",
        "out**: it never informed a factor. A run's unpublished settings take the framework's defaults (`assumed`).",
        "The MoE-era rows name their side in their `split` field; the grouped-GEMM factors of",
        "`presets/classes/datacenter-gpu.yaml` (`grouped_gemm_efficiency`, `grouped_gemm_half_dim`,",
        "`grouped_gemm_tile`, with the smallest tile `grouped_gemm_tile_min` the kernels' own choice) were fitted on",
        "their calibration rows. TensorRT-LLM's max-throughput rows run as its scheduler does: at most its default",
        "max_batch_size (2048) requests, each admitted with prompt + output reserved (GUARANTEED_NO_EVICT); gpt-oss's",
        "MXFP4 experts run against MXFP8 activations on Blackwell. Attention runs in FP8 with an FP8 KV cache, else in",
        "16-bit, whatever the linears' format; FP4 tensor math reaches `fp4_flop_factor` (0.8) of FP8's share of its",
        "peak, fitted with the grouped-GEMM curve on the calibration rows and SL-02/SL-08 (the Blackwell FP4 dense",
        "rows were 1.2x optimistic without it); it slows the GEMMs only, not the fine-grained curve's work around the",
        "experts (its c scales with it). MoE is not yet at the dense rows' accuracy (the",
        "15 % goal in training): per-release software differences (Megatron-Bridge 25.09 to 26.06 runs the same",
        "layout up to 3x apart; rows of containers before 26.06 run `--framework megatron-26.04`, the later ones",
        "`megatron`, whose Blackwell MXFP8 recipes capture the whole iteration in one CUDA graph, docs/train-time.md,",
        "but where a model's recipe does not (Kimi K2's: no CUDA graph, the flex/HybridEP dispatcher));",
        "EPLB's redundant experts are priced as slots under uniform routing (the skew they",
        "relieve is not modelled); one pool of a disaggregated deployment (`pool`) is priced alone, a decode pool",
        "as batch / TPOT, a prefill pool as prompts / TTFT; a case aicalc refuses is listed unscored with the refusal.",
        "TensorRT-LLM 1.x's overview rows (MS, MD, TL) are priced as trtllm-bench ran them: the page's number of",
        "requests per ISL/OSL (3000, 1500 or 1000) queued at once and simulated (`aicalc.simulate`), not as a steady",
        "state: with fewer requests than a steady state needs the run ends in a part-full wave (the long-output rows",
        "came out 1.34x fast as a steady state); no factor was refitted for it (moe-serving held out 17.1 -> 13.6 %,",
        "calibration 15.2 -> 14.1 %; the dense FP8 rows of the page 8.1 -> 11.5 %).",
        "TPU serving (regime tpu): the tpu class reads the paged KV cache at attention_bandwidth 0.41 of the",
        "streaming bandwidth (tpu-inference's ragged paged attention, under vLLM TPU and SGLang-JAX alike), fitted on",
        "TI-03/04/07/08; held out, the v6e rows at other concurrencies and prompt lengths and Gemma-2-27B come within",
        "1-17 %, but Llama-3.1-8B at 16 requests runs 1.7-1.9x slower than aicalc. TPU7x's measured steps are",
        "barely shorter than v6e's at 4.5x the bandwidth (a new chip's first serving releases): its preset adds a",
        "fixed 7.5 ms per forward pass (step_overhead_s), fitted on TI-13/14 (Qwen3-8B); held out, its Llama-3.3-70B",
        "and Qwen3-30B-A3B rows come within 10-20 % (were 1.4-2.1x fast).",
        "TPU training (MaxText, regime training-tpu and the TPU MoE rows) is held out but for TP-02/06/11/12/14/15 and",
        "MO-27/29. TPU7x's GEMM ceilings (0.80 bf16, 0.72 fp8; v6e's 0.69 was fitted on TP-11/12) are fitted on",
        "TP-14/15 (Llama 3.1 70B at 64 chips); the rest of that table is held out: dense within 0.3-11 %, the MoE",
        "bf16 rows within 10 %, the MoE fp8 rows (DeepSeek-V3, Qwen3-235B) 10-32 % fast: they gain less from fp8",
        "than aicalc's GEMM speed-up (MaxText: 1.12-1.21x, dense 1.54x). TPU attention kernels lay a head's width",
        "along the 128 vector lanes and compute a narrower head as 128 wide (attention_lanes, tpu class): gpt-oss's",
        "64-wide heads at half the rate, DeepSeek-V3's 192-wide q·k at 3/4; gpt-oss-120B on TPU7x (MO-47/48, 14 %",
        "MFU) is still 1.56x below aicalc (was 1.71x). A v5p",
        "slice is priced as part of the 8,960-chip ICI domain, so the 2-slice DCN rows (TP-32/34/36/37) come out",
        "as fast as one slice while MaxText measured them 3-13 % slower. int8 (AQT) rows (TP-38/39, held out) are",
        "priced as MaxText's int8 config runs (the forward, its recompute and the activation gradients at the int8",
        "peak and the class's low_precision_flop_factor, nothing refitted; the weight gradients in bf16): GPT-3",
        "175B on v6e-256 gains 1.24x over its bf16 estimate where MaxText measured 1.21x over TP-27's bf16 run; the",
        "rows' remaining error is the bf16 row's (TP-27 17 % slow).",
        "",
        f"**Scored cases: {len(scored)}; geometric-mean error {geomean_error([e for _, e in scored]):.1%}; worst "
        f"{max(e for _, e in scored):.1%}. Held out: {len(held)}"
        + (f", geometric-mean error {geomean_error(held):.1%}, worst {max(held):.1%}**." if held else "**."),
        "",
        "| regime | calibration cases | geomean | worst | held-out cases | geomean | worst |",
        "|---|---|---|---|---|---|---|",
    ]
    regimes = [r for r in REGIMES if any(c["regime"] == r for c, _ in scored)]
    regimes += sorted({c["regime"] for c, _ in scored} - set(regimes))
    for reg in regimes:
        cal = [e for c, e in scored if c["regime"] == reg and c["calibration"]]
        out = [e for c, e in scored if c["regime"] == reg and not c["calibration"]]
        lines.append(f"| {reg} | {_stats(cal)} | {_stats(out)} |")
    for reg in regimes + [None]:
        rows = [(c, est, ideal, e) for c, est, ideal, e in results
                if (c["regime"] == reg if reg else not c["scored"] and c["regime"] not in regimes)]
        if reg is None:
            rows = [(c, est, ideal, e) for c, est, ideal, e in results if not c["scored"]]
            if not rows:
                continue
            lines += ["", "## Not scored", ""]
        else:
            rows = [r for r in rows if r[0]["scored"]]
            lines += ["", f"## {reg}", ""]
        lines += ["| id | case | unit | measured | estimate | ideal bound | error | set |", "|---|---|---|---|---|---|---|---|"]
        for c, est, ideal, e in rows:
            st = ("calibration" if c["calibration"] else "held out") if c["scored"] else f"not scored: {c['why_not']}"
            what = c["what"] + (f" (assumed: {c['assumed']})" if c.get("assumed") else "")
            lines.append(f"| {c['id']} | {what} | {c['unit']} | {_fmt(c['measured'], c['unit'])} | "
                         f"{_fmt(est, c['unit'])} | {_fmt(ideal, c['unit'])} | {e:.1%} | {st} |")
    lines += ["", "Not modelled: speculative decoding (DE-16) and the MLPerf server/offline rows (SV-01…SV-04), whose",
              "scheduler and request mix are not given as a static batch.", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    results = evaluate(cases())
    cs = [r[0] for r in results]  # refused cases carry the refusal as their reason
    data = json.dumps({"source": "shared/reference/validation-cases.md", "cases": cs}, indent=1) + "\n"
    doc = table([r for r in results if r[0]["kind"] != "training"],
                "Inference performance validation: estimates vs published measurements")
    from step_peak_doc import section as memory_section  # the whole-step peak part (issue 23)

    train_doc = table([r for r in results if r[0]["kind"] == "training"],
                      "Training performance validation: estimates vs published runs") + memory_section()
    if "--check" in argv:
        stale = [str(p.relative_to(ROOT)) for p, text in ((DATA, data), (DOC, doc), (TRAIN_DOC, train_doc))
                 if not p.is_file() or p.read_text(encoding="utf-8") != text]
        if stale:
            print(f"not current: {', '.join(stale)}; run python validation/perf_cases.py", file=sys.stderr)
            return 1
        print("perf cases, docs/validation-perf.md and docs/validation-train.md are current")
        return 0
    DATA.write_text(data, encoding="utf-8")
    DOC.write_text(doc, encoding="utf-8")
    TRAIN_DOC.write_text(train_doc, encoding="utf-8")
    print(f"wrote {DATA.relative_to(ROOT)}, {DOC.relative_to(ROOT)} and {TRAIN_DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
