"""serve: continuous-batching arithmetic on top of the roofline core, fit, latency targets, cost."""

import pytest

from aicalc.core.serving import steady_state


def test_steady_state_formula_hand_derived():
    # 64 running sequences, 256 output tokens each: 64/256 = 0.25 prefills per step of 100 ms each
    ttft, tpot = steady_state(0.100, 0.020, 64, 256)
    assert tpot == pytest.approx(0.020 + 0.025)
    assert ttft == pytest.approx(0.120)


def test_decode_step_is_the_roofline_decode(cli):
    # one replica, concurrency 1, gen 2 → no prefill interleave beyond 1/2 prefill per step:
    # TPOT = decode(batch 1, context prompt + gen/2) + prefill(prompt) / gen
    s = cli("serve", "llama-2-7b", "--chip", "a100-80gb", "--concurrency", "1", "--prompt", "512", "--gen", "256",
            "--json").json["rows"][0]
    r = cli("roofline", "llama-2-7b", "--chip", "a100-80gb", "--batch", "1", "--prompt", "512", "--gen", "256",
            "--json").json["rows"]
    pre = next(x for x in r if x["phase"] == "prefill")["time_s"]
    dec = next(x for x in r if x["phase"] == "decode")["time_s"]
    assert s["tpot_s"] == pytest.approx(dec + pre / 256, rel=1e-9)
    assert s["ttft_s"] == pytest.approx(pre + dec, rel=1e-9)
    assert s["output_tokens_per_s"] == pytest.approx(1 / s["tpot_s"], rel=1e-9)


def test_contract_keys_and_auto_concurrency_stops_at_fit(cli):
    r = cli("serve", "llama-3.1-8b", "--chip", "l4", "--json")
    rows = r.json["rows"]
    for k in ("concurrency", "ttft_s", "tpot_s", "output_tokens_per_s"):
        assert k in rows[0]
    assert all(row["fits"] for row in rows)
    # in steady state a running request holds its prompt and half its output: 1024 + 256/2 tokens
    kv = cli("kv-cache", "llama-3.1-8b", "--chip", "l4", "--context", "1152", "--json").json["rows"][0]
    assert rows[-1]["concurrency"] == kv["max_batch"]


def test_replicas_scale_throughput(cli):
    one = cli("serve", "llama-3.1-8b", "--chip", "h100-sxm", "--concurrency", "32", "--json").json["rows"][0]
    four = cli("serve", "llama-3.1-8b", "--chip", "h100-sxm", "--chips", "4", "--concurrency", "128",
               "--json").json["rows"][0]
    assert four["output_tokens_per_s"] == pytest.approx(4 * one["output_tokens_per_s"])


def test_latency_targets_and_exit_codes(cli):
    ok = cli("serve", "llama-3.1-8b", "--chip", "h100-sxm", "--concurrency", "8", "--max-tpot", "1s")
    assert ok.code == 0
    bad = cli("serve", "llama-3.1-8b", "--chip", "h100-sxm", "--concurrency", "8", "--max-tpot", "1ms", "--json")
    assert bad.code == 1 and not bad.json["rows"][0]["meets_slo"]
    assert cli("serve", "llama-3.1-8b", "--chips", "3", "--tp", "2").code == 2


def test_cost_per_million_tokens_from_price(cli):
    row = cli("serve", "llama-3.1-8b", "--chip", "h100-sxm", "--concurrency", "16", "--price", "2",
              "--json").json["rows"][0]
    assert row["usd_per_million_output_tokens"] == pytest.approx(2 / 3600 / row["output_tokens_per_s"] * 1e6)


@pytest.mark.parametrize("case, chip, tp, measured", [("SV-01", "h100-sxm", 2, 21_805.8), ("SV-03", "h200", 1, 27_738.3)])
def test_mlperf_offline_envelope(cli, case, chip, tp, measured):
    """MLPerf v4.0 llama2-70b Offline, 8 GPUs, FP8 (validation-cases §6: envelope checks; the scheduler matters).

    ~292 output tokens per sample (derived in the reference); prompt 1024 as a round OpenOrca-like length.
    aicalc's efficiency model was calibrated on 2023 TensorRT-LLM kernels and lands at 0.35–0.5× of these
    2024 submissions; the test holds it inside a documented envelope of 0.3–1.2×.
    """
    rows = cli("serve", "llama-2-70b", "--chip", chip, "--chips", "8", "--tp", tp, "--dtype", "fp8", "--kv-dtype",
               "fp8", "--prompt", "1024", "--gen", "292", "--json").json["rows"]
    best = max(r["output_tokens_per_s"] for r in rows)
    assert 0.3 * measured < best < 1.2 * measured


@pytest.mark.parametrize("text", ["2.5", "$2.50", "$2.50/h", "2.5/hr"])
def test_price_spellings(cli, text):
    row = cli("serve", "llama-3.1-8b", "--chip", "h100-sxm", "--concurrency", "8", "--price", text, "--json").json
    assert row["inputs"]["price_per_chip_hour_usd"] == 2.5


@pytest.mark.parametrize("text", ["free", "-1", "$0", "1e9"])
def test_bad_prices_exit_2(cli, text):
    assert cli("serve", "llama-3.1-8b", "--price", text).code == 2


def test_full_load_respects_the_engines_scheduler_cap():
    """vLLM's V0 scheduler runs at most max_num_seqs = 256 sequences (vllm/engine/arg_utils.py, V0); a 1B-class
    model on an H200 has KV room for far more, so serving at full load under vLLM V0 runs 256 per replica."""
    import aicalc

    free = aicalc.max_concurrency("llama-3.2-3b", "h200", prompt=128, gen=128)
    assert free > 256
    assert aicalc.max_concurrency("llama-3.2-3b", "h200", prompt=128, gen=128, engine="vllm-v0") == 256
    assert aicalc.max_concurrency("llama-3.2-3b", "h200", tp=1, chips=2, prompt=128, gen=128, engine="vllm-v0") == 512
    r = aicalc.serve("llama-3.2-3b", "h200", concurrency="max", prompt=128, gen=128, engine="vllm-v0")
    assert int(r.columns["concurrency"][0]) == 256


def test_requests_that_leave_a_replica_idle_are_not_counted_twice(cli):
    """Throughput is what the requests in flight emit: one request on two replicas is one stream (it was counted
    as two), three requests run 2 + 1, each at most at the busier replica's TPOT."""
    rows = cli("serve", "llama-3.1-70b", "--chip", "h100-sxm", "--chips", "8", "--tp", "4", "--concurrency",
               "1,2,3,4", "--json").json["rows"]
    by = {r["concurrency"]: r for r in rows}
    assert by[1]["output_tokens_per_s"] == pytest.approx(1 / by[1]["tpot_s"])
    assert by[2]["output_tokens_per_s"] == pytest.approx(2 * by[1]["output_tokens_per_s"])
    assert by[3]["batch_per_replica"] == 2 and by[3]["output_tokens_per_s"] == pytest.approx(3 / by[3]["tpot_s"])
    # the default ladder probes multiples of the replica count: every replica runs the same batch
    ladder = cli("serve", "llama-3.1-70b", "--chip", "h100-sxm", "--chips", "8", "--tp", "4", "--json").json["rows"]
    assert all(r["concurrency"] == 2 * r["batch_per_replica"] for r in ladder)
