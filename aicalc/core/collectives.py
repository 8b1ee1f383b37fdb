"""Collectives priced on the links their group spans.

Ranks are laid out TP innermost, then CP, EP inside DP, and PP outermost (Megatron-LM's default order), so a
group of ``n`` ranks whose members are ``stride`` ranks apart spans n·stride consecutive ranks. Inside one
scale-up domain (an NVLink/NVSwitch node, a TPU pod's ICI) a ring all-reduce moves ``2(n − 1)/n`` of the payload
per rank over the scale-up link (Patarasuk & Yuan 2009). A group spanning several domains runs hierarchically
(NCCL's intra-node reduce-scatter, inter-node exchange, intra-node all-gather; XLA's ICI/DCN split): the
``g`` members inside one domain reduce over the scale-up link, and each of them exchanges only its 1/g share
across the ``n/g`` domains over its own scale-out NIC (one NIC per GPU in DGX systems), in parallel.
An all-gather or a reduce-scatter alone is half of an all-reduce.

MoE all-to-alls (:func:`moe_alltoall_copies`): each token goes to the EP ranks of its k experts. Without a routing
limit every routed copy that leaves the rank crosses the link the EP group spans. With group-limited routing
(DeepSeek-V3's node-limited routing, arXiv 2412.19437 §2.1.2 and §3.2.2) the dispatch is hierarchical: a token
crosses the scale-out network once per destination domain, to the GPU of the same in-domain index, which forwards
it over the scale-up link to the GPUs holding its experts; "communications via IB and NVLink are fully
overlapped", so the slower of the two sets the time. The combine runs the same path backwards (DeepEP's
internode kernels, which Megatron-Core's flex dispatcher uses, move tokens the same way).
"""

from __future__ import annotations


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

    Without a group limit (``topk_group ≥ n_group``): ``k·(ep − 1)/ep`` copies leave the rank, all on the link the
    group spans (the scale-out network once it spans more than one domain). With one (n_group groups of
    consecutive experts, a token's k experts inside topk_group of them) and the group spanning several domains,
    the group's ``ep/g`` domains (g ranks in each) hold ``(ep/g)/n_group`` domains per group (one group per domain
    in DeepSeek-V3's 64 ranks on 8 nodes), so a token reaches at most ``min(k, ep/g, topk_group·max(1,
    (ep/g)/n_group))`` domains; each is sent once across, the token's own domain excepted (``(ep/g − 1)/(ep/g)`` of
    them), and ``k·(g − 1)/g`` copies go over the scale-up link (to experts off the receiving GPU)."""
    import numpy as np

    k = np.asarray(k, dtype=np.float64)
    ep = np.asarray(ep, dtype=np.float64)
    stride = np.maximum(np.asarray(stride, dtype=np.float64), 1.0)
    epn = np.maximum(ep, 1.0)
    leave = k * (epn - 1.0) / epn
    crosses = ep * stride > domain
    if topk_group >= n_group:  # no limit: every copy that leaves on the group's slowest link
        return np.where(crosses, leave, 0.0), np.where(crosses, 0.0, leave)
    g = np.clip(np.floor(domain / stride), 1.0, epn)  # EP ranks inside one domain
    domains = epn / g
    dest = np.minimum(np.minimum(k, domains), topk_group * np.maximum(domains / n_group, 1.0))
    across = dest * (domains - 1.0) / domains
    return np.where(crosses, across, 0.0), np.where(crosses, k * (g - 1.0) / g, leave)


def moe_alltoall_seconds(token_bytes, k, ep, stride, domain, up_bytes_per_s, out_bytes_per_s, link_efficiency=1.0,
                         n_group=1, topk_group=1):
    """Seconds of one MoE all-to-all moving ``token_bytes`` of tokens per rank (:func:`moe_alltoall_copies`): the
    scale-out and scale-up parts run at once (DeepSeek-V3 §3.2.2), the slower sets the pace."""
    import numpy as np

    across, inside = moe_alltoall_copies(k, ep, stride, domain, n_group, topk_group)
    return np.maximum(across * token_bytes / (out_bytes_per_s * link_efficiency),
                      inside * token_bytes / (up_bytes_per_s * link_efficiency))
