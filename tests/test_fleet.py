"""Fleet sizing: the fewest chips whose simulated p99 TTFT and TPOT meet the targets at a traffic, found by
bisection on the replica count, checked against the traffic simulation run on its own at that fleet and at one
replica fewer."""

import math

import pytest

import aicalc
from aicalc.api.fleet import fewest, size_fleet

TARGETS = dict(max_ttft="1s", max_tpot="50ms")


@pytest.mark.parametrize("answer", [1, 2, 7, 100, 1000, 16384])
@pytest.mark.parametrize("start", [1, 50, 16384])
def test_bisection_finds_the_threshold_in_logarithmic_calls(answer, start):
    """A predicate false below ``answer`` and true from it: the answer, in at most ~4 log2(16384) calls (a
    scan from 1 would take up to 16,384), and None where nothing up to the bound meets it."""
    calls = []

    def meets(r):
        calls.append(r)
        return r >= answer

    assert fewest(meets, start, 16384) == answer
    assert len(calls) <= 4 * math.log2(16384) + 2 and len(set(calls)) == len(calls)
    assert fewest(lambda r: False, start, 64) is None


def test_bisection_gives_up_once_a_miss_puts_the_answer_out_of_use():
    """``beyond``: the calls are those of the plain search up to the miss that shows the answer lies where it is
    of no use, then None; an answer of use comes out unchanged."""
    plain, cut = [], []
    assert fewest(lambda r: plain.append(r) or r >= 100, 1, 16384) == 100
    assert fewest(lambda r: cut.append(r) or r >= 100, 1, 16384, beyond=lambda r: r >= 50) is None
    assert cut == plain[:len(cut)] and len(cut) < len(plain) and max(r for r in cut if r < 100) >= 49
    assert fewest(lambda r: r >= 100, 1, 16384, beyond=lambda r: r >= 101) == 100


@pytest.mark.parametrize("case", [
    dict(model="llama-3.1-70b", chips=["h100-sxm"], requests_per_day=1e6, max_ttft=2.0, max_tpot=0.2),
    dict(model="llama-3.1-8b", chips=["h100-sxm", "a100-80gb"], rate=60, max_ttft=1.0, max_tpot=0.05),
    dict(model="qwen3-30b-a3b", chips=["h100-sxm"], requests_per_day=1e8, max_ttft=2.0, max_tpot=0.2)])
def test_the_cheapest_search_finds_the_full_searchs_first_row(case):
    """``cheapest`` (compare's fleet) leaves out what cannot beat the best found: its one answer is the full
    search's first row, in no more simulations."""
    full = size_fleet(**case)
    cheap = size_fleet(**case, cheapest=True)
    assert full.meta["row_dicts"] and cheap.meta["row_dicts"][0] == full.meta["row_dicts"][0] | {
        "simulations": cheap.meta["row_dicts"][0]["simulations"]}
    assert cheap.meta["simulations"] <= full.meta["simulations"]


@pytest.fixture(scope="module")
def fleet():
    return size_fleet("llama-3.1-8b", ["h100-sxm"], rate=60, prompt=1024, gen=256, max_ttft=1.0, max_tpot=0.05)


def test_the_fleet_meets_the_targets_and_one_replica_fewer_misses(fleet):
    """The traffic simulation, run on its own with the fleet's chips (same seed, so the same arrivals), meets
    both p99 targets; with one replica fewer it misses one."""
    for row in fleet.meta["row_dicts"]:
        if row["mode"] != "aggregated":
            continue
        tp, r = row["tp"], row["replicas"]
        at = aicalc.simulate("llama-3.1-8b", "h100-sxm", rate=60, chips=r * tp, tp=tp, prompt=1024, gen=256)
        assert at.p99_ttft_s[0] <= 1.0 and at.p99_tpot_s[0] <= 0.05
        assert at.p99_ttft_s[0] == pytest.approx(row["p99_ttft_s"]) and row["chips"] == r * tp
        if r > 1:
            fewer = aicalc.simulate("llama-3.1-8b", "h100-sxm", rate=60, chips=(r - 1) * tp, tp=tp, prompt=1024,
                                    gen=256)
            assert fewer.p99_ttft_s[0] > 1.0 or fewer.p99_tpot_s[0] > 0.05


def test_the_fleet_is_no_smaller_than_full_throughput_allows(fleet):
    """60 requests/s of 256 output tokens over the most tokens/s per chip serve reports at these targets (steady
    state, any TP): a floor no fleet can go under."""
    per_chip = max(r["output_tokens_per_s_per_chip"] for tp in (1, 2, 4, 8) for r in aicalc.serve(
        "llama-3.1-8b", "h100-sxm", concurrency="max", tp=tp, prompt=1024, gen=256).rows())
    best = fleet.meta["row_dicts"][0]
    assert best["chips"] >= 60 * 256 / per_chip


def test_cost_per_hour_and_day_is_the_fleets_chips_at_the_chip_price(fleet):
    price = 3.99  # the h100-sxm preset's on-demand USD per chip-hour
    for row in fleet.meta["row_dicts"]:
        assert row["usd_per_hour"] == pytest.approx(row["chips"] * price)
        assert row["usd_per_day"] == pytest.approx(row["chips"] * price * 24)
        # per million output tokens: an hour's cost over an hour's 60 × 256 tokens/s
        assert row["usd_per_million_output_tokens"] == pytest.approx(row["usd_per_hour"] / (60 * 256 * 3600) * 1e6)
    costs = [r["usd_per_hour"] for r in fleet.meta["row_dicts"]]
    assert costs == sorted(costs)


def test_daily_traffic_is_sized_at_its_average_rate_times_the_peak_factor():
    """864,000 requests a day are 10 requests/s on average; a peak factor of 2 sizes for 20."""
    daily = size_fleet("llama-3.1-8b", ["h100-sxm"], requests_per_day=864_000, peak_factor=2, prompt=512, gen=128,
                       **TARGETS)
    rate = size_fleet("llama-3.1-8b", ["h100-sxm"], rate=20, prompt=512, gen=128, **TARGETS)
    assert daily.meta["rate"] == pytest.approx(20.0)
    assert daily.meta["row_dicts"] == rate.meta["row_dicts"]
    for peak in (0.5, 1e5):  # below the average, or more than a day's requests in a second
        with pytest.raises(aicalc.errors.ParameterError, match="peak_factor"):
            size_fleet("llama-3.1-8b", ["h100-sxm"], requests_per_day=864_000, peak_factor=peak, max_ttft=1.0)


def test_a_trace_at_its_own_times_and_a_trickle(tmp_path):
    """A trace's arrival times give the rate (3 requests over 0.7 s); a trickle of 1,000 requests a day (one
    replica sees one every 86 s) needs one chip, its requests meeting an idle replica."""
    trace = tmp_path / "t.csv"
    trace.write_text("prompt,gen,arrival_s\n100,20,0\n200,30,0.5\n300,10,0.7\n")
    r = size_fleet("llama-3.1-8b", ["h100-sxm"], requests=str(trace), **TARGETS)
    assert r.meta["rate"] == pytest.approx(3 / 0.7) and r.rows()[0]["chips"] == 1
    r = size_fleet("llama-3.1-8b", ["h100-sxm"], requests_per_day=1000, **TARGETS)
    assert r.rows()[0]["chips"] == 1
    one = aicalc.roofline("llama-3.1-8b", "h100-sxm", batch=1, prompt=1024, gen=256)
    assert r.rows()[0]["p50_ttft_s"] == pytest.approx(one.ttft_s[0], rel=0.05)


def test_disaggregated_pools_have_their_own_tp_and_chips():
    """Llama-2-70B at 10M requests a day (TTFT 2 s, TPOT 200 ms): each pool's chips are its replicas × its TP,
    the fleet is both pools, and the pools need not share a TP."""
    r = size_fleet("llama-2-70b", ["h100-sxm"], requests_per_day=10e6, max_ttft=2.0, max_tpot=0.2)
    dis = [x for x in r.meta["row_dicts"] if x["mode"] == "disaggregated"]
    assert dis
    for x in dis:
        assert x["prefill_chips"] == x["prefill_replicas"] * x["prefill_tp"]
        assert x["decode_chips"] == x["decode_replicas"] * x["decode_tp"]
        assert x["chips"] == x["prefill_chips"] + x["decode_chips"]
        assert x["p99_ttft_s"] <= 2.0 and x["p99_tpot_s"] <= 0.2
    assert any(x["prefill_tp"] != x["decode_tp"] for x in dis)


def test_command_line_fleet_rows_and_refusals(cli):
    run = cli("serve", "llama-3.1-8b", "--chip", "h100-sxm", "--rate", "60", "--max-ttft", "1s", "--max-tpot",
              "50ms", "--search", "--json")
    assert run.code == 0, run.err
    for row in run.json["rows"]:
        for key in ("chip", "chips", "tp", "replicas", "dtype", "kv_dtype", "usd_per_million_output_tokens",
                    "meets_slo", "p99_ttft_s", "p99_tpot_s", "prefill_tp", "decode_tp", "usd_per_hour",
                    "usd_per_day"):
            assert key in row
    bad = cli("serve", "llama-3.1-8b", "--requests-per-day", "1M")
    assert bad.code == 2 and "--search" in bad.err and bad.err.count("\n") == 1
    bad = cli("serve", "llama-3.1-8b", "--rate", "1,2", "--search", "--max-tpot", "50ms")
    assert bad.code == 2 and "one rate" in bad.err
    # no TTFT target: one replica would "serve" any rate with a queue growing without end
    bad = cli("serve", "llama-3.1-8b", "--rate", "1e6", "--search", "--max-tpot", "50ms")
    assert bad.code == 2 and "--max-ttft" in bad.err and bad.err.count("\n") == 1
    for args, named in ((["--dtype", "bf17"], "--dtype bf17"), (["--tp", "3"], "--tp 3"),
                        (["--chip", "l4", "--tp", "1"], "--chip l4")):  # bad format, TP, a chip too small
        bad = cli("serve", "llama-3.1-70b", "--rate", "5", "--max-ttft", "1s", "--search", *args)
        assert bad.code == 2 and named in bad.err and bad.err.count("\n") == 1, bad.err
    bad = cli("serve", "llama-3.1-8b", "--policy", "chunked")  # nothing to schedule without traffic
    assert bad.code == 2 and "--rate" in bad.err
    # a TPOT no replica reaches even alone: no fleet, exit 1
    none = cli("serve", "llama-3.1-8b", "--rate", "1", "--max-ttft", "1s", "--max-tpot", "1ms", "--search", "--json")
    assert none.code == 1 and none.json["rows"] == [] and any("no fleet" in w for w in none.json["warnings"])


def test_pools_on_different_chips_are_priced_pool_by_pool():
    """Long prompts, short answers: prefill (compute) on L40S and decode (bandwidth) on H200 can be the cheapest
    fleet; each pool is paid at its own chip's price."""
    r = size_fleet("llama-3.1-8b", ["l40s", "h200"], rate=50, prompt=8000, gen=200, max_ttft=2.0, max_tpot=0.05)
    mixed = [x for x in r.rows() if x["mode"] == "disaggregated" and x["prefill_chip"] != x["decode_chip"]]
    assert mixed
    price = {c: aicalc.load_chip(c).price_per_hour_usd for c in ("l40s", "h200")}
    for x in mixed:
        assert x["usd_per_hour"] == pytest.approx(x["prefill_chips"] * price[x["prefill_chip"]]
                                                  + x["decode_chips"] * price[x["decode_chip"]])
        assert x["p99_ttft_s"] <= 2.0 and x["p99_tpot_s"] <= 0.05
