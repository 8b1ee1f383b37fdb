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
    ``loss_transient_bytes``, ``workspace_bytes``, ``optimizer_step_bytes``, ``peak_phase``, ``overhead_bytes``
    (``context_bytes`` + ``comm_buffers_bytes`` with a chip whose class states them, else a stated 1 GiB),
    ``peak_allocated_bytes``, ``peak_bytes`` (per device: allocated + overhead), ``peak_reserved_bytes``
    (what the caching allocator reserves at that peak), ``stage`` and ``stage_layers`` (the pipeline rank whose peak
    this is, 0 = first, and its decoder layers), ``host_bytes``, ``states_bytes_per_param``; with a chip
    ``chip_memory_bytes`` and ``fits`` (judged on the reserved peak); from a search ``headroom_bytes``."""


def stage_option(name: str, value) -> int | None:
    """A first or last pipeline stage's layer count: one whole number, 0 or more (None: the default split)."""
    from aicalc.api import inputs
    from aicalc.errors import ParameterError

    if value is None:
        return None
    arr = inputs.positive(name, value, whole=True, minimum=0)
    if arr.size != 1:
        raise ParameterError(name, value, "takes one number, not a sweep")
    return int(arr.reshape(-1)[0])


def setup_of(**kw):
    """A :class:`aicalc.core.train_peak.TrainSetup` from keyword options, each checked by name."""
    from aicalc.api import inputs
    from aicalc.core import activations as act
    from aicalc.core import train_memory as tm
    from aicalc.core.dtypes import QLORA_QUANT
    from aicalc.core.train_peak import (
        ATTENTION,
        FRAMEWORKS,
        FSDP_UNITS,
        LORA_DTYPES,
        LOSSES,
        OFFLOAD,
        TrainSetup,
    )
    from aicalc.errors import ParameterError, check_choice

    s = TrainSetup(**kw)
    if act.parse_every(s.recompute) is None and s.recompute not in RECOMPUTE:
        raise ParameterError("recompute", s.recompute, f"is not one of {', '.join(RECOMPUTE)}, every-N (N ≥ 1)")
    if act.parse_every(s.recompute) == 1:
        s = s._replace(recompute="full")  # every-1: every layer checkpointed, i.e. full recompute
    check_choice("framework", s.framework, FRAMEWORKS)
    check_choice("attention", s.attention, ATTENTION)
    check_choice("offload", s.offload, OFFLOAD)
    check_choice("loss", s.loss, LOSSES)
    check_choice("lora_dtype", s.lora_dtype, LORA_DTYPES)
    check_choice("quant", s.quant, QLORA_QUANT)
    check_choice("adamw", s.adamw, tm.ADAMW_IMPLS)
    check_choice("fsdp_units", s.fsdp_units, FSDP_UNITS)
    tm.state_bytes(s.precision, s.optimizer, s.grad_dtype, s.optimizer_dtype)

    # whole numbers and shares checked as the command line checks its options (aicalc.api.inputs), named
    s = s._replace(ep=inputs.count("ep", s.ep), virtual_stages=inputs.count("virtual_stages", s.virtual_stages),
                lora_rank=None if s.lora_rank is None else inputs.count("lora_rank", s.lora_rank),
                microbatches=None if s.microbatches is None else inputs.count("microbatches", s.microbatches),
                dropout=None if s.dropout is None else inputs.share("dropout", s.dropout),
                lora_dropout=inputs.share("lora_dropout", s.lora_dropout))
    if s.lora_rank is not None:
        tm.lora_targets(s.lora_targets)
    # expert TP 1 where experts are split over EP ranks: Megatron-Bridge's MoE perf recipes set
    # expert_tensor_parallel_size = 1 and torchtitan's expert_tensor_parallel_degree defaults to 1
    s = s._replace(etp=(1 if s.ep > 1 else None) if s.etp is None else inputs.whole("etp", s.etp),
                first_stage_layers=stage_option("first_stage_layers", s.first_stage_layers),
                last_stage_layers=stage_option("last_stage_layers", s.last_stage_layers))
    if s.framework == "megatron" and s.loss != "full":
        raise ParameterError("loss", s.loss, "is torchtune's; Megatron's fused vocab-parallel loss is {loss=full} "
                             "with {framework=megatron}")
    if s.framework == "litgpt" and s.loss == "fp32-kept":
        raise ParameterError("loss", s.loss, "is torchtune's 2024 training loop; LitGPT's chunked loss is "
                             "{loss=full} with {framework=litgpt}")
    if s.optimizer_in_backward and s.grads_kept:
        raise ParameterError("grads_kept", True, "keeps every gradient between steps; {optimizer_in_backward} frees "
                             "each as soon as its parameter has stepped: give one")
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
    if s.compile and s.framework != "hf":
        raise ParameterError("compile", True, "is modelled for transformers models ({framework=hf}) trained in full, "
                             "with LoRA or with QLoRA (nf4, nf4-dq), not this framework (docs/train-mem.md)")
    if s.compile and s.quant == "int8":
        raise ParameterError("quant", "int8", "is not modelled with {compile}: LLM.int8()'s matmuls were not traced "
                             "under torch.compile (nf4 and nf4-dq were, docs/train-mem.md)")
    if s.compile and s.quant != "none" and s.bnb_keeps_inputs:
        raise ParameterError("bnb_keeps_inputs", True, "(bitsandbytes < 0.43.2) is not modelled with {compile}: "
                             "bitsandbytes registers its 4-bit ops for torch.compile from 0.46 on")
    if s.bnb_fused_matmul and s.bnb_keeps_inputs:
        raise ParameterError("bnb_fused_matmul", True, "is bitsandbytes 0.50 or later, {bnb_keeps_inputs} before "
                             "0.43.2: give one")
    if s.fsdp_version not in (1, 2):
        raise ParameterError("fsdp_version", s.fsdp_version, "must be 1 (FullyShardedDataParallel) or 2 (fully_shard)")
    if s.fsdp_version == 1 and s.framework == "megatron":
        raise ParameterError("fsdp_version", 1, "is PyTorch's FSDP; {framework=megatron} shards with its distributed "
                             "optimizer (zero 1-2) or Megatron-FSDP")
    if s.fsdp_version == 1 and s.offload == "params":
        raise ParameterError("fsdp_version", 1, "is not modelled with {offload=params} (FSDP1's CPUOffload was not "
                             "traced; FSDP2's CPUOffloadPolicy is, {fsdp_version=2})")
    if s.fsdp_version == 1 and s.ep > 1:
        raise ParameterError("fsdp_version", 1, "has no expert parallelism (FSDP1 shards every flat parameter over all "
                             "ranks); {ep} > 1 is FSDP2's (torchtitan)")
    if s.fsdp_units != "root" and (s.fsdp_version == 1 or s.framework != "hf" or s.quant == "int8"):
        raise ParameterError("fsdp_units", s.fsdp_units, "is FSDP2's (fully_shard) units, modelled for transformers "
                             "models ({framework=hf}) trained in full, with LoRA or 4-bit QLoRA, not with "
                             "{fsdp_version=1}, this framework or {quant=int8}")
    if s.framework == "hf" and (s.sp or s.virtual_stages > 1):
        raise ParameterError("framework", "hf", "has no sequence parallelism or virtual pipeline stages; use "
                             "{framework=megatron}")
    return s


# chips whose memory the host's CPU shares (Apple's SoCs and their Neural Engine): CPU offload moves nothing off them
UNIFIED_MEMORY_KINDS = ("soc", "npu")


def with_chip_memory(st, chip_obj):
    """The setup with its chip class's memory outside the tensors (``context_bytes``, ``nccl_communicator_bytes``,
    ``nccl_all_to_all_bytes`` in presets/classes), unless the caller gave an ``overhead`` or the class states
    none (then the stated 1 GiB, ``train_memory.CUDA_OVERHEAD_BYTES``). Offload to a unified-memory chip's host is
    refused."""
    from aicalc.catalog import profiles

    if chip_obj is not None and st.offload != "none" and chip_obj.kind in UNIFIED_MEMORY_KINDS:
        from aicalc.errors import ParameterError

        raise ParameterError("offload", st.offload, f"moves states to the host's memory, which on {chip_obj.id} is the "
                             "same memory (unified): nothing leaves it; give {offload=none}")
    if chip_obj is None or st.overhead is not None or st.context_bytes is not None:
        return st
    opt = profiles.load("class", profiles.chip_class(chip_obj)).options
    if opt.get("context_bytes") is None:
        return st
    return st._replace(context_bytes=float(opt["context_bytes"]),
                   comm_bytes=float(opt.get("nccl_communicator_bytes") or 0.0),
                   all_to_all_bytes=float(opt.get("nccl_all_to_all_bytes") or 0.0))


def phase_names(index):
    """``peak_phase`` as names (``core.train_peak.PHASES``; the core keeps a one-byte index per layout)."""
    import numpy as np

    from aicalc.core.train_peak import PHASES

    names, index = np.asarray(PHASES), np.asarray(index)
    if index.ndim == 1 and index.size and index.strides[0] == 0:  # one phase everywhere: a read-only view of it
        return np.broadcast_to(names[int(index[0]):int(index[0]) + 1], index.shape)
    return np.take(names, index.astype(np.intp))  # take: faster than fancy indexing


def positions_warning(spec, seq) -> list[str]:
    """A warning where a sequence is longer than a learned position table (GPT-2's 1,024, BERT's 512 rows):
    transformers indexes the table by position, so such a step cannot run (the estimate is still given)."""
    import numpy as np

    rows = spec.arch.learned_positions
    if spec.arch.family == "roberta":  # its position ids start after the padding index: 514 rows, 512 tokens
        rows -= 2
    longest = int(np.max(seq)) if np.size(seq) else 0
    if not rows or longest <= rows:
        return []
    return [f"a {longest:,}-token sequence is longer than {spec.id}'s {rows:,} learned positions: transformers cannot "
            f"run it (give --seq {rows} or less)"]


def check_layout(arch, setup, tp, pp, zero, cp=None, seq=None, dp=None, xla=False) -> None:
    """Layouts no framework runs are bad input, with the reason. Pipeline stages need not divide the layers
    (:mod:`aicalc.core.stages`), expert parallelism may fold over tensor and data ranks, a TP that does not divide
    the sequence under sequence parallelism pads it (:func:`aicalc.core.train_memory.padded_seq`); ``xla``: TPU chips, where XLA shards the
    activations over the model axis (no Megatron sequence parallelism, nothing to divide)."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.core.geometry import check_tp
    from aicalc.core.stages import rank_layers
    from aicalc.errors import ParameterError

    if setup.compile:
        from aicalc.core.activations import compile_modelled

        if not compile_modelled(arch):
            raise ParameterError("compile", True, "is modelled for dense models with RMSNorm and a gated FFN (Llama, "
                                 "Mistral, Qwen, Phi-3), not this one (MoE, MLA, LayerNorm or Gemma's four norms): "
                                 "the eager estimate is an upper bound")
    if arch.encoder:
        # an encoder is sized as transformers' Trainer runs it: one device, DDP, ZeRO or FSDP
        if setup.framework != "hf":
            raise ParameterError("framework", setup.framework, f"does not train encoders; a {arch.family} model is "
                                 "sized as transformers runs it, {framework=hf}")
        for name, v in (("tp", tp), ("pp", pp), ("cp", cp)):
            if v is not None and np.any(np.asarray(v) > 1):
                raise ParameterError(name, int(np.max(v)), f"is not modelled for an encoder ({arch.family}): "
                                     "transformers' Trainer runs it data parallel (DDP, ZeRO or FSDP)")
        for what, unmodelled in (("compile", setup.compile), ("recompute", setup.recompute == "selective-op"),
                                 ("quant", setup.quant != "none")):
            if unmodelled:
                raise ParameterError(what, getattr(setup, what), f"is not modelled for an encoder ({arch.family}); "
                                     "its full training and LoRA, with checkpointing (full, every-N) or not, are")
    if setup.framework == "litgpt":
        # LitGPT's finetune scripts run one device or Fabric's DDP/FSDP (--devices, --num_nodes): no TP/PP/CP
        for name, v in (("tp", tp), ("pp", pp), ("cp", cp)):
            if v is not None and np.any(np.asarray(v) > 1):
                raise ParameterError(name, int(np.max(v)), "is not a LitGPT layout: its finetune scripts run data "
                                     "parallel (DDP, or FSDP as {zero=3}) only")
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
    for t in inputs.distinct(tp):
        check_tp(arch, int(t))
        if arch.ffn % int(t):
            raise ParameterError("tp", int(t), f"does not divide the FFN size {arch.ffn}")
    for p in inputs.distinct(pp):
        rank_layers(arch.layers, int(p), setup.virtual_stages, setup.first_stage_layers, setup.last_stage_layers)
    # the ranks matter only with expert parallelism (check_experts): no grid-long product without it
    dpcp = (dp if dp is not None else 1.0) * (cp if cp is not None else 1.0) if setup.ep > 1 else 1.0
    check_experts(arch, setup.ep, setup.etp, tp, dpcp)
    zero = np.asarray(zero)
    if zero.ndim == 1 and zero.size and zero.strides[0] == 0:
        zero = zero[:1]  # one stage broadcast: one value to check
    if np.any((zero < 0) | (zero > 3)):
        raise ParameterError("zero", int(np.max(zero)), "is not a ZeRO stage (0 to 3)")


def check_experts(arch, ep: int, etp, tp, dpcp) -> None:
    """Expert parallelism as Megatron-Core's MoE parallel folding lays it out (Liu et al. 2025, arXiv 2504.14960;
    ``expert_model_parallel_size``, ``expert_tensor_parallel_size``): per pipeline stage the ``tp·cp·dp`` ranks are
    regrouped as ETP × EP × expert-DP, so ``ep·etp`` must divide ``tp·cp·dp`` (EP may span tensor and data ranks),
    ``ep`` the experts and ``etp`` the expert FFN. ``etp`` None: the attention's ``tp`` (Megatron-Core's own default; the APIs
    pass 1 where ``ep`` > 1, as Megatron-Bridge's MoE recipes and torchtitan run experts)."""
    import numpy as np

    from aicalc.errors import ParameterError

    if etp is not None and etp > 1 and arch.moe is None:
        raise ParameterError("etp", etp, "splits experts; the model has none")
    if arch.moe is not None and etp is not None and arch.moe.expert_ffn % etp:
        raise ParameterError("etp", etp, f"does not divide the expert FFN size {arch.moe.expert_ffn}")
    if ep <= 1:
        return
    if arch.moe is None or arch.moe.experts % ep:
        what = "the model has no experts" if arch.moe is None else f"does not divide the {arch.moe.experts} experts"
        raise ParameterError("ep", ep, what)
    tp, dpcp = np.asarray(tp, dtype=np.float64), np.asarray(dpcp, dtype=np.float64)
    ranks = np.broadcast_to(tp * dpcp, np.broadcast(tp, dpcp).shape)
    group = ep * np.broadcast_to(tp if etp is None else np.float64(etp), ranks.shape)
    bad = ranks % group != 0
    if np.any(bad):
        i = int(np.flatnonzero(bad.ravel())[0])
        n, g = int(ranks.ravel()[i]), int(group.ravel()[i])
        why = "is more than" if g > n else "does not divide"
        raise ParameterError("ep", ep, f"× expert TP {g // ep} = {g} {why} the {n} tensor × context × data-parallel "
                             "ranks of a pipeline stage (MoE parallel folding)")


def train_memory(model, batch=1, seq=2048, *, dp=1, tp=1, pp=1, cp=1, zero=0, chip=None, **setup) -> TrainMemory:
    """Memory per device of one training step for each layout (arrays broadcast); ``setup`` takes the
    :class:`aicalc.core.train_peak.TrainSetup` fields (precision, optimizer, framework, recompute, lora_rank…)."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.catalog import load_model, load_node_or_chip
    from aicalc.api.results import Block
    from aicalc.catalog import profiles
    from aicalc.core import train_memory as tm
    from aicalc.core.train_peak import GRID, evaluate
    from aicalc.errors import ParameterError

    spec = load_model(model)
    st = setup_of(**setup)
    g = inputs.broadcast(batch=inputs.positive("batch", batch, whole=True), seq=inputs.positive("seq", seq, whole=True),
                         dp=inputs.positive("dp", dp, whole=True), tp=inputs.positive("tp", tp, whole=True),
                         pp=inputs.positive("pp", pp, whole=True), cp=inputs.positive("cp", cp, whole=True),
                         zero=inputs.positive("zero", zero, whole=True, minimum=0))
    chip_obj = load_node_or_chip(chip)[0] if chip is not None else None
    xla = chip_obj is not None and profiles.chip_class(chip_obj) == "tpu"
    st = with_chip_memory(st, chip_obj)
    check_layout(spec.arch, st, g["tp"], g["pp"], g["zero"], g["cp"], g["seq"], g["dp"], xla)
    if st.offload == "params" and np.any(g["zero"] < 3):
        raise ParameterError("offload", "params", "needs {zero=3} (ZeRO-Infinity / FSDP CPU offload)")
    if st.quant != "none" and not st.lora_rank:
        raise ParameterError("quant", st.quant, "needs {lora_rank} (quantized base weights are frozen; QLoRA)")
    if st.fsdp_version == 1 and np.all(g["zero"] < 3):
        raise ParameterError("fsdp_version", 1, "applies with {zero=3} (FSDP's full shard), which no row asks for")
    if st.fsdp_units != "root" and np.all(g["zero"] < 3):
        raise ParameterError("fsdp_units", st.fsdp_units, "applies with {zero=3} (FSDP's full shard), which no row "
                             "asks for")
    if st.fsdp_units != "root" and (spec.arch.tied_embeddings or spec.arch.encoder):
        raise ParameterError("fsdp_units", st.fsdp_units, f"is modelled for untied decoders; {spec.id} "
                             + ("is an encoder" if spec.arch.encoder else "ties its output layer to the embedding")
                             + ": use {fsdp_units=root}")
    if st.fsdp_units != "root" and np.any(g["pp"] > 1):
        raise ParameterError("fsdp_units", st.fsdp_units, "is modelled without pipeline stages ({pp} = 1)")
    if st.fsdp_version == 1 and st.quant != "none":
        raise ParameterError("fsdp_version", 1, "is not modelled with {quant} (QLoRA under {zero=3} is FSDP2's "
                             "fully_shard, the 4-bit data all-gathered as stored: {fsdp_version=2})")
    warnings = positions_warning(spec, g["seq"])
    seq_run = g["seq"]
    if st.sp and not xla:
        seq_run = tm.padded_seq(g["seq"], g["tp"], g["cp"])
        pad = seq_run != g["seq"]
        if np.any(pad):
            i = int(np.flatnonzero(np.broadcast_to(pad, seq_run.shape).ravel())[0])
            warnings.append(f"sequence {int(np.broadcast_to(g['seq'], pad.shape).ravel()[i])} padded to "
                            f"{int(seq_run.ravel()[i])} tokens where tp does not divide the tokens per context-parallel "
                            "rank (sequence parallelism scatters the sequence over the TP ranks)")
    # the grid's own columns from the grid (the core's would repeat them), the whole numbers written in place
    ints = Block(g["batch"].size, len(GRID) + 4, np.int64)
    cols = {k: g[k] for k in GRID}
    cols.update(evaluate(spec.arch, st, {**g, "seq": seq_run}, grid_columns=False))
    cols["peak_phase"] = phase_names(cols["peak_phase"])
    if np.ndim(cols["recompute"]) == 0:  # one mode for every layout: a read-only view (as Block.full), not a column
        cols["recompute"] = np.broadcast_to(np.asarray(cols["recompute"]), g["batch"].shape)
    if chip_obj is not None:
        cols["chip_memory_bytes"] = Block(g["batch"].size, 1).full(float(chip_obj.usable_memory_bytes))
        cols["fits"] = cols["peak_reserved_bytes"] <= chip_obj.usable_memory_bytes  # what the allocator will reserve
    for k in GRID + ("stage", "stage_layers"):
        v = np.broadcast_to(np.asarray(cols[k], dtype=np.float64), g["batch"].shape)
        if v.size and v.strides[0] == 0:  # one number repeated (a broadcast layout): a read-only view of it
            cols[k] = ints.full(int(v[0]))
        else:
            cols[k] = ints.row()
            np.copyto(cols[k], v, casting="unsafe")  # as astype(np.int64)
    cols["params"] = ints.full(int(cols["params"]))
    cols["trainable_params"] = ints.full(int(cols["trainable_params"]))
    return TrainMemory(cols, warnings, model=spec, chip=chip_obj, setup=st)


# What a run that does not fit gives up to fit, least first, on the same devices and layout: each ladder's steps are
# cumulative (a step keeps the ones before it). Full training: recompute every layer (+1 forward of compute), shard
# the states over the data-parallel ranks (ZeRO-3 / FSDP; where there are several), then keep the optimizer states,
# then the parameters too (with ZeRO-3, as ZeRO-Infinity and FSDP's CPU offload shard them), in host memory
# (ZeRO-Offload). Adapters (PEFT LoRA at rank 16, the QLoRA paper's setting for its smaller models; fine-tuning
# only), recomputed, then over a 4-bit NF4 base (QLoRA).
FULL_TRAINING_STEPS = (("recompute", "full"), ("zero", 3), ("offload", "optimizer"), ("offload", "params"))
ADAPTER_STEPS = (("lora_rank", 16), ("recompute", "full"), ("quant", "nf4"))


def fits_with(model, batch=1, seq=2048, *, limit=None, dp=1, tp=1, pp=1, cp=1, zero=0, chip=None,
              **setup) -> list[tuple[dict, float]]:
    """``(changes, peak_reserved_bytes)`` for each way a configuration (one of :func:`train_memory`'s, numbers not
    arrays) that does not fit ``limit`` bytes (default: ``chip``'s usable memory; the smaller of the two) comes to
    fit: of :data:`FULL_TRAINING_STEPS` (not with adapters) and :data:`ADAPTER_STEPS`, the first cumulative step
    whose reserved peak fits, its setting changes as :func:`train_memory`'s keywords; a ladder that fits at none of
    its steps (or whose steps the setup refuses) is left out, and a setting the configuration already has is not a
    step. Empty where it fits as it is."""
    from aicalc.api import inputs
    from aicalc.api.catalog import load_node_or_chip
    from aicalc.errors import AicalcError, ParameterError

    batch, seq, dp, tp, pp, cp = (inputs.whole(k, v) for k, v in (("batch", batch), ("seq", seq), ("dp", dp),
                                                                      ("tp", tp), ("pp", pp), ("cp", cp)))
    zero = inputs.count("zero", zero, minimum=0)
    chip_obj = load_node_or_chip(chip)[0] if chip is not None else None
    if chip_obj is not None:
        usable = float(chip_obj.usable_memory_bytes)
        limit = usable if limit is None else min(inputs.nbytes("limit", limit), usable)
    elif limit is None:
        raise ParameterError("limit", None, "or {chip} is needed: the memory to fit")
    else:
        limit = inputs.nbytes("limit", limit)

    def reserved(changes: dict) -> float:
        kw = {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "zero": zero, "chip": chip, **setup, **changes}
        return float(train_memory(model, batch, seq, **kw)["peak_reserved_bytes"][0])

    if reserved({}) <= limit:
        return []
    unified = chip_obj is not None and chip_obj.kind in UNIFIED_MEMORY_KINDS
    have = {"zero": zero, **setup}
    ladders = [ADAPTER_STEPS] if setup.get("lora_rank") else [FULL_TRAINING_STEPS, ADAPTER_STEPS]
    out = []
    for ladder in ladders:
        changes: dict = {}
        for key, value in ladder:
            if have.get(key) == value or (key == "lora_rank" and have.get(key)):
                continue
            if key == "zero" and dp * cp == 1:  # nothing to shard over
                continue
            if key == "offload" and unified:  # the host's memory is the chip's
                continue
            if (key, value) == ("offload", "params") and have.get("zero") != 3:
                changes["zero"] = 3
            changes[key] = value
            try:
                peak = reserved(changes)
            except AicalcError:  # a step this setup cannot take (e.g. an offload its framework does not model)
                continue
            if peak <= limit:
                out.append((dict(changes), peak))
                break
    return out


def search_layouts(model, chip=None, chips: int | None = None, *, limit=None, seq=2048, max_batch: int = 1, cp=1,
                   top: int = 20, progress=None, closest: bool = True, **setup) -> TrainMemory:
    """The layouts of ``chips`` devices (TP × PP × CP × DP × ZeRO × micro-batch ≤ ``max_batch`` × recompute)
    whose peak fits ``chip``'s memory (or ``limit`` bytes, the smaller of the two), ranked by headroom. A node id
    for ``chip`` means all its chips. ``progress(done, total)`` is called between slices. Where none fits, the
    closest are shown (``closest`` False: no row, for a caller that wants only what fits)."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.catalog import load_model, load_node_or_chip
    from aicalc.core import layout_search
    from aicalc.errors import ParameterError

    spec = load_model(model)
    ep = setup.pop("ep", 1)
    eps = sorted({int(e) for e in inputs.positive("ep", ep, whole=True).reshape(-1)})  # one search per EP degree
    st = setup_of(**setup, ep=eps[0])
    if st.framework == "litgpt":
        raise ParameterError("framework", "litgpt", "has one layout per device count (data parallel, or FSDP as "
                             "{zero=3}): give {dp} and {zero} instead of a search")
    chip_obj, count = load_node_or_chip(chip) if chip is not None else (None, 1)
    if chip_obj is None and limit is None:
        raise ParameterError("chip", None, "is needed (or a memory limit) to know what fits")
    chips = chips or (count if count > 1 else None)
    if not chips:
        raise ParameterError("chips", None, "is needed: the number of devices to lay the model out on")
    lim = min(x for x in (inputs.nbytes("limit", limit) if limit is not None else None,
                          chip_obj.usable_memory_bytes if chip_obj else None) if x is not None)
    seqs = inputs.positive("seq", seq, whole=True).reshape(-1)
    cps = sorted({int(c) for c in inputs.positive("cp", cp, whole=True).reshape(-1)})
    if st.attention == "eager":
        cps = [1]  # eager attention has no context-parallel path
    # selective-op is not searched where it is not modelled (LoRA: setup_of refuses it)
    recomputes = ("none", "full") + (("selective",) if st.framework == "megatron" else
                                     ("every-2",) if st.lora_rank or spec.arch.encoder else ("selective-op", "every-2"))
    chips = inputs.whole("chips", chips)
    from aicalc.catalog import profiles

    xla = chip_obj is not None and profiles.chip_class(chip_obj) == "tpu"
    setups = [with_chip_memory(setup_of(**setup, ep=e), chip_obj) for e in eps]
    for one in setups:
        check_experts(spec.arch, one.ep, one.etp, 1, chips)
    st = setups[0]
    max_batch = inputs.whole("max_batch", max_batch)
    n = layout_search.count(spec.arch, chips, seqs, max_batch, cps, recomputes, st.virtual_stages,
                            st.first_stage_layers, st.last_stage_layers) * len(eps)
    if n > layout_search.MAX_LAYOUTS:  # bounded before any is evaluated (docs/robustness.md)
        raise ParameterError("chips", chips, f"gives {n:,} layouts to search with {len(seqs):,} sequence length(s), "
                             f"micro-batches up to {max_batch}, {len(cps)} CP degree(s), {len(recomputes)} "
                             f"recompute modes and {len(eps)} EP degree(s); a search is limited to "
                             f"{layout_search.MAX_LAYOUTS:,} layouts (give fewer {{seq}} values, a smaller micro-batch "
                             "or fewer {cp} or {ep} degrees)")
    top = inputs.whole("top", top)
    found = [(one, *layout_search.search(spec.arch, one, chips, lim, seqs, max_batch, cps, recomputes, top,
                                         progress, xla, closest)) for one in setups]
    if all(f[1] is None for f in found):
        raise ParameterError("chips", chips, "admits no TP × PP × CP layout of this model")
    fit, n = sum(f[2] for f in found), sum(f[3] for f in found)
    sel = _merge_ep([(one.ep, part) for one, part, part_fit, _ in found if part and (part_fit or not fit)], top)
    if not sel:  # none fits, and the closest were not asked for
        return TrainMemory({}, [], model=spec, chip=chip_obj, setup=st, chips=int(chips), limit=lim, layouts_fit=0,
                           layouts=n, cps=cps, eps=eps)
    sel["peak_phase"] = phase_names(sel["peak_phase"])
    for k in ("batch", "seq", "dp", "tp", "pp", "cp", "zero", "stage", "stage_layers"):
        sel[k] = sel[k].astype(np.int64)
    sel["params"] = np.broadcast_to(sel["params"], sel["batch"].shape).astype(np.int64)
    sel["trainable_params"] = np.broadcast_to(sel["trainable_params"], sel["batch"].shape).astype(np.int64)
    from aicalc.units import fmt_bytes

    warnings = [] if fit else [f"no layout of {chips} device{'s' if chips > 1 else ''} fits {fmt_bytes(lim)} per "
                               "device; the closest are shown"]
    return TrainMemory(sel, warnings, model=spec, chip=chip_obj, setup=st, chips=int(chips), limit=lim,
                       layouts_fit=fit, layouts=n, cps=cps, eps=eps)


def _merge_ep(parts: list, top: int) -> dict:
    """One search's columns from its EP degrees' (``(ep, columns)``, EP ascending): an ``ep`` column, then the
    ``top`` with the most headroom, or where none fits the smallest shortfall, ties in EP order."""
    import numpy as np

    if not parts:
        return {}
    sel = {k: np.concatenate([p[k] for _, p in parts]) for k in parts[0][1]}
    sel["ep"] = np.concatenate([np.full(len(p["fits"]), ep, dtype=np.int64) for ep, p in parts])
    key = -sel["headroom_bytes"] if sel["fits"].all() else sel["shortfall_bytes"]
    order = np.argsort(key, kind="stable")[:top]
    return {k: v[order] for k, v in sel.items()}
