"""DeepSeek-V4 (``deepseek_v4``: V4-Flash, V4-Pro): compressed sparse / heavily compressed attention, mHC.

Parameter counts equal transformers 5.23 on the real published files (``tests/test_deployed_archs.py`` checks the
records of ``validation/record_params.py``). Here, independently of transformers, the released checkpoints' tensor
tables (the same model-information reports the fixtures' config.json come from, tests/data/configs/SOURCES.md): every
stored tensor but the MTP layer (``mtp.0.*``), the fp8/fp4 block scales (``*.scale``), the hash layers' frozen
``tid2eid`` table and the routers' ``gate.bias`` (transformers' buffers), with the int8 tensors of the routed experts
holding two fp4 values per byte.
"""

import json

import pytest

from aicalc.catalog.hf_config import arch_from_config
from aicalc.core.compressed_attention import (
    cache_columns,
    compressor_params,
    hyper_connection_params,
    indexer_params,
)
from aicalc.core.kv_cache import kv_cache_bytes, kv_shape
from aicalc.core.params import attention_params, count_params
from aicalc.errors import AicalcError

from conftest import DATA, fixture_config, fixture_records

PARAMS = fixture_records()


def _checkpoint_total(H, A, q, g, L, E, F, csa, hca, vocab=129280, n=4, d=512, r=1024, ih=64, idim=128):
    """The tensor table of a V4 checkpoint summed (names as stored: ``attn.wq_a`` etc.), less MTP, scales and buffers."""
    mix = (2 + n) * n
    layer = (A + d + q  # attn_sink, kv_norm, q_norm
             + d * H + g * r * (A * d // g) + H * g * r + q * H + A * d * q  # wkv, wo_a, wo_b, wq_a, wq_b
             + 2 * H  # attn_norm, ffn_norm
             + E * 2 * (F * H // 2 + H * F // 2 + F * H // 2)  # experts w1, w2, w3: int8 holding two fp4 each
             + E * H + 3 * H * F  # gate.weight, shared_experts w1/w2/w3
             + 2 * (mix + mix * n * H + 3))  # hc_attn_{base,fn,scale}, hc_ffn_*
    csa_layer = (4 * 2 * d + 2 * (2 * d) * H  # compressor ape [4, 2d], wgate/wkv [2d, H]
                 + 4 * 2 * idim + idim + 2 * (2 * idim) * H  # indexer.compressor ape, norm, wgate, wkv
                 + ih * H + ih * idim * q + d)  # indexer weights_proj, wq_b; compressor.norm
    hca_layer = 128 * d + 2 * d * H + d  # compressor ape [128, d], wgate, wkv; compressor.norm
    top = 2 * vocab * H + H + (n + n * n * H + 1)  # embed, head, norm, hc_head_{base,fn,scale}
    return top + L * layer + csa * csa_layer + hca * hca_layer


@pytest.mark.parametrize("name, shape", [
    # V4-Flash: 43 layers (0, 1 sliding; 21 CSA; 20 HCA); tensor table of 158,069,433,298 stored elements
    ("deepseek-v4-flash", dict(H=4096, A=64, q=1024, g=8, L=43, E=256, F=2048, csa=21, hca=20)),
    # V4-Pro: 61 layers (0, 1 HCA; 30 CSA; 31 HCA); 861,608,274,846 stored elements
    ("deepseek-v4-pro", dict(H=7168, A=128, q=1536, g=16, L=61, E=384, F=3072, csa=30, hca=31)),
])
def test_counts_equal_the_checkpoints_tensor_tables(name, shape):
    arch = arch_from_config(fixture_config(name))
    c = arch.compressed
    assert (c.count("csa"), c.count("hca")) == (shape["csa"], shape["hca"])
    assert count_params(arch).total == _checkpoint_total(**shape) == PARAMS[name]["params"]


def test_flash_parts_are_the_checkpoints_tensors():
    arch = arch_from_config(fixture_config("deepseek-v4-flash"))
    H = 4096
    # attn.{wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b, attn_sink}: [1024, 4096], [1024], [32768, 1024], [512, 4096],
    # [512], [8192, 4096], [4096, 8192], [64]
    assert attention_params(arch) == 1024 * H + 1024 + 32768 * 1024 + 512 * H + 512 + 2 * 8192 * H + 64
    assert compressor_params(arch, "hca") == 128 * 512 + 2 * 512 * H + 512
    assert indexer_params(arch) == 4 * 256 + 128 + 2 * 256 * H + 64 * H + 8192 * 1024
    assert compressor_params(arch, "csa") == 4 * 1024 + 2 * 1024 * H + 512 + indexer_params(arch)
    assert compressor_params(arch, "sliding") == 0
    # hc_attn_*/hc_ffn_* [24], [24, 16384], [3] per layer; hc_head_* [4], [4, 16384], [1]
    assert hyper_connection_params(arch) == 43 * 2 * (24 + 24 * 16384 + 3) + 4 + 4 * 16384 + 1


def test_published_sizes():
    """The model cards: V4-Flash 284B total / 13B activated, V4-Pro 1.6T / 49B."""
    flash = count_params(arch_from_config(fixture_config("deepseek-v4-flash")))
    pro = count_params(arch_from_config(fixture_config("deepseek-v4-pro")))
    assert flash.total == pytest.approx(284e9, rel=0.005) and flash.active == pytest.approx(13e9, rel=0.07)
    assert pro.total == pytest.approx(1.6e12, rel=0.02) and pro.active == pytest.approx(49e9, rel=0.02)


def test_layer_kinds_from_the_files_and_the_class_default():
    flash = arch_from_config(fixture_config("deepseek-v4-flash")).compressed
    assert flash.kinds[:4] == ("sliding", "sliding", "csa", "hca") and flash.kinds[-1] == "csa"
    assert len(flash.kinds) == 43  # the 44th compress_ratios entry is the MTP layer's
    # no compress_ratios and no layer_types: DeepseekV4Config's default, 2 HCA then CSA/HCA alternating
    default = arch_from_config({"model_type": "deepseek_v4", "num_hidden_layers": 5}).compressed
    assert default.kinds == ("hca", "hca", "hca", "csa", "hca")
    explicit = arch_from_config({"model_type": "deepseek_v4", "num_hidden_layers": 2,
                                 "layer_types": ["sliding_attention", "compressed_sparse_attention"]}).compressed
    assert explicit.kinds == ("sliding", "csa")


@pytest.mark.parametrize("cfg, message", [
    ({"model_type": "deepseek_v4", "n_shared_experts": 2}, "n_shared_experts must be 1"),
    ({"model_type": "deepseek_v4", "o_groups": 3}, "o_groups \\(3\\) does not divide"),
    ({"model_type": "deepseek_v4", "num_hidden_layers": 3, "compress_ratios": [0, 4]}, "'compress_ratios' must give"),
    ({"model_type": "deepseek_v4", "num_hidden_layers": 1, "layer_types": ["full_attention"]}, "'layer_types' must list"),
    ({"model_type": "deepseek_v4", "compress_rates": [4]}, "'compress_rates' must map"),
])
def test_bad_files_are_refused(cfg, message):
    with pytest.raises(AicalcError, match=message):
        arch_from_config(cfg)


KV = json.loads((DATA / "validation" / "kv_cache.json").read_text())
V4_RECORDS = [r for r in KV["records"] if r["config"].get("model_type") == "deepseek_v4"]
V4_CROSS = [(row["config"], run) for row in KV["crosscheck"] if row["model_type"] == "deepseek_v4" for run in row["runs"]]


def _parts(config, batch, seq):
    arch = arch_from_config(config)
    shape = kv_shape(arch, "bf16", 1, engine="hf")
    return cache_columns(arch, shape, batch, seq, "hf"), kv_cache_bytes(shape, batch, seq)


@pytest.mark.parametrize("rec", V4_RECORDS, ids=[f"{r['name']}-{r['case']}" for r in V4_RECORDS])
def test_cache_parts_equal_transformers_cache(rec):
    """Each part of transformers' DeepSeek-V4 cache (validation/record_kv.py, after the prefill and after one decode
    step): the windows, the compressed entries, the indexer keys, the compressors' buffers and overlap state."""
    for seq, got in ((rec["seq"], rec), (rec["seq"] + 1, rec["after_decode_1"])):
        cols, total = _parts(rec["config"], rec["batch"], seq)
        assert cols["window_cache_bytes_per_device"] == got["kv_bytes"]
        assert cols["compressed_cache_bytes_per_device"] == got["compressed_bytes"]
        assert cols["indexer_cache_bytes_per_device"] == got["indexer_bytes"]
        assert cols["compressor_state_bytes_per_device"] == got["compressor_state_bytes"]
        assert total == sum(got[k] for k in ("kv_bytes", "compressed_bytes", "indexer_bytes", "compressor_state_bytes"))


def test_tiny_model_run_for_real_across_windows():
    """A tiny V4 (a sliding, a CSA, an HCA and a CSA layer, window 8) run for real on the CPU at 6..12 tokens and two
    decode steps: every part equals transformers' cache; the compressed entries step at multiples of 4."""
    assert V4_CROSS and KV["crosscheck"] and all(row["fake_equals_real"] for row in KV["crosscheck"]
                                                  if row["model_type"] == "deepseek_v4")
    for config, run in V4_CROSS:
        cols, total = _parts(config, 2, run["seq"])
        assert (cols["window_cache_bytes_per_device"], cols["compressed_cache_bytes_per_device"],
                cols["indexer_cache_bytes_per_device"], cols["compressor_state_bytes_per_device"]) == \
            (run["kv_bytes"], run["compressed_bytes"], run["indexer_bytes"], run["compressor_state_bytes"])
        assert run["compressed_per_layer_entries"] == [0, run["seq"] // 4, run["seq"] // 128, run["seq"] // 4]


def test_pro_cache_at_a_million_tokens_is_vllms_figure():
    """vLLM's DeepSeek-V4 post (vllm.ai/blog/deepseek-v4, 2026-04-24): V4-Pro's cache is about 9.62 GiB per sequence in
    bf16 at 1M tokens. transformers' bf16 cache (--engine hf) at 2^20 tokens: the compressed entries and indexer keys
    (9,848 B per token over 30 CSA and 31 HCA layers) plus the small windows and buffers."""
    arch = arch_from_config(fixture_config("deepseek-v4-pro"))
    shape = kv_shape(arch, "bf16", 1, engine="hf")
    assert shape.bytes_per_token == 30 * (512 + 128) * 2 / 4 + 31 * 512 * 2 / 128
    assert kv_cache_bytes(shape, 1, 2**20) / 2**30 == pytest.approx(9.62, rel=0.001)
