"""A discrete-event simulation of one replica's continuous-batching scheduler (vLLM / TensorRT-LLM in-flight
batching), stepped by the cost model: tail latency and goodput for a real request mix.

Each step the scheduler (vLLM V1's policy) keeps every running sequence decoding one token, then fills the rest of
the step's token budget (``max_num_batched_tokens``) with prefill chunks: first of sequences already admitted,
then of waiting requests in arrival order, while a sequence slot (``max_num_seqs``) and KV blocks for the chunk
are free. A decoding sequence takes a new KV block each time its context crosses a block boundary; when none is
free the latest admitted sequence is preempted (its blocks freed, back to the head of the queue, recomputed
later: vLLM's default recompute preemption).

A step's time comes from tables the caller builds with the cost model: ``decode_s[b][j]`` for ``b`` decoding
sequences at context bin ``j`` (``context_bins``), plus ``prefill_s_per_token`` for each prefill token the step
adds (their marginal cost in a batched pass: the decode already reads the weights); a step with prefill only
costs a prefill pass over its tokens (``prefill_tokens`` → ``prefill_s``, interpolated).

Time to first token = arrival to the end of the step that completes the prompt; time per output token = the rest
of the generation over its gen − 1 tokens. Every decoding sequence advances one token per step, so finishes and
block crossings are kept as events keyed by step number (a heap and 16 counters), and a step costs O(1) besides
them. Pure Python over numpy-built tables; no I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass
class StepCost:
    """Step times the serving simulator interpolates: decode by batch and context, prefill by tokens."""

    decode_s: list  # [max_batch + 1][bins] seconds of a decode step (row 0: zeros)
    context_bins: list  # upper edges of the context bins, tokens
    prefill_s_per_token: float
    prefill_tokens: list  # a prefill-only pass over this many tokens …
    prefill_s: list  # … takes this long (interpolated between)


def run(arrival, prompt, gen, cost: StepCost, kv_blocks: int, block: int = 16, max_seqs: int = 256,
        token_budget: int = 8192):
    """(ttft_s, tpot_s, finish_s, preemptions) per request (TPOT NaN where gen = 1)."""
    import bisect
    import heapq
    import math

    n = len(arrival)
    nan = math.nan
    ttft, tpot, finish, first = [nan] * n, [nan] * n, [nan] * n, [0.0] * n
    waiting: deque[int] = deque()
    order: list[int] = []  # admitted sequences, oldest first (the last is preempted first)
    alive = [False] * n
    epoch = [0] * n  # bumps on preemption, so stale heap events are skipped
    filling: dict[int, int] = {}  # admitted sequences still prefilling → prompt tokens done
    held = [0] * n  # KV blocks held
    start_step = [0] * n  # step at which the sequence started decoding
    ends: list[tuple[int, int, int]] = []  # (step of its last token, seq, epoch)
    crossings = [0] * block  # decoding sequences needing a new block at steps ≡ i (mod block)
    cross_of = [0] * n
    free, preempt, decoding, ctx_sum = kv_blocks, 0, 0, 0
    bins, dec = cost.context_bins, cost.decode_s
    pt, ps = cost.prefill_tokens, cost.prefill_s
    nb, top = len(bins), len(dec) - 1
    clock, nxt, finished, step = 0.0, 0, 0, 0

    def release(r: int) -> None:
        """Free a sequence's blocks: a prefilling one holds ``held``, a decoding one a block per ``block`` tokens
        of its length (prompt + tokens decoded since it started, each written at one step)."""
        nonlocal free, decoding, ctx_sum
        alive[r] = False
        if r in filling:
            del filling[r]
            free += held[r]
        else:
            length = prompt[r] + (step - start_step[r])
            free += math.ceil(length / block)
            decoding -= 1
            crossings[cross_of[r]] -= 1
            ctx_sum -= length
        held[r] = 0

    while finished < n:
        while nxt < n and arrival[nxt] <= clock:
            waiting.append(nxt)
            nxt += 1
        if not order and not waiting:
            clock = arrival[nxt]
            continue
        # decode: the sequences crossing a block boundary this step take a block each
        need = crossings[step % block]  # decoding sequences writing the first position of a new block
        while need > free and order:
            victim = order.pop()
            was_decoding = victim not in filling
            release(victim)
            epoch[victim] += 1
            waiting.appendleft(victim)
            preempt += 1
            if was_decoding and (cross_of[victim] - step) % block == 0:
                need -= 1
        free -= min(need, free)
        b = decoding
        budget = token_budget - b
        chunks: list[tuple[int, int]] = []
        for r, done in filling.items():  # finish the prompts already admitted first
            if budget <= 0:
                break
            c = min(prompt[r] - done, budget)
            chunks.append((r, c))
            budget -= c
        while waiting and budget > 0 and len(order) < max_seqs:
            r = waiting[0]
            c = min(prompt[r], budget)
            if math.ceil(c / block) > free:
                break
            waiting.popleft()
            order.append(r)
            alive[r] = True
            filling[r] = 0
            chunks.append((r, c))
            budget -= c
        pre_tokens = 0
        for r, c in chunks:
            blocks = math.ceil((filling[r] + c) / block) - held[r]
            held[r] += blocks
            free -= blocks
            pre_tokens += c
        if b:
            j = min(bisect.bisect_left(bins, ctx_sum / b), nb - 1)
            clock += dec[min(b, top)][j] + pre_tokens * cost.prefill_s_per_token
        elif pre_tokens:
            i = min(max(bisect.bisect_left(pt, pre_tokens), 1), len(pt) - 1)
            x0, x1 = pt[i - 1], pt[i]
            clock += ps[i - 1] + (ps[i] - ps[i - 1]) * (pre_tokens - x0) / (x1 - x0)
        else:  # nothing admissible: wait for the next arrival
            clock = arrival[nxt] if nxt < n else clock + 1e-3
            continue
        ctx_sum += b
        step += 1
        for r, c in chunks:
            filling[r] += c
            if filling[r] >= prompt[r]:
                held[r] = 0  # from now on its blocks follow its length  # the prompt is in: its first token comes out of this step
                del filling[r]
                ttft[r] = clock - arrival[r]
                first[r] = clock
                if gen[r] <= 1:
                    finish[r] = clock
                    filling[r] = prompt[r]  # release() frees a prefilling sequence's blocks
                    release(r)
                    order.remove(r)
                    finished += 1
                    continue
                decoding += 1
                start_step[r] = step  # its decodes write positions prompt, prompt + 1, … from this step on
                ctx_sum += prompt[r]
                cross_of[r] = (step - prompt[r]) % block
                crossings[cross_of[r]] += 1
                heapq.heappush(ends, (step + gen[r] - 1, r, epoch[r]))
        while ends and ends[0][0] <= step:
            _, r, ep = heapq.heappop(ends)
            if ep != epoch[r] or not alive[r]:
                continue
            finish[r] = clock
            tpot[r] = (clock - first[r]) / (gen[r] - 1)
            release(r)
            order.remove(r)
            finished += 1
    return ttft, tpot, finish, preempt
