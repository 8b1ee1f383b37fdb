"""Serving under continuous batching, in steady state (the scheduling of vLLM / TensorRT-LLM in-flight batching).

Each of the ``per_replica`` running sequences emits one token per decode step of time ``dec_t``; finished
sequences are replaced, so per step ``per_replica / gen`` new prompts are prefilled (``pre_t`` each) between
decode steps. Hence TPOT = dec_t + per_replica · pre_t / gen, and a new request's TTFT = pre_t + dec_t (its own
prefill after the running step).
"""

from __future__ import annotations


def steady_state(pre_t, dec_t, per_replica, gen):
    """(TTFT, TPOT) of continuous batching in steady state (module doc)."""
    tpot = dec_t + per_replica * pre_t / gen
    ttft = pre_t + dec_t
    return ttft, tpot


def concurrency_ladder(top: int) -> list[float]:
    """1, 2, 4, … up to ``top`` (and ``top`` itself): the concurrencies a deployment is probed at."""
    import math

    top = max(1, int(top))
    ladder = [float(2**i) for i in range(int(math.log2(top)) + 1)]
    return ladder + ([float(top)] if top & (top - 1) else [])
