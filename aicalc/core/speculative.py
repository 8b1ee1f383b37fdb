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

from aicalc.catalog.arch import Arch

HEADS = ("mtp", "eagle")


def expected_tokens(acceptance, draft_tokens):
    """Tokens per sequence one verification round yields (Leviathan et al. 2023, eq. 1), (1 - A^(K+1)) / (1 - A).
    The numerator is taken as -expm1((K+1) log1p(A - 1)), so that it keeps its digits as A nears 1 (where
    1 - A^(K+1) would cancel to a few significant figures); 1 - A is exact there."""
    import numpy as np

    a = np.asarray(acceptance, dtype=np.float64)
    k = np.asarray(draft_tokens, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(a < 1.0, -np.expm1((k + 1.0) * np.log1p(a - 1.0)) / (1.0 - a), k + 1.0)


def head_arch(target: Arch) -> Arch:
    """A draft head (MTP, EAGLE) as a one-layer model of the target's width, vocabulary and first layer kind."""
    return target._replace(layers=1, layer_types=target.layer_types[:1], moe_layers=target.moe_layers[:1],
                           ffn_layers=target.ffn_layers[:1])


def decode_times(target, draft, roofs, fm, eff, batch, prompt, gen, tp, k: float, tokens: float) -> dict:
    """``{"est"|"ideal": (seconds per output token, draft prefill seconds)}`` of speculative decoding: a round is
    K sequential draft decode passes and one target pass over K + 1 tokens per sequence, and yields ``tokens``
    tokens per sequence (:func:`expected_tokens`); the draft prefills the prompt once besides the target.
    Context of every pass: the prompt plus half the output (the mean over the generation)."""
    from aicalc.core.latency import phase

    ctx = prompt + gen / 2.0
    one = phase(draft, roofs, fm, eff, batch, 1.0, ctx, tp)
    verify = phase(target, roofs, fm, eff, batch, k + 1.0, ctx, tp)
    pre = phase(draft, roofs, fm, eff, batch, prompt, 0.0 * prompt, tp, logits_tokens=1.0)
    return {"est": ((k * one.t_est + verify.t_est) / tokens, pre.t_est),
            "ideal": ((k * one.t_ideal + verify.t_ideal) / tokens, pre.t_ideal)}
