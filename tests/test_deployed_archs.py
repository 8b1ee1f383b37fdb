"""Model types deployed in 2025-26 that aicalc's Arch already represents: Kimi K2 (``kimi_k2``, DeepSeek-V3's MLA and
MoE), GLM-4.5/4.6/4.7 (``glm4_moe``), GLM-4.7-Flash (``glm4_moe_lite``, MLA and MoE) and MiniMax-M2 (``minimax_m2``),
read from real published ``config.json`` files
(``tests/data/configs/*``, sources in ``tests/data/configs/SOURCES.md``).

Exactness: parameter counts and KV bytes equal what transformers 5.23 builds from the same files, as recorded by
``validation/record_params.py`` and ``validation/record_kv.py`` (``tests/test_params.py`` and
``tests/test_kv_transformers.py`` check every record; here the per-layer parts and the CLI). Headline sizes: the
vendors' model cards, within their rounding.
"""

import json

import pytest

from aicalc.catalog.hf_config import arch_from_config
from aicalc.core.params import attention_params, count_params, qk_norm_params
from aicalc.errors import AicalcError

from conftest import DATA, fixture_config, fixture_records

PARAMS = fixture_records()
KV = json.loads((DATA / "validation" / "kv_cache.json").read_text())["records"]
FIXTURES = {"kimi-k2-instruct": "kimi_k2", "glm-4.7-nvfp4": "glm4_moe", "glm-4.7-flash": "glm4_moe_lite",
            "minimax-m2.7": "minimax_m2"}
# every fixture of a model type added for the deployed models, with the type its file names: these, DeepSeek Sparse
# Attention's (tests/test_dsa.py) and the Gated DeltaNet hybrids' (tests/test_gated_delta_net.py)
TYPES = {**FIXTURES, "deepseek-v3.2": "deepseek_v32", "glm-5.1": "glm_moe_dsa",
         "qwen3-next-80b-a3b-instruct": "qwen3_next", "qwen3.5-4b": "qwen3_5", "qwen3.5-35b-a3b": "qwen3_5_moe",
         "deepseek-v4-flash": "deepseek_v4", "deepseek-v4-pro": "deepseek_v4"}
_config = fixture_config


@pytest.mark.parametrize("name", TYPES)
def test_fixture_is_the_type_and_counts_like_transformers(name):
    cfg = _config(name)
    assert cfg["model_type"] == TYPES[name]
    assert PARAMS[name]["config"] == cfg  # the record was made from this very file
    assert count_params(arch_from_config(cfg)).total == PARAMS[name]["params"]


@pytest.mark.parametrize("name", FIXTURES)
def test_attention_and_norm_parts_equal_the_recorded_layer(name):
    """One decoder layer's attention block (projections, MLA's inner norms, QK-norms) and its two layer norms equal
    the ``numel()`` sums transformers reports for ``layers[-1].self_attn`` and the layer norms."""
    arch = arch_from_config(_config(name))
    parts = PARAMS[name]["breakdown"]["layer_last_parts"]
    attn = sum(v for k, v in parts.items() if k.startswith("self_attn"))
    assert attn == attention_params(arch) + qk_norm_params(arch)
    assert parts["input_layernorm"] + parts["post_attention_layernorm"] == arch.norms_per_layer * arch.hidden


def test_kimi_k2_is_deepseek_v3_with_384_experts():
    arch = arch_from_config(_config("kimi-k2-instruct"))
    assert (arch.family, arch.attention_kind, arch.heads) == ("deepseek_v3", "MLA", 64)
    assert (arch.moe.experts, arch.moe.experts_per_token, arch.moe.shared_experts, arch.n_moe_layers) == (384, 8, 1, 60)
    assert PARAMS["kimi-k2-instruct"]["model_class"] == "DeepseekV3ForCausalLM"
    # the same file read as deepseek_v3 (what Moonshot's README says to do for frameworks without kimi_k2) is the same
    assert arch == arch_from_config({**_config("kimi-k2-instruct"), "model_type": "deepseek_v3"})


def test_glm4_moe_layers_biases_and_the_mtp_layer():
    cfg = _config("glm-4.7-nvfp4")
    arch = arch_from_config(cfg)
    assert arch.moe_layers[:4] == (False, False, False, True) and arch.n_moe_layers == 89  # first_k_dense_replace 3
    assert (arch.qkv_bias, arch.o_bias, arch.qk_norm, arch.qk_norm_full, arch.head_dim) == (True, False, True, False, 128)
    # transformers builds 92 layers: the num_nextn_predict_layers MTP layer is not a module, so not counted
    assert PARAMS["glm-4.7-nvfp4"]["breakdown"]["num_layers"] == cfg["num_hidden_layers"] == 92
    assert count_params(arch_from_config({**cfg, "num_nextn_predict_layers": 0})).total == PARAMS["glm-4.7-nvfp4"]["params"]
    # GLM-4.5-Air's layout (the class defaults) has no QK-norm: 2·128 weights fewer per layer
    plain = arch_from_config({**cfg, "use_qk_norm": False})
    assert count_params(arch).total - count_params(plain).total == 92 * 2 * 128


def test_glm4_moe_lite_is_mla_with_one_dense_layer():
    cfg = _config("glm-4.7-flash")
    arch = arch_from_config(cfg)
    assert (arch.attention_kind, arch.mla.q_lora_rank, arch.mla.v_head_dim, arch.n_moe_layers) == ("MLA", 768, 256, 46)
    assert arch.moe_layers[0] is False and all(arch.moe_layers[1:])
    # the checkpoint ships an MTP layer (model.layers.47.*) that transformers does not build: 47 layers counted
    assert PARAMS["glm-4.7-flash"]["breakdown"]["num_layers"] == 47
    # the class reads mlp_layer_types and ignores first_k_dense_replace; a file where the two disagree is refused
    with pytest.raises(AicalcError, match="first_k_dense_replace 3 without mlp_layer_types"):
        arch_from_config({**cfg, "first_k_dense_replace": 3})
    three = ["dense"] * 3 + ["sparse"] * 44
    assert arch_from_config({**cfg, "first_k_dense_replace": 3, "mlp_layer_types": three}).n_moe_layers == 44


def test_minimax_m2_qk_norm_over_the_whole_projection_and_no_shared_expert():
    arch = arch_from_config(_config("minimax-m2.7"))
    assert (arch.qk_norm, arch.qk_norm_full, arch.head_dim, arch.q_dim) == (True, True, 128, 6144)
    assert qk_norm_params(arch) == 48 * 128 + 8 * 128  # MiniMaxM2RMSNorm(6144) on q, (1024) on k
    assert (arch.moe.shared_experts, arch.n_moe_layers, arch.moe.expert_ffn) == (0, 62, 1536)


# Model cards: Kimi K2 "1 trillion total parameters" (1.026T: one significant digit), GLM-4.5/4.6/4.7 "355 billion
# total parameters", GLM-4.7-Flash "a 30B-A3B MoE model", MiniMax-M2 "230 billion total parameters"; transformers
# does not build the MTP modules.
@pytest.mark.parametrize("name, total, rel", [("kimi-k2-instruct", 1e12, 0.03), ("glm-4.7-nvfp4", 355e9, 0.01),
                                              ("glm-4.7-flash", 30e9, 0.01), ("minimax-m2.7", 230e9, 0.01)])
def test_published_totals(name, total, rel):
    assert count_params(arch_from_config(_config(name))).total == pytest.approx(total, rel=rel)


@pytest.mark.parametrize("name", FIXTURES)
def test_cli_kv_cache_on_the_file_equals_transformers_cache(cli, name):
    rec = next(r for r in KV if r["name"] == name and r["case"] == "b1-s16")
    row = cli("kv-cache", DATA / "configs" / name, "--context", "16", "--engine", "hf", "--json").json["rows"][0]
    assert row["kv_cache_bytes"] == rec["kv_bytes"]


@pytest.mark.parametrize(
    "cfg, message",
    [
        ({"model_type": "minimax"}, "'minimax' \\(lightning \\(linear\\) attention, not represented;"),
        ({"model_type": "deepseek_v4", "num_key_value_heads": 8}, "num_key_value_heads must be 1"),
        ({"model_type": "kimi_linear"}, "unsupported model_type 'kimi_linear'"),
        ({"model_type": "minimax_m2", "attn_type_list": [0, 1]}, "linear \\(lightning\\) attention layers are not"),
        ({"model_type": "glm4_moe", "n_routed_experts": 160, "n_group": 3}, "n_group \\(3\\) does not divide"),
    ],
)
def test_unrepresented_types_and_shapes_are_refused(cfg, message):
    with pytest.raises(AicalcError, match=message):
        arch_from_config(cfg)
