"""Training time: FLOPs per token, step time of a TP × PP × DP layout, MFU, total time, chip-hours and cost."""

from __future__ import annotations

from aicalc.api.results import Table
from aicalc.core.collectives import DEFAULT_SCALE_OUT_BYTES_PER_S as DEFAULT_DP_BYTES_PER_S  # noqa: F401

PCIE_FALLBACK_BYTES_PER_S = 32e9


class TrainTime(Table):
    """Columns: ``tp``, ``pp``, ``dp``, ``chips``, ``seq``, ``global_batch``, ``micro_batch``, ``tokens``,
    ``model_flop_per_token``, ``hardware_flop_per_token``, ``mfu``, ``hfu``, ``model_flop_per_s_per_chip``,
    ``tokens_per_s``, ``tokens_per_s_per_chip``, ``step_s``, ``total_time_s``, ``chip_hours``, ``ideal_mfu``,
    ``ideal_total_time_s``, ``first_stage_layers``, ``max_stage_layers``, ``last_stage_layers`` (decoder layers of
    the first, fullest and last pipeline ranks, :mod:`aicalc.core.stages`), ``ep``, ``etp``; with the step model
    also ``pipeline_s``, ``bubble_s``, ``tp_comm_s``, ``dp_comm_s``, ``optimizer_s``; with a price ``cost_usd``."""


def stage_split(arch, pp, interleave: int = 1, first_stage_layers=None, last_stage_layers=None):
    """(first, fullest middle, last) pipeline ranks' decoder layers for each ``pp`` (an array), as Megatron-Core and
    torchtitan split them (:func:`aicalc.core.stages.rank_layers`); bad splits are bad input naming the option."""
    import numpy as np

    from aicalc.core.stages import rank_layers

    pp = np.asarray(pp, dtype=np.float64)
    out = [np.zeros(pp.shape) for _ in range(3)]
    from aicalc.api import inputs

    for p in inputs.distinct(pp):
        ranks = [n for n, _ in rank_layers(arch.layers, int(p), int(interleave), first_stage_layers,
                                           last_stage_layers)]
        mid = max(ranks[1:-1]) if len(ranks) > 2 else ranks[0]
        for o, v in zip(out, (ranks[0], mid, ranks[-1]), strict=True):
            o[pp == p] = v
    return tuple(out)


def training_chip(chip, precision: str = "bf16", dp_bandwidth=None, warnings: list[str] | None = None,
                  fp8_attention: bool = False):
    """The chip as the training step model sees it: peak in the math dtype (fp16's where a chip lists no
    bf16), memory bandwidth, the per-direction scale-up link (PCIe Gen4 x16 where none is listed) and the
    per-chip network across nodes (``dp_bandwidth``, bytes/s or ``"25GB/s"``); ``fp8_attention``: the attention
    core at the chip's fp8 peak (bad input where it lists none)."""
    from aicalc.api.catalog import load_chip
    from aicalc.core.train_time import TrainChip
    from aicalc.errors import ParameterError, check_choice
    from aicalc.units import parse_rate

    check_choice("precision", precision, PRECISIONS)
    c = load_chip(chip)
    peak = c.peak_flop_per_s(precision)
    if peak is None:
        if precision == "bf16" and c.peak_flop_per_s("fp16"):
            peak = c.peak_flop_per_s("fp16")
            if warnings is not None:
                warnings.append(f"{c.id} lists no bf16 figure; fp16 peak used")
        else:
            raise ParameterError("precision", precision,
                                 f"has no throughput figure on {c.id} (it lists: {', '.join(c.dense_tflops)})")
    link = (c.interconnect.per_direction_bytes_per_s if c.interconnect else None) or PCIE_FALLBACK_BYTES_PER_S
    domain = (c.interconnect.domain if c.interconnect else None) or 8
    if dp_bandwidth is None:
        dpbw = c.scale_out_gbs * 1e9 if c.scale_out_gbs else DEFAULT_DP_BYTES_PER_S
        if not c.scale_out_gbs and warnings is not None:
            warnings.append(f"{c.id} lists no scale-out network; {DEFAULT_DP_BYTES_PER_S / 1e9:.0f} GB/s per chip "
                            "assumed across scale-up domains (dp_bandwidth)")
    elif isinstance(dp_bandwidth, str):
        dpbw = parse_rate(dp_bandwidth, "bytes", "dp_bandwidth")
    else:
        from aicalc.api import inputs

        dpbw = inputs.single("dp_bandwidth", dp_bandwidth)
    peak16 = c.peak_flop_per_s("bf16") or c.peak_flop_per_s("fp16") or peak
    peak8 = 0.0
    if fp8_attention:
        peak8 = c.peak_flop_per_s("fp8") or 0.0
        if not peak8:
            raise ParameterError("fp8_attention", fp8_attention, f"needs fp8 tensor math, which {c.id} does not list "
                                 f"(it lists: {', '.join(c.dense_tflops)})")
    return c, TrainChip(peak, c.memory_bandwidth_bytes_per_s, link, dpbw,
                        low_precision=precision in ("fp8", "fp4", "int8"), fp4=precision == "fp4",
                        wgrad_16bit=precision == "int8",
                        domain=domain, vector_flop_per_s=c.peak_flop_per_s("fp32") or 0.0,
                        peak_16bit_flop_per_s=peak16, exp_per_s=c.exp_per_s, attention_8bit_flop_per_s=peak8)


# the math dtype of the linear layers: int8 as AQT runs it (MaxText ``quantization=int8``: the forward and the
# activation gradients in int8, the weight gradients in bf16; aicalc.core.train_time.TrainChip.wgrad_16bit)
PRECISIONS = ("bf16", "fp16", "fp8", "fp4", "int8")
GRAD_BYTES = {"bf16": 2.0, "fp32": 4.0}  # a framework profile's reduce_dtype: bytes per gradient element reduced
MIN_SHARE_OF_PEAK = 1e-6  # an MFU or achieved rate below a millionth of the peak is a typo (1e-300 overflowed)


def _achieved(achieved, peak: float, chip_id: str) -> float:
    """FLOP/s per chip achieved (counted with recompute: hardware FLOPs), a number or ``"400TFLOPS"``: at most
    the chip's peak (1000PFLOPS on an H100 gave MFU 970) and at least a millionth of it."""
    from aicalc.api import inputs
    from aicalc.errors import ParameterError
    from aicalc.units import parse_rate

    v = parse_rate(achieved, "flop", "achieved") if isinstance(achieved, str) else inputs.single("achieved", achieved)
    if v > peak:
        raise ParameterError("achieved", achieved, f"is above {chip_id}'s peak of {peak / 1e12:,.4g} TFLOP/s in this "
                             "precision (a utilization above 1)")
    if v < MIN_SHARE_OF_PEAK * peak:
        raise ParameterError("achieved", achieved, f"is below {MIN_SHARE_OF_PEAK:g} of {chip_id}'s peak of "
                             f"{peak / 1e12:,.4g} TFLOP/s (a typo?)")
    return v


def gemm_plateau(chip, class_flop_max: float | None = None) -> dict[str, float]:
    """The GEMM plateau of the chip's generation (``aicalc.core.train_time.GEMM_PLATEAU``) as efficiency
    overrides. A GPU generation with no measured plateau (Blackwell, Ada, CDNA) takes its class's large-GEMM
    ``flop_max`` as the plateau, so that a training step sustains ``train_gemm_sustained`` of it as on Ampere
    and Hopper (the class value was fitted on inference rows, whose GEMMs run without the backward's layouts and
    sustained-load clocks); empty for other chips (TPU v4/v5e/v5p: the class ceiling holds as fitted on MaxText
    training runs, validation/cases/calibration-training.yaml)."""
    from aicalc.core.train_time import GEMM_PLATEAU

    p = GEMM_PLATEAU.get(chip.generation or "")
    if not p:
        return {"train_gemm_plateau": class_flop_max} if chip.kind == "gpu" and class_flop_max else {}
    out = {"train_gemm_plateau": p["16bit"]}
    if "8bit" in p:
        out["train_gemm_plateau_8bit"] = p["8bit"]
    return out


def train_time(model, chip="h100-sxm", tokens=1e12, *, seq=4096, global_batch=1024, micro_batch=1, tp=1, pp=1,
               dp=1, mfu=None, achieved=None, recompute: str = "selective", attention: str = "flash",
               sequence_parallel: bool = True, interleave: int = 1, zero: int = 0, precision: str = "bf16",
               dp_bandwidth=None, efficiency=None, price=None, ep=1, cp=1, framework: str = "megatron",
               goodput=1.0, etp=None, first_stage_layers=None, last_stage_layers=None,
               fp8_all_gather: bool = False, attention_flops: str = "causal", fp8_attention: bool = False) -> TrainTime:
    """Training on ``tokens`` tokens with a TP × PP × CP × DP layout (arrays broadcast; ``ep`` experts split over
    EP ranks folded over the tensor, context and data ranks, with ``etp`` the experts' own tensor parallelism,
    Megatron-Core's MoE parallel folding; default ``tp``; ``zero`` a ZeRO stage, or one per layout broadcast with
    them). Pipeline stages follow
    :func:`stage_split` (``first_stage_layers`` / ``last_stage_layers``: Megatron's
    ``--decoder-{first,last}-pipeline-num-layers``). ``mfu`` (a fraction) or ``achieved`` (FLOP/s per chip, counted with recompute) give the
    rate; else the step-time model predicts it, with the chip class's and the ``framework``'s profile
    (``presets/frameworks/``: megatron, fsdp, deepspeed). ``goodput`` < 1 stretches total time and chip-hours
    for restarts, evaluation and other stages no step model sees. ``fp8_all_gather``: FSDP all-gathers the blocks'
    8-bit linear weights in fp8, 1 byte each (torchao's ``enable_fsdp_float8_all_gather``, torchtitan's
    ``--float8.enable_fsdp_float8_all_gather``; precision fp8 only); else in bf16. ``attention_flops``: how
    model FLOPs (MFU, ``model_flop_per_token``, and a given ``mfu`` or ``achieved``) count attention — "causal"
    (the keys before each token, as FlashAttention computes and Megatron-Bridge and MaxText report) or "full"
    (Megatron-LM's paper formula and PaLM's MFU); the predicted time does not depend on it. ``fp8_attention``:
    the fused attention core in FP8 too, forward and backward (Transformer Engine's ``fp8_dot_product_attention``,
    Megatron-Bridge's ``mixed_precision.fp8_dot_product_attention``; precision fp8 or fp4, flash attention): its
    products at the fp8 peak and ``low_precision_flop_factor`` as inference prices FP8 attention, still bounded by
    the softmax's exponentials (:func:`aicalc.core.train_time.exp_bound`); else in 16-bit. ``precision``: the
    linear layers' math, one of :data:`PRECISIONS`; "int8" is AQT's int8 training (MaxText ``quantization=int8``,
    on chips that list int8 math: TPU v5e, v5p, v6e have no fp8): the forward, its recompute and the activation
    gradients at the int8 peak and ``low_precision_flop_factor``, the weight gradients in bf16; MFU counts against
    the precision's peak, as for fp8."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.catalog import load_model
    from aicalc.api.roofline import efficiency_of
    from aicalc.core import train_time as tt
    from aicalc.core.efficiency import IDEAL
    from aicalc.core.forward import shape_of
    from aicalc.core.geometry import check_tp
    from aicalc.errors import ParameterError, check_choice

    check_choice("recompute", recompute, tt.RECOMPUTE)
    check_choice("attention_flops", attention_flops, tt.ATTENTION_FLOPS)
    from aicalc.catalog import profiles

    fw = profiles.load("framework", framework)
    if recompute == "selective-op" and profiles.family(fw) == "megatron":
        raise ParameterError("recompute", recompute, "is torchtitan's op-level selective activation checkpointing; "
                             "with --framework megatron use none, selective or full")
    if profiles.family(fw) == "deepspeed" and np.any((np.asarray(pp) > 1) & (np.asarray(zero) >= 2)):
        raise ParameterError("zero", zero, "with {pp} > 1 is refused by DeepSpeed's pipeline engine (ZeRO-0 or 1 "
                             "with pipeline stages)")
    check_choice("attention", attention, ("flash", "materialized"))
    for z in (np.asarray(zero).reshape(-1).tolist() if np.ndim(zero) else [zero]):  # a stage, or one per layout
        check_choice("zero", z, (0, 1, 2, 3))
    interleave = inputs.count("interleave", interleave)  # a whole number ≥ 1, as --interleave
    spec = load_model(model)
    warnings: list[str] = []
    if fp8_attention not in (True, False):
        raise ParameterError("fp8_attention", fp8_attention, "must be true or false")
    if fp8_attention and precision not in ("fp8", "fp4"):
        raise ParameterError("fp8_attention", fp8_attention, "runs the attention core in the 8-bit recipe's FP8: it "
                             "needs precision fp8 or fp4")
    if fp8_attention and attention != "flash":
        raise ParameterError("fp8_attention", fp8_attention, "is a fused (flash) attention kernel: it needs "
                             "attention flash")
    chip_obj, tchip = training_chip(chip, precision, dp_bandwidth, warnings, fp8_attention)
    g = inputs.broadcast(tp=inputs.positive("tp", tp, whole=True), pp=inputs.positive("pp", pp, whole=True),
                         dp=inputs.positive("dp", dp, whole=True), seq=inputs.positive("seq", seq, whole=True),
                         global_batch=inputs.positive("global_batch", global_batch, whole=True),
                         micro_batch=inputs.positive("micro_batch", micro_batch, whole=True),
                         zero=np.asarray(zero, dtype=np.float64))
    for t in inputs.distinct(g["tp"]):
        check_tp(spec.arch, int(t))
    if fp8_all_gather not in (True, False):
        raise ParameterError("fp8_all_gather", fp8_all_gather, "must be true or false")
    if fp8_all_gather and precision != "fp8":
        raise ParameterError("fp8_all_gather", fp8_all_gather, "all-gathers the fp8 weights of 8-bit linear layers: "
                             "it needs precision fp8")
    from aicalc.api.train_memory import positions_warning, stage_option

    first_stage_layers = stage_option("first_stage_layers", first_stage_layers)
    last_stage_layers = stage_option("last_stage_layers", last_stage_layers)
    stages = stage_split(spec.arch, g["pp"], int(interleave), first_stage_layers, last_stage_layers)
    if np.any(g["global_batch"] % (g["dp"] * g["micro_batch"])):
        warnings.append("global batch is not a multiple of dp × micro-batch at some points; micro-batches rounded")
    warnings += positions_warning(spec, g["seq"])
    D = inputs.single("tokens", tokens)
    achieved_v = _achieved(achieved, tchip.peak_flop_per_s, chip_obj.id) if achieved is not None else None
    mfu_v = inputs.fraction("mfu", mfu) if mfu is not None else None
    if mfu_v is not None and mfu_v < MIN_SHARE_OF_PEAK:
        raise ParameterError("mfu", mfu, f"is below {MIN_SHARE_OF_PEAK:g} of the peak (a typo?)")
    cls = profiles.load("class", profiles.chip_class(chip_obj))
    from aicalc.api.catalog import chip_factors as own_factors

    chip_factors = {k: v for k, (v, _) in own_factors(chip_obj).items()}
    # what the framework's recipes do differently on this chip's generation (Megatron-Bridge's full-iteration CUDA
    # graphs on Blackwell)
    gen_factors, gen_sources = fw.options["by_generation"].get(chip_obj.generation or "", ({}, {}))
    eff = efficiency_of(None).with_overrides(cls.factors).with_overrides(chip_factors)
    eff = eff.with_overrides(gemm_plateau(chip_obj, eff.flop_max)).with_overrides(fw.factors)
    eff = eff.with_overrides(gen_factors)
    if efficiency:
        eff = efficiency if not isinstance(efficiency, dict) else eff.with_overrides(efficiency)
    goodput = inputs.fraction("goodput", goodput)
    ep_v = inputs.whole("ep", ep)
    cp_v = inputs.whole("cp", cp)
    # expert TP 1 with EP (Megatron-Bridge's MoE recipes, torchtitan's default): aicalc.api.train_memory
    etp_v = inputs.whole("etp", etp) if etp is not None else (1 if ep_v > 1 else None)
    from aicalc.api.train_memory import check_experts

    check_experts(spec.arch, ep_v, etp_v, g["tp"], g["dp"] * cp_v)
    s = shape_of(spec.arch)
    kw = dict(tokens=D, seq=g["seq"], global_batch=g["global_batch"], micro_batch=g["micro_batch"], tp=g["tp"],
              pp=g["pp"], dp=g["dp"], recompute=recompute, flash=attention == "flash",
              sequence_parallel=sequence_parallel, interleave=interleave, zero=g["zero"], ep=ep_v, cp=cp_v,
              goodput=goodput, etp=etp_v, stage_layers=stages,
              grad_bytes=GRAD_BYTES[fw.options.get("reduce_dtype", "bf16")], gather_bytes=1.0 if fp8_all_gather else 2.0,
              attention_flops=attention_flops)
    r = tt.training(s, tchip, eff, mfu=mfu_v, achieved_flop_per_s=achieved_v, **kw)
    ideal = tt.training(s, tchip, IDEAL, **kw)
    cols = {"tp": g["tp"].astype(np.int64), "pp": g["pp"].astype(np.int64), "dp": g["dp"].astype(np.int64),
            "chips": r["chips"].astype(np.int64), "seq": g["seq"].astype(np.int64),
            "global_batch": g["global_batch"].astype(np.int64), "micro_batch": g["micro_batch"].astype(np.int64),
            "tokens": D, "ep": np.full(g["tp"].shape, ep_v, dtype=np.int64),
            "etp": (g["tp"] if etp_v is None else np.full(g["tp"].shape, etp_v)).astype(np.int64)}
    for k, v in zip(("first_stage_layers", "max_stage_layers", "last_stage_layers"),
                    (stages[0], np.maximum(np.maximum(stages[0], stages[1]), stages[2]), stages[2]), strict=True):
        cols[k] = v.astype(np.int64)
    for k in ("model_flop_per_token", "hardware_flop_per_token", "mfu", "hfu", "model_flop_per_s_per_chip",
              "tokens_per_s", "tokens_per_s_per_chip", "step_s", "total_time_s", "chip_hours"):
        cols[k] = r[k]
    cols["ideal_mfu"], cols["ideal_total_time_s"] = ideal["mfu"], ideal["total_time_s"]
    for k in ("pipeline_s", "bubble_s", "tp_comm_s", "dp_comm_s", "ep_comm_s", "pp_comm_s", "optimizer_s"):
        if k in r:
            cols[k] = r[k] + 0.0 * r["mfu"]
    price = inputs.single("price", price) if price is not None else chip_obj.price_per_hour_usd
    if price:
        cols["cost_usd"] = r["chip_hours"] * price
    source = "given" if mfu_v is not None else ("from achieved FLOP/s" if achieved_v is not None
                                                else "auto (efficiency model)")
    cols["goodput"] = goodput
    return TrainTime(cols, warnings, model=spec, chip=chip_obj, train_chip=tchip, efficiency=eff, mfu_source=source,
                     price=price, framework=framework, chip_class=cls.id,
                     sources=[f"{k} = {v:g} ({p.id}: {p.sources[k]})" for p in (cls, fw) for k, v in p.factors.items()]
                     + [f"{k} = {v:g} ({fw.id} on {chip_obj.generation}: {gen_sources[k]})" for k, v in gen_factors.items()])


def layout_memory(model, chip, *, micro_batch, seq, dp, tp, pp, zero, recompute, framework: str = "megatron",
                  interleave: int = 1, cp: int = 1, ep: int = 1, precision: str = "bf16", etp=None,
                  first_stage_layers=None, last_stage_layers=None):
    """``(peak_reserved_bytes, fits)`` of a training layout (arrays broadcast) from
    :func:`aicalc.api.train_memory.train_memory`: Megatron's activation model for the ``megatron`` framework,
    transformers' (``hf``) for FSDP and DeepSpeed, mixed precision with fp32 master weights and flash
    attention, as the step model assumes, and torchtitan's FSDP units where it has them (ZeRO-3 without pipeline
    stages); ``fits`` judges the reserved peak against the chip's memory. ``(None, None)`` where the memory model
    has no such layout (selective recompute outside Megatron)."""
    import numpy as np

    from aicalc.api.train_memory import train_memory
    from aicalc.catalog import profiles

    fam = profiles.family(profiles.load("framework", framework))
    mem_framework = "megatron" if fam == "megatron" else "hf"
    if recompute == "selective" and mem_framework != "megatron":
        return None, None
    # the math dtype's recipe; NVFP4 (Transformer Engine) keeps what its FP8 recipe keeps: 16-bit activations saved,
    # a low-precision weight cache beside the bf16 master
    mixed = {"fp8": "fp8-mixed", "fp4": "fp8-mixed", "fp16": "fp16-mixed"}.get(precision, "bf16-mixed")
    kw = dict(chip=chip, precision=mixed, recompute=recompute, framework=mem_framework, attention="flash",
              sp=mem_framework == "megatron", virtual_stages=int(interleave), cp=cp, ep=int(ep),
              etp=None if etp is None else int(etp), first_stage_layers=first_stage_layers,
              last_stage_layers=last_stage_layers)
    mem = train_memory(model, batch=micro_batch, seq=seq, dp=dp, tp=tp, pp=pp, zero=zero, **kw)
    peak = np.array(mem["peak_reserved_bytes"], dtype=np.float64)
    fits = np.array(mem["fits"], dtype=bool)
    if fam == "torchtitan":
        # torchtitan's apply_fsdp wraps the embedding and [norm, output] as FSDP2 units of their own (train-mem's
        # --fsdp-units torchtitan), on a model without pipeline stages (its pipeline splits shard each stage's
        # modules whole) and with an untied output layer
        from aicalc.api.catalog import load_model

        arch = load_model(model).arch
        b, s, d, t, p, z = np.broadcast_arrays(*(np.asarray(v) for v in (micro_batch, seq, dp, tp, pp, zero)))
        own = (p == 1) & (z >= 3)
        if own.any() and not (arch.tied_embeddings or arch.encoder):
            units = train_memory(model, batch=b[own], seq=s[own], dp=d[own], tp=t[own], pp=1, zero=3,
                                 fsdp_units="torchtitan", **kw)
            peak = np.broadcast_to(peak, own.shape).copy()
            fits = np.broadcast_to(fits, own.shape).copy()
            peak[own], fits[own] = units["peak_reserved_bytes"], units["fits"]
    return peak, fits


def search_train_layouts(model, chip="h100-sxm", chips=8, tokens=1e12, *, seq=4096, global_batch=1024,
                         micro_batches=(1, 2, 4, 8), recompute=None, zero=(1, 3),
                         framework: str = "megatron", precision: str = "bf16", dp_bandwidth=None,
                         top: int = 10, price=None) -> TrainTime:
    """The fastest layouts of ``chips`` chips that fit in memory: every TP (a power of two inside the chip's
    scale-up domain that divides the heads and the FFN) × PP (dividing the layers) × DP, for a MoE every EP
    (a power of two dividing the experts and DP), micro-batch dividing
    the per-replica batch, recompute (default: none and full, and Megatron's selective or torchtitan's op-level
    selective AC) and ZeRO stage (``price``: USD per chip-hour, default the chip preset's, for
    ``cost_usd``), its peak memory from :func:`aicalc.api.train_memory.
    train_memory` (``fits``: the reserved peak within the chip's memory) and its time from :func:`train_time`,
    ranked by total time; the ``top`` fastest that fit (all of them, unranked by fit, when none does)."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.catalog import load_chip, load_model
    from aicalc.catalog import profiles
    from aicalc.errors import ParameterError

    spec = load_model(model)
    arch = spec.arch
    n = inputs.whole("chips", chips)
    gb = inputs.whole("global_batch", global_batch)
    fam = profiles.family(profiles.load("framework", framework))
    if recompute is None:  # the modes the framework's memory model and step model both price
        recompute = ("none", "selective", "full") if fam == "megatron" else \
            ("none", "selective-op", "full") if fam == "torchtitan" else ("none", "full")
    c = load_chip(chip)
    domain = (c.interconnect.domain if c.interconnect else None) or 8
    kv = arch.kv_heads or arch.heads
    tps = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= min(domain, n) and arch.heads % t == 0 and kv % t == 0
           and arch.ffn % t == 0]
    from aicalc.core.layout_search import divisors, pipeline_degrees

    pps = pipeline_degrees(arch.layers, divisors(n))
    if arch.encoder:  # data parallel only, as transformers' Trainer runs an encoder
        tps, pps = [1], [1]
    layouts = [(t, p, n // (t * p), b) for t in tps for p in pps if n % (t * p) == 0
               for b in micro_batches if gb % (n // (t * p) * b) == 0]
    if not layouts:
        raise ParameterError("chips", n, f"admits no TP × PP × DP layout of {spec.id} with a micro-batch dividing "
                             f"the global batch {gb}")
    tp_all, pp_all, dp_all, mb_all = (np.array(x, dtype=np.int64) for x in zip(*layouts, strict=True))
    # expert parallelism (MoE): EP degrees dividing the experts, folded over the tensor × data ranks (Megatron-Core
    # MoE parallel folding) with expert TP 1, the default of train_time and train_memory (and of Megatron-Bridge's
    # MoE recipes); an EP group of ep ranks then divides tp × dp. (Expert TP = tp was also listed once, but both
    # estimators read an unset expert TP as 1, so each such layout came out twice, identical.)
    eps = [1] + ([e for e in (2, 4, 8, 16, 32, 64, 128, 256) if arch.moe.experts % e == 0 and e <= n]
                 if arch.moe is not None else [])
    parts = []
    for ep in eps:
        for etp in ([None] if ep == 1 else [1]):
            sel = (tp_all * dp_all) % ep == 0
            if not sel.any():
                continue
            # every ZeRO stage of these layouts in one call (a stage per layout), stage by stage as rows
            zs = np.repeat(np.asarray(zero, dtype=np.int64), int(sel.sum()))
            tp, pp, dp, mb = (np.tile(x[sel], len(zero)) for x in (tp_all, pp_all, dp_all, mb_all))
            if fam == "deepspeed":  # its PipelineEngine asserts ZeRO < 2 (deepspeed/runtime/pipe/engine.py)
                ok = (pp == 1) | (zs < 2)
                zs, tp, pp, dp, mb = zs[ok], tp[ok], pp[ok], dp[ok], mb[ok]
                if not len(zs):
                    continue
            for rc in recompute:
                peak, fits = layout_memory(spec.id, c.id, micro_batch=mb, seq=seq, dp=dp, tp=tp, pp=pp, zero=zs,
                                           recompute=rc, framework=framework, ep=ep, precision=precision, etp=etp)
                if peak is None:
                    continue  # selective recompute is Megatron's
                t = train_time(spec.id, c.id, tokens, seq=seq, global_batch=gb, micro_batch=mb, tp=tp, pp=pp,
                               dp=dp, recompute=rc, zero=zs, precision=precision, dp_bandwidth=dp_bandwidth,
                               framework=framework, ep=ep, price=price, etp=etp)
                cols = dict(t.columns)
                cols["recompute"] = np.full(len(t), rc)
                cols["zero"] = zs
                cols["peak_reserved_bytes"], cols["fits"] = peak, fits
                parts.append(cols)
    keys = list(parts[0])
    allc = {k: np.concatenate([p[k] for p in parts]) for k in keys}
    fit = allc["fits"]
    warnings = [] if fit.any() else [f"no layout of {n} × {c.id} fits its memory; the fastest are shown anyway"]
    order = np.argsort(np.where(fit, allc["total_time_s"], np.inf) if fit.any() else allc["total_time_s"],
                       kind="stable")
    order = order[: int(top)] if not fit.any() else order[: min(int(top), int(fit.sum()))]
    return TrainTime({k: v[order] for k, v in allc.items()}, warnings, model=spec, chip=c, framework=framework,
                     layouts=len(fit), layouts_fit=int(fit.sum()), price=t.meta["price"])
