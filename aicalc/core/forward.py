"""The operations of one decoder forward pass, per device: FLOPs, bytes moved, weight bytes, kernels and
collective payload of each, as one readable numpy formula per term. Inference (prefill, decode) and the
training step (:mod:`aicalc.core.train_time`) price this same list through :mod:`aicalc.core.pricing`.

Notation: B sequences, T new tokens per sequence in this pass (the prompt in prefill, 1 in decode), P tokens
already cached per sequence, M = B·T tokens, L layers, H hidden, A heads, K kv heads, d head_dim, F ffn size,
V vocab, E experts, k experts per token, tp the tensor-parallel degree. B, T, P and tp may be numpy arrays of
one broadcastable shape; every returned quantity has that shape.

Sources of the terms:

- GEMM FLOPs ``2·M·N·K`` and the ``2·N`` FLOPs per token of a forward pass (Kaplan et al. 2020, Table 1);
  weights are read once per pass, so decode at batch 1 reads every weight for every token (seed article 004;
  validation-cases DE rows). The embedding is a gather of one row per token, not a read of the table.
- Attention score and value products ``2·B·A·d·Σkeys`` each (Korthikanti et al. 2022, the ``s/(6h)`` term
  of TT-01); causal prefill sums ``P·T + T(T+1)/2`` keys; sliding-window layers cap the keys at the window
  (:func:`aicalc.core.geometry.causal_keys`). Materialized attention computes, writes and reads the whole
  B·A·T·(P + T) score matrix, masked afterwards (Korthikanti Table 2, the 5·a·s² term; Megatron's and
  transformers' eager ``baddbmm``); flash attention keeps it on chip and skips masked blocks (Dao et al. 2022)
  and reads each cached K/V once.
- KV reads and writes: :func:`aicalc.core.geometry.kv_bytes_per_token_layer` bytes per token and layer
  (IM-01, IM-06 for MLA).
- MoE layers: :mod:`aicalc.core.moe` (experts reached, grouped GEMMs by tokens per expert, routing, permutation,
  load imbalance, dispatch and combine under expert and attention-data parallelism).
- TP all-reduce: two per layer (Megatron-LM, Shoeybi et al. 2019 §3) of the ``B·T·H`` activation.
- DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): :mod:`aicalc.core.indexer` (the lightning indexer's
  projections and fp8 scoring over all P + T keys; MLA in its MQA mode over each query's min(P + i + 1, topk) keys).
- DeepSeek-V4 (:mod:`aicalc.core.compressed_attention`): each query over its window plus min(x/4, topk) CSA or
  x/128 HCA compressed entries, the compressors' and indexers' projections and pooling, the CSA indexers' fp8
  scoring over the compressed keys, the mHC's projections and its n-stream residual traffic.
- Hybrid one-mixer blocks (Nemotron-H, :class:`aicalc.catalog.arch.Arch`): attention ops run on the layers that
  have attention, FFN ops on those with an FFN, Mamba-2 mixers (:func:`aicalc.core.mamba.mamba_ops`) on the
  Mamba layers; norms, residual adds and TP all-reduces once per sub-block (a plain layer has two: attention
  and FFN).
- Linear-attention (Gated DeltaNet) layers of a hybrid (Qwen3-Next, Qwen3.5): the attention projections, core
  and KV traffic above run on the softmax-attention layers only; each linear layer runs its input and output
  projections (GEMMs), the depthwise conv, and the delta rule, whose FLOPs per token and state traffic per
  sequence are :mod:`aicalc.core.linear_attention`'s (recurrent form for one new token, chunked otherwise).
"""

from aicalc.catalog.arch import Arch
from aicalc.tuples import Named

ACT_BYTES = 2.0  # activations in 16-bit


class Shape(Named):
    """What the cost model needs of an architecture, as plain numbers (derived once from an Arch). Named tuples
    and a plain class here: a dataclass compiles its generated methods at import, ~20 M instructions of a one-off
    query for this module's three (docs/robustness.md)."""

    arch: Arch
    H: int
    L: int
    A: int
    V: int
    qk_dim: int  # per-head width of q·k products (d, or MLA nope+rope)
    v_dim: int  # per-head width of the value product
    attn_in_params: int  # per layer: q, k, v projections (+ biases, MLA down/up projections)
    attn_out_params: int  # per layer: o projection
    ffn_in: int  # dense FFN: columns of the up (+gate) projection
    ffn: int  # F
    dense_layers: int
    moe_layers: int
    experts: int
    experts_per_token: int
    expert_in: int  # columns of one expert's up (+gate) projection
    expert_ffn: int
    shared_in: int
    shared_ffn: int
    full_layers: int
    sliding_layers: int
    window: int
    embedding_params: int  # token (+ position) table
    norm_params: int
    total_params: int
    active_params: int
    attn_layers: int = 0  # layers with softmax attention (a plain model: L)
    mamba_layers: int = 0  # layers whose mixer is a Mamba-2 block
    linear_layers: int = 0  # Gated DeltaNet layers (their token mixer replaces attention)
    linear_in: int = 0  # per linear layer: columns of the input projections (q, k, v, z, β, α)
    linear_out: int = 0  # per linear layer: rows of out_proj, V_w
    linear_conv: int = 0  # per linear layer: conv channels C_w
    linear_state: int = 0  # per linear layer and sequence: recurrent state elements h_v·d_k·d_v
    linear_conv_state: int = 0  # per linear layer and sequence: conv state elements (w − 1)·C_w (vLLM)
    linear_step_flop: float = 0.0  # per linear layer and token: the delta rule, recurrent form
    linear_chunk_flop: float = 0.0  # per linear layer and token: the delta rule, chunked form
    linear_conv_flop: float = 0.0  # per linear layer and token: the depthwise conv

    @property
    def pairs(self) -> float:
        """Sub-blocks (attention or linear attention, FFN, Mamba mixer) counted in pairs: a plain layer is one pair
        (L for a plain model or a Gated DeltaNet hybrid), a one-mixer hybrid block half of one. Norms, residual adds
        and TP all-reduces scale with it."""
        return (self.attn_layers + self.linear_layers + self.dense_layers + self.moe_layers + self.mamba_layers) / 2.0


def shape_of(arch: Arch) -> Shape:
    from aicalc.core.params import attention_params, count_params

    H = arch.hidden
    attn = attention_params(arch)
    if arch.mla is not None:
        m = arch.mla
        out = arch.heads * m.v_head_dim * H + (H if arch.o_bias else 0)
        qk, vd = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
        if arch.indexer is not None:  # DSA runs MLA in its MQA mode: every head scores the 576-wide latent + RoPE
            #                           key and reads the 512-wide latent as value (DeepSeek-V3.2 report §2.1)
            qk, vd = m.kv_lora_rank + m.qk_rope_head_dim, m.kv_lora_rank
    elif arch.compressed is not None:  # DeepSeek-V4's grouped output projection: o_a A·d·r, then o_b g·r·H
        c = arch.compressed
        out = arch.heads * arch.head_dim * c.o_rank + c.o_groups * c.o_rank * H
        qk, vd = arch.head_dim, arch.head_dim
    else:
        out = arch.q_dim * H + (H if arch.o_bias else 0)
        qk, vd = arch.head_dim, arch.head_dim
    g = 2 if arch.gated_ffn else 1
    n_moe = arch.n_moe_layers if arch.moe is not None else 0
    e = arch.moe
    pc = count_params(arch)
    return Shape(
        arch=arch, H=H, L=arch.layers, A=arch.heads, V=arch.output_vocab, qk_dim=qk, v_dim=vd,
        attn_in_params=attn - out, attn_out_params=out,
        ffn_in=g * arch.ffn, ffn=arch.ffn, dense_layers=arch.dense_ffn_layers if arch.hybrid else arch.layers - n_moe,
        moe_layers=n_moe,
        experts=e.experts if e else 0, experts_per_token=e.experts_per_token if e else 0,
        expert_in=g * e.expert_ffn if e else 0, expert_ffn=e.expert_ffn if e else 0,
        shared_in=g * e.shared_ffn if e else 0, shared_ffn=e.shared_ffn if e else 0,
        full_layers=arch.attention_layers - arch.sliding_layers, sliding_layers=arch.sliding_layers,
        window=(arch.sliding_window or 0) if arch.sliding_layers else 0,
        embedding_params=pc.embedding, norm_params=pc.norms, total_params=pc.total, active_params=pc.active,
        attn_layers=arch.attention_layers, mamba_layers=arch.mamba_layers,
        **_linear_fields(arch),
    )


def _linear_fields(arch: Arch) -> dict:
    """The :class:`Shape` fields of a model's linear-attention layers (none: the defaults)."""
    if not arch.linear_layers:
        return {}
    from aicalc.core import linear_attention as la

    a = arch.linear_attention
    return dict(linear_layers=arch.linear_layers, linear_in=la.in_proj_width(arch), linear_out=a.value_dim,
                linear_conv=a.conv_dim, linear_state=a.value_heads * a.key_head_dim * a.value_head_dim,
                linear_conv_state=(a.conv_kernel - 1) * a.conv_dim, linear_step_flop=la.recurrent_flop_per_token(arch),
                linear_chunk_flop=la.chunk_flop_per_token(arch), linear_conv_flop=la.conv_flop_per_token(arch))


class Formats(Named):
    """Storage formats of one evaluation (built by :func:`formats`, which fills ``expert_quantized``)."""

    weight_bytes: float  # bytes per block-linear parameter (scales included)
    edge_bytes: float  # bytes per embedding / LM-head parameter (the format's coverage rule)
    norm_bytes: float
    kv_dtype: str
    quantized: bool  # weight-only quantized (dequantized inside the kernel)
    flash: bool = True
    kv_shared: bool = True  # a GQA/MQA kernel reads each kv head once for its whole query group; False: once
    #                         per query head (TensorRT-LLM ≤ v0.6 masked MHA, gpt-fast's repeat_interleave)
    expert_bytes: float | None = None  # bytes per routed-expert weight where the experts have their own format
    expert_quantized: bool | None = None  # the experts' weights are weight-only quantized (None: as ``quantized``)
    expert_compute: str | None = None  # the experts' math where it differs from the rest ("fp8": MXFP4 x MXFP8 on Blackwell)
    attention_compute: str | None = None  # the attention kernels' math where it differs from the linears' (below)


def formats(dtype: str = "bf16", kv_dtype: str = "bf16", *, group_size: int | None = None, quantized=None,
            flash: bool = True, kv_shared: bool = True, weight_bytes: float | None = None,
            edge_bytes: float | None = None, expert_bytes: float | None = None, expert_quantized=None,
            expert_compute: str | None = None, attention_compute: str | None = None) -> Formats:
    """Formats of a weight dtype (``group_size`` for int4) and a KV dtype; ``weight_bytes`` / ``edge_bytes``
    override the bytes per parameter (a checkpoint's measured bytes); ``expert_*`` the routed experts' own format."""
    from aicalc.core.dtypes import (
        edge_bytes_per_param,
        is_weight_only,
        kv_bytes_per_element,
        norm_bytes_per_param,
        weight_bytes_per_param,
    )

    kv_bytes_per_element(kv_dtype, 1)  # validates the name
    wb = weight_bytes if weight_bytes is not None else weight_bytes_per_param(dtype, group_size)
    edge = edge_bytes if edge_bytes is not None else edge_bytes_per_param(dtype, wb)
    quantized = is_weight_only(dtype) if quantized is None else quantized
    return Formats(weight_bytes=wb, edge_bytes=edge, norm_bytes=norm_bytes_per_param(dtype), kv_dtype=kv_dtype,
                   quantized=quantized, flash=flash, kv_shared=kv_shared, expert_bytes=expert_bytes,
                   expert_quantized=quantized if expert_quantized is None else expert_quantized,
                   expert_compute=expert_compute, attention_compute=attention_compute)


class Op:
    """One operation summed over the layers it occurs in; every field an array (per device).

    ``kind``: ``gemm`` (priced at the GEMM efficiency of ``dims`` = (m, n, k); ``grouped``: a grouped GEMM whose
    m is the rows per expert), ``attention`` (the attention core), ``stream`` (elementwise and memory-bound
    kernels), ``collective`` (a ring all-reduce of ``comm_bytes``) or ``alltoall`` (``comm_bytes`` sent per
    device). ``compute``: the op's math where it differs from the pass's (the chip's peak in that format).
    ``per``: what its cost scales with (:func:`forward_ops`): ``token`` (the pass's B·T tokens), ``logit`` (the
    tokens that reach the LM head) or ``sequence`` (the attention core: B times a cost per sequence)."""

    def __init__(self, name: str, kind: str, flop, bytes, weight_bytes, kernels, comm_bytes=0.0,
                 collectives=0.0, dims: tuple | None = None, layers: float = 0.0, quantized: bool = False,
                 bytes_per_weight: float = 2.0, grouped: bool = False, compute: str | None = None,
                 expert_width: float = 0.0, affine: tuple | None = None, per: str = "token",
                 flop_per_exp: float = 0.0, width: float = 0.0):
        self.name, self.kind, self.flop, self.per = name, kind, flop, per
        self.width = width  # fused attention products: the per-head width of the product (q·k's d_qk, the value's d_v)
        self.bytes = bytes  # all bytes moved to or from memory, weights included
        self.weight_bytes = weight_bytes
        self.kernels = kernels  # kernel launches
        self.comm_bytes = comm_bytes  # collective payload (before the ring factor), not memory traffic
        self.collectives = collectives
        self.dims = dims
        self.layers = layers  # transformer layers the op is summed over (0: outside the layers)
        self.quantized = quantized  # its weights are in the (weight-only) quantized format
        self.bytes_per_weight = bytes_per_weight
        self.grouped = grouped
        self.compute = compute
        self.expert_width = expert_width  # grouped GEMMs: one expert's FFN width F_e (the model's expert granularity)
        # (x, flop, bytes, comm_bytes) per x: an op of a lean forward_ops whose flop, bytes (beyond its
        # weight_bytes) and comm_bytes are those numbers times one array x of tokens, every other field one number
        # (flop, bytes and comm_bytes are then None: :func:`aicalc.core.pricing.materialize` forms them where they
        # are needed)
        self.affine = affine
        # a fused attention op: its FLOPs per softmax exponential (aicalc.core.exponentials.flop_per_exp; 0: none),
        # the exponentials it computes on the special-function units beside its matmuls
        self.flop_per_exp = flop_per_exp

    def __repr__(self) -> str:
        return f"Op({self.name!r}, {self.kind!r})"


def _inplace(ufunc, a, b):
    """``ufunc(a, b)``, written into ``a`` where ``a`` is an array of the result's shape (a temporary the caller
    made and no longer needs)."""
    import numpy as np

    # (a Python number's shape is (); np.shape finds it only after an AttributeError)
    if isinstance(a, np.ndarray) and a.ndim and a.shape == np.broadcast_shapes(
            a.shape, () if isinstance(b, (int, float)) else np.shape(b)):
        return ufunc(a, b, out=a)
    return ufunc(a, b)


def experts_touched(s: Shape, tokens, ep=1.0):
    """Experts of one MoE layer a device reads in a pass of ``tokens`` tokens per EP rank
    (:func:`aicalc.core.moe.experts_touched` over the ep·tokens of its EP group)."""
    import numpy as np

    from aicalc.core.moe import experts_touched as touched

    return touched(float(s.experts), float(s.experts_per_token), np.asarray(tokens, dtype=np.float64) * ep, ep)


def forward_ops(s: Shape, fm: Formats, batch, new_tokens, past, tp, logits_tokens=None, ep=1.0, *, etp=None,
                moe_sources=None, redundant=0.0, lean: bool = False, attention_core: bool = True) -> list[Op]:
    """Operations of one forward pass over B sequences × T new tokens with P cached tokens, per device of a
    group of ``tp`` tensor-parallel ranks; ``logits_tokens`` per sequence reach the LM head (default all T; 1 in
    a prefill that samples one token). MoE layers (:func:`aicalc.core.moe.moe_ops`): ``ep`` ranks share the
    experts, each split over ``etp`` ranks (default tp), serving the tokens of ``moe_sources`` such groups
    (default ep: training's EP over data-parallel ranks, whose all-to-all the caller prices; serving passes its
    attention-DP degree). ``lean``: a quantity that does not depend on an array argument stays one number
    instead of being broadcast to the common shape (the same values, for the totals of a sweep).

    Each op says what its cost scales with (``Op.per``): the attention core (``sequence``) is B times a cost that
    depends on T and P alone (keys, KV reads and q/o traffic per sequence; a materialized score matrix per
    sequence); the final norm and LM head (``logit``) follow the tokens that reach the head; every other op
    (``token``) the pass's M = B·T tokens. ``attention_core`` False leaves the attention core out (a sweep that
    prices it per sequence, :mod:`aicalc.core.grid`)."""
    import numpy as np

    from aicalc.core import geometry as geo
    from aicalc.core.exponentials import flop_per_exp

    f64 = np.float64
    B, T, P, tp = (np.asarray(x, dtype=f64) for x in (batch, new_tokens, past, tp))
    arch, wb, ab = s.arch, fm.weight_bytes, ACT_BYTES
    H, A = float(s.H), float(s.A)
    # softmax-attention layers, and sub-blocks in pairs (norms, residuals, TP all-reduces): both L for a plain model
    La, Lp = float(s.attn_layers), s.pairs
    zero = 0.0 if lean else 0.0 * (B + T + P + tp)  # the common shape
    if lean:  # the same numbers (x·1 and x + 0 are x), without the copies
        M = B if T.ndim == 0 and T == 1.0 else B * T
        Mlog = M if logits_tokens is None else B if np.ndim(logits_tokens) == 0 and logits_tokens == 1.0 else \
            B * np.asarray(logits_tokens, dtype=f64)
    else:
        M = B * T + zero  # tokens in this pass
        Mlog = M if logits_tokens is None else B * np.asarray(logits_tokens, dtype=f64) + zero
    ops: list[Op] = []

    def affine(m, *numbers):
        """Whether an op over ``m`` tokens can be kept as numbers per token (a lean sweep, every other term one
        number)."""
        return lean and isinstance(m, np.ndarray) and m.ndim > 0 and all(
            isinstance(x, (int, float)) or np.ndim(x) == 0 for x in numbers)  # a number: np.ndim would raise inside

    def gemm(name, m, n, k, layers, weights, bpw=wb, per="token"):
        """y[m×n] = x[m×k]·W[k×n] on this device: 2mnk FLOPs; reads W (``weights`` bytes at ``bpw`` per weight)
        and x, writes y."""
        q = fm.quantized and bpw == wb
        if affine(m, n, k, weights):
            n, k = float(n), float(k)
            ops.append(Op(name, "gemm", flop=None, bytes=None, weight_bytes=float(weights), kernels=layers,
                          dims=(m, n, k), layers=layers, quantized=q, bytes_per_weight=bpw,
                          affine=(m, 2.0 * n * k * layers, (n + k) * ab * layers, 0.0), per=per))
            return
        ops.append(Op(name, "gemm", flop=2.0 * m * n * k * layers, bytes=m * (n + k) * ab * layers + weights,
                      weight_bytes=weights + zero, kernels=layers + zero, dims=(m, n + zero, k + zero), layers=layers,
                      quantized=q, bytes_per_weight=bpw, per=per))

    def stream(name, m, nbytes, kernels, flop=None, weights=0.0, layers=0.0, per="token"):
        """An elementwise or memory-bound kernel over ``m`` tokens: ``nbytes(m)`` bytes (beyond ``weights``) and
        ``flop(m)`` FLOPs, each linear in m."""
        if affine(m, weights, nbytes(1.0), flop(1.0) if flop else 0.0):
            ops.append(Op(name, "stream", flop=None, bytes=None, weight_bytes=float(weights), kernels=kernels,
                          layers=layers, affine=(m, float(flop(1.0)) if flop else 0.0, float(nbytes(1.0)), 0.0),
                          per=per))
            return
        ops.append(Op(name, "stream", flop=(flop(m) if flop else 0.0) + zero, bytes=nbytes(m) + weights + zero,
                      weight_bytes=weights + zero, kernels=kernels + zero, layers=layers, per=per))

    def attention():
        """The attention core: score and value products (a materialized softmax between them), each B times a
        cost per sequence."""
        seq = "sequence"
        # attention: keys summed over the new queries (window-capped on sliding layers), cached tokens read
        if arch.encoder:  # bidirectional: every query attends to every key, flash or not
            keys = T * geo.tokens_held(s.full_layers, s.sliding_layers, s.window, P + T)
        elif fm.flash:  # a fused kernel skips the masked blocks: the causal sum (window-capped on sliding layers)
            keys = s.full_layers * geo.causal_keys(P, T)
            if s.sliding_layers or not lean:  # (lean: no zero term for a model without sliding layers)
                keys = keys + s.sliding_layers * geo.causal_keys(P, T, s.window)
        else:  # a materialized score matrix is the full T × keys rectangle over the cache, masked afterwards
            keys = T * geo.tokens_held(s.full_layers, s.sliding_layers, s.window, P + T)
        cached = geo.tokens_held(s.full_layers, s.sliding_layers, s.window, P + T)
        if arch.indexer is not None and fm.flash:  # DSA: each query attends to its top-k only (aicalc.core.indexer)
            from aicalc.core.indexer import sparse_keys

            keys = s.full_layers * sparse_keys(arch, P, T)
            # the selected latents: read once per pass, at most all P + T of them, at most top-k per query
            cached = s.full_layers * np.minimum(P + T, T * float(arch.indexer.topk))
        if arch.compressed is not None and fm.flash:  # DeepSeek-V4: window + selected / all compressed entries
            from aicalc.core.compressed_attention import attended_keys, read_entries

            keys, cached = attended_keys(arch, P, T), read_entries(arch, P, T)
        heads = geo.kv_heads_per_device(arch, tp)
        if not fm.kv_shared and arch.mla is None:  # K/V read once per query head instead of once per kv head
            cached = cached * (A / tp) / heads
        kvb = geo.kv_bytes_per_token_layer(arch, fm.kv_dtype, tp)
        if lean and fm.flash:  # the same products in the same order, into the temporaries (fewer fresh pages)
            kv_io = _inplace(np.multiply, _inplace(np.multiply, cached + T * La, B), kvb)
            Bk = _inplace(np.divide, _inplace(np.multiply, keys, B), tp)  # keys: a temporary here
            q_io = M / tp
            for c in (A, s.qk_dim + s.v_dim, ab, La):
                q_io = _inplace(np.multiply, q_io, c)
            per_product = _inplace(np.divide, _inplace(np.add, kv_io, q_io), 2.0)
        else:
            kv_io = B * (cached + T * La) * kvb
            Bk = B * keys / tp  # sequences × heads on this device × keys, per head
            q_io = M / tp * A * (s.qk_dim + s.v_dim) * ab * La  # read q, write the attention output
            per_product = (kv_io + q_io) / 2.0  # each of the two products carries half the traffic
        score_flop, value_flop = Bk * 2.0 * A * s.qk_dim, Bk * 2.0 * A * s.v_dim
        if fm.flash:  # one softmax exponential per score element, on the special-function units beside the
            #           products (aicalc.core.exponentials), carried by the two ops in proportion to their FLOPs
            fpe = flop_per_exp(s.qk_dim, s.v_dim)
            ops.append(Op("attn_score", "attention", score_flop, per_product, zero, La + zero, layers=La, per=seq,
                          compute=fm.attention_compute, flop_per_exp=fpe, width=s.qk_dim))
            ops.append(Op("attn_value", "attention", value_flop, per_product, zero, zero, layers=La, per=seq,
                          compute=fm.attention_compute, flop_per_exp=fpe, width=s.v_dim))
        else:
            # batched GEMMs per sequence and head: scores Q[T×d]·Kᵀ[d×keys], values P[T×keys]·V[keys×d]; the
            # score / probability matrix (all layers) is written and read back
            smat = Bk * A * ab
            kq = keys / (La * np.maximum(T, 1.0))  # keys per query, averaged over layers
            ops.append(Op("attn_score", "gemm", score_flop, per_product + smat, zero, La + zero,
                          dims=(T + zero, kq, s.qk_dim + zero), layers=La, per=seq, compute=fm.attention_compute))
            ops.append(Op("attn_softmax", "attention", Bk * 5.0 * A, 2.0 * smat, zero, La + zero, layers=La,
                          per=seq))
            ops.append(Op("attn_value", "gemm", value_flop, per_product + smat, zero, La + zero,
                          dims=(T + zero, s.v_dim + zero, kq), layers=La, per=seq, compute=fm.attention_compute))

    def delta_rule():
        """The linear layers' delta rule, B times a cost per sequence: per token the recurrent form (one new token)
        or the chunked one (a prompt), on the heads of this device; per sequence its state read and written once
        (conv and recurrent, 16-bit as vLLM keeps them), and in the chunked kernel every chunk's state written and
        read back (flash-linear-attention ``chunk_gated_delta_rule_fwd_h`` stores h per chunk for the output
        kernel); the q, k, v, z inputs read and the output written."""
        from aicalc.core.linear_attention import CHUNK

        Ll = float(s.linear_layers)
        per_token = np.where(T > 1.0, s.linear_chunk_flop, s.linear_step_flop)
        state = (s.linear_state + s.linear_conv_state) / tp * ab
        chunks = np.where(T > 1.0, np.ceil(T / CHUNK), 0.0) * 2.0 * s.linear_state / tp * ab
        io = (s.linear_in + s.linear_out) / tp * ab  # q, k, v, z (β, α too) read, the output (V_w) written
        ops.append(Op("linear_core", "stream", B * T * per_token / tp * Ll + zero,
                      B * Ll * (2.0 * state + chunks) + M * io * Ll + zero, zero, Ll + zero, layers=Ll,
                      per="sequence"))

    o_params = s.attn_out_params / tp
    attn_weights = (La * geo.attention_params_per_device(arch, tp) - La * o_params) * wb

    stream("embedding", M, lambda m: m * H * (fm.edge_bytes + ab), 1.0)  # gather one row per token, write it
    stream("norms", M, lambda m: m * 4.0 * H * ab * Lp, 2.0 * Lp, flop=lambda m: m * 8.0 * H * Lp,
           weights=s.norm_params * fm.norm_bytes, layers=Lp)  # the norm weights: once per pass, on every device
    if La:
        gemm("qkv_proj", M, s.attn_in_params / H / tp, H, La, attn_weights)
    # rope on q/k (attention layers) and the two residual adds (a one-mixer hybrid: a residual add per sub-block)
    stream("elementwise", M, lambda m: m * (2.0 * s.attn_in_params / H / tp * La + 6.0 * H * Lp) * ab, 3.0 * Lp,
           layers=Lp)
    if arch.indexer is not None:  # DSA's lightning indexer: its projections per token, its scoring per sequence
        from aicalc.core import indexer as dsa

        ix, Li = arch.indexer, float(dsa.indexer_layers(arch))
        # replicated over TP (vLLM / SGLang ReplicatedLinear): whole weights and columns on every device
        gemm("indexer_q", M, ix.heads * ix.head_dim, ix.q_rank, Li, Li * ix.q_rank * ix.heads * ix.head_dim * wb)
        gemm("indexer_k", M, ix.head_dim + ix.heads, H, Li, Li * H * (ix.head_dim + ix.heads) * wb)
        if attention_core:
            ops.append(dsa.score_op(arch, B, T, P, zero))
    if arch.compressed is not None:  # DeepSeek-V4: compressors, CSA indexers, mHC (aicalc.core.compressed_attention)
        from aicalc.core import compressed_attention as v4

        Lc = float(v4.compressed_layers(arch))
        if Lc:  # the compressors' and indexers' projections (replicated over TP), then their softmax pooling
            Wc = float(v4.all_compressor_params(arch))
            gemm("compressor_proj", M, Wc / H / Lc, H, Lc, Wc * wb)
            stream("compressor_pool", M, lambda m: m * 2.0 * v4.pool_widths(arch) * ab, 2.0 * Lc,
                   flop=lambda m: m * 4.0 * v4.pool_widths(arch), layers=Lc)
        if attention_core and arch.compressed.count("csa"):
            ops.append(v4.score_op(arch, B, T, P, zero))
        n = arch.compressed.hc_mult  # each sub-block's fn: the n·H streams → (2 + n)·n mixing weights; the fn
        gemm("hc_proj", M, (2 + n) * n, n * H, 2.0 * Lp, 0.0)  # tensors' bytes are read with the norms
        stream("hyper_connections", M, lambda m: m * v4.hc_bytes_per_token(arch), 3.0 * 2.0 * Lp,
               flop=lambda m: m * v4.hc_flop_per_token(arch), layers=2.0 * Lp)
    if attention_core and La:
        attention()
    if La:
        gemm("o_proj", M, H, o_params / H, La, La * o_params * wb)
    if s.mamba_layers:
        from aicalc.core.mamba import mamba_ops

        ops += mamba_ops(s, fm, M, B, T, P, tp, zero, gemm, stream, attention_core)
    if s.linear_layers:
        Ll = float(s.linear_layers)
        from aicalc.core.linear_attention import layer_params_per_device

        small = Ll * (layer_params_per_device(arch, tp) - (H * s.linear_in + s.linear_out * H) / tp)  # conv, A, dt, norm
        gemm("linear_in_proj", M, s.linear_in / tp, H, Ll, Ll * H * s.linear_in / tp * wb)
        stream("linear_conv", M, lambda m: m * 2.0 * s.linear_conv / tp * ab * Ll, Ll,
               flop=lambda m: m * s.linear_conv_flop / tp * Ll, weights=small * wb, layers=Ll)
        if attention_core:
            delta_rule()
        gemm("linear_out_proj", M, H, s.linear_out / tp, Ll, Ll * s.linear_out * H / tp * wb)

    if s.dense_layers:
        Ld = float(s.dense_layers)
        bias = 1.0 if arch.mlp_bias else 0.0
        gemm("mlp_up", M, s.ffn_in / tp, H, Ld, Ld * (H + bias) * s.ffn_in / tp * wb)
        stream("mlp_act", M, lambda m: m / tp * (s.ffn_in + s.ffn) * ab * Ld, Ld,
               flop=lambda m: m / tp * 4.0 * s.ffn * Ld, layers=Ld)
        gemm("mlp_down", M, H, s.ffn / tp, Ld, Ld * (s.ffn + bias) * H / tp * wb)
    if s.moe_layers:
        from aicalc.core.moe import moe_ops

        ops += moe_ops(s, fm, M, tp, ep=ep, etp=etp, sources=moe_sources, zero=zero, redundant=redundant, lean=lean)

    # TP all-reduce after attention and after the MLP: payload B·T·H activations
    on = np.where(tp > 1, 1.0, 0.0)
    if affine(M, on):
        ops.append(Op("tp_allreduce", "collective", None, None, 0.0, 0.0, comm_bytes=None,
                      collectives=float(on) * 2.0 * Lp, layers=Lp,
                      affine=(M, 0.0, 0.0, float(on) * 2.0 * Lp * H * ab)))
    else:
        ops.append(Op("tp_allreduce", "collective", zero, zero, zero, zero, comm_bytes=M * on * 2.0 * Lp * H * ab,
                      collectives=on * 2.0 * Lp + zero, layers=Lp))
    stream("final_norm", Mlog, lambda m: m * 2.0 * H * ab, 1.0, per="logit")
    gemm("lm_head", Mlog, s.V / tp, H, 1.0, s.V * H / tp * fm.edge_bytes, bpw=fm.edge_bytes, per="logit")
    return ops

