"""The cost of a mixture-of-experts layer, per device, for inference and training alike: which experts a pass
reaches, how many tokens each receives, the grouped GEMMs over them, routing, the token permutation around them,
the load imbalance between expert-parallel ranks and the dispatch/combine exchange.

Notation (:mod:`aicalc.core.forward`): M tokens of one attention group in this pass, E routed experts, k experts
per token, H hidden, F_e an expert's FFN width. A replica's experts are split over ``ep`` ranks (expert
parallelism) and each expert's matrices over ``etp`` ranks (expert tensor parallelism); the experts of one EP
group serve the tokens of ``sources`` attention groups: in training the EP ranks are data-parallel ranks with M
tokens each (Megatron-Core, sources = ep); in serving, a replica's attention-DP groups (SGLang/TensorRT-LLM
attention DP, sources = attention_dp; 1 under plain TP, where every rank holds every token).

Sources of the terms:

- Experts reached by n tokens under uniform top-k routing: ``E·(1 − (1 − k/E)^n)`` (each expert is missed by a
  token with probability 1 − k/E); only those experts' weights are read.
- Grouped GEMM (CUTLASS grouped GEMM, DeepGEMM, TensorRT-LLM's MoE plugin, Megatron-Core's GroupedMLP): one
  kernel runs every reached expert's m_e × n × k product, each expert's rows padded to the kernel's row tile;
  the tile count, not the FLOPs, sets the work (:func:`padded_rows`). Priced like a GEMM of the padded per-expert
  shape at ``grouped_gemm_efficiency`` of a dense GEMM's efficiency (:mod:`aicalc.core.pricing`).
- Router: an H × E GEMM and a top-k over E scores per token; permutation: the k copies of each token gathered
  into expert order before the up projection (read H, write k·H) and scattered back with the router weights
  after the down projection (read k·H, write H) — Megatron-Core's ``moe_utils.permute``/``unpermute``, vLLM's
  and TensorRT-LLM's fused-MoE ``moe_align``/``finalize`` kernels.
- Load imbalance: the busiest of ``ep`` ranks sets the pace of the layer; with uniform routing a rank's load is
  binomial, and the expected maximum of ep such loads is about the mean plus ``σ·√(2 ln ep)`` (the Gaussian
  extreme-value bound, e.g. Kamath, "Bounds on the expectation of the maximum of samples from a Gaussian").
- Dispatch and combine (GShard, Lepikhin et al. 2020 §2.2; DeepEP): each routed copy that leaves its rank crosses
  the link once each way: ``k·(ep − 1)/ep`` copies of H activations per token of the rank, per direction. Under
  plain TP attention the experts' partial outputs are summed by the layer's TP all-reduce instead (vLLM's
  expert parallelism over TP ranks), so no exchange is added.
"""

from __future__ import annotations


def curve_width(s, name: str) -> float:
    """The width the fine-grained-expert curve (``grouped_gemm_half_dim``) reads for a grouped GEMM: the expert's
    FFN width w for the down projection, half the up projection's width for the up (w for a gated expert's 2w).
    The curve's extra time, flop·c/(peak·g·w), is work around the experts per token copy (docs/roofline.md), not
    the GEMM's: a token copy is dispatched, permuted and combined alike whether its expert is gated (SwiGLU: up
    2w) or not (Nemotron 3 Nano's squared ReLU: up w), so every copy carries 6·H·c, 2·H·c per w-wide matrix of a
    gated expert (the experts the curve was fitted on); read at w, a non-gated expert's copy carried 4·H·c."""
    return s.expert_in / 2.0 if name == "moe_up" else float(s.expert_ffn)


def experts_touched(E: float, k: float, tokens, ep=1.0, redundant=0.0):
    """Experts of one MoE layer a device reads in a pass where ``tokens`` tokens are routed over the E experts
    of its EP group: its E/ep experts, each reached with probability 1 − (1 − k/E)^tokens (the power as an exp);
    with ``redundant`` R extra replicas its (E + R)/ep expert slots, each reached as its expert is."""
    import numpy as np

    ep = np.asarray(ep, dtype=np.float64)
    n = np.asarray(tokens, dtype=np.float64)
    return (E + redundant) / ep * (-np.expm1(n * np.log1p(-k / E)) if k < E else 1.0 + 0.0 * n)


def imbalance(copies, ep):
    """Expected load of the busiest of ``ep`` EP ranks over the mean, when ``copies`` routed token copies are spread
    uniformly: each rank's load is Binomial(copies, 1/ep); E[max] ≈ μ + σ·√(2 ln ep) (module doc); 1 for ep = 1."""
    import numpy as np

    ep = np.asarray(ep, dtype=np.float64)
    n = np.maximum(np.asarray(copies, dtype=np.float64), 1e-9)
    p = 1.0 / np.maximum(ep, 1.0)
    mean = n * p
    spread = np.sqrt(n * p * (1.0 - p) * 2.0 * np.log(np.maximum(ep, 1.0)))
    return np.where(ep > 1.0, 1.0 + spread / np.maximum(mean, 1e-9), 1.0)


def padded_rows(m, tile, tile_min=0.0):
    """Rows a grouped GEMM computes for an expert that receives ``m`` rows on average, each expert's rows padded
    to the kernel's row tile. A fixed ``tile`` (``tile_min`` 0): at least one tile per reached expert, and half a
    tile of padding on average beyond (a uniform remainder). With ``tile_min`` > 0 the kernel picks its row tile
    from the tokens per expert, the next power of two between ``tile_min`` and ``tile`` (TensorRT-LLM's and
    FlashInfer's TRTLLM-gen MoE ``tile_tokens_dim``, triton_kernels' ``block_m``, vLLM's fused-MoE
    ``BLOCK_SIZE_M`` configs per batch size): rows below the largest tile pad by √2 on average (the geometric mean
    of 1…2 for a power-of-two tile over log-uniform row counts), never by more than half the largest tile;
    ``tile`` 0: no padding."""
    import numpy as np

    m = np.asarray(m, dtype=np.float64)
    if not tile:
        return m
    if tile_min > 0:
        return np.maximum(float(tile_min), m + np.minimum((np.sqrt(2.0) - 1.0) * m, tile / 2.0))
    return np.maximum(float(tile), m + tile / 2.0)


def saturation_tokens(E: float, k: float, ep=1.0, redundant=0.0) -> float:
    """A count of tokens routed over an EP group from which on :func:`experts_touched` is every expert slot
    exactly: (1 − k/E)^n below 2⁻⁵⁴, so that 1 − (1 − k/E)^n rounds to 1 (checked on that very expression, which
    only grows with n)."""
    import math

    if k >= E:
        return 0.0
    full = (E + redundant) / float(ep)
    n = math.ceil(54.0 * math.log(2.0) / -math.log1p(-k / E))
    while float(experts_touched(E, k, float(n), ep, redundant)) != full:
        n *= 2
    return float(n)


def padded_from(tile: float, tile_min: float = 0.0) -> tuple[float, float]:
    """(m0, pad): :func:`padded_rows` is m + pad for every m ≥ m0 (past the smallest tile and the √2 growth of
    the tile choice), with one row of margin."""
    import math

    if not tile:
        return 0.0, 0.0
    if tile_min > 0:
        return max(tile / (2.0 * (math.sqrt(2.0) - 1.0)), tile_min - tile / 2.0) + 1.0, tile / 2.0
    return tile / 2.0 + 1.0, tile / 2.0


def saturated_ops(s, fm, M, tp, *, etp=None, sources=1.0, redundant=0.0):
    """The routed-expert ops of :func:`moe_ops` (permute, unpermute, grouped up/down projections, activation)
    where one EP rank holds every expert and the pass reaches all of them (M·sources tokens past
    :func:`saturation_tokens`): their FLOPs and bytes are then numbers per token times M and their weights
    fixed, so each is an affine op over M (:class:`aicalc.core.forward.Op` ``affine``; a grouped GEMM's rows per
    expert ``per_expert``·M). The dispatch/combine exchange is nothing on one rank and is left out."""
    from aicalc.core.forward import ACT_BYTES, Op

    ab = ACT_BYTES
    H, Lm = float(s.H), float(s.moe_layers)
    E, k = float(s.experts), float(s.experts_per_token)
    etp = float(tp if etp is None else etp)
    touched = (E + redundant) / 1.0  # every expert slot of the one rank
    rows = float(sources) * k  # routed copies per token of this device's group (no imbalance on one rank)
    perm = rows * H * (1.0 + 1.0 / k)
    wbe = fm.expert_bytes or fm.weight_bytes

    def linear(name, kind, flop, nbytes, weights=0.0, kernels=1.0, **kw):
        return Op(name, kind, flop=None, bytes=None, weight_bytes=float(weights), kernels=kernels * Lm, layers=Lm,
                  affine=(M, float(flop), float(nbytes), 0.0), **kw)

    ops = [linear("moe_permute", "stream", 0.0, perm * ab * Lm, kernels=2.0),
           linear("moe_unpermute", "stream", 2.0 * rows * H * Lm, perm * ab * Lm)]
    for name, n_, k_ in (("moe_up", s.expert_in, H), ("moe_down", H, s.expert_ffn)):
        n_dev = n_ / etp if name == "moe_up" else float(n_)
        k_dev = float(k_) if name == "moe_up" else k_ / etp
        op = linear(name, "gemm", 2.0 * rows * n_dev * k_dev * Lm, rows * (n_dev + k_dev) * ab * Lm,
                    touched * Lm * n_ * k_ / etp * wbe, kernels=1.0, dims=(M * (rows / touched), n_dev, k_dev),
                    quantized=fm.expert_quantized, bytes_per_weight=wbe, grouped=True, compute=fm.expert_compute,
                    expert_width=curve_width(s, name))
        op.per_expert = rows / touched
        ops.append(op)
    ops.append(linear("moe_act", "stream", rows * 4.0 * s.expert_ffn / etp * Lm,
                      rows / etp * (s.expert_in + s.expert_ffn) * ab * Lm))
    return ops


def moe_ops(s, fm, M, tp, *, ep=1.0, etp=None, sources=None, zero=0.0, redundant=0.0, lean=False):
    """The operations of the MoE layers of one pass on one device (see the module doc), as
    :class:`aicalc.core.forward.Op`: router, top-k, permute, grouped up/down projections, activation, unpermute,
    shared experts, and the dispatch/combine exchange where tokens are not already on every rank.

    ``M`` tokens of this device's attention group, ``tp`` its attention TP; ``ep`` ranks share the experts, each
    expert split over ``etp`` (default ``tp``); ``sources`` attention groups feed one EP group (default ``ep``:
    training's EP over data-parallel ranks). ``redundant`` R extra expert replicas (EPLB): each rank holds
    (E + R)/ep expert slots, a replicated expert's tokens split over its replicas; routing here is uniform, so the
    replicas add slots (weights to hold and read) and spread the same rows thinner — the hot experts they relieve
    under skewed routing are outside this model. ``lean``: the router, top-k and shared experts, linear in M,
    as numbers per token (:class:`aicalc.core.forward.Op` ``affine``) where M is an array and ``tp`` one number."""
    import numpy as np

    from aicalc.core.forward import ACT_BYTES, Op

    f64 = np.float64
    ab = ACT_BYTES
    H, Lm = float(s.H), float(s.moe_layers)
    E, k = float(s.experts), float(s.experts_per_token)
    ep = np.asarray(ep, dtype=f64)
    etp = np.asarray(tp if etp is None else etp, dtype=f64)
    src = ep if sources is None else np.asarray(sources, dtype=f64)
    routed = M * src  # tokens routed over the EP group's experts
    copies = routed * k / ep  # routed copies one EP rank receives on average
    imb = imbalance(routed * k, ep)
    touched = experts_touched(E, k, routed, ep, redundant) + zero
    m_e = copies * imb / np.where(touched > 0, touched, 1.0)  # rows per reached expert on the busiest rank
    wbe, wb = fm.expert_bytes or fm.weight_bytes, fm.weight_bytes
    # the routed experts' width: H, or a latent MoE's latent (Nemotron 3 Super: fc1_latent_proj H → latent before the
    # dispatch, fc2_latent_proj latent → H after the combine, transformers NemotronHMoE.forward; Megatron-Core's
    # moe_latent_size: "reducing routed parameter loads and all-to-all traffic by a factor of d/ℓ")
    latent = s.arch.moe.latent if s.arch.moe is not None else None
    W = float(latent or H)
    ops = []

    def add(name, kind, flop, nbytes, weights=0.0, kernels=1.0, **kw):
        ops.append(Op(name, kind, flop=flop + zero, bytes=nbytes + weights + zero, weight_bytes=weights + zero,
                      kernels=kernels * Lm + zero, layers=Lm, **kw))

    per_token = lean and isinstance(M, np.ndarray) and M.ndim > 0 and np.ndim(tp) == 0

    def linear(name, kind, flop, nbytes, weights=0.0, kernels=1.0, **kw):
        """An op whose FLOPs and bytes (beyond its weights) are ``flop`` and ``nbytes`` per token."""
        ops.append(Op(name, kind, flop=None, bytes=None, weight_bytes=float(weights), kernels=kernels * Lm,
                      layers=Lm, affine=(M, float(flop), float(nbytes), 0.0), **kw))

    if per_token:
        linear("moe_router", "gemm", 2.0 * E * H * Lm, (E + H) * ab * Lm, Lm * H * E * wb, dims=(M, E, H),
               quantized=fm.quantized, bytes_per_weight=wb)
        linear("moe_topk", "stream", E * 4.0 * Lm, E * 4.0 * Lm)
    else:
        add("moe_router", "gemm", 2.0 * M * E * H * Lm, M * (E + H) * ab * Lm, Lm * H * E * wb,
            dims=(M + zero, E + zero, H + zero), quantized=fm.quantized, bytes_per_weight=wb)
        add("moe_topk", "stream", M * E * 4.0 * Lm, M * E * 4.0 * Lm)
    # gather the copies this device's grouped GEMM runs into expert order (read H per token, write H per copy) and
    # scatter them back weighted (read H per copy, write H per token); under TP attention every rank permutes all
    # of its group's tokens (activations are replicated), under attention DP the copies it received
    rows = copies * imb  # token copies on the busiest rank
    perm = rows * W * (1.0 + 1.0 / k)
    add("moe_permute", "stream", 0.0, perm * ab * Lm, kernels=2.0)
    add("moe_unpermute", "stream", 2.0 * rows * W * Lm, perm * ab * Lm)
    for name, n_, k_ in (("moe_up", s.expert_in, W), ("moe_down", W, s.expert_ffn)):
        n_dev = (n_ / etp) if name == "moe_up" else n_ + 0.0 * etp
        k_dev = k_ if name == "moe_up" else k_ / etp
        w = touched * Lm * n_ * k_ / etp * wbe
        ops.append(Op(name, "gemm", flop=2.0 * rows * n_dev * k_dev * Lm + zero,
                      bytes=rows * (n_dev + k_dev) * ab * Lm + w + zero, weight_bytes=w + zero, kernels=Lm + zero,
                      dims=(m_e, n_dev + zero, k_dev + zero), layers=Lm, quantized=fm.expert_quantized,
                      bytes_per_weight=wbe, grouped=True, compute=fm.expert_compute,
                      expert_width=curve_width(s, name)))
    add("moe_act", "stream", copies * imb * 4.0 * s.expert_ffn / etp * Lm,
        copies * imb / etp * (s.expert_in + s.expert_ffn) * ab * Lm)
    def dense(name, n_, k_):
        """A dense linear on the group's own tokens: ``n_`` outputs from ``k_`` inputs on each device."""
        if per_token:
            linear(name, "gemm", 2.0 * n_ * k_ * Lm, (n_ + k_) * ab * Lm, Lm * n_ * k_ * wb, dims=(M, n_, k_),
                   quantized=fm.quantized, bytes_per_weight=wb)
        else:
            add(name, "gemm", 2.0 * M * n_ * k_ * Lm, M * (n_ + k_) * ab * Lm, Lm * n_ * k_ * wb,
                dims=(M + zero, n_ + zero, k_ + zero), quantized=fm.quantized, bytes_per_weight=wb)

    if s.shared_ffn:  # always-active experts: a dense FFN on the group's own tokens, split over its tp ranks
        dense("shared_up", s.shared_in / tp, H)
        dense("shared_down", H, s.shared_ffn / tp)
    if latent:  # the two latent projections: dense linears on the group's own tokens, split over its tp ranks
        dense("moe_latent_in", W / tp, H)
        dense("moe_latent_out", H, W / tp)
    # dispatch + combine where the EP group gathers tokens from other groups (attention DP, training's EP over DP)
    # (its tokens' bytes per copy; aicalc.core.pricing prices the copies on the links the EP group spans:
    # aicalc.core.collectives.moe_alltoall_copies, EP ranks etp chips apart)
    exchange = np.where((ep > 1.0) & (src > 1.0), 1.0, 0.0)
    token_bytes = M / tp * W * ab  # per direction per layer per device, one copy of each token (its latent)
    moe = s.arch.moe
    ops.append(Op("moe_alltoall", "alltoall", flop=zero, bytes=zero, weight_bytes=zero, kernels=zero,
                  comm_bytes=2.0 * token_bytes * Lm * exchange + zero, collectives=2.0 * Lm * exchange + zero,
                  layers=Lm, dims=(k, ep, etp, float(moe.n_group if moe else 1), float(moe.topk_group if moe else 1))))
    return ops

