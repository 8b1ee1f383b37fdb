"""Inference latency from the forward-pass cost model: prefill (TTFT), decode (TPOT), tokens/s, the roofline
bound of each phase and the batch at which decode turns compute-bound.

TTFT = one prefill pass over the prompt (logits for the last token only). TPOT = one decode pass at the mean
cache length over the generation, P = prompt + gen/2 (exact for the linear KV term). End-to-end output tokens/s
= B·gen / (TTFT + (gen − 1)·TPOT) (gpt-fast counts wall time including prefill). Ridge point = peak FLOP/s ÷
memory bandwidth (Williams et al. 2009); H100 SXM at dense bf16: 989.4e12 / 3.35e12 ≈ 295 FLOP/byte (specs.md
§1; the seed article's 590 uses the sparse figure).
"""

from aicalc.core.efficiency import Efficiency
from aicalc.core.forward import Formats, Shape
from aicalc.core.forward import forward_ops as _forward_ops
from aicalc.core.pricing import CHUNK, Roofs, chunked, price, price_sums
from aicalc.core.pricing import totals as op_totals
from aicalc.tuples import Named


class Par(Named):
    """Parallelism inside one serving replica beyond its attention TP: ``ep`` expert-parallel ranks and ``adp``
    attention-data-parallel groups. The ``tp`` and batch the functions here take are one attention group's (tp/adp
    chips, B/adp sequences); the routed experts are split over all tp·adp chips, ep ways × (tp·adp/ep) expert TP."""

    ep: float = 1.0
    adp: float = 1.0
    redundant: float = 0.0  # extra expert replicas over the EP ranks (EPLB), aicalc.core.geometry.check_parallel


def forward_ops(s, fm, B, T, P, tp, logits_tokens=None, par: Par = Par(), lean: bool = False,
                attention_core: bool = True):
    """:func:`aicalc.core.forward.forward_ops` of one attention group of a replica laid out as ``par``."""
    return _forward_ops(s, fm, B, T, P, tp, logits_tokens, ep=par.ep, etp=tp * par.adp / par.ep, moe_sources=par.adp,
                        redundant=par.redundant, lean=lean, attention_core=attention_core)


def uniform(a):
    """``a`` as one number where every element of the array is the same (a sweep's fixed axis: its tp, its
    chips), so that what depends on it alone is computed once, not once per point; else ``a`` itself."""
    import numpy as np

    if np.ndim(a) and np.size(a) and a.min() == a.max():
        return float(a.flat[0])
    return a


class Phase:
    """One forward pass: totals (arrays), and ``ops``, the per-op breakdown, built on first access."""

    def __init__(self, flop, bytes, t_ideal, t_est, make_ops=None):
        self.flop, self.bytes, self.t_ideal, self.t_est = flop, bytes, t_ideal, t_est
        self._make_ops, self._ops = make_ops, None

    @property
    def ops(self):
        if self._ops is None and self._make_ops is not None:
            self._ops = self._make_ops()
        return self._ops

    @property
    def intensity(self):
        return self.flop / self.bytes


def by_value(fn, args, n_out: int, key: int, most: int = 8):
    """:func:`aicalc.core.pricing.chunked` over the points of each value of ``args[key]`` (a sweep over a few TP
    degrees) in turn, so that each group has one TP (:func:`uniform`); the same numbers at every point."""
    import math

    import numpy as np

    k = np.asarray(args[key], dtype=np.float64)
    if k.ndim == 0 or k.size <= CHUNK or not k.min() < k.max():
        return chunked(fn, args, n_out)
    values = [k.min()]
    while len(values) <= most and values[-1] < k.max():
        values.append(k[k > values[-1]].min())
    shape = np.broadcast_shapes(*(np.shape(a) for a in args))
    if len(values) > most or math.prod(shape) != k.size:
        return chunked(fn, args, n_out)
    flat = [np.broadcast_to(np.asarray(a, dtype=np.float64), shape).reshape(-1) for a in args]
    outs = list(np.empty((n_out, k.size)))
    for v in values:
        idx = np.flatnonzero(flat[key] == v)
        for o, r in zip(outs, chunked(fn, [a[idx] for a in flat], n_out), strict=True):
            o[idx] = r
    return [o.reshape(shape) for o in outs]


def dataflow(s: Shape, chips):
    """(spread, hops) of a dataflow deployment whose weights fill ``chips`` chips' SRAM (1: not dataflow): a token
    crosses min(chips, L) chip groups in turn, and each layer's work is spread over chips / L chips when there
    are more chips than layers (Groq runs every layer on several chips at once).

    MoE: where a layer spans several chips its experts sit on different chips, so a token is dispatched to the
    chips of its experts and their outputs combined back: two more chip-to-chip hops per MoE layer (the
    dispatch and combine exchanges of expert parallelism, GShard, Lepikhin et al. 2020 §2.2/§3.2). A layer
    inside one chip (a wafer) needs neither. Chips, and so the pipeline, follow the total parameters."""
    import numpy as np

    chips = np.maximum(np.asarray(chips, dtype=np.float64), 1.0)
    spread = np.maximum(chips / s.L, 1.0)
    hops = np.minimum(chips, s.L) - 1.0 + np.where(chips > s.L, 2.0 * s.moe_layers, 0.0)
    return spread, hops


def _dataflow_scale(s: Shape, B, T, spread) -> dict:
    """Factors on the op times of a pass on a dataflow deployment, each layer's work spread over its ``spread``
    chips: the touched experts of a MoE layer sit on only touched/E of the layer's expert chips, so their GEMMs
    take E/touched longer than an even spread (per-token time follows the active experts' weights on the chips
    that hold them)."""
    import numpy as np

    if not s.moe_layers:
        return {}
    from aicalc.core.forward import experts_touched

    touched = experts_touched(s, np.asarray(B, dtype=np.float64) * np.asarray(T, dtype=np.float64))
    share = np.where(spread > 1.0, float(s.experts) / np.maximum(touched, 1e-12), 1.0)
    return {"moe_up": share, "moe_down": share}


def pass_overhead(s: Shape, eff: Efficiency, hops=0.0):
    """Fixed seconds of one forward pass: the step overhead (host, sampling, sync), and on dataflow chips the
    latency of every layer and of every chip-to-chip hop of the pipeline a token crosses."""
    return eff.step_overhead_s + eff.layer_latency_s * s.L + eff.hop_latency_s * hops


def _sums(s, roofs, fm, eff, B, T, P, tp, logits_tokens=None, chips=1.0, par: Par = Par()):
    """(FLOPs, bytes, ideal time, estimated time) of one pass per device group; the estimate includes the pass
    overhead. ``chips``: a dataflow deployment's chip count (see :func:`dataflow`)."""
    tp, chips = uniform(tp), uniform(chips)
    ops = forward_ops(s, fm, B, T, P, tp, logits_tokens, par, lean=True)
    spread, hops = dataflow(s, chips)
    # each op says whether its weights are quantized; a dataflow pass spreads the summed times over its chips
    flop, nbytes, t_ideal, t_est = price_sums(ops, roofs, eff, tp, True, _dataflow_scale(s, B, T, spread))
    return [flop, nbytes, t_ideal / spread, t_est / spread + pass_overhead(s, eff, hops)]


def _timed_ops(s, roofs, fm, eff, B, T, P, tp, logits_tokens=None, par: Par = Par()):
    ops = forward_ops(s, fm, B, T, P, tp, logits_tokens, par)
    price(ops, roofs, eff, tp, True)  # each op says whether its weights are quantized
    return ops


def phase(s: Shape, roofs: Roofs, fm: Formats, eff: Efficiency, batch, new_tokens, past, tp,
          logits_tokens=None, chips=1.0, par: Par = Par()) -> Phase:
    """One forward pass, timed (ideal and estimate), over the broadcast of the array arguments."""
    args = [batch, new_tokens, past, tp, chips] + ([] if logits_tokens is None else [logits_tokens])

    def block(B, T, P, tp_, h, *lt):
        return _sums(s, roofs, fm, eff, B, T, P, tp_, lt[0] if lt else None, h, par)

    return Phase(*chunked(block, args, 4), make_ops=lambda: _timed_ops(s, roofs, fm, eff, batch, new_tokens, past, tp,
                                                                        logits_tokens, par))


def inference(s: Shape, roofs: Roofs, fm: Formats, eff: Efficiency, batch, prompt, gen, tp, chips=1.0,
              par: Par = Par(), compute_bound: bool = False):
    """(prefill Phase, decode Phase, {"est"|"ideal": {ttft_s, tpot_s, total_s, output_tokens_per_s}}); ``chips``:
    the chips a dataflow deployment spreads the weights over (1 otherwise); tokens/s are one attention group's.
    ``compute_bound``: a fourth item, :func:`compute_bound_batch` at decode's mean context (from the grid's table
    of contexts where the sweep is priced from tables)."""

    def block(B, S, G, tp_, h):
        pre = _sums(s, roofs, fm, eff, B, S, 0.0, tp_, 1.0, h, par)
        dec = _sums(s, roofs, fm, eff, B, 1.0, S + G / 2.0, tp_, None, h, par)
        res = [*pre, *dec]
        for ttft, tpot in ((pre[3], dec[3]), (pre[2], dec[2])):
            total = ttft + (G - 1.0) * tpot
            res += [total, B * G / total]
        return res

    import numpy as np

    r = None
    if np.ndim(chips) == 0 and chips == 1.0:  # a large grid: from tables (aicalc.core.grid)
        from aicalc.core import grid

        r = grid.inference(s, roofs, fm, eff, batch, prompt, uniform(gen), uniform(tp), par, compute_bound)
    if r is None:
        r = by_value(block, [batch, prompt, gen, tp, chips], 12, 3)

    S, G = np.asarray(prompt, dtype=np.float64), np.asarray(gen, dtype=np.float64)
    pre = Phase(*r[0:4], make_ops=lambda: _timed_ops(s, roofs, fm, eff, batch, S, 0.0 * S, tp, 1.0, par))
    dec = Phase(*r[4:8], make_ops=lambda: _timed_ops(s, roofs, fm, eff, batch, 1.0 + 0 * S, S + G / 2.0, tp, None,
                                                     par))
    out = {}
    for key, ttft, tpot, total, rate in (("est", pre.t_est, dec.t_est, r[8], r[9]),
                                          ("ideal", pre.t_ideal, dec.t_ideal, r[10], r[11])):
        out[key] = {"ttft_s": ttft, "tpot_s": tpot, "total_s": total, "output_tokens_per_s": rate}
    if not compute_bound:
        return pre, dec, out
    cbb = r[12] if len(r) > 12 else compute_bound_batch(s, roofs, fm, S + G / 2.0, tp, par)
    return pre, dec, out, cbb


def compute_bound_batch(s: Shape, roofs: Roofs, fm: Formats, context, tp, par: Par = Par()):
    """Smallest batch at which a decode step's arithmetic intensity reaches the ridge point.

    Intensity(B) = a·B / (W + c·B) with a, c the FLOPs and bytes one more sequence adds and W the bytes
    independent of B (weights); solve a·B = R·(W + c·B). Infinite when a ≤ R·c (KV reads dominate; MoE touched
    experts make this approximate).
    """
    import numpy as np

    R = roofs.ridge_point

    def totals(B, C, tp_):
        return op_totals(forward_ops(s, fm, B, 1.0, C, uniform(tp_), None, par, lean=True))

    def block(C, tp_):
        (f1, b1), (f2, b2) = totals(1.0, C, tp_), totals(2.0, C, tp_)
        a, cb = f2 - f1, b2 - b1
        W = b1 - cb
        denom = a - R * cb
        with np.errstate(divide="ignore", invalid="ignore"):
            return (np.where(denom > 0, np.ceil(R * W / np.where(denom > 0, denom, 1.0)), np.inf),)

    C = np.asarray(context, dtype=np.float64)
    tp1 = uniform(tp)
    if C.ndim == 1 and C.size > CHUNK and np.ndim(tp1) == 0:  # a sweep over few contexts: once per context
        from aicalc.core.grid import tabulated

        r = tabulated(lambda c: chunked(block, [c, tp1], 1)[0], C, C.size // 4)
        if r is not None:
            return r
    return by_value(block, [context, tp], 1, 1)[0]
