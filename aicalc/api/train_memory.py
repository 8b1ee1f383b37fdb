"""Training and fine-tuning memory per device (states, activations, transients, peak) and the layout search."""

from __future__ import annotations

from aicalc.api.results import Table

# --recompute: none, Megatron's selective (attention core), full; for hf also torchtitan's op-level selective AC
# and every-N (checkpoint every N-th layer, any N ≥ 1; "every-2" is the one the layout search tries)
RECOMPUTE = ("none", "selective", "full", "selective-op")


class TrainMemory(Table):
    """Columns: ``batch`` (micro-batch per device), ``seq``, ``dp``, ``tp``, ``pp``, ``cp``, ``zero``,
    ``recompute``, ``params``, ``params_per_device``, ``trainable_params``, ``weights_bytes``,
    ``gradients_bytes``, ``optimizer_bytes``, ``activations_bytes``, ``transient_bytes`` (at the peak phase),
    ``loss_transient_bytes``, ``workspace_bytes``, ``optimizer_step_bytes``, ``peak_phase``, ``overhead_bytes``,
    ``peak_allocated_bytes``, ``peak_bytes`` (per device: allocated + CUDA context), ``peak_reserved_bytes``
    (what the caching allocator reserves at that peak), ``host_bytes``, ``states_bytes_per_param``; with a chip
    ``chip_memory_bytes`` and ``fits`` (judged on the reserved peak); from a search ``headroom_bytes``."""


def setup_of(**kw):
    """A :class:`aicalc.core.train_peak.TrainSetup` from keyword options, each checked by name."""
    from dataclasses import replace

    from aicalc.core import activations as act
    from aicalc.core import train_memory as tm
    from aicalc.core.dtypes import QLORA_QUANT
    from aicalc.core.train_peak import ATTENTION, FRAMEWORKS, LORA_DTYPES, LOSSES, OFFLOAD, TrainSetup
    from aicalc.errors import ParameterError, check_choice

    s = TrainSetup(**kw)
    if act.parse_every(s.recompute) is None and s.recompute not in RECOMPUTE:
        raise ParameterError("recompute", s.recompute, f"is not one of {', '.join(RECOMPUTE)}, every-N (N ≥ 1)")
    if act.parse_every(s.recompute) == 1:
        s = replace(s, recompute="full")  # every-1: every layer checkpointed, i.e. full recompute
    check_choice("framework", s.framework, FRAMEWORKS)
    check_choice("attention", s.attention, ATTENTION)
    check_choice("offload", s.offload, OFFLOAD)
    check_choice("loss", s.loss, LOSSES)
    check_choice("lora_dtype", s.lora_dtype, LORA_DTYPES)
    check_choice("quant", s.quant, QLORA_QUANT)
    check_choice("adamw", s.adamw, tm.ADAMW_IMPLS)
    tm.state_bytes(s.precision, s.optimizer, s.grad_dtype, s.optimizer_dtype)
    if s.lora_rank is not None:
        if not s.lora_rank >= 1:
            raise ParameterError("lora_rank", s.lora_rank, "must be at least 1")
        tm.lora_targets(s.lora_targets)
    for name in ("ep", "virtual_stages"):
        if not getattr(s, name) >= 1:
            raise ParameterError(name, getattr(s, name), "must be at least 1")
    if s.microbatches is not None and not s.microbatches >= 1:
        raise ParameterError("microbatches", s.microbatches, "must be at least 1")
    if s.dropout is not None and not 0 <= s.dropout < 1:
        raise ParameterError("dropout", s.dropout, "must lie in [0, 1)")
    if s.framework == "megatron" and s.loss != "full":
        raise ParameterError("loss", s.loss, "is torchtune's chunked cross-entropy; Megatron's fused vocab-parallel "
                             "loss is {loss=full} with {framework=megatron}")
    if s.optimizer_in_backward and (s.microbatches or 1) > 1:
        raise ParameterError("optimizer_in_backward", True, "steps each parameter as its gradient is ready, so it "
                             "cannot accumulate gradients over {microbatches} > 1")
    if s.framework == "hf" and s.recompute == "selective":
        raise ParameterError("recompute", "selective", "is Megatron's (recompute the attention core); "
                             + act.HF_RECOMPUTE_CHOICES)
    if s.framework == "megatron" and (s.recompute == act.SELECTIVE_OP or act.parse_every(s.recompute)):
        raise ParameterError("recompute", s.recompute, "is torchtitan/FSDP selective activation checkpointing, "
                             "modelled for {framework=hf}; with {framework=megatron} use none, selective or full")
    if s.recompute == act.SELECTIVE_OP and s.lora_rank is not None:
        raise ParameterError("recompute", s.recompute, "is not modelled with {lora_rank} (the adapters' matmuls "
                             "shift which outputs torchtitan's every-second-mm policy keeps); use none, full or "
                             "every-N")
    if s.framework == "hf" and (s.sp or s.virtual_stages > 1):
        raise ParameterError("framework", "hf", "has no sequence parallelism or virtual pipeline stages; use "
                             "{framework=megatron}")
    return s


def phase_names(index):
    """``peak_phase`` as names (``core.train_peak.PHASES``; the core keeps a one-byte index per layout)."""
    import numpy as np

    from aicalc.core.train_peak import PHASES

    return np.asarray(PHASES)[np.asarray(index, dtype=np.int64)]


def check_layout(arch, setup, tp, pp, zero, cp=None, seq=None) -> None:
    """Impossible layouts are bad input, with the reason."""
    import numpy as np

    from aicalc.core.geometry import check_tp
    from aicalc.errors import ParameterError

    if cp is not None and np.any(cp > 1):
        # causal load balancing splits the sequence into 2·cp chunks, two per rank (Megatron-LM
        # get_batch_on_this_cp_rank; TransformerEngine's p2p CP; torch context_parallel's head-tail balancer)
        bad = (seq % (2 * cp)) != 0
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            raise ParameterError("cp", int(cp[i]), f"does not divide the sequence {int(seq[i])} into 2·cp = "
                                 f"{int(2 * cp[i])} equal chunks (causal load balancing)")
        if setup.attention == "eager":
            raise ParameterError("cp", int(np.max(cp)), "needs {attention=sdpa} or flash (ring attention replaces the "
                                 "fused attention kernel; eager attention has no context-parallel path)")
    if setup.sp and seq is not None:
        local = seq / (cp if cp is not None else 1.0)
        bad = (local % tp) != 0
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            raise ParameterError("tp", int(np.broadcast_to(tp, bad.shape)[i]), f"does not divide the "
                                 f"{int(local[i])} tokens per context-parallel rank (with {{sp}}, sequence parallelism)")
    for t in np.unique(tp):
        check_tp(arch, int(t))
        if arch.ffn % int(t):
            raise ParameterError("tp", int(t), f"does not divide the FFN size {arch.ffn}")
    for p in np.unique(pp):
        if arch.layers % int(p):
            raise ParameterError("pp", int(p), f"does not divide the {arch.layers} layers")
    if setup.ep > 1 and (arch.moe is None or arch.moe.experts % setup.ep):
        what = "the model has no experts" if arch.moe is None else f"it does not divide the {arch.moe.experts} experts"
        raise ParameterError("ep", setup.ep, what)
    if np.any((zero < 0) | (zero > 3)):
        raise ParameterError("zero", int(np.max(zero)), "is not a ZeRO stage (0 to 3)")


def train_memory(model, batch=1, seq=2048, *, dp=1, tp=1, pp=1, cp=1, zero=0, chip=None, **setup) -> TrainMemory:
    """Memory per device of one training step for each layout (arrays broadcast); ``setup`` takes the
    :class:`aicalc.core.train_peak.TrainSetup` fields (precision, optimizer, framework, recompute, lora_rank…)."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.catalog import load_model, load_node_or_chip
    from aicalc.core.train_peak import evaluate
    from aicalc.errors import ParameterError

    spec = load_model(model)
    st = setup_of(**setup)
    g = inputs.broadcast(batch=inputs.positive("batch", batch, whole=True), seq=inputs.positive("seq", seq, whole=True),
                         dp=inputs.positive("dp", dp, whole=True), tp=inputs.positive("tp", tp, whole=True),
                         pp=inputs.positive("pp", pp, whole=True), cp=inputs.positive("cp", cp, whole=True),
                         zero=inputs.positive("zero", zero, whole=True, minimum=0))
    check_layout(spec.arch, st, g["tp"], g["pp"], g["zero"], g["cp"], g["seq"])
    if st.offload == "params" and np.any(g["zero"] < 3):
        raise ParameterError("offload", "params", "needs {zero=3} (ZeRO-Infinity / FSDP CPU offload)")
    if st.quant != "none" and not st.lora_rank:
        raise ParameterError("quant", st.quant, "needs {lora_rank} (quantized base weights are frozen; QLoRA)")
    cols = {k: v for k, v in evaluate(spec.arch, st, g).items()}
    cols["peak_phase"] = phase_names(cols["peak_phase"])
    warnings = []
    chip_obj = load_node_or_chip(chip)[0] if chip is not None else None
    if chip_obj is not None:
        cols["chip_memory_bytes"] = float(chip_obj.memory_bytes)
        cols["fits"] = cols["peak_reserved_bytes"] <= chip_obj.memory_bytes  # what the allocator will reserve
    for k in ("batch", "seq", "dp", "tp", "pp", "cp", "zero"):
        cols[k] = np.asarray(cols[k], dtype=np.float64).astype(np.int64)
    cols["params"] = int(cols["params"])
    cols["trainable_params"] = int(cols["trainable_params"])
    return TrainMemory(cols, warnings, model=spec, chip=chip_obj, setup=st)


def search_layouts(model, chip=None, chips: int | None = None, *, limit=None, seq=2048, max_batch: int = 1, cp=1,
                   top: int = 20, progress=None, **setup) -> TrainMemory:
    """The layouts of ``chips`` devices (TP × PP × CP × DP × ZeRO × micro-batch ≤ ``max_batch`` × recompute)
    whose peak fits ``chip``'s memory (or ``limit`` bytes, the smaller of the two), ranked by headroom. A node id
    for ``chip`` means all its chips. ``progress(done, total)`` is called between slices."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.catalog import load_model, load_node_or_chip
    from aicalc.core import layout_search
    from aicalc.errors import ParameterError

    spec = load_model(model)
    st = setup_of(**setup)
    chip_obj, count = load_node_or_chip(chip) if chip is not None else (None, 1)
    if chip_obj is None and limit is None:
        raise ParameterError("chip", None, "is needed (or a memory limit) to know what fits")
    chips = chips or (count if count > 1 else None)
    if not chips:
        raise ParameterError("chips", None, "is needed: the number of devices to lay the model out on")
    lim = min(x for x in (inputs.nbytes("limit", limit) if limit is not None else None,
                          chip_obj.memory_bytes if chip_obj else None) if x is not None)
    seqs = inputs.positive("seq", seq, whole=True).reshape(-1)
    cps = sorted({int(c) for c in inputs.positive("cp", cp, whole=True).reshape(-1)})
    if st.attention == "eager":
        cps = [1]  # eager attention has no context-parallel path
    recomputes = ("none", "full") + (("selective",) if st.framework == "megatron" else
                                     ("every-2",) if st.lora_rank else ("selective-op", "every-2"))
    chips = inputs.whole("chips", chips)
    sel, fit, n = layout_search.search(spec.arch, st, chips, lim, seqs, inputs.whole("max_batch", max_batch), cps,
                                       recomputes, inputs.whole("top", top), progress)
    if sel is None:
        raise ParameterError("chips", chips, "admits no TP × PP × CP layout of this model")
    sel["peak_phase"] = phase_names(sel["peak_phase"])
    for k in ("batch", "seq", "dp", "tp", "pp", "cp", "zero"):
        sel[k] = sel[k].astype(np.int64)
    sel["params"] = np.broadcast_to(sel["params"], sel["batch"].shape).astype(np.int64)
    sel["trainable_params"] = np.broadcast_to(sel["trainable_params"], sel["batch"].shape).astype(np.int64)
    from aicalc.units import fmt_bytes

    warnings = [] if fit else [f"no layout of {chips} device{'s' if chips > 1 else ''} fits {fmt_bytes(lim)} per "
                               "device; the closest are shown"]
    return TrainMemory(sel, warnings, model=spec, chip=chip_obj, setup=st, chips=int(chips), limit=lim,
                       layouts_fit=fit, layouts=n, cps=cps)
