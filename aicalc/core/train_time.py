"""Training time: FLOPs per token, step time of a TP × PP × DP layout, MFU, total time and chip-hours.

Notation: B global batch (sequences per optimizer step), b micro-batch, s sequence length, L layers,
H hidden, A heads, d head_dim, V vocab, N params, D tokens; tp/pp/dp the parallel degrees, v the
interleaving factor of the pipeline schedule. Inputs may be numpy arrays (broadcast together).

FLOP counts (validation-cases TT-01):

- Model FLOPs per token (no recompute; Korthikanti et al. 2022, eq. for MFU):
  ``6·N_mm + 12·L·s·A·d + 6·V·H`` — 6 FLOPs per matmul weight (forward 2, backward 4; Kaplan et al. 2020),
  the attention score/value products ``12·s·A·d`` per layer (Megatron counts the full s×s product), and the
  LM head. For a GPT with 4H FFN and A·d = H this is exactly ``72·L·h²·(1 + s/(6h) + V/(12hL))``.
- Full recompute adds one more forward of every layer: ``2·N_mm + 4·L·s·A·d`` (Megatron-LM 2021, the
  ``96·B·s·L·h²·(1 + s/(6h) + V/(16Lh))`` formula); selective recompute adds only the attention core
  ``4·L·s·A·d`` (Korthikanti et al. §5, HFU vs MFU of Table 5).
- ``time = D · FLOPs per token / (chips · achieved FLOP/s)`` (TT-01), which reproduces TT-17…TT-31.

Step-time model (``mfu = auto``): per micro-batch and pipeline stage, every GEMM at the size-dependent
efficiency of :mod:`aicalc.core.efficiency` (forward, backward ×2, recompute), non-matmul traffic
(layer norms, dropout, residuals: ``train_elementwise_bytes·H`` bytes per token and layer; a materialized
softmax adds ~13 bytes per score element per pass), TP all-reduces (2 forward, 2 backward, 2 more with full
recompute; Shoeybi et al. 2019), then the pipeline bubble ``(pp − 1)/v`` extra micro-batch slots
(Narayanan et al. 2021 §2.2), the data-parallel gradient all-reduce (ring, ``2(dp−1)/dp``; ZeRO-3 adds a
parameter all-gather: 1.5× the volume, Rajbhandari et al. 2020 §7) and the optimizer update (memory-bound).
"""

from __future__ import annotations

from dataclasses import dataclass

from aicalc.core.efficiency import Efficiency, gemm_efficiency
from aicalc.core.roofline import Shape

RECOMPUTE = ("none", "selective", "full")
SOFTMAX_BYTES_PER_SCORE = 13.0  # one forward pass over a materialized 16-bit score matrix (Korthikanti Table 2)
OPTIMIZER_BYTES_PER_PARAM = 34.0  # Adam, mixed precision: read master/m/v/grad (16 B), write master/m/v + bf16 copy


def matmul_params_per_layer(s: Shape) -> float:
    """Average matmul weights per layer touched per token (MoE: k routed + shared experts + router)."""
    dense = s.H * (s.ffn_in + s.ffn)
    moe = s.H * (s.experts_per_token * (s.expert_in + s.expert_ffn) + s.shared_in + s.shared_ffn + s.experts)
    ffn = (s.dense_layers * dense + s.moe_layers * moe) / s.L
    return s.attn_in_params + s.attn_out_params + ffn


def _attn_keys(s: Shape, seq):
    """Σ over layers of the keys one token's attention spans (full s; sliding layers min(s, W))."""
    import numpy as np

    seq = np.asarray(seq, dtype=np.float64)
    keys = (s.L - s.sliding_layers) * seq
    if s.sliding_layers:
        keys = keys + s.sliding_layers * np.minimum(seq, s.window)
    return keys


def flops_per_token(s: Shape, seq, recompute: str = "none"):
    """(model FLOPs, hardware FLOPs) per trained token (TT-01)."""
    n_mm = matmul_params_per_layer(s) * s.L
    attn = 2.0 * _attn_keys(s, seq) * s.A * (s.qk_dim + s.v_dim)  # forward: score + value, per token
    model = 6.0 * n_mm + 3.0 * attn + 6.0 * s.V * s.H
    if recompute == "full":
        return model, model + 2.0 * n_mm + attn
    if recompute == "selective":
        return model, model + attn
    return model, model


def time_from_rate(tokens, flops_per_token_counted, chips, achieved_flop_per_s_per_chip):
    """TT-01: time = D · FLOPs/token ÷ (chips · achieved FLOP/s), the FLOPs counted as the rate was."""
    return tokens * flops_per_token_counted / (chips * achieved_flop_per_s_per_chip)


@dataclass(frozen=True)
class TrainChip:
    peak_flop_per_s: float
    bandwidth_bytes_per_s: float
    link_bytes_per_s: float  # per direction, intra-node (TP)
    dp_bytes_per_s: float  # per direction per chip, across nodes (DP)
    low_precision: bool = False


def step_time(s: Shape, chip: TrainChip, eff: Efficiency, *, seq, global_batch, micro_batch, tp, pp, dp,
              recompute="full", flash=True, sequence_parallel=True, interleave=1, zero=0, grad_bytes=2.0):
    """Seconds per optimizer step and its parts (dict of arrays)."""
    import numpy as np

    f = np.float64
    s_, Bg, b = np.asarray(seq, f), np.asarray(global_batch, f), np.asarray(micro_batch, f)
    tp, pp, dp, v = np.asarray(tp, f), np.asarray(pp, f), np.asarray(dp, f), np.asarray(interleave, f)
    peak, bw = chip.peak_flop_per_s, chip.bandwidth_bytes_per_s
    H = float(s.H)
    M = b * s_  # tokens per micro-batch
    passes = 3.0 + (1.0 if recompute == "full" else 0.0)  # forward, backward (2×), recompute forward
    layers = s.L / pp  # per stage

    def g(m, n, k):
        return gemm_efficiency(eff, m, n, k, chip.low_precision)

    # layer GEMMs (average layer): forward dims; backward and recompute assumed at the same efficiency
    t = 0.0
    for n, k in ((s.attn_in_params / H / tp, H), (H, s.attn_out_params / H / tp)):
        t = t + 2.0 * M * n * k * passes / (peak * g(M, n, k))
    for n, k in ((s.ffn_in / tp, H), (H, s.ffn / tp)):
        if s.dense_layers:
            t = t + (s.dense_layers / s.L) * 2.0 * M * n * k * passes / (peak * g(M, n, k))
    if s.moe_layers:
        m_e = M * s.experts_per_token / s.experts  # tokens per expert
        for n, k in ((s.expert_in / tp, H), (H, s.expert_ffn / tp)):
            t = t + (s.moe_layers / s.L) * 2.0 * M * s.experts_per_token * n * k * passes / (peak * g(m_e, n, k))
    # attention core: batched GEMMs s×s×d per head
    keys = _attn_keys(s, s_) / s.L
    attn_passes = 3.0 + (1.0 if recompute in ("full", "selective") else 0.0)
    t = t + 2.0 * b * s_ * keys * (s.A / tp) * (s.qk_dim + s.v_dim) * attn_passes / (peak * g(s_, keys, s.qk_dim))
    # non-matmul memory traffic
    split = tp if sequence_parallel else 1.0
    elem = eff.train_elementwise_bytes * H * M / split * passes / 3.0
    if not flash:
        elem = elem + SOFTMAX_BYTES_PER_SCORE * M * keys * (s.A / tp) * attn_passes
    t = t + elem / (bw * eff.bandwidth)
    t_layer = t
    # TP collectives: 2 per forward, 2 per backward (+2 with full recompute)
    n_coll = 4.0 + (2.0 if recompute == "full" else 0.0)
    ring = 2.0 * (tp - 1.0) / tp
    t_tp = np.where(tp > 1, n_coll * (eff.collective_latency_s + ring * M * H * 2.0 / (chip.link_bytes_per_s * eff.link)),
                    0.0)
    t_stage = layers * (t_layer + t_tp)
    # LM head on the last stage: forward + backward (never recomputed)
    t_head = 3.0 * 2.0 * M * (s.V / tp) * H / (peak * g(M, s.V / tp, H))
    t_mb = t_stage + t_head / v + eff.kernel_overhead_s * 12.0 * layers * passes
    m = Bg / (dp * b)  # micro-batches per pipeline per step
    bubble = (pp - 1.0) / v
    t_pipe = (m + bubble) * t_mb
    # data parallel: gradients (ZeRO-3: + parameter all-gather) over the inter-node network
    params_dev = s.total_params / (tp * pp)
    vol = np.where(dp > 1, 2.0 * (dp - 1.0) / dp * params_dev * grad_bytes * (1.5 if zero >= 3 else 1.0), 0.0)
    t_dp = (1.0 - eff.dp_overlap) * (vol / (chip.dp_bytes_per_s * eff.link)
                                      + np.where(dp > 1, eff.collective_latency_s, 0.0))
    shard = dp if zero >= 1 else 1.0
    t_opt = params_dev / shard * OPTIMIZER_BYTES_PER_PARAM / (bw * eff.bandwidth)
    total = t_pipe + t_dp + t_opt
    return {"step_s": total, "pipeline_s": t_pipe, "bubble_s": bubble * t_mb, "dp_comm_s": t_dp, "optimizer_s": t_opt,
            "tp_comm_s": m * layers * t_tp, "microbatches": m}


def training(s: Shape, chip: TrainChip, eff: Efficiency, *, tokens, seq, global_batch, micro_batch, tp, pp, dp,
             recompute="full", mfu=None, achieved_flop_per_s=None, flash=True, sequence_parallel=True, interleave=1,
             zero=0):
    """Throughput, MFU, total time and chip-hours; ``mfu``/``achieved_flop_per_s`` given, else predicted."""
    import numpy as np

    chips = np.asarray(tp, dtype=np.float64) * pp * dp
    model_f, hw_f = flops_per_token(s, seq, recompute)
    parts = {}
    if achieved_flop_per_s is not None:
        tok_s = chips * achieved_flop_per_s / hw_f
    elif mfu is not None:
        tok_s = chips * mfu * chip.peak_flop_per_s / model_f
    else:
        parts = step_time(s, chip, eff, seq=seq, global_batch=global_batch, micro_batch=micro_batch, tp=tp, pp=pp,
                          dp=dp, recompute=recompute, flash=flash, sequence_parallel=sequence_parallel,
                          interleave=interleave, zero=zero)
        tok_s = np.asarray(global_batch, dtype=np.float64) * seq / parts["step_s"]
    mfu_v = tok_s * model_f / (chips * chip.peak_flop_per_s)
    total = np.asarray(tokens, dtype=np.float64) / tok_s
    return {
        "model_flop_per_token": model_f + 0.0 * tok_s, "hardware_flop_per_token": hw_f + 0.0 * tok_s,
        "mfu": mfu_v, "hfu": tok_s * hw_f / (chips * chip.peak_flop_per_s),
        "model_flop_per_s_per_chip": mfu_v * chip.peak_flop_per_s, "tokens_per_s": tok_s,
        "tokens_per_s_per_chip": tok_s / chips, "step_s": np.asarray(global_batch, dtype=np.float64) * seq / tok_s,
        "total_time_s": total, "chip_hours": total * chips / 3600.0, "chips": chips, **parts,
    }
