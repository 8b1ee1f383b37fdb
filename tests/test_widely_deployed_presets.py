"""Presets of widely deployed dense and MoE models: Llama 3.3 70B Instruct, DeepSeek-R1-Distill-Llama-70B, Qwen2.5-32B,
Qwen2.5-14B, QwQ-32B, DeepSeek-R1-Distill-Qwen-32B, Mistral Small 3 (24B Instruct 2501) and GLM-4.7.

Exactness against transformers is checked for every preset by tests/test_params.py and tests/test_kv_transformers.py
(records of validation/record_params.py and record_kv.py). Here each preset is held to figures worked out by hand from
its own config numbers, tensor group by tensor group, independently of aicalc's formulas, to the figures published
apart from aicalc (released checkpoints' element counts, model-card sizes; sources in each preset's notes), and the
presets that copy another model's shapes are held to that model's file key by key.
"""

import json

import pytest

from aicalc.catalog.hf_config import arch_from_config
from aicalc.core.kv_cache import kv_bytes_per_token

from conftest import DATA, check_preset_answers, model_preset, preset_config, preset_params

NEW = ("llama-3.3-70b", "deepseek-r1-distill-llama-70b", "qwen2.5-32b", "qwen2.5-14b", "qwq-32b",
       "deepseek-r1-distill-qwen-32b", "mistral-small-24b", "glm-4.7")
DENSE = NEW[:-1]


def _head_dim(c):
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def _gqa_attention(c, qkv_bias):
    """q, k, v, o projections of a GQA layer: H x A·d, H x K·d (twice), A·d x H; with ``qkv_bias`` a bias on q, k, v."""
    H, A, K, d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], _head_dim(c)
    return H * A * d + 2 * H * K * d + A * d * H + ((A * d + 2 * K * d) if qkv_bias else 0)


def _dense_by_hand(c):
    """Llama, Qwen2 and Mistral decoders: per layer the attention projections (q/k/v biases for Qwen2), the gated MLP's
    gate, up and down (3·H·F), two RMSNorms (2·H); then the final norm (H), the embedding (V·H) and the untied LM head
    (V·H)."""
    H, F, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    assert c["tie_word_embeddings"] is False
    layer = _gqa_attention(c, qkv_bias=c["model_type"] == "qwen2") + 3 * H * F + 2 * H
    return L * layer + H + 2 * V * H


@pytest.mark.parametrize("name", DENSE)
def test_dense_counts_by_hand(name):
    n = preset_params(name)
    assert n.total == n.active == _dense_by_hand(preset_config(name))
    assert n.lm_head == n.embedding  # untied: the head is a second V x H matrix


def test_dense_counts_written_out():
    """The same counts with every number written out."""
    # Llama 3.3 70B: q 8192x8192, k and v 8192x1024, o 8192x8192; MLP 3x8192x28672; 2 norms; 80 layers; V 128256
    llama_layer = 8192 * 8192 + 2 * 8192 * 1024 + 8192 * 8192 + 3 * 8192 * 28672 + 2 * 8192
    assert preset_params("llama-3.3-70b").total == 80 * llama_layer + 8192 + 2 * 128256 * 8192 == 70_553_706_496
    # Qwen2.5-32B: q 5120x5120 + 5120 bias, k and v 5120x1024 + 1024 bias each, o 5120x5120; MLP 3x5120x27648; 64 layers
    qwen_attention = 5120 * 5120 + 5120 + 2 * (5120 * 1024 + 1024) + 5120 * 5120
    qwen32_layer = qwen_attention + 3 * 5120 * 27648 + 2 * 5120
    assert preset_params("qwen2.5-32b").total == 64 * qwen32_layer + 5120 + 2 * 152064 * 5120 == 32_763_876_352
    # Qwen2.5-14B: the same attention, MLP 3x5120x13824, 48 layers
    qwen14_layer = qwen_attention + 3 * 5120 * 13824 + 2 * 5120
    assert preset_params("qwen2.5-14b").total == 48 * qwen14_layer + 5120 + 2 * 152064 * 5120 == 14_770_033_664
    # Mistral Small 24B: head_dim 128, so q 5120x4096, k and v 5120x1024, o 4096x5120; MLP 3x5120x32768; 40 layers
    mistral_layer = 5120 * 4096 + 2 * 5120 * 1024 + 4096 * 5120 + 3 * 5120 * 32768 + 2 * 5120
    assert preset_params("mistral-small-24b").total == 40 * mistral_layer + 5120 + 2 * 131072 * 5120 == 23_572_403_200


# Counts published apart from aicalc (preset notes):
# - QwQ-32B's release: 771 safetensors tensors, "参数总量: 32,763,876,352" (a public model-information report's tensor list);
#   embedding and lm_head both stored (untied), so the file holds exactly the parameters.
# - DeepSeek-R1-Distill-Qwen-32B: the Hub API's safetensors total, {"BF16": 32763876352}.
# - DeepSeek-R1-Distill-Llama-70B: "parameters 70,553,706,496" from the release's model.safetensors.index.json (a public
#   analysis pinned to commit b1c0b44b).
@pytest.mark.parametrize("name, published", [
    ("qwq-32b", 32_763_876_352),
    ("deepseek-r1-distill-qwen-32b", 32_763_876_352),
    ("deepseek-r1-distill-llama-70b", 70_553_706_496),
])
def test_counts_equal_the_released_checkpoints(name, published):
    assert preset_params(name).total == published


# Model cards: Qwen2.5-32B "Number of Parameters: 32.5B, Number of Paramaters (Non-Embedding): 31.0B", Qwen2.5-14B
# "14.7B / 13.1B" (the cards round down: both are within 1 %); Mistral-Small-24B-Instruct-2501 "24B"; Llama 3.3 "70B".
# Non-embedding leaves out the embedding and the untied head.
@pytest.mark.parametrize("name, total, non_embedding", [
    ("qwen2.5-32b", 32.5e9, 31.0e9),
    ("qwen2.5-14b", 14.7e9, 13.1e9),
    ("mistral-small-24b", 24e9, None),
    ("llama-3.3-70b", 70e9, None),
])
def test_counts_near_the_model_cards(name, total, non_embedding):
    c, n = preset_config(name), preset_params(name)
    assert n.total == pytest.approx(total, rel=0.02)
    if non_embedding:
        assert n.total - 2 * c["vocab_size"] * c["hidden_size"] == pytest.approx(non_embedding, rel=0.01)


def _differing(a, b):
    """The keys whose values differ, or which one file has and the other lacks."""
    a, b = preset_config(a), preset_config(b)
    return {k for k in a.keys() | b.keys() if k not in a or k not in b or a[k] != b[k]}


def test_llama_3_3_is_llama_3_1_70b_with_the_instruct_keys():
    """Llama 3.3 keeps Llama 3.1 70B's shapes: the files differ in the Instruct eos list and in head_dim 128 (= 8192 / 64),
    which the 3.1 file leaves to LlamaConfig's default, hidden / heads."""
    assert _differing("llama-3.3-70b", "llama-3.1-70b") == {"eos_token_id", "head_dim"}
    assert preset_config("llama-3.3-70b")["head_dim"] == 8192 // 64
    assert preset_params("llama-3.3-70b") == preset_params("llama-3.1-70b")


def test_the_distills_keep_their_bases_shapes():
    """DeepSeek-R1-Distill-Llama-70B's file is Llama-3.3-70B-Instruct's key for key; QwQ-32B and
    DeepSeek-R1-Distill-Qwen-32B differ from Qwen2.5-32B only in keys that change no shape (the window is inert:
    use_sliding_window false)."""
    assert preset_config("deepseek-r1-distill-llama-70b") == preset_config("llama-3.3-70b")
    assert _differing("qwq-32b", "qwen2.5-32b") == {"eos_token_id", "sliding_window"}
    assert _differing("deepseek-r1-distill-qwen-32b", "qwen2.5-32b") == {"sliding_window", "rope_scaling"}
    base = arch_from_config(preset_config("qwen2.5-32b"))
    for name in ("qwq-32b", "deepseek-r1-distill-qwen-32b"):
        assert arch_from_config(preset_config(name)) == base
    assert base.sliding_window is None and base.qkv_bias and not base.o_bias


def test_qwen2_5_14b_is_qwen2_5_32b_narrower_and_shallower():
    assert _differing("qwen2.5-14b", "qwen2.5-32b") == {"intermediate_size", "num_hidden_layers", "max_window_layers"}


def test_mistral_small_head_dim_is_explicit_and_attention_full():
    arch = arch_from_config(preset_config("mistral-small-24b"))
    assert (arch.head_dim, arch.hidden // arch.heads) == (128, 160)
    assert arch.sliding_window is None  # sliding_window null in the file: no window (MistralConfig's default is 4096)


def test_glm_4_7_counts_by_hand_and_published():
    """GLM-4.7 (Glm4MoeForCausalLM): every layer GQA with q/k/v biases (no o_proj bias), a head_dim RMSNorm on each of q
    and k (use_qk_norm), two RMSNorms; layers 0-2 a gated MLP of 12288, layers 3-91 a bias-free router (160 x 5120; its
    e_score_correction_bias is a buffer), 160 routed experts and 1 shared expert of 3 x 5120 x 1536. The MTP layer is not
    built. Model card: "355B total parameters and 32B active parameters"; the active figure leaves out the embedding and
    the untied head."""
    n = preset_params("glm-4.7")
    attention = 5120 * 12288 + 2 * 5120 * 1024 + 12288 * 5120 + 12288 + 2 * 1024 + 2 * 128 + 2 * 5120
    expert = 3 * 5120 * 1536
    dense_layer = attention + 3 * 5120 * 12288
    moe_common = attention + 160 * 5120 + expert  # router and the shared expert
    outside = 5120 + 2 * 151552 * 5120
    assert n.total == 3 * dense_layer + 89 * (moe_common + 160 * expert) + outside == 352_797_814_784
    assert n.active == 3 * dense_layer + 89 * (moe_common + 8 * expert) + outside == 33_632_251_904
    assert n.total == pytest.approx(355e9, rel=0.01)
    assert n.active - 2 * 151552 * 5120 == pytest.approx(32e9, rel=0.01)
    arch = arch_from_config(preset_config("glm-4.7"))
    assert (arch.qkv_bias, arch.o_bias, arch.qk_norm, arch.n_moe_layers) == (True, False, True, 89)
    assert (arch.moe.experts, arch.moe.experts_per_token, arch.moe.shared_experts) == (160, 8, 1)


def test_glm_4_7_preset_is_the_nvfp4_fixture_less_its_quantization():
    """NVIDIA's NVFP4 re-save of GLM-4.7 (tests/data/configs/glm-4.7-nvfp4) keeps every key of the official file; it
    writes dtype where the official file says torch_dtype and adds its quantization_config and version."""
    fixture = json.loads((DATA / "configs" / "glm-4.7-nvfp4" / "config.json").read_text())
    dropped = {"quantization_config", "transformers_version", "dtype"}
    preset = preset_config("glm-4.7")
    assert {k: v for k, v in preset.items() if k != "torch_dtype"} == {k: v for k, v in fixture.items()
                                                                        if k not in dropped}
    assert preset["torch_dtype"] == fixture["dtype"] == "bfloat16"


# KV cache per token at 16 bit, by hand: K and V (2) x layers x KV heads x head_dim x 2 bytes.
@pytest.mark.parametrize("name, by_hand", [
    ("llama-3.3-70b", 2 * 80 * 8 * 128 * 2),  # 327,680 B = 320 KiB
    ("deepseek-r1-distill-llama-70b", 2 * 80 * 8 * 128 * 2),
    ("qwen2.5-32b", 2 * 64 * 8 * 128 * 2),  # 262,144 B = 256 KiB
    ("qwen2.5-14b", 2 * 48 * 8 * 128 * 2),  # 196,608 B
    ("qwq-32b", 2 * 64 * 8 * 128 * 2),
    ("deepseek-r1-distill-qwen-32b", 2 * 64 * 8 * 128 * 2),
    ("mistral-small-24b", 2 * 40 * 8 * 128 * 2),  # 163,840 B (not 204,800: head_dim 128, not 5120 / 32)
    ("glm-4.7", 2 * 92 * 8 * 128 * 2),  # 376,832 B = 368 KiB
])
def test_kv_bytes_per_token_by_hand(name, by_hand):
    assert kv_bytes_per_token(arch_from_config(preset_config(name)), "bf16") == by_hand


@pytest.mark.parametrize("name", NEW)
def test_new_presets_are_bf16_releases(name):
    """None of these releases declares a quantization_config: no release block, the default weight format is bf16."""
    assert "release" not in model_preset(name) and preset_config(name)["torch_dtype"] == "bfloat16"


@pytest.mark.parametrize("name", NEW)
def test_cli_runs_each_new_preset(cli, name):
    check_preset_answers(cli, name, preset_params(name).total)
