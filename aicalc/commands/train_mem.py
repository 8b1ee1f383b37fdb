"""``aicalc train-mem``: training and fine-tuning memory per device, itemized, and a layout search.

Flow: options → catalog (model, chip) → core (``aicalc.core.train_memory``, ``aicalc.core.activations``,
vectorized over the sweep grid) → Result. See docs/train-mem.md for what each number includes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aicalc.errors import AicalcError, ExitCode
from aicalc.result import Result

RECOMPUTE = ("none", "selective", "full")
FRAMEWORKS = ("hf", "megatron")
ATTENTION = ("eager", "sdpa", "flash")
OFFLOAD = ("none", "optimizer", "params")
LOSSES = ("full", "chunked")
LORA_DTYPES = ("fp32", "bf16", "fp16")


@dataclass
class Options:
    model: str
    batch: list[float] = field(default_factory=lambda: [1.0])
    seq: list[float] = field(default_factory=lambda: [2048.0])
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    zero: list[float] = field(default_factory=lambda: [0.0])
    dp: list[float] = field(default_factory=lambda: [1.0])
    tp: list[float] = field(default_factory=lambda: [1.0])
    pp: list[float] = field(default_factory=lambda: [1.0])
    cp: list[float] = field(default_factory=lambda: [1.0])
    ep: int = 1
    sp: bool = False
    virtual_stages: int = 1
    microbatches: int | None = None
    recompute: str = "none"
    framework: str = "hf"
    attention: str = "sdpa"
    grad_dtype: str | None = None
    optimizer_dtype: str | None = None
    lora_rank: int | None = None
    lora_targets: str = "q,v"
    lora_dtype: str = "fp32"
    loss: str = "full"
    optimizer_in_backward: bool = False
    quant: str = "none"
    offload: str = "none"
    dropout: float | None = None
    chip: str | None = None
    budget: int | None = None
    overhead: float | None = None
    search: bool = False
    chips: int | None = None
    top: int = 20


def _check_choice(value: str, choices: tuple[str, ...], option: str) -> None:
    if value not in choices:
        raise AicalcError(f"{option} must be one of {', '.join(choices)}, got '{value}'")


def _ints(values, option: str, minimum: int = 1):
    import numpy as np

    arr = np.asarray(values, dtype=np.float64)
    if np.any(arr != np.round(arr)) or np.any(arr < minimum):
        raise AicalcError(f"{option} takes whole numbers of at least {minimum}, got {values}")
    return arr


def _check_layout(arch, tp, pp, ep, zero, cp=None, seq=None, sp=False, attention="sdpa") -> None:
    """Impossible layouts are bad input (exit 2), with the reason."""
    import numpy as np

    if cp is not None and np.any(cp > 1):
        # causal load balancing splits the sequence into 2·cp chunks, two per rank (Megatron-LM
        # get_batch_on_this_cp_rank; TransformerEngine's p2p CP; torch context_parallel's head-tail balancer)
        bad = (seq % (2 * cp)) != 0
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            raise AicalcError(f"--cp {int(cp[i])} does not divide the sequence {int(seq[i])} into 2·cp = "
                              f"{int(2 * cp[i])} equal chunks (causal load balancing)")
        if attention == "eager":
            raise AicalcError("--cp needs --attention sdpa or flash (ring attention replaces the fused "
                              "attention kernel; eager attention has no context-parallel path)")
    if sp and seq is not None:
        local = seq / (cp if cp is not None else 1.0)
        bad = (local % tp) != 0
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            raise AicalcError(f"--sp: --tp {int(np.broadcast_to(tp, bad.shape)[i])} does not divide the "
                              f"{int(local[i])} tokens per context-parallel rank")

    from aicalc.core.layout import check_tp

    for t in np.unique(tp):
        check_tp(arch, int(t))
        if arch.ffn % int(t):
            raise AicalcError(f"--tp {int(t)} does not divide the FFN size {arch.ffn}")
    for p in np.unique(pp):
        if arch.layers % int(p):
            raise AicalcError(f"--pp {int(p)} does not divide the {arch.layers} layers")
    if ep > 1 and (arch.moe is None or arch.moe.experts % ep):
        what = "the model has no experts" if arch.moe is None else f"it does not divide the {arch.moe.experts} experts"
        raise AicalcError(f"--ep {ep}: {what}")
    if np.any((zero < 0) | (zero > 3)):
        raise AicalcError("--zero takes stages 0 to 3")


def evaluate(arch, o: Options, g: dict):
    """The core call: every column of the result for the grid ``g`` (numpy arrays of equal length)."""
    import numpy as np

    from aicalc.core import activations as act
    from aicalc.core import train_memory as tm

    B, S, dp, tp, pp, zero = g["batch"], g["seq"], g["dp"], g["tp"], g["pp"], g["zero"]
    cp = g.get("cp", 1.0)
    # Context parallelism: every rank holds S/cp tokens of each sequence (activations), the same parameters
    # as its CP peers, and ZeRO / the distributed optimizer shard over dp·cp (see tm.shard_states).
    S_loc = np.asarray(S, dtype=np.float64) / cp
    shard = dp * cp
    recompute = g.get("recompute", o.recompute)
    split = tm.split_params(arch)
    grad_dtype = o.grad_dtype
    if grad_dtype is None and o.framework == "megatron" and o.precision.endswith("-mixed"):
        grad_dtype = "fp32"  # Megatron accumulates and all-reduces gradients in fp32 by default (TM-03/TM-04)
    sb = tm.state_bytes(o.precision, o.optimizer, grad_dtype, o.optimizer_dtype)
    a = 4.0 if o.precision == "fp32" else 2.0
    n_dev = tm.params_per_device(split, tp, pp, o.ep)
    frac = n_dev / split.total  # this device's share of the model

    if o.lora_rank:
        targets = tm.lora_targets(o.lora_targets)
        lora_total = tm.lora_params(arch, o.lora_rank, targets)
        lora_dev = lora_total / (pp * tp)
        base_b = tm.base_weight_bytes(split, o.quant, sb.weights)
        # adapters are fp32 by default (PEFT autocast_adapter_dtype=True): 4 w + 4 g + fp32 optimizer states;
        # --lora-dtype bf16 keeps them in the model dtype (torchtune): 2 w + 2 g + states in that dtype
        asb = tm.state_bytes("fp32" if o.lora_dtype == "fp32" else "bf16", o.optimizer)
        w0 = n_dev * base_b + lora_dev * asb.weights
        weights = w0 / np.where(zero >= 3, shard, 1.0)
        _, grads, optimizer = tm.shard_states(lora_dev, lora_dev, asb, zero, shard)
        trainable_total = float(lora_total)
    else:
        if o.quant != "none":
            raise AicalcError("--quant needs --lora-rank (quantized base weights are frozen; QLoRA)")
        extra = 0.0
        if o.optimizer == "adafactor":
            extra = tm.adafactor_elements(arch) * 4.0 * frac
        weights, grads, optimizer = tm.shard_states(n_dev, n_dev, sb, zero, shard, extra)
        trainable_total = float(split.total)
        targets = ()

    layers_dev = arch.layers / pp
    if o.framework == "megatron":
        # one layer without recompute: what a recomputed layer rebuilds in backward (workspace)
        layer = act.korthikanti_layer(S_loc, B, arch.hidden, arch.heads, tp, o.sp, "none", o.attention != "eager")
        activ = act.korthikanti_first_stage(S_loc, B, arch.hidden, arch.heads, arch.layers, tp, pp, o.sp,
                                            recompute, o.attention != "eager", o.virtual_stages, o.microbatches)
        activ = activ + act.korthikanti_outside(S_loc, B, arch.hidden, arch.vocab, tp, pp, o.sp)
    else:
        dropout = o.dropout if o.dropout is not None else (0.1 if arch.family == "gpt2" else 0.0)
        kw = dict(dropout=dropout, attn_dropout=dropout if arch.family == "gpt2" else 0.0)
        layer = act.hf_layer(B, S_loc, arch, a, o.attention, tp, **kw)
        inflight = np.minimum(pp, o.microbatches) if o.microbatches else pp
        per_layer = np.where(np.asarray(recompute) == "full", a * B * S_loc * arch.hidden, layer)
        if o.lora_rank:
            per_layer = per_layer + np.where(np.asarray(recompute) == "full", 0.0,
                                             _lora_saved(arch, targets, o.lora_rank, B, S_loc, a, tp,
                                                         o.lora_dtype == "fp32"))
        activ = per_layer * layers_dev * inflight
        activ = activ + act.hf_outside(B, S_loc, arch, a, tp, kw["dropout"], recompute=recompute,
                                       attention=o.attention, loss=o.loss)
    layer_max = layer
    loss_t, workspace, gather = tm.transient_bytes(B, S, arch, a, tp, o.framework, o.attention, recompute,
                                                   layer_max, zero, split.largest_layer, sb.weights, cp, o.loss)
    if o.optimizer_in_backward:
        # one parameter's gradient at a time (tm.largest_param_tensor), sharded like the gradients
        gbytes = asb.grads if o.lora_rank else sb.grads
        grads = tm.largest_param_tensor(arch, o.lora_rank) * gbytes / tp / np.where(zero >= 2, shard, 1.0)
    host = np.zeros_like(np.asarray(weights, dtype=np.float64))
    if o.offload in ("optimizer", "params"):
        host = host + optimizer
        optimizer = optimizer * 0.0
    if o.offload == "params":
        host = host + weights
        weights = weights * 0.0
    overhead = tm.CUDA_OVERHEAD_BYTES if o.overhead is None else o.overhead
    transient = loss_t + workspace + gather
    # Gradients live through the forward when something keeps them between steps: DDP/ZeRO buckets
    # (dp > 1), gradient accumulation (microbatches > 1), Megatron's contiguous grad buffer. Otherwise
    # (one device, zero_grad(set_to_none=True)) they are allocated in the backward while the activations
    # are freed, and the peak is the larger of the two phases.
    persistent = (o.framework == "megatron") | (np.asarray(shard) > 1) | ((o.microbatches or 1) > 1)
    allocated = weights + optimizer + np.where(persistent, grads + activ + transient,
                                               np.maximum(activ + transient, grads + workspace + gather))
    return {
        "batch": B, "seq": S, "dp": dp, "tp": tp, "pp": pp, "cp": cp, "zero": zero,
        "recompute": recompute,
        "params": float(split.total), "params_per_device": n_dev, "trainable_params": trainable_total,
        "weights_bytes": weights, "gradients_bytes": grads, "optimizer_bytes": optimizer,
        "activations_bytes": activ, "transient_bytes": transient, "overhead_bytes": overhead,
        "peak_allocated_bytes": allocated, "peak_bytes": allocated + overhead,
        "host_bytes": host,
        "states_bytes_per_param": (weights + grads + optimizer + host) / n_dev,
    }


def _lora_saved(arch, targets, rank, B, S, a, tp, fp32_adapters=True):
    """Saved by PEFT's LoRA path per layer (``peft/tuners/lora/layer.py``, derived, not harness-checked):
    the input cast to the fp32 adapter dtype (4·BS·in per target when a = 2; shared with the base layer's
    input when a = 4) and the fp32 A output (4·BS·r) per target. Adapters in the model dtype
    (``--lora-dtype bf16``, torchtune's ``LoRALinear``) read the base layer's saved input as is and save
    only the A output, a·BS·r per target (lora_dropout 0 is an identity)."""
    if not fp32_adapters:
        n = sum(1 for t in targets if t != "gate" or arch.gated_ffn)
        return n * a * B * S * rank
    H, A, d, F = arch.hidden, arch.heads, arch.head_dim, arch.ffn
    ins = {"q": H, "k": H, "v": H, "o": A * d / tp, "gate": H, "up": H, "down": F / tp}
    total = 0.0
    for t in targets:
        if t == "gate" and not arch.gated_ffn:
            continue
        total = total + (4.0 * B * S * ins[t] if a < 4 else 0.0) + 4.0 * B * S * rank
    return total


def _inputs(o: Options) -> dict:
    return {k: v for k, v in o.__dict__.items() if v is not None}


def run(o: Options) -> Result:
    import numpy as np

    from aicalc.catalog import store
    from aicalc.result import rows_from_columns
    from aicalc.sweep import grid

    _check_choice(o.recompute, RECOMPUTE, "--recompute")
    _check_choice(o.framework, FRAMEWORKS, "--framework")
    _check_choice(o.attention, ATTENTION, "--attention")
    _check_choice(o.offload, OFFLOAD, "--offload")
    _check_choice(o.loss, LOSSES, "--loss")
    _check_choice(o.lora_dtype, LORA_DTYPES, "--lora-dtype")
    if o.framework == "megatron" and o.loss != "full":
        raise AicalcError("--loss chunked is torchtune's chunked cross-entropy; Megatron's fused vocab-parallel "
                          "loss is the --loss full model with --framework megatron")
    if o.optimizer_in_backward and (o.microbatches or 1) > 1:
        raise AicalcError("--optimizer-in-backward steps each parameter as its gradient is ready, so it cannot "
                          "accumulate gradients over --microbatches > 1")
    if o.framework == "hf" and o.recompute == "selective":
        raise AicalcError("--recompute selective is Megatron's; with --framework hf use none or full "
                          "(gradient checkpointing)")
    if o.framework == "hf" and (o.sp or o.virtual_stages > 1):
        raise AicalcError("--sp and --virtual-stages are Megatron features; add --framework megatron")
    spec = store.resolve_model(o.model)
    arch = spec.arch
    chip, count = None, 1
    if o.chip:
        chip, count = store.resolve_chip(o.chip)
    if o.search:
        return _search(spec, o, chip, count)
    g = grid(batch=_ints(o.batch, "--batch"), seq=_ints(o.seq, "--seq"), dp=_ints(o.dp, "--dp"),
             tp=_ints(o.tp, "--tp"), pp=_ints(o.pp, "--pp"), cp=_ints(o.cp, "--cp"),
             zero=_ints(o.zero, "--zero", 0))
    _check_layout(arch, g["tp"], g["pp"], o.ep, g["zero"], g["cp"], g["seq"], o.sp, o.attention)
    if o.offload == "params" and np.any(g["zero"] < 3):
        raise AicalcError("--offload params needs --zero 3 (ZeRO-Infinity / FSDP CPU offload)")
    cols = evaluate(arch, o, g)
    cols = {"model": spec.id, **cols}
    warnings: list[str] = []
    code = ExitCode.OK
    limit = o.budget
    if chip is not None:
        cols["chip_memory_bytes"] = float(chip.memory_bytes)
        limit = chip.memory_bytes if limit is None else min(limit, chip.memory_bytes)
    if limit is not None:
        fits = cols["peak_bytes"] <= limit
        cols["fits"] = fits
        bad = np.flatnonzero(~np.broadcast_to(fits, np.shape(g["batch"])))
        if bad.size:
            code = ExitCode.BUDGET
            what = f"{o.chip} memory" if o.budget is None else "the budget"
            rows = ", ".join(str(i + 1) for i in bad[:10]) + (" …" if bad.size > 10 else "")
            warnings.append(f"peak memory per device exceeds {what} ({limit:,} B) in row(s) {rows}")
    rows = rows_from_columns(cols)
    for r in rows:
        for k in ("batch", "seq", "dp", "tp", "pp", "cp", "zero", "params", "trainable_params"):
            r[k] = int(r[k])
    columns = ["batch", "seq", "dp", "tp", "pp", *(["cp"] if np.any(g["cp"] > 1) else []), "zero",
               "trainable_params", "weights_bytes", "gradients_bytes",
               "optimizer_bytes", "activations_bytes", "transient_bytes", "peak_bytes"]
    if "fits" in cols:
        columns.append("fits")
    notes = [f"{spec.id}: {rows[0]['params']:,} params; {o.precision} + {o.optimizer}; framework {o.framework}, "
             f"attention {o.attention}, recompute {o.recompute}",
             "peak = weights + gradients + optimizer + activations + transients (loss, largest layer's workspace, "
             f"ZeRO-3 gather) + {rows[0]['overhead_bytes'] / 2**30:.2g} GiB CUDA context/allocator overhead; "
             "see docs/train-mem.md"]
    return Result("train-mem", _inputs(o), rows, warnings, code, title=f"train-mem {spec.id}", notes=notes,
                  columns=columns)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _search(spec, o: Options, chip, chip_count: int = 1) -> Result:
    """Enumerate TP × PP × DP × ZeRO × micro-batch × recompute for ``chips`` devices in one vectorized
    pass, keep the layouts whose peak fits the chip (or ``--budget``), rank by headroom."""
    import numpy as np

    from aicalc.result import rows_from_columns

    arch = spec.arch
    if chip is None and o.budget is None:
        raise AicalcError("--search needs --chip (or --budget) to know what fits")
    if not o.chips and chip_count > 1:
        o = Options(**{**o.__dict__, "chips": chip_count})  # a node preset: all its chips
    if not o.chips:
        raise AicalcError("--search needs --chips N, the number of devices to lay the model out on")
    limit = min(x for x in (o.budget, chip.memory_bytes if chip else None) if x is not None)
    tps = [t for t in _divisors(o.chips) if arch.heads % t == 0 and arch.ffn % t == 0
           and (arch.kv_heads % t == 0 or t % arch.kv_heads == 0) and t <= 64]
    pps = [p for p in _divisors(o.chips) if arch.layers % p == 0]
    # context parallelism is searched over the --cp values given (default 1 only: CP is worth it for long
    # sequences, and each value multiplies the layouts); eager attention has no CP path
    cps = sorted({int(c) for c in _ints(o.cp, "--cp")})
    if o.attention == "eager":
        cps = [1]
    layouts = [(t, p, c, o.chips // (t * p * c)) for t in tps for p in pps for c in cps
               if o.chips % (t * p * c) == 0]
    if not layouts:
        raise AicalcError(f"no TP × PP × CP layout divides {o.chips} devices")
    max_b = int(max(o.batch))
    mbs = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= max_b] or [1]
    recomputes = ["none", "full"] + (["selective"] if o.framework == "megatron" else [])
    parts = []
    for rc in recomputes:
        lay = np.asarray(layouts, dtype=np.float64)
        idx = np.arange(len(layouts))
        z = np.arange(4.0)
        ix, Z, MB, SQ = (m.ravel() for m in np.meshgrid(idx, z, np.asarray(mbs, float),
                                                        np.asarray(o.seq, float), indexing="ij"))
        g = {"batch": MB, "seq": SQ, "tp": lay[ix, 0], "pp": lay[ix, 1], "cp": lay[ix, 2], "dp": lay[ix, 3],
             "zero": Z, "recompute": np.full(MB.shape, rc)}
        oo = Options(**{**o.__dict__, "recompute": rc})
        cols = evaluate(arch, oo, g)
        cols["recompute"] = g["recompute"]
        # a CP degree must split each sequence into 2·cp chunks; with SP, tp must divide the local tokens
        valid = (SQ % (2 * g["cp"]) == 0) | (g["cp"] == 1)
        if o.sp:
            valid &= (SQ / g["cp"]) % g["tp"] == 0
        cols["valid"] = valid
        parts.append({k: np.broadcast_to(np.asarray(v), MB.shape) for k, v in cols.items()})
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    headroom = limit - cols["peak_bytes"]
    valid = cols.pop("valid")
    keep = (headroom >= 0) & valid
    n_total = int(valid.sum())
    order = np.argsort(-headroom[keep], kind="stable")[: o.top]
    sel = {k: v[keep][order] for k, v in cols.items()}
    sel["headroom_bytes"] = headroom[keep][order]
    rows = rows_from_columns({"model": np.full(len(order), spec.id), **sel}) if len(order) else []
    for r in rows:
        for k in ("batch", "seq", "dp", "tp", "pp", "cp", "zero", "params", "trainable_params"):
            r[k] = int(r[k])
    warnings = []
    code = ExitCode.OK
    if not rows:
        code = ExitCode.BUDGET
        warnings.append(f"no layout of {o.chips} devices fits {limit:,} B per device")
    columns = ["tp", "pp", *(["cp"] if max(cps) > 1 else []), "dp", "zero", "batch", "seq", "recompute",
               "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "peak_bytes", "headroom_bytes"]
    notes = [f"{int(keep.sum()):,} of {n_total:,} layouts fit; ranked by memory headroom (top {o.top})"]
    return Result("train-mem", _inputs(o), rows, warnings, code, title=f"train-mem --search {spec.id}",
                  notes=notes, columns=columns)
