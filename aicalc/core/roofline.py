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
from aicalc.core.blockwise import Arith, Workspace, blockwise
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


_TINY_TIME = 1e-130  # below this a total could hide an underflowed t_c² + t_m² (such blocks: _reference)


def _keys_sum(P, T, window, ar: Arith | None = None):
    """Σ over the T new queries of the keys each attends to (causal): query i sees P+i+1 keys, capped at window."""
    import numpy as np

    ar = ar or Arith()
    if np.ndim(T) == 0 and T == 1.0:  # one query (decode): T·P = P, T(T+1)/2 = 1; the window caps P+1
        full = ar.add(P, 1.0)
        return full if not window else ar.min(full, float(window), into=full)
    full = ar.add(T, 1.0)
    full = ar.mul(T, full, into=full)
    full = ar.div(full, 2.0, into=full)
    if not (np.ndim(P) == 0 and P == 0.0):  # T·P + T(T+1)/2 (T·P = 0 at P = 0)
        full = ar.add(ar.mul(T, P), full, into=full if np.ndim(full) else None)
    if not window:
        return full
    W = float(window)
    a, b = ar.add(P, 1.0), ar.add(P, T)
    part = ar.add(a, W)  # (a + W)(W − a + 1)/2 + (b − W)·W
    part = ar.mul(part, ar.add(ar.sub(W, a), 1.0), into=part)
    part = ar.div(part, 2.0, into=part)
    part = ar.add(part, ar.mul(ar.sub(b, W), W), into=part)
    if np.ndim(part) == 0:
        return np.where(b <= W, full, np.where(a >= W, W * T, part))
    np.copyto(part, ar.mul(W, T), where=a >= W)  # = where(b <= W, full, where(a >= W, W·T, part))
    np.copyto(part, full, where=b <= W)
    return part


def kv_token_layer_bytes(s: Shape, kv_bytes: float, tp):
    """Cached bytes per token and layer on one device: 2·max(1, K/tp)·d (IM-01/IM-08) or MLA's latent (IM-06)."""
    import numpy as np

    if s.kv_heads_or_latent == 0:
        return s.kv_latent_elems * kv_bytes + 0.0 * np.asarray(tp, dtype=np.float64)
    heads = np.maximum(1.0, np.floor(s.kv_heads_or_latent / np.asarray(tp, dtype=np.float64)))
    return 2.0 * heads * s.d * kv_bytes


class _Ctx:
    """Constants of one evaluation (one block), and the arrays of tp alone, shared by the ops and the phases."""

    def __init__(self, s: Shape | None, roofs: Roofs | None, fm: Formats, eff: Efficiency | None, tp,
                 ws: Workspace | None = None):
        import numpy as np

        self.s, self.fm, self.eff = s, fm, eff
        self.ar = ar = Arith(ws)
        self.tp = np.asarray(tp, dtype=np.float64)
        self._memo: dict = {}
        self._phase: dict = {}  # arrays of the current phase (their scratch is reused by the next one)
        self.itp = self.memo("itp", lambda: ar.div(1.0, self.tp))
        self.timing = roofs is not None
        if not self.timing:
            return
        self.peak, self.bw = roofs.peak_flop_per_s, roofs.bandwidth_bytes_per_s
        self.link = max(roofs.link_bytes_per_s, 1.0)
        self.wq = eff.quant_bandwidth if fm.quantized else eff.bandwidth
        self.low_precision = roofs.low_precision
        self.g0 = eff.flop_max * (eff.low_precision_flop_factor if roofs.low_precision else 1.0)
        one = np.float64(1.0)  # numpy semantics for zero factors (inf, not an exception)
        with np.errstate(divide="ignore"):
            self.cb = one / (self.bw * eff.bandwidth)  # estimated seconds per byte (activations, KV)
            self.cq = one / (self.bw * self.wq)  # … per weight byte
            self.inv_g0 = one / self.g0
        self.h = eff.gemm_half_dim
        self.p = eff.overlap_p
        # combine(0, t_m) is t_m: an op without FLOPs costs its memory time (p ≥ 1, t_m ≥ 0; a zero ceiling
        # gives NaN)
        self.memory_only = self.p >= 1.0 and self.g0 > 0.0 and self.peak > 0.0 and self.cb > 0.0 and self.cq > 0.0

    def _kept(self, make):
        """make(), its scratch arrays kept for the whole block."""
        ws = self.ar.ws
        if ws is None:
            return make()
        ws.into = ws.keep
        try:
            return make()
        finally:
            ws.into = ws.stack

    def memo(self, key, make):
        """An array of tp alone (or a constant), computed once per evaluation."""
        v = self._memo.get(key)
        if v is None:
            v = self._memo[key] = self._kept(make)
        return v

    def split(self, c: float):
        """c/tp (a dimension or a byte count split over the TP group)."""
        return self.memo(("split", c), lambda: self.ar.mul(c, self.itp))

    def ring(self):
        ar = self.ar
        return self.memo("ring", lambda: ar.div(ar.mul(2.0, ar.sub(self.tp, 1.0)), ar.max(self.tp, 1.0)))

    def new_phase(self, *ms) -> None:
        """Start a phase; ``ms``: its GEMM row counts, whose efficiency factors are computed now (at phase level)."""
        self._phase = {}
        if self.timing and self.h > 0:
            for m in ms:
                self.inv_f(m, self._phase)

    def inv_f(self, x, table=None):
        """1 / (x/(x+h)): the reciprocal of one GEMM dimension's efficiency factor (module efficiency, item 1)."""
        import numpy as np

        h = self.h
        if not h > 0:
            return 1.0
        key = id(x)
        hit = self._phase.get(key) or self._memo.get(key)
        if hit is None:
            ar = self.ar

            def make():
                with np.errstate(divide="ignore", invalid="ignore"):
                    return ar.div(ar.add(x, h), np.float64(x) if np.ndim(x) == 0 else x)

            # a phase's row counts live in its scratch (computed at phase level); other dims are of tp alone
            hit = (x, make() if table is not None else self._kept(make))  # x is held: its id stays unique
            (self._memo if table is None else table)[key] = hit
        return hit[1]

    def gemm_factors(self, dims):
        """1/g of a GEMM as a scalar and a list of arrays: t_c = flop/peak · scalar · Π arrays."""
        import numpy as np

        sc, arrays = self.inv_g0, []
        for x in dims:
            if np.ndim(x) == 0:
                sc = sc * self.inv_f(x)
            else:
                arrays.append(self.inv_f(x))
        return sc, arrays

    def memory_time(self, nbytes, w):
        """w/(bw·wq) + (bytes − w)/(bw·bandwidth): weight bytes at the (quantized) weight bandwidth."""
        ar = self.ar
        if w is None or self.cq == self.cb:
            return ar.mul(nbytes, self.cb)
        if self.cq > self.cb:  # both terms positive: no cancellation
            t = ar.mul(w, self.cq - self.cb)
            return ar.add(t, ar.mul(nbytes, self.cb), into=t)
        t = ar.sub(nbytes, w)
        t = ar.mul(t, self.cb, into=t)
        return ar.add(ar.mul(w, self.cq), t, into=t)

    def op_times(self, flop, nbytes, w, dims, exact: bool = True):
        """(max(t_c, t_m) of the bare roofline, combine(t_c, t_m) of the efficiency model) of one op, without the
        per-kernel, per-collective and communication terms. ``exact``: the formulas as written (time_ops);
        else, in a workspace, the same regrouped, with sqrt(t_c² + t_m²) for hypot, whose range the caller
        checks."""
        import numpy as np

        zero = np.float64(0.0)  # numpy semantics (0/0 is NaN, not an exception)
        flop = zero if flop is None else flop
        nbytes = zero if nbytes is None else nbytes
        gemm = isinstance(dims, tuple)
        ar = self.ar
        if exact or ar.ws is None:
            w = zero if w is None else w
            g = gemm_efficiency(self.eff, *dims, low_precision=self.low_precision) if gemm else self.g0
            t_ideal = np.maximum(flop / self.peak, nbytes / self.bw)
            t_c = flop / (self.peak * g)
            t_m = w / (self.bw * self.wq) + (nbytes - w) / (self.bw * self.eff.bandwidth)
            return t_ideal, combine(t_c, t_m, self.p)
        tci = ar.div(flop, self.peak)
        tmi = ar.div(nbytes, self.bw)
        ti = ar.max(tci, tmi, into=tmi)
        sc, arrays = self.gemm_factors(dims) if gemm else (self.inv_g0, ())
        tc = ar.mul(tci, sc, into=tci)
        for a in arrays:
            tc = ar.mul(tc, a, into=tc)
        tm = self.memory_time(nbytes, w)
        p = self.p
        if p == 2.0:  # hypot as sqrt(t_c² + t_m²): libm's hypot is several times slower
            tc = ar.mul(tc, tc, into=tc)
            tm = ar.mul(tm, tm, into=tm)
            return ti, ar.unary(np.sqrt, ar.add(tc, tm, into=tc), into=tc)
        if not np.isfinite(p):
            return ti, ar.max(tc, tm, into=tc)
        if p == 1.0:
            return ti, ar.add(tc, tm, into=tc)
        tc = ar._f(np.power, tc, p, tc)
        tc = ar.add(tc, ar._f(np.power, tm, p, tm), into=tc)
        return ti, ar._f(np.power, tc, 1.0 / p, tc)


def _build(c: _Ctx, B, T, P, logits_tokens, sink, pad: bool = False) -> None:
    """The operations of one forward pass over B sequences × T new tokens with P cached tokens, per device, each
    passed to ``sink(op, copies)`` as soon as it is built (``copies``: identical ops folded into one).

    Lean (``pad=False``): a field is ``None`` where the op has none (no FLOPs, weights or collective) and kernels
    are scalars; with a workspace the op's arrays are scratch, valid only during the sink call. ``pad=True``: the
    public per-op arrays (zeros instead of ``None``, the shapes ``forward_ops`` has always returned)."""
    import numpy as np

    ar = c.ar
    ws = ar.ws
    s, fm = c.s, c.fm
    wb, ab = fm.weight_bytes, ACT_BYTES
    H, L = float(s.H), float(s.L)
    start = ws.mark() if ws is not None else 0
    itp = c.itp

    # ---- per-phase arrays (live until the phase ends)
    M = B if (np.ndim(T) == 0 and T == 1.0) else ar.mul(B, T)  # tokens in this pass
    if logits_tokens is None:
        Mlog = M
    else:
        lt = np.asarray(logits_tokens, dtype=np.float64)
        Mlog = B if (lt.ndim == 0 and lt == 1.0) else ar.mul(B, lt)
    Mtp = ar.mul(M, itp)
    Mlog_tp = Mtp if Mlog is M else ar.mul(Mlog, itp)
    # attention: keys summed over the new queries (window-capped on sliding layers), cached tokens read
    full_layers, sl = float(s.L - s.sliding_layers), float(s.sliding_layers)
    PT = T if (np.ndim(P) == 0 and P == 0.0) else ar.add(P, T)
    keys = _keys_sum(P, T, 0, ar)
    keys = ar.mul(keys, full_layers, into=keys)
    cached = ar.mul(PT, full_layers)
    if sl:
        kw = _keys_sum(P, T, s.window, ar)
        keys = ar.add(keys, ar.mul(kw, sl, into=kw), into=keys)
        mw = ar.min(PT, s.window)
        cached = ar.add(cached, ar.mul(mw, sl, into=mw), into=cached)
    # KV traffic: write T new tokens, read every cached token once per sequence (flash / decode); kernels that
    # do not share a kv head across its query group read it once per query head
    if not fm.kv_shared and s.kv_heads_or_latent:
        reread = c.memo("reread", lambda: ar.div(ar.mul(s.A, itp),
                                                 ar.max(1.0, ar.unary(np.floor, ar.div(s.kv_heads_or_latent, c.tp)))))
        cached = ar.mul(cached, reread, into=cached)
    if pad or s.kv_heads_or_latent:
        kvtok = c.memo("kvtok", lambda: kv_token_layer_bytes(s, fm.kv_bytes, c.tp) if pad else ar.mul(
            ar.max(1.0, ar.unary(np.floor, ar.div(s.kv_heads_or_latent, c.tp))), 2.0 * s.d * fm.kv_bytes))
    else:
        kvtok = s.kv_latent_elems * fm.kv_bytes  # MLA: one latent per token and layer, on every device
    kv_io = ar.add(cached, ar.mul(T, L), into=cached)
    kv_io = ar.mul(B, kv_io, into=kv_io)
    kv_io = ar.mul(kv_io, kvtok, into=kv_io)
    Bk = ar.mul(B, keys)
    Bk = ar.mul(Bk, itp, into=Bk)  # B·heads·keys / A
    score_flop = ar.mul(Bk, 2.0 * s.A * s.qk_dim)
    same_width = s.v_dim == s.qk_dim and not pad
    value_flop = score_flop if same_width else ar.mul(Bk, 2.0 * s.A * s.v_dim)
    half = ar.mul(Mtp, s.A * (s.qk_dim + s.v_dim) * ab * L)  # q_io: read q, write the attention output
    half = ar.add(kv_io, half, into=half)
    half = ar.mul(half, 0.5, into=half)  # kv_io/2 + q_io/2 per product
    if not fm.flash:
        smat = ar.mul(Bk, s.A * ab)  # the materialized score/probability matrix, all layers
        sbytes = ar.add(half, smat)
    if s.moe_layers:
        Lm, E, k = float(s.moe_layers), float(s.experts), float(s.experts_per_token)
        # a batch of n tokens with top-k routing touches E·(1 − (1 − k/E)^n) experts (uniform routing)
        untouched = (1.0 - k / E) ** M if pad else _pow(ar, 1.0 - k / E, M)
        touched = ar.mul(ar.sub(1.0, untouched, into=untouched), E, into=untouched)
        m_e = ar.mul(M, k)
        m_e = ar.div(m_e, touched, into=m_e)  # tokens per touched expert
    c.new_phase(M, Mlog, *((m_e,) if s.moe_layers else ()))
    level = ws.mark() if ws is not None else 0

    # ---- the ops, in order; with a workspace each op's arrays are released once the sink has them
    def z(x, like=M):
        """Public view: x + 0·like (the per-op arrays have always had at least the shape of ``like``)."""
        return x if not pad else (0.0 if x is None else x) + 0.0 * like

    def op(name, flop, nbytes, weight_bytes, kernels, like=M, copies=1, **kw):
        if pad:
            kw.setdefault("comm_bytes", 0.0)
            kw.setdefault("collectives", 0.0)
        else:
            kw.setdefault("comm_bytes", None)
            kw.setdefault("collectives", None)
        sink(Op(name, flop=flop, bytes=nbytes, weight_bytes=weight_bytes, kernels=z(kernels, like), **kw), copies)
        if ws is not None:
            ws.release(level)

    def stream(name, nbytes, kernels, flop=None):
        op(name, z(flop), z(nbytes), z(None), kernels)

    def gemm(name, m, m_tp, split, fixed, layers, params, split_n=True):
        """y[m×n] = x[m×k]·W[k×n] with W's split side (split/tp) on this device: 2mnk FLOPs; reads W and x,
        writes y."""
        n = c.split(split)
        w = c.split(params * wb * layers)

        def act_per_row():
            x = ar.add(n, fixed)
            return ar.mul(x, ab * layers, into=x)

        nbytes = ar.mul(m, c.memo(("act", split, fixed, layers), act_per_row))
        nbytes = ar.add(nbytes, w, into=nbytes)
        op(name, ar.mul(m_tp, 2.0 * split * fixed * layers), nbytes, w, layers, like=m,
           gemm_eff=(m, n, fixed) if split_n else (m, fixed, n))

    # embedding gather: one row per token (16-bit activations written)
    stream("embedding", ar.mul(M, H * (wb + ab)), 1.0)
    stream("norms", ar.mul(M, 4.0 * H * ab * L), 2.0 * L, flop=ar.mul(M, 8.0 * H * L))
    gemm("qkv_proj", M, Mtp, s.attn_in_params / H, H, L, s.attn_in_params)

    # rope + 2 residual adds: elementwise kernels on q/k and on the residual stream
    def elementwise_per_row():
        x = ar.mul(c.split(s.attn_in_params / H), 2.0)
        x = ar.add(x, 6.0 * H, into=x)
        return ar.mul(x, ab * L, into=x)

    stream("elementwise", ar.mul(M, c.memo("elementwise", elementwise_per_row)), 3.0 * L)
    if fm.flash:
        if same_width:  # attn_value repeats attn_score (same FLOPs and bytes, no kernel of its own)
            op("attn_score", score_flop, half, None, L, copies=2)
        else:
            op("attn_score", score_flop, half, z(None), L)
            op("attn_value", value_flop, half if not pad else half + 0.0, z(None), 0.0)
    else:
        op("attn_score", score_flop, sbytes, z(None), L)
        op("attn_softmax", ar.mul(Bk, 5.0 * s.A), ar.mul(smat, 2.0), z(None), L)
        op("attn_value", value_flop, sbytes if not pad else half + smat, z(None), L)
    gemm("o_proj", M, Mtp, s.attn_out_params / H, H, L, s.attn_out_params, split_n=False)

    if s.dense_layers:
        Ld = float(s.dense_layers)
        gemm("mlp_up", M, Mtp, float(s.ffn_in), H, Ld, H * s.ffn_in)
        stream("mlp_act", ar.mul(Mtp, (s.ffn_in + s.ffn) * ab * Ld), Ld, flop=ar.mul(Mtp, 4.0 * s.ffn * Ld))
        gemm("mlp_down", M, Mtp, float(s.ffn), H, Ld, s.ffn * H, split_n=False)
    if s.moe_layers:
        w = H * E * wb * Lm
        nbytes = ar.mul(M, (H + E) * ab * Lm)
        op("moe_router", ar.mul(M, 2.0 * E * H * Lm), ar.add(nbytes, w, into=nbytes), w, Lm, gemm_eff=(M, E, H))
        for name, n_, k_ in (("moe_up", s.expert_in, H), ("moe_down", H, s.expert_ffn)):
            w = ar.mul(touched, c.split(n_ * k_ * wb * Lm))
            nbytes = ar.mul(Mtp, k * (n_ + k_) * ab * Lm)
            nbytes = ar.add(nbytes, w, into=nbytes)
            op(name, ar.mul(Mtp, 2.0 * k * n_ * k_ * Lm), nbytes, w, Lm, gemm_eff=(m_e, c.split(float(n_)), k_))
        stream("moe_act", ar.mul(Mtp, k * (s.expert_in + s.expert_ffn) * ab * Lm), Lm)
        if s.shared_ffn:
            gemm("shared_up", M, Mtp, float(s.shared_in), H, Lm, H * s.shared_in)
            gemm("shared_down", M, Mtp, float(s.shared_ffn), H, Lm, s.shared_ffn * H, split_n=False)

    # TP all-reduce after attention and after the MLP: payload B·T·H activations
    allreduce = c.memo("allreduce", lambda: np.where(c.tp > 1, 1.0, 0.0))
    op("tp_allreduce", z(None), z(None), z(None), 0.0,
       comm_bytes=ar.mul(M, c.memo("allreduce_bytes", lambda: ar.mul(allreduce, 2.0 * L * H * ab))),
       collectives=z(c.memo("allreduce_n", lambda: ar.mul(allreduce, 2.0 * L))))
    stream("final_norm", ar.mul(Mlog, 2.0 * H * ab), 1.0)
    gemm("lm_head", Mlog, Mlog_tp, float(s.V), H, 1.0, s.lm_head_params)
    if ws is not None:
        ws.release(start)


def _pow(ar: Arith, base: float, M):
    """base**M for an array exponent, as exp(M·ln base): several times faster than pow(), same to ~1e-15."""
    import math

    import numpy as np

    if not 0.0 < base < 1.0:
        return ar._f(np.power, base, M, None)
    x = ar.mul(M, math.log(base))
    return ar.unary(np.exp, x, into=x)


def forward_ops(s: Shape, fm: Formats, batch, new_tokens, past, tp, logits_tokens=None) -> list[Op]:
    """Operations of one forward pass over B sequences × T new tokens with P cached tokens, per device."""
    import numpy as np

    f64 = np.float64
    B, T, P = (np.asarray(x, dtype=f64) for x in (batch, new_tokens, past))
    ops: list[Op] = []
    _build(_Ctx(s, None, fm, None, tp), B, T, P, logits_tokens, lambda op, copies: ops.append(op), pad=True)
    return ops


def time_ops(ops: list[Op], roofs: Roofs, fm: Formats, eff: Efficiency, tp) -> None:
    """Fill ``t_ideal`` (pure roofline) and ``t_est`` (efficiency model) of every op, in place."""
    c = _Ctx(None, roofs, fm, eff, tp)
    ring = c.ring()
    for op in ops:
        t_ideal, t_est = c.op_times(op.flop, op.bytes, op.weight_bytes, op.gemm_eff)
        comm = ring * op.comm_bytes
        op.t_ideal = t_ideal + comm / c.link
        op.t_est = (t_est + op.kernels * eff.kernel_overhead_s + comm / (c.link * eff.link)
                    + op.collectives * eff.collective_latency_s)


class _Sums:
    """The sink that sums lean ops as they are built: FLOPs, bytes and (with ``timed``) both times.

    ``outs``: arrays (of the block's length) the four sums are written into; else workspace arrays."""

    def __init__(self, c: _Ctx, outs=None, timed: bool = True):
        ws = c.ar.ws
        self.c, self.timed = c, timed
        n = 4 if timed else 2
        if outs is None:
            outs = [ws.get() for _ in range(n)] if ws is not None else [None] * n
        self.outs = list(outs[:n])
        self.sums = [0.0] * n  # flop, bytes, t_ideal, t_est
        self.mem = 0.0  # bytes of memory-only ops without weights (their times are linear in bytes)
        self.mem_buf = ws.get() if (ws is not None and timed) else None
        self.const = c.eff.step_overhead_s if timed else 0.0

    def _acc(self, i, x, copies=1):
        """sums[i] += copies·x (in place once sums[i] is an array)."""
        ar, acc = self.c.ar, self.sums[i]
        for _ in range(copies):
            if getattr(acc, "ndim", 0):
                acc = ar.add(acc, x, into=acc)
            elif getattr(x, "ndim", 0) and getattr(self.outs[i], "ndim", 0):
                acc = ar.add(x, acc, into=self.outs[i])
            else:
                acc = acc + x
        self.sums[i] = acc

    def __call__(self, op: Op, copies: int = 1) -> None:
        c, eff = self.c, self.c.eff
        f, b, w = op.flop, op.bytes, op.weight_bytes
        if f is not None:
            self._acc(0, f, copies)
        if b is not None:
            self._acc(1, b, copies)
        if not self.timed:
            return
        self.const += op.kernels * eff.kernel_overhead_s
        if f is None and c.memory_only:  # combine(0, t_m) = t_m
            if b is None:
                pass
            elif w is None:
                for _ in range(copies):
                    self.mem = (c.ar.add(self.mem, b, into=self.mem_buf) if not getattr(self.mem, "ndim", 0)
                                else c.ar.add(self.mem, b, into=self.mem))
            else:
                self._acc(2, c.ar.div(b, c.bw), copies)
                self._acc(3, c.memory_time(b, w), copies)
        else:
            t_ideal, t_est = c.op_times(f, b, w, op.gemm_eff, exact=False)
            self._acc(2, t_ideal, copies)
            self._acc(3, t_est, copies)
        if op.comm_bytes is not None:
            comm = c.ar.mul(c.ring(), op.comm_bytes)
            self._acc(2, c.ar.div(comm, c.link))
            self._acc(3, c.ar.div(comm, c.link * eff.link, into=comm))
        if op.collectives is not None:
            self._acc(3, c.ar.mul(op.collectives, eff.collective_latency_s))

    def result(self):
        """(flop, bytes[, t_ideal, t_est]), or None where a sum is not finite (overflow, NaN: the regrouped
        formulas need not give the NaN the formulas as written give) or t_est is so small that sqrt(t_c² + t_m²)
        may have underflowed: the caller then uses _reference."""
        import numpy as np

        c = self.c
        if self.timed:
            if getattr(self.mem, "ndim", 0) or self.mem:
                self._acc(2, c.ar.div(self.mem, c.bw))
                self._acc(3, c.ar.mul(self.mem, c.cb))
            self._acc(3, self.const)
            if np.size(self.sums[3]) and not np.min(self.sums[3]) >= _TINY_TIME:
                return None
        for x in self.sums:
            if np.size(x) and not np.max(x) < np.inf:
                return None
        return self.sums


def _phase_sums(c: _Ctx, B, T, P, logits_tokens=None, outs=None):
    """(flop, bytes, t_ideal, t_est) of one phase (t_est with the step overhead), or None: see _Sums.result."""
    sums = _Sums(c, outs)
    _build(c, B, T, P, logits_tokens, sums)
    return sums.result()


def _lean_ok(*xs, tp) -> bool:
    """Whether a block's inputs are finite and non-negative (and tp > 0): where the lean sums' shortcuts are
    exact (an op without FLOPs costs its memory time, padding zeros are zeros). Otherwise _reference."""
    import numpy as np

    for x in (*xs, tp):
        if np.size(x) and not (np.min(x) >= 0.0 and np.max(x) < np.inf):
            return False
    return not np.size(tp) or bool(np.min(tp) > 0.0)


def _reference(s, roofs, fm, eff, batch, new_tokens, past, tp, logits_tokens=None):
    """(flop, bytes, t_ideal, t_est) summed over the public per-op arrays, as ``phase`` has always summed them."""
    ops = _timed_ops(s, roofs, fm, eff, batch, new_tokens, past, tp, logits_tokens)
    return (sum(o.flop for o in ops), sum(o.bytes for o in ops), sum(o.t_ideal for o in ops),
            sum(o.t_est for o in ops) + eff.step_overhead_s)


class Phase:
    """One forward pass: totals (arrays), and ``ops``, the per-op breakdown, computed on first access."""

    def __init__(self, flop, bytes, t_ideal, t_est, ops: list[Op] | None = None):
        self.flop, self.bytes, self.t_ideal, self.t_est = flop, bytes, t_ideal, t_est
        self._ops, self._make_ops = ops, None

    @property
    def ops(self) -> list[Op]:
        if self._ops is None and self._make_ops is not None:
            self._ops, self._make_ops = self._make_ops(), None
        return self._ops

    @ops.setter
    def ops(self, value: list[Op]) -> None:
        self._ops, self._make_ops = value, None

    @property
    def intensity(self):
        return self.flop / self.bytes

    def __repr__(self) -> str:
        return f"Phase(flop={self.flop!r}, bytes={self.bytes!r}, t_ideal={self.t_ideal!r}, t_est={self.t_est!r})"


def _timed_ops(s, roofs, fm, eff, batch, new_tokens, past, tp, logits_tokens=None) -> list[Op]:
    ops = forward_ops(s, fm, batch, new_tokens, past, tp, logits_tokens)
    time_ops(ops, roofs, fm, eff, tp)
    return ops


def phase(s: Shape, roofs: Roofs, fm: Formats, eff: Efficiency, batch, new_tokens, past, tp, logits_tokens=None) -> Phase:
    """One forward pass: ops timed, plus totals (step overhead added to the estimate only)."""
    import numpy as np

    f64 = np.float64
    args = [np.asarray(x, dtype=f64) for x in (batch, new_tokens, past, tp)]
    if logits_tokens is not None:
        args.append(np.asarray(logits_tokens, dtype=f64))

    def block(ws, outs, B, T, P, tp_, *lt):
        lt = lt[0] if lt else None
        r = None
        if _lean_ok(B, T, P, *(() if lt is None else (lt,)), tp=tp_):
            r = _phase_sums(_Ctx(s, roofs, fm, eff, tp_, ws), B, T, P, lt, outs)
        return r if r is not None else _reference(s, roofs, fm, eff, B, T, P, tp_, lt)

    ph = Phase(*blockwise(block, args, 4))
    ph._make_ops = lambda: _timed_ops(s, roofs, fm, eff, batch, new_tokens, past, tp, logits_tokens)
    return ph


def inference(s: Shape, roofs: Roofs, fm: Formats, eff: Efficiency, batch, prompt, gen, tp):
    """TTFT, TPOT and throughput for B sequences of ``prompt`` + ``gen`` tokens; ideal and estimated.

    TTFT = one prefill pass over the prompt (logits for the last token only). TPOT = one decode pass at the
    mean cache length over the generation, P = prompt + gen/2 (exact for the linear KV term).
    End-to-end output tokens/s = B·gen / (TTFT + (gen − 1)·TPOT) (gpt-fast counts wall time incl. prefill, §0).
    """
    import numpy as np

    B, S, G = (np.asarray(x, dtype=np.float64) for x in (batch, prompt, gen))

    def block(ws, outs, B, S, G, tp_):
        c = _Ctx(s, roofs, fm, eff, tp_, ws)
        outs = outs or [None] * 12
        pre = dec = None
        if _lean_ok(B, S, G, tp=tp_):
            pre = _phase_sums(c, B, S, 0.0, 1.0, outs[0:4])
            dec = _phase_sums(c, B, 1.0, c.ar.add(S, c.ar.div(G, 2.0)), None, outs[4:8])
        if pre is None:
            pre = _reference(s, roofs, fm, eff, B, S, 0.0 * S, tp_, logits_tokens=1.0)
        if dec is None:
            dec = _reference(s, roofs, fm, eff, B, 1.0 + 0 * S, S + G / 2.0, tp_)
        res = [*pre, *dec]
        for (ttft, tpot), o in (((pre[3], dec[3]), outs[8:10]), ((pre[2], dec[2]), outs[10:12])):
            total = c.ar.mul(c.ar.sub(G, 1.0, into=o[0]), tpot, into=o[0])
            total = c.ar.add(ttft, total, into=total)
            rate = c.ar.mul(B, G, into=o[1])
            res += [total, c.ar.div(rate, total, into=rate)]
        return res

    r = blockwise(block, [B, S, G, np.asarray(tp, dtype=np.float64)], 12)
    pre, dec = Phase(*r[0:4]), Phase(*r[4:8])
    pre._make_ops = lambda: _timed_ops(s, roofs, fm, eff, B, S, 0.0 * S, tp, logits_tokens=1.0)
    dec._make_ops = lambda: _timed_ops(s, roofs, fm, eff, B, 1.0 + 0 * S, S + G / 2.0, tp)
    out = {}
    for key, ttft, tpot, total, rate in (("est", pre.t_est, dec.t_est, r[8], r[9]),
                                          ("ideal", pre.t_ideal, dec.t_ideal, r[10], r[11])):
        out[key] = {"ttft_s": ttft, "tpot_s": tpot, "total_s": total, "output_tokens_per_s": rate}
    return pre, dec, out


def compute_bound_batch(s: Shape, roofs: Roofs, fm: Formats, context, tp):
    """Smallest batch at which a decode step's arithmetic intensity reaches the ridge point.

    Intensity(B) = a·B / (W + c·B) with a, c the FLOPs and bytes one more sequence adds and W the bytes
    independent of B (weights); solve a·B = R·(W + c·B). Infinite when a ≤ R·c (KV reads dominate; MoE
    touched experts make this approximate).
    """
    import numpy as np

    R = roofs.ridge_point

    def sums(c, B, C):
        r = None
        if _lean_ok(C, tp=c.tp):
            acc = _Sums(c, timed=False)
            _build(c, np.float64(B), 1.0, C, None, acc)
            r = acc.result()
        if r is None:  # the op arrays summed as written
            ops = forward_ops(s, fm, B, 1.0, C, c.tp)
            r = sum(o.flop for o in ops), sum(o.bytes for o in ops)
        return r

    def block(ws, outs, C, tp_):
        c = _Ctx(s, None, fm, None, tp_, ws)
        (f1, b1), (f2, b2) = sums(c, 1.0, C), sums(c, 2.0, C)
        a, cb = f2 - f1, b2 - b1
        W = b1 - cb
        denom = a - R * cb
        with np.errstate(divide="ignore", invalid="ignore"):
            return (np.where(denom > 0, np.ceil(R * W / np.where(denom > 0, denom, 1.0)), np.inf),)

    f64 = np.float64
    return blockwise(block, [np.asarray(context, dtype=f64), np.asarray(tp, dtype=f64)], 1)[0]
