"""``aicalc train-mem``: training and fine-tuning memory per device, itemized, and a layout search.

Flow: options → :func:`aicalc.api.train_memory.train_memory` (or ``search_layouts``) over the sweep grid →
Result. See docs/train-mem.md for what each number includes.
"""

from __future__ import annotations

from aicalc.errors import ExitCode
from aicalc.result import Result

SETUP = ("precision", "optimizer", "grad_dtype", "optimizer_dtype", "ep", "etp", "first_stage_layers",
         "last_stage_layers", "sp", "virtual_stages", "microbatches",
         "recompute", "framework", "attention", "lora_rank", "lora_targets", "lora_dtype", "loss",
         "optimizer_in_backward", "quant", "offload", "dropout", "adamw", "lora_dropout", "bnb_keeps_inputs",
         "bnb_fused_matmul", "compile", "fsdp_version", "fsdp_units", "grads_kept")


def run(model: str, batch="1", seq="2048", zero="0", dp=None, tp="1", pp="1", cp="1", chip=None, budget=None,
        overhead=None, search: bool = False, chips=None, top: int = 10, progress=None, trace: bool = False,
        **setup) -> Result:
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.train_memory import train_memory
    from aicalc.commands.options import memory_attention, stage_notes
    from aicalc.sweep import grid, sweep

    if "attention" in setup:
        setup["attention"] = memory_attention(setup["attention"])
    unknown = set(setup) - set(SETUP)
    if unknown:
        from aicalc.errors import AicalcError

        raise AicalcError(f"train-mem has no option {', '.join(sorted(unknown))}")
    if overhead is not None:
        setup["overhead"] = inputs.nbytes("overhead", overhead)
    budget = inputs.nbytes("budget", budget) if budget is not None else None
    zero_list = _stages(zero)
    batches, seqs = sweep(batch, "--batch"), sweep(seq, "--seq")
    if dp is None:  # --chips N or a node: the chips not used by tp·pp·cp hold data-parallel replicas
        dp = "1"
        if not search and (chips is not None or chip is not None):
            from aicalc.api.catalog import node_count

            n = int(chips) if chips is not None else node_count(chip)
            split = [str(x).strip() for x in (tp, pp, cp)]
            if n > 1 and all(x.isdigit() for x in split):
                model_parallel = int(split[0]) * int(split[1]) * int(split[2])
                if chips is not None and (not model_parallel or n % model_parallel):
                    from aicalc.errors import ParameterError

                    raise ParameterError("chips", n, "is not a multiple of tp × pp × cp")
                dp = str(n // model_parallel) if model_parallel and n % model_parallel == 0 else "1"
            elif chips is not None and n > 1:
                from aicalc.errors import AicalcError

                raise AicalcError("--chips with a --tp/--pp/--cp sweep: give --dp for each split instead")
    elif chips is not None and not search:
        from aicalc.errors import AicalcError

        raise AicalcError("give --chips or --dp, not both (dp = chips / (tp × pp × cp))")
    if "ep" in setup:  # a list searches each EP degree; a configuration has one
        # whole numbers as ints (as the option was); anything else is refused where it is used
        eps = [int(e) if float(e).is_integer() else float(e) for e in sweep(setup["ep"], "--ep")]
        if len(eps) > 1 and not search:
            from aicalc.errors import ParameterError

            raise ParameterError("ep", setup["ep"], "is a list: one EP degree per configuration (a list with --search "
                                 "searches each)")
        setup["ep"] = eps if search else eps[0]
    inputs_ = {"model": model, "batch": batches, "seq": seqs, "zero": zero_list, "dp": dp, "tp": tp, "pp": pp,
               "cp": cp, "chip": chip, "budget": budget, "search": search, "chips": chips, "top": top,
               **{k: v for k, v in setup.items() if v is not None}}
    if search:
        if trace:
            from aicalc.errors import AicalcError

            raise AicalcError("--trace traces given settings; it does not combine with --search")
        return _search(model, chip, chips, budget, seqs, batches, cp, top, progress, setup, inputs_)
    g = grid(batch=batches, seq=seqs, dp=sweep(dp, "--dp"), tp=sweep(tp, "--tp"), pp=sweep(pp, "--pp"),
             cp=sweep(cp, "--cp"), zero=zero_list)
    r = train_memory(model, g["batch"], g["seq"], dp=g["dp"], tp=g["tp"], pp=g["pp"], cp=g["cp"], zero=g["zero"],
                     chip=chip, **setup)
    spec, st, chip_obj = r.meta["model"], r.meta["setup"], r.meta["chip"]
    cols = {"model": spec.id, **r.columns}
    warnings, code = list(r.warnings), ExitCode.OK
    limit = budget
    if chip_obj is not None:
        limit = chip_obj.usable_memory_bytes if limit is None else min(limit, chip_obj.usable_memory_bytes)
    if limit is not None:
        fits = cols["peak_reserved_bytes"] <= limit
        cols["fits"] = fits
        bad = np.flatnonzero(~fits)
        if bad.size:
            code = ExitCode.BUDGET
            from aicalc.units import fmt_bytes

            what = f"{chip} memory" if budget is None else "the budget"
            label = chip_obj.memory_bytes if chip_obj is not None else limit
            of = f" CUDA reports of its {fmt_bytes(label)}" if budget is None and label != limit else ""
            rows = ", ".join(str(i + 1) for i in bad[:10]) + (" …" if bad.size > 10 else "")
            warnings.append(f"peak memory per device exceeds {what} ({fmt_bytes(limit)}{of}) in row(s) {rows}")
            if fits.size == 1:  # one configuration: what it gives up to fit on these devices
                warnings.append(_fits_with(model, r, limit, setup))
    from aicalc.api.results import Table

    rows = Table(cols).rows()
    columns = ["batch", "seq", "dp", "tp", "pp", *(["cp"] if np.any(r.cp > 1) else []),
               *(["stage", "stage_layers"] if np.any(r.pp > 1) else []), "zero",
               "trainable_params", "weights_bytes", "gradients_bytes",
               "optimizer_bytes", "activations_bytes", "transient_bytes", "overhead_bytes", "peak_bytes",
               "peak_reserved_bytes"]
    caveats: list[str] = []
    if trace:
        caveats = _trace_rows(spec, st, rows)
        columns += ["peak_allocated_bytes", "peak_phase", "traced_peak_bytes", "traced_phase"]
    if "fits" in cols:
        columns.append("fits")
    notes = [f"{spec.id}: {rows[0]['params']:,} params; {st.precision} + {st.optimizer}; framework {st.framework}, "
             f"attention {st.attention}, recompute {st.recompute}" + (", each layer torch.compile'd" if st.compile
                                                                       else "") + _compiled_quant_note(st)
             + _fsdp_note(st, r.zero),
             _state_dtypes(st),
             "peak = weights + optimizer + the largest phase of the step (hf: the loss with every saved activation, "
             "a layer's backward, the gradients with a layer's workspace, the optimizer step with its foreach "
             "temporaries; under torch AMP with recompute also the forward's end, autocast's weight casts cached; "
             f"peak phase: {rows[0]['peak_phase']}) + "
             f"the overhead ({_overhead_note(st, rows[0])}); see docs/train-mem.md"]
    notes += stage_notes(spec.arch, sorted({int(p) for p in np.ravel(r.pp)}), st)
    if spec.arch.compressed is not None:
        notes.append(_v4_note(st.framework))
    notes += caveats
    return Result("train-mem", inputs_, rows, warnings, code, title=f"train-mem {spec.id}", notes=notes,
                  columns=columns)


FLAGS = {"lora_rank": "--lora-rank", "recompute": "--recompute", "zero": "--zero", "offload": "--offload",
         "quant": "--quant"}  # fits_with's settings as flags, in the order they are written


def _fits_with(model, r, limit: float, setup: dict) -> str:
    """The line saying what the one configuration of ``r`` (a train_memory result) gives up to fit ``limit``:
    :func:`aicalc.api.train_memory.fits_with`'s ways, as flags."""
    import numpy as np

    from aicalc.api.train_memory import fits_with
    from aicalc.units import fmt_bytes

    one = {k: np.ravel(getattr(r, k))[0].item() for k in ("batch", "seq", "dp", "tp", "pp", "cp", "zero")}
    chip = r.meta["chip"].id if r.meta["chip"] is not None else None
    ways = fits_with(model, one.pop("batch"), one.pop("seq"), limit=limit, chip=chip, **one, **setup)
    said = [" ".join(f"{flag} {changes[k]}" for k, flag in FLAGS.items() if k in changes)
            + f" ({fmt_bytes(peak)} reserved)" for changes, peak in ways]
    if not said:
        from aicalc.api.train_memory import UNIFIED_MEMORY_KINDS

        unified = chip is not None and r.meta["chip"].kind in UNIFIED_MEMORY_KINDS  # no host memory of its own
        tried = ["recompute", "ZeRO-3"] + ([] if unified else ["offload"])
        tried += ["LoRA"] if r.meta["model"].arch.encoder else ["LoRA", "QLoRA"]  # an encoder's 4-bit base: not offered
        return f"on these devices it fits with none of {', '.join(tried[:-1])} or {tried[-1]}: more devices " \
               "(train-mem --search --chips N)"
    if len(said) == 2:  # full training's way, then the adapters'
        return f"it fits with {said[0]}; fine-tuning adapters instead, with {said[1]}"
    return f"it fits with {said[0]}"


def _fsdp_note(st, zero) -> str:
    """Which PyTorch FSDP a ZeRO-3 row outside Megatron stands for (core.train_peak.TrainSetup.fsdp_version)."""
    import numpy as np

    four_bit_hf = st.framework == "hf" and st.quant in ("nf4", "nf4-dq")  # core.train_peak: FSDP2 over QLoRA
    if st.framework == "megatron" or (st.quant != "none" and not four_bit_hf) or not np.any(np.asarray(zero) >= 3):
        return ""
    if st.fsdp_version == 1:
        return "; zero 3: FSDP1 (FullyShardedDataParallel, FULL_SHARD; --fsdp-version)"
    units = {"root": "", "split": ", the embedding and output layer their own units",
             "torchtitan": ", torchtitan's units: the embedding and [norm, output] their own, the latter not "
                           "resharded after the forward"}[st.fsdp_units]
    return f"; zero 3: FSDP2 (fully_shard{units}; --fsdp-version 1 for FullyShardedDataParallel)"


def _compiled_quant_note(st) -> str:
    """What a compiled layer over a 4-bit base saves besides a 16-bit one's (core.train_peak.qlora_compiled_weights)."""
    if not (st.compile and st.lora_rank and st.quant != "none"):
        return ""
    if st.bnb_fused_matmul:
        return " (bitsandbytes >= 0.50's fused gemm_4bit forward: no dequantized weight saved)"
    return (" (a 16-bit copy of each 4-bit weight saved for backward, as torchao's linear_nf4 and bitsandbytes "
            "0.46-0.49 compile; --bnb-fused-matmul for bitsandbytes >= 0.50)")


def _v4_note(framework: str) -> str:
    """DeepSeek-V4's activations: what each framework's model counts (docs/train-mem.md)."""
    if framework == "hf":
        return ("DeepSeek-V4: its mHC streams, compressors, indexers, sinks, q LoRA and grouped o-proj counted as "
                "transformers 5.23 saves them, with eager attention (its only path there)")
    return ("DeepSeek-V4: layers counted as plain MQA; its mHC streams, compressors, indexers, sinks, q LoRA and "
            "grouped o-proj are counted only under --framework hf")


def _overhead_note(st, row) -> str:
    """What the overhead column holds: the chip class's context and NCCL figures, or the stated default."""
    if st.context_bytes is not None and st.overhead is None:
        return (f"CUDA context and cuBLAS workspace {row['context_bytes'] / 2**20:,.0f} MiB + NCCL buffers of "
                f"{(st.comm_bytes or 0) / 1e9:.2g} GB per parallel group, {(st.all_to_all_bytes or 0) / 1e9:.3g} GB "
                "more with expert parallelism: the chip class's figures")
    if st.overhead is not None:
        return f"{row['overhead_bytes'] / 2**30:.3g} GiB as given"
    return f"{row['overhead_bytes'] / 2**30:.2g} GiB stated for the CUDA context, workspaces and communication buffers"


def _stages(zero) -> list[float]:
    """ZeRO stages: a sweep of counts where 0 is allowed (``0,3``, ``0:3:+1``)."""
    from aicalc.sweep import parse_sweep
    from aicalc.units import parse_count

    return parse_sweep(str(zero), lambda t: 0.0 if t.strip() == "0" else parse_count(t, "--zero"), "--zero")


def _search(model, chip, chips, budget, seqs, batches, cp, top, progress, setup, inputs_) -> Result:
    from aicalc.api.train_memory import search_layouts
    from aicalc.sweep import sweep

    r = search_layouts(model, chip, int(chips) if chips else None, limit=budget, seq=seqs,
                       max_batch=int(max(batches)), cp=sweep(cp, "--cp"), top=int(top), progress=progress, **setup)
    m = r.meta
    import numpy as np

    cols = {"model": np.full(len(r), m["model"].id), **r.columns}
    from aicalc.api.results import Table

    rows = Table(cols).rows() if len(r) else []
    code = ExitCode.OK if m["layouts_fit"] else ExitCode.BUDGET
    columns = ["tp", "pp", *(["cp"] if max(m["cps"]) > 1 else []), *(["ep"] if len(m["eps"]) > 1 else []), "dp",
               "zero", "batch", "seq", "recompute",
               *(["stage_layers"] if len(r) and np.any(r.pp > 1) else []),
               "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "peak_bytes",
               *(["headroom_bytes"] if m["layouts_fit"] else ["shortfall_bytes", "fits"])]
    notes = [f"{m['layouts_fit']:,} of {m['layouts']:,} layouts fit; " +
             (f"ranked by memory headroom (top {top})" if m["layouts_fit"] else
              f"none does: the {len(rows)} closest, ranked by shortfall")]
    if m["model"].arch.moe is not None and m["eps"] == [1]:  # what a MoE user is most likely to have meant
        notes.append(f"{m['model'].id} is a mixture of experts searched without expert parallelism (every rank "
                     "holds all its experts); --ep N searches with the experts split over N ranks (folded over "
                     "tp·cp·dp), as MoE training runs")
    inputs_["chips"] = m["chips"]
    return Result("train-mem", inputs_, rows, r.warnings, code, title=f"train-mem --search {m['model'].id}",
                  notes=notes, columns=columns,
                  keep=["peak_bytes", "headroom_bytes" if m["layouts_fit"] else "shortfall_bytes"])  # the rank


def _state_dtypes(st) -> str:
    """The dtypes assumed for gradients and optimizer states (aicalc.core.train_memory.state_bytes), so that a
    pure-bf16 run's bf16 Adam states are said, not silent."""
    mixed = st.precision.endswith("-mixed")
    w = "fp32" if st.precision == "fp32" else "16-bit"
    if st.lora_rank:  # the base is frozen: no gradients, states or master copy; the adapters carry their own
        quant = {"nf4": "NF4, 4.5 bits", "nf4-dq": "NF4 with double-quantized scales, 4.127 bits",
                 "int8": "int8"}.get(st.quant, st.quant)
        base = f"a frozen {w} base" if st.quant == "none" else \
            f"a frozen base whose decoder linears are {quant} (" + (
                f"and its output layer, as LitGPT quantizes it; embeddings and norms {w})" if st.framework == "litgpt"
                else f"embeddings, output layer and norms {w})")
        ad = "fp32" if st.lora_dtype == "fp32" else "bf16"
        why = (" (PEFT's default, autocast_adapter_dtype; --lora-dtype bf16 as torchtune makes them)"
               if st.lora_dtype == "fp32" and st.framework == "hf" else "")
        return f"assumed: {base}; {ad} adapters with {ad} gradients and {ad} optimizer states{why}"
    opt = st.optimizer_dtype or ("bf16" if st.precision == "bf16" else "fp32")
    why = "" if st.optimizer_dtype else (" (the parameters' dtype, as torch's AdamW keeps them; --optimizer-dtype fp32 "
                                         "for fp32 states)" if st.precision == "bf16" else "")
    return (f"assumed: {w} weights, {st.grad_dtype or w} gradients, {opt} optimizer states{why}"
            + ("; fp32 master weights" if mixed else ""))


MAX_TRACED_ROWS = 4


def _trace_rows(spec, st, rows) -> list[str]:
    """``--trace``: each row's settings traced by PyTorch's memory tracker (:mod:`aicalc.trace`), one device; the
    notes where the CPU's trace does not stand for a GPU's."""
    from aicalc.errors import AicalcError
    from aicalc.trace import cpu_caveats, trace_step

    if spec.config is None:
        raise AicalcError("--trace needs a Hugging Face config: a preset, a config.json, a folder or a Hub id")
    if len(rows) > MAX_TRACED_ROWS:
        raise AicalcError(f"--trace traces at most {MAX_TRACED_ROWS} rows; this sweep has {len(rows)}")
    if st.framework != "hf" or st.quant != "none" or st.offload != "none" or st.optimizer not in ("adam", "adamw") \
            or st.optimizer_in_backward or st.loss != "full" or (st.lora_rank and st.lora_dtype != "fp32"):
        raise AicalcError("--trace runs transformers with torch AdamW (--framework hf, no --quant, --offload, "
                          "--optimizer-in-backward, --loss other than full or --lora-dtype)")
    if st.lora_rank and st.precision.endswith("-mixed"):
        raise AicalcError("--trace with --lora-rank: give the frozen base's dtype, --precision bf16 or fp32 (PEFT "
                          "keeps the adapters in fp32; torch AMP would hold the whole base in fp32)")
    from aicalc.core.train_memory import lora_targets

    sdpa_math = False
    for row in rows:
        if any(row[k] > 1 for k in ("dp", "tp", "pp", "cp")) or row["zero"]:
            raise AicalcError("--trace traces one device: no --dp, --tp, --pp, --cp or --zero")
        t = trace_step(spec.config, int(row["batch"]), int(row["seq"]), precision=st.precision,
                       attention=st.attention, recompute=st.recompute, adamw=st.adamw,
                       microbatches=st.microbatches or 1, lora_rank=st.lora_rank,
                       lora_targets=lora_targets(st.lora_targets) if st.lora_rank else (), encoder=spec.arch.encoder,
                       grads_kept=st.grads_kept)
        row["traced_peak_bytes"] = float(t["peak_bytes"])
        row["traced_phase"] = t["phase"]
        row["traced_breakdown"] = t["breakdown"]
        sdpa_math = sdpa_math or t["sdpa_math"]
    return cpu_caveats(spec.arch, st.precision, st.attention, sdpa_math)
