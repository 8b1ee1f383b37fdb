"""``aicalc compare``: training vs inference for one model, chip by chip, in one table
(:func:`aicalc.api.compare.compare`)."""

from __future__ import annotations

from aicalc.result import Result


def run(model: str, chip=None, tokens=None, seq="4096", prompt="1024", gen="256", dtype: str = "release",
        kv_dtype: str = "bf16", requests_per_day="1M", years=1.0, max_ttft="2s", max_tpot="200ms",
        price=None, peak_factor="1", engine=None, training=None) -> Result:
    from aicalc.commands.merge import choices, over

    if len(choices(dtype)) > 1 or len(choices(kv_dtype)) > 1:  # one table across formats
        return over("kv_dtype", choices(kv_dtype), lambda kd: over("dtype", choices(dtype), lambda d: run(
            model, chip, tokens, seq, prompt, gen, d, kd, requests_per_day, years, max_ttft, max_tpot, price,
            peak_factor, engine, training)))

    from aicalc.api.compare import compare
    from aicalc.commands.options import price_per_hour
    from aicalc.units import parse_count, parse_int

    given = [chip] if isinstance(chip, str) else list(chip or ["h100-sxm"])
    chips = [c.strip() for x in given for c in str(x).split(",") if c.strip()]  # repeated --chip or a comma list
    if not chips:
        from aicalc.errors import ParameterError

        raise ParameterError("chips", "", "names nothing: give at least one chip")
    r = compare(model, chips, tokens=parse_count(str(tokens), "--tokens") if tokens is not None else None,
                seq=parse_int(str(seq), "--seq"), prompt=parse_int(str(prompt), "--prompt"),
                gen=parse_int(str(gen), "--gen"), dtype=dtype, kv_dtype=kv_dtype,
                requests_per_day=parse_count(str(requests_per_day), "--requests-per-day"), years=years,
                max_ttft=max_ttft, max_tpot=max_tpot, price=price_per_hour(price), peak_factor=_peak(peak_factor),
                engine=engine, training=training)
    from aicalc.units import fmt_count

    m = r.meta
    n = m["params"]
    inputs = {"model": m["model"].id, "params": n.total, "active_params": n.active, "chips": chips,
              "training_tokens": m["tokens"], "training_seq": m["seq"], "prompt": m["prompt"], "gen": m["gen"],
              "dtype": dtype, "kv_dtype": kv_dtype, "requests_per_day": m["requests_per_day"], "years": m["years"],
              "max_ttft_s": m["max_ttft"], "max_tpot_s": m["max_tpot"],
              "price_per_chip_hour_usd": price_per_hour(price), "peak_factor": _peak(peak_factor), "engine": engine,
              "training": training}
    # the answers first: a narrow terminal gives way from the right (render.fit_columns), so the layout and
    # precision strings, long and in JSON anyway, come last
    # the costs the command exists to compare sit side by side and stay at any width (Result.keep)
    columns = ["chip", "phase", "training_cost_usd", "annual_inference_cost_usd", "chips_needed", "memory_bytes",
               "total_time_s", "ttft_s", "tpot_s", "output_tokens_per_s", "usd_per_million_output_tokens", "fleet_chips",
               "mfu",
               "batch", "bound", "layout", "precision"]
    notes = ["memory is per device; training: the fewest chips a train-mem layout with TP ≤ 8 fits on (Megatron: "
             "sequence parallel, flash attention; wider TP only where none fits; MoE with EP 8 to 64), the fastest of those layouts, "
             f"{fmt_count(m['tokens'])} tokens (Chinchilla's 20 per parameter unless --tokens); inference: the TP "
             "(from the smallest that holds it up to one 8-GPU server; a MoE model's also with EP and DP attention) "
             "that serves "
             f"{m['prompt']}+{m['gen']}-token requests at the least cost per token within TTFT ≤ {m['max_ttft']:g} s, "
             f"TPOT ≤ {m['max_tpot'] * 1e3:g} ms at its best concurrency",
             (f"cost: ${price_per_hour(price):,.2f} per chip-hour (--price)" if price is not None else
              f"cost: chip presets' on-demand prices{_unpriced(m['row_dicts'])}") + "; annual inference: the fleet "
             f"(fleet_chips) that serves {m['requests_per_day']:,.0f} requests/day"
             + (f" × peak factor {_peak(peak_factor):g}" if _peak(peak_factor) != 1 else " at the day's average rate")
             + " within the latency targets at the 99th percentile of the scheduler simulation, 365 days of its "
             "chip-hours (the search of serve --search; docs/compare.md)"]
    from aicalc.api.compare import ON_DEVICE_LAYOUT

    on_device = sorted({r["chip"] for r in m["row_dicts"] if r.get("layout") == ON_DEVICE_LAYOUT})
    if on_device:
        notes.append(f"on-device ({', '.join(on_device)}): one user at batch 1 on one device"
                     + ("" if training else "; no training row (--training adds it)"))
    notes.append(_engines(m["row_dicts"], engine))
    return Result("compare", inputs, m["row_dicts"], warnings=r.warnings, columns=columns, notes=notes,
                  title=f"{m['model'].name}: training vs inference",
                  keep=["chip", "phase", "training_cost_usd", "annual_inference_cost_usd", "fits"])


def _engines(rows: list[dict], given) -> str:
    """"inference engine: groq (…) on groq-lpu; generic on h100-sxm": the profile each chip's inference used."""
    from aicalc.catalog.profiles import release_note

    used = dict.fromkeys((r["engine"], r["chip"]) for r in rows if r.get("engine"))
    by: dict[str, list[str]] = {}
    for e, c in used:
        by.setdefault(e, []).append(c)
    how = "--engine" if given else "each chip's default engine; --engine chooses another"
    return "inference engine: " + "; ".join(f"{release_note(e)} on {', '.join(cs)}" for e, cs in by.items()) + \
        f" ({how})"


def _peak(text) -> float:
    from aicalc.errors import ParameterError

    try:
        return float(str(text).strip())
    except ValueError:
        raise ParameterError("peak_factor", text, "is not a number") from None


def _unpriced(rows: list[dict]) -> str:
    """" (none for gaudi3)": the chips whose presets give no on-demand price, so their cost cells are empty."""
    missing = sorted({r["chip"] for r in rows if r.get("phase") == "training" and r.get("training_cost_usd") is None
                      and r.get("chips_needed")})
    return f" (none for {', '.join(missing)})" if missing else ""
