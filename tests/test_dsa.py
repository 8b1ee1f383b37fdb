"""DeepSeek Sparse Attention models (``deepseek_v32``: DeepSeek-V3.2 / V3.2-Exp; ``glm_moe_dsa``: GLM-5), read from
real published ``config.json`` files (``tests/data/configs/deepseek-v3.2``, ``glm-5.1``; sources in SOURCES.md).

What the numbers are checked against, each independent of aicalc's formulas:
- parameter counts: transformers 5.23's ``numel()`` sums (``validation/record_params.py``), and the tensor shapes the
  published checkpoints list (the same model-information reports the fixtures were read from);
- KV bytes: transformers' own cache after a forward pass (``validation/record_kv.py``: the MLA latent in
  ``keys``/``values``, the indexer keys in ``DynamicIndexedLayer.indexer_keys``), and for the serving engines the byte
  layout vLLM / SGLang / TensorRT-LLM allocate (fp8 keys + one fp32 scale per 128 elements);
- cost terms: the tech report's formulas (arXiv 2512.02556 §2.1: the indexer over every preceding token, MLA over
  the top-k selected ones).
"""

import json

import pytest

from aicalc.catalog.hf_config import arch_from_config
from aicalc.core.kv_cache import kv_cache_bytes, kv_shape
from aicalc.core.params import attention_params, count_params
from aicalc.errors import AicalcError

from conftest import DATA, fixture_config, fixture_records

PARAMS = fixture_records()
KVDOC = json.loads((DATA / "validation" / "kv_cache.json").read_text())
FIXTURES = ("deepseek-v3.2", "glm-5.1")  # type and total count: tests/test_deployed_archs.py
_config = fixture_config


@pytest.mark.parametrize("name", FIXTURES)
def test_attention_block_with_its_indexer_equals_the_recorded_layer(name):
    """``layers[-1].self_attn`` as transformers counts it: MLA's projections and norms plus ``self_attn.indexer``."""
    arch = arch_from_config(_config(name))
    parts = PARAMS[name]["breakdown"]["layer_last_parts"]
    attn = sum(v for k, v in parts.items() if k.startswith("self_attn"))
    from aicalc.core.indexer import indexer_layer_params

    assert attn == attention_params(arch) + indexer_layer_params(arch)
    assert parts["self_attn.indexer"] == indexer_layer_params(arch)


# indexer tensors of one layer as the checkpoints list them (model-information reports, SOURCES.md): DeepSeek-V3.2
# wq_b [8192, 1536], wk [128, 7168], k_norm weight and bias [128] each, weights_proj [64, 7168]; GLM-5.1 wq_b
# [4096, 2048], wk [128, 6144], k_norm [128] ×2, weights_proj [32, 6144]
CHECKPOINT_INDEXER = {"deepseek-v3.2": 8192 * 1536 + 128 * 7168 + 2 * 128 + 64 * 7168,
                      "glm-5.1": 4096 * 2048 + 128 * 6144 + 2 * 128 + 32 * 6144}


@pytest.mark.parametrize("name", FIXTURES)
def test_indexer_is_what_the_checkpoint_adds_to_the_dense_attention_model(name):
    """The same file without its indexer is the DeepSeek-V3 / GLM-4.7-Flash-style MLA model: the difference is one
    indexer per layer, of the size the released safetensors hold."""
    cfg = _config(name)
    arch = arch_from_config(cfg)
    dense = arch._replace(indexer=None)
    assert count_params(arch).total - count_params(dense).total == arch.layers * CHECKPOINT_INDEXER[name]
    if name == "deepseek-v3.2":  # DeepSeek-V3.2 is DeepSeek-V3.1-Terminus's architecture plus the indexer
        v3 = arch_from_config({**cfg, "model_type": "deepseek_v3"})
        assert count_params(v3).total == count_params(dense).total


def test_shapes_read_from_the_files():
    v32 = arch_from_config(_config("deepseek-v3.2"))
    assert (v32.indexer.heads, v32.indexer.head_dim, v32.indexer.topk, v32.indexer.q_rank) == (64, 128, 2048, 1536)
    assert v32.n_moe_layers == 58 and v32.moe_layers[:4] == (False, False, False, True)
    assert (v32.moe.n_group, v32.moe.topk_group) == (8, 4)
    glm = arch_from_config(_config("glm-5.1"))
    assert (glm.indexer.heads, glm.indexer.q_rank, glm.mla.qk_nope_head_dim, glm.mla.v_head_dim) == (32, 2048, 192, 256)
    assert all(glm.indexer.layers) and glm.n_moe_layers == 75
    # transformers builds 61 / 78 layers: the MTP layer (num_nextn_predict_layers) is not a module, not counted
    assert PARAMS["deepseek-v3.2"]["breakdown"]["num_layers"] == 61
    assert PARAMS["glm-5.1"]["breakdown"]["num_layers"] == 78


# GLM-5's model card: "744B parameters (40B active)"; transformers does not build the MTP layer.
def test_glm5_published_total():
    assert count_params(arch_from_config(_config("glm-5.1"))).total == pytest.approx(744e9, rel=0.001)


def test_glm_shared_indexer_layers_have_no_indexer():
    """GlmMoeDsaConfig derives ``indexer_types`` from ``index_topk_freq`` / ``index_skip_topk_offset``: layer i runs
    its own indexer when max(i - offset + 1, 0) % freq == 0. GLM-5.2's 4 / 3 over 78 layers: SGLang's own test of
    its DSA layer resolver (``test_glm52_resolves_only_physical_indexer_layers``) expects layers 0, 1, 2, 6, ...,
    74, 21 of them."""
    cfg = {**_config("glm-5.1"), "index_topk_freq": 4, "index_skip_topk_offset": 3}
    arch = arch_from_config(cfg)
    full = [i for i, f in enumerate(arch.indexer.layers) if f]
    assert full[:4] == [0, 1, 2, 6] and full[-1] == 74 and len(full) == 21
    every = arch_from_config(_config("glm-5.1"))
    assert count_params(every).total - count_params(arch).total == (78 - 21) * CHECKPOINT_INDEXER["glm-5.1"]
    pattern = arch_from_config({**_config("glm-5.1"), "num_hidden_layers": 4, "mlp_layer_types": None,
                                "index_topk_pattern": "FSSF"})
    assert pattern.indexer.layers == (True, False, False, True)


@pytest.mark.parametrize(
    "cfg, message",
    [
        ({"model_type": "deepseek_v32", "q_lora_rank": None}, "q_lora_rank null is not supported"),
        ({"model_type": "glm_moe_dsa", "num_hidden_layers": 2, "indexer_types": ["shared", "full"]},
         "layer 0's indexer is 'shared'"),
        ({"model_type": "glm_moe_dsa", "num_hidden_layers": 2, "indexer_types": ["full"]},
         "'indexer_types' must list 'full' or 'shared' for each of the 2 layers"),
        ({"model_type": "deepseek_v32", "index_head_dim": 32}, "index_head_dim \\(32\\) is smaller than"),
        ({"model_type": "deepseek_v32", "index_n_heads": 0}, "'index_n_heads' must be a positive integer"),
        ({"model_type": "deepseek_v4", "num_hidden_layers": 2, "compress_ratios": [0, 8]},
         "'compress_ratios' must give 0, 4 or 128 for each of the 2 layers"),
    ],
)
def test_bad_files_are_refused(cfg, message):
    with pytest.raises(AicalcError, match=message):
        arch_from_config(cfg)


def test_class_defaults_are_the_released_shapes():
    """A file that leaves keys out takes the transformers class defaults: DeepseekV32Config is DeepSeek-V3.2's shape,
    GlmMoeDsaConfig GLM-5's (the two fixtures set no key differently that changes a count)."""
    assert count_params(arch_from_config({"model_type": "deepseek_v32"})).total == PARAMS["deepseek-v3.2"]["params"]
    assert count_params(arch_from_config({"model_type": "glm_moe_dsa"})).total == PARAMS["glm-5.1"]["params"]


# --- KV cache ----------------------------------------------------------------------------------------------------


def _kv_record(name, case="b1-s16"):
    return next(r for r in KVDOC["records"] if r["name"] == name and r["case"] == case)


@pytest.mark.parametrize("name", FIXTURES)
def test_hf_cache_is_the_latent_plus_bf16_indexer_keys(name):
    rec = _kv_record(name)
    arch = arch_from_config(rec["config"])
    B, S = rec["batch"], rec["seq"]
    # transformers: [B, S, index_head_dim] bf16 on each indexer layer, beside the [B, 1, S, 512] + [B, 1, S, 64] latent
    assert rec["indexer_bytes"] == B * S * arch.indexer.head_dim * 2 * arch.layers
    assert rec["kv_bytes"] == B * S * (512 + 64) * 2 * arch.layers
    shape = kv_shape(arch, "bf16", 1, engine="hf")
    assert kv_cache_bytes(shape, B, S) == rec["kv_bytes"] + rec["indexer_bytes"]
    assert shape.indexer_bytes_per_token * S * B == rec["indexer_bytes"]


def test_shared_indexer_layers_cache_no_keys():
    """The tiny GLM-MoE-DSA config run for real on the CPU (record_kv crosscheck): a 'shared' layer keeps no indexer
    keys, and aicalc's cache equals transformers' on every run (prefill and two decode steps)."""
    row = next(r for r in KVDOC["crosscheck"] if r["model_type"] == "glm_moe_dsa")
    assert row["fake_equals_real"]
    arch = arch_from_config(row["config"])
    for run in row["runs"]:
        assert [b > 0 for b in run["indexer_per_layer_bytes"]] == [True, False, True]
        shape = kv_shape(arch, "bf16", 1, engine="hf")
        for S, got in ((run["seq"], run["kv_bytes"] + run["indexer_bytes"]),
                       (run["seq"] + 2, run["after_decode_2"]["kv_bytes"] + run["after_decode_2"]["indexer_bytes"])):
            assert kv_cache_bytes(shape, row["batch"], S) == got


def test_serving_engines_keep_fp8_indexer_keys_with_fp32_scales():
    """vLLM (``DeepseekV32IndexerCache``), SGLang (``DSATokenToKVPool``) and TensorRT-LLM allocate
    ``index_head_dim + index_head_dim // 128 * 4`` bytes per token and layer: 128 fp8 + one fp32 scale = 132 B,
    whatever the KV dtype of the MLA latent."""
    arch = arch_from_config(_config("deepseek-v3.2"))
    for kv_dtype, latent in (("bf16", 576 * 2), ("fp8", 576)):
        shape = kv_shape(arch, kv_dtype, 1)
        assert shape.indexer_bytes_per_token == 61 * 132
        assert shape.bytes_per_token == 61 * (latent + 132)
    # replicated over tensor parallelism, like the latent: every device holds it whole
    assert kv_shape(arch, "bf16", 8).bytes_per_token == 61 * (1152 + 132)


def test_cli_shows_the_indexer_cache(cli):
    out = cli("kv-cache", DATA / "configs" / "deepseek-v3.2", "--context", "1024", "--block-size", "1", "--json").json
    row = out["rows"][0]
    assert row["indexer_bytes_per_token"] == 61 * 132
    assert row["indexer_cache_bytes_per_device"] == 1024 * 61 * 132
    assert row["kv_cache_bytes_per_device"] == 1024 * 61 * (1152 + 132)
    text = cli("kv-cache", DATA / "configs" / "deepseek-v3.2", "--context", "1024").out
    assert "indexer" in text


# --- serving cost ------------------------------------------------------------------------------------------------


def _decode_ops(P, B=4.0, tp=1.0):
    from aicalc.core.forward import formats, forward_ops, shape_of

    arch = arch_from_config(_config("deepseek-v3.2"))
    return arch, {o.name: o for o in forward_ops(shape_of(arch), formats("bf16", "bf16"), B, 1.0, P, tp)}


@pytest.mark.parametrize("P", [1000.0, 2047.0, 5000.0, 100_000.0])
def test_decode_mla_reads_at_most_topk_latents_and_the_indexer_reads_every_key(P):
    """The tech report's split (§2.1): MLA attends to min(S, topk) tokens, the indexer scores all S. A decode step at
    P cached tokens (S = P + 1 with its own): MLA's two products read min(S, 2048) latents of 1152 B per layer and
    write one, besides reading q (128 heads × 576) and writing the output (128 × 512) in bf16; the indexer reads S
    keys of 132 B per layer, writes one, and does 2·64·128 + 3·64 FLOPs per key."""
    B, L = 4.0, 61
    arch, ops = _decode_ops(P, B)
    S = P + 1
    mla = ops["attn_score"].bytes + ops["attn_value"].bytes
    q_io = B * L * 128 * (576 + 512) * 2
    assert mla == pytest.approx(B * L * (min(S, 2048) + 1) * 1152 + q_io, rel=1e-12)
    assert ops["attn_score"].flop == pytest.approx(B * L * min(S, 2048) * 2 * 128 * 576, rel=1e-12)
    assert ops["attn_value"].flop == pytest.approx(B * L * min(S, 2048) * 2 * 128 * 512, rel=1e-12)
    ix = ops["attn_indexer"]
    assert ix.flop == pytest.approx(B * L * S * (2 * 64 * 128 + 3 * 64), rel=1e-12)
    cache_reads = B * L * (S + 1) * 132  # the S keys read, the new one written
    assert cache_reads < ix.bytes < cache_reads * 1.2  # plus q, the fp32 logits and the top-k indices
    assert ix.compute == "fp8"


def test_the_indexer_is_replicated_over_tensor_parallelism():
    """vLLM and SGLang build the indexer of ReplicatedLinear layers: under TP 8 each rank still scores every key and
    runs the whole indexer projections, while MLA's heads split 8 ways."""
    _, one = _decode_ops(50_000.0, tp=1.0)
    _, eight = _decode_ops(50_000.0, tp=8.0)
    assert eight["attn_indexer"].flop == one["attn_indexer"].flop
    assert float(eight["indexer_q"].weight_bytes) == float(one["indexer_q"].weight_bytes)
    assert eight["attn_score"].flop == pytest.approx(one["attn_score"].flop / 8, rel=1e-12)


def test_long_prompt_prefill_is_cheaper_than_dense_mla_and_short_one_is_not():
    """The report's Figure 3: at 128K tokens DSA's prefill costs a fraction of dense MLA's; at short prompts (below
    topk, where every key is selected) the indexer is pure overhead. Same weights and layout (data-parallel attention,
    as vLLM's recipe runs it), the file read with and without its indexer."""
    import aicalc

    cfg = _config("deepseek-v3.2")
    dense = {k: v for k, v in cfg.items() if not k.startswith("index_")} | {"model_type": "deepseek_v3"}
    kw = dict(tp=8, ep=8, attention_dp=8, gen=1)
    long_sparse = aicalc.roofline(cfg, "h200", 1, 131072, **kw)
    long_dense = aicalc.roofline(dense, "h200", 1, 131072, **kw)
    assert float(long_sparse.ttft_s[0]) < 0.6 * float(long_dense.ttft_s[0])
    short_sparse = aicalc.roofline(cfg, "h200", 1, 1024, **kw)
    short_dense = aicalc.roofline(dense, "h200", 1, 1024, **kw)
    assert float(short_sparse.ttft_s[0]) > float(short_dense.ttft_s[0])


# --- training ------------------------------------------------------------------------------------------------------


def test_training_flops_per_token_sparse_stage():
    """FLOPs per token (TT-01 with the report's sparse attention): MLA's products over Σ min(i, topk)/S keys in MQA
    mode (576 + 512 per head) instead of (S + 1)/2 keys, plus the indexer's matmuls (6 per weight) and its scores
    over (S + 1)/2 keys (3 × 16,576 per key: forward and backward)."""
    from aicalc.core.forward import shape_of
    from aicalc.core.train_time import flops_per_token

    arch = arch_from_config(_config("deepseek-v3.2"))
    dense = arch_from_config({**_config("deepseek-v3.2"), "model_type": "deepseek_v3"})
    S = 131072.0
    k = 2048.0
    sparse_keys = (k * (k + 1) / 2 + (S - k) * k) / S  # Σ_{i=1..S} min(i, 2048) / S
    idx_weights = 61 * (1536 * 64 * 128 + 7168 * (128 + 64))
    model, _ = flops_per_token(shape_of(arch), S, attention_flops="causal")
    base, _ = flops_per_token(shape_of(dense), S, attention_flops="causal")
    dense_attn = 3 * 2 * 61 * (S / 2) * 128 * (192 + 128)  # DeepSeek-V3's causal convention: S/2 keys, MHA widths
    expected = (base - dense_attn + 6 * idx_weights + 3 * 2 * 61 * sparse_keys * 128 * (576 + 512)
                + 3 * 61 * (S + 1) / 2 * (2 * 64 * 128 + 3 * 64))
    assert model == pytest.approx(expected, rel=1e-12)
    # at 128K the sparse stage trains with fewer FLOPs per token than dense MLA
    assert model < 0.8 * base


def test_train_time_says_it_is_the_sparse_stage(cli):
    out = cli("train-time", "deepseek-v3.2", "--chip", "h100-sxm", "--chips", "2048", "--tokens", "1e12",
              "--seq", "32768").out
    assert "sparse training stage" in out and "dense warm-up" in out
