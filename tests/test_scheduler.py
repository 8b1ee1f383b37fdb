"""The scheduler's preemption, admission and policies against small traces worked by hand.

Every trace runs on step costs that make the arithmetic plain: a decode step takes 1 s whatever its batch and
context, a prefill-only pass 1 s whatever its tokens, and prefill tokens riding in a decode step cost nothing."""

import math

import pytest

import aicalc
from aicalc.core.simulate import SimulationError, StepCost, run

UNIT = StepCost([[0.0]] + [[1.0]] * 8, [1e9], 0.0, [0.0, 1.0, 1e9], [0.0, 1.0, 1.0])


@pytest.mark.parametrize("policy", ["chunked", "prefill-first"])
def test_preempted_request_is_recomputed_in_one_pass_and_keeps_its_first_token_time(policy):
    """Two requests of 2 prompt + 4 output tokens at t = 0 in a 6-block cache of 1-token blocks.
    t=1: one prefill pass admits both (2 blocks each), first tokens out (TTFT 1 s each), 2 blocks free.
    t=2: both decode a token (a block each), none free. t=3: both need a block: the later one (B, 2 tokens
    out, 3 tokens of KV) is preempted, freeing 3; A decodes its 3rd token. t=4: A decodes its 4th and last
    (TPOT (4-1)/3 = 1 s) and frees 5 blocks: 6 free. t=5: B is readmitted and recomputed by one prefill pass
    over its prompt and its 2 tokens (4 blocks), which yields its 3rd token. t=6: B decodes its 4th and last:
    TTFT still 1 s, TPOT (6-1)/3 s. (Re-decoding the output, or restarting B's clocks, gives other numbers.)"""
    ttft, tpot, finish, pre = run([0.0, 0.0], [2, 2], [4, 4], UNIT, kv_blocks=6, block=1, watermark=0.0,
                                  policy=policy)
    assert pre == 1
    assert ttft == pytest.approx([1.0, 1.0])
    assert finish == pytest.approx([4.0, 6.0])
    assert tpot == pytest.approx([1.0, 5.0 / 3.0])


@pytest.mark.parametrize("policy", ["chunked", "prefill-first"])
def test_full_reservation_admits_what_completes_and_never_preempts(policy):
    """The trace of the preemption test under TensorRT-LLM's GUARANTEED_NO_EVICT: each request reserves its 2
    prompt + 4 output blocks at admission, so only A (6 blocks) fits the 6-block cache and B waits. t=1 A's pass,
    first token; t=2..4 A decodes its 2nd to 4th token and ends, freeing 6 blocks; t=5 B's pass (TTFT 5 s), first
    token; t=6..8 its last three. No preemption; A's TPOT 1 s, B's 1 s."""
    ttft, tpot, finish, pre = run([0.0, 0.0], [2, 2], [4, 4], UNIT, kv_blocks=6, block=1, watermark=0.0,
                                  policy=policy, reserve="full")
    assert pre == 0
    assert ttft == pytest.approx([1.0, 5.0])
    assert finish == pytest.approx([4.0, 8.0])
    assert tpot == pytest.approx([1.0, 1.0])
    # with room for both reservations (12 blocks) they run side by side, as under live allocation
    ttft, tpot, finish, pre = run([0.0, 0.0], [2, 2], [4, 4], UNIT, kv_blocks=12, block=1, watermark=0.0,
                                  policy=policy, reserve="full")
    assert pre == 0 and ttft == pytest.approx([1.0, 1.0]) and finish == pytest.approx([4.0, 4.0])


def test_trtllm_replicas_reserve_in_the_traffic_simulation():
    from aicalc.api.traffic import Layout, replica

    lay = Layout(chip="h100-sxm", tp=1, dtype="bf16", kv_dtype="bf16")
    assert replica("llama-3.1-8b", lay, engine="trtllm").reserve == "full"
    assert replica("llama-3.1-8b", lay, engine="vllm").reserve == "live"


def test_admission_reserves_the_prompt_blocks_and_keeps_a_watermark_free():
    """A (50 prompt, 2 output) and B (46 prompt, 1 output) at t = 0, 100 blocks of one token, 5 % watermark
    (5 blocks): A reserves 50, so B would leave 100 - 50 - 46 = 4 < 5 free and waits. t=1 A's first token,
    t=2 its second (it finishes), t=3 B's pass: TTFT 1 s and 3 s. Without the watermark both start at t=1."""
    ttft, _, finish, _ = run([0.0, 0.0], [50, 46], [2, 1], UNIT, kv_blocks=100, block=1, watermark=0.05)
    assert ttft == pytest.approx([1.0, 3.0]) and finish == pytest.approx([2.0, 3.0])
    ttft, _, finish, _ = run([0.0, 0.0], [50, 46], [2, 1], UNIT, kv_blocks=100, block=1, watermark=0.0)
    assert ttft == pytest.approx([1.0, 1.0]) and finish == pytest.approx([2.0, 1.0])
    # a prompt of 96 blocks with 5 kept free can never be admitted in 100
    with pytest.raises(SimulationError, match="can never be admitted"):
        run([0.0], [96], [1], UNIT, kv_blocks=100, block=1, watermark=0.05)
    assert math.isfinite(run([0.0], [95], [1], UNIT, kv_blocks=100, block=1, watermark=0.05)[2][0])


def test_prefill_first_stalls_the_decodes_chunked_rides_them():
    """A (1 prompt, 3 output) at t = 0, B (1 prompt, 1 output) at t = 0.5. Both: t=1 A's first token.
    Chunked: t=2 A decodes and B's prompt rides in the same step (B's TTFT 1.5 s); t=3 A's last token: TPOT 1 s.
    Prefill-first: t=2 a prefill-only step for B (same TTFT) while A stalls; A's tokens at t=3 and t=4: TPOT
    1.5 s."""
    for policy, a_tpot, a_finish in (("chunked", 1.0, 3.0), ("prefill-first", 1.5, 4.0)):
        ttft, tpot, finish, _ = run([0.0, 0.5], [1, 1], [3, 1], UNIT, kv_blocks=100, block=16, policy=policy)
        assert ttft == pytest.approx([1.0, 1.5]) and finish[1] == pytest.approx(2.0)
        assert tpot[0] == pytest.approx(a_tpot) and finish[0] == pytest.approx(a_finish)
    with pytest.raises(ValueError, match="policy"):
        run([0.0], [1], [1], UNIT, kv_blocks=10, policy="fifo")


def test_the_policy_defaults_to_the_engines():
    """vLLM's V0 engine and SGLang run prefills first; vLLM V1 (the latest release, --engine vllm: running requests
    first, then waiting prefills in the token budget, vllm/v1/core/sched/scheduler.py) and TensorRT-LLM batch them
    with decodes."""
    for engine, policy in ((None, "chunked"), ("vllm-v0", "prefill-first"), ("vllm", "chunked"),
                           ("sglang", "prefill-first"), ("trtllm", "chunked")):
        r = aicalc.simulate("llama-3.1-8b", "h100-sxm", rate=1, num_requests=5, prompt=64, gen=8, engine=engine)
        assert r.meta["policy"] == policy


def test_overloaded_runs_keep_their_throughput():
    """Past the KV cache's capacity (Llama-2-7B on one H100, 1024 + 256 tokens, the case compared with vidur)
    more load no longer lowers throughput: recomputation is one prefill pass, not every token again."""
    r = aicalc.simulate("llama-2-7b", "h100-sxm", rate=[10, 14, 20, 40], num_requests=2000, prompt=1024, gen=256)
    assert r.preemptions[-1] > 0
    assert min(r.output_tokens_per_s[1:]) >= 0.98 * r.output_tokens_per_s[0]


def test_a_pipeline_round_charges_one_micro_batch_of_prefill():
    """A pipelined replica's round (prefill_charged_tokens = 4, a micro-batch's budget of 4 tokens; 0.1 s a
    prefill token): A (1 prompt, 3 output) at t = 0, B (10 prompt, 1 output) at t = 0.5. t=1 A's first token
    (a prefill-only pass, 1 s). The next round decodes A and takes B's whole 10-token prompt (the round's budget
    is 16) but only 4 tokens lengthen it, the rest riding in the other micro-batches: 1 + 4 × 0.1 = 1.4 s, so B's
    first token at t=2.4 (TTFT 1.9 s), A's last at t=3.4. Without the cap all 10 count: B's first token at 3.0."""
    piped = StepCost([[0.0]] + [[1.0]] * 8, [1e9], 0.1, [0.0, 1.0, 1e9], [0.0, 1.0, 1.0], 4.0)
    ttft, tpot, finish, _ = run([0.0, 0.5], [1, 10], [3, 1], piped, kv_blocks=100, block=16, token_budget=16)
    assert ttft == pytest.approx([1.0, 1.9]) and finish == pytest.approx([3.4, 2.4])
    plain = piped._replace(prefill_charged_tokens=math.inf)
    ttft, _, finish, _ = run([0.0, 0.5], [1, 10], [3, 1], plain, kv_blocks=100, block=16, token_budget=16)
    assert ttft[1] == pytest.approx(2.5) and finish[0] == pytest.approx(4.0)
