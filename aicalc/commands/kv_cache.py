"""``aicalc kv-cache``: KV-cache and inference memory per device, and how many sequences fit."""

from __future__ import annotations

from dataclasses import dataclass

from aicalc.catalog import store
from aicalc.core.dtypes import KV_DTYPES
from aicalc.errors import AicalcError, ExitCode
from aicalc.result import Result, rows_from_columns


@dataclass
class KVRequest:
    model: str
    batch: list[float]
    context: list[float]
    kv_dtype: str = "bf16"
    dtype: str = "bf16"
    tp: int = 1
    chip: str | None = None
    budget: int | None = None
    block_size: int | None = 16
    utilization: float = 0.9
    overhead: float | None = None
    solve: str | None = None
    engine: str = "vllm"


def run(req: KVRequest) -> Result:
    import numpy as np

    from aicalc.core import capacity
    from aicalc.core.kv_cache import ENGINES, kv_cache_bytes, kv_shape
    from aicalc.core.layout import check_tp
    from aicalc.core.weights import weight_bytes_per_device
    from aicalc.sweep import grid

    if req.kv_dtype not in KV_DTYPES:
        raise AicalcError(f"--kv-dtype must be one of {', '.join(KV_DTYPES)}, got '{req.kv_dtype}'")
    if req.solve not in (None, "max-context", "max-batch"):
        raise AicalcError(f"--solve must be max-context or max-batch, got '{req.solve}'")
    spec = store.resolve_model(req.model)
    arch = spec.arch
    check_tp(arch, req.tp)
    chip, count = store.resolve_chip(req.chip) if req.chip else (None, 1)
    if count > 1 and req.tp == 1:
        raise AicalcError(f"'{req.chip}' is a node of {count} chips: pass --tp {count} (or a chip id) to say how the model is split")
    if count > 1 and req.tp > count:
        raise AicalcError(f"--tp {req.tp} exceeds the {count} chips of '{req.chip}'")
    if req.solve == "max-context" and chip is None:
        raise AicalcError("--solve max-context needs --chip")

    if req.engine not in ENGINES:
        raise AicalcError(f"--engine must be one of {', '.join(ENGINES)}, got '{req.engine}'")
    shape = kv_shape(arch, req.kv_dtype, req.tp, engine=req.engine)
    g = grid(batch=req.batch, context=req.context)
    B, S = g["batch"], g["context"]
    for name, arr in (("--batch", B), ("--context", S)):
        if np.any(arr != np.round(arr)):
            raise AicalcError(f"{name} takes whole numbers")
    weights = weight_bytes_per_device(arch, req.dtype, req.tp)
    overhead = capacity.runtime_overhead_bytes(arch, req.tp) if req.overhead is None else req.overhead
    exact = kv_cache_bytes(shape, B, S, None)
    paged = kv_cache_bytes(shape, B, S, req.block_size)
    cols = {
        "batch": B.astype(np.int64), "context": S.astype(np.int64),
        "kv_bytes_per_token": shape.bytes_per_token * req.tp,
        "kv_cache_bytes": paged * req.tp,
        "kv_cache_bytes_per_device": paged,
        "kv_per_sequence_bytes": paged / B,
        "paging_waste_bytes_per_device": paged - exact,
        "weights_bytes_per_device": weights,
        "runtime_overhead_bytes": overhead,
        "total_bytes_per_device": weights + overhead + paged,
    }
    warnings: list[str] = []
    exit_code = ExitCode.OK
    columns = ["batch", "context", "kv_per_sequence_bytes", "kv_cache_bytes_per_device", "weights_bytes_per_device",
               "total_bytes_per_device"]
    if S.max() > arch.max_context:
        warnings.append(f"context {int(S.max()):,} exceeds the model's max_position_embeddings {arch.max_context:,}")
    if chip is not None:
        budget = np.broadcast_to(capacity.kv_budget_bytes(chip.memory_bytes, req.utilization, weights, overhead), B.shape)
        fit, concurrency = capacity.max_batch(shape, budget, S, req.block_size)
        cols |= {"memory_bytes": chip.memory_bytes, "kv_budget_bytes_per_device": budget,
                 "max_batch": fit.astype(np.int64), "max_concurrency": concurrency,
                 "fits": (fit >= B) & (budget > 0),
                 "headroom_bytes": budget - paged}
        columns += ["max_batch", "fits"]
        if req.solve == "max-context":
            mc = capacity.max_context(shape, budget, B, req.block_size)
            capped = mc > arch.max_context
            cols["max_context"] = np.where(capped, arch.max_context, mc)
            columns = ["batch", "max_context", "kv_budget_bytes_per_device", "weights_bytes_per_device"]
            if capped.any():
                warnings.append(f"max_context capped at the model's limit of {arch.max_context:,} tokens")
            ok = cols["max_context"] > 0
        else:
            ok = cols["fits"]
        if np.any(budget <= 0):
            short = -budget.min()
            warnings.append(f"weights ({_gib(weights)}) and runtime overhead ({_gib(overhead)}) leave no room on "
                            f"{chip.id} at {req.utilization:.0%} utilization: short by {_gib(short)} per device")
        elif not np.all(ok):
            bad = np.flatnonzero(~ok)
            w = f"{len(bad)} of {ok.size} rows do not fit on {chip.id}"
            i = bad[0]
            if req.solve != "max-context":
                w += f", e.g. batch {int(B[i])} × context {int(S[i]):,} needs {_gib(paged[i])} of KV cache, " \
                     f"{_gib(-cols['headroom_bytes'][i])} more than the {_gib(budget[i])} budget"
            warnings.append(w)
        if not np.all(ok):
            exit_code = ExitCode.BUDGET
    if req.budget is not None:
        over = np.flatnonzero(cols["total_bytes_per_device"] > req.budget)
        if over.size:
            exit_code = ExitCode.BUDGET
            rows_txt = ", ".join(f"batch {int(B[i])} × context {int(S[i]):,}" for i in over[:5])
            warnings.append(f"budget {_gib(req.budget)} per device exceeded by {over.size} row(s): {rows_txt}"
                            + (" …" if over.size > 5 else ""))
    inputs = {"model": spec.id, "batch": req.batch, "context": req.context, "kv_dtype": req.kv_dtype,
              "dtype": req.dtype, "tp": req.tp, "chip": req.chip, "budget": req.budget, "block_size": req.block_size,
              "utilization": req.utilization, "overhead_bytes": overhead, "solve": req.solve, "engine": req.engine}
    result = Result("kv-cache", inputs, rows_from_columns(cols), warnings=warnings, exit_code=exit_code,
                    title=f"{spec.name}: KV cache ({req.kv_dtype}, {arch.attention_kind}, TP {req.tp})"
                          + (f" on {chip.name}" if chip else ""),
                    columns=columns, notes=_notes(shape, req, arch))
    if len(req.batch) == 1 and len(req.context) > 1 and not req.solve:
        from aicalc.chart import bars
        from aicalc.units import fmt_bytes

        result.chart = bars([f"{int(s):,}" for s in S], cols["total_bytes_per_device"].tolist(), fmt_bytes,
                            "memory per device vs context", limit=req.budget or (chip.memory_bytes if chip else None))
    return result


def _gib(x: float) -> str:
    from aicalc.units import fmt_bytes

    return fmt_bytes(float(x))


def _notes(shape, req: KVRequest, arch) -> list[str]:
    from aicalc.units import fmt_bytes

    notes = [f"KV per token per device: {fmt_bytes(shape.bytes_per_token)} "
             f"({shape.full_layers} full + {shape.sliding_layers} sliding layers × {shape.bytes_per_token_layer:g} B)"]
    if shape.sliding_layers:
        notes.append(f"sliding-window layers keep at most {shape.window:,} tokens")
    if req.block_size:
        notes.append(f"paged in blocks of {req.block_size} tokens (vLLM); --block-size 1 gives the exact, unpaged size")
    return notes
