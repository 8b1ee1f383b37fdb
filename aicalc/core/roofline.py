"""Per-operation roofline of a decoder forward pass: FLOPs, bytes, intensity, bound and time.

Notation: B batch (sequences), T new tokens per sequence in this pass (the prompt in prefill, 1 in decode),
P tokens already cached per sequence, L layers, H hidden, A heads, K kv heads, d head_dim, F ffn size,
V vocab, tp tensor-parallel degree. Everything is per device and vectorised: B, T, P and tp may be numpy
arrays of one common shape (or broadcastable); every returned quantity has that shape.

Sources of the terms:

- GEMM FLOPs ``2·M·N·K`` and the ``2·N`` FLOPs per token of a forward pass (Kaplan et al. 2020, Table 1;
  the seed article 004 "approximately 2 times the number of output tokens multiplied by the number of
  parameters"); weights are read once per forward pass, so decode at batch 1 reads every weight for every
  token (seed article 004; validation-cases DE rows).
- Attention score and value products ``2·B·A·d·Σkeys`` each (Korthikanti et al. 2022, the ``s/(6h)`` term
  of TT-01); causal prefill sums ``P·T + T(T+1)/2`` keys; sliding-window layers cap the keys at the window.
  Materialized attention writes and reads the B·A·T·keys score matrix (Korthikanti Table 2, the 5·a·s² term);
  flash attention keeps it on chip (Dao et al. 2022) and reads each cached K/V once.
- KV reads/writes: ``kv_shape`` bytes per token and layer (IM-01, IM-06 for MLA).
- MoE: a batch of n tokens with top-k routing over E experts touches ``E·(1 − (1 − k/E)^n)`` experts in
  expectation (uniform routing); only those experts' weights are read.
- TP all-reduce: two per layer (Megatron-LM, Shoeybi et al. 2019 §3), ring volume ``2(tp−1)/tp`` of the
  ``B·T·H`` activation (Patarasuk & Yuan 2009) over the per-direction link bandwidth.
- Ridge point = peak FLOP/s ÷ memory bandwidth (Williams et al. 2009, "Roofline"); H100 SXM at dense
  bf16: 989.4e12 / 3.35e12 ≈ 295 FLOP/byte (specs.md §1; the seed article's 590 uses the sparse figure).
"""

from __future__ import annotations

from dataclasses import dataclass

from aicalc.catalog.arch import Arch
from aicalc.core.efficiency import Efficiency, combine, gemm_efficiency

ACT_BYTES = 2.0  # activations in 16-bit


@dataclass(frozen=True)
class Shape:
    """What the roofline needs of an architecture, as plain numbers (derived once from an Arch)."""

    H: int
    L: int
    A: int
    K: int
    d: int
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
    sliding_layers: int
    window: int
    embedding_params: int
    lm_head_params: int  # V·H even when tied (the head still reads the table)
    kv_heads_or_latent: int  # K (MHA/GQA) or 0 for MLA (one latent, replicated)
    kv_latent_elems: int  # MLA: kv_lora_rank + rope dim
    total_params: int
    active_params: int


def shape_of(arch: Arch) -> Shape:
    from aicalc.core.params import attention_params, count_params

    H = arch.hidden
    attn = attention_params(arch)
    if arch.mla is not None:
        m = arch.mla
        out = arch.heads * m.v_head_dim * H + (H if arch.o_bias else 0)
        qk, vd, latent = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank + m.qk_rope_head_dim
    else:
        out = arch.q_dim * H + (H if arch.o_bias else 0)
        qk, vd, latent = arch.head_dim, arch.head_dim, 0
    g = 2 if arch.gated_ffn else 1
    n_moe = arch.n_moe_layers if arch.moe is not None else 0
    e = arch.moe
    pc = count_params(arch)
    return Shape(
        H=H, L=arch.layers, A=arch.heads, K=arch.kv_heads, d=arch.head_dim, V=arch.vocab, qk_dim=qk, v_dim=vd,
        attn_in_params=attn - out, attn_out_params=out,
        ffn_in=g * arch.ffn, ffn=arch.ffn, dense_layers=arch.layers - n_moe, moe_layers=n_moe,
        experts=e.experts if e else 0, experts_per_token=e.experts_per_token if e else 0,
        expert_in=g * e.expert_ffn if e else 0, expert_ffn=e.expert_ffn if e else 0,
        shared_in=g * e.expert_ffn * e.shared_experts if e else 0,
        shared_ffn=e.expert_ffn * e.shared_experts if e else 0,
        sliding_layers=arch.sliding_layers, window=(arch.sliding_window or 0) if arch.sliding_layers else 0,
        embedding_params=pc.embedding, lm_head_params=arch.vocab * H,
        kv_heads_or_latent=0 if arch.mla is not None else arch.kv_heads, kv_latent_elems=latent,
        total_params=pc.total, active_params=pc.active,
    )


@dataclass(frozen=True)
class Roofs:
    """The chip as the roofline sees it (one device)."""

    peak_flop_per_s: float  # dense, in the compute dtype
    bandwidth_bytes_per_s: float
    link_bytes_per_s: float  # per direction, for TP collectives
    low_precision: bool = False  # compute in an 8-bit format (fp8/int8 tensor math)

    @property
    def ridge_point(self) -> float:
        """FLOP per byte at which compute time equals memory time (Williams et al. 2009)."""
        return self.peak_flop_per_s / self.bandwidth_bytes_per_s


@dataclass(frozen=True)
class Formats:
    weight_bytes: float  # bytes per parameter (scales included)
    kv_bytes: float  # bytes per cached K or V element (scales included)
    quantized: bool  # weight-only quantized (dequantized inside the kernel)
    flash: bool = True
    kv_shared: bool = True  # a GQA/MQA kernel reads each kv head once for its whole query group; False: once
    #                         per query head (TensorRT-LLM ≤ v0.6 masked MHA, gpt-fast's repeat_interleave)


@dataclass
class Op:
    """One operation summed over the layers it occurs in; all fields are arrays (per device)."""

    name: str
    flop: object
    bytes: object  # all bytes moved to/from memory
    weight_bytes: object
    kernels: object  # kernel launches
    comm_bytes: object = 0.0  # collective payload (TP all-reduce), not memory traffic
    collectives: object = 0.0
    gemm_eff: object = 1.0  # fraction of peak FLOP/s reachable (1 for non-GEMM ops)
    t_ideal: object = None
    t_est: object = None


def _keys_sum(P, T, window):
    """Σ over the T new queries of the keys each attends to (causal): query i sees P+i+1 keys, capped at window."""
    import numpy as np

    a, b = P + 1.0, P + T
    full = T * P + T * (T + 1.0) / 2.0
    if not window:
        return full
    W = float(window)
    part = (a + W) * (W - a + 1.0) / 2.0 + (b - W) * W
    return np.where(b <= W, full, np.where(a >= W, W * T, part))


def kv_token_layer_bytes(s: Shape, kv_bytes: float, tp):
    """Cached bytes per token and layer on one device: 2·max(1, K/tp)·d (IM-01/IM-08) or MLA's latent (IM-06)."""
    import numpy as np

    if s.kv_heads_or_latent == 0:
        return s.kv_latent_elems * kv_bytes + 0.0 * np.asarray(tp, dtype=np.float64)
    heads = np.maximum(1.0, np.floor(s.kv_heads_or_latent / np.asarray(tp, dtype=np.float64)))
    return 2.0 * heads * s.d * kv_bytes


def forward_ops(s: Shape, fm: Formats, batch, new_tokens, past, tp, logits_tokens=None) -> list[Op]:
    """Operations of one forward pass over B sequences × T new tokens with P cached tokens, per device."""
    import numpy as np

    f64 = np.float64
    B = np.asarray(batch, dtype=f64)
    T = np.asarray(new_tokens, dtype=f64)
    P = np.asarray(past, dtype=f64)
    tp = np.asarray(tp, dtype=f64)
    wb, ab = fm.weight_bytes, ACT_BYTES
    H = float(s.H)
    M = B * T  # tokens in this pass
    Mlog = B * (T if logits_tokens is None else np.asarray(logits_tokens, dtype=f64))
    ops: list[Op] = []

    def gemm(name, m, n, k, layers, params, kernels=1.0):
        """y[m×n] = x[m×k]·W[k×n]: 2mnk FLOPs; reads W and x, writes y."""
        w = params * wb * layers
        ops.append(Op(name, flop=2.0 * m * n * k * layers, bytes=w + (m * k + m * n) * ab * layers, weight_bytes=w,
                      kernels=kernels * layers + 0 * m, gemm_eff=(m, n, k)))

    def stream(name, nbytes, layers, kernels, flop=0.0):
        ops.append(Op(name, flop=flop * layers + 0 * M, bytes=nbytes * layers + 0 * M, weight_bytes=0 * M,
                      kernels=kernels * layers + 0 * M))

    L = float(s.L)
    # embedding gather: one row per token (16-bit activations written)
    stream("embedding", M * H * (wb + ab), 1.0, 1.0)
    stream("norms", 2.0 * M * H * 2 * ab, L, 2.0, flop=2.0 * M * H * 4)
    qkv_cols = s.attn_in_params / H / tp
    gemm("qkv_proj", M, qkv_cols, H, L, s.attn_in_params / tp)
    # rope + 2 residual adds: elementwise kernels on q/k and on the residual stream
    stream("elementwise", M * (qkv_cols * 2 + 2 * 3 * H) * ab, L, 3.0)

    heads = s.A / tp
    kvtok = kv_token_layer_bytes(s, fm.kv_bytes, tp)
    full_layers, sl = float(s.L - s.sliding_layers), float(s.sliding_layers)
    keys = _keys_sum(P, T, 0) * full_layers
    cached = (P + T) * full_layers
    if sl:
        keys = keys + _keys_sum(P, T, s.window) * sl
        cached = cached + np.minimum(P + T, s.window) * sl
    # KV traffic: write T new tokens, read every cached token once per sequence (flash / decode); kernels that
    # do not share a kv head across its query group read it once per query head
    reread = 1.0
    if not fm.kv_shared and s.kv_heads_or_latent:
        reread = heads / np.maximum(1.0, np.floor(s.kv_heads_or_latent / tp))
    kv_io = B * (cached * reread + T * L) * kvtok
    score_flop = 2.0 * B * heads * s.qk_dim * keys
    value_flop = 2.0 * B * heads * s.v_dim * keys
    q_io = M * heads * (s.qk_dim + s.v_dim) * ab * L  # read q, write the attention output
    if fm.flash:
        ops.append(Op("attn_score", flop=score_flop, bytes=kv_io / 2 + q_io / 2, weight_bytes=0 * M, kernels=L + 0 * M))
        ops.append(Op("attn_value", flop=value_flop, bytes=kv_io / 2 + q_io / 2, weight_bytes=0 * M, kernels=0 * M))
    else:
        smat = B * heads * keys * ab  # the materialized score/probability matrix, all layers
        ops.append(Op("attn_score", flop=score_flop, bytes=kv_io / 2 + q_io / 2 + smat, weight_bytes=0 * M,
                      kernels=L + 0 * M))
        ops.append(Op("attn_softmax", flop=5.0 * B * heads * keys, bytes=2.0 * smat, weight_bytes=0 * M,
                      kernels=L + 0 * M))
        ops.append(Op("attn_value", flop=value_flop, bytes=kv_io / 2 + q_io / 2 + smat, weight_bytes=0 * M,
                      kernels=L + 0 * M))
    gemm("o_proj", M, H, s.attn_out_params / H / tp, L, s.attn_out_params / tp)

    if s.dense_layers:
        Ld = float(s.dense_layers)
        gemm("mlp_up", M, s.ffn_in / tp, H, Ld, H * s.ffn_in / tp)
        stream("mlp_act", M * (s.ffn_in + s.ffn) / tp * ab, Ld, 1.0, flop=M * s.ffn / tp * 4)
        gemm("mlp_down", M, H, s.ffn / tp, Ld, s.ffn * H / tp)
    if s.moe_layers:
        Lm, E, k = float(s.moe_layers), float(s.experts), float(s.experts_per_token)
        gemm("moe_router", M, E, H, Lm, H * E)
        touched = E * (1.0 - (1.0 - k / E) ** M)
        m_e = M * k / touched  # tokens per touched expert
        for name, n_, k_ in (("moe_up", s.expert_in, H), ("moe_down", H, s.expert_ffn)):
            w = touched * n_ * k_ / tp * wb * Lm
            ops.append(Op(name, flop=2.0 * M * k * n_ * k_ / tp * Lm,
                          bytes=w + M * k * (n_ + k_) / tp * ab * Lm, weight_bytes=w, kernels=Lm + 0 * M,
                          gemm_eff=(m_e, n_ / tp, k_)))
        stream("moe_act", M * k * (s.expert_in + s.expert_ffn) / tp * ab, Lm, 1.0)
        if s.shared_ffn:
            gemm("shared_up", M, s.shared_in / tp, H, Lm, H * s.shared_in / tp)
            gemm("shared_down", M, H, s.shared_ffn / tp, Lm, s.shared_ffn * H / tp)

    # TP all-reduce after attention and after the MLP: payload B·T·H activations
    ar = np.where(tp > 1, 1.0, 0.0)
    ops.append(Op("tp_allreduce", flop=0 * M, bytes=0 * M, weight_bytes=0 * M, kernels=0 * M,
                  comm_bytes=ar * 2.0 * L * M * H * ab, collectives=ar * 2.0 * L + 0 * M))
    stream("final_norm", Mlog * H * 2 * ab, 1.0, 1.0)
    gemm("lm_head", Mlog, s.V / tp, H, 1.0, s.lm_head_params / tp)
    return ops


def time_ops(ops: list[Op], roofs: Roofs, fm: Formats, eff: Efficiency, tp) -> None:
    """Fill ``t_ideal`` (pure roofline) and ``t_est`` (efficiency model) of every op, in place."""
    import numpy as np

    tp = np.asarray(tp, dtype=np.float64)
    peak, bw = roofs.peak_flop_per_s, roofs.bandwidth_bytes_per_s
    link = max(roofs.link_bytes_per_s, 1.0)
    wq = eff.quant_bandwidth if fm.quantized else eff.bandwidth
    ring = 2.0 * (tp - 1.0) / np.maximum(tp, 1.0)
    for op in ops:
        if isinstance(op.gemm_eff, tuple):
            g = gemm_efficiency(eff, *op.gemm_eff, low_precision=roofs.low_precision)
        else:
            g = eff.flop_max * (eff.low_precision_flop_factor if roofs.low_precision else 1.0)
        t_c_ideal = op.flop / peak
        t_m_ideal = op.bytes / bw
        comm = ring * op.comm_bytes
        op.t_ideal = np.maximum(t_c_ideal, t_m_ideal) + comm / link
        t_c = op.flop / (peak * g)
        t_m = op.weight_bytes / (bw * wq) + (op.bytes - op.weight_bytes) / (bw * eff.bandwidth)
        op.t_est = (combine(t_c, t_m, eff.overlap_p) + op.kernels * eff.kernel_overhead_s
                    + comm / (link * eff.link) + op.collectives * eff.collective_latency_s)


@dataclass
class Phase:
    flop: object
    bytes: object
    t_ideal: object
    t_est: object
    ops: list[Op]

    @property
    def intensity(self):
        return self.flop / self.bytes


def phase(s: Shape, roofs: Roofs, fm: Formats, eff: Efficiency, batch, new_tokens, past, tp, logits_tokens=None) -> Phase:
    """One forward pass: ops timed, plus totals (step overhead added to the estimate only)."""
    ops = forward_ops(s, fm, batch, new_tokens, past, tp, logits_tokens)
    time_ops(ops, roofs, fm, eff, tp)
    flop = sum(o.flop for o in ops)
    nbytes = sum(o.bytes for o in ops)
    t_ideal = sum(o.t_ideal for o in ops)
    t_est = sum(o.t_est for o in ops) + eff.step_overhead_s
    return Phase(flop, nbytes, t_ideal, t_est, ops)


def weights_bytes_per_device(s: Shape, fm: Formats, tp):
    """Resident weights on one device: all parameters split over tp (norms replicated, ignored), + an untied
    embedding table counted once (the head is ``lm_head_params``)."""
    import numpy as np

    return s.total_params * fm.weight_bytes / np.asarray(tp, dtype=np.float64)


def kv_bytes_per_device(s: Shape, fm: Formats, batch, context, tp):
    """KV-cache bytes on one device for B sequences of ``context`` tokens (window-capped layers)."""
    import numpy as np

    C = np.asarray(context, dtype=np.float64)
    held = (s.L - s.sliding_layers) * C
    if s.sliding_layers:
        held = held + s.sliding_layers * np.minimum(C, s.window)
    return np.asarray(batch, dtype=np.float64) * held * kv_token_layer_bytes(s, fm.kv_bytes, tp)


def inference(s: Shape, roofs: Roofs, fm: Formats, eff: Efficiency, batch, prompt, gen, tp):
    """TTFT, TPOT and throughput for B sequences of ``prompt`` + ``gen`` tokens; ideal and estimated.

    TTFT = one prefill pass over the prompt (logits for the last token only). TPOT = one decode pass at the
    mean cache length over the generation, P = prompt + gen/2 (exact for the linear KV term).
    End-to-end output tokens/s = B·gen / (TTFT + (gen − 1)·TPOT) (gpt-fast counts wall time incl. prefill, §0).
    """
    import numpy as np

    B, S, G = (np.asarray(x, dtype=np.float64) for x in (batch, prompt, gen))
    pre = phase(s, roofs, fm, eff, B, S, 0.0 * S, tp, logits_tokens=1.0)
    dec = phase(s, roofs, fm, eff, B, 1.0 + 0 * S, S + G / 2.0, tp)
    out = {}
    for key, ttft, tpot in (("est", pre.t_est, dec.t_est), ("ideal", pre.t_ideal, dec.t_ideal)):
        total = ttft + (G - 1.0) * tpot
        out[key] = {"ttft_s": ttft, "tpot_s": tpot, "total_s": total, "output_tokens_per_s": B * G / total}
    return pre, dec, out


def compute_bound_batch(s: Shape, roofs: Roofs, fm: Formats, context, tp):
    """Smallest batch at which a decode step's arithmetic intensity reaches the ridge point.

    Intensity(B) = a·B / (W + c·B) with a, c the FLOPs and bytes one more sequence adds and W the bytes
    independent of B (weights); solve a·B = R·(W + c·B). Infinite when a ≤ R·c (KV reads dominate; MoE
    touched experts make this approximate).
    """
    import numpy as np

    ops1 = forward_ops(s, fm, 1.0, 1.0, context, tp)
    ops2 = forward_ops(s, fm, 2.0, 1.0, context, tp)
    f1, f2 = sum(o.flop for o in ops1), sum(o.flop for o in ops2)
    b1, b2 = sum(o.bytes for o in ops1), sum(o.bytes for o in ops2)
    a, c = f2 - f1, b2 - b1
    W = b1 - c
    R = roofs.ridge_point
    denom = a - R * c
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denom > 0, np.ceil(R * W / np.where(denom > 0, denom, 1.0)), np.inf)
