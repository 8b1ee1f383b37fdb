"""``aicalc kv-cache``: KV-cache and inference memory per device, and how many sequences fit."""

from __future__ import annotations

from aicalc.errors import ExitCode, ParameterError
from aicalc.result import Result, Rows


def run(model: str, batch="1", context="4k", kv_dtype: str = "bf16", dtype: str = "release", tp=None, chip=None,
        budget=None, block_size=None, engine: str = "vllm", gpu_memory_utilization="0.9", overhead=None,
        solve=None) -> Result:
    from aicalc.commands.merge import choices, over

    if len(choices(dtype)) > 1 or len(choices(kv_dtype)) > 1:  # a table across formats
        return over("kv_dtype", choices(kv_dtype), lambda kd: over("dtype", choices(dtype), lambda d: run(
            model, batch, context, kd, d, tp, chip, budget, block_size, engine, gpu_memory_utilization, overhead,
            solve)))
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.kv_cache import kv_cache
    from aicalc.sweep import grid, sweep

    if solve not in (None, "max-context", "max-batch"):
        raise ParameterError("solve", solve, "is not one of max-context, max-batch")
    if engine not in ("vllm", "hf"):
        from aicalc.catalog import profiles

        if str(engine) in (*profiles.ids("engine"), *profiles.families()):  # serve's and roofline's profiles
            from aicalc.errors import AicalcError

            raise AicalcError(f"--engine {engine} is a serving profile (serve, roofline); kv-cache counts the "
                              "cache as vllm (paged blocks, --block-size) or hf (transformers' DynamicCache)")
    if block_size is None:
        block_size = 1 if engine == "hf" else 16
    batches, contexts = sweep(batch, "--batch"), sweep(context, "--context")
    g = grid(batch=batches, context=contexts)
    res = kv_cache(model, g["batch"], g["context"], kv_dtype=kv_dtype, dtype=dtype, tp=tp, chip=chip,
                   block_size=block_size, engine=engine, utilization=gpu_memory_utilization, overhead=overhead,
                   max_context=solve == "max-context")
    budget = inputs.nbytes("budget", budget) if budget is not None else None
    m = res.meta
    cols, B, S = res.columns, res.batch, res.context
    warnings, code = list(res.warnings), ExitCode.OK
    columns = ["batch", "context", "kv_per_sequence_bytes", "kv_cache_bytes_per_device", "weights_bytes_per_device",
               "total_bytes_per_device"]
    if "indexer_cache_bytes_per_device" in cols:  # a DSA model: the indexer keys' part of the cache, on its own
        columns.insert(4, "indexer_cache_bytes_per_device")
    if "state_bytes_per_device" in cols:  # recurrent layers' fixed state, part of the cache column
        columns.insert(4, "state_bytes_per_device")
    chip_obj = m["chip"]
    if "chips_needed" in cols:  # SRAM-only chips: the deployment spans as many chips as the bytes fill
        columns += ["chips_needed", "max_batch"]
    elif chip_obj is not None:
        columns += ["max_batch", "fits"] + (["shortfall_bytes"] if not np.all(cols["fits"]) else [])
        ok = cols["fits"]
        if solve == "max-context":
            columns = ["batch", "max_context", "kv_budget_bytes_per_device", "weights_bytes_per_device"]
            ok = cols["max_context"] > 0
        if not np.all(ok):
            if np.all(cols["kv_budget_bytes_per_device"] > 0):
                bad = np.flatnonzero(~ok)
                w = f"{len(bad)} of {ok.size} rows do not fit on {chip_obj.id}"
                i = bad[0]
                if solve != "max-context":
                    w += (f", e.g. batch {int(B[i])} × context {int(S[i]):,} needs "
                          f"{_gib(cols['kv_cache_bytes_per_device'][i])} of KV cache, "
                          f"{_gib(cols['shortfall_bytes'][i])} more than the "
                          f"{_gib(cols['kv_budget_bytes_per_device'][i])} budget")
                warnings.append(w)
            code = ExitCode.BUDGET
    if budget is not None:
        over = np.flatnonzero(cols["total_bytes_per_device"] > budget)
        if over.size:
            code = ExitCode.BUDGET
            rows_txt = ", ".join(f"batch {int(B[i])} × context {int(S[i]):,}" for i in over[:5])
            warnings.append(f"budget {_gib(budget)} per device exceeded by {over.size} row(s): {rows_txt}"
                            + (" …" if over.size > 5 else ""))
    spec, shape = m["model"], m["shape"]
    inputs_ = {"model": spec.id, "batch": batches, "context": contexts, "kv_dtype": kv_dtype, "dtype": m["dtype"],
               "tp": m["tp"], "chip": chip, "budget": budget, "block_size": block_size,
               "utilization": m["utilization"], "overhead_bytes": m["overhead_bytes"], "solve": solve,
               "engine": engine}
    result = Result("kv-cache", inputs_, Rows(res.columns), warnings=warnings, exit_code=code,
                    title=f"{spec.name}: KV cache ({kv_dtype}, {spec.arch.attention_kind}, TP {m['tp']}"
                          + (f"; weights {m['dtype']})" if chip_obj else ")")
                          + (f" on {chip_obj.name}" if chip_obj else ""),
                    columns=columns, notes=_notes(shape, block_size, spec.arch) + _replicated(spec.arch, m["tp"]))
    if len(batches) == 1 and len(contexts) > 1 and not solve:
        from aicalc.chart import bars
        from aicalc.units import fmt_bytes

        result.chart = bars([f"{int(s):,}" for s in S], cols["total_bytes_per_device"].tolist(), fmt_bytes,
                            "memory per device vs context",
                            limit=budget or (chip_obj.usable_memory_bytes if chip_obj else None))
    return result


def _replicated(arch, tp) -> list[str]:
    """Where tensor parallelism does not split the cache: MLA's one latent per token (every head reads it) and kv
    heads fewer than the TP ranks (each rank keeps a copy of the head its query heads read), the whole of it on each
    of the ``tp`` devices (a sweep of TP: its largest)."""
    import numpy as np

    t = int(np.max(tp))
    if t <= 1 or arch.compressed is not None:
        return []
    if arch.mla is not None:
        return [f"MLA caches one latent per token that every head reads: TP does not split it, each of the {t} "
                "devices holds every sequence's (DP attention gives each attention group its own sequences: serve "
                "--attention-dp)"]
    if arch.kv_heads < t:
        return [f"{arch.kv_heads} kv heads over {t} devices: each kv head is kept on the {t // arch.kv_heads} devices "
                "whose query heads read it (the cache per device stops shrinking past TP = kv heads)"]
    return []


def _gib(x: float) -> str:
    from aicalc.units import fmt_bytes

    return fmt_bytes(float(x))


def _notes(shape, block_size, arch=None) -> list[str]:
    from aicalc.units import fmt_bytes

    if shape.compressed and arch is not None and arch.compressed is not None:
        return _compressed_notes(shape, block_size, arch)
    notes = [f"KV per token per device: {fmt_bytes(shape.bytes_per_token)} "
             f"({shape.full_layers} full + {shape.sliding_layers} sliding layers × {shape.bytes_per_token_layer:g} B)"]
    if shape.indexer_bytes_per_token:
        notes.append(f"of which the sparse-attention indexer's keys: {fmt_bytes(shape.indexer_bytes_per_token)} per "
                     "token per device (fp8 + fp32 scales as vLLM/SGLang keep them; --engine hf: transformers' bf16)")
    if shape.state_bytes and arch is not None:
        kinds = [f"{n} {kind}" for n, kind in ((arch.linear_layers, "linear-attention (Gated DeltaNet)"),
                                               (arch.mamba_layers, "Mamba-2")) if n]
        notes.append(f"{' and '.join(kinds)} layers cache no tokens: they hold a fixed conv + recurrent state of "
                     f"{fmt_bytes(shape.state_bytes)} per sequence per device, whatever the context (state_bytes, "
                     "included in the cache columns)")
    if shape.sliding_layers:
        notes.append(f"sliding-window layers keep at most {shape.window:,} tokens")
    if block_size:
        notes.append(f"paged in blocks of {block_size} tokens (vLLM); --block-size 1 gives the exact, unpaged size")
    return notes


def _compressed_notes(shape, block_size, arch) -> list[str]:
    """DeepSeek-V4's cache in words: what grows with the context and what stays."""
    from aicalc.units import fmt_bytes

    c = arch.compressed
    parts = ", ".join(f"{c.count(k)} {k.upper()} layers 1 entry per {c.ratio(k)} tokens" for k in ("csa", "hca")
                      if c.count(k))
    notes = [f"KV per token per device: {fmt_bytes(shape.bytes_per_token)} as the context grows (compressed entries: "
             f"{parts}), of which the CSA indexer's keys {fmt_bytes(shape.indexer_bytes_per_token)} (fp8 + fp32 "
             "scales as vLLM/SGLang keep DSA keys; --engine hf: transformers' bf16)",
             f"every layer also keeps a window of {shape.window:,} tokens of its one shared KV head "
             f"({shape.bytes_per_token_layer:g} B per token and layer; window_cache_bytes_per_device)"]
    if block_size:
        notes.append(f"paged in blocks of {block_size} tokens or entries (vLLM); --block-size 1 gives the exact size")
    return notes
