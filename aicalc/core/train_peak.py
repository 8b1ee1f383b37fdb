"""Training memory per device for a grid of layouts: the composition of the terms in
``core.train_memory`` (model states, sharding, transients) and ``core.activations`` (what backward keeps).

``o`` is a :class:`TrainSetup` (precision, optimizer, framework, attention, recompute, LoRA/QLoRA, offload and
the like); ``g`` holds numpy arrays of equal length for batch, seq, dp, tp, pp, zero (and optionally cp,
recompute). Pure numpy, no I/O.
"""

from aicalc.errors import ParameterError
from aicalc.tuples import Named

# litgpt: LitGPT's finetune scripts (the hf activation model, LitGPT's loss and its bitsandbytes plugin)
FRAMEWORKS = ("hf", "megatron", "litgpt")
ATTENTION = ("eager", "sdpa", "flash")
OFFLOAD = ("none", "optimizer", "params")
LOSSES = ("full", "chunked", "fp32-kept")
FSDP_UNITS = ("root", "split", "torchtitan")
LORA_DTYPES = ("fp32", "bf16", "fp16")
# the phases of a step whose live memory can set the peak (docs/train-mem.md "Peak"); "all" is megatron's one sum
PHASES = ("loss", "backward", "gradients", "optimizer", "all", "forward")


class TrainSetup(Named):
    """What a training step keeps, besides the layout grid: see docs/train-mem.md for each choice. A named tuple
    (``_replace`` for a copy with other choices): a frozen dataclass compiles its generated methods at import,
    docs/robustness.md."""

    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    grad_dtype: str | None = None
    optimizer_dtype: str | None = None
    ep: int = 1
    etp: int | None = None  # expert tensor parallelism (MoE parallel folding); None: the attention's tp
    sp: bool = False
    virtual_stages: int = 1
    first_stage_layers: int | None = None  # Megatron's --decoder-first-pipeline-num-layers
    last_stage_layers: int | None = None  # Megatron's --decoder-last-pipeline-num-layers
    microbatches: int | None = None
    recompute: str = "none"
    framework: str = "hf"
    attention: str = "sdpa"
    lora_rank: int | None = None
    lora_targets: str = "q,v"
    lora_dtype: str = "fp32"
    loss: str = "full"
    optimizer_in_backward: bool = False
    quant: str = "none"
    offload: str = "none"
    dropout: float | None = None
    overhead: float | None = None
    # the chip class's memory outside the tensors (presets/classes, aicalc.api.train_memory fills them for a chip):
    # with context_bytes set (and no overhead given), the overhead is the context plus NCCL's buffers per layout
    context_bytes: float | None = None
    comm_bytes: float | None = None
    all_to_all_bytes: float | None = None
    adamw: str = "foreach"
    lora_dropout: float = 0.0  # LoRA's own dropout on the adapters' input (PEFT/LitGPT lora_dropout)
    bnb_keeps_inputs: bool = False  # bitsandbytes < 0.43.2: MatMul4Bit keeps its input (tm.bnb_kept_inputs)
    # bitsandbytes ≥ 0.50: MatMul4Bit's forward is one fused gemm_4bit op, so a compiled layer saves no dequantized
    # weight (qlora_compiled_weights)
    bnb_fused_matmul: bool = False
    compile: bool = False  # each decoder layer torch.compile'd (act.compiled_saving)
    # which PyTorch FSDP runs zero 3 outside Megatron: 2 (fully_shard: torchtitan, torchtune) or 1
    # (FullyShardedDataParallel: HF Trainer through accelerate, torchtune before 2024-09); tm.fsdp1_gradients
    fsdp_version: int = 2
    # FSDP2's units (tm.fsdp2_buffers): "root" (the embedding, final norm and output layer in the root: HF
    # accelerate, torchtune's default), "split" (the embedding and output layer their own units: torchtune's
    # custom_sharded_layers), "torchtitan" (apply_fsdp: [norm, output] not resharded after the forward)
    fsdp_units: str = "root"
    # the gradients stay allocated between steps: ``optimizer.zero_grad(set_to_none=False)``, PyTorch < 2.0's
    # default, which HF Trainer's ``model.zero_grad()`` ran until then
    grads_kept: bool = False


CHUNK = 1 << 17  # grid points evaluated at a time: every intermediate array stays in the processor's cache


def evaluate(arch, o, g: dict, grid_columns: bool = True):
    """The core call: every column of the result for the grid ``g`` (numpy arrays of equal length), for the
    pipeline stage whose peak is the highest (:func:`aicalc.core.stages.stage_candidates`: the first stage holds the
    embedding and the most micro-batches in flight under 1F1B, the fullest middle stage the most layers, the last the
    LM head and the loss). Columns ``stage`` (its pipeline rank) and ``stage_layers`` say which. ``grid_columns``
    False: without the columns that repeat the grid (batch, seq, dp, tp, pp, cp, zero), for a caller that has them.

    A long one-dimensional grid of one pipeline depth (a batch × length sweep) is evaluated :data:`CHUNK` points
    at a time, one pipeline stage after the other, each written into one block of memory: the same operations on
    each point, so the same numbers, but the intermediate arrays of a chunk stay in the processor's cache instead
    of each going out to memory and back, and a layout column that holds one value is computed once per stage
    instead of once per point."""
    import numpy as np

    vals = {k: np.asarray(v) for k, v in g.items()}
    n = max((v.shape[0] for v in vals.values() if v.ndim == 1), default=0)
    part = None
    if n > CHUNK and all(v.ndim == 0 or (v.ndim == 1 and v.shape[0] in (1, n)) for v in vals.values()):
        # a column that is one value repeated (a broadcast scalar, or numbers whose least and greatest agree) goes
        # in as that value; None: sliced into chunks
        part = {k: (v[0] if _single(v) else None) if v.ndim == 1 and v.shape[0] == n else g[k]
                for k, v in vals.items()}
    if part is None or part["pp"] is None or np.ndim(part["pp"]) != 0:
        # short, or pipeline depths that vary (a layout search's slice): the grid at once
        cols = _evaluate(arch, o, g)
        return cols if grid_columns else {f: v for f, v in cols.items() if f not in GRID}
    # which columns are arrays, and of what type, as the whole grid at once gives them: one point says; a second
    # stage is merged in wherever pp > 1, which makes every merged column a float64 array
    probe = _evaluate(arch, o, {k: v[:1] if v.ndim == 1 and v.shape[0] == n else g[k] for k, v in vals.items()})
    merged = bool(part["pp"] > 1)
    out = {}
    arrays = [f for f, v in probe.items() if f not in ("recompute", "params", "trainable_params")
              and (merged or np.ndim(v)) and (grid_columns or f not in GRID)]
    floats = [f for f in arrays if merged or np.asarray(probe[f]).dtype == np.float64]
    block = iter(np.empty((len(floats), n)))  # one allocation: it pages in faster than one array per column
    for f, v in probe.items():
        if f == "recompute":
            out[f] = g.get("recompute", o.recompute)
        elif f in arrays:
            out[f] = next(block) if f in floats else np.empty(n, dtype=np.asarray(v).dtype)
        elif grid_columns or f not in GRID:
            out[f] = v  # the same for every point: it depends on no array of the grid
    # a column that has been one number so far (each stage's column a scalar, the same in every chunk) is kept as
    # that number and written out only when another value comes: one that stays one number is never written
    same = dict.fromkeys(arrays, _NONE)
    for lo in range(0, n, CHUNK):
        sl = slice(lo, lo + CHUNK)
        chunk = {k: vals[k][sl] if v is None else v for k, v in part.items()}
        # each stage's columns written in turn, a later stage's where its peak is higher
        for cols, worse, _ in _stages(arch, o, chunk):
            if worse is not None and not worse.all():
                if not worse.any():
                    continue
                for f in arrays:
                    if _keeps(same, f, cols[f], out[f], sl.stop):
                        np.copyto(out[f][sl], cols[f], where=worse)
                continue
            for f in arrays:
                one = _one(cols[f]) if worse is None and lo == 0 else _NONE
                if one is not _NONE:
                    same[f] = one  # the first value
                elif _keeps(same, f, cols[f], out[f], sl.start):
                    np.copyto(out[f][sl], cols[f])
    for f, v in same.items():
        if v is not _NONE:  # one number for every point: a read-only view of it (as api.results.Block.full)
            out[f] = np.broadcast_to(np.asarray(v, dtype=out[f].dtype), (n,))
    return out


_NONE = object()  # a column written point by point (:func:`evaluate`)


def _keeps(same: dict, f: str, v, column, upto: int) -> bool:
    """For :func:`evaluate`: False where ``v`` is the one number column ``f`` has held so far (nothing to write),
    else True, after writing that number into ``column`` up to ``upto`` (the points it stands for) and marking
    the column as written point by point."""
    held = same[f]
    if held is _NONE:
        return True
    one = _one(v)
    if one is not _NONE and one == held:
        return False
    column[:upto] = held
    same[f] = _NONE
    return True


def _one(v):
    """The number ``v`` holds at every point where it is one (a scalar, or one value broadcast), else ``_NONE``."""
    import numpy as np

    if np.ndim(v) == 0:
        return v
    if np.ndim(v) == 1 and v.strides[0] == 0 and v.size:
        return v[0]
    return _NONE


def _single(v) -> bool:
    """``v`` (one-dimensional) holds one value, repeated."""
    return v.strides[0] == 0 or (v.dtype.kind in "fiub" and v.min() == v.max())


GRID = ("batch", "seq", "dp", "tp", "pp", "cp", "zero")


def _stages(arch, o, g: dict):
    """For ``g`` whose ``pp`` is one number: (columns, where they beat the stages before, the highest peak so far)
    for the first stage (None: everywhere), then the last and the fullest middle stage where they exist; the
    columns are scalars where they depend on no array of ``g``."""
    import numpy as np

    from aicalc.core.stages import stage_candidates

    p = float(g["pp"])
    moe = tuple(arch.moe_layers) if arch.moe is not None else None
    c = stage_candidates(arch.layers, int(p), o.virtual_stages, o.first_stage_layers, o.last_stage_layers, moe)
    first = [np.float64(x) for x in c["first"]]
    best = _stage(arch, o, g, *first, np.float64(p), lean=True)
    peak = best["peak_allocated_bytes"]
    yield best, None, peak
    for k in ("last", "middle"):
        r, n, m = (np.float64(x) for x in c.get(k, c["first"]))
        if not (p > 1 if k == "last" else p > 2 and n > first[1]):
            continue
        cols = _stage(arch, o, g, r, n, m, np.float64(p), lean=True)
        worse = cols["peak_allocated_bytes"] > peak
        peak = np.where(worse, cols["peak_allocated_bytes"], peak)
        yield cols, worse, peak


def peak_reserved_staged(arch, o, g: dict, rank, stage_layers, stage_moe):
    """The ``peak_reserved_bytes`` column of :func:`evaluate` alone, for a layout search's block: ``g``'s entries
    are arrays that broadcast together (each axis on its own dimension, so a term that depends on a few axes is
    computed once per value of those), ``pp`` among them, and ``rank``, ``stage_layers``, ``stage_moe`` hold the
    candidate stages along a leading axis (first, last, middle, as :func:`_stages` yields them; a stage a layout
    lacks repeats the first). Every stage of every layout in one evaluation, the same operations on each point as
    :func:`evaluate`, so the same numbers: the highest peak over the stages, compared in :func:`_stages`' order
    (the first winning ties)."""
    import numpy as np

    cols = _stage(arch, o, g, rank, stage_layers, stage_moe, g["pp"], lean=True, peak_only=True)
    alloc = cols["peak_allocated_bytes"]
    alloc = np.broadcast_to(alloc, np.broadcast_shapes(np.shape(alloc), np.shape(rank)))
    peak = alloc[0]
    for k in range(1, len(alloc)):
        peak = np.where(alloc[k] > peak, alloc[k], peak)
    return _reserved(peak, cols["overhead_bytes"], arch, o.framework, g.get("recompute", o.recompute),
                     cols["grads_kept"])


def amp_casts_freed(arch, split, recompute, stage_layers, tp, a):
    """Bytes of autocast's cached weight casts gone when the loss's backward begins, under torch AMP with
    checkpointed layers (``weights_bytes`` counts an a-byte copy of every weight under ``bf16-mixed``).

    ``torch.autocast`` caches the a-byte cast of each fp32 leaf weight for as long as the autocast region lasts
    (``at::autocast::cached_casts``, cleared when the outermost region exits). Without recompute each linear's
    backward saves its cast weight, so the copies live through the backward; inside a checkpointed layer the
    forward saves nothing (non-reentrant ``torch.utils.checkpoint``; selective-op's ``_to_copy`` is
    PREFER_RECOMPUTE), so those casts die with the cache when the forward and loss leave autocast (the training
    loop's ``with torch.autocast(...): loss = model(...)``, then ``loss.backward()``), and a layer's backward
    recasts its own weights inside its recompute. The copies of the decoder layers' weights that are fully
    checkpointed (``full``, every-N's checkpointed layers, every layer under selective-op) are therefore not
    held at the loss's backward, only at the end of the forward (the ``forward`` phase). Measured on an H200:
    Llama-3.2-1B AMP with selective-op at batch 4 x 2048, 32.56 GB (tests/data/measured/h200-step-peak-2.json);
    the CPU trace puts the forward's end and the loss's backward within 0.3 % of each other."""
    import numpy as np

    from aicalc.core import activations as act

    ckpt = act._pick(np.asarray(recompute) == act.SELECTIVE_OP, np.asarray(stage_layers, dtype=np.float64),
                     act.checkpointed_layers(recompute, stage_layers))
    return a * (split.layers + split.experts) / arch.layers * ckpt / tp


def _reserved(allocated, overhead, arch=None, framework="hf", recompute="none", grads_kept=False):
    """What the allocator reserves for ``allocated`` bytes, plus the memory outside it (``peak_reserved_bytes``):
    ``ALLOCATOR_RESERVE`` and, for the step's layout, ``train_memory.fragmentation``."""
    import numpy as np

    from aicalc.core import train_memory as tm

    frag = 1.0 if arch is None else tm.fragmentation(arch, framework, recompute, grads_kept)
    reserved = allocated * (1.0 + tm.ALLOCATOR_RESERVE)
    if not (np.ndim(frag) == 0 and frag == 1.0):  # x · 1 is x
        reserved = reserved * frag
    return reserved + overhead


def _evaluate(arch, o, g: dict):
    """:func:`evaluate` on a grid at once."""
    import numpy as np

    from aicalc.core.stages import stage_candidates

    pp = np.asarray(g["pp"], dtype=np.float64)
    shape = np.broadcast(*(np.asarray(v) for v in g.values())).shape
    pp = np.broadcast_to(pp, shape)
    moe = tuple(arch.moe_layers) if arch.moe is not None else None
    names = ("first", "middle", "last")
    st = {k: {f: np.zeros(shape) for f in ("rank", "layers", "moe")} for k in names}
    for p in sorted(set(pp.reshape(-1).tolist())):  # np.unique would import numpy.ma on a one-off query
        c = stage_candidates(arch.layers, int(p), o.virtual_stages, o.first_stage_layers, o.last_stage_layers, moe)
        sel = pp == p
        for k in names:
            r, n, m = c.get(k, c["first"])
            st[k]["rank"][sel], st[k]["layers"][sel], st[k]["moe"][sel] = r, n, m
    best = _stage(arch, o, g, st["first"]["rank"], st["first"]["layers"], st["first"]["moe"], pp)
    # the last stage wherever there is one; a middle stage only where it holds more layers than the first (with as
    # many layers it has fewer micro-batches in flight and no embedding)
    for k, need in (("last", pp > 1), ("middle", (pp > 2) & (st["middle"]["layers"] > st["first"]["layers"]))):
        if not np.any(need):
            continue
        sub = {f: np.broadcast_to(np.asarray(v), shape)[need] for f, v in g.items()}
        cols = _stage(arch, o, sub, st[k]["rank"][need], st[k]["layers"][need], st[k]["moe"][need], pp[need])
        worse = np.asarray(cols["peak_allocated_bytes"]) > np.broadcast_to(best["peak_allocated_bytes"], shape)[need]
        for f in best:
            if f in ("recompute", "params", "trainable_params"):
                continue
            merged = np.array(np.broadcast_to(np.asarray(best[f], dtype=np.float64), shape))
            merged[need] = np.where(worse, cols[f], merged[need])
            best[f] = merged
    return best


def _stage(arch, o, g: dict, rank, stage_layers, stage_moe, pp, lean=False, peak_only=False):
    """Every column for one pipeline rank ``rank`` holding ``stage_layers`` decoder layers (``stage_moe`` of them
    MoE), arrays over the grid ``g`` (``lean``: a column that depends on no array of ``g`` left a scalar;
    ``peak_only``: only ``peak_allocated_bytes`` and ``overhead_bytes``, what a layout search ranks on)."""
    import numpy as np

    from aicalc.core import activations as act
    from aicalc.core import train_memory as tm
    from aicalc.core.activations import _pick

    B, S, dp, tp, zero = g["batch"], g["seq"], g["dp"], g["tp"], g["zero"]
    is_first, is_last = rank == 0, rank == pp - 1
    inflight_cap = pp - rank  # 1F1B: rank r holds up to pp − r micro-batches in flight
    cp = g.get("cp", 1.0)
    # Context parallelism: every rank holds S/cp tokens of each sequence (activations), the same parameters
    # as its CP peers, and ZeRO / the distributed optimizer shard over dp·cp (see tm.shard_states).
    S_loc = np.asarray(S, dtype=np.float64)
    if not (np.ndim(cp) == 0 and cp == 1):  # S / 1 is S
        S_loc = S_loc / cp
    shard = dp * cp
    recompute = g.get("recompute", o.recompute)
    split = tm.split_params(arch)
    grad_dtype = o.grad_dtype
    if grad_dtype is None and o.framework == "megatron" and o.precision.endswith("-mixed"):
        grad_dtype = "fp32"  # Megatron accumulates and all-reduces gradients in fp32 by default (TM-03/TM-04)
    sb = tm.state_bytes(o.precision, o.optimizer, grad_dtype, o.optimizer_dtype)
    a = 4.0 if o.precision == "fp32" else 2.0
    # compiled QLoRA whose dequantization is a node of the layer's graph: the partitioner saves its output
    dequant_saved = o.compile and bool(o.lora_rank) and o.quant != "none" and not o.bnb_fused_matmul
    dense_dev, expert_dev = tm.stage_params(split, arch.layers, arch.n_moe_layers, stage_layers, stage_moe, is_first,
                                            is_last, tp, o.ep, o.etp)
    n_dev = dense_dev + expert_dev
    frac = n_dev / split.total  # this device's share of the model
    # MoE parallel folding: the experts' data-parallel group is what remains of tp·cp·dp after ep × etp
    # (Megatron-Core expert_data_parallel; torchtitan's dp_shard_mod_ep): their states shard over it
    etp = tp if o.etp is None else o.etp
    edp = tp * shard / (o.ep * etp)
    # FSDP2 (zero 3 outside Megatron): fully_shard on every decoder layer and the root (tm.fsdp2_buffers); its
    # dim-0 sharding gives the most-loaded rank ceil(E/(ep·edp)) experts' rows (tm.fsdp2_expert_rows)
    # 4-bit QLoRA too (transformers models): torchtune's NF4 (torchao) and bitsandbytes' FSDP-QLoRA (quant_storage)
    # shard the 4-bit data and all-gather it as it is stored (LLM.int8() keeps DeepSpeed's ZeRO-3 gather)
    fsdp = (np.asarray(zero) >= 3) & (o.framework != "megatron") & (
        (o.quant == "none") | ((o.framework == "hf") & (o.quant in ("nf4", "nf4-dq"))))
    # FSDP1 flattens a wrapped module's parameters and splits them evenly (FlatParameter): no expert rows
    if arch.moe is not None and np.any(fsdp) and o.fsdp_version == 2:
        expert_dev = expert_dev * np.where(fsdp, tm.fsdp2_expert_rows(arch.moe.experts, o.ep, edp), 1.0)
        n_dev = dense_dev + expert_dev

    if o.lora_rank:
        targets = tm.lora_targets(o.lora_targets)
        lora_total = tm.lora_params(arch, o.lora_rank, targets)
        lora_dev = lora_total * stage_layers / arch.layers / tp
        base_b = tm.base_weight_bytes(split, o.quant, sb.weights)
        # adapters are fp32 by default (PEFT autocast_adapter_dtype=True): 4 w + 4 g + fp32 optimizer states;
        # lora_dtype='bf16' keeps them in the model dtype (torchtune): 2 w + 2 g + states in that dtype
        asb = tm.state_bytes("fp32" if o.lora_dtype == "fp32" else "bf16", o.optimizer)
        w0 = n_dev * base_b + lora_dev * asb.weights
        if o.framework == "litgpt":
            w0 = w0 + np.where(is_last, _litgpt_head_extra(arch, o.quant, sb.weights), 0.0) / tp
        weights = w0 / np.where(zero >= 3, shard, 1.0)
        _, grads, optimizer = tm.shard_states(lora_dev, lora_dev, asb, zero, shard)
        trainable_total = float(lora_total)
    else:
        if o.quant != "none":
            raise ParameterError("quant", o.quant, "needs {lora_rank} (quantized base weights are frozen; QLoRA)")
        extra = 0.0
        if o.optimizer == "adafactor":
            extra = tm.adafactor_elements(arch) * 4.0 * frac
        states = _states(dense_dev, expert_dev, sb, zero, shard, edp, extra)
        if o.precision.endswith("-mixed") and o.framework != "megatron" and np.any(np.asarray(zero) >= 3):
            # FSDP2's mixed precision (MixedPrecisionPolicy): the sharded fp32 parameter is the master copy and
            # its gradient is fp32 too; the bf16 copies exist only unsharded, one block at a time
            # (tm.fsdp2_buffers): 4 w + 4 g + the states, no sharded 16-bit copy between steps
            f = _states(dense_dev, expert_dev, tm.StateBytes(4.0, 4.0, 0.0, sb.optimizer), zero, shard, edp, extra)
            states = tuple(np.where(np.asarray(zero) >= 3, x, y) for x, y in zip(f, states, strict=True))
        weights, grads, optimizer = states
        # the bytes FSDP2 reduce-scatters a gradient in: fp32 under its mixed precision (reduce_dtype), else the
        # gradient's own dtype
        fsdp_reduce = 4.0 if o.precision.endswith("-mixed") else sb.grads
        trainable_total = float(split.total)
        targets = ()

    layers_dev = stage_layers
    # torch AMP (fp32 parameters under autocast) as the hf and LitGPT loops run it; Megatron keeps its own buffers
    amp = o.framework != "megatron" and o.precision in ("bf16-mixed", "fp16-mixed") and not o.lora_rank
    if o.framework == "megatron":
        # one layer without recompute: what a recomputed layer rebuilds in backward (workspace)
        fp8 = o.precision == "fp8-mixed"  # TransformerEngine: FP8 linear inputs saved, FP8 weight cache
        layer = act.korthikanti_layer(S_loc, B, arch.hidden, arch.heads, tp, o.sp, "none", o.attention != "eager",
                                      fp8)
        # this rank's layers, with min(pp − rank, micro-batches) in flight (korthikanti_first_stage holds L/p layers)
        cap = inflight_cap if o.microbatches is None else np.minimum(inflight_cap, o.microbatches)
        activ = act.korthikanti_first_stage(S_loc, B, arch.hidden, arch.heads, stage_layers * pp, tp, pp, o.sp,
                                            recompute, o.attention != "eager", o.virtual_stages, cap, fp8)
        if arch.hybrid:  # one mixer per block: what each block's mixer saves (aicalc.core.mamba.megatron_layer_ratio)
            from aicalc.core.mamba import megatron_layer_ratio

            flash = o.attention != "eager"
            layer = layer * megatron_layer_ratio(arch, S_loc, tp, o.sp, "none", flash)
            activ = activ * megatron_layer_ratio(arch, S_loc, tp, o.sp, recompute, flash)
        if arch.linear_layers:  # a hybrid's linear-attention layers, their share of the stage's layers in flight
            from aicalc.core.linear_attention import korthikanti_delta

            delta = korthikanti_delta(S_loc, B, arch, tp, recompute, o.attention != "eager")
            held = stage_layers * np.minimum(pp, cap) * act.interleave_factor(pp, o.virtual_stages)  # as first_stage
            activ = activ + held * arch.linear_layers / arch.layers * delta
        if fp8:
            weights = weights + tm.fp8_weight_cache_bytes(split.linear * frac)
        # TM-17 outside the layers: the embedding term on the first stage; the final norm, output layer input and
        # fp32 logits (korthikanti_outside's p = 1 term less its one-micro-batch embedding term) on the last
        activ = activ + _on(is_first, lambda: act.korthikanti_outside(S_loc, B, arch.hidden, arch.vocab, tp, pp, o.sp))
        activ = activ + _on(is_last & (pp > 1), lambda: act.korthikanti_outside(
            S_loc, B, arch.hidden, arch.vocab, tp, 1, o.sp) - S_loc * B * arch.hidden / tp)
    else:
        dropout = o.dropout if o.dropout is not None else act.family_dropout(arch)
        kw = dict(dropout=dropout, attn_dropout=dropout if arch.family in act.DROPOUT_FAMILIES else 0.0)
        # torch AMP's extra saved copies; under FSDP2 (zero 3) the parameters are cast to bf16 when gathered and the
        # layers run as a pure 16-bit model (validation/record_step_peak.py, step_peak_fsdp.json)
        amp_fixed = amp and np.ndim(zero) == 0  # one zero stage for every point: AMP's copies in or out for all
        per_token = None
        if o.attention != "eager" and np.ndim(tp) == 0 and (not amp or amp_fixed) and arch.compressed is None:
            # without eager attention's S² scores a layer saves so many bytes per token: one product per point,
            # where they are a whole number (then the sums are exact either way: the same numbers)
            one = np.float64(1.0)
            per_token = act.hf_layer(one, one, arch, a, o.attention, tp, **kw)
            if amp and zero < 3:
                per_token = per_token + act.amp_saved(one, one, arch, a, tp, o.attention)
        if per_token is not None and per_token == np.floor(per_token):
            layer = (B * S_loc) * per_token
        else:
            layer = act.hf_layer(B, S_loc, arch, a, o.attention, tp, **kw)
            if amp:
                layer = layer + np.where(np.asarray(zero) >= 3, 0.0, act.amp_saved(B, S_loc, arch, a, tp, o.attention))
        if arch.hybrid:  # one mixer per block: Korthikanti's block accounting over a plain layer of the same widths
            from aicalc.core.mamba import megatron_layer_ratio

            layer = layer * megatron_layer_ratio(arch, S_loc, tp, False, "none", o.attention != "eager", "layer")
        inflight = np.minimum(inflight_cap, o.microbatches) if o.microbatches else inflight_cap
        if o.lora_rank:  # frozen base: its linears keep no inputs; the adapters keep theirs
            layer = layer + lora_saved(arch, targets, o.lora_rank, B, S_loc, a, tp, o.lora_dtype == "fp32",
                                       o.attention) - act.hf_frozen_saving(B, S_loc, arch, a, o.attention, tp)
            if o.quant != "none" and o.bnb_keeps_inputs:
                layer = layer + tm.bnb_kept_inputs(B, S_loc, arch, a, tp, per_layer=True)
        if o.framework == "litgpt":
            layer = layer + litgpt_layer_extra(arch, targets, B, S_loc, a, tp, o.lora_dropout if o.lora_rank else 0.0)
        if o.compile and o.lora_rank:  # the same over a frozen base, and the adapters' merged fp32 casts
            layer = layer - act.compiled_saving(B, S_loc, arch, a, tp, frozen=True) - lora_compiled_merge(
                arch, targets, B, S_loc, a, tp, o.lora_dtype == "fp32")
            if dequant_saved:  # and a 16-bit copy of each 4-bit frozen weight
                layer = layer + qlora_compiled_weights(arch, a, tp)
        elif o.compile:  # inductor recomputes a layer's pointwise ops in the backward instead of saving them
            layer = layer - act.compiled_saving(B, S_loc, arch, a, tp, _pick(fsdp, False, amp))
        # full / every-N: checkpointed layers keep their input, the others everything (act.checkpointed_layers);
        # selective-op: torchtitan's op-level SAC on every layer (act.hf_selective_op_layer)
        # a checkpointed layer keeps its input hidden state: fp32 under torch AMP (the fp32 embedding's output and
        # the residual adds stay fp32, amp_saved), a bytes otherwise (FSDP2 runs its layers in bf16)
        a_in = _pick(fsdp, a, 4.0) if amp else a
        op = np.asarray(recompute) == act.SELECTIVE_OP
        per_layer = layer
        if np.any(op):
            sac = act.hf_selective_op_layer(B, S_loc, arch, a, o.attention, tp) + (a_in - a) * B * S_loc * arch.hidden
            if o.compile:  # the compiled graph drops the kept down_proj output nothing reads again
                sac = sac - act.compiled_selective_saving(B, S_loc, arch, a, tp)
            per_layer = np.where(op, sac, layer)
        every = act.recompute_every(recompute)
        width = act.layer_input_width(arch)  # H; V4's n mHC streams: n·H
        if np.ndim(every) == 0 and every == 1:  # full recompute everywhere (the common case): no mixing
            per_layer = a_in * B * S_loc * width
        elif np.any(every > 0):
            ckpt = act.checkpointed_layers(recompute, layers_dev) / np.maximum(layers_dev, 1.0)
            per_layer = ckpt * a_in * B * S_loc * width + (1 - ckpt) * per_layer
        activ = per_layer * layers_dev * inflight
        # each stage's terms where this rank may be that stage (0 where it is not: they are never added)
        ends = [st for st, c in (("first", is_first), ("last", is_last)) if np.ndim(c) or c]
        outside = {st: act.hf_outside(B, S_loc, arch, a, tp, kw["dropout"], recompute=recompute,
                                      attention=o.attention, loss=o.loss, stage=st, layers=layers_dev,
                                      compiled=o.compile)
                   if st in ends else 0.0 for st in ("first", "last")}
        if o.framework == "litgpt" and "last" in ends:
            # LitGPT's loss (finetune/*.py: ``model(input_ids, lm_head_chunk_size=128)`` then
            # ``chunked_cross_entropy``): the 128-token logits chunks in the model dtype, held by the loop, and each
            # chunk's ``cross_entropy`` saving its log-softmax in that dtype, 2·a·BS·V, where transformers saves an
            # fp32 log-softmax (4·BS·V, counted by hf_outside)
            outside["last"] = outside["last"] + (2 * a - 4) * B * S_loc * arch.output_vocab / tp
        if o.loss == "fp32-kept" and "last" in ends:
            # torchtune's 2024 recipes: the decoder returns ``self.output(h).float()`` and the training loop keeps
            # those fp32 logits (shifted, ``.contiguous()``) referenced through ``loss.backward()``: 4·BS·V beside
            # what transformers' loss saves, until the backward ends (not freed with the loss's tensors below)
            outside["last"] = outside["last"] + 4.0 * B * S_loc * arch.output_vocab / tp
        if o.lora_rank:
            outside = {st: v - np.where(np.asarray(recompute) == "full", 0.0,
                                        act.hf_frozen_outside(B, S_loc, arch, a, stage=st, compiled=o.compile))
                       if st in ends else v for st, v in outside.items()}
            if dequant_saved and "first" in ends:  # the first layer's q, k, v inputs need no gradient
                outside["first"] = outside["first"] - np.where(np.asarray(recompute) == "full", 0.0,
                                                               qlora_compiled_weights(arch, a, tp, qkv_only=True))
        # 1F1B: rank r holds pp − r micro-batches in flight (PipeDream-Flush, Narayanan et al. 2021 §2.2); the first
        # stage the embedding terms, the last the final norm and the loss (one stage: both)
        activ = _plus(activ, _pick(is_first, outside["first"], 0.0), _pick(is_last, outside["last"], 0.0))
    layer_max = layer
    loss_t, workspace, gather = tm.transient_bytes(B, S, arch, a, tp, o.framework, o.attention, recompute,
                                                   layer_max, zero, split.largest_layer, sb.weights, cp, o.loss)
    if o.lora_rank and o.framework == "hf":
        # an fp32 adapter on an F-wide projection output in the backward (lora_backward_workspace), over the layer's
        # tensors that a rebuilt layer still holds then
        net = lora_backward_workspace(arch, targets, B, S_loc, a, tp, o.lora_dtype == "fp32")
        if np.any(net):
            rebuilt = act.recompute_every(recompute) > 0
            workspace = np.maximum(workspace, _plus(np.where(rebuilt, layer_max, 0.0), net))
    litgpt = o.framework == "litgpt"
    kept = 0.0  # what the previous micro-batch still holds at the end of this one's forward
    if o.quant != "none":
        # LitGPT quantizes the lm_head too, from fp16 (tm.dequantized_weight_bytes): the head's dequantized copies
        # are made for each logits chunk at the end of the forward, everything saved by then
        dq = tm.dequantized_weight_bytes(arch, a, tp, head=litgpt, from_fp16=litgpt and o.precision != "fp16")
        if not dequant_saved:  # (compiled, the dequantized copies are saved instead, qlora_compiled_weights)
            workspace = workspace + dq
        if litgpt:
            loss_t = loss_t + _pick(is_last, dq, 0.0)
            if o.bnb_keeps_inputs:  # the previous micro-batch's graph, alive through this forward (one stage)
                kept = tm.bnb_kept_inputs(B, S_loc, arch, a, tp)
    if o.optimizer_in_backward:
        # one parameter's gradient at a time (tm.largest_param_tensor), sharded like the gradients
        gbytes = asb.grads if o.lora_rank else sb.grads
        grads = tm.largest_param_tensor(arch, o.lora_rank) * gbytes / tp / np.where(zero >= 2, shard, 1.0)
    # the optimizer step's own allocations (foreach AdamW's sqrt buffer), over this device's optimizer shard
    osb = asb if o.lora_rank else sb
    trainable_dev = lora_dev if o.lora_rank else n_dev
    if o.optimizer_in_backward:
        trainable_dev = tm.largest_param_tensor(arch, o.lora_rank) / tp
    step_t = tm.optimizer_step_temporaries(trainable_dev, osb.optimizer, o.optimizer, o.adamw,
                                           tm.largest_param_tensor(arch, o.lora_rank) / tp)
    step_t = step_t / np.where(zero >= 1, shard, 1.0)
    host = np.zeros_like(np.asarray(weights, dtype=np.float64))
    if o.offload in ("optimizer", "params"):
        host = host + optimizer
        optimizer = optimizer * 0.0
        step_t = step_t * 0.0
    if o.offload == "params":
        host = host + weights
        weights = weights * 0.0
        # FSDP2's CPUOffloadPolicy keeps the sharded gradients on the host too: each reduce-scatter output is
        # copied there (``_fsdp_collectives.foreach_reduce``: ``new_sharded_grad.to(cpu)``) and accumulated there;
        # none lives on the device between layers (validation/record_step_peak.py, step_peak_fsdp_offload.json)
        host = host + np.where(fsdp, grads, 0.0)
        grads = np.where(fsdp, 0.0, grads)
    overhead = tm.CUDA_OVERHEAD_BYTES if o.overhead is None else o.overhead
    context, comm = 0.0, 0.0
    if o.overhead is None and o.context_bytes is not None:
        context = o.context_bytes
        comm = tm.comm_buffer_bytes(dp, tp, pp, cp, o.ep, o.comm_bytes or 0.0, o.all_to_all_bytes or 0.0)
        overhead = context + comm
    # Gradients live through the forward when something keeps them between steps: DDP/ZeRO buckets
    # (dp > 1), gradient accumulation (microbatches > 1), Megatron's contiguous grad buffer. Otherwise
    # (one device, zero_grad(set_to_none=True)) they are allocated in the backward while the activations
    # are freed.
    # FSDP2 (zero 3, full training) frees its sharded gradients with zero_grad(set_to_none=True) and makes them
    # in the backward's reduce-scatters, so without accumulation they do not live through the forward.
    # LoRA under FSDP2 (torchtune's lora_finetune_distributed: fully_shard per layer and on the root, the frozen
    # base sharded with the adapters) likewise; QLoRA's quantized base is not modelled this way (fsdp above).
    accumulating = (o.microbatches or 1) > 1  # a later micro-batch adds into the sharded gradients of the one before
    persistent = (o.framework == "megatron") | ((np.asarray(shard) > 1) & ~fsdp) | ((o.microbatches or 1) > 1) | \
        o.grads_kept
    held = np.where(persistent, grads, 0.0)
    if amp:  # the parameters are fp32, so are the gradients kept between micro-batches (grads_bytes counts
        # the 16-bit share of the 16 bytes a parameter takes, state_bytes): 4 bytes held (not under FSDP2)
        held = _pick(fsdp, held, held * (4.0 / sb.grads))
    if o.framework == "megatron":
        # one phase: everything at once (the Megatron rows are calibrated on this sum; TM-04, TM-34)
        transient = loss_t + workspace + gather
        wg = workspace + gather
        live = {"all": activ + grads + transient}
        phase_t = {"all": transient}
    else:
        # hf: the step's phases, as PyTorch's allocator sees them (validation/record_step_peak.py):
        # * loss: the end of the forward and the loss's backward: every saved activation + the loss buffers;
        # * backward: the last layer's backward, the loss and final-norm tensors freed (one stage only), the
        #   output projection's gradient made (full training), + one layer's workspace (ZeRO-3 gather);
        # * gradients: the end of the backward, every gradient + one layer's workspace;
        # * optimizer: every gradient + the step's temporaries (foreach AdamW).
        vh_dev = arch.output_vocab * arch.hidden / tp  # the output layer's parameters (and an untied embedding's)
        head = 0.0 if o.lora_rank else vh_dev * sb.grads
        # FSDP2's unsharded root and block buffers (tm.fsdp2_buffers) in place of the ZeRO-3 gather
        root = dense_dev - split.layers * stage_layers / arch.layers / tp
        block = split.layers / arch.layers / tp
        if arch.n_moe_layers:
            rows = np.where(fsdp & (o.fsdp_version == 2), tm.fsdp2_expert_rows(arch.moe.experts, o.ep, edp), 1.0)
            block = block + split.experts / arch.n_moe_layers / (o.ep * etp) * rows
        if o.lora_rank:
            # LoRA: the adapters are gathered with their layer and are all that it reduces; the root (embedding,
            # output layer, final norm) is frozen, so it has no gradients to reduce (nor an output-layer gradient)
            lora_layer = lora_total / arch.layers / tp
            if o.quant != "none":  # a quantized layer is all-gathered in its stored bytes, counted in a-byte units
                in_layers = split.layers + split.experts
                q = tm.qlora_bytes_per_param(o.quant)
                block = block * (split.linear * q + (in_layers - split.linear) * a) / (in_layers * a)
            f_loss, f_back, f_grads = tm.fsdp2_buffers(root, block + lora_layer, a, 0.0, shard, arch.tied_embeddings,
                                                       0.0, lora_layer, asb.grads, accumulating,
                                                       offload=o.offload == "params", units=o.fsdp_units, head=vh_dev)
        else:
            f_loss, f_back, f_grads = tm.fsdp2_buffers(root, block, a, np.where(is_last, vh_dev, 0.0), shard,
                                                       arch.tied_embeddings, r=fsdp_reduce, accumulating=accumulating,
                                                       offload=o.offload == "params", units=o.fsdp_units,
                                                       head=vh_dev)
            if o.fsdp_version == 1:  # FSDP1's end of the backward (its loss and backward phases are FSDP2's)
                f_grads = tm.fsdp1_gradients(root, root, a, fsdp_reduce, shard, arch.tied_embeddings, accumulating)
        f_loss, f_back, f_grads = (np.where(fsdp, x, 0.0) for x in (f_loss, f_back, f_grads))
        freed = _pick(np.asarray(pp) > 1, 0.0, outside["last"])
        if litgpt:  # the loop's ``logits`` list lives through the backward
            freed = np.maximum(freed - a * B * S_loc * arch.output_vocab / tp, 0.0)
        if o.loss == "fp32-kept":  # so do torchtune's fp32 logits
            freed = np.maximum(freed - 4.0 * B * S_loc * arch.output_vocab / tp, 0.0)
        gather = np.where(fsdp, f_back, gather)
        wg = _plus(workspace, gather)
        casts = 0.0
        if amp and (recompute != "none" if isinstance(recompute, str) else np.any(np.asarray(recompute) != "none")):
            # FSDP2 (zero 3) runs its layers in bf16: no casts
            casts = _pick(fsdp, 0.0, amp_casts_freed(arch, split, recompute, stage_layers, tp, a))
        # gradients made in the backward (not kept between steps, not FSDP2's): the stage's first layer's and the
        # input embedding's are not made yet when that layer's backward peaks (grads_not_yet)
        later, fresh = 0.0, ~(persistent | fsdp)
        if not (o.lora_rank or o.optimizer_in_backward) and np.any(fresh):
            later = _pick(fresh, _pick(is_first, grads_not_yet(arch, True), grads_not_yet(arch, False))
                          * sb.grads / tp, 0.0)
        live = {"loss": _plus(activ, held, loss_t, kept, f_loss, -casts),
                "backward": _plus(_nonnegative(activ) if np.ndim(freed) == 0 and freed == 0 else
                                  np.maximum(activ - freed, 0.0),
                                  np.where(persistent, grads, np.where(fsdp, 0.0, head)), workspace, gather),
                "gradients": _plus(grads, np.where(fsdp, f_grads, wg), -later),
                "optimizer": grads + step_t}
        phase_t = None if peak_only else {"loss": _plus(loss_t, kept, f_loss), "backward": wg,
                                          "gradients": np.where(fsdp, f_grads, wg), "optimizer": step_t}
        titan = o.fsdp_units == "torchtitan"
        if titan or np.any(casts):
            # the end of the forward, the loss's forward buffers beside every saved activation: under autocast with
            # recompute every cast weight cached (counted in activ, freed by the loss phase); under torchtitan's
            # units [norm, output] unsharded beside its all-gather output on the FSDP2 rows (tm.fsdp2_units_buffers;
            # those rows have no casts, the others none of it)
            fwd = _pick(is_last, (a + 4.0) * B * S_loc * arch.output_vocab / tp, 0.0)
            f_fwd = np.where(fsdp, f_loss + a * vh_dev, 0.0) if titan else 0.0
            live["forward"] = _plus(activ, held, fwd, kept, f_fwd)
            if phase_t is not None:
                phase_t["forward"] = _plus(fwd, kept, f_fwd)
    names = list(live)
    if peak_only:  # the highest phase as below, without which phase it is and its transients
        top = live[names[0]]
        for k in names[1:]:
            top = np.maximum(top, live[k])
        return {"peak_allocated_bytes": weights + optimizer + top, "overhead_bytes": overhead,
                "grads_kept": persistent}
    code = [np.int8(PHASES.index(k)) for k in names]  # an index into PHASES (one byte per layout: the layout
    top, transient, at = live[names[0]], phase_t[names[0]], code[0]  # search keeps millions); the API names it
    for i, k in enumerate(names[1:], 1):  # the first phase wins ties, as argmax would
        more = live[k] > top
        if np.ndim(more) and not more.any():  # this phase is nowhere higher: nothing changes (NaN aside)
            if np.ndim(live[k]) or np.isnan(live[k]):
                top = np.maximum(top, live[k])
            continue
        top, transient, at = np.maximum(top, live[k]), np.where(more, phase_t[k], transient), np.where(more, code[i], at)
    allocated = weights + optimizer + top
    shape = np.shape(allocated)
    if any(transient is v for v in (loss_t, wg, step_t)):  # another column's array: this column has its own
        transient = np.array(transient, dtype=np.float64)
    transient = np.broadcast_to(transient, shape)
    peak_phase = np.broadcast_to(np.asarray(at, dtype=np.int8), shape)
    full = (lambda x: x) if lean else (lambda x: x + 0.0 * allocated)
    return {
        "batch": B, "seq": S, "dp": dp, "tp": tp, "pp": g["pp"], "cp": cp, "zero": zero,
        "stage": full(rank), "stage_layers": full(stage_layers),
        "recompute": recompute,
        "params": float(split.total), "params_per_device": n_dev, "trainable_params": trainable_total,
        "weights_bytes": weights, "gradients_bytes": grads, "optimizer_bytes": optimizer,
        "activations_bytes": activ, "transient_bytes": transient, "overhead_bytes": full(overhead),
        "context_bytes": full(context), "comm_buffers_bytes": full(comm),
        "loss_transient_bytes": full(loss_t), "workspace_bytes": full(wg),
        "optimizer_step_bytes": full(step_t), "peak_phase": peak_phase,
        "peak_allocated_bytes": allocated, "peak_bytes": allocated + overhead,
        "peak_reserved_bytes": _reserved(allocated, overhead, arch, o.framework, recompute, persistent),
        "host_bytes": host,
        "states_bytes_per_param": (weights + grads + optimizer + host) / n_dev,
    }


def grads_not_yet(arch, first_stage: bool) -> float:
    """Parameters of a stage whose gradients are not yet made when its first layer's backward peaks, the
    end-of-backward phase ("gradients": every other gradient + one layer's workspace): the backward runs the
    layers in reverse, so the stage's first layer is the last, and its MLP's backward (the workspace: the
    gate/up/product gradients or, recomputed, the rebuilt layer beside them) comes before its MLP input
    projections', its norms' and its attention's weight gradients; on the first stage the input embedding's
    (its positions' only when the token table is tied to the output layer, whose gradient is made first).
    Counted for a plain FFN; an MoE layer's experts are left in (their gradients come expert by expert).
    validation/record_step_peak.py, GPT-2 eager fp32 with full recompute: the trace's gradients at the peak are
    the last layer's, the final norm's and the first layer's MLP output projection's (+5.6 % -> +1.3 %)."""
    from aicalc.core.params import count_params, mlp_params

    n = count_params(arch)
    H = arch.hidden
    final_norm = 0 if arch.encoder else (2 if arch.norm == "layer" else 1) * H
    layer = (n.attention + n.norms - final_norm) / arch.layers
    if arch.moe is None and not arch.hybrid:
        layer += mlp_params(arch, arch.ffn) - H * arch.ffn - (H if arch.mlp_bias else 0)  # all but down's
    if not first_stage:
        return layer
    return layer + n.embedding - (arch.vocab * H if arch.tied_embeddings else 0)


def _nonnegative(x):
    """``np.maximum(x, 0.0)``, without the pass where no value is below zero (activations with nothing freed from
    them: a reduction is faster than numpy's maximum against a scalar)."""
    import numpy as np

    if np.ndim(x) and x.size and x.min() >= 0:
        return x
    return np.maximum(x, 0.0)


def _plus(x, *ys):
    """``x + y + …`` left to right, leaving out each ``y`` that is one 0 (adding it changes nothing)."""
    import numpy as np

    for y in ys:
        if not (np.ndim(y) == 0 and y == 0):
            x = x + y
    return x


def _on(cond, make):
    """``make()`` where ``cond`` holds, else 0; not made at all where ``cond`` is one False."""
    import numpy as np

    if np.ndim(cond) == 0:
        return make() if cond else 0.0
    return np.where(cond, make(), 0.0)


def _states(dense, experts, sb, zero, shard, edp, extra=0.0):
    """(weights, grads, optimizer) of the dense part sharded over ``shard`` and the routed experts over ``edp``."""
    import numpy as np

    from aicalc.core import train_memory as tm

    weights, grads, optimizer = tm.shard_states(dense, dense, sb, zero, shard, extra)
    if np.any(experts):
        ew, eg, eo = tm.shard_states(experts, experts, sb, zero, edp)
        weights, grads, optimizer = weights + ew, grads + eg, optimizer + eo
    return weights, grads, optimizer


def litgpt_layer_extra(arch, targets, B, S, a, tp=1, lora_dropout=0.0):
    """What a LitGPT decoder layer saves beyond the transformers layer (``litgpt/model.py``, ``litgpt/lora.py``
    at the v0.4 releases):

    * grouped-query attention: ``CausalSelfAttention.forward`` expands k and v to every query head
      (``k.expand(...)`` then ``reshape``, a copy) before SDPA, which saves them: ``2·a·BS·(A − K)·d/t`` more
      than k and v at their K heads;
    * LoRA dropout (``lora_dropout`` > 0, 0.05 in the config hub): every LoRA module (``LoRALinear``,
      ``LoRAQKVLinear`` for the fused q, k, v) drops out its own copy of its input, saving the 1-byte mask and the
      a-byte output that ``lora_A`` keeps: ``(1 + a)·BS·in`` per module, one module for q, k, v together."""
    H, A, K, d, F = arch.hidden, arch.heads, arch.kv_heads, arch.head_dim, arch.ffn
    extra = 2 * a * B * S * max(A - K, 0) * d / tp
    if lora_dropout > 0:
        ins = {"qkv": H, "o": A * d / tp, "gate": H, "up": H, "down": F / tp}
        mods = {("qkv" if t in ("q", "k", "v") else t) for t in targets if t != "gate" or arch.gated_ffn}
        extra = extra + (1 + a) * B * S * sum(ins[m] for m in mods)
    return extra


def _litgpt_head_extra(arch, quant, base_bytes):
    """LitGPT's ``GPT`` always has its own ``lm_head`` (``litgpt/model.py``; a tied checkpoint such as Gemma's is
    converted with the embedding copied into it), quantized with the other linears under ``bnb.*``
    (``BitsandbytesPrecision.module_init_context`` replaces every ``torch.nn.Linear``): the head's bytes beyond
    what ``base_weight_bytes`` counts for it (16-bit when untied, nothing when tied)."""
    from aicalc.core.dtypes import qlora_bytes_per_param
    from aicalc.core.params import count_params

    q = qlora_bytes_per_param(quant) if quant != "none" else None
    head = arch.vocab * arch.hidden
    counted = 0.0 if count_params(arch).lm_head == 0 else base_bytes
    return head * ((base_bytes if q is None else q) - counted)


def lora_saved(arch, targets, rank, B, S, a, tp, fp32_adapters=True, attention="sdpa"):
    """Saved by the LoRA adapters of one layer beside its frozen base (``activations.hf_frozen_saving``),
    from ``peft/tuners/lora/layer.py`` (``Linear.forward``) and torchtune's ``LoRALinear``, checked with
    saved-tensor hooks on PEFT models (``validation/record_activations.py``, ``lora`` cases):

    * fp32 adapters on a 16-bit model (PEFT's ``autocast_adapter_dtype``): every adapter casts its input to
      fp32 and ``lora_A`` saves that copy, 4·BS·in per target, even where targets share an input (q, k, v);
    * adapters in the model's dtype (torchtune, or an fp32 model): ``lora_A`` saves the input itself, one
      storage per distinct input: the first norm's output (q, k, v: a·BSH), the second's (gate, up: a·BSH),
      the ``down_proj`` input (a·BS·F/t), the ``o_proj`` input only with eager attention (with SDPA it is the
      attention output, saved already);
    * ``lora_B`` saves the A output, BS·r per target at the adapter's width (lora_dropout 0 is an identity)."""
    ins, group = _lora_inputs(arch, tp)
    cast = fp32_adapters and a < 4
    total, shared = 0.0, set()
    for t in targets:
        if t == "gate" and not arch.gated_ffn:
            continue
        total = total + (4.0 if fp32_adapters else a) * B * S * rank
        if cast:
            total = total + 4.0 * B * S * ins[t]
        elif t != "o" or attention == "eager":
            shared.add(t)
    for g in {group[t] for t in shared}:
        total = total + a * B * S * next(ins[t] for t in shared if group[t] == g)
    return total


def lora_backward_workspace(arch, targets, B, S, a, tp, fp32_adapters=True):
    """The backward's workspace at an fp32 adapter whose output is F wide (``up``, ``gate``) on a 16-bit model
    (PEFT's ``autocast_adapter_dtype``; ``peft/tuners/lora/layer.py``, ``Linear.forward``: ``result = result +
    lora_B(lora_A(dropout(x))) * scaling``, then ``result.to(torch_result_dtype)``): the projection's a-byte output
    gradient comes back through the cast as an fp32 copy and ``* scaling`` makes a second, ``2·4·BS·F``, beside the
    a-byte gradient and its cast for the frozen base, ``2·a·BS·F``, and three a-byte hidden-wide gradients,
    ``3·a·BS·H``. By then the MLP's later saved tensors are freed: the down projection's fp32 input copy
    (``4·BS·F`` where ``down`` is targeted) and the activation's saved inputs (``a·BS·F``, a gated MLP's multiply
    ``2·a·BS·F``). Traced (validation/record_step_peak.py, the encoders' ``lora[all]`` records, MemTracker at the
    peak: two fp32 and two bf16 [B, S, F] temporaries): the peak of a plain-MLP layer, whose own workspace (2·a·BSF)
    is smaller; a gated MLP's (3·a·BSF) is larger. 0 without an F-wide adapter or with adapters in the model's
    dtype."""
    if not (fp32_adapters and a < 4) or not ({"up", "gate"} & set(targets)):
        return 0.0
    H, F = arch.hidden, arch.ffn
    freed = (4.0 if "down" in targets else 0.0) + (2 * a if arch.gated_ffn else a)
    return ((8 + 2 * a - freed) * F + 3 * a * H) * B * S / tp


def _lora_inputs(arch, tp):
    """Each LoRA target's input width and the group of targets that read the same input (q, k, v the first norm's
    output; gate, up the second's)."""
    H, A, d, F = arch.hidden, arch.heads, arch.head_dim, arch.ffn
    ins = {"q": H, "k": H, "v": H, "o": A * d / tp, "gate": H, "up": H, "down": F / tp}
    group = {"q": "attn_in", "k": "attn_in", "v": "attn_in", "o": "o", "gate": "mlp_in", "up": "mlp_in",
             "down": "down"}
    return ins, group


def qlora_compiled_weights(arch, a, tp=1, qkv_only=False):
    """Bytes a ``torch.compile``'d decoder layer saves over a 4-bit frozen base beside what it saves over a 16-bit
    one (:func:`lora_compiled_merge`, ``activations.compiled_saving(frozen=True)``): a copy of each frozen linear
    weight in the compute dtype, ``a·(H·(A + 2K)·d + A·d·H + 3·H·F)/t`` (Llama-2-7B in bf16: 405 MB a layer, the
    whole base at 16 bits over its 32 layers).

    The 4-bit linear dequantizes its weight in the forward and again in the backward (torchao's ``linear_nf4``,
    which torchtune's QLoRA runs: ``F.linear(input, weight.to(input.dtype))`` and ``grad_output @
    weight.to(grad_output.dtype)``, pytorch/ao @ 0598012, ``torchao/dtypes/nf4tensor.py``; bitsandbytes 0.46-0.49's
    ``MatMul4Bit``: ``F.dequantize_4bit``, a ``torch.library`` custom op, in both, bitsandbytes-foundation/
    bitsandbytes @ 0.49.2, ``bitsandbytes/autograd/_functions.py``). AOTAutograd traces forward and backward into
    one joint graph whose common-subexpression pass (``torch._functorch.config.cse``) makes the two
    dequantizations one node; the backward's matmul must materialize it, and the min-cut partitioner never
    recomputes such a node (``should_ban_recomputation``: "materialized in backward",
    ``torch/_functorch/partitioners.py``, torch 2.13.0), so the layer saves it. Eagerly nothing of the kind is
    saved: torchao saves the NF4 weight, bitsandbytes keeps the packed weight on ``ctx``. Counted with saved-tensor
    hooks on compiled PEFT layers over re-implemented torchao and bitsandbytes 4-bit linears
    (validation/record_compiled.py, ``qlora`` records; the re-implementations checked against bitsandbytes 0.49.2
    and 0.50.2 and torchao 0.18.0 by validation/crosscheck_qlora_libs.py: the same bytes). bitsandbytes 0.50's
    forward is one ``gemm_4bit`` op with no dequantized output in the graph: nothing is saved (``bnb-gemm``
    records).

    ``qkv_only``: the q, k and v copies alone, which the first layer does not save (its input, the frozen
    embedding's output, needs no gradient, so neither do those three matmuls' inputs; ``layer0`` records)."""
    H, A, K, d, F = arch.hidden, arch.heads, arch.kv_heads, arch.head_dim, arch.ffn
    qkv = H * (A + 2 * K) * d
    if qkv_only:
        return a * qkv / tp
    return a * (qkv + A * d * H + (3 if arch.gated_ffn else 2) * H * F) / tp


def lora_compiled_merge(arch, targets, B, S, a, tp, fp32_adapters=True):
    """Bytes of :func:`lora_saved` a ``torch.compile``'d layer does not save: in eager mode every fp32 adapter on
    a 16-bit model casts its input to fp32 and ``lora_A`` saves that copy, one per target; inside one compiled
    graph the casts of one input are a single node (common-subexpression elimination), saved once. So q, k, v
    keep one 4·BSH copy instead of three, gate and up one instead of two: ``4·BS·in·(n − 1)`` per group of n
    targets reading one input. Counted with saved-tensor hooks on compiled PEFT layers
    (validation/record_compiled.py, ``lora`` records; the rest of the compiled saving is
    ``activations.compiled_saving(frozen=True)``)."""
    if not (fp32_adapters and a < 4):
        return 0.0
    ins, group = _lora_inputs(arch, tp)
    counts: dict[str, list] = {}
    for t in targets:
        if t == "gate" and not arch.gated_ffn:
            continue
        counts.setdefault(group[t], [0, ins[t]])[0] += 1
    return 4.0 * B * S * sum((n - 1) * width for n, width in counts.values())
