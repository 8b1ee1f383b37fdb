"""``aicalc serve``: a deployment under continuous batching: TTFT, time per output token, tokens/s,
what fits, which concurrency meets the latency targets, and what a million tokens cost."""

from __future__ import annotations

from aicalc.errors import ExitCode
from aicalc.result import Result, Rows


def run(model: str, chip="h100-sxm", chips=None, tp=None, prompt="1024", gen="256", concurrency=None, max_ttft=None,
        max_tpot=None, dtype: str = "release", kv_dtype: str = "bf16", price=None, engine=None, draft=None,
        draft_tokens=4, acceptance="0.7", prefix_hit="0", rate=None, requests=None, num_requests="1000",
        seed=0, search: bool = False, plot=None, requests_per_day=None, peak_factor="1", policy=None, ep=1,
        attention_dp=1, redundant_experts=0, pp=1, mem_fraction_static=None, swa_full_tokens_ratio=None,
        gpu_memory_utilization=None) -> Result:
    import numpy as np

    share, ratio = memory_options(mem_fraction_static, swa_full_tokens_ratio, gpu_memory_utilization)
    if (share is not None or ratio is not None) and (search or requests_per_day is not None):
        from aicalc.errors import ParameterError

        name, value = (("mem_fraction_static", mem_fraction_static) if mem_fraction_static is not None else
                       ("gpu_memory_utilization", gpu_memory_utilization)) if share is not None else \
            ("swa_full_tokens_ratio", swa_full_tokens_ratio)
        raise ParameterError(name, value, "sets a given deployment's memory; --search sizes each deployment with "
                             "its engine's defaults")
    if ratio is not None and (rate is not None or requests is not None):
        from aicalc.errors import ParameterError

        raise ParameterError("swa_full_tokens_ratio", swa_full_tokens_ratio, "sizes SGLang's two pools for serve's "
                             "estimate; the traffic simulation ({rate}, {requests}) runs one KV pool")

    if pp != 1 and (search or requests_per_day is not None):
        from aicalc.errors import ParameterError

        raise ParameterError("pp", pp, "sets a given deployment's pipeline; --search tries pipelines itself (a TP "
                             "group filling a node over 2 and 4 nodes)")

    if redundant_experts and (search or rate is not None or requests is not None or requests_per_day is not None):
        from aicalc.errors import ParameterError

        raise ParameterError("redundant_experts", redundant_experts, "is priced for a given deployment at a given "
                             "concurrency; the traffic simulation and --search do not place redundant experts")

    if (ep != 1 or attention_dp != 1) and (search or requests_per_day is not None):
        from aicalc.errors import ParameterError

        raise ParameterError("ep" if ep != 1 else "attention_dp", ep if ep != 1 else attention_dp,
                             "sets a given deployment's layout; --search tries expert and attention-data "
                             "parallelism itself")
    if policy is not None and rate is None and requests is None and requests_per_day is None:
        from aicalc.errors import ParameterError

        raise ParameterError("policy", policy, "schedules the traffic simulation: give it with {rate} or "
                             "{requests}")
    if requests_per_day is not None and not search:
        from aicalc.errors import ParameterError

        raise ParameterError("requests_per_day", requests_per_day, "sizes a fleet: give it with --search (and "
                             "without --chips)")
    if search and chips is None and (rate is not None or requests is not None or requests_per_day is not None):
        return _fleet(model, chip, tp, prompt, gen, max_ttft, max_tpot, dtype, kv_dtype, price, engine, rate,
                      requests, requests_per_day, peak_factor, num_requests, seed, policy)
    if plot and not search:
        from aicalc.errors import AicalcError

        raise AicalcError("--plot draws the Pareto chart of the deployments --search ranks: add --search "
                          "(roofline --plot draws a roofline)")
    if search:
        return _search(model, chip, chips, tp, prompt, gen, max_ttft, max_tpot, dtype, kv_dtype, engine, draft,
                       draft_tokens, acceptance, plot, traffic=None if rate is None and requests is None else dict(
                           rate=_one_rate(rate), requests=requests, num_requests=num_requests, seed=seed,
                           policy=policy))
    from aicalc.commands.merge import choices, over

    if len(choices(dtype)) > 1 or len(choices(kv_dtype)) > 1:  # a table across formats
        return over("kv_dtype", choices(kv_dtype), lambda kd: over("dtype", choices(dtype), lambda d: run(
            model, chip, chips, tp, prompt, gen, concurrency, max_ttft, max_tpot, d, kd, price, engine, draft,
            draft_tokens, acceptance, prefix_hit, rate, requests, num_requests, seed, policy=policy, ep=ep,
            attention_dp=attention_dp, redundant_experts=redundant_experts, pp=pp,
            mem_fraction_static=mem_fraction_static, swa_full_tokens_ratio=swa_full_tokens_ratio,
            gpu_memory_utilization=gpu_memory_utilization)))
    if share is not None:
        check_share_engine(mem_fraction_static, engine, chip, gpu_memory_utilization)
    from aicalc.api.catalog import node_count, node_split

    chosen = None  # the TP picked for a chip without --tp (a note says so)
    if tp is None and node_count(chip) == 1:
        from aicalc.api.serving import default_layout
        from aicalc.sweep import int_sweep

        load = "max" if concurrency is None or str(concurrency).strip().lower() == "max" else \
            int_sweep(concurrency, "--concurrency")
        tp, holds = default_layout(model, chip, None if chips is None else int(chips), concurrency=load, pp=pp,
                                   prompt=int_sweep(prompt, "--prompt"), gen=int_sweep(gen, "--gen"), dtype=dtype,
                                   kv_dtype=kv_dtype, engine=engine, ep=ep, attention_dp=attention_dp,
                                   redundant_experts=redundant_experts, utilization=share,
                                   swa_full_tokens_ratio=ratio)
        chosen = tp
    tp, chips = node_split(chip, tp, chips)  # a node: its chips, one TP group unless --tp splits it
    if rate is not None or requests is not None:
        return _traffic(model, chip, chips, tp, prompt, gen, max_ttft, max_tpot, dtype, kv_dtype, engine, rate,
                        requests, num_requests, seed, policy, ep, attention_dp, pp, share)

    from aicalc.api.serving import max_concurrency, serve, tp_pool
    from aicalc.catalog.profiles import release_note
    from aicalc.commands.options import (
        cost_note,
        engine_default,
        engine_release,
        links_note,
        memory_inputs,
        memory_notes,
        price_per_hour,
    )
    from aicalc.core.serving import concurrency_ladder
    from aicalc.sweep import grid, int_sweep

    prompts, gens = int_sweep(prompt, "--prompt"), int_sweep(gen, "--gen")
    tp = int(tp)
    spec = model  # the model read once where the KV budget is asked for first (it reads the model first)
    if concurrency is None or str(concurrency).strip().lower() == "max":
        from aicalc.api.catalog import load_model

        spec = load_model(model)
    if str(concurrency).strip().lower() == "max":  # as many requests as the KV cache holds
        conc = [float(max(1, max_concurrency(spec, chip, tp=tp, chips=chips, prompt=prompts, gen=gens, dtype=dtype,
                                             kv_dtype=kv_dtype, engine=engine, ep=ep, attention_dp=attention_dp,
                                             redundant_experts=redundant_experts, pp=pp, utilization=share,
                                             swa_full_tokens_ratio=ratio)))]
    elif concurrency is None:
        conc = concurrency_ladder(max_concurrency(spec, chip, tp=tp, chips=chips, prompt=prompts, gen=gens,
                                                  dtype=dtype, kv_dtype=kv_dtype, engine=engine, ep=ep,
                                                  attention_dp=attention_dp, redundant_experts=redundant_experts,
                                                  pp=pp, utilization=share, swa_full_tokens_ratio=ratio),
                                  (int(chips) // (tp * pp)) if chips is not None else 1)
    else:
        conc = int_sweep(concurrency, "--concurrency")
    g = grid(concurrency=conc, prompt=prompts, gen=gens)
    r = serve(spec, chip, g["concurrency"], g["prompt"], g["gen"], tp=tp, chips=chips, dtype=dtype,
              kv_dtype=kv_dtype, max_ttft=max_ttft, max_tpot=max_tpot, price=price_per_hour(price), engine=engine,
              draft=draft,
              draft_tokens=int(draft_tokens), acceptance=acceptance, prefix_hit=_share(prefix_hit), ep=ep,
              attention_dp=attention_dp, redundant_experts=redundant_experts, pp=pp, utilization=share,
              swa_full_tokens_ratio=ratio)
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
    if ep > 1 or attention_dp > 1:
        columns[columns.index("batch_per_replica"):columns.index("batch_per_replica")] = ["ep", "attention_dp"]
    if redundant_experts:
        columns.insert(columns.index("ep") + 1, "redundant_experts")
    if pp > 1:
        columns.insert(columns.index("batch_per_replica"), "pp")
    dtype = cs.dtype_label
    n_chips = _count(c["chips_needed"]) if sram and chips is None else m["chips"]
    inputs = {"model": cs.model.id, "chip": cs.chip.id, "chips": m["chips"] if not sram else chips, "tp": tp,
              "pp": pp, "ep": ep, "attention_dp": attention_dp, "redundant_experts": int(redundant_experts),
              "replicas": m["replicas"], "prompt": prompts, "gen": gens,
              "concurrency": None if concurrency is None else conc,
              "max_ttft_s": m["max_ttft"], "max_tpot_s": m["max_tpot"], "dtype": dtype, "kv_dtype": kv_dtype,
              "compute_dtype": cs.compute_dtype, "engine": cs.engine,
              "engine_release": engine_release(cs.engine), "chip_class": cs.chip_class,
              "draft": draft, "draft_tokens": int(draft_tokens) if draft else None,
              "acceptance": float(_share(acceptance)) if draft else None, "prefix_hit": _share(prefix_hit),
              "efficiency_sources": list(cs.sources), "price_per_chip_hour_usd": price_v,
              "gpu_memory_utilization": m["utilization"], **memory_inputs(m["memory"], ratio)}
    notes = [*answer, "continuous batching in steady state: TPOT = decode step + the batched prefills interleaved per step; "
             "TTFT = own batch's prefill + one running decode step (docs/serve.md)",
             f"efficiency: engine {release_note(cs.engine)} (presets/engines/{cs.engine}.yaml), chip class "
             f"{cs.chip_class} (presets/classes/{cs.chip_class}.yaml){engine_default(engine, cs.chip)}",
             cost_note(cs.chip, price_v, price is not None), *memory_notes(m["memory"], tp, pp, attention_dp)]
    if str(concurrency).strip().lower() == "max":
        notes.append(_admission(cs.engine_options, cs.chip))
    notes += links_note(cs, tp, pp, ep, attention_dp)
    if (cs.model.arch.moe is not None and ep == attention_dp == 1 and pp == 1 and not draft and not sram
            and concurrency is None and tp > 1 and fits.any()):
        notes += _moe_layout_note(cs, chip, tp, prompts, gens, dtype, kv_dtype, m["max_ttft"], m["max_tpot"], engine,
                                  c, ok if slo else fits)
    held = "one request" if concurrency is None or str(concurrency).strip().lower() == "max" else "the requests"
    server = tp_pool(chip) if chosen is not None and chips is None else 1
    if not sram and server > 1 and (chosen > 1 or not holds):
        # no --chips: one replica, as small as holds the weights and one request, of a server's chips
        notes.append(f"TP {tp}: the smallest tensor-parallel group (of up to {server} chips, one server) that "
                     f"holds the weights and one request (--tp or --chips sets it)" if holds else
                     f"TP {tp}: no tensor-parallel group of up to {server} chips (one server) holds the weights "
                     f"and one request; the largest runs (--tp, --pp or --chips sets it)")
    elif chosen is not None and not sram and chips is not None:  # an SRAM-only chip's replica spans the chips
        # its bytes fill, not a TP
        notes.append(f"TP {tp}: the smallest tensor-parallel degree whose replicas hold the weights and {held} on "
                     f"{int(m['chips'])} chips (--tp sets it)" if fits.all() else
                     f"TP {tp}: the largest tensor-parallel degree {int(m['chips'])} chips allow; no replica of "
                     f"them holds the weights and {held} (--tp sets it)")
    return Result("serve", inputs, Rows(r.columns), warnings=warnings, exit_code=exit_code, columns=columns,
                  notes=notes,
                  title=f"{cs.model.name} on {n_chips} × {cs.chip.name} (TP {tp}" + (f", PP {pp}" if pp > 1 else "")
                        + _parallel(ep, attention_dp)
                        + f", {_replicas(m['replicas'])}, {dtype})")


MOE_NOTE_GAIN = 1.2  # a MoE layout named beside plain TP where it serves at least this much more within the targets


def _moe_layout_note(cs, chip, tp, prompts, gens, dtype, kv_dtype, max_ttft, max_tpot, engine, c, ok) -> list[str]:
    """A MoE model served on plain TP (the ladder up to what its KV budget holds): the same chips with expert
    parallelism, attention TP or DP (:func:`aicalc.api.deployment.moe_layouts`, as ``serve --search`` tries them),
    where one serves :data:`MOE_NOTE_GAIN` or more output tokens/s at its best row (:func:`aicalc.api.serving.best_row`)
    than this table's best row within the targets (or that fits)."""
    import numpy as np

    from aicalc.api.deployment import moe_layouts
    from aicalc.api.serving import best_row
    from aicalc.errors import AicalcError

    if len(prompts) != 1 or len(gens) != 1:
        return []
    here = float(np.max(np.where(ok, c["output_tokens_per_s"], 0.0)))
    best = None
    for e, a in moe_layouts(cs.model.arch, tp)[1:]:
        try:
            row = best_row(cs.model, chip, tp=tp, prompt=prompts[0], gen=gens[0], dtype=dtype, kv_dtype=kv_dtype,
                           max_ttft=max_ttft, max_tpot=max_tpot, engine=engine, ep=e, attention_dp=a)
        except AicalcError:
            continue
        if row is not None and (row["meets_slo"] or max_ttft is None and max_tpot is None) and \
                (best is None or row["output_tokens_per_s"] > best[2]["output_tokens_per_s"]):
            best = (e, a, row)
    if best is None or best[2]["output_tokens_per_s"] < MOE_NOTE_GAIN * here:
        return []
    e, a, row = best
    how = "DP attention (SGLang's and TensorRT-LLM's DEP)" if a > 1 else "TP attention (vLLM's expert parallelism)"
    within = " within the targets" if max_ttft is not None or max_tpot is not None else ""
    return [f"a mixture of experts: the same {tp} chips with EP {e} and {how} serve {row['output_tokens_per_s']:,.0f} "
            f"output tokens/s{within} at concurrency {int(row['concurrency'])} (this table: {here:,.0f}); "
            f"--ep {e} --attention-dp {a} (serve --search ranks every layout)"]


def _count(chips) -> str:
    """``601`` or ``601-640``: the chips of the rows (SRAM-only chips: each row needs its own count)."""
    lo, hi = int(min(chips)), int(max(chips))
    return f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"


def _parallel(ep, attention_dp) -> str:
    """", EP 8, attention DP 8" for a replica's expert and attention-data parallelism (nothing where 1 or absent)."""
    return (f", EP {ep}" if (ep or 1) > 1 else "") + (f", attention DP {attention_dp}" if (attention_dp or 1) > 1 else "")


def _share(text) -> float:
    """``0.75`` or ``75%`` → 0.75 (0 allowed)."""
    from aicalc.errors import AicalcError

    t = str(text).strip()
    try:
        return float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise AicalcError(f"cannot read the share '{text}' (examples: 0.75, 75%)") from None


def _traffic(model, chip, chips, tp, prompt, gen, max_ttft, max_tpot, dtype, kv_dtype, engine, rate, requests,
             num_requests, seed, policy=None, ep=1, attention_dp=1, pp=1, share=None) -> Result:
    """serve with traffic: a discrete-event simulation of the scheduler (one row per arrival rate); ``pp``: each
    replica's pipeline stages, run with ``pp`` micro-batches in flight (:func:`aicalc.api.traffic.replica`);
    ``share``: SGLang's --mem-fraction-static (None: the engine's default)."""
    from aicalc.api.serving import kv_memory
    from aicalc.api.traffic import simulate
    from aicalc.commands.options import engines_note, links_note, memory_inputs, memory_notes
    from aicalc.sweep import sweep
    from aicalc.units import parse_int

    tp = int(tp)
    r = simulate(model, chip, sweep(rate, "--rate") if rate is not None else None, requests=requests,
                 prompt=parse_int(str(prompt), "--prompt"), gen=parse_int(str(gen), "--gen"),
                 num_requests=parse_int(str(num_requests), "--num-requests"), tp=tp, chips=chips, dtype=dtype,
                 kv_dtype=kv_dtype, engine=engine, max_ttft=max_ttft, max_tpot=max_tpot, seed=int(seed), policy=policy,
                 ep=ep, attention_dp=attention_dp, pp=pp, utilization=share)
    m = r.meta
    cs = m["setup"]
    memory = kv_memory(cs.chip, cs.engine_options, cs.model.arch, 0.0, tp, pp, attention_dp, share)  # its share
    src = f"trace {requests}" if requests else f"{r.requests[0]:,} requests of {prompt} + {gen} tokens, Poisson arrivals"
    inputs = {"model": cs.model.id, "chip": cs.chip.id, "chips": m["chips"], "tp": tp, "pp": pp, "ep": ep,
              "attention_dp": attention_dp, "replicas": m["replicas"], "rate": rate, "requests": requests, "prompt": prompt, "gen": gen, "max_ttft": max_ttft,
              "max_tpot": max_tpot, "dtype": dtype, "kv_dtype": kv_dtype, "engine": cs.engine, "seed": int(seed),
              "kv_blocks_per_replica": m["kv_blocks"], "policy": m["policy"], "max_seqs_per_replica": m["max_seqs"],
              "token_budget": m["token_budget"], "gpu_memory_utilization": memory.utilization,
              **memory_inputs(memory, None)}
    columns = ["rate", *(["pp"] if pp > 1 else []), "p50_ttft_s", "p99_ttft_s", "p50_tpot_s", "p99_tpot_s",
               "output_tokens_per_s", "goodput_requests_per_s", "preemptions"]
    kv = ("paged KV, prompt + output reserved at admission (no preemption)"
          if cs.engine_options.get("kv_reserve") == "full"
          else "paged KV with a 1 % admission watermark, preemption by recompute")
    notes = [f"{src}; discrete-event simulation of continuous batching per replica ({m['policy']} scheduling, "
             f"token budget {m['token_budget']}, at most {m['max_seqs']} sequences per replica, {kv}), step times from "
             "the cost model (docs/serve.md)",
             "goodput: requests per second meeting --max-ttft and --max-tpot (all requests when none is given)",
             engines_note([cs.chip.id], engine), *memory_notes(memory, tp, pp, attention_dp)]
    if pp > 1:
        notes.insert(1, f"pipeline: each replica's {pp} stages of {tp} chips hold their layers' weights and KV cache "
                        f"and run {pp} micro-batches in flight; a step is a round in which each passes every stage "
                        "(docs/serve.md)")
    notes += links_note(cs, tp, pp, ep, attention_dp)
    return Result("serve", inputs, r.rows(), warnings=r.warnings, columns=columns, notes=notes,
                  title=f"{cs.model.name} on {m['chips']} × {cs.chip.name} under traffic (TP {tp}"
                        + (f", PP {pp}" if pp > 1 else "") + _parallel(ep, attention_dp)
                        + f", {_replicas(m['replicas'])})")


def _search(model, chip, chips, tp, prompt, gen, max_ttft, max_tpot, dtype, kv_dtype, engine, draft, draft_tokens,
            acceptance, plot, traffic=None) -> Result:
    """serve --search: deployments over chips, TP, formats, aggregated and disaggregated, ranked by cost; with
    ``traffic`` (and --chips) each judged by its simulated p99 latencies at that rate."""
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
                           engine=engine, speculation=spec, moe_parallel=traffic is None)
    rows = r.meta["row_dicts"]
    if traffic is not None:
        from aicalc.api.fleet import simulate_deployments

        rows = simulate_deployments(model, rows, rate=traffic["rate"], requests=traffic["requests"],
                                    prompt=parse_int(str(prompt), "--prompt"), gen=parse_int(str(gen), "--gen"),
                                    num_requests=parse_int(str(traffic["num_requests"]), "--num-requests"),
                                    max_ttft=max_ttft, max_tpot=max_tpot, engine=engine, policy=traffic["policy"],
                                    seed=int(traffic["seed"]))
        rows.sort(key=lambda x: (not x["meets_slo"], x["usd_per_million_output_tokens"] is None,
                                 x["usd_per_million_output_tokens"] or 0.0, x["chips"]))
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
             f"best: {best['mode']} on {best['chips']} × {best['chip']}, TP {best['tp']}"
             + (f", PP {best['pp']}" if (best.get("pp") or 1) > 1 else "")
             + _parallel(best.get("ep"), best.get("attention_dp"))
             + f", {best['dtype']} / KV {best['kv_dtype']}", engines_note(chip_ids, engine)]
    if traffic is not None:
        notes.insert(1, f"meets_slo from the scheduler simulation at {rows[0]['rate']:.4g} requests/s: p99 TTFT "
                        "and TPOT of each deployment's replicas (a disaggregated one: its prefill pool, the KV "
                        "transfer, then its decode pool); drop --chips to size the fleet instead")
    moe = any(x.get("ep", 1) > 1 or x.get("attention_dp", 1) > 1 for x in rows)
    piped = any((x.get("pp") or 1) > 1 for x in rows)
    columns = ["mode", "chip", "chips", "tp", *(["pp"] if piped else []), *(["ep", "attention_dp"] if moe else []),
               "replicas", "prefill_replicas",
               "dtype", "kv_dtype", "ttft_s", "tpot_s", *(["p99_ttft_s", "p99_tpot_s"] if traffic is not None else []),
               "output_tokens_per_s_per_chip", "tokens_per_s_per_user", "usd_per_million_output_tokens", "meets_slo",
               "pareto"]
    inputs = {"model": model, "chips": chip_ids, "total_chips": n, "prompt": prompt, "gen": gen, "dtype": dtype,
              "kv_dtype": kv_dtype, "max_ttft": max_ttft, "max_tpot": max_tpot, "engine": engine, "search": True}
    return Result("serve", inputs, rows, exit_code=code, columns=columns, notes=notes, chart=chart,
                  title=f"{model}: serving deployments of {n} chips",
                  keep=["usd_per_million_output_tokens", "meets_slo"])  # the rank and the verdict


def _fleet(model, chip, tp, prompt, gen, max_ttft, max_tpot, dtype, kv_dtype, price, engine, rate, requests,
           requests_per_day, peak_factor, num_requests, seed, policy) -> Result:
    """serve --search with traffic and no --chips: the fewest chips of each layout that serve it within the
    targets (:func:`aicalc.api.fleet.size_fleet`), cheapest first."""
    from aicalc.api.fleet import size_fleet
    from aicalc.commands.options import price_per_hour
    from aicalc.errors import ExitCode
    from aicalc.sweep import int_sweep
    from aicalc.units import parse_count, parse_int

    chip_ids = [c for c in (chip if isinstance(chip, (list, tuple)) else str(chip).split(",")) if c]
    tps = None if tp is None else int_sweep(str(tp), "--tp")
    rpd = parse_count(str(requests_per_day), "--requests-per-day") if requests_per_day is not None else None
    r = size_fleet(model, chip_ids, rate=_one_rate(rate), requests=requests, requests_per_day=rpd,
                   peak_factor=float(_number(peak_factor, "--peak-factor")), prompt=parse_int(str(prompt), "--prompt"),
                   gen=parse_int(str(gen), "--gen"), num_requests=parse_int(str(num_requests), "--num-requests"),
                   max_ttft=max_ttft, max_tpot=max_tpot, dtypes=str(dtype).split(","), kv_dtypes=str(kv_dtype).split(","),
                   tps=tps, engine=engine, policy=policy, price=price_per_hour(price), seed=int(seed))
    m = r.meta
    rows = m["row_dicts"]
    targets = ", ".join(t for t in (f"TTFT ≤ {m['max_ttft']:g} s" if m["max_ttft"] < float("inf") else "",
                                    f"TPOT ≤ {m['max_tpot'] * 1e3:g} ms" if m["max_tpot"] < float("inf") else "") if t)
    src = f"trace {requests}" if requests else f"{m['requests']:,} requests of {prompt} + {gen} tokens, Poisson arrivals"
    notes = [f"the fewest chips per layout whose simulated p99 meets {targets or 'no target (none given)'} at "
             f"{m['rate']:.4g} requests/s"
             + (f" ({rpd:,.0f} a day × peak factor {peak_factor})" if rpd is not None else "")
             + f"; {src}; bisection on the replica count ({m['simulations']} simulations, {m['policy']} "
             "scheduling): one replica fewer misses the targets (docs/serve.md)",
             "disaggregated: prefill and decode pools each with their own TP (and chip), sized separately; the KV "
             "cache is shipped over the scale-out NIC; cost: chip presets' on-demand prices unless --price"]
    if rows:
        best = rows[0]
        notes.append(f"best: {best['mode']}, {best['chips']} × {best['chip']}"
                     + (f" (prefill TP {best['prefill_tp']} × {best['prefill_replicas']}, decode TP "
                        f"{best['decode_tp']} × {best['decode_replicas']})" if best["mode"] == "disaggregated"
                        else f" (TP {best['tp']}" + (f" × PP {best['pp']}" if (best.get("pp") or 1) > 1 else "")
                        + _parallel(best.get("ep"), best.get("attention_dp")) + f" × {best['replicas']})")
                     + (f", ${best['usd_per_day']:,.0f} a day" if best["usd_per_day"] else ""))
    moe = any((x.get("ep") or 1) > 1 for x in rows)
    piped = any((x.get("pp") or 1) > 1 for x in rows)
    columns = ["mode", "chip", "chips", "tp", *(["pp"] if piped else []), *(["ep", "attention_dp"] if moe else []),
               "replicas", "prefill_tp",
               "decode_tp", "dtype", "p99_ttft_s",
               "p99_tpot_s", "usd_per_hour", "usd_per_day", "usd_per_million_output_tokens", "meets_slo"]
    inputs = {"model": model, "chips": chip_ids, "rate": m["rate"], "requests_per_day": rpd,
              "peak_factor": float(_number(peak_factor, "--peak-factor")), "requests": requests, "prompt": prompt,
              "gen": gen, "num_requests": m["requests"], "dtype": dtype, "kv_dtype": kv_dtype,
              "max_ttft_s": m["max_ttft"] if m["max_ttft"] < float("inf") else None,
              "max_tpot_s": m["max_tpot"] if m["max_tpot"] < float("inf") else None, "engine": engine,
              "policy": m["policy"], "seed": int(seed), "search": True, "fleet": True}
    return Result("serve", inputs, rows, warnings=r.warnings, exit_code=ExitCode.OK if rows else ExitCode.BUDGET,
                  columns=columns, notes=notes, title=f"{model}: the fewest chips for {m['rate']:.4g} requests/s")


def _one_rate(rate):
    """--rate for a fleet: one number (a fleet is sized for one traffic)."""
    from aicalc.errors import ParameterError
    from aicalc.sweep import sweep

    if rate is None:
        return None
    values = sweep(str(rate), "--rate")
    if len(values) != 1:
        raise ParameterError("rate", rate, "sizes one fleet: give one rate with --search")
    return values[0]


def _number(text, flag: str) -> float:
    from aicalc.errors import ParameterError

    try:
        return float(str(text).strip())
    except ValueError:
        raise ParameterError(flag.lstrip("-").replace("-", "_"), text, "is not a number") from None


def _replicas(n: int) -> str:
    return f"{n} replica{'' if n == 1 else 's'}"


def launch(result: Result, engine: str, draft=None, draft_tokens=4) -> Result:
    """serve --emit: the launch commands of the deployment ``result`` estimated (with --search, of its best row),
    one row per pool. The sequence cap is the concurrency per replica the estimate used; the memory share, the
    token budget and the maximum length (prompt + gen) are the estimate's own."""
    import math

    from aicalc.api.emit import NAMES, RELEASES, launch_commands
    from aicalc.api.traffic import DEFAULT_SEQS
    from aicalc.core.capacity import DEFAULT_UTILIZATION
    from aicalc.core.serving import TOKEN_BUDGET
    from aicalc.errors import AicalcError
    from aicalc.sweep import int_sweep

    inp = result.inputs
    rows = result.rows
    prompt = max(int_sweep(str(_axis_text(inp["prompt"])), "--prompt"))
    gen = max(int_sweep(str(_axis_text(inp["gen"])), "--gen"))
    utilization = inp.get("gpu_memory_utilization") or DEFAULT_UTILIZATION  # the estimate's share of memory
    budget = TOKEN_BUDGET  # the step's batched tokens the estimate ran with (the fleet's pinned, serve's fixed batch)
    if inp.get("fleet"):  # the fleet search's cheapest row: simulated with the scheduler's sequence cap
        if not rows:
            e = AicalcError("no fleet meets the targets: nothing to launch")
            e.exit_code = ExitCode.BUDGET
            raise e
        best = dict(rows[0], max_num_seqs=DEFAULT_SEQS)  # the fleet's replicas run at most that many
        model = inp["model"]
        if best["mode"] == "disaggregated":  # a fleet row counts both pools' replicas; emit takes the decode pool's
            chip, best["replicas"] = best["decode_chip"], best["decode_replicas"]
        else:
            chip = best["chip"]
        picked = (f"the cheapest of {len(rows)} fleets ({best['mode']}, {best['chips']} chips); its scheduler runs "
                  "at most max_seqs sequences per replica")
    elif inp.get("search"):
        best = dict(rows[0])
        chip, model = best["chip"], inp["model"]
        best["max_num_seqs"] = math.ceil(best["concurrency"] / max(1, best["replicas"]))
        picked = f"the best of {len(rows)} deployments ({best['mode']}, {best['chips']} × {chip})"
        if not best.get("meets_slo", True):
            picked += "; it misses the latency targets"
    elif "rate" in inp:  # traffic: the simulator's scheduler cap
        chip, model = inp["chip"], inp["model"]
        best = {"tp": inp["tp"], "replicas": inp["replicas"], "dtype": inp["dtype"], "kv_dtype": inp["kv_dtype"],
                "max_num_seqs": inp["max_seqs_per_replica"]}
        budget = int(inp.get("token_budget") or budget)  # the simulated step's, launched as it ran
        best.update({k: rows[0][k] for k in ("ep", "attention_dp", "pp") if rows and k in rows[0]})
        picked = "the simulated deployment (its scheduler runs at most max_seqs sequences per replica)"
    else:
        chip, model = inp["chip"], inp["model"]
        slo = inp.get("max_ttft_s") is not None or inp.get("max_tpot_s") is not None
        meeting = [r for r in rows if r.get("meets_slo")] if slo else []
        ok = meeting or [r for r in rows if r.get("fits")]
        if not ok:
            e = AicalcError("no concurrency of this deployment fits the chips' memory: nothing to launch")
            e.exit_code = ExitCode.BUDGET
            raise e
        row = max(ok, key=lambda r: r["output_tokens_per_s"])
        best = dict(row, tp=inp["tp"], replicas=inp["replicas"], dtype=inp["dtype"], kv_dtype=inp["kv_dtype"],
                    max_num_seqs=int(row["batch_per_replica"]))
        picked = (f"concurrency {int(row['concurrency'])}, "
                  + ("the fastest row meeting the targets" if meeting else "the fastest row that fits"
                     + ("; no row meets the targets" if slo else "")))
    cmds = launch_commands(engine, model, chip, best, max_model_len=prompt + gen, utilization=utilization,
                           draft=draft, draft_tokens=int(draft_tokens), token_budget=budget)
    notes = [f"{NAMES[engine]} {RELEASES[engine]}: every flag checked against the release's argument definitions "
             "(tests/data/engine_args.json)", f"deployment: {picked}",
             f"max sequences per replica {int(best['max_num_seqs'])} (the estimate's concurrency per replica), "
             f"memory share {utilization:g}, max length {prompt + gen} (prompt {prompt} + gen {gen})"]
    notes += [n for c in cmds for n in c.notes]
    out_rows = [c.row() for c in cmds]
    return Result("serve", dict(inp, emit=engine, engine_version=RELEASES[engine]), out_rows,
                  warnings=list(result.warnings), exit_code=result.exit_code,
                  columns=["pool", "chip", "replicas", "chips_per_replica", "command"], notes=notes,
                  title=f"{NAMES[engine]} launch commands: {result.title or model}")


def script(result: Result) -> str:
    """The launch commands of :func:`launch` as a shell script: what each runs on, then the command."""
    lines = [f"# {result.title}"] + [f"# {n}" for n in result.notes] + [f"# warning: {w}" for w in result.warnings]
    for r in result.rows:
        lines += ["", f"# {r['pool']} pool: {r['replicas']} {'replica' if r['replicas'] == 1 else 'replicas'} of "
                      f"{r['chips_per_replica']} × {r['chip']}; run on each:",
                  r["command"]]
    return "\n".join(lines) + "\n"


def _axis_text(value) -> str:
    """A prompt/gen input as given (a string, a number or a list of them) → a sweep string."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(int(v)) for v in value)
    return str(value)


def launch_emit(one, chip, tp, chips, dtype, kv_dtype, search, engine, draft, draft_tokens, render, write) -> int:
    """The CLI's serve --emit: one deployment (or the best of --search), its launch commands written as a shell
    script with ``write`` (table format) or rendered as rows."""
    from aicalc.api.emit import check_engine
    from aicalc.errors import AicalcError

    for c in chip:  # before any estimate: an engine that cannot run on the chip is bad input, whatever fits
        for one_chip in str(c).split(","):
            check_engine(engine, one_chip.strip())
    if not search:
        many = [f"--{k}" for k, v in (("chip", ",".join(chip)), ("tp", tp), ("chips", chips), ("dtype", dtype),
                                      ("kv-dtype", kv_dtype)) if v is not None and ("," in str(v) or ":" in str(v))]
        if len(chip) > 1 and "--chip" not in many:
            many.insert(0, "--chip")
        if many:
            raise AicalcError(f"--emit launches one deployment: give one value of {', '.join(many)} (or --search "
                              "to emit the best)")
    result = launch(one(",".join(chip)) if search else one(chip[0]), engine, draft, draft_tokens)
    if write is None:
        return render(result)
    write(script(result))
    return int(result.exit_code)


def _admission(opts: dict, chip) -> str:
    """How --concurrency max was counted: the KV budget at what the engine's scheduler holds per request, capped
    by its sequence limit on ``chip`` (``opts``: the engine profile's options)."""
    held = ("prompt + gen reserved per request at admission (the engine's no-evict capacity policy)"
            if opts.get("kv_reserve") == "full" else "prompt + gen/2 held per request on average")
    from aicalc.catalog.profiles import max_running

    seqs = max_running(opts, chip)
    cap = f", at most {seqs} per scheduler (its max_num_seqs on this chip)" if seqs else ""
    if opts.get("max_running_from_pool"):
        cap += (", at most the engine's max_running_requests per scheduler (derived from its KV pool and the "
                "model's context length)")
    return f"concurrency max: as many requests as the KV budget holds, {held}{cap}"


def memory_options(mem_fraction_static, swa_full_tokens_ratio, gpu_memory_utilization=None
                   ) -> tuple[float | None, float | None]:
    """(the engine's share of each device's memory, --swa-full-tokens-ratio) as numbers, None where not given: the
    share from --mem-fraction-static (SGLang's) or --gpu-memory-utilization (vLLM's gpu_memory_utilization,
    TensorRT-LLM's free_gpu_memory_fraction; the generic engine's), a fraction in (0, 1] (``0.85`` or ``85%``), at
    most one of them; a bad value is one line naming the flag (exit 2)."""
    from aicalc.api import inputs
    from aicalc.errors import ParameterError

    if mem_fraction_static is not None and gpu_memory_utilization is not None:
        raise ParameterError("gpu_memory_utilization", gpu_memory_utilization, "and {mem_fraction_static} both give "
                             "the engine's share of memory: give the one of the estimate's engine")
    share = None if mem_fraction_static is None else inputs.fraction("mem_fraction_static", mem_fraction_static)
    if gpu_memory_utilization is not None:
        share = inputs.fraction("gpu_memory_utilization", gpu_memory_utilization)
    ratio = None
    if swa_full_tokens_ratio is not None:
        from aicalc.catalog.profiles import _ratio
        from aicalc.errors import ParameterError

        try:
            ratio = float(str(swa_full_tokens_ratio).strip())
        except ValueError:
            raise ParameterError("swa_full_tokens_ratio", swa_full_tokens_ratio, "is not a number (examples: 0.8, "
                                 "0.1)") from None
        problem = _ratio(ratio)
        if problem:
            raise ParameterError("swa_full_tokens_ratio", swa_full_tokens_ratio, problem.split(", got")[0])
    return share, ratio


def check_share_engine(given, engine, chip, utilization=None) -> None:
    """--mem-fraction-static (``given``) is SGLang's: refused (exit 2) for an engine whose profile gives weights and
    KV cache no share of memory of its own (every engine but sglang; ``engine`` None: the chip's default);
    --gpu-memory-utilization (``utilization``) is every other engine's: refused for SGLang, whose flag is the
    other."""
    from aicalc.catalog import profiles

    for one in str(chip).split(","):
        if not one.strip():
            continue
        from aicalc.api.catalog import load_node_or_chip

        eng = profiles.load("engine", engine or profiles.default_engine(load_node_or_chip(one.strip())[0]))
        sglang = bool(eng.options.get("mem_fraction_static_reserve"))
        if utilization is not None and sglang:
            from aicalc.errors import ParameterError

            raise ParameterError("gpu_memory_utilization", utilization, f"is vLLM's and TensorRT-LLM's share of "
                                 f"memory; {eng.id}'s is {{mem_fraction_static}}")
        if utilization is None and not sglang:
            from aicalc.errors import ParameterError

            raise ParameterError("mem_fraction_static", given, f"is SGLang's share of memory for weights and KV "
                                 f"cache: give it with --engine sglang (the estimate's engine is {eng.id})")
