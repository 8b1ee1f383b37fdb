"""``aicalc serve``: a deployment under continuous batching: TTFT, time per output token, tokens/s,
what fits, which concurrency meets the latency targets, and what a million tokens cost."""

from __future__ import annotations

from aicalc.errors import ExitCode
from aicalc.result import Result


def run(model: str, chip="h100-sxm", chips=None, tp=None, prompt="1024", gen="256", concurrency=None, max_ttft=None,
        max_tpot=None, dtype: str = "bf16", kv_dtype: str = "bf16", price=None, engine=None, draft=None,
        draft_tokens=4, acceptance="0.7", prefix_hit="0", rate=None, requests=None, num_requests="1000",
        seed=0, search: bool = False, plot=None) -> Result:
    import numpy as np

    if plot and not search:
        from aicalc.errors import AicalcError

        raise AicalcError("--plot draws the Pareto chart of the deployments --search ranks: add --search "
                          "(roofline --plot draws a roofline)")
    if search:
        return _search(model, chip, chips, tp, prompt, gen, max_ttft, max_tpot, dtype, kv_dtype, engine, draft,
                       draft_tokens, acceptance, plot)
    from aicalc.commands.merge import choices, over

    if len(choices(dtype)) > 1 or len(choices(kv_dtype)) > 1:  # a table across formats
        return over("kv_dtype", choices(kv_dtype), lambda kd: over("dtype", choices(dtype), lambda d: run(
            model, chip, chips, tp, prompt, gen, concurrency, max_ttft, max_tpot, d, kd, price, engine, draft,
            draft_tokens, acceptance, prefix_hit, rate, requests, num_requests, seed)))
    from aicalc.api.catalog import node_split

    tp, chips = node_split(chip, tp, chips)  # a node: its chips, one TP group unless --tp splits it
    if rate is not None or requests is not None:
        return _traffic(model, chip, chips, tp, prompt, gen, max_ttft, max_tpot, dtype, kv_dtype, engine, rate,
                        requests, num_requests, seed)

    from aicalc.api.serving import max_concurrency, serve
    from aicalc.catalog.profiles import release_note
    from aicalc.commands.options import cost_note, engine_default, engine_release, price_per_hour
    from aicalc.core.serving import concurrency_ladder
    from aicalc.sweep import grid, int_sweep

    prompts, gens = int_sweep(prompt, "--prompt"), int_sweep(gen, "--gen")
    tp = int(tp)
    if str(concurrency).strip().lower() == "max":  # as many requests as the KV cache holds
        conc = [float(max(1, max_concurrency(model, chip, tp=tp, chips=chips, prompt=prompts, gen=gens, dtype=dtype,
                                             kv_dtype=kv_dtype, engine=engine)))]
    elif concurrency is None:
        conc = concurrency_ladder(max_concurrency(model, chip, tp=tp, chips=chips, prompt=prompts, gen=gens,
                                                  dtype=dtype, kv_dtype=kv_dtype, engine=engine),
                                  (int(chips) // tp) if chips is not None else 1)
    else:
        conc = int_sweep(concurrency, "--concurrency")
    g = grid(concurrency=conc, prompt=prompts, gen=gens)
    r = serve(model, chip, g["concurrency"], g["prompt"], g["gen"], tp=tp, chips=chips, dtype=dtype,
              kv_dtype=kv_dtype, max_ttft=max_ttft, max_tpot=max_tpot, price=price_per_hour(price), engine=engine,
              draft=draft,
              draft_tokens=int(draft_tokens), acceptance=acceptance, prefix_hit=_share(prefix_hit))
    m, c = r.meta, r.columns
    cs = m["setup"]
    warnings, exit_code = list(r.warnings), ExitCode.OK
    slo = m["max_ttft"] is not None or m["max_tpot"] is not None
    fits, ok = c["fits"], c["meets_slo"]
    answer = []  # a result, printed with the notes (not as a warning)
    if slo:
        if ok.any():
            best = int(np.argmax(np.where(ok, c["output_tokens_per_s"], -1)))
            answer.append(f"best row meeting the targets: concurrency {int(c['concurrency'][best])} at "
                          f"{c['output_tokens_per_s'][best]:,.0f} output tokens/s")
        else:
            warnings.append("no row meets the latency targets on this deployment")
    if (concurrency is not None and not (ok if slo else fits).all()) or (slo and not ok.any()) or not fits.any():
        exit_code = ExitCode.BUDGET  # a target missed, or the configuration asked about does not fit
    price_v = m["price"]
    columns = ["concurrency", "prompt", "gen", "batch_per_replica", "ttft_s", "tpot_s", "output_tokens_per_s",
               "total_bytes_per_device", "fits"] + (["speculative_speedup"] if draft else []) + \
              (["meets_slo"] if slo else []) + \
              (["usd_per_million_output_tokens"] if price_v else [])
    sram = "chips_needed" in c  # SRAM-only chips: each row spans the chips its weights and cache fill
    if sram:
        columns.insert(columns.index("fits"), "chips_needed")
    n_chips = _count(c["chips_needed"]) if sram and chips is None else m["chips"]
    inputs = {"model": cs.model.id, "chip": cs.chip.id, "chips": m["chips"] if not sram else chips, "tp": tp,
              "replicas": m["replicas"], "prompt": prompts, "gen": gens,
              "concurrency": None if concurrency is None else conc,
              "max_ttft_s": m["max_ttft"], "max_tpot_s": m["max_tpot"], "dtype": dtype, "kv_dtype": kv_dtype,
              "compute_dtype": cs.compute_dtype, "engine": cs.engine,
              "engine_release": engine_release(cs.engine), "chip_class": cs.chip_class,
              "draft": draft, "draft_tokens": int(draft_tokens) if draft else None,
              "acceptance": float(_share(acceptance)) if draft else None, "prefix_hit": _share(prefix_hit),
              "efficiency_sources": list(cs.sources), "price_per_chip_hour_usd": price_v,
              "gpu_memory_utilization": m["utilization"]}
    notes = [*answer, "continuous batching in steady state: TPOT = decode step + the batched prefills interleaved per step; "
             "TTFT = own batch's prefill + one running decode step (docs/serve.md)",
             f"efficiency: engine {release_note(cs.engine)} (presets/engines/{cs.engine}.yaml), chip class "
             f"{cs.chip_class} (presets/classes/{cs.chip_class}.yaml){engine_default(engine, cs.chip)}",
             cost_note(cs.chip, price_v, price is not None)]
    return Result("serve", inputs, r.rows(), warnings=warnings, exit_code=exit_code, columns=columns, notes=notes,
                  title=f"{cs.model.name} on {n_chips} × {cs.chip.name} (TP {tp}, {_replicas(m['replicas'])}, "
                        f"{dtype})")


def _count(chips) -> str:
    """``601`` or ``601-640``: the chips of the rows (SRAM-only chips: each row needs its own count)."""
    lo, hi = int(min(chips)), int(max(chips))
    return f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"


def _share(text) -> float:
    """``0.75`` or ``75%`` → 0.75 (0 allowed)."""
    from aicalc.errors import AicalcError

    t = str(text).strip()
    try:
        return float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise AicalcError(f"cannot read the share '{text}' (examples: 0.75, 75%)") from None


def _traffic(model, chip, chips, tp, prompt, gen, max_ttft, max_tpot, dtype, kv_dtype, engine, rate, requests,
             num_requests, seed) -> Result:
    """serve with traffic: a discrete-event simulation of the scheduler (one row per arrival rate)."""
    from aicalc.api.traffic import simulate
    from aicalc.commands.options import engines_note
    from aicalc.sweep import sweep
    from aicalc.units import parse_int

    tp = int(tp)
    r = simulate(model, chip, sweep(rate, "--rate") if rate is not None else 1.0, requests=requests,
                 prompt=parse_int(str(prompt), "--prompt"), gen=parse_int(str(gen), "--gen"),
                 num_requests=parse_int(str(num_requests), "--num-requests"), tp=tp, chips=chips, dtype=dtype,
                 kv_dtype=kv_dtype, engine=engine, max_ttft=max_ttft, max_tpot=max_tpot, seed=int(seed))
    m = r.meta
    cs = m["setup"]
    src = f"trace {requests}" if requests else f"{r.requests[0]:,} requests of {prompt} + {gen} tokens, Poisson arrivals"
    inputs = {"model": cs.model.id, "chip": cs.chip.id, "chips": m["chips"], "tp": tp, "replicas": m["replicas"],
              "rate": rate, "requests": requests, "prompt": prompt, "gen": gen, "max_ttft": max_ttft,
              "max_tpot": max_tpot, "dtype": dtype, "kv_dtype": kv_dtype, "engine": cs.engine, "seed": int(seed),
              "kv_blocks_per_replica": m["kv_blocks"]}
    columns = ["rate", "p50_ttft_s", "p99_ttft_s", "p50_tpot_s", "p99_tpot_s", "output_tokens_per_s",
               "goodput_requests_per_s", "preemptions"]
    notes = [f"{src}; discrete-event simulation of continuous batching per replica (token budget 8192, 256 "
             "sequences, paged KV with recompute preemption), step times from the cost model (docs/serve.md)",
             "goodput: requests per second meeting --max-ttft and --max-tpot (all requests when none is given)",
             engines_note([cs.chip.id], engine)]
    return Result("serve", inputs, r.rows(), warnings=r.warnings, columns=columns, notes=notes,
                  title=f"{cs.model.name} on {m['chips']} × {cs.chip.name} under traffic (TP {tp}, "
                        f"{_replicas(m['replicas'])})")


def _search(model, chip, chips, tp, prompt, gen, max_ttft, max_tpot, dtype, kv_dtype, engine, draft, draft_tokens,
            acceptance, plot) -> Result:
    """serve --search: deployments over chips, TP, formats, aggregated and disaggregated, ranked by cost."""
    from aicalc.api.deployment import search_deployments
    from aicalc.chart import scatter
    from aicalc.commands.options import engines_note
    from aicalc.errors import ExitCode
    from aicalc.sweep import int_sweep
    from aicalc.units import parse_int

    chip_ids = [c for c in (chip if isinstance(chip, (list, tuple)) else str(chip).split(",")) if c]
    n = parse_int(str(chips), "--chips") if chips else None
    if n is None:
        from aicalc.api.catalog import load_node_or_chip

        n = max(load_node_or_chip(chip_ids[0])[1], 8)
    spec = {"draft": draft, "draft_tokens": int(draft_tokens), "acceptance": float(_share(acceptance))} if draft \
        else None
    tps = None if str(tp) in ("1", "None") else int_sweep(str(tp), "--tp")
    r = search_deployments(model, chip_ids, n, prompt=parse_int(str(prompt), "--prompt"),
                           gen=parse_int(str(gen), "--gen"), dtypes=str(dtype).split(","),
                           kv_dtypes=str(kv_dtype).split(","), tps=tps, max_ttft=max_ttft, max_tpot=max_tpot,
                           engine=engine, speculation=spec)
    rows = r.meta["row_dicts"]
    front = [x for x in rows if x["pareto"]]
    chart = scatter([(x["tokens_per_s_per_user"], x["output_tokens_per_s_per_chip"],
                      "A" if x["mode"] == "aggregated" else "D") for x in front],
                    "Pareto front: output tokens/s per chip (up) vs tokens/s per user (right); A aggregated, "
                    "D disaggregated", "tokens/s per user", "tokens/s per chip")
    if plot:
        from aicalc.plot import write_pareto

        write_pareto(plot, rows, f"{model}: deployments of {n} chips")
    slo = max_ttft is not None or max_tpot is not None
    code = ExitCode.BUDGET if slo and not any(x["meets_slo"] for x in rows) else ExitCode.OK
    best = rows[0]
    notes = [f"{len(rows)} deployments of {n} chips ({', '.join(chip_ids)}; dtypes {dtype}, KV {kv_dtype}); ranked by "
             "cost per million output tokens, those meeting the targets first; disaggregated: prefill and decode "
             "pools with the KV cache shipped between them (docs/serve.md)",
             f"best: {best['mode']} on {best['chips']} × {best['chip']}, TP {best['tp']}, {best['dtype']} / KV "
             f"{best['kv_dtype']}", engines_note(chip_ids, engine)]
    columns = ["mode", "chip", "chips", "tp", "replicas", "prefill_replicas", "dtype", "kv_dtype", "ttft_s", "tpot_s",
               "output_tokens_per_s_per_chip", "tokens_per_s_per_user", "usd_per_million_output_tokens", "meets_slo",
               "pareto"]
    inputs = {"model": model, "chips": chip_ids, "total_chips": n, "prompt": prompt, "gen": gen, "dtype": dtype,
              "kv_dtype": kv_dtype, "max_ttft": max_ttft, "max_tpot": max_tpot, "engine": engine, "search": True}
    return Result("serve", inputs, rows, exit_code=code, columns=columns, notes=notes, chart=chart,
                  title=f"{model}: serving deployments of {n} chips",
                  keep=["usd_per_million_output_tokens", "meets_slo"])  # the rank and the verdict


def _replicas(n: int) -> str:
    return f"{n} replica{'' if n == 1 else 's'}"
