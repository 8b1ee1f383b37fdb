"""serve under traffic: the scheduler simulation against queueing theory, tail latency past capacity, traces."""

import json
import math

import numpy as np
import pytest

import aicalc
from aicalc.core.simulate import StepCost, run

ONE_AT_A_TIME = dict(kv_blocks=10**7, block=16, max_seqs=1, token_budget=10**7)


def _queue(service_s_per_token, prompts, rate, fixed=0.0, seed=1):
    """One request at a time, one output token each: the simulator is a single-server queue whose service time is
    the prefill of the prompt (fixed + tokens × per-token cost)."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate, len(prompts))).tolist()
    cost = StepCost([[0.0]], [1.0], service_s_per_token, [0.0, 1.0, 1e8], [0.0, fixed + service_s_per_token,
                                                                        fixed + 1e8 * service_s_per_token])
    ttft, _, _, _ = run(arrival, list(prompts), [1] * len(prompts), cost, **ONE_AT_A_TIME)
    return np.asarray(ttft)


def test_md1_mean_time_in_system_pollaczek_khinchine():
    """M/D/1: W = S + ρS / (2(1 − ρ)) (Pollaczek–Khinchine with deterministic service)."""
    S, rho = 0.1, 0.7
    w = _queue(S / 1000, [1000] * 40_000, rho / S)
    assert w.mean() == pytest.approx(S + rho * S / (2 * (1 - rho)), rel=0.03)


def test_mm1_mean_time_in_system():
    """M/M/1 (exponential prompt lengths make the service time exponential): W = 1 / (μ − λ)."""
    rng = np.random.default_rng(7)
    prompts = np.maximum(1, np.round(rng.exponential(2000, 40_000))).astype(int)
    per_token, lam = 1e-4, 3.0  # mean service 0.2 s: μ = 5
    mu = 1 / (prompts.mean() * per_token)
    w = _queue(per_token, prompts.tolist(), lam)
    assert w.mean() == pytest.approx(1 / (mu - lam), rel=0.05)


def test_p99_ttft_grows_without_bound_past_capacity():
    r = aicalc.simulate("llama-3.1-8b", "h100-sxm", rate=[10, 30, 60, 120], num_requests=3000, prompt=1024, gen=256)
    cap = r.output_tokens_per_s.max() / 256  # requests/s the deployment completes at saturation
    over = r.rate > 1.2 * cap
    assert over.any() and (~over).any()
    assert np.all(np.diff(r.p99_ttft_s) > 0)
    assert r.p99_ttft_s[over].min() > 10 * r.p99_ttft_s[~over].min()
    # more requests at an overloaded rate wait longer still: the queue has no steady state
    longer = aicalc.simulate("llama-3.1-8b", "h100-sxm", rate=120, num_requests=6000, prompt=1024, gen=256)
    assert longer.p99_ttft_s[0] > 1.5 * r.p99_ttft_s[-1]


def test_light_load_matches_steady_state_latency():
    """At a trickle a request meets an idle replica: TTFT is one prefill pass, TPOT a batch-1 decode step."""
    sim = aicalc.simulate("llama-3.1-8b", "h100-sxm", rate=0.05, num_requests=200, prompt=512, gen=64)
    one = aicalc.roofline("llama-3.1-8b", "h100-sxm", batch=1, prompt=512, gen=64)
    assert sim.p50_ttft_s[0] == pytest.approx(one.ttft_s[0], rel=0.05)
    assert sim.p50_tpot_s[0] == pytest.approx(one.tpot_s[0], rel=0.05)


def test_goodput_counts_requests_meeting_both_targets():
    r = aicalc.simulate("llama-3.1-8b", "h100-sxm", rate=[5, 60], num_requests=2000, max_ttft="1s", max_tpot="50ms")
    assert r.goodput_requests_per_s[0] == pytest.approx(r.requests_per_s[0], rel=0.02)
    assert r.goodput_requests_per_s[1] < 0.5 * r.requests_per_s[1]


def test_trace_with_arrival_times(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": 200 + 10 * i, "gen": 50, "arrival_s": i * 0.5})
                              for i in range(100)))
    r = aicalc.simulate("llama-3.1-8b", "h100-sxm", requests=str(path))
    assert r.requests[0] == 100 and math.isfinite(r.p99_ttft_s[0]) and r.p99_ttft_s[0] < 1.0


@pytest.mark.parametrize("body, suffix", [("", ".csv"), ("prompt,gen\n-5,10\n", ".csv"), ("prompt\n100\n", ".csv"),
                                          ('{"prompt": 1}\n', ".jsonl"), ("not json\n", ".jsonl"),
                                          ("prompt,gen\nabc,1\n", ".csv")])
def test_bad_traces_are_one_line_and_exit_2(cli, tmp_path, body, suffix):
    path = tmp_path / f"t{suffix}"
    path.write_text(body)
    r = cli("serve", "llama-3.1-8b", "--requests", str(path))
    assert r.code == 2 and r.err.count("\n") == 1 and "Traceback" not in r.err


def test_cli_traffic_rows_carry_the_contract_keys(cli):
    r = cli("serve", "llama-3.1-8b", "--chip", "h100-sxm", "--rate", "5,50", "--num-requests", "500", "--json")
    assert r.code == 0
    for row in r.json["rows"]:
        for k in ("concurrency", "ttft_s", "tpot_s", "output_tokens_per_s", "p50_ttft_s", "p99_ttft_s", "p50_tpot_s",
                  "p99_tpot_s", "goodput_requests_per_s"):
            assert row[k] is not None and row[k] >= 0


def test_ten_thousand_requests_simulate_quickly():
    """The issue's budget is 2 s for 10,000 requests (benchmarks/ has the timing; this only guards the order)."""
    import time

    t = time.perf_counter()
    aicalc.simulate("llama-3.1-8b", "h100-sxm", rate=20, num_requests=10_000)
    assert time.perf_counter() - t < 10
