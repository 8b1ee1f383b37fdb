"""serve --pp: pipeline stages inside a replica, as vLLM splits and runs them."""

from __future__ import annotations

import pytest

import aicalc


def test_vllm_stage_split_hand_derived():
    """vLLM's get_pp_indices: L // pp each, the leftover layers one each to the ranks before the last."""
    from aicalc.core.stages import serving_stage_layers

    assert serving_stage_layers(126, 4) == (31, 32, 32, 31)  # Llama 3.1 405B: 126 = 4·31 + 2
    assert serving_stage_layers(61, 4) == (15, 15, 16, 15)  # DeepSeek-V3
    assert serving_stage_layers(32, 2) == (16, 16)
    assert serving_stage_layers(3, 3) == (1, 1, 1)


def test_stage_weights_from_the_config():
    """Llama 3.1 8B in bf16 on PP 2 (TP 1): 8,030,261,248 parameters, of which the embedding and the untied LM
    head are 128,256 × 4,096 each; a rank holds half the rest and one of the two tables."""
    table = 128256 * 4096
    want = ((8030261248 - 2 * table) / 2 + table) * 2
    r = aicalc.serve("llama-3.1-8b", "h100-sxm", concurrency=1, tp=1, pp=2, chips=2, dtype="bf16")
    assert float(r["weights_bytes_per_device"][0]) == pytest.approx(want, rel=1e-6)
    assert int(r["pp"][0]) == 2


def test_two_stages_price_as_two_replicas_plus_the_hops():
    """64 sequences on PP 2 run as two micro-batches of 32, each through the whole model: the ideal TPOT is two
    replicas' of 32 sequences plus the hidden states' hops (2·H 16-bit values per token over 450 GB/s NVLink:
    32 decode tokens per step, and the interleaved prefill's 32/256 of a 1,024-token prompt per step), and each
    device holds half the layers of all 64 sequences' cache, as each of the two replicas holds all of 32's."""
    two = aicalc.serve("llama-3.1-8b", "h100-sxm", concurrency=64, tp=1, chips=2, dtype="bf16")
    pp = aicalc.serve("llama-3.1-8b", "h100-sxm", concurrency=64, tp=1, pp=2, chips=2, dtype="bf16")
    hop = 2 * 4096 * 2 / 450e9
    assert float(pp["ideal_tpot_s"][0]) - float(two["ideal_tpot_s"][0]) == pytest.approx((32 + 32 * 1024 / 256) * hop)
    assert float(pp["kv_cache_bytes_per_device"][0]) == float(two["kv_cache_bytes_per_device"][0])
    assert int(pp["replicas"][0]) == 1 and int(two["replicas"][0]) == 2


def test_pipeline_fits_what_one_node_cannot(cli):
    """Llama 3.1 405B in bf16 (810 GB) does not fit 8 H100s; TP 8 × PP 2 over 16 fits, and its launch command
    names the pipeline."""
    one = cli("serve", "llama-3.1-405b", "--chip", "h100-sxm", "--tp", "8", "--dtype", "bf16", "--concurrency", "1",
              "--json")
    assert one.code != 0 and not one.json["rows"][0]["fits"]
    two = cli("serve", "llama-3.1-405b", "--chip", "h100-sxm", "--chips", "16", "--tp", "8", "--pp", "2", "--dtype",
              "bf16", "--concurrency", "1", "--json").json
    assert two["rows"][0]["fits"] and two["rows"][0]["pp"] == 2 and two["inputs"]["pp"] == [2]  # as tp: [8]
    emit = cli("serve", "llama-3.1-405b", "--chip", "h100-sxm", "--chips", "16", "--tp", "8", "--pp", "2", "--dtype",
               "bf16", "--concurrency", "1", "--emit", "vllm").out
    assert "--pipeline-parallel-size 2" in emit and "--tensor-parallel-size 8" in emit


@pytest.mark.parametrize("args, word", [
    (["--pp", "40"], "layers"),
    (["--pp", "2", "--chips", "3"], "multiple"),
    (["--pp", "2", "--search", "--chips", "4"], "pipeline"),
])
def test_bad_pipelines_exit_2(cli, args, word):
    r = cli("serve", "llama-3.1-8b", "--chip", "h100-sxm", *args)
    assert r.code == 2 and word in r.err and "Traceback" not in r.err


def test_search_tries_a_pipeline_across_nodes(cli):
    """On 16 H100s (nodes of 8) the search also tries TP 8 × PP 2; for Llama 3.1 405B in bf16 it beats TP 16,
    whose all-reduces cross the nodes' 50 GB/s NICs while each TP 8 stage reduces over NVLink."""
    rows = cli("serve", "llama-3.1-405b", "--chip", "h100-sxm", "--chips", "16", "--search", "--dtype", "bf16",
               "--json").json["rows"]
    piped = [r for r in rows if r["pp"] == 2]
    wide = [r for r in rows if r["tp"] == 16 and r["pp"] == 1]
    assert piped and wide and all(r["tp"] == 8 and r["replicas"] == 1 for r in piped)
    assert max(r["output_tokens_per_s_per_chip"] for r in piped) > max(r["output_tokens_per_s_per_chip"] for r in wide)
    assert rows[0]["pp"] == 2


def test_the_table_says_what_crosses_the_nodes(cli):
    """A replica wider than a node says which collectives cross the NICs; one inside a node says nothing of it."""
    wide = cli("serve", "llama-3.1-405b", "--chip", "h100-sxm", "--chips", "16", "--tp", "16", "--dtype", "bf16",
               "--concurrency", "8", width=200).out
    assert "across nodes: TP 16's all-reduces" in wide
    piped = cli("serve", "llama-3.1-405b", "--chip", "h100-sxm", "--chips", "16", "--tp", "8", "--pp", "2", "--dtype",
                "bf16", "--concurrency", "8", width=200).out
    assert "across nodes: the 2 pipeline stages" in piped and "all-reduces" not in piped
    dep = cli("serve", "deepseek-v3", "--chip", "h100-sxm", "--chips", "32", "--tp", "32", "--ep", "32",
              "--attention-dp", "32", "--engine", "sglang", "--concurrency", "64", width=200).out
    assert "EP 32's all-to-alls" in dep and "69% of them hidden" in dep and "all-reduces" not in dep
    inside = cli("serve", "llama-3.1-70b", "--chip", "h100-sxm", "--tp", "8", "--concurrency", "8", width=200).out
    assert "across nodes" not in inside


def test_roofline_says_what_crosses_the_nodes(cli):
    out = cli("roofline", "llama-3.1-405b", "--chip", "h100-sxm", "--tp", "8,16", "--batch", "8", width=200).out
    assert "across nodes: TP 16's all-reduces" in out
    assert "across nodes" not in cli("roofline", "llama-3.1-8b", "--chip", "h100-sxm", "--tp", "8", width=200).out
