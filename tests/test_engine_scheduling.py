"""How an engine's scheduler admits sequences sets the concurrency at full load (engine profiles' kv_reserve and
max_num_seqs), and how MoE kernels pick their row tile sets the padding of a grouped GEMM."""

import math

import pytest

import aicalc
from aicalc.core.moe import padded_rows


def test_trtllm_reserves_prompt_plus_output_where_vllm_holds_the_live_context():
    # GUARANTEED_NO_EVICT (TensorRT-LLM's default) reserves P + G blocks per request; a live-allocating engine
    # holds P + G/2 on average: at 1024/1024 the same budget admits 1536/2048 = 3/4 as many (block size 16
    # divides both, so no rounding)
    live = aicalc.max_concurrency("llama-3.1-70b", "h100-sxm", tp=4, prompt=1024, gen=1024, dtype="fp8",
                                  engine="generic")
    full = aicalc.max_concurrency("llama-3.1-70b", "h100-sxm", tp=4, prompt=1024, gen=1024, dtype="fp8",
                                  engine="trtllm")
    assert live < 2048  # the engine's max_batch_size does not bind here
    assert full == math.floor(live * 1536 / 2048) or full == math.ceil(live * 1536 / 2048) - 1


def test_trtllm_runs_at_most_its_default_max_batch_size():
    # gpt-oss-20b on one B200 holds thousands of 1024/1024 requests; TensorRT-LLM's default max_batch_size is 2048
    assert aicalc.max_concurrency("gpt-oss-20b", "b200", prompt=1024, gen=1024, engine="generic") > 2048
    assert aicalc.max_concurrency("gpt-oss-20b", "b200", prompt=1024, gen=1024, engine="trtllm") == 2048
    r = aicalc.serve("gpt-oss-20b", "b200", concurrency="max", prompt=1024, gen=1024, engine="trtllm")
    assert int(r["concurrency"][0]) == 2048


def test_serve_counts_the_reserved_cache_against_the_budget():
    kw = dict(concurrency=64, prompt=1024, gen=1024, tp=4, dtype="fp8")
    live = aicalc.serve("llama-3.1-70b", "h100-sxm", engine="generic", **kw)
    full = aicalc.serve("llama-3.1-70b", "h100-sxm", engine="trtllm", **kw)
    # the cache per device scales with the tokens held: 2048 against 1536 per sequence
    assert float(full["kv_cache_bytes_per_device"][0]) == pytest.approx(
        float(live["kv_cache_bytes_per_device"][0]) * 2048 / 1536, rel=1e-9)


@pytest.mark.parametrize("m, padded", [(5, 16), (11.3, 16), (35, 35 * math.sqrt(2)), (1000, 1064)])
def test_adaptive_row_tile(m, padded):
    # a power-of-two tile between 16 and 128 chosen from the tokens per expert: at least the smallest tile, a √2
    # padding on average below the largest, at most half the largest tile beyond
    assert float(padded_rows(m, 128, 16)) == pytest.approx(padded, rel=1e-12)


def test_fixed_tile_unchanged_without_a_smallest_tile():
    assert float(padded_rows(35, 128)) == 128 and float(padded_rows(1000, 128)) == 1064
