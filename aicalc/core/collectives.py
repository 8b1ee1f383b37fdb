"""Collectives priced on the links their group spans.

Ranks are laid out TP innermost, then CP, EP inside DP, and PP outermost (Megatron-LM's default order), so a
group of ``n`` ranks whose members are ``stride`` ranks apart spans n·stride consecutive ranks. Inside one
scale-up domain (an NVLink/NVSwitch node, a TPU pod's ICI) a ring all-reduce moves ``2(n − 1)/n`` of the payload
per rank over the scale-up link (Patarasuk & Yuan 2009). A group spanning several domains runs hierarchically
(NCCL's intra-node reduce-scatter, inter-node exchange, intra-node all-gather; XLA's ICI/DCN split): the
``g`` members inside one domain reduce over the scale-up link, and each of them exchanges only its 1/g share
across the ``n/g`` domains over its own scale-out NIC (one NIC per GPU in DGX systems), in parallel.
An all-gather or a reduce-scatter alone is half of an all-reduce.
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
