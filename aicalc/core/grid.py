"""Inference over a large sweep of batch sizes and prompt lengths, priced from tables (issue 25).

The operations of a pass fall in three groups by what their cost scales with (:class:`aicalc.core.forward.Op`
``per``): the attention core is B times a cost per sequence that depends on T and P alone (its FLOPs, KV reads
and q/o traffic are each B × a function of T and P, Korthikanti et al. 2022; Dao et al. 2022), the final norm and
LM head follow the tokens that reach the head, and every other op the pass's M = B·T tokens. A sweep over a grid
holds few distinct batch sizes, prompt lengths and contexts (a 10⁶-point grid: 511 batch sizes, 32,767 prompts),
so:

- the attention core is priced once per distinct prompt (prefill, T = S) and context (decode, P = S + gen/2) at
  B = 1 and multiplied by B: its FLOPs and bytes are B times those of one sequence, its ideal time
  max(FLOPs/peak, bytes/bandwidth) and its p-norm estimate (t_c^p + t_m^p)^(1/p) scale alike (a norm is
  homogeneous; a GEMM's efficiency here depends on T and the keys, not on B), its kernels' launch cost does not;
- decode's other ops (M = B) and prefill's LM head (one token per sequence) are priced once per distinct batch
  size (:func:`aicalc.core.pricing.price_sums`) with the pass overhead;
- only prefill's token ops over M = B·S are priced at every point, in closed form (``price_sums``).

Each point gathers its rows of the tables. The sums are those of :func:`aicalc.core.latency.inference` to
rounding (a few ulps: B·f rounds once where the op-by-op form rounds B·keys·…; ``tests/test_roofline_sums.py``).
"""

from __future__ import annotations

MOST = 1 << 20  # distinct values a table may hold


def whole_range(x, most: int):
    """(lo, n): the values of ``x`` are whole numbers in lo … lo + n − 1 with n ≤ ``most`` (checked point by point
    where the table is used, :func:`index`), else None."""
    import math

    if x.size == 0:
        return None
    lo, hi = float(x.min()), float(x.max())
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo != int(lo) or hi >= 2.0**52 or hi - lo >= most:
        return None
    return lo, int(hi - lo) + 1


class NotWhole(Exception):
    """A point that is not a whole number: the table does not hold it."""


def index(x, lo: float):
    """Rows of a table over lo, lo + 1, … for the whole numbers ``x`` (x − lo is exact for whole numbers below
    2⁵², so row i holds lo + i = x); raises NotWhole where a point has a fraction."""
    import numpy as np

    k = x - lo
    idx = k.astype(np.intp)
    if not np.array_equal(idx, k):
        raise NotWhole
    return idx


def tabulated(fn, x, most: int):
    """``fn`` (one array of values → one array) at every point of the 1-D sweep ``x``, evaluated once per distinct
    value and gathered, where x holds whole numbers or halves (a context S + gen/2) over at most ``most`` values;
    the same numbers as ``fn(x)`` for an element-wise ``fn``. None otherwise. Rows are found a chunk at a time
    (no sweep-sized temporaries)."""
    import math

    import numpy as np

    from aicalc.core.pricing import CHUNK

    if x.ndim != 1 or x.size == 0:
        return None
    lo, hi = float(x.min()), float(x.max())
    for step in (1.0, 0.5):
        a, b = lo / step, hi / step  # halves: twice them are whole, exactly
        if not (math.isfinite(a) and math.isfinite(b)) or a != int(a) or b >= 2.0**52 or b - a >= most:
            continue
        out, tab = np.empty(x.size), None
        try:
            for i in range(0, x.size, CHUNK):
                c = x[i:i + CHUNK]
                rows = index(c if step == 1.0 else c * 2.0, a)
                if tab is None:  # once the first chunk is found whole
                    tab = fn((np.arange(int(b - a) + 1, dtype=np.float64) + a) * step)
                np.take(tab, rows, out=out[i:i + CHUNK], mode="clip")
        except NotWhole:
            continue
        return out
    return None


def _sequence(s, roofs, fm, eff, T, P, tp, par, logits):
    """(FLOPs, bytes, ideal, estimate without launches) of the attention core of one sequence over the arrays
    T and P, and the seconds of its kernel launches (once per pass, whatever B)."""
    from aicalc.core.latency import forward_ops
    from aicalc.core.pricing import op_times

    bare = eff._replace(kernel_overhead_s=0.0)
    f = b = ti = te = launches = 0.0
    for op in forward_ops(s, fm, 1.0, T, P, tp, logits, par, lean=True):
        if op.per == "sequence":
            a, e = op_times(op, roofs, bare, tp, True)
            f, b, ti, te = f + op.flop, b + op.bytes, ti + a, te + e
            launches = launches + op.kernels * eff.kernel_overhead_s
    return f, b, ti, te, float(launches)


def _by_batch(s, roofs, fm, eff, Bv, T, tp, par, logits, pers):
    """((FLOPs, bytes, ideal, estimate) over the batch sizes Bv of the ops of ``pers`` (token, logit), and where
    every one is affine in B (:class:`aicalc.core.forward.Op` ``affine``) their FLOPs and bytes per sequence
    and their weight bytes (FLOPs = a·B, bytes = b·B + W), else None)."""
    from aicalc.core.latency import forward_ops
    from aicalc.core.pricing import price_sums

    ops = [o for o in forward_ops(s, fm, Bv, T, 0.0, tp, logits, par, lean=True, attention_core=False)
           if o.per in pers]
    lin = None
    if all(o.affine is not None for o in ops):
        lin = (sum(o.affine[1] for o in ops), sum(o.affine[2] for o in ops), sum(float(o.weight_bytes) for o in ops))
    return [a + 0.0 * Bv for a in price_sums(ops, roofs, eff, tp, True)], lin


def _saturated(s, fm, eff, roofs, tp, par, ops, M, lo, hi):
    """(M*, plan) of the routed-expert ops of prefill where one EP rank holds every expert: past M* tokens every
    expert is reached and each expert's rows fill their padded tile, so those ops are affine in M
    (:func:`aicalc.core.moe.saturated_ops`) and priced from one plan over [M*, hi]; None where that does not
    apply (expert parallelism: the busiest rank's load is not linear in M)."""
    from aicalc.core import moe
    from aicalc.core.pricing import affine_plan

    if not s.moe_layers or par.ep != 1.0:
        return None
    sops = moe.saturated_ops(s, fm, M, tp, etp=tp * par.adp / par.ep, sources=par.adp, redundant=par.redundant)
    if {o.name for o in ops if o.affine is None} != {o.name for o in sops} | {"moe_alltoall"}:
        return None
    m0 = moe.padded_from(eff.grouped_gemm_tile, eff.grouped_gemm_tile_min)[0]
    at = max(lo, moe.saturation_tokens(float(s.experts), float(s.experts_per_token), 1.0, par.redundant) / par.adp,
             max(m0 / o.per_expert for o in sops if o.grouped))
    if at > hi:
        return None
    plan = affine_plan(sops, roofs, eff, tp, True, at, hi)
    return None if plan is None else (at, plan)


def inference(s, roofs, fm, eff, batch, prompt, gen, tp, par, compute_bound: bool = False):
    """The 12 arrays of :func:`aicalc.core.latency.inference`'s sweep (prefill FLOPs, bytes, ideal, estimate;
    the same for decode; est total and tokens/s; ideal total and tokens/s) from tables (module doc), a 13th with
    ``compute_bound``: :func:`aicalc.core.latency.compute_bound_batch` once per context, or None where
    they do not pay or do not apply (a small sweep, values that are not whole numbers over a short range, a TP
    or gen that is not one number per point of a 1-D sweep)."""
    import numpy as np

    from aicalc.core.latency import forward_ops, pass_overhead
    from aicalc.core.pricing import CHUNK, affine_plan, price_sums

    B, S = (np.asarray(a, dtype=np.float64) for a in (batch, prompt))
    if B.ndim != 1 or B.shape != S.shape or B.size <= CHUNK or np.ndim(tp) or np.ndim(gen):
        return None
    rb, rs = whole_range(B, B.size // 8), whole_range(S, min(B.size // 4, MOST))
    if rb is None or rs is None or rb[0] < 1.0:
        return None
    G, tp = float(gen), float(tp)
    Bv = np.arange(rb[1], dtype=np.float64) + rb[0]
    Sv = np.arange(rs[1], dtype=np.float64) + rs[0]
    Pv = Sv + G / 2.0
    over = pass_overhead(s, eff)
    # prefill: the attention core per prompt; LM head and pass overhead per batch size
    pf, pb, pi, pe, pl = _sequence(s, roofs, fm, eff, Sv, 0.0, tp, par, 1.0)
    (lf, lb, li, le), llin = _by_batch(s, roofs, fm, eff, Bv, 1.0, tp, par, 1.0, ("logit",))
    le = le + (pl + over)
    # decode: the attention core per context; every other op and the pass overhead per batch size
    df, db, di, de, dl = _sequence(s, roofs, fm, eff, 1.0, Pv, tp, par, None)
    (tf, tb, ti, te), dlin = _by_batch(s, roofs, fm, eff, Bv, 1.0, tp, par, None, ("token", "logit"))
    te = te + (dl + over)
    # prefill's token ops over M = B·S: the affine ones (every op of a dense model) as one plan over the
    # grid's range of M, their terms that do not depend on M in the per-batch table; the rest (routed experts)
    # priced chunk by chunk
    n = B.size

    def token_ops(b, sq):
        return [o for o in forward_ops(s, fm, b, sq, 0.0, tp, 1.0, par, lean=True, attention_core=False)
                if o.per == "token"]

    ops = token_ops(B[:CHUNK], S[:CHUNK])
    lo, hi = rb[0] * rs[0], (rb[0] + rb[1] - 1.0) * (rs[0] + rs[1] - 1.0)  # M's range: whole numbers, exact
    plan = affine_plan([o for o in ops if o.affine is not None], roofs, eff, tp, True, lo, hi) if lo > 0 else None
    w0 = 0.0  # prefill's bytes that do not depend on the point (the token ops' weights)
    if plan is not None:
        w0 = plan.const[1]
        lb, li, le = lb + w0, li + plan.const[2], le + plan.const[3]
    rest = plan is None or any(o.affine is None for o in ops)
    sat = _saturated(s, fm, eff, roofs, tp, par, ops, B[:CHUNK] * S[:CHUNK], lo, hi) if rest and plan else None
    # (per sequence, per batch size, a number) of each output: B × the first at the point's prompt or context, plus
    # the second at its batch size; FLOPs and bytes affine in B are B × (per sequence + per token) + weights
    tables = [(pf, lf, 0.0), (pb, lb, 0.0), (pi, li, 0.0), (pe, le, 0.0),
              (df, tf, 0.0), (db, tb, 0.0), (di, ti, 0.0), (de, te, 0.0)]
    for k, lin, w in ((0, llin, w0), (4, dlin, 0.0)):
        if lin is not None:
            tables[k] = (tables[k][0] + lin[0], None, 0.0)
            tables[k + 1] = (tables[k + 1][0] + lin[1], None, lin[2] + w)
    bound = None
    if compute_bound:
        from aicalc.core.latency import compute_bound_batch

        bound = compute_bound_batch(s, roofs, fm, Pv, tp, par)
    outs = list(np.empty((13 if compute_bound else 12, n)))
    x, tmp, tmp2, gathered = np.empty(CHUNK), np.empty(CHUNK), np.empty(CHUNK), np.empty(CHUNK)
    part, lows = np.empty((4, CHUNK)), []
    try:
        for i in range(0, n, CHUNK):
            j = min(i + CHUNK, n)
            b, sq = B[i:j], S[i:j]
            ib, isq = index(b, rb[0]), index(sq, rs[0])
            if bound is not None:
                np.take(bound, isq, out=outs[12][i:j], mode="clip")
            for (per_seq, per_b, c), o in zip(tables, outs, strict=False):
                r = o[i:j]
                np.take(per_seq, isq, out=r, mode="clip")
                r *= b
                r += c if per_b is None else np.take(per_b, ib, out=gathered[:j - i], mode="clip")
            pre = [o[i:j] for o in outs[:4]]
            if plan is not None:
                m = j - i
                plan.add(np.multiply(b, sq, out=x[:m]), *pre, tmp[:m], tmp2[:m])
            if sat is not None:  # every expert reached: the routed-expert ops from their own plan
                m, (at, sp) = j - i, sat
                xs = x[:m]
                low = np.flatnonzero(xs < at)
                if low.size:  # before every expert is reached: op by op, after the loop
                    acc = part[:, :m]
                    acc.fill(0.0)
                    sp.add(xs, *acc, tmp[:m], tmp2[:m])
                    for a, c in zip(acc[1:], sp.const[1:], strict=True):
                        a += c
                    acc[:, low] = 0.0
                    lows.append(low + i)
                    for r, a in zip(pre, acc, strict=True):
                        r += a
                else:  # every point of the chunk past saturation: the plan's terms straight into the sums
                    sp.add(xs, *pre, tmp[:m], tmp2[:m])
                    for r, c in zip(pre[1:], sp.const[1:], strict=True):
                        r += c
            elif rest:
                ops = token_ops(b, sq)
                if plan is not None:
                    ops = [o for o in ops if o.affine is None]
                for r, a in zip(pre, price_sums(ops, roofs, eff, tp, True), strict=True):
                    r += a
            for k, (ttft, tpot) in ((8, (outs[3], outs[7])), (10, (outs[2], outs[6]))):
                total, rate = outs[k][i:j], outs[k + 1][i:j]
                np.multiply(tpot[i:j], G - 1.0, out=total)
                total += ttft[i:j]
                np.multiply(b, G, out=rate)
                rate /= total
    except NotWhole:
        return None
    if lows:
        _below_saturation(np.concatenate(lows), B, S, G, outs, token_ops, roofs, eff, tp)
    return outs


def _below_saturation(idx, B, S, G, outs, token_ops, roofs, eff, tp):
    """Add the routed-expert ops of prefill, op by op, at the points ``idx`` (fewer tokens than reach every
    expert), and form their TTFT, totals and tokens/s again."""
    import numpy as np

    from aicalc.core.pricing import CHUNK, price_sums

    for i in range(0, idx.size, CHUNK):
        at = idx[i:i + CHUNK]
        b = B[at]
        ops = [o for o in token_ops(b, S[at]) if o.affine is None]
        for o, a in zip(outs[:4], price_sums(ops, roofs, eff, tp, True), strict=True):
            o[at] += a
        for k, (ttft, tpot) in ((8, (outs[3], outs[7])), (10, (outs[2], outs[6]))):
            total = np.multiply(tpot[at], G - 1.0)
            total += ttft[at]
            outs[k][at] = total
            rate = np.multiply(b, G)
            rate /= total
            outs[k + 1][at] = rate
