"""``serve MODEL --chip CHIP`` with neither --chips nor --tp: one replica of the smallest TP group of up to 8 chips (one
server) that holds the weights and the requests; TP 1 whatever the model before, so a 70B model on an H100 was
"does not fit". The expected degrees are worked out here from the models' published sizes and the chips' memory."""

import pytest

GIB = 2**30


def _row(r):
    assert r.code in (0, 1), r.err
    return r.json["rows"][0]


def test_a_model_one_h100_cannot_hold_runs_on_the_fewest_that_can(cli):
    # Llama-3.1-70B: 70.6e9 parameters in bf16, 141 GB; an H100 gives CUDA 79.18 GiB, vLLM's default share 90 %
    # of it, 71.3 GiB: one holds 141 GB / 1 = 131 GiB (no), two 65.7 GiB each (yes)
    weights = 70.55e9 * 2
    share = 0.9 * 79.18 * GIB
    assert weights > share and weights / 2 < share
    row = _row(cli("serve", "llama-3.1-70b", "--chip", "h100-sxm", "--json"))
    assert (row["tp"], row["chips"], row["replicas"], row["fits"]) == (2, 2, 1, True)
    text = cli("serve", "llama-3.1-70b", "--chip", "h100-sxm")
    assert "TP 2: the smallest tensor-parallel group (of up to 8 chips, one server)" in text.out


def test_a_model_one_chip_holds_stays_on_one_without_a_note(cli):
    row = _row(cli("serve", "llama-3.1-8b", "--chip", "h100-sxm", "--json"))
    assert (row["tp"], row["chips"]) == (1, 1)
    assert "tensor-parallel group" not in cli("serve", "llama-3.1-8b", "--chip", "h100-sxm").out


def test_tpu_v6e_host_of_eight(cli):
    # 32 GB of HBM per v6e chip: 141 GB of Llama-3.1-70B needs more than four (128 GB), so eight
    assert 4 * 32e9 < 70.55e9 * 2 < 8 * 32e9
    assert _row(cli("serve", "llama-3.1-70b", "--chip", "tpu-v6e", "--json"))["tp"] == 8


def test_more_than_a_server_holds_runs_the_largest_and_says_it_does_not_fit(cli):
    # Llama-3.1-405B in bf16 (810 GB) over 8 H100s: 101 GB each, more than 80
    r = cli("serve", "llama-3.1-405b", "--chip", "h100-sxm", "--dtype", "bf16", "--json")
    row = _row(r)
    assert (row["tp"], row["fits"]) == (8, False)
    assert "no tensor-parallel group of up to 8 chips" in cli("serve", "llama-3.1-405b", "--chip", "h100-sxm",
                                                              "--dtype", "bf16").out


@pytest.mark.parametrize("given", [["--tp", "1"], ["--chips", "1"]])
def test_tp_or_chips_given_keeps_them(cli, given):
    row = _row(cli("serve", "llama-3.1-70b", "--chip", "h100-sxm", *given, "--json"))
    assert (row["tp"], row["fits"]) == (1, False)


def test_a_system_on_chip_serves_on_one(cli):
    row = _row(cli("serve", "llama-3.1-70b", "--chip", "apple-m4-max", "--json"))
    assert row["tp"] == 1


def test_the_library_takes_the_same_default():
    from aicalc.api.serving import serve

    r = serve("llama-3.1-70b", "h100-sxm")
    assert int(r.tp[0]) == 2 and bool(r.fits[0])


def test_a_concurrency_sweep_keeps_the_tp_that_holds_one_request(cli):
    # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072 B a token; 4,096 requests of 1,024 + 256
    # tokens hold 4096 x 1280 x 131072 B = 640 GiB, more than one H100 (or eight) has: the TP stays the one that holds
    # the model and the last row does not fit, where growing the TP with the sweep would have changed the deployment
    assert 4096 * 1280 * 32 * 8 * 128 * 2 * 2 / GIB == 640
    rows = cli("serve", "llama-3.1-8b", "--chip", "h100-sxm", "--concurrency", "1,4096", "--json").json["rows"]
    assert [(r["tp"], r["fits"]) for r in rows] == [(1, True), (1, False)]
