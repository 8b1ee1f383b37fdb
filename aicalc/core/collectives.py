"""Collectives priced on the links their group spans.

Ranks are laid out TP innermost, then CP, EP inside DP, and PP outermost (Megatron-LM's default order), so a
group of ``n`` ranks whose members are ``stride`` ranks apart spans n·stride consecutive ranks. Inside one
scale-up domain (an NVLink/NVSwitch node, a TPU pod's ICI) a ring all-reduce moves ``2(n − 1)/n`` of the payload
per rank over the scale-up link (Patarasuk & Yuan 2009). A group spanning several domains runs hierarchically
(NCCL's intra-node reduce-scatter, inter-node exchange, intra-node all-gather; XLA's ICI/DCN split): the
``g`` members inside one domain reduce over the scale-up link, and each of them exchanges only its 1/g share
across the ``n/g`` domains over its own scale-out NIC (one NIC per GPU in DGX systems), in parallel.
An all-gather or a reduce-scatter alone is half of an all-reduce.

MoE all-to-alls (:func:`moe_alltoall_copies`): each token goes to the EP ranks of its k experts. Across scale-up
domains the dispatch is hierarchical, as the dispatchers MoE training and serving use across nodes run it (DeepEP's
internode kernels and NVIDIA's HybridEP behind Megatron-Core's flex dispatcher, SGLang's and TensorRT-LLM's wide EP;
DeepSeek-V3, arXiv 2412.19437 §3.2.2): a token crosses the scale-out network once per destination domain, to the
GPU of the same in-domain index, which forwards it over the scale-up link to the GPUs holding its experts;
"communications via IB and NVLink are fully overlapped", so the slower of the two sets the time. The combine runs
the same path backwards. How many domains a token reaches follows from its k experts spread uniformly over the
group's domains, or, with group-limited routing (DeepSeek-V3's node-limited routing, §2.1.2), over the domains of
its topk_group groups.
"""

from __future__ import annotations

DEFAULT_SCALE_OUT_BYTES_PER_S = 25e9  # per chip per direction across domains where a chip lists no scale-out
#                                       network: 200 Gb/s InfiniBand per GPU (DGX A100)


def allreduce_seconds(payload, n, stride, domain, up_bytes_per_s, out_bytes_per_s, link_efficiency=1.0):
    """Seconds of a ring all-reduce of ``payload`` bytes per rank over a group of ``n`` ranks ``stride`` apart."""
    import numpy as np

    from aicalc.core.geometry import ring_factor

    n = np.asarray(n, dtype=np.float64)
    stride = np.asarray(stride, dtype=np.float64)
    g = np.clip(np.floor(domain / np.maximum(stride, 1.0)), 1.0, n)  # members inside one domain
    domains = np.maximum(n / g, 1.0)
    inside = ring_factor(g) * payload / (up_bytes_per_s * link_efficiency)
    across = ring_factor(domains) * payload / g / (out_bytes_per_s * link_efficiency)
    return np.where(n > 1, inside + across, 0.0)


def moe_alltoall_copies(k, ep, stride, domain, n_group=1, topk_group=1):
    """Copies of each token one MoE all-to-all (dispatch, or combine backwards) sends per rank, as
    ``(across, inside)``: over the scale-out network and over the scale-up link. ``ep`` ranks ``stride`` apart,
    ``k`` experts per token, spread evenly over the ranks.

    Inside one domain: the ``k·(ep − 1)/ep`` copies bound for other ranks, on the scale-up link. Across ``D = ep/g``
    domains (``g`` EP ranks in each): the expected number of other domains the token reaches, each sent once. A
    domain holds 1/D of the experts, so k uniform choices miss it with probability ``(1 − 1/D)^k``: ``(D − 1)·(1 −
    (1 − 1/D)^k)`` remote domains. With group-limited routing (n_group groups of consecutive experts, the token's
    experts inside topk_group of them): ``q = n_group/D`` groups per domain; for ``q ≥ 1`` a domain is missed when
    all topk_group groups are chosen among the other ``n_group − q`` (probability ``C(n_group − q, topk_group) /
    C(n_group, topk_group)``); for ``q < 1`` the k experts spread over the ``topk_group/q`` domains of the chosen
    groups. ``k·(g − 1)/g`` copies go over the scale-up link (to experts off the receiving GPU)."""
    import numpy as np

    k = np.asarray(k, dtype=np.float64)
    ep = np.asarray(ep, dtype=np.float64)
    stride = np.maximum(np.asarray(stride, dtype=np.float64), 1.0)
    epn = np.maximum(ep, 1.0)
    leave = k * (epn - 1.0) / epn
    crosses = ep * stride > domain
    g = np.clip(np.floor(domain / stride), 1.0, epn)  # EP ranks inside one domain
    D = epn / g
    miss = (1.0 - 1.0 / D) ** k  # no limit: a given domain holds none of the token's k experts
    if topk_group < n_group:
        q = n_group / D
        drop = np.ones_like(q)
        for i in range(int(topk_group)):  # C(n − q, t) / C(n, t) as a product
            drop = drop * np.maximum(n_group - q - i, 0.0) / (n_group - i)
        m = np.maximum(topk_group / np.maximum(q, 1e-12), 1.0)  # q < 1: domains the chosen groups span
        spread = 1.0 - (1.0 - 1.0 / m) ** k  # share of those m domains reached
        # q < 1: of the D domains, m are candidates and each is reached with probability `spread`
        miss = np.where(q >= 1.0, drop, 1.0 - m / D * spread)
    across = (D - 1.0) * (1.0 - miss)
    return np.where(crosses, across, 0.0), np.where(crosses, k * (g - 1.0) / g, leave)


def moe_alltoall_seconds(token_bytes, k, ep, stride, domain, up_bytes_per_s, out_bytes_per_s, link_efficiency=1.0,
                         n_group=1, topk_group=1):
    """Seconds of one MoE all-to-all moving ``token_bytes`` of tokens per rank (:func:`moe_alltoall_copies`): the
    scale-out and scale-up parts run at once (DeepSeek-V3 §3.2.2), the slower sets the pace."""
    import numpy as np

    across, inside = moe_alltoall_copies(k, ep, stride, domain, n_group, topk_group)
    return np.maximum(across * token_bytes / (out_bytes_per_s * link_efficiency),
                      inside * token_bytes / (up_bytes_per_s * link_efficiency))
