"""Roofline and latency of inference: prefill and decode of each configuration, ideal and estimated."""

from aicalc.api.catalog import SRAM_KINDS  # noqa: F401 - defined beside the loaders (kv_cache needs no roofline)
from aicalc.api.results import Block, Table
from aicalc.tuples import Named

SIXTEEN_BIT = ("bf16", "fp16")
EIGHT_BIT_COMPUTE = ("fp8", "int8")
PCIE_FALLBACK_BYTES_PER_S = 32e9  # PCIe Gen4 x16, one direction: chips without a listed interconnect


class Roofline(Table):
    """Columns per configuration: ``batch``, ``prompt``, ``gen``, ``tp``; ``prefill_flop``,
    ``prefill_bytes``, ``prefill_time_s``, ``prefill_ideal_time_s`` and the same for ``decode_``; ``ttft_s``,
    ``tpot_s``, ``output_tokens_per_s`` (whole TP group), ``ideal_ttft_s``, ``ideal_tpot_s``,
    ``ideal_output_tokens_per_s``; ``weights_bytes_per_device``, ``kv_cache_bytes_per_device``, ``fits``,
    ``chips_needed``, ``compute_bound_batch`` (inf where decode never turns compute-bound) and
    ``ridge_point``. ``meta['prefill']`` / ``meta['decode']`` hold the per-operation breakdown (``.ops``)."""


class CostSetup(Named):
    """A model on a chip, in an engine, as the cost model sees it (a named tuple: a frozen dataclass compiles its
    generated methods at import, ~1.5 ms of a one-off query, docs/robustness.md)."""

    model: object  # ModelSpec
    chip: object
    shape: object  # aicalc.core.forward.Shape
    roofs: object  # aicalc.core.pricing.Roofs
    formats: object  # aicalc.core.forward.Formats
    compute_dtype: str
    warnings: tuple[str, ...]
    efficiency: object = None  # the composed Efficiency: defaults ← chip class ← engine ← overrides
    chip_class: str = "datacenter-gpu"
    engine: str = "generic"
    sources: tuple[str, ...] = ()  # "factor = value (profile: source)" for every profile figure used
    dataflow: bool = False  # weights spread over chips' SRAM, a token crosses them in turn
    dtype: str = "bf16"  # the weight format's name ("release"/"checkpoint" resolved; the non-expert linears')
    kv_dtype: str = "bf16"  # the KV format ("auto" resolved)
    weight_format: object = None  # aicalc.api.catalog.WeightFormat (its ``label`` is what tables show)
    engine_options: dict = {}  # the engine profile's options (scheduler, kv_reserve, kv_budget, max_num_seqs, …)

    @property
    def dtype_label(self) -> str:
        return self.weight_format.label if self.weight_format is not None else self.dtype


LOW_PRECISION = ("fp8", "int8", "fp4", "mxfp4")


def attention_math(chip, compute: str, kv_dtype: str) -> str:
    """The math the attention kernels run in beside linears in ``compute``: FP8 where the KV cache is FP8 and the
    chip has FP8 tensor math (TensorRT-LLM's FP8 context and generation FMHA need an FP8 KV cache; FlashInfer's and
    FlashAttention-3's FP8 paths likewise read FP8 K/V), else 16-bit: no engine runs attention in FP4 or INT8 (an
    NVFP4 or INT8 model's attention stays in FP8 or BF16; llama.cpp's flash attention in F16 beside its INT8 MMQ
    linears), and FP8 linears with a 16-bit cache attend in 16-bit. 16-bit and fp32 compute keep their own."""
    have = chip.dense_tflops
    if compute not in LOW_PRECISION:
        return compute
    if kv_dtype == "fp8" and "fp8" in have:
        return "fp8"
    for c in SIXTEEN_BIT:
        if c in have:
            return c
    return compute


def pick_compute(chip, dtype: str, compute_dtype: str | None, warnings: list[str],
                 engine_options: dict | None = None) -> tuple[str, bool]:
    """(compute dtype, weight-only quantized?): the math the engine runs a weight format in.

    fp8 / fp4 weights run fp8 / fp4 tensor math where the chip lists it (Hopper, Blackwell); GGUF formats run
    llama.cpp's int8 MMQ kernels on chips with int8 tensor math where the engine profile says so (activations
    quantized to int8); other quantized formats are weight-only (dequantized to 16-bit in the kernel). Without a
    16-bit figure the chip's best listed dtype is used, with a warning."""
    from aicalc.core.dtypes import GGUF
    from aicalc.errors import ParameterError

    have = chip.dense_tflops
    opts = engine_options or {}
    if compute_dtype:
        if compute_dtype not in have:
            raise ParameterError("compute_dtype", compute_dtype,
                                 f"has no throughput figure on {chip.id} (it lists: {', '.join(have)})")
        return compute_dtype, dtype not in (compute_dtype, "fp32") and not (dtype in SIXTEEN_BIT and
                                                                           compute_dtype in SIXTEEN_BIT)
    if dtype in ("fp8", "fp4", "mxfp4"):
        # MXFP4 weights run against MXFP8 activations at the fp8 rate on chips with MX tensor math (Blackwell's
        # mixed e2m1 x e4m3 MMA): TensorRT-LLM's gpt-oss guide (MoE backends TRTLLM and CUTLASS: "MXFP8
        # activations, MXFP4 weights" on B200/GB200) and vLLM's FlashInfer MXFP4 x MXFP8 kernels
        if dtype == "mxfp4" and "fp4" in have and "fp8" in have:
            return "fp8", False
        if dtype in have:
            return dtype, False
        warnings.append(f"{chip.id} has no {dtype} tensor math: {dtype} weights are dequantized and multiplied in "
                        "16-bit (weight-only)")
    if dtype in GGUF and opts.get("gguf_compute") in have and chip.vendor in opts.get("gguf_compute_vendors", ()):
        return opts["gguf_compute"], True
    if dtype in have and dtype in SIXTEEN_BIT + ("fp32",):
        return dtype, False
    for c in SIXTEEN_BIT:
        if c in have:
            return c, dtype not in SIXTEEN_BIT + ("fp32",)
    for c in ("fp32", "int8"):
        if c in have:
            warnings.append(f"{chip.id} lists no 16-bit throughput; compute is modelled at its {c} figure")
            return c, dtype not in (c,)
    raise ParameterError("chip", chip.id, "lists no usable throughput figure")


def compose_efficiency(chip, engine: str | None = None, efficiency=None):
    """(Efficiency, class id, engine id, engine options, sources, dataflow?): the general defaults, then the chip
    class's profile, then the engine's, then ``efficiency`` (an Efficiency, or a dict of overrides)."""
    from aicalc.catalog import profiles
    from aicalc.core.efficiency import Efficiency

    cls = profiles.chip_class(chip)
    cp, ep = profiles.load("class", cls), profiles.load("engine", engine or profiles.default_engine(chip))
    eng = ep.id  # the release a family name (cerebras) resolved to: the table says which it used
    if isinstance(efficiency, Efficiency):
        return efficiency, cls, eng, ep.options, ("given Efficiency",), bool(cp.options.get("pipeline_over_chips"))
    from aicalc.api.catalog import chip_factors as own_factors

    own = own_factors(chip)
    chip_factors = {k: v for k, (v, _) in own.items()}
    backend, backend_sources = ep.options.get("by_class", {}).get(cls, ({}, {}))
    eff = (Efficiency().with_overrides(cp.factors).with_overrides(chip_factors).with_overrides(ep.factors)
           .with_overrides(backend))
    sources = [f"{k} = {v:g} ({p.id}: {p.sources[k]})" for p in (cp, ep) for k, v in p.factors.items()]
    sources += [f"{k} = {v:g} ({chip.id}: {src})" for k, (v, src) in own.items()]
    sources += [f"{k} = {v:g} ({ep.id} on {cls}: {backend_sources[k]})" for k, v in backend.items()]
    if efficiency:
        eff = eff.with_overrides(dict(efficiency))
        sources += [f"{k} = {v:g} (given)" for k, v in dict(efficiency).items()]
    return eff, cls, eng, ep.options, tuple(sources), bool(cp.options.get("pipeline_over_chips"))


def cost_setup(model, chip="h100-sxm", dtype: str | None = "release", kv_dtype: str = "bf16", *,
               compute_dtype: str | None = None, group_size: int | None = None, attention: str = "flash",
               kv_shared: bool | None = None, tp_needs_link: bool = False, engine: str | None = None,
               efficiency=None) -> CostSetup:
    """Model, chip and engine → the cost model's view: shape, roofs (PCIe Gen4 x16 where a chip lists no
    interconnect and TP needs one, with a warning), formats and the composed efficiency. ``kv_shared`` None:
    the engine's (a GQA kernel reads each kv head once for its query group). ``dtype`` "release" (the default):
    the official checkpoint's precision (:func:`aicalc.api.catalog.weight_format`); routed experts in their own
    format (gpt-oss's MXFP4) compute against MXFP8 activations where the chip has MX tensor math (fp8 rate), else
    dequantized (weight-only)."""
    from aicalc.api.catalog import kv_format, load_decoder, load_node_or_chip, weight_format
    from aicalc.core.forward import formats, shape_of
    from aicalc.core.pricing import Roofs
    from aicalc.errors import check_choice

    check_choice("attention", attention, ("flash", "materialized"))
    spec = load_decoder(model, "roofline")
    wf = weight_format(spec, dtype)
    dtype, kv_dtype = wf.name, kv_format(spec, kv_dtype)
    chip_obj, _count = load_node_or_chip(chip)
    eff, cls, eng, opts, sources, dataflow = compose_efficiency(chip_obj, engine, efficiency)
    warnings: list[str] = []
    cdt, quantized = pick_compute(chip_obj, dtype, compute_dtype, warnings, opts)
    if kv_shared is None:
        kv_shared = bool(opts.get("kv_shared", True))
    expert = {}
    if wf.experts is not None and wf.experts != wf.name:
        ew: list[str] = []
        ecdt, equant = pick_compute(chip_obj, wf.experts, None, ew, opts)
        expert = {"expert_bytes": wf.expert_bytes_per_param, "expert_quantized": equant,
                  "expert_compute": ecdt if ecdt != cdt else None}
        warnings += ew
    att = attention_math(chip_obj, cdt, kv_dtype)
    fm = formats(dtype, kv_dtype, group_size=group_size, quantized=quantized, flash=attention == "flash",
                 kv_shared=kv_shared, weight_bytes=wf.bytes_per_param, edge_bytes=wf.edge_bytes_per_param,
                 attention_compute=att if att != cdt else None, **expert)
    ic = chip_obj.interconnect
    link = (ic.per_direction_bytes_per_s if ic else None) or 0.0
    if not link and tp_needs_link:
        warnings.append(f"{chip_obj.id} has no interconnect figure; TP collectives use PCIe Gen4 x16 "
                        f"({PCIE_FALLBACK_BYTES_PER_S / 1e9:.0f} GB/s per direction)")
        link = PCIE_FALLBACK_BYTES_PER_S
    # DSA's indexer scores in fp8 where the chip has fp8 math (aicalc.core.indexer.score_op), else in the pass's format
    dsa = ("fp8",) if spec.arch.indexer is not None and chip_obj.peak_flop_per_s("fp8") else ()
    peaks = tuple((d, chip_obj.peak_flop_per_s(d)) for d in dict.fromkeys((fm.expert_compute, fm.attention_compute)
                                                                          + dsa) if d)
    # a TP group wider than the scale-up domain reduces across domains over the scale-out NIC (as train-time:
    # the chip's scale_out_gbs, else the default)
    from aicalc.core.collectives import DEFAULT_SCALE_OUT_BYTES_PER_S

    domain = float(ic.domain or 0) if ic else 0.0
    out = chip_obj.scale_out_gbs * 1e9 if chip_obj.scale_out_gbs else DEFAULT_SCALE_OUT_BYTES_PER_S
    roofs = Roofs(peak_flop_per_s=chip_obj.peak_flop_per_s(cdt), bandwidth_bytes_per_s=chip_obj.memory_bandwidth_bytes_per_s,
                  link_bytes_per_s=link, low_precision=cdt in LOW_PRECISION,
                  vector_flop_per_s=chip_obj.peak_flop_per_s("fp32") or 0.0, peaks=peaks, domain=domain,
                  out_bytes_per_s=out, fp4=cdt == "fp4", exp_per_s=chip_obj.exp_per_s)
    return CostSetup(spec, chip_obj, shape_of(spec.arch), roofs, fm, cdt, tuple(warnings), eff, cls, eng, sources,
                     dataflow, dtype, kv_dtype, wf, opts)


def draft_setup(draft, cs: CostSetup, tp, draft_tokens, acceptance):
    """The draft of speculative decoding as the cost model sees it (None: no speculation): ``draft`` a model
    (id, path, config) sharing the target's vocabulary, or a head (``mtp``, ``eagle``: a one-layer copy of the
    target); ``draft_tokens`` K per round, ``acceptance`` the per-token acceptance rate. Its weights and KV are
    held beside the target's at the target's formats, split over the same ``tp`` (an int or an array)."""
    if draft is None:
        return None
    from aicalc.api import inputs
    from aicalc.api.catalog import load_decoder
    from aicalc.core.forward import shape_of
    from aicalc.core.geometry import check_tp, weight_bytes_per_device
    from aicalc.core.speculative import HEADS, expected_tokens, head_arch
    from aicalc.errors import ParameterError

    k = inputs.whole("draft_tokens", draft_tokens)
    if k > 16:
        raise ParameterError("draft_tokens", k, "is more than 16 drafted tokens per round")
    a = inputs.fraction("acceptance", acceptance)
    arch = cs.model.arch
    darch = head_arch(arch) if str(draft) in HEADS else load_decoder(draft, "roofline --draft").arch
    if darch.vocab != arch.vocab:
        raise ParameterError("draft", draft, f"has a vocabulary of {darch.vocab}, the target {arch.vocab}: a draft "
                             "must share the target's tokenizer")
    for t in inputs.distinct(tp):
        check_tp(darch, int(t))
    return {"k": float(k), "acceptance": a, "tokens": float(expected_tokens(a, k)), "arch": darch,
            "shape": shape_of(darch), "weights": weight_bytes_per_device(darch, cs.dtype, tp)}


def efficiency_of(efficiency):
    """None (the defaults), an Efficiency, or a dict of overrides ``{"bandwidth": 0.8}``."""
    from aicalc.core.efficiency import Efficiency

    if efficiency is None:
        return Efficiency()
    if isinstance(efficiency, Efficiency):
        return efficiency
    return Efficiency().with_overrides(dict(efficiency))


def ridge_batch(model, chip, prompt: int, gen: int, *, dtype: str | None = "release", kv_dtype: str = "bf16",
                tp: int = 1, engine: str | None = None) -> float:
    """``roofline(model, chip, 1, prompt, gen, dtype=…, kv_dtype=…, tp=tp, engine=…).compute_bound_batch[0]``
    (:func:`aicalc.core.latency.compute_bound_batch` at decode's mean context, ``prompt + gen/2``) without the
    rest of that table: the same setup and the same call on the same numbers."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.core import latency

    tp = inputs.positive("tp", tp, whole=True)
    cs = cost_setup(model, chip, dtype, kv_dtype, tp_needs_link=float(tp) > 1, engine=engine)
    S = inputs.positive("prompt", prompt, whole=True)
    G = inputs.positive("gen", gen, whole=True)
    return float(latency.compute_bound_batch(cs.shape, cs.roofs, cs.formats, S + G / 2.0, np.float64(float(tp)),
                                             latency.Par(1.0, 1.0, 0.0)))


def roofline(model, chip="h100-sxm", batch=1, prompt=512, gen=256, *, dtype: str | None = "release",
             kv_dtype: str = "bf16",
             tp=None, compute_dtype: str | None = None, group_size: int | None = None, attention: str = "flash",
             kv_shared: bool | None = None, engine: str | None = None, efficiency=None, draft=None,
             draft_tokens: int = 4, acceptance=0.7, ep: int = 1, attention_dp: int = 1,
             redundant_experts: int = 0, utilization=None, swa_full_tokens_ratio: float | None = None) -> Roofline:
    """Prefill and decode of ``batch`` sequences of ``prompt`` + ``gen`` tokens on a TP group of ``chip``
    (arrays broadcast; ``tp`` defaults to a node's chips, else 1): FLOPs, bytes, bound, TTFT, TPOT and tokens/s,
    estimated and ideal. ``engine``: an engine
    profile (``presets/engines/``: trtllm, vllm, llama.cpp, …; default generic); ``efficiency``: overrides of
    single factors (``{"bandwidth": 0.8}``) on top of the chip class's and the engine's profiles. ``draft``,
    ``draft_tokens``, ``acceptance``: speculative decoding (:func:`draft_setup`): TTFT, TPOT and tokens/s are
    then those of a speculative decode, with ``speculative_speedup`` against the plain one. ``ep``,
    ``attention_dp``: expert and attention-data parallelism inside the replica of ``tp`` chips
    (:func:`aicalc.core.geometry.check_parallel`): ``batch`` is the replica's, spread over the attention groups;
    ``redundant_experts``: extra expert replicas over the EP ranks (EPLB).
    ``dtype`` "release" (default): the official checkpoint's precision.

    ``fits``: the weights and the batch's KV cache within one device's memory; for an engine that gives weights and
    KV pool a share of it (SGLang's --mem-fraction-static: ``utilization``, default its own by the chip and layout,
    :func:`aicalc.catalog.profiles.static_reserve`) within that share, and a hybrid sliding-window model's cache
    within the full and SWA pools it sizes from the share less the weights (``swa_full_tokens_ratio``, its
    --swa-full-tokens-ratio; :func:`aicalc.core.capacity.swa_requests`). ``utilization`` and
    ``swa_full_tokens_ratio`` are refused for an engine without that share or those pools."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.core import latency
    from aicalc.core.geometry import check_parallel, weight_bytes_per_device
    from aicalc.core.kv_cache import bytes_of, held_tokens, kv_cache_bytes, kv_shape

    ep = inputs.whole("ep", ep)
    attention_dp = inputs.whole("attention_dp", attention_dp)
    redundant = inputs.count("redundant_experts", redundant_experts, minimum=0)
    if tp is None:  # a node id is one TP group of its chips; a chip id is TP 1
        from aicalc.api.catalog import node_count

        tp = node_count(chip)
    tp, gen = inputs.positive("tp", tp, whole=True), inputs.positive("gen", gen, whole=True)
    g = inputs.broadcast(tp=tp, batch=inputs.positive("batch", batch, whole=True),
                         prompt=inputs.positive("prompt", prompt, whole=True), gen=gen)
    B, S, G, TP = g["batch"], g["prompt"], g["gen"], g["tp"]
    tps = [float(tp)] if tp.ndim == 0 else inputs.distinct(TP)
    cs = cost_setup(model, chip, dtype, kv_dtype, compute_dtype=compute_dtype, group_size=group_size,
                    attention=attention, kv_shared=kv_shared, tp_needs_link=tps[-1] > 1, engine=engine,
                    efficiency=efficiency)
    arch = cs.model.arch
    for t in tps:
        check_parallel(arch, int(t), ep, attention_dp, redundant)
    eff = cs.efficiency
    D = float(attention_dp)
    # one number where the sweep has one TP or gen (the same values, without reading a column of them)
    TPs = np.float64(tps[0]) if len(tps) == 1 else TP
    Gs = gen if gen.ndim == 0 else G
    TPa, Ba = (TPs, B) if D == 1.0 else (TPs / D, B / D)  # one attention group: its chips, its share of sequences
    weights = weight_bytes_per_device(arch, cs.dtype, TP if len(tps) > 1 else np.float64(tps[0]),
                                      bytes_per_param=cs.formats.weight_bytes, edge_bpp=cs.formats.edge_bytes,
                                      expert_bpp=cs.formats.expert_bytes, attention_dp=attention_dp,
                                      redundant=redundant)
    if np.shape(weights) != B.shape:  # one TP degree: one number seen as a column (read-only, as ep's)
        weights = np.broadcast_to(np.float64(weights), B.shape)
    kv_dtype = cs.kv_dtype
    if len(tps) == 1:  # one TP degree: the whole sweep at once, into the held tokens' array
        shp = kv_shape(arch, kv_dtype, int(tps[0]) // attention_dp)
        context = S + Gs
        held = held_tokens(shp, context, out=context)
        kv = bytes_of(shp, Ba, held, out=held)
        if np.shape(kv) != B.shape or kv.dtype != np.float64:
            kv = np.array(np.broadcast_to(kv, B.shape), dtype=np.float64)
    else:
        kv = np.zeros_like(B)
        for t in tps:  # the cache geometry per attention TP degree
            sel = TP == t
            kv[sel] = kv_cache_bytes(kv_shape(arch, kv_dtype, int(t) // attention_dp), Ba[sel], S[sel] + G[sel])
    if draft is not None and (ep > 1 or attention_dp > 1):
        from aicalc.errors import ParameterError

        raise ParameterError("draft", draft, "is not modelled with --ep or --attention-dp (speculative decoding is "
                             "priced on a plain TP replica)")
    spec = draft_setup(draft, cs, TP, draft_tokens, acceptance)
    if spec is not None:  # the draft's weights and cache sit beside the target's
        weights = weights + spec["weights"]
        for t in inputs.distinct(TP):
            sel = TP == t
            kv[sel] += kv_cache_bytes(kv_shape(spec["arch"], kv_dtype, int(t)), B[sel], S[sel] + G[sel] + spec["k"])
    need = weights + kv
    mem = float(cs.chip.usable_memory_bytes)
    fits = need <= mem
    if cs.engine_options.get("mem_fraction_static_reserve"):
        fits = _static_share_fits(cs, need, weights, Ba, S + Gs, TP, tps, attention_dp, utilization,
                                  swa_full_tokens_ratio)
    elif utilization is not None or swa_full_tokens_ratio is not None:
        from aicalc.errors import ParameterError

        name, value = ("utilization", utilization) if utilization is not None else \
            ("swa_full_tokens_ratio", swa_full_tokens_ratio)
        raise ParameterError(name, value, f"applies to an engine that gives weights and KV cache a share of memory "
                             f"(sglang), not {cs.engine}")
    chips_needed = np.multiply(need, TPs, out=need if np.ndim(TPs) == 0 else None)  # need·TP / memory, rounded up
    chips_needed /= mem
    np.ceil(chips_needed, out=chips_needed)
    # a dataflow deployment spreads the weights over chips_needed chips that every token crosses in turn
    par = latency.Par(float(ep), D, float(redundant))
    pre, dec, out, cbb = latency.inference(cs.shape, cs.roofs, cs.formats, eff, Ba, S, Gs, TPa,
                                           chips_needed if cs.dataflow else 1.0, par, compute_bound=True)
    for key in out:  # the replica's tokens/s: its attention groups run side by side
        if D != 1.0:
            out[key]["output_tokens_per_s"] = out[key]["output_tokens_per_s"] * D
    spec_cols = {}
    if spec is not None:
        from aicalc.core import speculative

        times = speculative.decode_times(cs.shape, spec["shape"], cs.roofs, cs.formats, eff, B, S, G, TP, spec["k"],
                                         spec["tokens"])
        for key in ("est", "ideal"):
            plain = out[key]["tpot_s"]
            tpot, draft_pre = times[key]
            ttft = out[key]["ttft_s"] + draft_pre
            total = ttft + (G - 1.0) * tpot
            out[key] = {"ttft_s": ttft, "tpot_s": tpot, "total_s": total, "output_tokens_per_s": B * G / total,
                        "speedup": plain / tpot}
        spec_cols = {"draft_tokens": spec["k"], "acceptance": spec["acceptance"],
                     "tokens_per_target_pass": spec["tokens"], "speculative_speedup": out["est"]["speedup"]}
    if D != 1.0:
        cbb = D * cbb
    e, ideal = out["est"], out["ideal"]
    ints = Block(B.size, 8, "int64")  # the whole-number columns, from one block of memory

    def whole(a):
        out = ints.row()
        np.copyto(out, a, casting="unsafe")  # as astype(np.int64)
        return out

    def one(a):  # a column of one whole number: a read-only view of it, no memory written (Block.full)
        return ints.full(int(a)) if np.ndim(a) == 0 else whole(a)

    cols = {"batch": whole(B), "prompt": whole(S), "gen": one(Gs),
            "tp": one(TPs), "ep": ints.full(ep), "attention_dp": ints.full(attention_dp),
            "redundant_experts": ints.full(redundant),
            "ridge_point": np.broadcast_to(np.float64(cs.roofs.ridge_point), B.shape),
            "prefill_flop": pre.flop, "prefill_bytes": pre.bytes, "prefill_time_s": pre.t_est,
            "prefill_ideal_time_s": pre.t_ideal, "decode_flop": dec.flop, "decode_bytes": dec.bytes,
            "decode_time_s": dec.t_est, "decode_ideal_time_s": dec.t_ideal,
            "ttft_s": e["ttft_s"], "tpot_s": e["tpot_s"], "output_tokens_per_s": e["output_tokens_per_s"],
            "ideal_ttft_s": ideal["ttft_s"], "ideal_tpot_s": ideal["tpot_s"],
            "ideal_output_tokens_per_s": ideal["output_tokens_per_s"],
            "weights_bytes_per_device": weights, "kv_cache_bytes_per_device": kv, "fits": fits,
            "chips_needed": whole(chips_needed),
            "compute_bound_batch": cbb,
            **spec_cols}
    warnings = list(cs.warnings)
    if not bool(np.all(cols["fits"])):
        sram_only = cs.chip.kind in SRAM_KINDS or (cs.chip.sram is not None and cs.chip.sram == cs.chip.memory)
        where = "on-chip SRAM" if sram_only else "memory"
        if cs.engine_options.get("mem_fraction_static_reserve"):
            where = "memory share for weights and KV cache (--mem-fraction-static)"
        warnings.append(f"weights + KV cache exceed one device's {where} at some points (up to "
                        f"{int(cols['chips_needed'].max())} {cs.chip.id} chips needed; see chips_needed)")
    return Roofline(cols, warnings, setup=cs, efficiency=eff, prefill=pre, decode=dec, regime=regime(cs, dec, B))


def _static_share_fits(cs, need, weights, batch, context, TP, tps, attention_dp: int, utilization, given_ratio):
    """roofline's ``fits`` for an engine whose weights and KV pool take a share of the memory (SGLang): ``need``
    (weights + KV bytes per device) within ``utilization`` (else the engine's default share at each TP degree,
    :func:`aicalc.api.serving.kv_memory`) of the memory; a hybrid sliding-window model's ``batch`` sequences of
    ``context`` tokens per attention group within the pools the share less the ``weights`` holds
    (:func:`aicalc.core.capacity.swa_requests`)."""
    import numpy as np

    from aicalc.api.serving import kv_memory, pool_ratio
    from aicalc.core import capacity
    from aicalc.core.kv_cache import kv_shape

    arch, mem = cs.model.arch, float(cs.chip.usable_memory_bytes)
    fits = np.zeros(np.shape(need), dtype=bool)
    for t in tps:
        sel = np.broadcast_to(np.asarray(TP == t), fits.shape)
        share = kv_memory(cs.chip, cs.engine_options, arch, 0.0, int(t), 1, attention_dp, utilization).utilization
        limit = np.ceil(mem * share)
        shape = kv_shape(arch, cs.kv_dtype, int(t) // attention_dp)
        ratio = pool_ratio(cs.engine_options, cs.engine, arch, shape, given_ratio)
        if ratio is None:
            ok = np.broadcast_to(need, fits.shape) <= limit
        else:  # SGLang's full and SWA pools, sized from what the share leaves beside the weights
            held = capacity.swa_requests(shape, limit - np.broadcast_to(weights, fits.shape), ratio,
                                         np.broadcast_to(context, fits.shape))
            ok = (held >= np.ceil(np.broadcast_to(batch, fits.shape))) & (held > 0)
        fits[sel] = np.broadcast_to(ok, fits.shape)[sel]
    return fits


def regime(cs: CostSetup, dec, batch) -> str:
    """One line on what sets the decode time: the profile, GEMV decode at a share of the bandwidth, dataflow
    latencies, or the compute roof."""
    import numpy as np

    e = cs.efficiency
    parts = [f"engine {cs.engine}, chip class {cs.chip_class}"]
    if cs.dataflow:
        parts.append(f"dataflow pipeline: {e.layer_latency_s * 1e6:.3g} µs per layer, {e.hop_latency_s * 1e6:.3g} µs "
                     "per chip-to-chip hop")
    bw = e.quant_bandwidth if cs.formats.quantized else e.bandwidth
    if e.gemv_efficiency > 0 and float(np.min(batch)) <= 8:
        parts.append(f"small-batch decode on GEMV kernels near the memory roof ({bw:.0%} of bandwidth)")
    else:
        parts.append(f"decode at {bw:.0%} of bandwidth, GEMMs at up to {e.flop_max:.0%} of peak")
    return "; ".join(parts)
