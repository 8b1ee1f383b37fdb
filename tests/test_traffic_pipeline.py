"""serve --pp under traffic: a pipelined replica in the scheduler simulation, as vLLM, SGLang and TensorRT-LLM run
it (pp micro-batches in flight, each passing every stage in turn)."""

from __future__ import annotations

import pytest

import aicalc

H = 4096  # Llama 3.1 8B's hidden size; 32 layers, so PP 2 puts 16 on each stage (an even split)


def _send_s(setup, tokens: float) -> float:
    """One stage-to-stage send of ``tokens`` tokens' hidden states and residuals (2·H values in 16 bits) over
    NVLink, as the H100 preset states it (450 GB/s a direction) at the chip class's link efficiency, plus its
    collective latency: both figures are preset data, not the code under test."""
    eff = setup.efficiency
    return tokens * 2 * H * 2 / (450e9 * eff.link) + eff.collective_latency_s


def _alone(pp: int):
    """Four requests of 1,000 + 65 tokens, each arriving at an idle replica (1,000 s apart)."""
    trace = {"prompt": [1000] * 4, "gen": [65] * 4, "arrival_s": [0.0, 1000.0, 2000.0, 3000.0]}
    r = aicalc.simulate("llama-3.1-8b", "h100-sxm", requests=trace, tp=1, pp=pp, chips=pp, dtype="bf16")
    return r, r.rows()[0]


def test_a_lone_request_passes_every_stage_and_the_send():
    """Light load: each stage runs half the layers, in turn, so a token takes the two halves' sum (the whole
    model's time on one chip) plus one send of its hidden states; the prompt likewise, plus one send of its
    1,000 tokens'. The pipeline buys no speed for one request."""
    one, a = _alone(1)
    two, b = _alone(2)
    setup = two.meta["setup"]
    assert b["pp"] == 2 and a["pp"] == 1
    assert b["p50_tpot_s"] - a["p50_tpot_s"] == pytest.approx(_send_s(setup, 1), rel=1e-6)
    assert b["p50_ttft_s"] - a["p50_ttft_s"] == pytest.approx(_send_s(setup, 1000), rel=1e-6)
    assert b["p99_tpot_s"] - a["p99_tpot_s"] == pytest.approx(_send_s(setup, 1), rel=1e-6)


def test_a_full_pipeline_yields_two_micro_batches_worth():
    """Saturation: 512 requests at once, 16 + 512 tokens each. A PP 2 replica running 256 sequences keeps two
    micro-batches of 128 in flight, each through both halves of the model per token: its throughput is two
    128-sequence replicas' (one chip each, the same layers in all), less the send of 128 tokens' hidden states
    per token (~29 µs beside a decode step of milliseconds) and the waves' prefill steps: within 2 % of 2×."""
    trace = {"prompt": [16] * 512, "gen": [512] * 512, "arrival_s": [0.0] * 512}
    two = aicalc.simulate("llama-3.1-8b", "h100-sxm", requests=trace, tp=1, pp=2, chips=2, dtype="bf16",
                          max_seqs=256).rows()[0]
    one = aicalc.simulate("llama-3.1-8b", "h100-sxm", requests=trace, tp=1, chips=1, dtype="bf16",
                          max_seqs=128).rows()[0]
    assert two["preemptions"] == 0 and one["preemptions"] == 0
    ratio = two["output_tokens_per_s"] / one["output_tokens_per_s"]
    assert 1.96 <= ratio <= 2.0


def test_a_pipelined_replica_holds_the_kv_its_memory_allows():
    """Each PP 2 device holds half of Llama 3.1 8B's parameters (16 of 32 layers and one of its two untied
    128,256 × 4,096 tables: 8,030,261,248 / 2 of them, in bf16 8,030,261,248 bytes) and half the layers of every
    block: a block of 16 tokens is 16 × 16 layers × 2 (K, V) × 8 heads × 128 × 2 bytes = 1 MiB there, 2 MiB on
    one chip. So the pipeline's blocks are the one-chip replica's budget plus the 8.03 GB of weights it sheds,
    in 1 MiB blocks (± the one-chip count's rounding)."""
    one = aicalc.simulate("llama-3.1-8b", "h100-sxm", tp=1, chips=1, dtype="bf16", num_requests=10)
    two = aicalc.simulate("llama-3.1-8b", "h100-sxm", tp=1, pp=2, chips=2, dtype="bf16", num_requests=10)
    budget_one = one.meta["kv_blocks"] * 2**21  # within a block of the one-chip budget
    want = (budget_one + 8_030_261_248) / 2**20
    assert want - 1 <= two.meta["kv_blocks"] <= want + 2
    assert two.meta["replicas"] == 1 and two.meta["chips"] == 2


def test_cli_runs_a_given_pipeline_under_traffic(cli):
    """The issue's command: TP 4 × PP 2, one replica of 8 H100s; rows and title say the pipeline, and --emit
    launches it."""
    r = cli("serve", "llama-3.1-70b", "--chip", "h100-sxm", "--tp", "4", "--pp", "2", "--rate", "5",
            "--num-requests", "200", "--json")
    assert r.code == 0, r.err
    assert r.json["rows"][0]["pp"] == 2 and r.json["inputs"]["chips"] == [8]
    out = cli("serve", "llama-3.1-70b", "--chip", "h100-sxm", "--tp", "4", "--pp", "2", "--rate", "5",
              "--num-requests", "200", width=200).out
    assert "TP 4, PP 2, 1 replica" in out and "2 micro-batches in flight" in out
    emit = cli("serve", "llama-3.1-70b", "--chip", "h100-sxm", "--tp", "4", "--pp", "2", "--rate", "5",
               "--num-requests", "200", "--emit", "vllm").out
    assert "--pipeline-parallel-size 2" in emit and "--tensor-parallel-size 4" in emit


@pytest.mark.parametrize("args, word", [
    (["--pp", "40", "--rate", "1"], "layers"),  # more stages than Llama 3.1 8B's 32 layers: no engine runs it
    (["--pp", "2", "--chips", "3", "--rate", "1"], "multiple"),
    (["--pp", "2", "--requests-per-day", "1M", "--search", "--max-ttft", "1s"], "pipeline"),
])
def test_pipelines_no_engine_runs_exit_2(cli, args, word):
    r = cli("serve", "llama-3.1-8b", "--chip", "h100-sxm", *args)
    assert r.code == 2 and word in r.err and "Traceback" not in r.err


def test_sram_only_chips_take_no_pipeline_under_traffic(cli):
    """A Groq LPU replica already spans the chips its weights and cache fill, one pipeline: --pp is exit 2 there,
    with or without traffic."""
    for extra in ([], ["--rate", "1"]):
        r = cli("serve", "llama-3.1-8b", "--chip", "groq-lpu", "--pp", "2", "--chips", "2", *extra)
        assert r.code == 2 and "already one pipeline" in r.err and "Traceback" not in r.err


def test_search_with_traffic_simulates_its_pipelines(cli):
    """--search with a traffic and --chips judges the TP 8 × PP 2 layout of 16 H100s by its simulated p99s too
    (it was left out), as replicas of 16 chips."""
    rows = cli("serve", "llama-3.1-405b", "--chip", "h100-sxm", "--chips", "16", "--search", "--dtype", "bf16",
               "--rate", "1", "--num-requests", "100", "--json").json["rows"]
    piped = [r for r in rows if r["pp"] == 2]
    assert piped and all(r["tp"] == 8 and r["replicas"] == 1 and r["p99_tpot_s"] for r in piped)
