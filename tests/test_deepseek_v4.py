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
    # DeepSeek-V4.1-Flash (inference/config.json: kv_source_layers [2, 8, 14, 20], compress ratios 2 and 1): another
    # layer graph, refused by name rather than read as V4
    ({"model_type": "deepseek_v4", "kv_source_layers": [2, 8, 14, 20]}, "DeepSeek-V4.1's cross-layer KV"),
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


@pytest.mark.parametrize("model, stored", [
    # the tensor tables' bytes (shapes times dtype widths) less the MTP module: 159,609,485,896 - 3,593,787,756 and
    # 864,704,792,696 - 13,956,587,692 (tests/data/configs/SOURCES.md)
    ("deepseek-v4-flash", 156_015_698_140), ("deepseek-v4-pro", 850_748_205_004)])
def test_release_weights_are_the_checkpoint_less_mtp(model, stored):
    """The preset's release (FP8 block-scaled linears, MXFP4 routed experts, bf16 embeddings) held on one device:
    within 0.5 % of the checkpoint (which keeps the compressors bf16, the mHC fp32 and the hash table int64). The
    compressors and indexers are counted whole on every device."""
    from aicalc.api.roofline import roofline

    r = roofline(model, "h200", 1, 128, 128, tp=1)
    assert r.meta["setup"].dtype_label == "fp8+mxfp4-experts"
    assert r.weights_bytes_per_device[0] == pytest.approx(stored, rel=0.005)


def _decode_flops(model, past):
    from aicalc.catalog import store
    from aicalc.core.forward import formats, forward_ops, shape_of

    arch = store.resolve_model(model).arch
    ops = forward_ops(shape_of(arch), formats("fp8"), 1.0, 1.0, past, 1.0)
    return {o.name: float(o.flop) for o in ops if o.flop is not None}


def test_a_decode_query_attends_to_its_window_the_top_k_and_every_hca_entry():
    """One new token after P cached ones (x = P + 1 visible): every layer its 128-token window, a CSA layer the
    index_topk best of its x/4 entries, an HCA layer all x/128 (the tech report §2.3; the same count written out)."""
    arch = arch_from_config(fixture_config("deepseek-v4-flash"))
    P = 1_048_575.0
    keys = 43 * 128 + 21 * 512 + 20 * (P + 1) / 128
    flops = _decode_flops("deepseek-v4-flash", P)
    assert flops["attn_score"] == pytest.approx(2.0 * keys * arch.heads * 512, rel=1e-12)
    assert flops["attn_indexer"] == pytest.approx(21 * (P + 1) / 4 * (2 * 64 * 128 + 3 * 64), rel=1e-12)


def test_pro_against_v32_at_a_million_tokens_as_the_model_card_says():
    """The model card (huggingface.co/deepseek-ai/DeepSeek-V4-Flash, Introduction): "In the 1M-token context setting,
    DeepSeek-V4-Pro requires only 27% of single-token inference FLOPs and 10% of KV cache compared with
    DeepSeek-V3.2". Held out (nothing here is fitted): aicalc's decode FLOPs of one token at 1M tokens give 26 %,
    its serving-engine cache per token 11 % (bf16 entries, fp8 indexer keys on both)."""
    from aicalc.catalog import store

    ratio = sum(_decode_flops("deepseek-v4-pro", 2.0**20 - 1).values()) / \
        sum(_decode_flops("deepseek-v3.2", 2.0**20 - 1).values())
    assert ratio == pytest.approx(0.27, abs=0.015)
    kv = [kv_shape(store.resolve_model(m).arch, "bf16").bytes_per_token for m in ("deepseek-v4-pro", "deepseek-v3.2")]
    assert kv[0] / kv[1] == pytest.approx(0.10, abs=0.02)


def test_training_flops_count_the_compressed_attention():
    """A trained token of V4-Flash at 4096 (causal): 6·N_mm (attention, compressors, indexers, mHC projections, k of
    the experts) + 3·attention over the window and compressed entries + 6·V·H; far below pricing every layer as
    MQA over all S keys."""
    from aicalc.core.compressed_attention import training_terms
    from aicalc.core.forward import shape_of
    from aicalc.core.train_time import flops_per_token, matmul_params_per_layer

    arch = arch_from_config(fixture_config("deepseek-v4-flash"))
    s = shape_of(arch)
    model, _ = flops_per_token(s, 4096.0, attention_flops="causal")
    params, keys, idx = training_terms(arch, 4096.0, True)
    attn = 2.0 * keys * 64 * 1024 + idx * (2 * 64 * 128 + 3 * 64) + \
        2 * 43 * (4 * 4 * 4096 + 2 * 16 * 4096)  # mHC collapse, expansion and n x n mixing per sub-block
    expected = 6.0 * (matmul_params_per_layer(s) * 43 + params) + 3.0 * attn + 6.0 * 129280 * 4096
    assert float(model) == pytest.approx(float(expected), rel=1e-12)
    full_mqa = 6.0 * 43 * 4096 / 2 * 64 * 1024
    assert 3.0 * 2.0 * float(keys) * 64 * 1024 < full_mqa / 4


def test_train_time_says_what_its_attention_term_is(cli):
    """train-time's footer names V4's attended keys with the file's own window, top-k and ratios (sliding_window 128,
    index_topk 512, CSA 4, HCA 128 in deepseek-v4-flash's config.json) instead of only the MQA formula."""
    cfg = fixture_config("deepseek-v4-flash")
    r = cli("train-time", "deepseek-v4-flash", "--chip", "b200", "--chips", 64, "--tp", 1, "--pp", 4, "--ep", 16,
            "--seq", 4096, "--global-batch", 1024, "--precision", "fp8")
    assert r.code == 0, r.err
    line = next(x for x in r.out.splitlines() if x.startswith("DeepSeek-V4 attention"))
    assert f"{cfg['sliding_window']:,}-token window" in line
    assert f"top {cfg['index_topk']:,} CSA entries (1 per {min(x for x in cfg['compress_ratios'] if x)} tokens)" in line
    assert f"(1 per {max(cfg['compress_ratios'])})" in line


def test_each_running_sequence_holds_its_windows_in_the_quick_capacity_figures():
    """The traffic simulator's (and fleet's) block budget takes every running sequence's fixed bytes off first: for
    V4-Flash its 43 layers' windows of 128 tokens of one 512-wide bf16 K=V head (config.json: num_hidden_layers,
    sliding_window, head_dim), 5,636,096 B, beside the compressed entries' growth. 256 more running sequences leave
    256 windows' worth fewer 16-token blocks; the KV a disaggregated prefill ships holds min(prompt, window) of them."""
    from aicalc.api.traffic import Layout, replica
    from aicalc.catalog import store

    cfg = fixture_config("deepseek-v4-flash")
    window = cfg["num_hidden_layers"] * cfg["sliding_window"] * cfg["head_dim"] * 2
    assert window == 5_636_096
    shape = kv_shape(store.resolve_model("deepseek-v4-flash").arch, "bf16")
    assert shape.fixed_bytes() == window and shape.fixed_bytes(64) == window / 2
    one, more = (replica("deepseek-v4-flash", Layout("h200", tp=2), max_seqs=n).kv_blocks for n in (1, 257))
    assert one - more == pytest.approx(256 * window / (16 * shape.bytes_per_token), abs=1)
