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
