"""SGLang's pools for a hybrid sliding-window model, and the simulator's engine caps.

Expected figures are worked by hand from SGLang's formula (python/sglang/srt/model_executor/pool_configurator.py,
HybridSWAPoolConfigurator: cell = full_per_token · full_layers + ratio · swa_per_token · swa_layers;
full = available // cell; swa = int(full · ratio)) and from gpt-oss-120b's published config (36 layers alternating
sliding / full, window 128, 8 kv heads of 64), and from vLLM's own max_num_seqs defaults."""

import pytest

from aicalc.api.catalog import load_model
from aicalc.api.serving import scheduler_limits
from aicalc.api.traffic import simulate
from aicalc.core import capacity
from aicalc.core.kv_cache import kv_shape
from aicalc.errors import ParameterError

GIB = 2**30


def test_gpt_oss_pools_at_the_default_ratio():
    # one token, one layer, bf16: K and V of 8 heads × 64 = 2 · 8 · 64 · 2 = 2048 bytes; 18 full + 18 sliding layers
    # cell = 2048 · (18 + 0.8 · 18) = 66,355.2 bytes; 10 GiB // cell = 161,817; int(161,817 · 0.8) = 129,453
    shape = kv_shape(load_model("gpt-oss-120b").arch, "bf16", 1)
    assert capacity.swa_bytes_per_full_token(shape, 0.8) == pytest.approx(66355.2)
    assert capacity.swa_pools(shape, 10 * GIB, 0.8) == (161817, 129453)
    # requests of 4096 tokens: 161,817 // 4096 = 39 in the full pool; the SWA pool holds 129,453 // 128 = 1,011
    assert capacity.swa_fit(shape, 10 * GIB, 0.8, 4096) == (39, 161817)
    # a small ratio makes the SWA pool bind: cell = 2048 · (18 + 0.01 · 18) = 37,232.64; full = 288,387;
    # swa = 2,883 tokens; requests of 1024 tokens: min(288,387 // 1024 = 281, 2,883 // 128 = 22) = 22
    assert capacity.swa_fit(shape, 10 * GIB, 0.01, 1024) == (22, 288387)


def test_every_layer_windowed_has_one_pool():
    # no full layer: cell = swa_per_token · swa_layers, the ratio unused (HybridSWAPoolConfigurator, all-SWA)
    shape = kv_shape(load_model("gpt-oss-120b").arch, "bf16", 1)._replace(full_layers=0, sliding_layers=36)
    assert capacity.swa_pools(shape, 36 * 2048 * 1000, 0.8) == (1000, 1000)
    assert capacity.swa_fit(shape, 36 * 2048 * 1000, 0.8, 4096)[0] == 1000 // 128


def test_sglang_deepseek_v4_runs_its_default_256_over_the_dp_ranks():
    # apply_deepseek_v4_defaults sets --max-running-requests 256; TpModelWorker gives each of 8 DP ranks 256 // 8
    fit, cap, schedulers = scheduler_limits(
        "deepseek-v4-pro", "b200", tp=8, chips=8, prompt=4096, gen=512, engine="sglang", ep=8, attention_dp=8,
        utilization=0.835, swa_full_tokens_ratio=0.075)
    assert (cap, schedulers) == (32, 8)
    assert fit > cap


def test_swa_ratio_refused_where_the_engine_has_one_pool():
    with pytest.raises(ParameterError, match="swa_full_tokens_ratio"):
        scheduler_limits("gpt-oss-20b", "h100-sxm", engine="vllm-v1", swa_full_tokens_ratio=0.5)


def test_simulator_runs_the_engines_cap():
    # vLLM V1 on an 80 GB H100 runs up to 1024 sequences (arg_utils.py _set_default_args), V0 256; 8B bf16 leaves
    # room for ~1,000 requests of 384 tokens, so V1 batches past 256 and, under one policy, finishes sooner
    runs = {e: simulate("llama-3.1-8b", "h100-sxm", 1e6, prompt=128, gen=256, num_requests=1500,
                                       engine=e, policy="chunked") for e in ("vllm-v1", "vllm-v0")}
    assert runs["vllm-v1"].meta["max_seqs"] == 1024 and runs["vllm-v0"].meta["max_seqs"] == 256
    assert runs["vllm-v1"].meta["kv_blocks"] * 16 // 384 > 256
    assert runs["vllm-v1"]["requests_per_s"][0] > runs["vllm-v0"]["requests_per_s"][0]
    # a cap given by the caller is the cap
    assert simulate("llama-3.1-8b", "h100-sxm", 1e6, prompt=128, gen=256, num_requests=300,
                                   engine="vllm-v1", max_seqs=256).meta["max_seqs"] == 256
