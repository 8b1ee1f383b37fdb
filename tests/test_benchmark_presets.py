"""Presets of models that published serving and training benchmarks use: GLM-4.5-Air, Qwen3-Coder-30B-A3B-Instruct,
Qwen3-4B / 1.7B / 0.6B and Llama-3.2-1B.

Exactness against transformers is checked for every preset by tests/test_params.py and tests/test_kv_transformers.py
(records of validation/record_params.py and record_kv.py). Here each preset is held to figures worked out by hand from
its own config numbers, tensor group by tensor group, independently of aicalc's formulas, and to what the vendors
publish (model cards' totals, active and non-embedding counts; the released safetensors' element counts).
"""

import json

import pytest

from aicalc.catalog.hf_config import arch_from_config
from aicalc.core.kv_cache import kv_bytes_per_token
from aicalc.core.params import count_params

from conftest import BOOKKEEPING, DATA, check_preset_answers, preset_config, preset_params

NEW = ("glm-4.5-air", "qwen3-coder-30b-a3b", "qwen3-4b", "qwen3-1.7b", "qwen3-0.6b", "llama-3.2-1b")


def _gqa_attention(c, bias=False):
    """q, k, v, o projections of a GQA layer: H x A·d, H x K·d (twice), A·d x H; with ``bias`` a bias on q, k and v."""
    H, A, K, d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    q, kv, o = H * A * d, 2 * H * K * d, A * d * H
    return q + kv + o + ((A * d + 2 * K * d) if bias else 0)


def _dense_by_hand(c, qk_norm):
    """A dense decoder (Qwen3, Llama): per layer the attention projections, the two head_dim QK-norm vectors (Qwen3),
    the gated MLP's gate, up and down (3·H·F) and two RMSNorms (2·H); then the final norm (H), the embedding (V·H) and,
    when not tied, the LM head (V·H)."""
    H, F, L, V, d = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"], c["head_dim"]
    layer = _gqa_attention(c) + (2 * d if qk_norm else 0) + 3 * H * F + 2 * H
    return L * layer + H + V * H * (1 if c["tie_word_embeddings"] else 2)


# Model cards: Qwen3-0.6B "Number of Parameters: 0.6B, Number of Paramaters (Non-Embedding): 0.44B", Qwen3-1.7B "1.7B /
# 1.4B", Qwen3-4B "4.0B / 3.6B"; Llama 3.2 model card "1B (1.23B)". Tied heads: the non-embedding count leaves the one
# shared V x H matrix out once.
@pytest.mark.parametrize("name, qk_norm, total, rel, non_embedding, rel_ne", [
    ("qwen3-0.6b", True, 0.6e9, 0.01, 0.44e9, 0.002),
    ("qwen3-1.7b", True, 1.7e9, 0.02, 1.4e9, 0.01),
    ("qwen3-4b", True, 4.0e9, 0.01, 3.6e9, 0.01),
    ("llama-3.2-1b", False, 1.23e9, 0.005, None, None),
])
def test_dense_counts_by_hand_and_published(name, qk_norm, total, rel, non_embedding, rel_ne):
    c = preset_config(name)
    n = preset_params(name)
    assert c["tie_word_embeddings"] is True and n.lm_head == 0  # the head is the embedding: counted once
    assert n.total == n.active == _dense_by_hand(c, qk_norm)
    assert n.total == pytest.approx(total, rel=rel)
    if non_embedding:
        assert n.total - c["vocab_size"] * c["hidden_size"] == pytest.approx(non_embedding, rel=rel_ne)


def test_dense_counts_written_out():
    """The same counts with every number written out (Qwen3-4B: V 151936, H 2560, 32 heads / 8 KV heads of 128,
    F 9728, 36 layers; Llama-3.2-1B: V 128256, H 2048, 32 / 8 heads of 64, F 8192, 16 layers)."""
    qwen3_4b_layer = (2560 * 4096 + 2 * 2560 * 1024 + 4096 * 2560) + 2 * 128 + 3 * 2560 * 9728 + 2 * 2560
    assert qwen3_4b_layer == 100_930_816
    assert preset_params("qwen3-4b").total == 36 * qwen3_4b_layer + 2560 + 151936 * 2560 == 4_022_468_096
    llama_1b_layer = (2048 * 2048 + 2 * 2048 * 512 + 2048 * 2048) + 3 * 2048 * 8192 + 2 * 2048
    assert preset_params("llama-3.2-1b").total == 16 * llama_1b_layer + 2048 + 128256 * 2048 == 1_235_814_400


def test_qwen3_0_6b_release_stores_the_tied_head_twice():
    """The release's model.safetensors lists lm_head.weight [151936, 1024] beside model.embed_tokens.weight: 311
    tensors of 751,632,384 elements (a public model-information report of Qwen3-0.6B, preset notes). transformers ties
    them at load, so the model holds one V x H matrix fewer than the file."""
    n = preset_params("qwen3-0.6b")
    assert n.total + 151936 * 1024 == 751_632_384
    assert n.embedding == 151936 * 1024


def _glm4_moe_by_hand(c):
    """GLM-4.5-Air (Glm4MoeForCausalLM): every layer GQA with q/k/v biases (attention_bias; o_proj has none), no
    QK-norm (use_qk_norm false), two RMSNorms; the first ``first_k_dense_replace`` layers a gated MLP of
    intermediate_size, the rest a bias-free router (E x H; its e_score_correction_bias is a buffer), E routed experts
    and ``n_shared_experts`` shared MLP of moe_intermediate_size. The MTP layer (num_nextn_predict_layers) is not
    built. Returns (total, active), active with k routed experts per token."""
    H, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    E, k, Fe, S = c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"], c["n_shared_experts"]
    dense = c["first_k_dense_replace"]
    common = _gqa_attention(c, bias=c["attention_bias"]) + 2 * H
    dense_layer = common + 3 * H * c["intermediate_size"]
    moe_layer = common + E * H + S * 3 * H * Fe
    outside = H + 2 * V * H  # final norm, embedding, untied head
    total = dense * dense_layer + (L - dense) * (moe_layer + E * 3 * H * Fe) + outside
    active = dense * dense_layer + (L - dense) * (moe_layer + k * 3 * H * Fe) + outside
    return total, active


def test_glm_4_5_air_counts_by_hand_and_published():
    """Model card: "GLM-4.5-Air ... 106 billion total parameters and 12 billion active parameters". The card's active
    figure leaves out the embedding and the untied LM head (12.18B; 13.42B with them)."""
    c = preset_config("glm-4.5-air")
    n = preset_params("glm-4.5-air")
    total, active = _glm4_moe_by_hand(c)
    assert (n.total, n.active) == (total, active)
    # written out: attention 4096x12288 + 2x4096x1024 + 12288x4096 weights, 12288 + 2x1024 biases, 2x4096 norms;
    # layer 0 dense (3x4096x10944); 45 MoE layers: router 128x4096, 128 routed + 1 shared expert of 3x4096x1408
    attention = 4096 * 12288 + 2 * 4096 * 1024 + 12288 * 4096 + 12288 + 2 * 1024 + 2 * 4096
    expert = 3 * 4096 * 1408
    assert total == (attention + 3 * 4096 * 10944) + 45 * (attention + 128 * 4096 + 129 * expert) + 4096 \
        + 2 * 151552 * 4096 == 106_852_245_504
    assert total == pytest.approx(106e9, rel=0.01)
    embeddings = 2 * 151552 * 4096
    assert active - embeddings == pytest.approx(12e9, rel=0.02)
    assert active == (attention + 3 * 4096 * 10944) + 45 * (attention + 128 * 4096 + 9 * expert) + 4096 + embeddings


def test_glm_4_5_air_layout_and_the_mtp_layer():
    c = preset_config("glm-4.5-air")
    arch = arch_from_config(c)
    assert arch.family == "glm4_moe" and arch.moe_layers[:2] == (False, True) and arch.n_moe_layers == 45
    assert (arch.qkv_bias, arch.o_bias, arch.qk_norm, arch.head_dim) == (True, False, False, 128)
    assert (arch.moe.experts, arch.moe.experts_per_token, arch.moe.shared_experts) == (128, 8, 1)
    # the checkpoint's MTP layer (model.layers.46.*) is not a module of transformers' model: not counted
    assert count_params(arch_from_config({**c, "num_nextn_predict_layers": 0})).total == preset_params("glm-4.5-air").total


def test_qwen3_coder_30b_a3b_is_qwen3_30b_a3b_with_the_long_context():
    """The Coder file keeps Qwen3-30B-A3B's shapes (so its count, 30.5B / 3.3B on the model card, and its cache) and
    differs in context length, RoPE base, aux-loss coefficient, the unused intermediate_size and max_window_layers
    (no sliding window either way) and three keys Qwen3MoeConfig does not read."""
    coder, base = preset_config("qwen3-coder-30b-a3b"), preset_config("qwen3-30b-a3b")
    differs = {k for k in coder.keys() | base.keys() if coder.get(k) != base.get(k)}
    assert differs == {"max_position_embeddings", "rope_theta", "router_aux_loss_coef", "intermediate_size",
                       "max_window_layers", "bos_token_id", "torch_dtype", "dtype", "qkv_bias", "use_qk_norm",
                       "shared_expert_intermediate_size"}
    a, b = arch_from_config(coder), arch_from_config(base)
    assert (a.max_context, b.max_context) == (262144, 40960)
    assert all(a.moe_layers) and a.n_moe_layers == 48  # intermediate_size is unused: no dense layer
    assert count_params(a) == count_params(b)
    # 48 layers: q 2048x4096, k and v 2048x512, o 4096x2048, QK-norm 2x128, router 128x2048, 2 norms; experts
    # 3x2048x768 each (128 held, 8 per token); final norm; untied embedding and head 151936x2048 each
    common = 2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 128 + 128 * 2048 + 2 * 2048
    expert, outside = 3 * 2048 * 768, 2048 + 2 * 151936 * 2048
    n = count_params(a)
    assert n.total == 48 * (common + 128 * expert) + outside == 30_532_122_624
    assert n.active == 48 * (common + 8 * expert) + outside == 3_353_032_704
    assert n.total == pytest.approx(30.5e9, rel=0.002) and n.active == pytest.approx(3.3e9, rel=0.02)


# KV cache per token at 16 bit, by hand: K and V (2) x layers x KV heads x head_dim x 2 bytes.
@pytest.mark.parametrize("name, by_hand", [
    ("glm-4.5-air", 2 * 46 * 8 * 128 * 2),  # 188,416 B = 184 KiB
    ("qwen3-coder-30b-a3b", 2 * 48 * 4 * 128 * 2),  # 98,304 B
    ("qwen3-4b", 2 * 36 * 8 * 128 * 2),  # 147,456 B
    ("qwen3-1.7b", 2 * 28 * 8 * 128 * 2),  # 114,688 B
    ("qwen3-0.6b", 2 * 28 * 8 * 128 * 2),  # 114,688 B
    ("llama-3.2-1b", 2 * 16 * 8 * 64 * 2),  # 32,768 B
])
def test_kv_bytes_per_token_by_hand(name, by_hand):
    assert kv_bytes_per_token(arch_from_config(preset_config(name)), "bf16") == by_hand


@pytest.mark.parametrize("preset, fixture", [("qwen3-0.6b", "qwen3-0.6b"), ("llama-3.2-1b", "llama-3.2-1b")])
def test_preset_is_the_fixture_file_less_its_bookkeeping(preset, fixture):
    """Both presets were read from the published files the fixtures hold (tests/data/configs/SOURCES.md)."""
    real = json.loads((DATA / "configs" / fixture / "config.json").read_text())
    assert preset_config(preset) == {k: v for k, v in real.items() if k not in BOOKKEEPING}


@pytest.mark.parametrize("name", NEW)
def test_cli_runs_each_new_preset(cli, name):
    check_preset_answers(cli, name, preset_params(name).total)
