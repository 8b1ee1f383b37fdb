"""``aicalc train-time``: FLOPs per token, step time, MFU, total time and chip-hours of a training run."""

from __future__ import annotations

from aicalc.errors import ExitCode, ParameterError
from aicalc.result import Result


def run(model: str, chip="h100-sxm", tokens="1T", seq="4096", global_batch="1024", micro_batch=None, tp=None, pp=None,
        dp=None, chips=None, mfu="auto", achieved=None, recompute: str | None = None, attention: str = "flash",
        sequence_parallel: bool = True, interleave: int | None = None, zero=None, precision: str = "bf16",
        dp_bandwidth=None, eff=None, framework: str | None = None, search: bool = False, top: int = 10,
        cp: int | None = None, ep: int | None = None, goodput="1", price=None, etp=None, first_stage_layers=None,
        last_stage_layers=None, attention_flops: str = "causal", fp8_attention: bool = False) -> Result:
    """A layout option left unset (None) takes its default (micro-batch 1, TP 1, PP 1, no interleave, CP 1, EP 1,
    the framework's ZeRO stage and recompute: presets/frameworks/); with ``chips`` and none of them set, a default
    that does not fit gives way to the fastest layout that does (``--search``'s first row)."""
    import numpy as np

    laid_out = any(v is not None for v in (micro_batch, tp, pp, dp, recompute, interleave, zero, cp, ep, etp,
                                           first_stage_layers, last_stage_layers))
    named = framework is not None  # a TPU run priced with Megatron's profile says how to price MaxText's
    framework = framework or "megatron"
    if not named:
        from aicalc.api.catalog import load_model

        if load_model(model).arch.encoder:  # BERT/RoBERTa train under transformers' Trainer: DDP/FSDP, no recompute
            framework, recompute = "fsdp", recompute or "none"
    micro_batch, tp, pp = micro_batch or "1", tp or "1", pp or "1"
    interleave, cp, ep = interleave or 1, cp or 1, ep or 1

    from aicalc.api.train_time import train_time
    from aicalc.commands.options import cost_note, efficiency_overrides, price_per_hour, time_attention
    from aicalc.sweep import grid, int_sweep
    from aicalc.units import parse_count, parse_int

    attention = time_attention(attention)
    if str(precision) in ("bf16-mixed", "fp16-mixed", "fp8-mixed"):  # train-mem's names: the same math dtype
        precision = str(precision).removesuffix("-mixed")

    from aicalc.catalog import profiles

    fw_options = profiles.load("framework", framework).options
    if zero is None:  # the framework's usual stage (presets/frameworks/: Megatron's distributed optimizer, FSDP)
        zero = int(fw_options.get("default_zero", 0))
    if recompute is None:  # its recipes' (Megatron's selective, torchtitan's op-level SAC, none under FSDP/DeepSpeed)
        recompute = fw_options.get("default_recompute", "selective")
    if chips is None and dp is None:  # a node: a data-parallel job over its chips (or the chips to search)
        from aicalc.api.catalog import node_count

        chips = str(node_count(chip)) if node_count(chip) > 1 else None
    if search and fp8_attention:  # the layout search prices 16-bit attention (search_train_layouts)
        raise ParameterError("fp8_attention", fp8_attention, "is not searched over: price a layout without --search")
    if search:
        return _search(model, chip, tokens, seq, global_batch, chips, recompute, zero, precision, dp_bandwidth,
                       framework, top, price)
    tps, pps = int_sweep(tp, "--tp"), int_sweep(pp, "--pp")
    dps = int_sweep(dp, "--dp") if dp is not None else ([1] if chips is None else [0])
    g = grid(tp=tps, pp=pps, dp=dps, seq=int_sweep(seq, "--seq"), global_batch=int_sweep(global_batch, "--global-batch"),
             micro_batch=int_sweep(micro_batch, "--micro-batch"))
    if chips is not None:
        n = parse_int(str(chips), "--chips")
        mp = g["tp"] * g["pp"] * int(cp)
        if dp is None:  # dp = chips / (tp·pp·cp)
            if np.any(n % mp):
                raise ParameterError("chips", n, "is not a multiple of tp × pp × cp")
            g["dp"] = n // mp
        elif np.any(mp * g["dp"] != n):
            raise ParameterError("chips", n, "does not equal tp × pp × cp × dp")
    auto = str(mfu).lower() == "auto"
    r = train_time(model, chip, parse_count(str(tokens), "--tokens"), seq=g["seq"], global_batch=g["global_batch"],
                   micro_batch=g["micro_batch"], tp=g["tp"], pp=g["pp"], dp=g["dp"],
                   mfu=None if auto or achieved else mfu, achieved=achieved, recompute=recompute,
                   attention=attention, sequence_parallel=sequence_parallel, interleave=int(interleave),
                   zero=int(zero), precision=precision, dp_bandwidth=dp_bandwidth,
                   efficiency=efficiency_overrides(eff), framework=framework, cp=int(cp), ep=int(ep),
                   goodput=goodput, price=price_per_hour(price), etp=etp, first_stage_layers=first_stage_layers,
                   last_stage_layers=last_stage_layers, attention_flops=attention_flops, fp8_attention=fp8_attention)
    m = r.meta
    tc, spec, chip_obj = m["train_chip"], m["model"], m["chip"]
    inputs = {"model": spec.id, "chip": chip_obj.id, "tokens": float(r.tokens[0]), "seq": seq,
              "global_batch": global_batch, "micro_batch": micro_batch, "tp": tp, "pp": pp, "dp": dp, "chips": chips,
              "mfu": mfu, "achieved": achieved, "recompute": recompute, "attention": attention,
              "sequence_parallel": sequence_parallel, "interleave": interleave, "zero": zero, "precision": precision,
              "dp_bandwidth_bytes_per_s": tc.dp_bytes_per_s, "efficiency": m["efficiency"].as_dict(), "cp": cp,
              "ep": ep, "etp": etp, "first_stage_layers": first_stage_layers, "last_stage_layers": last_stage_layers,
              "goodput": goodput, "price_per_chip_hour_usd": m["price"], "attention_flops": attention_flops,
              "fp8_attention": fp8_attention}
    attn = "6·L·s·A·d (causal)" if attention_flops == "causal" else "12·L·s·A·d (full attention)"
    head = " + 6·V·H"
    if spec.arch.encoder:  # bidirectional attention over all keys; a classifier on the first token, no LM head
        attn, head = "12·L·s·A·d (an encoder attends both ways)", ""
    notes = [f"MFU {m['mfu_source']}; model FLOPs = 6·N_mm + {attn}{head} per token (TT-01; --attention-flops); "
             "ideal = bare roofline of the same layout (no efficiency factors)",
             *(["Mamba hybrid: model FLOPs as Megatron-Bridge's hybrid_flops counts them (Mamba layers with "
                "d_in = 2·H, no router) for comparison with its Model TFLOP/s; hardware FLOPs add the SSD scan "
                "(docs/catalog.md)"] if spec.arch.mamba_layers else []),
             f"peak {tc.peak_flop_per_s / 1e12:,.1f} TFLOP/s dense {precision} per chip; DP network "
             f"{tc.dp_bytes_per_s / 1e9:,.0f} GB/s per chip per direction (--dp-bandwidth)",
             cost_note(chip_obj, m["price"], price is not None)]
    if spec.arch.indexer is not None:  # DSA: the continued pre-training's sparse stage (aicalc.core.indexer)
        notes.append(f"sparse attention (DSA): the estimate is of the sparse training stage, every layer's attention "
                     f"over the top {spec.arch.indexer.topk:,} tokens plus the lightning indexer over all of them; "
                     "the dense warm-up stage that trains the indexer alone is not modelled (docs/catalog.md)")
    if spec.arch.compressed is not None:  # DeepSeek-V4 (aicalc.core.compressed_attention.training_terms)
        c = spec.arch.compressed
        notes.append(f"DeepSeek-V4 attention: the 6·L·s·A·d term is each token over its {c.window:,}-token window, the "
                     f"top {c.index_topk:,} CSA entries (1 per {c.csa_ratio} tokens) and every HCA entry (1 per "
                     f"{c.hca_ratio}), plus the compressors', indexers' and mHC projections in N_mm and the CSA "
                     "indexers' scoring (docs/catalog.md)")
    fw = profiles.load("framework", framework)
    gen = fw.options["by_generation"].get(chip_obj.generation or "", ({}, {}))[0]
    releases = profiles.families("framework").get(fw.options["family"], ()) if fw.options.get("family") else ()
    notes.append(f"framework {profiles.release_note(framework, 'framework')}"
                 + (f"; on {chip_obj.generation}: " + ", ".join(f"{k} {v:g}" for k, v in gen.items()) if gen else "")
                 + (f" (releases: {', '.join(releases)}; --framework)" if len(releases) > 1 else ""))
    if not named and profiles.chip_class(chip_obj) == "tpu":
        notes.append("on a TPU the chip's own stack is MaxText: --framework fsdp prices its FSDP over the slice, as "
                     "MaxText's published runs were priced (docs/validation-train.md, training-tpu; fits then by "
                     "train-mem's transformers memory model, --recompute full or none)")
    from aicalc.commands.options import stage_notes
    from aicalc.core.train_peak import TrainSetup

    notes += stage_notes(spec.arch, sorted({int(p) for p in np.ravel(r.pp)}),
                          TrainSetup(ep=int(ep), etp=etp, virtual_stages=int(interleave),
                                     first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers))
    c = r.columns
    xla = profiles_class(chip_obj) == "tpu"
    if sequence_parallel and not xla and np.any((c["seq"] / int(cp)) % c["tp"]):
        notes.append("sequence parallelism: a tp that does not divide the tokens per context-parallel rank pads them "
                     "to a multiple of tp (memory counts the padding; step time ignores its < tp tokens)")
    if xla and np.any(c["tp"] > 1):
        notes.append(f"{chip_obj.id}: XLA shards activations over the model axis (no Megatron sequence parallelism, "
                     "no padding)")
    if np.any(r.pp > 1):
        notes.append("pipeline time follows its slowest stage: the bottleneck rank's layers (+ the LM head on the "
                     "last) per micro-batch, for the m micro-batches and the (pp − 1)/v bubble slots")
    # the answers first: a narrow terminal gives way from the right (fits always stays)
    columns = ["tp", "pp", "dp", *(["ep", "etp"] if int(ep) > 1 else []), "chips", "global_batch", "total_time_s",
               "chip_hours",
               *(["cost_usd"] if m["price"] else []), "mfu", "tokens_per_s", "step_s", "ideal_mfu",
               "model_flop_per_s_per_chip"]
    rows, warnings, code, title_note = r.rows(), list(r.warnings), 0, ""
    # does each layout fit? train-mem's reserved peak of the same layout against the chip's memory
    from aicalc.api.train_time import layout_memory

    c = r.columns
    peak, fits = layout_memory(spec.id, chip_obj.id, micro_batch=c["micro_batch"], seq=c["seq"], dp=c["dp"],
                               tp=c["tp"], pp=c["pp"], zero=int(zero), recompute=recompute, framework=framework,
                               interleave=int(interleave), cp=int(cp), ep=int(ep), precision=precision,
                               etp=etp, first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers)
    if peak is not None:
        for i, row in enumerate(rows):
            row["peak_reserved_bytes"], row["fits"] = float(peak[i]), bool(fits[i])
        columns += ["peak_reserved_bytes", "fits"]
        notes.append("fits: train-mem's reserved peak of the same layout (mixed precision, flash attention, "
                     f"{'Megatron' if profiles.family(profiles.load('framework', framework)) == 'megatron' else 'transformers'} "
                     f"activations) within "
                     f"{chip_obj.id}'s memory; train-mem shows the breakdown")
        if not fits.all():
            warnings.append(f"{int((~fits).sum())} of {fits.size} layouts do not fit {chip_obj.id}'s memory (try more "
                            "tp/pp, --zero 3, --recompute full, or train-time --search)")
            code = 1
            # the verdict first: time, MFU and cost of a layout that cannot run are not the answer
            columns = [*columns[:5], "fits", "peak_reserved_bytes",
                       *(k for k in columns[5:] if k not in ("fits", "peak_reserved_bytes"))]
            title_note = (" — does not fit: its time, MFU and cost are of a run that cannot start" if not fits.any()
                          else f" — {int((~fits).sum())} of {fits.size} layouts do not fit")
            if not laid_out and chips is not None and len(rows) == 1:
                best = _fastest_fitting(model, chip, tokens, seq, global_batch, chips, precision, dp_bandwidth,
                                        framework, price)
                if best is not None:  # no layout asked for and the default does not fit: the search's fastest
                    r2 = run(model, chip, tokens, seq, global_batch, micro_batch=str(best["micro_batch"]),
                             tp=str(best["tp"]), pp=str(best["pp"]), chips=chips, mfu=mfu, achieved=achieved,
                             recompute=best["recompute"], attention=attention, sequence_parallel=sequence_parallel,
                             zero=best["zero"], precision=precision, dp_bandwidth=dp_bandwidth, eff=eff,
                             framework=framework if named else None, top=top, ep=best["ep"], goodput=goodput,
                             price=price, etp=best["etp"] if best["ep"] > 1 else None, attention_flops=attention_flops,
                             fp8_attention=fp8_attention)
                    r2.notes.append(
                        f"layout: none was given and the default (TP 1 × DP {int(c['dp'][0])}, ZeRO-{int(zero)}, "
                        f"recompute {recompute}) does not fit {chip_obj.id}; this is the fastest that fits (TP "
                        f"{best['tp']} × PP {best['pp']}" + (f", EP {best['ep']}" if best["ep"] > 1 else "")
                        + f", ZeRO-{best['zero']}, recompute {best['recompute']}, micro-batch {best['micro_batch']}"
                        "; train-time --search lists the others, --tp, --pp, --ep, --zero, --recompute set one)")
                    return r2
    else:
        notes.append("fits: not judged (train-mem models selective recompute for Megatron only)")
    if np.any(r.columns["ideal_mfu"] > 1.0):
        notes.append("ideal MFU above 100 %: model FLOPs count every query against all s keys (Megatron's and "
                     "PaLM's convention), while a causal kernel computes about half of the scores")
    return Result("train-time", inputs, rows, warnings=warnings, title=f"{spec.id} on {chip_obj.id}{title_note}",
                  notes=notes, columns=columns, exit_code=code)


def _fastest_fitting(model, chip, tokens, seq, global_batch, chips, precision, dp_bandwidth, framework, price):
    """The fastest layout of ``--chips`` that fits (``--search``'s first row) as plain values, or None when none
    fits or the search cannot run (a sweep of seq or batch, a layout-less chip count)."""
    from aicalc.api.train_time import search_train_layouts
    from aicalc.commands.options import price_per_hour
    from aicalc.errors import AicalcError
    from aicalc.sweep import int_sweep
    from aicalc.units import parse_count, parse_int

    try:
        seqs, batches = int_sweep(seq, "--seq"), int_sweep(global_batch, "--global-batch")
        if len(seqs) != 1 or len(batches) != 1:
            return None
        r = search_train_layouts(model, chip, parse_int(str(chips), "--chips"), parse_count(str(tokens), "--tokens"),
                                 seq=seqs[0], global_batch=batches[0], precision=precision,
                                 dp_bandwidth=dp_bandwidth, framework=framework, top=1, price=price_per_hour(price))
    except AicalcError:
        return None
    if not len(r) or not bool(r["fits"][0]):
        return None
    return {k: (str(r[k][0]) if k == "recompute" else int(r[k][0]))
            for k in ("tp", "pp", "ep", "etp", "micro_batch", "recompute", "zero")}


def profiles_class(chip_obj) -> str:
    from aicalc.catalog import profiles

    return profiles.chip_class(chip_obj)


def _search(model, chip, tokens, seq, global_batch, chips, recompute, zero, precision, dp_bandwidth, framework,
            top, price=None) -> Result:
    """``--search``: the fastest TP × PP × DP × micro-batch × recompute × ZeRO layouts of ``--chips`` that fit."""
    from aicalc.api.train_time import search_train_layouts
    from aicalc.commands.options import cost_note, price_per_hour
    from aicalc.sweep import int_sweep
    from aicalc.units import parse_count, parse_int

    if chips is None:
        from aicalc.errors import AicalcError

        raise AicalcError("--search needs --chips N, the number of chips to lay the model out on (or a node id as "
                          "--chip)")
    n = parse_int(str(chips), "--chips")
    one = {}
    for flag, text in (("--seq", seq), ("--global-batch", global_batch)):
        values = int_sweep(text, flag)
        if len(values) != 1:
            from aicalc.errors import AicalcError

            raise AicalcError(f"--search takes one {flag} (it searches the layouts of that run), got '{text}'")
        one[flag] = values[0]
    r = search_train_layouts(model, chip, n, parse_count(str(tokens), "--tokens"), seq=one["--seq"],
                             global_batch=one["--global-batch"], precision=precision, dp_bandwidth=dp_bandwidth,
                             framework=framework, top=int(top), price=price_per_hour(price))
    m = r.meta
    inputs = {"model": m["model"].id, "chip": m["chip"].id, "chips": n, "tokens": float(r.tokens[0]), "seq": seq,
              "global_batch": global_batch, "precision": precision, "framework": framework, "search": True,
              "recompute": recompute, "zero": zero}
    notes = [f"{m['layouts_fit']} of {m['layouts']} layouts fit (train-mem's reserved peak within the chip's memory); "
             f"the {len(r)} fastest, ranked by total time (step model: docs/train-time.md)",
             cost_note(m["chip"], m["price"], price is not None)]
    columns = ["tp", "pp", "dp", *(["ep", "etp"] if m["model"].arch.moe is not None else []), "micro_batch",
               "recompute",
               "zero", "mfu", "tokens_per_s", "step_s", "total_time_s", "chip_hours",
               *(["cost_usd"] if m["price"] else []), "peak_reserved_bytes", "fits"]
    fit = m["layouts_fit"] > 0
    return Result("train-time", inputs, r.rows(), warnings=r.warnings,
                  title=f"{m['model'].id} on {n} × {m['chip'].id}: " +
                        ("fastest layouts that fit" if fit else "no layout fits; the fastest shown"), notes=notes,
                  columns=columns, exit_code=ExitCode.OK if fit else ExitCode.BUDGET,
                  keep=["total_time_s", *(["cost_usd"] if m["price"] else [])])  # the rank and its cost

