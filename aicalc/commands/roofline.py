"""``aicalc roofline``: is a model's prefill/decode compute- or memory-bound on a chip, and how fast is it.

Parses the sweeps into a grid, calls :func:`aicalc.api.roofline.roofline` and returns one row per grid point
and phase (and per operation with ``--ops``), the ideal bound beside the efficiency-model estimate.
"""

from __future__ import annotations

import math

from aicalc.result import Result


def run(model: str, chip="h100-sxm", batch="1", prompt="512", gen="256", dtype: str = "release", kv_dtype: str = "bf16",
        tp=None, compute_dtype=None, group_size=None, attention: str = "flash", ops: bool = False, eff=None,
        kv_per_query_head: bool = False, engine=None, draft=None, draft_tokens=4, acceptance="0.7", ep=1,
        attention_dp=1, redundant_experts=0, mem_fraction_static=None, swa_full_tokens_ratio=None) -> Result:
    from aicalc.commands.merge import choices, over
    from aicalc.commands.serve import check_share_engine, memory_options

    share, ratio = memory_options(mem_fraction_static, swa_full_tokens_ratio)
    if len(choices(dtype)) > 1 or len(choices(kv_dtype)) > 1:  # a table across formats
        return over("kv_dtype", choices(kv_dtype), lambda kd: over("dtype", choices(dtype), lambda d: run(
            model, chip, batch, prompt, gen, d, kd, tp, compute_dtype, group_size, attention, ops, eff,
            kv_per_query_head, engine, draft, draft_tokens, acceptance, ep, attention_dp, redundant_experts,
            mem_fraction_static, swa_full_tokens_ratio)))
    if share is not None:
        check_share_engine(mem_fraction_static, engine, chip)

    from aicalc.api.roofline import roofline
    from aicalc.catalog.profiles import release_note
    from aicalc.commands.options import (
        efficiency_overrides,
        engine_default,
        engine_release,
        links_note,
        memory_inputs,
        memory_notes,
        time_attention,
    )
    from aicalc.sweep import grid, int_sweep

    attention = time_attention(attention)
    if tp is None:  # a node is one TP group over its scale-up link
        from aicalc.api.catalog import node_count

        tp = str(node_count(chip))

    g = grid(tp=int_sweep(tp, "--tp"), batch=int_sweep(batch, "--batch"), prompt=int_sweep(prompt, "--prompt"),
             gen=int_sweep(gen, "--gen"))
    r = roofline(model, chip, g["batch"], g["prompt"], g["gen"], dtype=dtype, kv_dtype=kv_dtype, tp=g["tp"],
                 compute_dtype=compute_dtype, group_size=group_size, attention=attention,
                 kv_shared=False if kv_per_query_head else None, engine=engine,
                 efficiency=efficiency_overrides(eff), draft=draft, draft_tokens=draft_tokens, acceptance=acceptance,
                 ep=ep, attention_dp=attention_dp, redundant_experts=redundant_experts, utilization=share,
                 swa_full_tokens_ratio=ratio)
    cs, effm = r.meta["setup"], r.meta["efficiency"]
    ridge = cs.roofs.ridge_point
    c = r.columns
    rows = []
    phases = (("prefill", r.meta["prefill"]), ("decode", r.meta["decode"]))
    for i in range(len(r)):
        common = {"batch": int(c["batch"][i]), "prompt": int(c["prompt"][i]), "gen": int(c["gen"][i]),
                  "tp": int(c["tp"][i]), "ep": int(c["ep"][i]), "attention_dp": int(c["attention_dp"][i]),
                  "ridge_point": ridge, **({"redundant_experts": int(redundant_experts)} if redundant_experts else {})}
        mem_row = {"weights_bytes_per_device": float(c["weights_bytes_per_device"][i]),
                   "kv_cache_bytes_per_device": float(c["kv_cache_bytes_per_device"][i]), "fits": bool(c["fits"][i]),
                   "chips_needed": int(c["chips_needed"][i])}
        tpot = float(c["tpot_s"][i])
        tails = {"ttft_s": float(c["ttft_s"][i]), "tpot_s": tpot,
                 "output_tokens_per_s": float(c["output_tokens_per_s"][i]),
                 "output_tokens_per_s_per_chip": float(c["output_tokens_per_s"][i] / c["tp"][i]),
                 "tokens_per_s_per_sequence": 1.0 / tpot,
                 "ideal_ttft_s": float(c["ideal_ttft_s"][i]), "ideal_tpot_s": float(c["ideal_tpot_s"][i]),
                 "ideal_output_tokens_per_s": float(c["ideal_output_tokens_per_s"][i])}
        if draft is not None:
            tails |= {"draft_tokens": int(c["draft_tokens"][i]), "acceptance": float(c["acceptance"][i]),
                      "tokens_per_target_pass": float(c["tokens_per_target_pass"][i]),
                      "speculative_speedup": float(c["speculative_speedup"][i])}
        for name, ph in phases:
            f, by = float(c[f"{name}_flop"][i]), float(c[f"{name}_bytes"][i])
            t, ti = float(c[f"{name}_time_s"][i]), float(c[f"{name}_ideal_time_s"][i])
            ai = f / by
            row = {"phase": name, "op": "total", **common, "flop": f, "bytes": by, "arithmetic_intensity": ai,
                   "bound": "compute" if ai >= ridge else "memory", "time_s": t, "ideal_time_s": ti,
                   "efficiency": ti / t, **tails, **mem_row}
            if name == "decode":
                cbv = float(c["compute_bound_batch"][i])
                row["compute_bound_batch"] = int(cbv) if math.isfinite(cbv) else None
            rows.append(row)
            if ops:
                rows += _op_rows(ph.ops, i, name, common, tails, ridge)
    inputs = {"model": cs.model.id, "chip": cs.chip.id, "batch": batch, "prompt": prompt, "gen": gen, "dtype": cs.dtype_label,
              "kv_dtype": cs.kv_dtype, "tp": tp, "ep": ep, "attention_dp": attention_dp,
              "redundant_experts": int(redundant_experts), "compute_dtype": cs.compute_dtype, "attention": attention,
              "group_size": group_size, "kv_shared": cs.formats.kv_shared, "engine": cs.engine,
              "engine_release": engine_release(cs.engine), "draft": draft, "draft_tokens": draft_tokens if draft else None,
              "acceptance": acceptance if draft else None,
              "chip_class": cs.chip_class, "efficiency": effm.as_dict(), "efficiency_sources": list(cs.sources),
              "peak_flop_per_s": cs.roofs.peak_flop_per_s,
              "memory_bandwidth_bytes_per_s": cs.roofs.bandwidth_bytes_per_s}
    columns = ["phase", "op", "batch", "prompt", "gen", "tp", "arithmetic_intensity", "bound", "time_s", "ideal_time_s",
               "ttft_s", "tpot_s", "output_tokens_per_s", "ideal_output_tokens_per_s", "chips_needed",
               *([] if cs.dataflow else ["fits"])]
    if ep > 1 or attention_dp > 1:
        columns[columns.index("tp") + 1:columns.index("tp") + 1] = ["ep", "attention_dp"]
    if redundant_experts:
        columns.insert(columns.index("ep") + 1, "redundant_experts")
    if not ops:
        columns.remove("op")
    if draft is not None:
        columns.insert(columns.index("ideal_output_tokens_per_s"), "speculative_speedup")
    notes = [f"ridge point {ridge:,.0f} FLOP/byte = {cs.roofs.peak_flop_per_s / 1e12:,.1f} TFLOP/s dense "
             f"{cs.compute_dtype} ÷ {cs.roofs.bandwidth_bytes_per_s / 1e9:,.0f} GB/s; below it a pass is memory-bound",
             f"estimate: {r.meta['regime']} (presets/classes/{cs.chip_class}.yaml, presets/engines/{cs.engine}.yaml); "
             "ideal = bare roofline, no overheads; override factors with --eff KEY=VALUE",
             f"engine profile: {release_note(cs.engine)}{engine_default(engine, cs.chip)}"]
    notes += links_note(cs, int(c["tp"].max()), 1, ep, attention_dp)
    if cs.engine_options.get("mem_fraction_static_reserve"):
        from aicalc.api.serving import kv_memory

        for t in sorted({int(x) for x in c["tp"]}):
            memory = kv_memory(cs.chip, cs.engine_options, cs.model.arch, 0.0, t, 1, attention_dp, share)
            inputs.update(memory_inputs(memory, ratio))
            notes += memory_notes(memory, t, 1, attention_dp, "fits: weights and the batch's KV cache within")
    chart = None
    if not ops and len(r) <= 64:
        from aicalc.plot import terminal_chart

        chart = terminal_chart(rows, ridge, cs.roofs.peak_flop_per_s, cs.roofs.bandwidth_bytes_per_s)
    from aicalc.errors import ExitCode

    # does not fit one device: exit 1 (a dataflow deployment is priced over chips_needed chips by design)
    code = ExitCode.OK if bool(c["fits"].all()) or cs.dataflow else ExitCode.BUDGET
    warnings = list(r.warnings)
    if cs.dataflow:  # spreading the bytes over chips_needed chips is the deployment, a result and not a warning
        spread = [w for w in warnings if w.startswith("weights + KV cache exceed one device's on-chip SRAM")]
        warnings = [w for w in warnings if w not in spread]
        need = sorted({int(x) for x in c["chips_needed"]})
        notes.insert(0, f"weights and KV cache spread over {_span(need)} {cs.chip.id} chips' SRAM (chips_needed): "
                        "a token crosses them in turn" if need != [1] else f"weights and KV cache fit one "
                        f"{cs.chip.id}")
    return Result("roofline", inputs, rows, warnings=warnings, exit_code=code,
                  title=f"{cs.model.id} on {_where(chip, cs.chip)} ({cs.dtype_label}, {_math(cs)})", notes=notes,
                  columns=columns, chart=chart)


def _op_rows(ops, i: int, phase: str, common: dict, tails: dict, ridge: float) -> list[dict]:
    import numpy as np

    rows = []
    for o in ops:
        f, by = float(np.broadcast_to(o.flop, o.t_est.shape)[i]), float(np.broadcast_to(o.bytes, o.t_est.shape)[i])
        comm = float(np.broadcast_to(o.comm_bytes, o.t_est.shape)[i])
        if f == 0 and by == 0 and not comm:
            continue
        oai = f / by if by else math.inf
        t, ti = float(o.t_est[i]), float(o.t_ideal[i])
        bound = "network" if o.kind == "collective" else ("compute" if oai >= ridge else "memory")
        rows.append({"phase": phase, "op": o.name, **common, "flop": f, "bytes": by,
                     "arithmetic_intensity": oai if math.isfinite(oai) else None, "bound": bound, "time_s": t,
                     "ideal_time_s": ti, "efficiency": ti / t if t else None, **tails})
    return rows


def _span(counts: list[int]) -> str:
    return f"{counts[0]:,}" if len(counts) == 1 else f"{counts[0]:,} to {counts[-1]:,}"


def _where(given, chip) -> str:
    """``dgx-h100 (8 × h100-sxm)`` for a node, the chip's id for a chip."""
    from aicalc.api.catalog import node_count

    n = node_count(given) if isinstance(given, str) else 1
    return f"{given.lower()} ({n} × {chip.id})" if n > 1 else chip.id


def _math(cs) -> str:
    """The math the estimate runs in: the compute dtype, and the routed experts' where it differs (gpt-oss's MXFP4
    experts against MXFP8 activations on Blackwell)."""
    ec = cs.formats.expert_compute
    return f"{cs.compute_dtype} math" + (f", experts in {ec}" if ec and ec != cs.compute_dtype else "")
