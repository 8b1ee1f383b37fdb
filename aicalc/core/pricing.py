"""Time of an operation on a chip: the one place where GEMMs, attention kernels, memory streams and collectives
are priced, for inference and training alike.

Each op (:class:`aicalc.core.forward.Op`) gets two times:

- ideal: the bare roofline ``max(FLOPs / peak, bytes / bandwidth)`` (Williams et al. 2009) plus its collective
  payload over the link at full speed;
- estimate: the efficiency model of :mod:`aicalc.core.efficiency`: compute at the GEMM efficiency of the op's
  shape (``flop_max`` for non-GEMM ops), memory at the achievable bandwidth (weight-only quantized weights at
  ``quant_bandwidth``), the two overlapped as a p-norm, plus a launch cost per kernel, a latency floor per
  collective and the ring volume at ``link`` of the per-direction bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass

from aicalc.core.efficiency import Efficiency, combine, gemm_efficiency

CHUNK = 32768  # configurations evaluated at once: the temporaries of one chunk stay in cache


@dataclass(frozen=True)
class Roofs:
    """The chip as the cost model sees it (one device)."""

    peak_flop_per_s: float  # dense, in the compute dtype
    bandwidth_bytes_per_s: float
    link_bytes_per_s: float  # per direction, for collectives
    low_precision: bool = False  # compute in an 8-bit format (fp8/int8 tensor math)
    vector_flop_per_s: float = 0.0  # the vector (non-tensor) units' rate GEMV kernels use; 0: not listed
    peaks: tuple = ()  # (dtype, dense FLOP/s) of other formats ops may compute in (Op.compute: MXFP4 experts)

    @property
    def ridge_point(self) -> float:
        """FLOP per byte at which compute time equals memory time (Williams et al. 2009)."""
        return self.peak_flop_per_s / self.bandwidth_bytes_per_s


def vector_rate(roofs: Roofs, eff: Efficiency) -> float:
    """FLOP/s of the vector units GEMV kernels run on: the chip's listed rate, else a share of the peak."""
    return roofs.vector_flop_per_s or eff.vector_fraction * roofs.peak_flop_per_s


def op_times(op, roofs: Roofs, eff: Efficiency, tp, quantized: bool = False):
    """(ideal, estimate) seconds of one op (see the module doc). Weight-only quantized weights (``op.quantized``)
    stream at ``quant_bandwidth`` and pay ``dequant_ops_per_weight`` at the vector rate."""
    import numpy as np

    from aicalc.core.geometry import ring_factor

    peak, bw = roofs.peak_flop_per_s, roofs.bandwidth_bytes_per_s
    low = roofs.low_precision
    if op.compute is not None and op.compute in dict(roofs.peaks):  # the op's own math (MXFP4 experts on fp4 cores)
        peak, low = dict(roofs.peaks)[op.compute], op.compute in ("fp8", "int8", "fp4")
    link = np.maximum(roofs.link_bytes_per_s, 1.0)
    vec = vector_rate(roofs, eff)
    if op.kind == "gemm":
        if op.grouped:  # grouped GEMM: each expert's rows padded to the row tile (aicalc.core.moe.padded_rows)
            from aicalc.core.moe import padded_rows

            m, n, k = op.dims
            mp = padded_rows(m, eff.grouped_gemm_tile, eff.grouped_gemm_tile_min)
            with np.errstate(divide="ignore", invalid="ignore"):
                share = np.where(mp > 0, np.asarray(m, dtype=np.float64) / np.where(mp > 0, mp, 1.0), 1.0)
            g = gemm_efficiency(eff, mp, n, k, low_precision=low) * share * eff.grouped_gemm_efficiency
            if eff.grouped_gemm_half_dim > 0:  # fine-grained experts: the expert's FFN width
                w = np.asarray(op.expert_width, dtype=np.float64)
                g = g * w / (w + eff.grouped_gemm_half_dim)
        else:
            g = gemm_efficiency(eff, *op.dims, low_precision=low)
        if eff.gemv_efficiency > 0:  # small M: a GEMV kernel on the vector units, when that is faster
            g = np.maximum(g, eff.gemv_efficiency * vec / peak)
    else:
        g = eff.flop_max * (eff.low_precision_flop_factor if low else 1.0)
    q = op.quantized and quantized
    wq = eff.quant_bandwidth if q else eff.bandwidth
    with np.errstate(divide="ignore", invalid="ignore"):
        t_ideal = np.maximum(op.flop / peak, op.bytes / bw)
        t_c = op.flop / (peak * g)
        if q and eff.dequant_ops_per_weight:
            t_c = t_c + eff.dequant_ops_per_weight * op.weight_bytes / (op.bytes_per_weight * vec)
        t_m = op.weight_bytes / (bw * wq) + (op.bytes - op.weight_bytes) / (bw * eff.bandwidth)
    t_est = combine(t_c, t_m, eff.overlap_p) + op.kernels * eff.kernel_overhead_s
    if op.kind == "alltoall":  # comm_bytes already what one device sends
        t_ideal = t_ideal + op.comm_bytes / link
        t_est = t_est + op.comm_bytes / (link * eff.link) + op.collectives * eff.collective_latency_s
    elif op.kind == "collective":
        comm = ring_factor(tp) * op.comm_bytes
        t_ideal = t_ideal + comm / link
        t_est = t_est + comm / (link * eff.link) + op.collectives * eff.collective_latency_s
    return t_ideal, t_est


def price(ops, roofs: Roofs, eff: Efficiency, tp, quantized: bool) -> None:
    """Set ``t_ideal`` and ``t_est`` on every op, in place."""
    for op in ops:
        op.t_ideal, op.t_est = op_times(op, roofs, eff, tp, quantized)


def chunked(fn, args, n_out: int):
    """``fn(*chunk_args)`` → n_out arrays, over the broadcast of ``args`` in chunks of CHUNK configurations, so a
    long sweep's temporaries stay in cache; returns full-shape arrays."""
    import math

    import numpy as np

    args = [np.asarray(a, dtype=np.float64) for a in args]
    shape = np.broadcast_shapes(*(a.shape for a in args))
    if math.prod(shape) <= CHUNK:
        return [np.broadcast_to(np.asarray(r, dtype=np.float64), shape).copy() if np.shape(r) != shape else r
                for r in fn(*(np.broadcast_to(a, shape) for a in args))]
    size = math.prod(shape)
    flat = [np.broadcast_to(a, shape).reshape(-1) for a in args]
    outs = [np.empty(size) for _ in range(n_out)]
    for i in range(0, size, CHUNK):
        j = min(i + CHUNK, size)
        for o, r in zip(outs, fn(*(a[i:j] for a in flat)), strict=True):
            o[i:j] = r
    return [o.reshape(shape) for o in outs]
