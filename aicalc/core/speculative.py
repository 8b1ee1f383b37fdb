"""Speculative decoding: a cheap draft proposes K tokens, the target verifies them in one pass.

With a per-token acceptance rate A (the chance the target accepts a drafted token given the previous ones were
accepted), one round yields ``(1 − A^(K+1)) / (1 − A)`` tokens per sequence in expectation (Leviathan et al.
2023, "Fast Inference from Transformers via Speculative Decoding", eq. 1; K + 1 when A = 1). A round costs K
sequential draft decode passes and one target pass over K + 1 tokens per sequence; at small batch that pass
costs about as much as a one-token decode (memory-bound), at large batch it turns compute-bound and costs up to
K + 1 times as much, so the speed-up shrinks as the batch grows.

Draft heads: ``mtp`` (DeepSeek-V3 multi-token prediction: one extra transformer block sharing the embedding and
the head; DeepSeek-V3 report §2.2) and ``eagle`` (EAGLE: one decoder layer on the target's features and the
target's LM head; Li et al. 2024) are priced as a one-layer copy of the target.
"""

from __future__ import annotations

from dataclasses import replace

from aicalc.catalog.arch import Arch

HEADS = ("mtp", "eagle")


def expected_tokens(acceptance, draft_tokens):
    """Tokens per sequence one verification round yields (Leviathan et al. 2023, eq. 1)."""
    import numpy as np

    a = np.asarray(acceptance, dtype=np.float64)
    k = np.asarray(draft_tokens, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(a < 1.0, (1.0 - a ** (k + 1.0)) / (1.0 - a), k + 1.0)


def head_arch(target: Arch) -> Arch:
    """A draft head (MTP, EAGLE) as a one-layer model of the target's width, vocabulary and first layer kind."""
    return replace(target, layers=1, layer_types=target.layer_types[:1], moe_layers=target.moe_layers[:1])
