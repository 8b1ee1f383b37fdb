"""The 2025 architectures (issue 15 item 6): Gemma-3, Qwen3 and Qwen3-MoE, Llama-4, gpt-oss, DeepSeek-V2, Phi-4 and
Mistral NeMo presets; OLMo-2, Granite, Cohere (Command-R) and Cohere2 (Command R7B).

Exactness: aicalc's parameter count and KV-cache bytes equal what transformers builds from the same preset config,
as recorded by ``validation/record_params.py`` and ``validation/record_kv.py`` (versions in the files). Headline
sizes: the vendors' published figures, within their rounding, with the convention each vendor states.
"""

import json

import pytest

from aicalc.catalog.hf_config import arch_from_config
from aicalc.core.kv_cache import kv_bytes_per_token, kv_cache_bytes, kv_shape
from aicalc.core.params import attention_params, count_params
from aicalc.errors import AicalcError

from conftest import DATA

PARAMS = {r["name"]: r for r in json.loads((DATA / "validation" / "params.json").read_text())["records"]
          if r["kind"] == "preset"}
KV = [r for r in json.loads((DATA / "validation" / "kv_cache.json").read_text())["records"] if r["kind"] == "preset"]

NEW = ["gemma-3-4b", "gemma-3-12b", "gemma-3-27b", "qwen3-8b", "qwen3-30b-a3b", "qwen3-235b-a22b", "llama-4-scout", "llama-4-maverick",
       "gpt-oss-20b", "gpt-oss-120b", "deepseek-v2-lite", "deepseek-v2", "phi-4", "mistral-nemo-12b",
       "olmo-2-13b", "granite-3.3-8b", "command-r-v01", "command-r7b"]
ENGINE = {"DynamicCache": "hf", "StaticCache": "vllm"}


def _arch(name):
    return arch_from_config(PARAMS[name]["config"], name)


@pytest.mark.parametrize("name", NEW)
def test_param_count_equals_transformers(name):
    assert count_params(_arch(name)).total == PARAMS[name]["params"]


@pytest.mark.parametrize("name", NEW)
def test_kv_bytes_per_token_equal_transformers_cache(name):
    """At 16 tokens every layer (sliding or chunked ones too) holds all of them: bytes / 16 is the per-token figure."""
    rec = next(r for r in KV if r["name"] == name and r["case"] == "b1-s16")
    assert kv_bytes_per_token(_arch(name), "bf16") * 16 == rec["kv_bytes"]


@pytest.mark.parametrize("rec", [r for r in KV if r["name"] in NEW], ids=lambda r: f"{r['name']}-{r['case']}")
def test_kv_cache_equals_transformers_past_the_window(rec):
    shape = kv_shape(_arch(rec["name"]), "bf16", 1, engine=ENGINE[rec["cache_class"]])
    assert kv_cache_bytes(shape, rec["batch"], rec["seq"]) == rec["kv_bytes"]


def test_every_new_preset_is_recorded_with_a_long_case_where_a_window_slides():
    assert set(NEW) <= set(PARAMS)
    for name in ("gemma-3-27b", "gpt-oss-20b", "gpt-oss-120b", "llama-4-scout", "llama-4-maverick", "command-r7b"):
        arch = _arch(name)
        assert any(r["name"] == name and r["seq"] > arch.sliding_window for r in KV), name


# Published totals and active parameters. ``active_conv``: what the vendor's active figure counts.
#   "all": every parameter a token touches (aicalc's ``active``)
#   "no-embedding": without the input embedding table (OpenAI's gpt-oss model card: active = attention + active
#   experts + unembedding; its table lists 116.83B / 5.13B and 20.91B / 3.61B)
PUBLISHED = [
    # name, total, rel, active, active_conv, rel
    ("gpt-oss-120b", 116.83e9, 0.001, 5.13e9, "no-embedding", 0.005),
    ("gpt-oss-20b", 20.91e9, 0.001, 3.61e9, "no-embedding", 0.005),
    # Qwen3 model cards: 30.5B in total and 3.3B activated; 235B / 22B; 8.2B
    ("qwen3-30b-a3b", 30.5e9, 0.002, 3.3e9, "all", 0.02),
    ("qwen3-235b-a22b", 235e9, 0.002, 22e9, "all", 0.01),
    ("qwen3-8b", 8.2e9, 0.002, None, None, None),
    # Meta's model cards: Scout 109B total / 17B active (the total includes the ~1.2B vision encoder aicalc does not
    # size, hence 1.5%), Maverick 400B / 17B
    ("llama-4-scout", 109e9, 0.015, 17e9, "all", 0.02),
    ("llama-4-maverick", 400e9, 0.002, 17e9, "all", 0.02),
    # DeepSeek-V2 paper: 236B total, 21B activated; V2-Lite 15.7B total
    ("deepseek-v2", 236e9, 0.002, 21e9, "all", 0.02),
    ("deepseek-v2-lite", 15.7e9, 0.002, None, None, None),
    # Phi-4 technical report: 14B (model card: 14.7B); Gemma 3 27B
    ("phi-4", 14.7e9, 0.003, None, None, None),
    ("gemma-3-27b", 27e9, 0.002, None, None, None),
    # Command-R model card: "a 35 billion parameter" model
    ("command-r-v01", 35e9, 0.001, None, None, None),
    # Granite 3.3 8B model card: "an 8-billion parameter" model (8.17B, rounded down by the card)
    ("granite-3.3-8b", 8e9, 0.025, None, None, None),
]


@pytest.mark.parametrize("name, total, rel, active, conv, active_rel", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_published_headline_sizes(name, total, rel, active, conv, active_rel):
    n = count_params(_arch(name))
    assert n.total == pytest.approx(total, rel=rel)
    if active is not None:
        counted = n.active - (n.embedding if conv == "no-embedding" else 0)
        assert counted == pytest.approx(active, rel=active_rel)


def test_published_non_embedding_counts():
    # Gemma 3 report Table 1: 4B, 12B, 27B have 3,209M, 10,759M, 25,600M non-embedding parameters (text model;
    # vision encoder separate)
    for name, published in (("gemma-3-4b", 3_209e6), ("gemma-3-12b", 10_759e6), ("gemma-3-27b", 25_600e6)):
        n = count_params(_arch(name))
        assert n.total - n.embedding == pytest.approx(published, rel=0.0005), name
    # Qwen3-8B model card: 6.95B non-embedding (untied: embedding and lm_head both excluded)
    n = count_params(_arch("qwen3-8b"))
    assert n.total - n.embedding - n.lm_head == pytest.approx(6.95e9, rel=0.001)


def test_olmo2_13b_equals_its_checkpoint():
    # allenai/OLMo-2-1124-13B model.safetensors.index.json: total_size 54,864,793,600 bytes of float32 tensors
    assert count_params(_arch("olmo-2-13b")).total == 54_864_793_600 // 4


def test_qk_norm_over_the_whole_projection():
    olmo = _arch("olmo-2-13b")  # q_norm over 40 x 128 and k_norm over 40 x 128 weights in each of 40 layers
    assert (olmo.qk_norm, olmo.qk_norm_full, olmo.norms_per_layer) == (True, True, 2)
    assert count_params(olmo).norms == 40 * (2 * 5120 + 5120 + 5120) + 5120
    per_head = count_params(olmo._replace(qk_norm_full=False)).norms  # a Qwen3-style norm would hold 2 x 128
    assert count_params(olmo).norms - per_head == 40 * (2 * 5120 - 2 * 128)
    gqa = arch_from_config({"model_type": "cohere", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
                            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
                            "use_qk_norm": True})
    # CohereLayerNorm weights of shape (4, 16) on q and (2, 16) on k; one input norm per layer plus the final norm
    assert count_params(gqa).norms == 3 * (64 + 4 * 16 + 2 * 16) + 64


def test_cohere_parallel_block_and_tied_embeddings():
    for name in ("command-r-v01", "command-r7b"):
        arch = _arch(name)
        assert (arch.norms_per_layer, arch.norm, arch.tied_embeddings, arch.qk_norm) == (1, "rms", True, False)
        assert count_params(arch).lm_head == 0
    assert _arch("command-r-v01").attention_kind == "MHA"


def test_cohere2_sliding_pattern():
    r7b = _arch("command-r7b")  # layers 3, 7, ..., 31 global; the rest slide over 4096 tokens
    assert (r7b.sliding_layers, r7b.sliding_window) == (24, 4096)
    assert [i for i, t in enumerate(r7b.layer_types) if t == "full_attention"] == list(range(3, 32, 4))
    cfg = {k: v for k, v in PARAMS["command-r7b"]["config"].items() if k != "sliding_window_pattern"}
    assert arch_from_config(cfg).layer_types == r7b.layer_types  # Cohere2Config's default pattern is 4
    assert arch_from_config({**cfg, "sliding_window_pattern": 2}).sliding_layers == 16


def test_granite_multipliers_change_no_shape():
    cfg = PARAMS["granite-3.3-8b"]["config"]
    plain = {k: v for k, v in cfg.items() if not k.endswith(("_multiplier", "_scaling"))}
    assert count_params(arch_from_config(plain)).total == PARAMS["granite-3.3-8b"]["params"]


def test_wrappers_size_the_text_model():
    for name, family in (("gemma-3-27b", "gemma3_text"), ("llama-4-scout", "llama4_text")):
        arch = _arch(name)
        assert arch.family == family
        assert "vision tower not counted" in arch.extra["sized"]
    assert PARAMS["gemma-3-27b"]["model_class"] == "Gemma3ForCausalLM"


def test_layer_patterns():
    gemma = _arch("gemma-3-27b")  # 5 sliding (window 1024) per full layer over 62 layers
    assert (gemma.sliding_layers, gemma.sliding_window) == (52, 1024)
    oss = _arch("gpt-oss-120b")  # alternating, window 128
    assert (oss.sliding_layers, oss.layers, oss.sliding_window) == (18, 36, 128)
    scout, maverick = _arch("llama-4-scout"), _arch("llama-4-maverick")
    assert (scout.sliding_layers, scout.sliding_window) == (36, 8192)  # chunked layers; every 4th is NoPE/global
    assert (scout.n_moe_layers, maverick.n_moe_layers) == (48, 24)  # interleave_moe_layer_step 1 vs 2
    assert maverick.moe_layers[:4] == (False, True, False, True)
    assert _arch("qwen3-30b-a3b").n_moe_layers == 48


def test_attention_sinks_add_one_parameter_per_query_head():
    arch = _arch("gpt-oss-20b")
    assert attention_params(arch) - attention_params(arch._replace(attention_sinks=False)) == arch.heads


def test_deepseek_v2_query_lora_default_and_null():
    cfg = dict(PARAMS["deepseek-v2-lite"]["config"])
    assert _arch("deepseek-v2-lite").mla.q_lora_rank is None  # explicit null: q_proj straight from H
    del cfg["q_lora_rank"]
    assert arch_from_config(cfg).mla.q_lora_rank == 1536  # DeepseekV2Config's default


def test_mla_kv_bytes_per_token():
    # one latent of kv_lora_rank + qk_rope_head_dim = 576 elements per layer, bf16
    assert kv_bytes_per_token(_arch("deepseek-v2"), "bf16") == 60 * 576 * 2
    assert kv_bytes_per_token(_arch("deepseek-v2-lite"), "bf16") == 27 * 576 * 2


@pytest.mark.parametrize(
    "cfg, message",
    [
        ({"model_type": "gemma3"}, "missing field 'text_config'"),
        ({"model_type": "llama4", "text_config": [1]}, "'text_config' must be a JSON object"),
        ({"model_type": "deepseek_v2", "mlp_bias": True, "num_experts_per_tok": 6}, "mlp_bias true is not supported"),
        ({"model_type": "deepseek_v2"}, "missing field 'num_experts_per_tok'"),
        ({"model_type": "llama4_text", "no_rope_layers": [1, 0]}, "'no_rope_layers' must be a list of 0/1 flags"),
        ({"model_type": "mamba", "hidden_size": 64}, "unsupported model_type 'mamba'"),
        ({"model_type": "cohere2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "vocab_size": 512, "sliding_window": None,
          "layer_types": ["sliding_attention", "full_attention"]}, "sliding_window is not set"),
    ],
)
def test_bad_or_unsupported_configs_give_one_clear_error(cfg, message):
    with pytest.raises(AicalcError, match=message):
        arch_from_config(cfg)
