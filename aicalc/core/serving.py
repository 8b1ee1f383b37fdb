"""Serving under continuous batching, in steady state (the scheduling of vLLM / TensorRT-LLM in-flight batching).

Each of the ``per_replica`` running sequences emits one token per decode step of time ``dec_t``; finished
sequences are replaced, so per step ``per_replica / gen`` new prompts are prefilled between decode steps. The
scheduler admits waiting prompts together: ``k`` prompts prefill in one batched pass (weights read once), ``k``
limited by the step's token budget (vLLM's ``max_num_batched_tokens``, chunked prefill). Hence
TPOT = dec_t + (per_replica / gen) · pre_t(k) / k, and a new request's TTFT = pre_t(k) + dec_t (its batch's
prefill, then the running step). KV is held at the live average context, prompt + gen/2.
"""

from __future__ import annotations

TOKEN_BUDGET = 8192  # tokens one scheduler step may prefill (vLLM V1's default max_num_batched_tokens)


def prefill_batch(per_replica, gen, prompt, token_budget: float = TOKEN_BUDGET):
    """Prompts one batched prefill pass admits: the prompts waiting per step, at least 1, at most what the
    token budget holds."""
    import numpy as np

    per_step = np.asarray(per_replica, dtype=np.float64) / gen
    return np.clip(per_step, 1.0, np.maximum(1.0, np.floor(token_budget / np.asarray(prompt, dtype=np.float64))))


def steady_state(pre_t, dec_t, per_replica, gen, batch=1.0):
    """(TTFT, TPOT) of continuous batching in steady state (module doc); ``pre_t`` is the time of one prefill
    pass over ``batch`` prompts."""
    tpot = dec_t + per_replica / gen * pre_t / batch
    ttft = pre_t + dec_t
    return ttft, tpot


KV_RESERVE = ("live", "full")  # what a running sequence's KV blocks cover (engine profiles' ``kv_reserve``)


def live_context(prompt, gen):
    """Average tokens held per running sequence in steady state: the prompt and half the generation."""
    return prompt + gen / 2.0


def held_context(prompt, gen, reserve: str = "live"):
    """Tokens of KV cache a running sequence takes from the budget in steady state. ``live`` (vLLM, SGLang: blocks
    allocated as tokens arrive, preempting when the cache runs out): :func:`live_context`. ``full`` (TensorRT-LLM's
    default capacity policy GUARANTEED_NO_EVICT: a request is admitted only with the blocks of its prompt plus its
    maximum output reserved, so it is never paused — TensorRT-LLM docs, 'Useful Runtime Options', Capacity
    Scheduler Policy): prompt + gen."""
    return prompt + gen if reserve == "full" else live_context(prompt, gen)


def concurrency_ladder(top: int, replicas: int = 1) -> list[float]:
    """The concurrencies a deployment is probed at: ``replicas`` × 1, 2, 4, … up to ``top`` in all (and the
    largest multiple of ``replicas`` within it), so that every replica runs the same batch."""
    import math

    replicas = max(1, int(replicas))
    top = max(1, int(top) // replicas)
    ladder = [float(2**i) for i in range(int(math.log2(top)) + 1)]
    return [replicas * x for x in ladder + ([float(top)] if top & (top - 1) else [])]
