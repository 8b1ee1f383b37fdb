"""How an engine's scheduler admits sequences sets the concurrency at full load (engine profiles' kv_reserve and
max_num_seqs), and how MoE kernels pick their row tile sets the padding of a grouped GEMM."""

import math

import pytest

import aicalc
from aicalc.core.moe import padded_rows


def test_trtllm_reserves_prompt_plus_output_where_vllm_holds_the_live_context():
    # Llama-3.1-70B at TP 4, bf16 KV: 80 layers x (K, V) x 2 kv heads per device x 128 x 2 bytes = 81,920 B per
    # token. GUARANTEED_NO_EVICT (TensorRT-LLM's default) reserves P + G = 2048 tokens per request out of 0.9 of
    # the memory the weights and runtime leave; a live-allocating engine holds P + G/2 = 1536 on average out of
    # 0.9 of the card (block size 16 divides both, so no rounding)
    from aicalc.api.catalog import load_chip, load_model, resident_weights
    from aicalc.core.capacity import runtime_overhead_bytes

    spec = load_model("llama-3.1-70b")
    mem = load_chip("h100-sxm").usable_memory_bytes  # what CUDA reports (79.18 GiB), not the 80 GiB label
    w, o = resident_weights(spec, "fp8", 4), runtime_overhead_bytes(spec.arch, 4)
    per_token = 80 * 2 * 2 * 128 * 2
    kw = dict(tp=4, prompt=1024, gen=1024, dtype="fp8")
    live = aicalc.max_concurrency("llama-3.1-70b", "h100-sxm", engine="generic", **kw)
    full = aicalc.max_concurrency("llama-3.1-70b", "h100-sxm", engine="trtllm", **kw)
    assert live == math.floor((math.ceil(mem * 0.9) - w - o) / (1536 * per_token))
    assert full == math.floor((mem - w - o) * 0.9 / (2048 * per_token))
    assert full < 2048  # the engine's max_batch_size does not bind here


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


def test_memory_fraction_of_the_whole_card_or_of_what_the_weights_leave():
    # vLLM's gpu_memory_utilization 0.9 of 80 GB is 72 GB, weights (40) and overhead (2) come out of it: 30 GB;
    # TensorRT-LLM's free_gpu_memory_fraction 0.9 is of the 38 GB the weights and overhead leave: 34.2 GB
    from aicalc.core.capacity import kv_budget_bytes

    assert float(kv_budget_bytes(80e9, 0.9, 40e9, 2e9)) == pytest.approx(30e9)
    assert float(kv_budget_bytes(80e9, 0.9, 40e9, 2e9, "free")) == pytest.approx(34.2e9)
    assert float(kv_budget_bytes(80e9, 0.9, 79e9, 2e9, "free")) == 0.0


def test_trtllm_profile_takes_its_fraction_of_free_memory():
    from aicalc.catalog import profiles

    assert profiles.load("engine", "trtllm").options["kv_budget"] == "free"
    assert profiles.load("engine", "vllm").options.get("kv_budget", "total") == "total"
