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

from aicalc.core.efficiency import Efficiency, combine, expert_half_dim, gemm_efficiency, math_share
from aicalc.tuples import Named

CHUNK = 32768  # configurations evaluated at once: the temporaries of one chunk stay in cache


class Roofs(Named):
    """The chip as the cost model sees it (one device)."""

    peak_flop_per_s: float  # dense, in the compute dtype
    bandwidth_bytes_per_s: float
    link_bytes_per_s: float  # per direction, for collectives
    low_precision: bool = False  # compute in an 8-bit format (fp8/int8 tensor math)
    vector_flop_per_s: float = 0.0  # the vector (non-tensor) units' rate GEMV kernels use; 0: not listed
    peaks: tuple = ()  # (dtype, dense FLOP/s) of other formats ops may compute in (Op.compute: MXFP4 experts)
    domain: float = 0.0  # chips per scale-up domain (0: every collective on link_bytes_per_s)
    out_bytes_per_s: float = 0.0  # per chip and direction across domains (the scale-out NIC)
    fp4: bool = False  # compute in FP4 tensor math (efficiency.fp4_flop_factor)
    exp_per_s: float = 0.0  # the special-function units' exponentials per second (Chip.exp_per_s; 0: not known)

    @property
    def ridge_point(self) -> float:
        """FLOP per byte at which compute time equals memory time (Williams et al. 2009)."""
        return self.peak_flop_per_s / self.bandwidth_bytes_per_s


def vector_rate(roofs: Roofs, eff: Efficiency) -> float:
    """FLOP/s of the vector units GEMV kernels run on: the chip's listed rate, else a share of the peak."""
    return roofs.vector_flop_per_s or eff.vector_fraction * roofs.peak_flop_per_s


def tp_collective_seconds(roofs: Roofs, payload, tp, link_efficiency=1.0):
    """Seconds of the ring all-reduce of ``payload`` bytes per device over ``tp`` chips: over the scale-up link
    inside one domain, hierarchically (:func:`aicalc.core.collectives.allreduce_seconds`: inside each domain, then
    a 1/g share per chip over its scale-out NIC) when the TP group spans several."""
    import numpy as np

    from aicalc.core.geometry import ring_factor

    link = np.maximum(roofs.link_bytes_per_s, 1.0)
    if roofs.domain > 0 and roofs.out_bytes_per_s > 0:
        from aicalc.core.collectives import allreduce_seconds

        return allreduce_seconds(payload, tp, 1.0, roofs.domain, link, roofs.out_bytes_per_s, link_efficiency)
    return ring_factor(tp) * payload / (link * link_efficiency)


def alltoall_seconds(roofs: Roofs, op, link_efficiency=1.0):
    """Seconds of a MoE all-to-all op (``comm_bytes`` one copy of the device's tokens, ``dims`` = (k, ep,
    stride, n_group, topk_group)): the copies that leave the device over the scale-up link inside one domain; an
    EP group spanning several domains sends each token across once per domain it reaches and forwards it inside,
    the slower of the two parts setting the time (:func:`aicalc.core.collectives.moe_alltoall_seconds`, as
    train-time prices it)."""
    import numpy as np

    from aicalc.core.collectives import moe_alltoall_seconds

    k, ep, stride, n_group, topk_group = op.dims
    link = np.maximum(roofs.link_bytes_per_s, 1.0)
    domain = roofs.domain if roofs.domain > 0 and roofs.out_bytes_per_s > 0 else np.inf
    out = roofs.out_bytes_per_s if roofs.out_bytes_per_s > 0 else link
    return moe_alltoall_seconds(op.comm_bytes, k, ep, stride, domain, link, out, link_efficiency, n_group, topk_group)


def op_times(op, roofs: Roofs, eff: Efficiency, tp, quantized: bool = False):
    """(ideal, estimate) seconds of one op (see the module doc). Weight-only quantized weights (``op.quantized``)
    stream at ``quant_bandwidth`` and pay ``dequant_ops_per_weight`` at the vector rate."""
    import numpy as np

    peak, bw = roofs.peak_flop_per_s, roofs.bandwidth_bytes_per_s
    low, fp4 = roofs.low_precision, roofs.fp4
    if op.compute is not None and op.compute in dict(roofs.peaks):  # the op's own math (MXFP4 experts on fp4 cores)
        peak, low, fp4 = dict(roofs.peaks)[op.compute], op.compute in ("fp8", "int8", "fp4"), op.compute == "fp4"
    vec = vector_rate(roofs, eff)
    if op.kind == "gemm":
        if op.grouped:  # grouped GEMM: each expert's rows padded to the row tile (aicalc.core.moe.padded_rows)
            from aicalc.core.moe import padded_rows

            m, n, k = op.dims
            mp = padded_rows(m, eff.grouped_gemm_tile, eff.grouped_gemm_tile_min)
            with np.errstate(divide="ignore", invalid="ignore"):
                share = np.where(mp > 0, np.asarray(m, dtype=np.float64) / np.where(mp > 0, mp, 1.0), 1.0)
            g = gemm_efficiency(eff, mp, n, k, low_precision=low, fp4=fp4) * share * eff.grouped_gemm_efficiency
            if eff.grouped_gemm_half_dim > 0:  # fine-grained experts: the expert's FFN width
                w = np.asarray(op.expert_width, dtype=np.float64)
                g = g * w / (w + expert_half_dim(eff, fp4))
        else:
            g = gemm_efficiency(eff, *op.dims, low_precision=low, fp4=fp4)
        if eff.gemv_efficiency > 0:  # small M: a GEMV kernel on the vector units, when that is faster
            g = np.maximum(g, eff.gemv_efficiency * vec / peak)
    else:
        g = math_share(eff, low, fp4)
        if op.kind == "attention":
            g = g / lane_padding(getattr(op, "width", 0.0), eff.attention_lanes)
    q = op.quantized and quantized
    wq = eff.quant_bandwidth if q else eff.bandwidth
    with np.errstate(divide="ignore", invalid="ignore"):
        t_ideal = np.maximum(op.flop / peak, op.bytes / bw)
        t_c = op.flop / (peak * g)
        if op.flop_per_exp and roofs.exp_per_s > 0:  # a fused attention: its softmax's exponentials beside its matmuls
            t_c = np.maximum(t_c, exp_seconds(op, roofs, eff))
        if q and eff.dequant_ops_per_weight:
            t_c = t_c + eff.dequant_ops_per_weight * op.weight_bytes / (op.bytes_per_weight * vec)
        sb = stream_bandwidth(eff, op.kind)
        w = op.weight_bytes
        if (isinstance(w, (int, float)) or np.ndim(w) == 0) and w == 0:  # no weights: the same, two passes fewer
            t_m = op.bytes / (bw * sb)
        else:
            t_m = op.weight_bytes / (bw * wq) + (op.bytes - op.weight_bytes) / (bw * sb)
    t_est = combine(t_c, t_m, eff.overlap_p) + op.kernels * eff.kernel_overhead_s
    if op.kind == "alltoall":  # comm_bytes: one copy of the device's tokens; dims: the EP group
        t_ideal = t_ideal + alltoall_seconds(roofs, op)
        # the share ep_overlap of the exchange hidden beside another micro-batch's compute (two-batch overlap)
        t_est = t_est + (1.0 - eff.ep_overlap) * alltoall_seconds(roofs, op, eff.link) \
            + op.collectives * eff.collective_latency_s
    elif op.kind == "collective":
        t_ideal = t_ideal + tp_collective_seconds(roofs, op.comm_bytes, tp)
        t_est = t_est + tp_collective_seconds(roofs, op.comm_bytes, tp, eff.link) \
            + op.collectives * eff.collective_latency_s
    return t_ideal, t_est


def exp_seconds(op, roofs: Roofs, eff: Efficiency):
    """Seconds of a fused attention op's softmax exponentials on the special-function units: one per score
    element, ``op.flop / op.flop_per_exp`` of them (:func:`aicalc.core.exponentials.flop_per_exp`: each op carries
    its share of an element's exponential in proportion to its FLOPs), at ``flop_max`` of ``roofs.exp_per_s``, the
    share of its peak a kernel's tensor math reaches in 16-bit (the kernel overlaps the units, so its compute time
    is the longer of the two: :mod:`aicalc.core.exponentials`)."""
    return op.flop / (op.flop_per_exp * roofs.exp_per_s * eff.flop_max)


def lane_padding(width, lanes) -> float:
    """How much wider a fused attention product computes than its per-head ``width`` where the kernel lays that
    width along vector lanes: ``ceil(width / lanes) · lanes / width`` (1 where ``lanes`` or ``width`` is 0). TPU
    Pallas kernels hold a head's q and k rows and its output along the 128 lanes of a vector register (JAX
    ``jax/_src/tpu_info.py``: ``NUM_LANES = 128`` on every TPU generation); the splash attention kernel pads the
    value width to them ("If the head_dim_v is not a multiple of the number of lanes, it will be padded to that
    multiple with zeros", tokamax ``splash_attention_kernel.py`` @ 783ea957, as JAX's own): gpt-oss's 64-wide
    heads compute as 128 (2x), DeepSeek-V3's 192-wide q·k as 256 (4/3)."""
    import math

    if not lanes > 0 or not width > 0:
        return 1.0
    return math.ceil(width / lanes) * lanes / width


def stream_bandwidth(eff: Efficiency, kind: str) -> float:
    """The share of datasheet bandwidth an op's activation and cache bytes stream at: ``attention_bandwidth`` for the
    attention core where a profile sets it (the KV cache read page by page), else ``bandwidth``."""
    return eff.attention_bandwidth if kind == "attention" and eff.attention_bandwidth > 0 else eff.bandwidth


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
    outs = list(np.empty((n_out, size)))  # one block: it pages in faster than n_out arrays (api.results.Block)
    for i in range(0, size, CHUNK):
        j = min(i + CHUNK, size)
        for o, r in zip(outs, fn(*(a[i:j] for a in flat)), strict=True):
            o[i:j] = r
    return [o.reshape(shape) for o in outs]


def materialize(op) -> None:
    """Form the flop, bytes and comm_bytes arrays of an op a lean forward pass kept per token (``op.affine``)."""
    if op.affine is not None and op.flop is None:
        x, f, b, c = op.affine
        op.flop, op.bytes, op.comm_bytes = f * x, b * x + op.weight_bytes, c * x


def totals(ops):
    """(FLOPs, bytes) of a pass, summed over its ops."""
    for op in ops:
        materialize(op)
    return sum(o.flop for o in ops), sum(o.bytes for o in ops)


_SAFE = (1e-300, 1e300)  # a sum of squares well inside the normal range (efficiency._hypot's exact case)


class _Lines:
    """Sums of a·x + c over the ops that share one array of tokens x, and the sums of their other terms over
    ``xe``: x itself, or where x holds few distinct whole numbers (decode's tokens are the batch: a few hundred
    sizes over a chunk of 32,768 points) each of them once, ``idx`` taking every point to its own."""

    def __init__(self, x):
        import numpy as np

        self.x, self.lo, self.hi = x, float(x.min()), float(x.max())
        self.flop = self.bytes = self.bytes0 = self.ideal = self.ideal0 = self.est = self.est0 = 0.0
        self.t_ideal = self.t_est = 0.0
        self.xe, self.idx = x, None
        if x.ndim == 1 and self.hi - self.lo < x.size // 8 and self.lo == int(self.lo):
            k = x - self.lo
            idx = k.astype(np.intp)
            if np.array_equal(idx, k):
                self.xe, self.idx = np.arange(self.lo, self.hi + 1.0), idx

    def totals(self):
        """(FLOPs, bytes, ideal, estimate) of these ops at every point."""
        import numpy as np

        xe = self.xe
        sums = (self.flop * xe, _line(xe, self.bytes, self.bytes0), _add(_line(xe, self.ideal, self.ideal0),
                self.t_ideal), _add(_line(xe, self.est, self.est0), self.t_est))
        return sums if self.idx is None else tuple(np.take(a, self.idx) for a in sums)


def _line_parts(op, roofs: Roofs, eff: Efficiency, quantized: bool, lo: float = 0.0):
    """An affine op's times as numbers over its x ≥ ``lo``: (ideal compute and memory lines (a1, a2, a3):
    max(a1·x, a2·x + a3); compute time alpha·(x + shift) + delta, at most gemv·x where a GEMV kernel is faster
    (None: no GEMV path); memory time beta·x + gamma); None where a number is not finite (a zero-width GEMM).

    A grouped GEMM (:func:`aicalc.core.moe.saturated_ops`: m = per_expert·x rows per expert, padded to m + pad
    once m ≥ m0, :func:`aicalc.core.moe.padded_from`) reaches flop_max·(n/(n + h))·(k/(k + h))·m/(m + pad + h) of
    peak (:func:`op_times`: the padded shape's size curve times the share m/(m + pad) of useful rows, times the
    grouped and expert-width factors), so its compute time is alpha·(x + (pad + h)/per_expert); None below m0."""
    import math

    _x, fx, bx, _cx = op.affine
    if op.flop_per_exp and roofs.exp_per_s > 0:  # a time of two compute units: op by op (op_times)
        return None
    W = float(op.weight_bytes)
    bw = roofs.bandwidth_bytes_per_s
    peak, low, fp4 = roofs.peak_flop_per_s, roofs.low_precision, roofs.fp4
    if op.compute is not None and op.compute in dict(roofs.peaks):
        peak, low, fp4 = dict(roofs.peaks)[op.compute], op.compute in ("fp8", "int8", "fp4"), op.compute == "fp4"
    vec = vector_rate(roofs, eff)
    q = op.quantized and quantized
    g = math_share(eff, low, fp4)
    if op.kind == "attention":  # a head narrower than the lanes it is laid along (op_times)
        g = g / lane_padding(getattr(op, "width", 0.0), eff.attention_lanes)
    shift, gemv = 0.0, None
    try:
        if op.kind == "gemm":
            _m, n, k = op.dims
            h = eff.gemm_half_dim
            if h > 0:
                g, shift = g * (n / (n + h)) * (k / (k + h)), h
            if op.grouped:
                from aicalc.core.moe import padded_from

                m0, pad = padded_from(eff.grouped_gemm_tile, eff.grouped_gemm_tile_min)
                c = op.per_expert
                if not c * lo >= m0:
                    return None
                g, shift = g * eff.grouped_gemm_efficiency, (pad + max(h, 0.0)) / c
                if eff.grouped_gemm_half_dim > 0:
                    g = g * op.expert_width / (op.expert_width + expert_half_dim(eff, fp4))
            if eff.gemv_efficiency > 0:
                gemv = fx / (peak * (eff.gemv_efficiency * vec / peak))
        alpha = fx / (peak * g) if fx else 0.0
        delta = eff.dequant_ops_per_weight * W / (op.bytes_per_weight * vec) if q and eff.dequant_ops_per_weight \
            else 0.0
        parts = (fx / peak, bx / bw, W / bw, alpha, shift, delta, gemv, bx / (bw * stream_bandwidth(eff, op.kind)),
                 W / (bw * (eff.quant_bandwidth if q else eff.bandwidth)))
    except ZeroDivisionError:
        return None
    return parts if all(v is None or math.isfinite(v) for v in parts) else None


def _overlap(x, ln: _Lines, tile, gemv, beta: float, gamma: float, p: float, out=None):
    """combine(t_c, t_m, p) over x for t_c = a·x + b (``tile``; the smaller of it and ``gemv`` where a GEMV
    kernel is an option) and t_m = beta·x + gamma. A compute line below the other at both ends of the chunk is
    the time over all of it; for p = 2 with one line, t_c² + t_m² is a quadratic in x (one square root per
    point), each term non-negative, so it rounds as the op-by-op form does. ``out``: an array of x's shape the
    result may be written into."""
    import numpy as np

    from aicalc.core.efficiency import combine

    lo, hi = ln.lo, ln.hi
    if gemv:
        (a1, b1), (a2, b2) = tile, gemv
        e_lo, e_hi = (a1 * lo + b1) - (a2 * lo + b2), (a1 * hi + b1) - (a2 * hi + b2)
        if e_lo <= 0.0 and e_hi <= 0.0:
            gemv = None
        elif e_lo >= 0.0 and e_hi >= 0.0:
            tile, gemv = gemv, None
    a, b = tile
    if p == 2.0:
        if gemv is None:
            c2, c1, c0 = a * a + beta * beta, 2.0 * (a * b + beta * gamma), b * b + gamma * gamma
            if _SAFE[0] <= (c2 * lo + c1) * lo + c0 and (c2 * hi + c1) * hi + c0 <= _SAFE[1]:
                r = np.multiply(x, c2, out=out)
                r += c1
                r *= x
                r += c0
                return np.sqrt(r, out=r)
        else:  # both times grow with x: t_c² + t_m² lies between its values at the chunk's ends
            (a2, b2) = gemv
            ends = [min(a * z + b, a2 * z + b2) ** 2 + (beta * z + gamma) ** 2 for z in (lo, hi)]
            if _SAFE[0] <= ends[0] and ends[1] <= _SAFE[1]:  # (the same products and sums, in two arrays)
                u, v = np.multiply(x, a, out=out), x * a2
                u += b
                v += b2
                np.minimum(u, v, out=u)
                u *= u
                np.multiply(x, beta, out=v)
                v += gamma
                v *= v
                u += v
                return np.sqrt(u, out=u)
    t_c = a * x + b if gemv is None else np.minimum(a * x + b, gemv[0] * x + gemv[1])
    return combine(t_c, beta * x + gamma, p)


def price_sums(ops, roofs: Roofs, eff: Efficiency, tp, quantized: bool, scale=None):
    """(FLOPs, bytes, ideal seconds, estimated seconds) of a pass, summed over its ops: the sums of
    :func:`op_times` (each op's times × ``scale[op.name]``, default 1), with the ops of a lean pass
    (``op.affine``: FLOPs, bytes and collective payload a number times an array x of tokens, the rest numbers)
    priced in closed form. Over x such an op's compute time is a·(x + h) (a GEMM's x/(x + h) efficiency factor
    cancels the x of its FLOPs) or a·x, its memory time b·x + c, its ideal time the larger of two lines: terms
    that are lines in x (memory-only kernels, collectives, an ideal time on one side of its ridge over the whole
    chunk) are summed as coefficients and evaluated once; the p = 2 overlap of the rest is one square root of a
    quadratic in x. Equal to the op-by-op sums to rounding (a few ulps)."""
    import numpy as np

    from aicalc.core.efficiency import combine

    scale = scale or {}
    lines: dict[int, _Lines] = {}
    flop = nbytes = t_ideal = t_est = 0.0
    p = eff.overlap_p
    for op in ops:
        parts = ln = None
        if op.affine is not None and op.name not in scale and op.affine[0].size:
            x = op.affine[0]
            ln = lines.get(id(x))
            if ln is None:
                ln = lines[id(x)] = _Lines(x)
            if ln.lo > 0.0:
                parts = _line_parts(op, roofs, eff, quantized, ln.lo)
        if parts is None:
            materialize(op)
            ti, te = op_times(op, roofs, eff, tp, quantized)
            sc = scale.get(op.name)
            flop, nbytes = _add(flop, op.flop), _add(nbytes, op.bytes)
            t_ideal = _add(t_ideal, ti if sc is None else ti * sc)
            t_est = _add(t_est, te if sc is None else te * sc)
            continue
        x, fx, bx, cx = op.affine
        a1, a2, a3, alpha, shift, delta, gemv, beta, gamma = parts
        ln.flop += fx
        ln.bytes += bx
        ln.bytes0 += float(op.weight_bytes)
        d_lo, d_hi = a1 * ln.lo - (a2 * ln.lo + a3), a1 * ln.hi - (a2 * ln.hi + a3)
        if d_lo >= 0.0 and d_hi >= 0.0:  # compute-bound over the whole chunk
            ln.ideal += a1
        elif d_lo <= 0.0 and d_hi <= 0.0:  # memory-bound
            ln.ideal += a2
            ln.ideal0 += a3
        else:
            r, r2 = a1 * ln.xe, a2 * ln.xe
            r2 += a3
            ln.t_ideal = _add(ln.t_ideal, np.maximum(r, r2, out=r))
        ln.est0 += float(op.kernels) * eff.kernel_overhead_s
        if alpha == 0.0 and delta == 0.0:  # memory only: the p-norm of (0, t_m) is t_m
            ln.est += beta
            ln.est0 += gamma
        elif gamma == 0.0 and delta == 0.0 and not shift and not gemv:  # both times a multiple of x
            ln.est += float(combine(alpha, beta, p))
        else:
            ln.t_est = _add(ln.t_est, _overlap(ln.xe, ln, (alpha, alpha * shift + delta), gemv and (gemv, delta), beta, gamma, p))
        if op.kind == "collective":
            ln.ideal += float(tp_collective_seconds(roofs, cx, tp))
            ln.est += float(tp_collective_seconds(roofs, cx, tp, eff.link))
            ln.est0 += float(op.collectives) * eff.collective_latency_s
    for ln in lines.values():
        if ln.flop or ln.bytes or ln.ideal or ln.est or ln.bytes0 or ln.ideal0 or ln.est0 or np.ndim(ln.t_est) \
                or np.ndim(ln.t_ideal):
            f, b, ti, te = ln.totals()
            flop, nbytes, t_ideal, t_est = _add(flop, f), _add(nbytes, b), _add(t_ideal, ti), _add(t_est, te)
    return flop, nbytes, t_ideal, t_est


class Plan:
    """The affine ops of a lean pass over one array of tokens x priced once for every x in [lo, hi]
    (:func:`affine_plan`): ``const`` the (FLOPs, bytes, ideal, estimate) that do not depend on x, :meth:`add` the
    rest over a chunk of x."""

    def __init__(self, lo, hi, flop, nbytes, envelope, est, terms, p, const):
        self.lo, self.hi, self.flop, self.bytes, self.envelope = lo, hi, flop, nbytes, envelope
        self.est, self.terms, self.p, self.const = est, terms, p, const

    def add(self, x, flop, nbytes, ideal, est, tmp, tmp2):
        """Add the x-dependent FLOPs, bytes, ideal and estimated seconds at the points ``x`` into the four arrays
        (``tmp``, ``tmp2``: scratch arrays of x's shape)."""
        import numpy as np

        for total, a in ((flop, self.flop), (nbytes, self.bytes)):
            if a:
                total += np.multiply(x, a, out=tmp)
        (a0, c0), *rest = self.envelope
        env = np.multiply(x, a0, out=tmp)
        if c0:
            env += c0
        for a, c in rest:  # the upper envelope of the lines
            line = np.multiply(x, a, out=tmp2)
            line += c
            np.maximum(env, line, out=env)
        ideal += env
        if self.est:
            est += np.multiply(x, self.est, out=tmp)
        for tile, gemv, beta, gamma in self.terms:
            est += _overlap(x, self, tile, gemv, beta, gamma, self.p, out=tmp)


def affine_plan(ops, roofs: Roofs, eff: Efficiency, tp, quantized: bool, lo: float, hi: float):
    """A :class:`Plan` of the affine ops ``ops`` (:class:`aicalc.core.forward.Op` ``affine``, all over one array
    of tokens x) for every x in [lo, hi], lo > 0; None where an op has no closed form (a zero-width GEMM). The
    closed forms of :func:`price_sums`, decided once for the whole range, with the ideal times of the ops that
    cross their ridge inside it summed as an upper envelope: max(a1·x, a2·x + a3) summed over ops is convex and
    piecewise linear with a piece between consecutive crossovers x = a3/(a1 − a2) (every op beyond its
    crossover compute-bound, before it memory-bound), so the sum is the largest of the k + 1 lines of its
    pieces, each a sum of non-negative coefficients."""
    from aicalc.core.efficiency import combine

    flop = nbytes = bytes0 = ideal = ideal0 = est = est0 = 0.0
    cross, terms = [], []
    p = eff.overlap_p
    for op in ops:
        parts = _line_parts(op, roofs, eff, quantized, lo)
        if parts is None:
            return None
        _x, fx, bx, cx = op.affine
        a1, a2, a3, alpha, shift, delta, gemv, beta, gamma = parts
        flop += fx
        nbytes += bx
        bytes0 += float(op.weight_bytes)
        d_lo, d_hi = a1 * lo - (a2 * lo + a3), a1 * hi - (a2 * hi + a3)
        if d_lo >= 0.0 and d_hi >= 0.0:  # compute-bound over the whole range
            ideal += a1
        elif d_lo <= 0.0 and d_hi <= 0.0:  # memory-bound
            ideal += a2
            ideal0 += a3
        else:
            cross.append((a3 / (a1 - a2), a1, a2, a3))
        est0 += float(op.kernels) * eff.kernel_overhead_s
        if alpha == 0.0 and delta == 0.0:  # memory only: the p-norm of (0, t_m) is t_m
            est += beta
            est0 += gamma
        elif gamma == 0.0 and delta == 0.0 and not shift and not gemv:  # both times a multiple of x
            est += float(combine(alpha, beta, p))
        else:
            terms.append(((alpha, alpha * shift + delta), gemv and (gemv, delta), beta, gamma))
        if op.kind == "collective":
            ideal += float(tp_collective_seconds(roofs, cx, tp))
            est += float(tp_collective_seconds(roofs, cx, tp, eff.link))
            est0 += float(op.collectives) * eff.collective_latency_s
    cross.sort()
    envelope = [(ideal + sum(c[1] for c in cross[:j]) + sum(c[2] for c in cross[j:]), sum(c[3] for c in cross[j:]))
                for j in range(len(cross) + 1)]
    return Plan(lo, hi, flop, nbytes, envelope, est, terms, p, (0.0, bytes0, ideal0, est0))


def _line(x, a: float, c: float):
    """a·x + c, a new array."""
    r = a * x
    r += c
    return r


def _add(total, term):
    """total + term, into ``total`` where it is an array this module made for the sum (price_sums starts every
    sum at the number 0 and only ever replaces it by a new array) and the shapes agree."""
    import numpy as np

    if isinstance(total, np.ndarray) and total.ndim and np.shape(np.broadcast(total, term)) == total.shape:
        total += term
        return total
    return total + term
