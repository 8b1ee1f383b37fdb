"""serve --search and disaggregated prefill/decode."""

import numpy as np
import pytest

import aicalc
from aicalc.api.deployment import disaggregated


def test_disaggregated_rate_is_the_slower_pool():
    rows = disaggregated("llama-3.1-8b", "h100-sxm", 8, prompt=2048, gen=256, max_tpot="30ms")
    assert [r["prefill_replicas"] for r in rows] == list(range(1, 8))
    rates = np.asarray([r["requests_per_s"] for r in rows])
    # more prefill replicas help until decode becomes the bottleneck, then hurt: one peak
    peak = int(np.argmax(rates))
    assert np.all(np.diff(rates[: peak + 1]) >= 0) and np.all(np.diff(rates[peak:]) <= 0)
    assert all(r["tpot_s"] <= 0.030 for r in rows)  # decode pools run at the batch meeting the target


def test_kv_transfer_crosses_the_nic_beyond_the_scale_up_domain():
    inside = disaggregated("llama-3.1-70b", "h100-sxm", 8, prompt=4096, gen=128, prefill_tp=4, decode_tp=4)[0]
    across = disaggregated("llama-3.1-70b", "h100-sxm", 16, prompt=4096, gen=128, prefill_tp=4, decode_tp=4)[0]
    # 4096 tokens × 320 KiB of bf16 KV each leave 4 prefill GPUs: NVLink 450 GB/s vs one 50 GB/s NIC per GPU
    kv = 4096 * 80 * 8 * 128 * 2 * 2
    assert inside["kv_transfer_s"] == pytest.approx(kv / (4 * 450e9))
    assert across["kv_transfer_s"] == pytest.approx(kv / (4 * 50e9))


def test_search_ranks_by_cost_within_targets_and_marks_the_pareto_front():
    r = aicalc.search_deployments("llama-3.1-8b", ["h100-sxm", "a100-80gb"], 4, prompt=1024, gen=256,
                                  dtypes=("bf16", "fp8"), max_tpot="40ms")
    rows = r.meta["row_dicts"]
    meets = [x["meets_slo"] for x in rows]
    assert meets == sorted(meets, reverse=True)
    costs = [x["usd_per_million_output_tokens"] for x in rows if x["meets_slo"]]
    assert costs == sorted(costs)
    front = [(x["output_tokens_per_s_per_chip"], x["tokens_per_s_per_user"]) for x in rows if x["pareto"]]
    for x in rows:
        if not x["pareto"]:
            assert any(c >= x["output_tokens_per_s_per_chip"] and u >= x["tokens_per_s_per_user"] for c, u in front)
    assert {x["mode"] for x in rows} == {"aggregated", "disaggregated"}


def test_cli_search_contract_keys(cli):
    r = cli("serve", "llama-3.1-8b", "--chip", "h100-sxm", "--chips", "4", "--search", "--json")
    assert r.code == 0
    for k in ("chip", "chips", "tp", "replicas", "dtype", "kv_dtype", "usd_per_million_output_tokens", "meets_slo"):
        assert k in r.json["rows"][0]


def test_cli_search_ranks_all_chips_in_one_table(cli):
    """--chip A,B (or --chip A --chip B) with --search is one search over both chips, ranked together like
    the library's search_deployments, not one search per chip stacked."""
    import aicalc

    lib = aicalc.search_deployments("llama-3.1-8b", ["l4", "h100-sxm"], 8, max_tpot=0.05)
    for chips in (["--chip", "l4,h100-sxm"], ["--chip", "l4", "--chip", "h100-sxm"]):
        rows = cli("serve", "llama-3.1-8b", *chips, "--chips", "8", "--max-tpot", "50ms", "--search",
                   "--json").json["rows"]
        assert [(r["chip"], r["mode"], r["tp"], r["replicas"]) for r in rows] == \
            [(r["chip"], r["mode"], r["tp"], r["replicas"]) for r in lib.meta["row_dicts"]][:len(rows)]


def test_the_search_counts_its_work_before_doing_it(cli):
    """8 chips: TP 1, 2, 4, 8 (the divisors of 8 up to 16), one format: 4 configurations; a TP-t configuration
    splits its 8/t groups into prefill and decode pools 8/t - 1 ways (7 + 3 + 1 + 0 = 11). The count bounds the
    rows the search returns."""
    from aicalc.api.deployment import search_deployments, search_size
    from aicalc.errors import ParameterError

    assert search_size(["h100-sxm"], 8) == (4, 11)
    rows = search_deployments("llama-3.1-8b", ["h100-sxm"], 8).meta["row_dicts"]
    assert sum(r["mode"] == "aggregated" for r in rows) <= 4 and sum(r["mode"] == "disaggregated" for r in rows) <= 11
    with pytest.raises(ParameterError) as e:
        search_deployments("llama-3.1-8b", ["h100-sxm"], 720720)
    assert e.value.param == "total_chips"
    r = cli("serve", "llama-3.1-8b", "--search", "--chips", "720720")
    assert r.code == 2 and "--chips 720720 makes a deployment search of 1,396,390 prefill/decode splits" in r.err
    # 720,720 = 2^4·3^2·5·7·11·13: TP 1, 2, 4, 8, 16 all divide it; the splits are Σ (720720/t - 1)
    assert sum(720720 // t - 1 for t in (1, 2, 4, 8, 16)) == 1_396_390
