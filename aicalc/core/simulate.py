"""A discrete-event simulation of one replica's continuous-batching scheduler (vLLM, SGLang, TensorRT-LLM
in-flight batching), stepped by the cost model: tail latency and goodput for a real request mix.

Two scheduling policies (:data:`POLICIES`), as the engines run them:

- ``chunked`` (vLLM V1, Sarathi-Serve's stall-free batching, TensorRT-LLM's in-flight batching): each step keeps
  every running sequence decoding one token, then fills the rest of the step's token budget
  (``max_num_batched_tokens``) with prefill chunks, first of sequences already admitted, then of waiting requests
  in arrival order.
- ``prefill-first`` (vLLM V0's default scheduler, SGLang's, which runs a new prefill batch before the running
  decode batch): a step with prefill to do (a pass still filling, or a waiting request that can be admitted) is a
  prefill-only step of up to the token budget, and the running sequences stall for it; other steps decode.

With ``reserve="full"`` (TensorRT-LLM's default capacity policy GUARANTEED_NO_EVICT) a request is admitted only
with the blocks of its prompt and its whole output reserved; it holds them until it ends, takes none while
decoding and is never preempted. Otherwise admission is as vLLM's block manager does it
(``BlockSpaceManager.can_allocate``): a waiting request is admitted when a sequence slot (``max_num_seqs``) is
free and the blocks of its whole pass fit with ``watermark`` of the cache's blocks still free afterwards (vLLM's
1 %); those blocks are reserved at admission. A decoding sequence
takes a new KV block each time its context crosses a block boundary; when none is free the latest admitted
sequence is preempted: its blocks freed, back to the head of the queue, and recomputed when readmitted by one
prefill pass over its prompt and the tokens it had already generated (vLLM's default ``RECOMPUTE`` preemption);
it then decodes the rest. Its time to first token stays that of its first token; its time per output token
spans its first token to its last, the stall included, as engines report them.

A step's time comes from tables the caller builds with the cost model: ``decode_s[b][j]`` for ``b`` decoding
sequences at context bin ``j`` (``context_bins``), plus ``prefill_s_per_token`` for each prefill token the step
adds (their marginal cost in a batched pass: the decode already reads the weights), up to
``prefill_charged_tokens`` of them (a pipelined replica's round: the tokens past one micro-batch's run beside it
in the others); a step with prefill only costs a prefill pass over its tokens (``prefill_tokens`` →
``prefill_s``, interpolated).

Time to first token = arrival to the end of the step that completes the prompt; time per output token = the rest
of the generation over its gen − 1 tokens. Every decoding sequence advances one token per decode step, so
finishes and block crossings are kept as events keyed by decode-step number (a heap and 16 counters), and a step
costs O(1) besides them. Pure Python over numpy-built tables; no I/O.

The loop provably ends: a step processes at least one token (a decode or a prefill chunk), so a run that never
preempts takes at most ``sum(prompt + gen)`` steps, and one past :data:`STEP_FACTOR` times that (room for
recomputation; a step preempts at most ``max_seqs`` sequences) stops with a :class:`SimulationError`. The caller
bounds the time with ``max_work``: units of work done by the loop, a step taken one by one as one unit, a run of
quiet steps taken at once as one, a preemption (release, requeue, readmission) as :data:`PREEMPTION_WORK`. A
request that alone outgrows the KV cache (it would be preempted and recomputed forever) is an error the moment it
is preempted alone, and a queue whose head can never be admitted (nothing running, nothing left to arrive) is an
error instead of a wait.
"""

from bisect import bisect_left
from collections import deque
from math import ceil, inf

from aicalc.errors import AicalcError
from aicalc.tuples import Named

STEP_FACTOR = 4  # steps allowed per token of the requests (prompt + gen): room to recompute
PREEMPTION_WORK = 4  # a preemption, with the readmission and the stale finish event it brings, is a few steps' time
POLICIES = ("chunked", "prefill-first")
WATERMARK = 0.01  # share of the KV blocks admission keeps free: vLLM's BlockSpaceManager(watermark=0.01)


class SimulationError(AicalcError):
    """The simulation cannot finish: a request outgrows the KV cache (``reason`` "fit"), cannot be admitted
    ("admit"), or the run went past ``max_work`` ("work") or its steps' bound ("steps"), or past the latency
    limits it was told to give up at ("targets")."""

    def __init__(self, message: str, reason: str, steps: int = 0, preemptions: int = 0):
        super().__init__(message)
        self.reason, self.steps, self.preemptions = reason, steps, preemptions


class StepCost(Named):
    """Step times the serving simulator interpolates: decode by batch and context, prefill by tokens."""

    decode_s: list  # [max_batch + 1][bins] seconds of a decode step (row 0: zeros)
    context_bins: list  # upper edges of the context bins, tokens
    prefill_s_per_token: float
    prefill_tokens: list  # a prefill-only pass over this many tokens …
    prefill_s: list  # … takes this long (interpolated between)
    prefill_charged_tokens: float = inf  # of a decode step's prefill tokens, the most that lengthen it (a pipelined
    #                                      replica: one micro-batch's; the rest ride in the other micro-batches)


def run(arrival, prompt, gen, cost: StepCost, kv_blocks: int, block: int = 16, max_seqs: int = 256,
        token_budget: int = 8192, max_work: int | None = None, stats: dict | None = None, policy: str = "chunked",
        watermark: float = WATERMARK, give_up: tuple[float, float, int] | None = None, reserve: str = "live"):
    """(ttft_s, tpot_s, finish_s, preemptions) per request (TPOT NaN where gen = 1). ``arrival``: finite,
    non-decreasing seconds; ``prompt`` and ``gen``: whole numbers >= 1. ``policy``: ``"chunked"`` (decodes and
    prefill chunks share a step) or ``"prefill-first"`` (a step with prefill to do prefills only), see
    :data:`POLICIES`. ``watermark``: the share of ``kv_blocks`` admission leaves free. ``max_work``: the most
    units of the loop's work (a step 1, a preemption :data:`PREEMPTION_WORK`) before a :class:`SimulationError`,
    None for no bound but the steps' (``STEP_FACTOR * sum(prompt + gen)`` plus a little). ``stats``: a dict given
    here receives ``steps``, ``work`` and ``free_blocks`` (all of ``kv_blocks`` again at the end).
    ``give_up``: (TTFT limit, TPOT limit, count): stop with a :class:`SimulationError` (reason "targets") as
    soon as more than ``count`` requests have gone past one of the limits (a fleet search's verdict is then
    known: that many past a limit put the percentile it stands for past it too). ``reserve``: ``"live"`` (the
    blocks a sequence holds follow its length, as above) or ``"full"`` (TensorRT-LLM's GUARANTEED_NO_EVICT: a
    request is admitted only with the blocks of its prompt and its whole output reserved, held until it ends; it
    takes no block while decoding and is never preempted)."""
    import heapq
    import math

    n = len(arrival)
    if len(prompt) != n or len(gen) != n:
        raise ValueError(f"arrival, prompt and gen differ in length ({n}, {len(prompt)}, {len(gen)})")
    if min(kv_blocks, block - 1, max_seqs - 1, token_budget - 1) < 0:
        raise ValueError("kv_blocks must be >= 0 and block, max_seqs and token_budget >= 1")
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    if not 0.0 <= watermark < 1.0:
        raise ValueError(f"watermark must lie in [0, 1), not {watermark!r}")
    if not _plainly_valid(arrival, prompt, gen):
        last = 0.0
        for t, p, g in zip(arrival, prompt, gen, strict=True):  # a NaN or a step back in time would stall the loop
            if not (math.isfinite(t) and t >= last) or p < 1 or g < 1 or p != int(p) or g != int(g):
                raise ValueError("arrival times must be finite, non-negative and sorted; prompt and gen whole "
                                 "numbers >= 1")
            last = t
        prompt, gen = [int(p) for p in prompt], [int(g) for g in gen]  # 512.0 or numpy's 512 as the loop counts
    first_only = policy == "prefill-first"
    full = reserve == "full"
    growing = 0  # decoding sequences that take a block each ``block`` steps (all of them under "live")
    ttft_limit, tpot_limit, allowed = give_up or (math.inf, math.inf, n)
    late_ttft = late_tpot = 0  # requests past a give_up limit
    mark = int(watermark * kv_blocks)  # vLLM's watermark_blocks: int(0.01 × num_gpu_blocks)
    capacity = kv_blocks * block
    tokens = sum(prompt) + sum(gen)
    max_steps = STEP_FACTOR * tokens + 1024
    max_work = math.inf if max_work is None else max_work
    work = 0
    nan = math.nan
    ttft, tpot, finish, first = [nan] * n, [nan] * n, [nan] * n, [0.0] * n
    waiting: deque[int] = deque()
    order: list[int] = []  # admitted sequences, oldest first (the last is preempted first)
    alive = [False] * n
    epoch = [0] * n  # bumps on preemption, so stale heap events are skipped
    filling: dict[int, int] = {}  # admitted sequences still prefilling → tokens of their pass done
    out = [0] * n  # output tokens a sequence has produced (kept over preemptions)
    base = [0] * n  # tokens its (re)prefill pass covers: prompt + out at admission
    held = [0] * n  # KV blocks a prefilling sequence holds (all of its pass's, reserved at admission)
    start_step = [0] * n  # decode step at which the sequence started decoding
    ends: list[tuple[int, int, int]] = []  # (decode step of its last token, seq, epoch)
    crossings = [0] * block  # decoding sequences needing a new block at decode steps ≡ i (mod block)
    cross_of = [0] * n
    free, preempt, decoding, ctx_sum = kv_blocks, 0, 0, 0
    bins, dec = cost.context_bins, cost.decode_s
    pt, ps = cost.prefill_tokens, cost.prefill_s
    charged, per_token = cost.prefill_charged_tokens, cost.prefill_s_per_token
    nb, top = len(bins), len(dec) - 1
    # `step` counts decode steps (every decoding sequence advances one token in each); `steps` counts all steps
    clock, nxt, finished, step, steps = 0.0, 0, 0, 0, 0

    def release(r: int) -> None:
        """Free a sequence's blocks: a prefilling one holds ``held``, a decoding one a block per ``block`` tokens
        of its length (its pass's tokens + tokens decoded since, each written at one decode step); a decoding
        one keeps the count of tokens it produced."""
        nonlocal free, decoding, ctx_sum, growing
        alive[r] = False
        if r in filling:
            del filling[r]
            free += held[r]
        else:
            done = step - start_step[r]
            length = base[r] + done
            out[r] += done
            decoding -= 1
            ctx_sum -= length
            if full:  # its reservation, whatever its length
                free += held[r]
            else:
                free += ceil(length / block)
                growing -= 1
                crossings[cross_of[r]] -= 1
        held[r] = 0

    while finished < n:
        while nxt < n and arrival[nxt] <= clock:
            waiting.append(nxt)
            nxt += 1
        if not order and not waiting:
            clock = arrival[nxt]
            continue
        # blocks the head of the queue reserves, plus the watermark, where a slot is free for it; else 0
        head = ceil((prompt[waiting[0]] + (gen[waiting[0]] if full else out[waiting[0]])) / block) + mark \
            if waiting and len(order) < max_seqs else 0
        if not first_only and decoding >= token_budget:
            head = 0  # the decodes fill the step's token budget: no prefill chunk this step
        admissible = 0 < head <= free
        prefill_step = first_only and (bool(filling) or admissible)
        # only decodes: leap over the quiet steps (none where the head of the queue is admitted at this step)
        if decoding and not filling and not prefill_step and not 0 < head <= free - crossings[step % block]:
            m, dt = _quiet_steps(step, clock, ctx_sum, decoding, free, crossings, ends[0][0] if ends else step + 1,
                                 arrival[nxt] if nxt < n else inf, bins, dec[decoding if decoding < top else top],
                                 block, growing)
            if m > 0:
                cycles, part = divmod(m, block)
                at = step % block  # the blocks taken at the `part` steps past whole cycles: a window of crossings
                free -= cycles * growing + (sum(crossings[at:at + part]) if at + part <= block else
                                             sum(crossings[at:]) + sum(crossings[:at + part - block]))
                clock += m * dt
                ctx_sum += m * decoding
                step += m
                steps += m
        b = 0 if prefill_step else decoding
        if b:  # decode: the sequences crossing a block boundary this step take a block each
            need = crossings[step % block]  # decoding sequences writing the first position of a new block
            while need > free and order:
                victim = order.pop()
                if not order:  # preempted alone: it outgrows the whole cache and would be recomputed forever
                    raise SimulationError(
                        f"a request of {prompt[victim]:,} prompt + {gen[victim]:,} gen tokens does not fit the "
                        f"{capacity:,}-token KV cache of one replica; the largest that fits has prompt + gen = "
                        f"{capacity:,} tokens", "fit")
                was_decoding = victim not in filling
                release(victim)
                epoch[victim] += 1
                waiting.appendleft(victim)
                preempt += 1
                work += PREEMPTION_WORK
                if was_decoding and (cross_of[victim] - step) % block == 0:
                    need -= 1
            free -= need if need < free else free
            b = decoding
        budget = token_budget - b
        chunks: list[tuple[int, int]] = []
        if b == 0 or not first_only:
            for r, done in filling.items():  # finish the passes already admitted first
                if budget <= 0:
                    break
                c = min(base[r] - done, budget)
                chunks.append((r, c))
                budget -= c
            while waiting and budget > 0 and len(order) < max_seqs:
                r = waiting[0]
                # the whole pass's blocks, reserved up front (under "full" the whole output's too)
                need_r = ceil((prompt[r] + (gen[r] if full else out[r])) / block)
                if need_r + mark > free:
                    break
                waiting.popleft()
                order.append(r)
                alive[r] = True
                base[r] = prompt[r] + out[r]  # a recomputed sequence prefills its prompt and its output so far
                filling[r] = 0
                held[r] = need_r
                free -= need_r
                c = min(base[r], budget)
                chunks.append((r, c))
                budget -= c
        pre_tokens = token_budget - b - budget  # the chunks' tokens
        if b:
            j = bisect_left(bins, ctx_sum / b)
            clock += dec[b if b < top else top][j if j < nb else nb - 1] + \
                (pre_tokens if pre_tokens < charged else charged) * per_token
        elif pre_tokens:
            i = min(max(bisect_left(pt, pre_tokens), 1), len(pt) - 1)
            x0, x1 = pt[i - 1], pt[i]
            clock += ps[i - 1] + (ps[i] - ps[i - 1]) * (pre_tokens - x0) / (x1 - x0)
        else:  # nothing admissible: wait for the next arrival
            if nxt >= n:  # nothing running and nothing to come: the head of the queue can never be admitted
                r = waiting[0]
                raise SimulationError(
                    f"a request of {prompt[r] + out[r]:,} prompt tokens can never be admitted (a {capacity:,}-token "
                    f"KV cache, {mark:,} blocks of it kept free, {max_seqs:,} sequences, a {token_budget:,}-token "
                    "step)", "admit")
            clock = arrival[nxt]
            continue
        if b:
            ctx_sum += b
            step += 1
        steps += 1
        work += 1
        if work > max_work or steps > max_steps:  # every step does a token of work, every preemption undoes some
            raise SimulationError(
                f"the scheduler simulation stopped after {steps:,} steps and {preempt:,} preemptions with "
                f"{finished:,} of {n:,} requests finished, past "
                + (f"the {max_work:,} units of work it may take" if work > max_work
                   else f"{max_steps:,} steps for its {tokens:,} tokens")
                + "; simulate fewer or shorter requests", "work" if work > max_work else "steps", steps, preempt)
        for r, c in chunks:
            filling[r] += c
            if filling[r] >= base[r]:  # the pass is in: the next token comes out of this step
                if out[r] == 0:  # the first token: TTFT is kept from it over later preemptions
                    ttft[r] = clock - arrival[r]
                    first[r] = clock
                    late_ttft += ttft[r] > ttft_limit
                out[r] += 1
                if out[r] >= gen[r]:
                    finish[r] = clock
                    if gen[r] > 1:
                        tpot[r] = (clock - first[r]) / (gen[r] - 1)
                        late_tpot += tpot[r] > tpot_limit
                    release(r)  # still prefilling: frees the blocks it holds
                    order.remove(r)
                    finished += 1
                    continue
                del filling[r]
                decoding += 1
                start_step[r] = step  # its decodes write positions base, base + 1, … from the next decode step
                ctx_sum += base[r]
                if not full:
                    held[r] = 0  # from now on its blocks follow its length
                    growing += 1
                    cross_of[r] = (step - base[r]) % block
                    crossings[cross_of[r]] += 1
                heapq.heappush(ends, (step + gen[r] - out[r], r, epoch[r]))
        while ends and ends[0][0] <= step:
            _, r, ep = heapq.heappop(ends)
            if ep != epoch[r] or not alive[r]:
                continue
            finish[r] = clock
            tpot[r] = (clock - first[r]) / (gen[r] - 1)
            late_tpot += tpot[r] > tpot_limit
            release(r)
            order.remove(r)
            finished += 1
        if late_ttft > allowed or late_tpot > allowed:
            raise SimulationError(f"more than {allowed:,} requests went past a latency limit", "targets", steps,
                                  preempt)
    if stats is not None:
        stats.update(steps=steps, work=work, free_blocks=free)
    return ttft, tpot, finish, preempt


def _plainly_valid(arrival, prompt, gen) -> bool:
    """Whether the requests pass :func:`run`'s checks, found by C loops where prompt and gen are lists of ints (a
    fleet search's every simulation); False sends them through the checks one request at a time."""
    import math
    from operator import le

    ints = {int}  # (len, not truth: any of them may be a numpy array)
    return (set(map(type, prompt)) <= ints and set(map(type, gen)) <= ints and (len(prompt) == 0 or min(prompt) >= 1)
            and (len(gen) == 0 or min(gen) >= 1) and all(map(math.isfinite, arrival))
            and (len(arrival) == 0 or arrival[0] >= 0) and all(map(le, arrival, arrival[1:])))


def _quiet_steps(step, clock, ctx_sum, b, free, crossings, next_end, next_arrival, bins, dec_row, block,
                 growing=None) -> tuple[int, float]:
    """How many of the coming steps of ``b`` decoding sequences (none prefilling) change nothing but the clock,
    the context and the free blocks, so the loop may take them at once and the step after them as usual: each
    is at the same context bin, before the next finish (``next_end``) and the next arrival, needs no more blocks
    than are free (every decoding sequence takes one each ``block`` steps). The caller asks only where the head of
    the queue is not admitted at this step; it then stays out over them, as the free blocks only shrink.
    Returns (steps, seconds each)."""
    if free < 0:  # prefill took more blocks than were free: this step preempts
        return 0, 0.0
    last = len(bins) - 1
    j = bisect_left(bins, ctx_sum / b)
    if j >= last:
        j = last
    m = next_end - step - 1  # the step after the last one taken finishes the first sequence
    if j < last:  # a context ctx_sum / b + i stays at bin j while it is at most bins[j]
        k = (int(bins[j]) * b - ctx_sum) // b + 1
        if k < m:
            m = k
    dt = dec_row[j]
    if next_arrival < inf and dt > 0:  # the step after them must still start before the next arrival
        k = ceil((next_arrival - clock) / dt) - 1
        if k < m:
            m = k
        while m > 0 and clock + m * dt >= next_arrival:
            m -= 1
    if m <= 0:
        return 0, 0.0
    g = b if growing is None else growing
    if g == 0:  # no sequence takes a block (reserved up front): nothing but the clock and the context change
        return m, dt
    cycles, left = divmod(free, g)  # blocks: g for every `block` steps, then the first steps of a cycle
    if m <= cycles * block:  # the whole cycles alone outlast the m steps: the part of a cycle cannot bind
        return m, dt
    part = 0
    while part < block and crossings[(step + part) % block] <= left:
        left -= crossings[(step + part) % block]
        part += 1
    k = cycles * block + part
    return (m if m < k else k), dt
