"""Training memory per device: model states (weights, gradients, master weights, optimizer states) under
ZeRO/FSDP, tensor and pipeline parallelism, LoRA/QLoRA, plus the peak with its transient terms.

Pure numpy, no I/O. Every function broadcasts over arrays (dp, tp, pp, zero stage, …). Bytes are float64.
Notation: N params, Ψ (ZeRO paper) = N, N_d data-parallel degree, K optimizer bytes per param.
"""

from aicalc.catalog.arch import Arch
from aicalc.core.dtypes import qlora_bytes_per_param
from aicalc.core.params import per_arch
from aicalc.errors import ParameterError, check_choice
from aicalc.tuples import Named

PRECISIONS = ("fp32", "bf16", "bf16-mixed", "fp16-mixed", "fp8-mixed")
OPTIMIZERS = ("adamw", "adam", "adam8bit", "sgd", "sgd-momentum", "adafactor", "lion")
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}
# Per-device framework overhead added to the allocator's peak: CUDA context + cuBLAS/cuDNN workspaces
# and the caching allocator's slack. TM-32 measures a 1343 MiB context on a V100 (nvidia-smi "used");
# recent CUDA with lazy module loading is ≈ 0.5 GiB. We state 1 GiB.
CUDA_OVERHEAD_BYTES = 2**30
# PyTorch's caching allocator reserves more than is allocated (block rounding, segments that cannot be split
# or released). Fitted on a named calibration subset: the eight full-size H200 steps without recompute of the
# first run (validation/step_peak_doc.RESERVE_CALIBRATION, tests/data/measured/h200-step-peak.json:
# max_memory_reserved / max_memory_allocated 1.036-1.124, median 1.077; default allocator settings). Held out:
# the other full-size H200 steps (full recompute and 128-expert MoE fragment more: up to 1.43), TM-34 (1.040, a
# Megatron GPT-2 run at its OOM) and TM-26 (1.049 against aicalc's allocation)
ALLOCATOR_RESERVE = 0.08
# Two ways a PyTorch training step fragments the cache beyond that, each a factor on the reserve, fitted on the
# first H200 run's full-size steps (tests/data/measured/h200-step-peak.json; max_memory_reserved over aicalc's
# allocated peak, median) and held out on the second run (h200-step-peak-2.json), validation/step_peak_doc.py:
# * full recompute: each layer's rebuilt tensors are allocated and freed between the weight gradients the backward
#   keeps, so the freed blocks sit between live ones. Five dense full-recompute steps 1.03-1.28, median 1.21
#   (1.08 x 1.12). Held out, the partial modes did not follow it (selective-op 1.00-1.32, every-2 1.06-1.15):
#   applying it to them too put the second run at 7.8 % geomean (max +21 %), to full recompute alone 5.9 %;
# * fine-grained MoE (32 experts or more): the routed tokens' buffers change size every step, one set per
#   expert group. Six steps of Qwen1.5-MoE, DeepSeek-V2-Lite and Qwen3-30B-A3B widths 1.00-1.18 over the rest,
#   median 1.08; Mixtral's 8 experts fragment no more than a dense model (1.075).
# Not applied to Megatron (its own contiguous buffers; TM-34 1.040 at full recompute).
RECOMPUTE_RESERVE = 0.12
MOE_RESERVE = 0.08
MOE_RESERVE_EXPERTS = 32


def fragmentation(arch: Arch, framework: str, recompute, grads_kept=False):
    """The factor on ``1 + ALLOCATOR_RESERVE`` for a step's layout (see ``RECOMPUTE_RESERVE``). ``grads_kept``
    (an array or a bool): the gradients live from one step or micro-batch to the next (DDP's buckets, gradient
    accumulation, ``zero_grad(set_to_none=False)``), so the backward makes no gradient between the rebuilt
    tensors and full recompute fragments no more than the rest: BERT-large with 4-step accumulation and
    gradient checkpointing (TM-32, 6,775 MiB used) reads +13 % with the factor, +3 % without."""
    import numpy as np

    from aicalc.core.activations import _pick, recompute_every

    if framework == "megatron":
        return 1.0
    moe = 1.0 + MOE_RESERVE if arch.moe is not None and arch.moe.experts >= MOE_RESERVE_EXPERTS else 1.0
    if isinstance(recompute, str) and np.ndim(grads_kept) == 0:
        return moe * (1.0 + RECOMPUTE_RESERVE if recompute_every(recompute) == 1 and not grads_kept else 1.0)
    return _pick((recompute_every(recompute) == 1) & ~np.asarray(grads_kept, dtype=bool),
                 1.0 + RECOMPUTE_RESERVE, 1.0) * moe
# torchtune's CEWithChunkedOutputLoss default (``num_output_chunks=8``), the model's output split to match.
CHUNKED_LOSS_CHUNKS = 8
# LitGPT's finetune scripts: ``model(input_ids, lm_head_chunk_size=128)`` (litgpt/finetune/lora.py)
LITGPT_LM_HEAD_CHUNK = 128


class StateBytes(Named):
    """Bytes per parameter of each model-state component (before sharding)."""

    weights: float  # the working copy the forward reads
    grads: float  # per trainable parameter
    master: float  # fp32 master copy (mixed precision), per trainable parameter
    optimizer: float  # optimizer states, per trainable parameter (master excluded)

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.master + self.optimizer


def state_bytes(precision: str, optimizer: str = "adamw", grad_dtype: str | None = None,
                optimizer_dtype: str | None = None) -> StateBytes:
    """Bytes per parameter for a precision regime and optimizer (TM-01…TM-07).

    * ``fp32``: 4 w + 4 g, states fp32 → Adam 16 B (TM-01).
    * ``bf16`` (pure): 2 w + 2 g, states in the param dtype as torch's AdamW does (8 B, TM-05), or fp32
      with ``optimizer_dtype='fp32'``.
    * ``bf16-mixed``/``fp16-mixed``: 2 w + 2 g + 4 fp32 master + fp32 states → Adam 16 B, the ZeRO form
      ``2 + 2 + K`` with K = 12 (TM-02); ``grad_dtype='fp32'`` gives Megatron/DeepSpeed's 18 B (TM-03).
    * ``fp8-mixed``: the same states as ``bf16-mixed`` (FP8 recipes keep bf16 weights and an fp32 master;
      the FP8 weight copies are a cache, see :func:`fp8_weight_cache_bytes`).
    * optimizer states: Adam/AdamW two (m, v); 8-bit Adam two of 1 B (bitsandbytes; block absmax
      scales, 4 B per 2048-value block, not counted; TM-06); SGD none, with momentum one (TM-07); Lion one
      (Chen et al. 2023, momentum only); Adafactor: factored second moment, counted per matrix by
      :func:`adafactor_elements` (here: 0 per param, added by the caller).
    """
    check_choice("precision", precision, PRECISIONS)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    for name, v in (("grad_dtype", grad_dtype), ("optimizer_dtype", optimizer_dtype)):
        if v is not None:
            check_choice(name, v, tuple(DTYPE_BYTES))
    mixed = precision.endswith("-mixed")
    w = 4.0 if precision == "fp32" else 2.0
    g = DTYPE_BYTES[grad_dtype] if grad_dtype else w
    master = 4.0 if mixed else 0.0
    state = DTYPE_BYTES[optimizer_dtype] if optimizer_dtype else (2.0 if precision == "bf16" else 4.0)
    n_states = {"adamw": 2, "adam": 2, "adam8bit": 0, "sgd": 0, "sgd-momentum": 1, "adafactor": 0, "lion": 1}
    opt = n_states[optimizer] * state + (2.0 if optimizer == "adam8bit" else 0.0)
    return StateBytes(weights=w, grads=g, master=master, optimizer=opt)


def adafactor_elements(arch: Arch) -> int:
    """Adafactor state elements (Shazeer & Stern 2018, §3): a factored second moment keeps a row and a
    column vector (r + c values) per weight matrix, the full vector for 1-D params; no first moment
    (β₁ = 0, transformers' default)."""
    H, A, K, d, F, V, L = arch.hidden, arch.heads, arch.kv_heads, arch.head_dim, arch.ffn, arch.vocab, arch.layers
    attn = (H + A * d) + 2 * (H + K * d) + (A * d + H)
    mlp = (3 if arch.gated_ffn else 2) * (H + F)
    norms = arch.norms_per_layer * H
    emb = (V + H) * (1 if arch.tied_embeddings else 2) + H
    return L * (attn + mlp + norms) + emb


def shard_states(n_params, n_trainable, sb: StateBytes, zero, dp, extra_optimizer_bytes=0.0):
    """Per-device bytes of weights, grads, optimizer (master included) under ZeRO stage ``zero`` over ``dp``.

    Rajbhandari et al. 2019 (arXiv 1910.02054) §5: stage 1 (P_os) shards the optimizer states (and
    the fp32 master copy, part of K), stage 2 (P_os+g) also the gradients, stage 3 (P_os+g+p) also the
    parameters: per device ``(2 + 2 + K)Ψ``, ``4Ψ + KΨ/N_d``, ``2Ψ + (2 + K)Ψ/N_d``, ``(4 + K)Ψ/N_d``
    (TM-09). FSDP FULL_SHARD = stage 3, SHARD_GRAD_OP = 2; Megatron's distributed optimizer = stage 1
    with fp32 grads, ``6 + 12/d`` (TM-04).

    With context parallelism the ranks of a CP group hold the same parameters (they see different tokens),
    so the sharding group is data × context parallel: the caller passes ``dp = dp·cp``. Megatron-LM
    shards its distributed optimizer and reduces gradients over ``_DATA_PARALLEL_GROUP_WITH_CP``
    (``megatron/core/parallel_state.py``), FSDP2 with CP shards over the ``dp_shard_cp`` mesh (torchtitan).
    """
    import numpy as np

    zero, dp = np.asarray(zero, dtype=np.float64), np.asarray(dp, dtype=np.float64)
    n_params, n_trainable = np.asarray(n_params, dtype=np.float64), np.asarray(n_trainable, dtype=np.float64)
    weights = n_params * sb.weights / np.where(zero >= 3, dp, 1.0)
    grads = n_trainable * sb.grads / np.where(zero >= 2, dp, 1.0)
    optimizer = (n_trainable * (sb.master + sb.optimizer) + extra_optimizer_bytes) / np.where(zero >= 1, dp, 1.0)
    return weights, grads, optimizer


def zero_paper(psi, nd, stage, K=12.0):
    """ZeRO paper per-GPU model states in bytes, mixed precision Adam (TM-09): ``(2 + 2 + K)Ψ`` sharded."""
    sb = StateBytes(weights=2.0, grads=2.0, master=4.0, optimizer=K - 4.0)
    w, g, o = shard_states(psi, psi, sb, stage, nd)
    return w + g + o


def deepspeed_zero2_estimate(params, gpus_per_node=1, nodes=1, offload_optimizer=False,
                             additional_buffer_factor=1.5):
    """DeepSpeed ``estimate_zero2_model_states_mem_needs`` (stage_1_and_2.py), TM-10/TM-11: (cpu, gpu) bytes.

    offload: gpu ``2P``, cpu ``P·max(4·total_gpus, 16)·abf``; else gpu ``4P + 16P/total_gpus``,
    cpu ``P·4·gpn·abf``.
    """
    total = gpus_per_node * nodes
    if offload_optimizer:
        return params * max(4 * total, 16) * additional_buffer_factor, 2 * params
    return params * 4 * gpus_per_node * additional_buffer_factor, 4 * params + 16 * params / total


def deepspeed_zero3_estimate(params, largest_layer_params, gpus_per_node=1, nodes=1, offload_param=False,
                             offload_optimizer=False, zero_init=True, additional_buffer_factor=1.5):
    """DeepSpeed ``estimate_zero3_model_states_mem_needs`` (stage3.py), TM-10/TM-12…TM-14: (cpu, gpu) bytes.

    LL = 4 × largest layer params (its 16-bit params and grads, gathered); gf = 1/nodes.
    """
    total = gpus_per_node * nodes
    gf = 1 / nodes
    abf = additional_buffer_factor
    ll = 4 * largest_layer_params
    if offload_param and offload_optimizer:
        gpu = ll
        cpu = 18 * params * gf * abf if zero_init else params * max(4 * gpus_per_node, 18 * gf) * abf
    elif offload_optimizer:
        gpu = ll + 2 * params / total
        cpu = 16 * params * gf * abf if zero_init else params * max(4 * gpus_per_node, 16 * gf) * abf
    else:
        gpu = ll + 18 * params / total
        cpu = largest_layer_params * 4 * gpus_per_node * abf if zero_init else params * 4 * gpus_per_node * abf
    return cpu, gpu


# --------------------------------------------------------------------------------------------------
# Parameters per device
# --------------------------------------------------------------------------------------------------


class ParamSplit(Named):
    """The model's parameters by where they live under pipeline parallelism."""

    layers: float  # all decoder layers, dense part
    experts: float  # routed experts of all layers (split by expert parallelism)
    first: float  # first stage only: token embedding (+ learned positions)
    last: float  # last stage only: final norm + lm_head (a copy of the embedding when tied and p > 1)
    total: float
    largest_layer: float  # DeepSpeed's "largest layer" (a module's own params): max(embedding, one layer)
    linear: float  # weights of the decoder layers' linear layers (what QLoRA quantizes)


@per_arch
def split_params(arch: Arch) -> ParamSplit:
    from aicalc.core.params import count_params, mlp_params

    n = count_params(arch)
    H = arch.hidden
    norm_w = 0 if arch.encoder else (2 if arch.norm == "layer" else 1) * H  # the final norm (an encoder: none)
    experts = 0.0
    if arch.moe is not None:
        experts = arch.n_moe_layers * arch.moe.experts * mlp_params(arch, arch.moe.expert_ffn)
    layers = n.attention + n.ffn + (n.norms - norm_w) - experts
    last = norm_w + (n.lm_head if n.lm_head else arch.vocab * H)
    per_layer = (n.attention + n.ffn) / arch.layers
    linear = n.attention + n.ffn - _bias_params(arch)
    return ParamSplit(layers=layers, experts=experts, first=n.embedding, last=last, total=n.total,
                      largest_layer=max(n.embedding, per_layer), linear=linear)


def _bias_params(arch: Arch) -> int:
    A, K, d, H, F = arch.heads, arch.kv_heads, arch.head_dim, arch.hidden, arch.ffn
    b = 0
    if arch.qkv_bias:
        b += A * d + 2 * K * d
    if arch.o_bias:
        b += H
    if arch.mlp_bias and arch.moe is None:
        b += (2 * F if arch.gated_ffn else F) + H
    return b * arch.layers


def params_per_device(split: ParamSplit, tp=1, pp=1, ep=1):
    """Parameters on the most-loaded device (Megatron's ``(P_block/p + embedding)/t``, TM-20).

    Decoder layers split evenly over p stages; the first stage adds the embedding, the last the final
    norm and lm_head (with p = 1 one device holds both; tied embeddings are counted once then). Routed
    experts split over ep × t. Norms are divided by t too (as Megatron's estimate does; they are tiny).
    With tied embeddings and p > 1 the last stage holds its own copy of the table (``split.last``).
    """
    import numpy as np

    tp, pp, ep = (np.asarray(x, dtype=np.float64) for x in (tp, pp, ep))
    one = split.total - split.experts
    staged = split.layers / pp + np.maximum(split.first, split.last)
    dense = np.where(pp == 1, one, staged)
    return dense / tp + split.experts / (pp * ep * tp)


def stage_params(split: ParamSplit, n_layers: int, n_moe_layers: int, layers, moe_layers, is_first, is_last, tp=1,
                 ep=1, etp=None):
    """(dense, expert) parameters on one device of a pipeline stage holding ``layers`` of the model's ``n_layers``
    decoder layers, ``moe_layers`` of them MoE (arrays broadcast).

    Dense part: the layers' share of ``split.layers`` (an average layer's attention, norms and dense or shared FFN)
    plus the embedding on the first stage and the final norm + lm_head on the last (one stage: the whole model, tied
    embeddings counted once), all / tp (Megatron's ``(P_block/p + embedding)/t``, TM-20). Routed experts: the MoE
    layers' share of ``split.experts`` over ``ep × etp`` (Megatron-Core's MoE parallel folding gives the experts their
    own tensor-parallel degree ``expert_tensor_parallel_size``, by default the attention's ``tp``)."""
    import numpy as np

    tp, ep = np.asarray(tp, dtype=np.float64), np.asarray(ep, dtype=np.float64)
    etp = tp if etp is None else np.asarray(etp, dtype=np.float64)
    layers, moe_layers = np.asarray(layers, dtype=np.float64), np.asarray(moe_layers, dtype=np.float64)
    first, last = np.asarray(is_first, dtype=bool), np.asarray(is_last, dtype=bool)
    staged = split.layers * layers / n_layers + np.where(first, split.first, 0.0) + np.where(last, split.last, 0.0)
    dense = np.where(first & last, split.total - split.experts, staged)
    experts = split.experts * moe_layers / n_moe_layers if n_moe_layers else 0.0 * layers
    return dense / tp, experts / (ep * etp)


def padded_seq(seq, tp, cp=1):
    """The sequence as sequence parallelism runs it: split over ``cp`` ranks, each rank's tokens padded up to a
    multiple of ``tp`` (Megatron's SP scatters the sequence over the TP ranks and asserts it divides; data
    pipelines pad to a multiple of tp, as Megatron-Bridge pads packed sequences to tp·cp·2). Unchanged where tp
    divides it."""
    import numpy as np

    seq, tp, cp = (np.asarray(x, dtype=np.float64) for x in (seq, tp, cp))
    return np.ceil(seq / cp / tp) * tp * cp


def largest_param_tensor(arch: Arch, lora_rank: int | None = None) -> float:
    """Elements of the largest single trainable tensor: what one gradient costs when the optimizer steps
    inside the backward pass.

    Optimizer-in-backward (torchtune ``optimizer_in_bwd: True``; PyTorch's "How to save memory by fusing
    the optimizer step into the backward pass" tutorial, ``register_post_accumulate_grad_hook``) applies
    each parameter's update as soon as its gradient is accumulated and frees that gradient, so at most one
    parameter's gradient is live (plus the ones being produced by the current layer; the largest tensor
    bounds it). Full training: the embedding or lm_head ``V·H``, or the largest linear ``H·max(F, A·d)``.
    LoRA: the largest adapter matrix, ``r·max(H, F, A·d)``. Needs one micro-batch per step (no gradient
    accumulation), which the command enforces.
    """
    H, V, F, Ad = arch.hidden, arch.vocab, (arch.moe.expert_ffn if arch.moe else arch.ffn), arch.heads * arch.head_dim
    if lora_rank:
        return float(lora_rank * max(H, F, Ad))
    return float(max(V * H, H * F, H * Ad))


# --------------------------------------------------------------------------------------------------
# LoRA / QLoRA
# --------------------------------------------------------------------------------------------------

LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")


def lora_targets(text: str) -> tuple[str, ...]:
    """``q,v`` (PEFT's default for Llama), ``all`` (every linear of the layers), or a list of
    q, k, v, o, gate, up, down (``_proj`` suffixes accepted)."""
    if text.strip() in ("all", "all-linear"):
        return LORA_TARGETS
    out = []
    for item in text.split(","):
        name = item.strip().removesuffix("_proj")
        if name not in LORA_TARGETS:
            raise ParameterError("lora_targets", text, f"names an unknown module '{item}' (known: "
                                 f"{', '.join(LORA_TARGETS)}, all)")
        out.append(name)
    return tuple(dict.fromkeys(out))


def lora_params(arch: Arch, rank: int, targets: tuple[str, ...]) -> int:
    """Trainable LoRA parameters: ``r·(in + out)`` per targeted matrix per layer (Hu et al. 2021, §4;
    PEFT ``LoraLayer``: A is r×in, B is out×r). TM-27: Llama-3.2-3B, r 32, q+v → 9,175,040."""
    H, A, K, d, F = arch.hidden, arch.heads, arch.kv_heads, arch.head_dim, arch.ffn
    shapes = {"q": (H, A * d), "k": (H, K * d), "v": (H, K * d), "o": (A * d, H),
              "gate": (H, F), "up": (H, F), "down": (F, H)}
    if not arch.gated_ffn:
        shapes.pop("gate")
    per_layer = sum(rank * (i + o) for t, (i, o) in shapes.items() if t in targets)
    return per_layer * arch.layers




def base_weight_bytes(split: ParamSplit, quant: str, base_bytes: float) -> float:
    """Frozen base weights under ``quant`` (TM-08): the decoder layers' linear weights at NF4
    (4 + 32/64 = 4.5 bits; with double quantization 4.127 bits, Dettmers et al. 2023 §3) or int8
    (LLM.int8(): 1 B + a per-row fp32 scale, not counted); embeddings, lm_head, norms and biases stay
    at ``base_bytes`` (16-bit)."""
    q = qlora_bytes_per_param(quant)
    if q is None:
        return base_bytes
    rest = split.total - split.linear
    return (split.linear * q + rest * base_bytes) / split.total


def dequantized_weight_bytes(arch: Arch, a=2.0, t=1, head=False, from_fp16=False):
    """The 16-bit copy of one quantized weight that bitsandbytes makes for each matmul (QLoRA's backward
    workspace): ``bnb.matmul_4bit`` on a training batch runs ``MatMul4Bit``, whose forward computes
    ``F.linear(A, dequantize_4bit(B, quant_state).to(A.dtype).t())`` and whose backward dequantizes again for
    ``grad_A`` (``bitsandbytes/autograd/_functions.py``); the copy is freed after each matmul, so one is live at
    a time: the largest linear weight, ``a·H·max(F, A·d)/t`` (an expert's F for MoE). LLM.int8() (``int8``)
    likewise dequantizes its weight for the backward. Llama-3.1-8B: 4096 × 14336 × 2 B = 117 MB.

    ``head``: the LM head is quantized too (LitGPT: Lightning's ``BitsandbytesPrecision`` swaps every
    ``torch.nn.Linear`` made under ``fabric.init_module``, the ``lm_head`` included), so the largest quantized
    weight is ``V·H`` (Llama-3.1-8B: 128256 × 4096 × 2 B = 1.05 GB), dequantized for every 128-token chunk of the
    logits. ``from_fp16``: Lightning's ``_Linear4bit.quantize`` casts the weight to ``torch.half`` before
    ``quantize_4bit``, so ``dequantize_4bit`` returns fp16 (its ``quant_state.dtype``) and ``.to(A.dtype)`` makes
    a second copy in the compute dtype: ``2 + a`` bytes per element while both live (``a`` = 2 with fp16
    compute, where ``.to`` is a no-op: 2)."""
    F = arch.moe.expert_ffn if arch.moe else arch.ffn
    n = arch.hidden * max(F, arch.heads * arch.head_dim, arch.vocab if head else 0)
    per = (2.0 + a) if from_fp16 else a
    return per * n / t


def bnb_kept_inputs(B, S, arch: Arch, a=2.0, t=1, per_layer=False):
    """What bitsandbytes < 0.43.2 keeps of one micro-batch until its autograd graph is freed.

    ``MatMul4Bit.forward`` in bitsandbytes 0.42.0 stores its input on the context object
    (``ctx.tensors = (A, B)``, ``bitsandbytes/autograd/_functions.py``) instead of ``ctx.save_for_backward``,
    so the backward does not release it: the input of every quantized linear that needs a gradient lives as
    long as the graph (fixed in 0.43.2, bitsandbytes PR #1270 "fix QLoRA mem bug: delete useless buffered
    activation"). LitGPT's ``finetune/lora.py`` loop keeps the graph through ``logits`` (a list of the
    ``lm_head``'s chunk outputs, rebound only when the next micro-batch's forward returns), so at the end of the
    next forward the previous micro-batch's linear inputs and its a-byte logits are still allocated. Per layer:
    the QKV input (the first norm's output, ``a·BSH``; not in the first layer, whose input comes from the frozen
    embedding and needs no gradient), the output projection's (``a·BS·A·d``), the MLP's shared input
    (``a·BSH``) and the down projection's (``a·BS·F``); then the ``lm_head`` input (``a·BSH``) and the logits
    (``a·BS·V``). The LoRA adapters' own inputs are saved normally and freed. ``per_layer``: one layer's share,
    which the current micro-batch's activations hold as well (what the frozen base's linears otherwise keep none
    of, ``activations.hf_frozen_saving``)."""
    import numpy as np

    B, S, a, t = (np.asarray(x, dtype=np.float64) for x in (B, S, a, t))
    H, F, V = arch.hidden, (arch.moe.expert_ffn if arch.moe else arch.ffn), arch.output_vocab
    layer = 2 * H + (arch.heads * arch.head_dim + F) / t
    if per_layer:
        return a * B * S * layer
    # the first layer's missing QKV input and the lm_head input are both a·BSH: they cancel
    return a * B * S * (layer * arch.layers + V / t)


# --------------------------------------------------------------------------------------------------
# Peak
# --------------------------------------------------------------------------------------------------


def cp_kv_buffers(B, S, arch: Arch, a, t=1, cp=1):
    """Context parallelism's K/V exchange buffers for one attention layer (transient, not saved).

    Ring attention over ``cp`` ranks (Liu et al. 2023, arXiv 2310.01889; Megatron-LM ``--context-parallel-size``
    with its default ``--cp-comm-type p2p``, implemented by TransformerEngine's ``AttnFuncWithCPAndKVP2P`` in
    ``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``): each rank holds
    S/cp tokens; one K+V chunk is ``2·a·B·(S/cp)·K·d/t`` bytes (K kv heads of size d, split over t).
    The forward keeps a list of all cp received chunks (``p2p_comm_buffers``) until the layer's attention
    ends, i.e. the whole sequence's K and V; the backward double-buffers K/V together with dK/dV, 4 chunks.
    So ``max(cp, 4)`` chunks are live at once, 0 without CP. The all-gather variant (``--cp-comm-type
    allgather``, torch's ``context_parallel`` with its default all-gather rotation) also materializes the
    full K and V (cp chunks). Only the local chunk is *saved* for backward (counted in the activations).
    """
    import numpy as np

    B, S, a, t, cp = (np.asarray(x, dtype=np.float64) for x in (B, S, a, t, cp))
    kd = np.maximum(arch.kv_heads / t, 1) * arch.head_dim  # kv heads replicated when t > K
    chunk = 2 * a * B * (S / cp) * kd
    return np.where(cp > 1, np.maximum(cp, 4.0) * chunk, 0.0)


def transient_bytes(B, S, arch: Arch, a, t=1, framework="hf", attention="sdpa", recompute="none",
                    layer_bytes=0.0, zero=0, largest_layer_params=0.0, weight_bytes=2.0, cp=1, loss_kind="full"):
    """Memory that is live at the peak but is not saved for backward (documented in docs/train-mem.md).

    * loss: besides the saved fp32 log-softmax (counted in activations), transformers holds the a-byte
      logits and their fp32 upcast in the forward, and two fp32 gradients in the backward of
      ``log_softmax``: ``max(a + 4, 8)·BS·V/t``. Megatron's fused vocab-parallel cross entropy works in
      place on its fp32 logits: ``4·BS·V/t``. The chunked loss (``loss_kind="chunked"``, torchtune's
      ``CEWithChunkedOutputLoss`` with 8 chunks, see ``activations.hf_outside``) upcasts one chunk at a
      time: its fp32 copy and fp32 gradient, ``8·BS·V/(8t)``, plus the a-byte gradient of that chunk for the
      output projection's backward, ``a·BS·V/(8t)``.
    * the largest layer's workspace in backward: the gradients of the largest intermediates of one layer:
      the MLP's up/gate gradients ``3·a·BSF/t`` or, with eager attention, the fp32 score gradient and its
      input ``8·B·A·S²/t``; with recompute, one layer's activations are rebuilt first (``layer_bytes``) and
      that workspace comes on top (the rebuilt tensors are freed as the layer's backward consumes them, the
      same as a layer that kept them; validation/record_step_peak.py: GPT-2 eager fp32 with full recompute
      was +19.5 % with ``2 × layer_bytes``). The hf selective modes rebuild a layer too: "every-N" for its
      checkpointed layers; "selective-op" (torchtitan's op-level SAC) recomputes every op but the cached
      matmul/attention outputs, which are already counted in the activations, so for it this is an upper
      bound (high by at most those outputs of one layer, ``activations.hf_selective_op_layer``).
    * ZeRO-3 gathers the largest layer's 16-bit params and grads, ``4 × largest layer``
      (DeepSpeed's ``LL``, TM-10).
    * context parallelism (``cp`` > 1): each rank sees S/cp tokens, so the loss and MLP terms use S/cp;
      the ring's K/V buffers (:func:`cp_kv_buffers`) join the workspace (both belong to one layer at a
      time, so the larger of the two counts).
    """
    import numpy as np

    B, S, a, t, cp = (np.asarray(x, dtype=np.float64) for x in (B, S, a, t, cp))
    kv = None if np.ndim(cp) == 0 and cp <= 1 else cp_kv_buffers(B, S, arch, a, t, cp)  # None: no CP, no buffers
    if kv is not None:  # (S / 1 is S)
        S = S / cp
    BS = B * S
    V, F, A = arch.output_vocab, (arch.moe.expert_ffn if arch.moe else arch.ffn), arch.heads
    # the factors that are one number multiply first (whole numbers: the same products), the division last
    if loss_kind == "chunked":
        loss = BS * ((8 + a) * V) / (CHUNKED_LOSS_CHUNKS * t)
    elif framework == "litgpt":
        # LitGPT's chunked_cross_entropy in the model dtype: one 128-token chunk's log-softmax gradient and its
        # logits gradient at a time (litgpt/utils.py; the chunks' own logits and log-softmax are activations)
        loss = 2 * a * B * np.minimum(S, LITGPT_LM_HEAD_CHUNK) * V / t
    else:
        loss = BS * ((np.maximum(a + 4, 8.0) if framework == "hf" else 4.0) * V) / t
    mlp = BS * ((3 if arch.gated_ffn else 2) * a * F) / t  # up/gate gradients and their product; plain: two
    # the score gradient and its input: fp32 where the softmax is upcast (RMSNorm families), else a bytes each
    score = 8.0 if arch.norm == "rms" else 2.0 * np.maximum(a, 2.0)
    eager = score * B * (A / t) * S * S if attention == "eager" else 0.0
    workspace = mlp if np.ndim(eager) == 0 and eager == 0 else np.maximum(mlp, eager)  # mlp ≥ 0
    from aicalc.core.activations import SELECTIVE_OP, _pick, recompute_every

    # a layer rebuilt in backward: full recompute, every-N's checkpointed layers, selective-op's recomputed ops
    rebuilt = (recompute_every(recompute) > 0) | (np.asarray(recompute) == SELECTIVE_OP)
    if np.ndim(rebuilt) or rebuilt:  # (no sum to make where no layer is rebuilt)
        # the attention's backward comes after the MLP's, whose rebuilt saved tensors are freed by then
        ws = mlp if np.ndim(eager) == 0 and eager == 0 else np.maximum(mlp, eager - _mlp_saved(B, S, arch, a, t))
        workspace = _pick(rebuilt, np.asarray(layer_bytes, dtype=np.float64) + ws, workspace)
    if kv is not None:
        workspace = np.maximum(workspace, kv)
    gather = np.where(np.asarray(zero) >= 3, 4.0 * largest_layer_params, 0.0)
    return loss, workspace, gather


def _mlp_saved(B, S, arch: Arch, a, t=1):
    """What a layer's FFN saves for backward, as ``activations.hf_layer`` counts it: gated 4·a·BSF, the Python
    tanh-GELU 5·a·BSF, a plain activation 2·a·BSF (over t; F the width a token spans, ``activations.token_ffn``)."""
    from aicalc.core.activations import _PYTHON_GELU, token_ffn

    k = 4 if arch.gated_ffn else 5 if arch.activation in _PYTHON_GELU else 2
    return B * S * (k * a * token_ffn(arch)) / t


def comm_buffer_bytes(dp, tp, pp, cp=1, ep=1, per_communicator=0.0, all_to_all=0.0):
    """NCCL's buffers on one device, outside PyTorch's allocator: ``per_communicator`` for each parallel group
    of more than one rank that communicates through NCCL (data parallel over dp·cp, the gradients' all-reduce or
    FSDP/ZeRO's reduce-scatter and all-gather; tensor parallel; pipeline parallel's send/recv; context
    parallel's K/V ring), plus ``all_to_all`` with expert parallelism (its token dispatch connects every peer).
    The figures are the chip class's (presets/classes ``nccl_communicator_bytes``, ``nccl_all_to_all_bytes``:
    NCCL connects a channel's buffers per peer, NVIDIA/nccl issue #1685)."""
    import numpy as np

    dp, tp, pp, cp, ep = (np.asarray(x, dtype=np.float64) for x in (dp, tp, pp, cp, ep))
    groups = (dp * cp > 1) * 1.0 + (tp > 1) + (pp > 1) + (cp > 1)
    return groups * per_communicator + (ep > 1) * all_to_all


ADAMW_IMPLS = ("foreach", "fused", "loop")


def optimizer_step_temporaries(n_trainable, state_bytes_per_param, optimizer="adamw", impl="foreach",
                               largest_tensor=0.0):
    """Bytes the optimizer step allocates beside the states it updates (per device, before sharding).

    torch's multi-tensor Adam/AdamW (``torch/optim/adam.py``, ``_multi_tensor_adam``; the default on CUDA,
    ``foreach=None`` picks it) updates ``exp_avg`` and ``exp_avg_sq`` in place, then forms the denominator
    ``exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)`` for every parameter of a device/dtype group at once:
    one new tensor per parameter in the state dtype, alive until the parameters are updated. That is one
    state's worth, ``N·s`` with ``s`` the bytes of one state element (``state_bytes_per_param / 2``). The fused
    kernel (``fused=True``, ``torch._fused_adamw_``; apex/TransformerEngine FusedAdam in Megatron) works element
    by element and allocates nothing. The per-parameter loop (``impl="loop"``: ``foreach=False``,
    ``_single_tensor_adam``) forms ``denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`` one
    parameter at a time: two temporaries of one parameter while the division runs, ``2·s`` times the elements of
    the largest (``largest_tensor``; transformers' own ``AdamW``, HF Trainer's ``adamw_hf`` before 2023, made
    one, ``exp_avg_sq.sqrt().add_(eps)``). Measured by ``validation/record_step_peak.py`` (MemTracker): fp32
    llama2-style, 22.7 M parameters: 272.5 MB of optimizer memory during ``step()`` against 181.7 MB of states
    after it. Other optimizers: not modelled (0)."""
    if optimizer not in ("adam", "adamw") or impl == "fused":
        return 0.0 * n_trainable
    if impl == "loop":
        return 0.0 * n_trainable + largest_tensor * state_bytes_per_param
    return n_trainable * state_bytes_per_param / 2.0


def fp8_weight_cache_bytes(linear_params):
    """TransformerEngine's FP8 weight cache for FP8 GEMMs (Megatron ``--fp8-format``): every ``Linear`` keeps
    an FP8 copy of its weight and of its transpose between micro-batches (``weight_fp8`` and ``weight_t_fp8``
    in ``transformer_engine/pytorch/module/linear.py``; Hopper's FP8 GEMMs take only the TN layout, so the
    backward needs the transposed copy), 2 bytes per linear weight. The amax histories (fp32, default length
    1024, a few tensors per GEMM) are kilobytes per layer and not counted."""
    return 2.0 * linear_params


def fsdp2_expert_rows(experts, ep=1, edp=1):
    """The share of its routed experts' parameters that FSDP2's most-loaded rank holds, over ``1/edp``.

    ``fully_shard`` shards each parameter on dim 0 (``FSDPParam._init_sharded_param``: ``torch.chunk`` into
    ``edp`` pieces, every rank allocating the first, largest chunk, ``padded_sharded_param_size = chunks[0].size()``,
    ``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``). The routed experts are stacked in 3-D parameters whose
    dim 0 is the expert (transformers' ``Qwen2MoeExperts.gate_up_proj`` ``[E, 2F, H]``, torchtitan's
    ``GroupedExperts.w1``), so with ``E/ep`` experts on a rank that ``edp`` does not divide, each rank holds
    ``ceil(E/(ep·edp))`` experts' rows: its parameter shard, gradient, optimizer states and all-gather buffers are
    ``ceil(E_loc/edp)·edp/E_loc`` times the even share (Qwen1.5-MoE's 60 experts at dp 8: 8 rows, 16/15).
    Where the ranks outnumber the experts (``edp·ep > E``) torchtitan's ``apply_fsdp`` shards the experts on dim 1
    instead (``shard_placement_fn`` returning ``Shard(1)``, "to avoid padding"), which divides evenly: 1, as for
    the dense weights (H, F, V multiples of 8)."""
    import numpy as np

    e_loc = experts / np.asarray(ep, dtype=np.float64)
    edp = np.asarray(edp, dtype=np.float64)
    return np.where(edp > e_loc, 1.0, np.ceil(e_loc / edp) * edp / e_loc)


def fsdp2_buffers(root_params, layer_params, a=2.0, vocab_hidden=0.0, shard=1, tied=False, root_grads=None,
                  layer_grads=None, r=4.0, accumulating=False, offload=False, units="root", head=0.0):
    """FSDP2's own buffers on one rank (``torch.distributed.fsdp.fully_shard`` on every decoder layer and on the
    whole model, as torchtitan's ``apply_fsdp`` and torchtune's ``shard_model``; ``reshard_after_forward=True``;
    parameters unsharded in ``a`` bytes, the ``param_dtype`` of torchtitan's ``MixedPrecisionPolicy`` or the
    model's own dtype; gradients reduce-scattered in ``r`` bytes, torchtitan's fp32 ``reduce_dtype`` or the
    gradients' own dtype), per phase of the step, beside the sharded parameters, gradients and optimizer states
    (``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``, ``_fsdp_param_group.py``). ``root_grads`` and
    ``layer_grads`` are the trainable parameters among ``root_params`` and ``layer_params`` (None: all of them;
    LoRA: the adapters of a layer and none of the root's), whose gradients FSDP2 reduces: ``foreach_reduce`` runs
    over the parameters that have an unsharded gradient only.

    * loss: the root's parameters (``root_params``: embedding, output layer, final norm) are all-gathered in the
      a-byte ``param_dtype`` when the forward starts and the loss is computed inside the root's forward, so they
      are unsharded at the loss (``a·root``); one decoder layer's all-gather output stays allocated after its
      copy-out until the next all-gather is issued (``AllGatherState``, kept for the copy-out stream), ``a·layer``;
    * backward (a layer's backward): the root's parameters again, the layer's unsharded parameters and the next
      layer's, prefetched (``2·a·layer``), its unsharded a-byte gradients and their r-byte reduce-scatter input
      (``(a + r)·layer_grads``), and the output layer's unsharded gradient (``a·V·H``, ``vocab_hidden`` = V·H of
      a trainable output layer) that the root holds from the start of the backward; no record peaks here, so this
      phase is not checked;
    * gradients (the end of the backward): ``foreach_reduce`` of the root's own gradients, its a-byte unsharded
      gradients and their r-byte reduce-scatter input (``(a + r)·root_grads``); the reduce-scatter output, ``r``
      bytes over ``shard``, becomes the root's sharded gradients (a view of it, counted with the sharded
      gradients) when they are None, after ``unsharded_grads.clear()``, so it is not counted here; under gradient
      accumulation (``accumulating``: a later micro-batch, the sharded gradients kept from the one before) the
      output is added into them (``sharded_param.grad._local_tensor += new_sharded_grad``) and lives beside them,
      ``r·root_grads/shard`` more. With tied embeddings (``tied``) the moment before is larger: autograd sums the
      tied weight's two gradients (the output layer's and the embedding's, and their sum: ``3·a·root_grads``)
      while the root's parameters are unsharded (``a·root``) and the first layer's reduce-scatter input is still
      held (``ReduceScatterState``, ``r·layer``): both tied bf16-mixed records (Llama-3.2-1B and Qwen3-1.7B
      shapes, where ``(a + r)`` happens to be ``3a``) and the pure-bf16 one (``r = a``). Before the root, the
      first layer's backward (the last a layer runs): the root and that layer unsharded, the all-gather output
      kept beside it, its gradients and their reduce-scatter input, the output layer's gradient, and every other
      layer's shard made (its own and the root's not yet: ``r·layer/shard`` and ``r·root/shard`` less), which
      sets the peak of a pure-bf16 untied model with little to save (Llama-3.1-8B, batch 1 × 512). A moment later the
      root's reduce-scatter output is allocated (``reduce_scatter_comm.allocate`` in ``foreach_reduce``, ``r``
      bytes over ``shard``) beside its input while the untied output layer's unsharded gradient (``a·V·H``) is
      still held, the rest freed: ``r·root_grads·(1 + 1/shard) + a·V·H``, above the first moment where ``shard``
      is 2 (Llama-3.1-8B at dp 2: 7,354.7 MB against 6,304.1 MB, traced with and without CPU offload; its
      no-offload record peaks in the optimizer step);
    * ``offload`` (``CPUOffloadPolicy``, the sharded gradients on the host): the reduce-scatter output is copied
      to the host, so none of it is counted among the device's gradients and nothing is taken off for it
      (step_peak_fsdp_offload.json: the root's moment is ``(a + r)·root_grads`` at dp 4 and 8, exact).

    ``units`` other than "root" (untied models): the input embedding and the output layer (``head`` parameters
    each, V·H over TP) are FSDP units of their own, the root keeping the final norm only. "split" is torchtune's
    ``custom_sharded_layers: ['tok_embeddings', 'output']`` (each resharded after use), "torchtitan" its
    ``apply_fsdp`` (the embedding resharded after its forward, ``[norm, output]`` one unit that is not):
    (:func:`fsdp2_units_buffers`).

    Returns (loss, backward, gradients): the bytes each phase holds besides the sharded states and gradients.
    Checked with ``validation/record_step_peak.py`` (``FSDPMemTracker`` on a fake process group,
    step_peak_fsdp.json): full training, LoRA and gradient accumulation; the loss phase sets the peak of most
    records, the gradients phase that of the batch 1 × 512 full-recompute ones."""
    import numpy as np

    root, layer = root_params, layer_params
    root_g = root if root_grads is None else root_grads
    layer_g = layer if layer_grads is None else layer_grads
    if units != "root":
        return fsdp2_units_buffers(root - 2 * head, head, layer, a, shard, np.asarray(root_g) > 0, layer_g, r,
                                   accumulating, offload)
    loss = a * (root + layer)
    backward = a * root + 2 * a * layer + (a + r) * layer_g + a * vocab_hidden
    # the reduce-scatter output that becomes the sharded gradients (counted with them) where they are on the device
    out = 0.0 if accumulating or offload else r * root_g / shard
    gradients = (a + r) * root_g - out
    if tied:  # the tied weight's gradients summed (none where the root has nothing to train)
        gradients = np.maximum(gradients, np.where(np.asarray(root_g) > 0, a * root + 3 * a * root_g + r * layer_g
                                                   - out, 0.0))
    else:  # the output allocated, the untied output layer's unsharded gradient still held
        gradients = np.maximum(gradients, r * root_g * (1 + 1 / shard) - out
                               + np.where(np.asarray(root_g) > 0, a * vocab_hidden, 0.0))
    # the first layer's backward, the last a layer runs: every other layer's shard made, its own and the root's not yet
    own_layer = 0.0 if accumulating or offload else r * layer_g / shard
    first = a * root + 2 * a * layer + (a + r) * layer_g + a * vocab_hidden - out - own_layer
    return loss, backward, np.maximum(gradients, first)


def fsdp2_units_buffers(norm, head, layer, a, shard, head_trains, layer_g, r, accumulating, offload):
    """FSDP2's own buffers per phase when the input embedding and the output layer (``head`` parameters each) are
    units of their own and the root holds the final norm (``norm``), as :func:`fsdp2_buffers` for the root layout
    (traced: step_peak_fsdp.json and step_peak_fsdp_offload.json, the ``+units-`` records):

    * loss: the output layer's parameters all-gathered for its backward, ``a·head`` ("split": resharded after its
      forward and gathered again; "torchtitan": kept unsharded from the forward). The last layer's all-gather
      output is freed once the output layer's all-gather is issued. Under "torchtitan" the end of the forward holds
      ``a·head`` more, the all-gather output beside the unsharded ``[norm, output]`` (kept for the copy-out until
      the next all-gather, the backward's first), where the loss's buffers are the forward's (its phase in
      :mod:`aicalc.core.train_peak`);
    * backward: a layer's backward as in the root layout (``2·a·layer + (a + r)·layer_g``) with nothing of the
      embedding or the output layer held (the output unit is resharded after its own backward, whatever
      ``reshard_after_forward`` says); or, if larger, the output layer's backward, its parameters unsharded, the
      last layer's prefetched and its a-byte unsharded gradient made (``head_trains``, full training);
    * gradients: the embedding's backward, the last a model runs (full training only: a frozen embedding has no
      backward): its parameters unsharded beside their all-gather output (``2·a·head``), the first layer's
      reduce-scatter input still held (``r·layer_g``), every shard made but the embedding's own (``r·head/shard``
      less); or the first layer's backward as in the root layout, without the root's parameters."""
    import numpy as np

    out_head = 0.0 if accumulating or offload else r * head / shard
    own_layer = 0.0 if accumulating or offload else r * layer_g / shard
    head_g = np.where(head_trains, head, 0.0)
    loss = a * norm + a * head
    layer_back = 2 * a * layer + (a + r) * layer_g
    backward = a * norm + np.maximum(layer_back, a * head + a * layer + a * head_g)
    embedding = np.where(head_trains, 2 * a * head + r * layer_g - out_head, 0.0)
    first = layer_back - own_layer - np.where(head_trains, out_head, 0.0)
    return loss, backward, a * norm + np.maximum(embedding, first)


def fsdp1_gradients(root_params, root_grads, a=2.0, r=4.0, shard=1, tied=False, accumulating=False):
    """The end of the backward under FSDP1 (``FullyShardedDataParallel``, ``FULL_SHARD``, ``use_orig_params=False``,
    a wrap policy of the decoder layer class, so the root is the embedding, final norm and output layer in one
    ``FlatParameter``), in place of :func:`fsdp2_buffers`' gradients phase; its loss and backward phases are
    FSDP2's (the traces agree to the byte there, step_peak_fsdp1.json). Bytes held besides the sharded states and
    every sharded gradient (the root's counted with them, though it is made last), the largest of three moments:

    * the root's gradient assembled: its modules' weights are views of the flat parameter, and autograd runs the
      views' backward (``split``) once every view's gradient is in its input buffer, writing one flat a-byte
      gradient; the root's parameters are still unsharded (the root is not resharded after the forward,
      ``a·root_params``), its views' gradients and the flat one held at once: ``a·root_params + 2·a·root_grads``;
    * with tied embeddings (``tied``), the moment before: the tied weight's two gradients (the output layer's and
      the embedding's) and their sum in that input buffer, ``a·root_params + 3·a·root_grads``; in both the root's
      shard is not made yet (``r·root_grads/shard`` less, unless accumulating, where the kept shard is there);
    * the root's reduce-scatter (``_post_backward_hook`` → ``_reduce_grad``, ``torch/distributed/fsdp/
      _runtime_utils.py``), its unsharded parameters freed: the a-byte gradient autograd made
      (``autograd_computed_grad``, a local that lives through the call), its cast to the ``reduce_dtype`` where
      that differs (``flat_param.grad.to(handle._reduce_dtype)``, ``r`` bytes) and the new sharded gradient
      (``torch.empty_like(chunks[0])`` in ``_get_reduce_scatter_tensors``: one of the counted shards, or, under
      gradient accumulation, added into the ``_saved_grad_shard`` kept from the micro-batch before and held beside
      it, ``r·root_grads/shard`` more): ``(a + r)·root_grads``, ``a·root_grads`` where ``r == a``.

    A flat parameter whose size ``shard`` does not divide is padded for the reduce-scatter (an ``r``-byte copy),
    which the decoder shapes do not need. Checked with ``validation/record_step_peak.py`` (``measure_fsdp1``):
    exact on the records whose peak is here (batch 1 × 512 with full recompute: tied and untied, fp32 and bf16
    reduce-scatters, with accumulation). The trace counts a freed unsharded gradient as freed when the
    reduce-scatter is issued (``record_stream`` is a no-op on the fake device); on a GPU the caching allocator
    keeps its block until the collective ends, which can hold a layer's reduce-scatter input a little longer."""
    import numpy as np

    r_cast = np.where(np.asarray(r) == np.asarray(a), 0.0, r)
    own = r * root_grads / shard
    reduce = (a + r_cast) * root_grads + (own if accumulating else 0.0)
    made = 0.0 if accumulating else own
    grads = 3 * a * root_grads if tied else 2 * a * root_grads
    assembled = np.where(np.asarray(root_grads) > 0, a * root_params + grads - made, 0.0)
    return np.maximum(reduce, assembled)
