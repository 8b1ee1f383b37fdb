"""The memory part of docs/validation-train.md: aicalc's whole-step peak against the traced records.

``validation/perf_cases.py`` appends :func:`section` to the generated page (and ``--check`` keeps it current). The
records come from ``validation/record_step_peak.py`` (``tests/data/validation/step_peak.json``); every estimate
goes through the public ``aicalc.train_memory`` with the record's settings.
"""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "validation" / "step_peak.json"
FSDP_DATA = DATA.with_name("step_peak_fsdp.json")


def estimate(rec: dict):
    import aicalc

    kw = dict(batch=rec["batch"], seq=rec["seq"], attention=rec["attention"], precision=rec["precision"],
              recompute=rec["recompute"], adamw=rec["adamw"])
    if rec["microbatches"] > 1:
        kw["microbatches"] = rec["microbatches"]
    if rec.get("lora"):
        kw.update(lora_rank=rec["lora"]["rank"], lora_targets=rec["lora"]["targets"])
    return aicalc.train_memory(rec["config"], **kw)


def fsdp_estimate(rec: dict):
    """``aicalc.train_memory`` with an FSDP2 record's settings: ``--zero 3 --dp N`` (and the record's micro-batches
    and LoRA adapters, in the dtype the record made them)."""
    import aicalc

    kw = {}
    if rec["microbatches"] > 1:
        kw["microbatches"] = rec["microbatches"]
    if rec.get("lora"):
        kw.update(lora_rank=rec["lora"]["rank"], lora_targets=rec["lora"]["targets"],
                  lora_dtype=rec["lora"].get("dtype", "fp32"))
    return aicalc.train_memory(rec["config"], batch=rec["batch"], seq=rec["seq"], attention=rec["attention"],
                               precision=rec["precision"], recompute=rec["recompute"], adamw=rec["adamw"], zero=3,
                               dp=rec["dp"], **kw)


def section() -> str:
    doc = json.loads(DATA.read_text(encoding="utf-8"))
    rows, errs = [], []
    for r in doc["records"]:
        est = estimate(r)
        peak = float(est["peak_allocated_bytes"][0])
        err = peak / r["peak_bytes"] - 1
        note = "not compared: CPU SDPA took its math path" if r["sdpa_math_fallback"] else ""
        if not note:
            errs.append(abs(err))
        rows.append(f"| {r['name']} | {r['peak_phase']} | {r['peak_bytes'] / 1e6:,.1f} | {peak / 1e6:,.1f} | "
                    f"{est['peak_phase'][0]} | {err:+.1%} | {note} |")
    within = sum(e <= 0.05 for e in errs)
    v = doc["versions"]
    lines = [
        "",
        "# Training memory: the whole step's peak",
        "",
        "`validation/record_step_peak.py` traces three full training steps of small transformers models with",
        "PyTorch's own memory tracker (`torch.distributed._tools.mem_tracker.MemTracker` under `FakeTensorMode`;",
        f"torch {v['torch']}, transformers {v['transformers']}) and records the peak, its breakdown by category and",
        "the peak of each phase; `tests/test_train_peak.py` holds aicalc's `peak_allocated_bytes` to 5 % of every",
        "record but the banded ones it names. The CPU trace stands for a CUDA run with two adjustments: every",
        "storage counts in 512-byte blocks (the caching allocator's rounding) and `F.dropout` runs CUDA's",
        "`native_dropout` (a 1-byte mask; the CPU's composite dropout keeps a mask in the activation dtype).",
        "",
        f"**{len(doc['records'])} records; {len(errs)} compared; {within} within 5 %; worst "
        f"{max(errs):.1%}.** Phase: where the trace peaked (step and phase) and the phase aicalc picks (`loss`:",
        "the loss's backward with every saved activation; `backward`: the last layer's backward; `gradients`: the",
        "end of the backward; `optimizer`: the AdamW step). MB = 10⁶ B.",
        "",
        "| record | traced phase | traced MB | aicalc MB | aicalc phase | error | |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Not traced:",
        "",
        *[f"* {e['what']}: {e['reason']}." for e in doc["excluded"]],
        "",
        *fsdp_section(),
    ]
    return "\n".join(lines)


def fsdp_section() -> list[str]:
    """The FSDP2 records (one rank of ``fully_shard`` on a fake process group) against ``--zero 3 --dp N``."""
    doc = json.loads(FSDP_DATA.read_text(encoding="utf-8"))
    rows, errs = [], []
    for r in doc["records"]:
        est = fsdp_estimate(r)
        peak = float(est["peak_allocated_bytes"][0])
        err = peak / r["peak_bytes"] - 1
        errs.append(abs(err))
        b = r["peak_breakdown"]
        fsdp = (b["unsharded_param"] + b["unsharded_grad"] + b["all_gather"] + b["reduce_scatter"]) / 1e6
        rows.append(f"| {r['name']} | {r['peak_phase']} | {r['peak_bytes'] / 1e6:,.1f} | {fsdp:,.1f} | "
                    f"{peak / 1e6:,.1f} | {est['peak_phase'][0]} | {err:+.1%} |")
    return [
        "## FSDP2 on a fake process group",
        "",
        "The same harness runs one rank of FSDP2 as torchtitan applies it (`fully_shard` on every decoder layer and",
        "the root, `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`, `reshard_after_forward=True`, fp32",
        "sharded parameters, foreach AdamW) on PyTorch's `fake` process group, counted by",
        "`torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker`; the first step is not recorded (its optimizer",
        "step counts tensors of the unsharded shapes on the first call of each foreach op on DTensors). aicalc runs",
        "with `--zero 3 --dp N` (`tests/test_train_peak.py`: within 5 %). `+accumN`: N micro-batches a step, each",
        "reduce-scattered into the sharded gradients (torchtitan's accumulation, `--microbatches N`). `bf16+lora`:",
        "torchtune's LoRA recipe, the model and its adapters in bf16 without a mixed-precision policy, the base",
        "frozen (`--precision bf16 --lora-dtype bf16`). The Qwen1.5-MoE-A2.7B shapes shard the 60 stacked routed",
        "experts with their layer (no expert parallelism): at dp 8 the traced rank holds 8 of them. FSDP MB: the",
        "unsharded parameters and gradients, all-gather and reduce-scatter buffers at the traced peak.",
        "",
        f"**{len(errs)} records; worst {max(errs):.1%}.**",
        "",
        "| record | traced phase | traced MB | FSDP MB | aicalc MB | aicalc phase | error |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
