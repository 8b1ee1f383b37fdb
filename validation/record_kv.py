"""Record the KV-cache bytes that transformers' own cache holds after a forward pass.

For each model preset and each ``tests/data/configs/*/config.json`` this builds the model with
``AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)`` inside ``FakeTensorMode`` (shapes and dtypes
are exact, no memory is allocated), runs ``model(input_ids, use_cache=True)`` on ``input_ids`` of shape
``(batch, seq)`` and sums ``numel() * element_size()`` of every ``keys`` and ``values`` tensor in the returned
``past_key_values.layers``; a linear-attention layer (Qwen3-Next, Qwen3.5: ``LinearAttentionLayer``) or a Mamba
layer (Nemotron-H) holds no keys or values but a conv state and a recurrent (SSM) state, whose bytes are recorded
apart as ``state_bytes`` with their shapes and dtypes (``state_groups``). One decode step (one more token) is then run on the same cache and
measured again.

Recorded per case: ``kv_bytes`` (the logical bytes of the cached key/value tensors), for linear-attention and Mamba
layers ``state_bytes`` and ``state_groups`` (their ``conv_states`` and ``recurrent_states``), ``per_layer_seq``
(dim -2 of each layer's keys), ``per_layer_bytes``, ``layer_groups`` (runs of layers with the same cache class,
tensor shapes and dtype: the exact shapes that are cached), ``kv_storage_bytes`` (bytes of the distinct tensor
storages those tensors keep alive; larger than ``kv_bytes`` where a cached tensor is a slice of a bigger
buffer, as with sliding-window layers right after a long prefill) and ``after_decode_1`` (the same after one
decode step).

Cases: every model at (batch 1, seq 16); every model whose cache has sliding-window layers also at
seq = window + 100; a few extra batch sizes, an eager-attention run and ``StaticCache`` runs. A ``crosscheck``
section proves that fake tensors change nothing: tiny configs of each model family are run both for real on
the CPU (bf16) and under ``FakeTensorMode`` and must give identical shapes and bytes. Every number comes from
torch; nothing is computed by formula.

This harness deliberately does not import aicalc: it reads the YAML/JSON files as plain data.

    python validation/record_kv.py            # regenerate tests/data/validation/kv_cache.json
    python validation/record_kv.py --check    # recompute and compare with the committed file
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

import record_params as rp

GENERATED_BY_KV = "validation/record_kv.py"
DTYPE = "bfloat16"

# Extra cases on named presets (skipped with a message when the preset does not exist).
# seq "window+100" / "window" / "window-1" resolve to the preset's largest sliding window.
EXTRA_CASES: list[dict[str, Any]] = [
    {"name": "llama-3.1-8b", "batch": 2, "seq": 16},
    {"name": "deepseek-v3", "batch": 2, "seq": 16},
    {"name": "deepseek-v3", "batch": 1, "seq": 4096},
    {"name": "mistral-7b", "batch": 2, "seq": "window+100"},
    {"name": "mistral-7b", "batch": 1, "seq": "window-1"},
    {"name": "mistral-7b", "batch": 1, "seq": "window"},
    {"name": "mistral-7b", "batch": 1, "seq": "window+100", "attn": "eager"},
    {"name": "mistral-7b", "batch": 1, "seq": "window+100", "cache": "StaticCache"},
    {"name": "gemma-2-9b", "batch": 2, "seq": "window+100"},
    {"name": "gemma-2-9b", "batch": 1, "seq": "window+100", "cache": "StaticCache"},
    {"name": "phi-3-mini", "batch": 1, "seq": "window+100", "cache": "StaticCache"},
    {"name": "command-r7b", "batch": 1, "seq": "window+100", "cache": "StaticCache"},
    # DeepSeek-V4-Pro (every layer CSA or HCA): past two HCA windows of 128 and a CSA window boundary, two sequences
    {"name": "deepseek-v4-pro", "batch": 2, "seq": 258},
]

# Tiny configs, at least one per model family (model_type), run for real (CPU, bf16) and under FakeTensorMode
# to prove the two agree. Sliding windows are shrunk to 8 (phi3: 7) so that seq 6..12 spans the window edge.
# A config runs when its model_type is used by a preset or fixture.
_TINY_LLAMA = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=512,
    max_position_embeddings=256,
)
# the MLA + MoE shape the DeepSeek-V3, Kimi K2 and GLM-4.7-Flash tiny configs share (layer 0 dense, then MoE)
_TINY_MLA = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
    "vocab_size": 512,
    "max_position_embeddings": 256,
}
CROSSCHECK_CONFIGS: dict[str, dict[str, Any]] = {
    "llama": {"model_type": "llama", **_TINY_LLAMA},
    "mistral": {"model_type": "mistral", **_TINY_LLAMA, "sliding_window": 8},
    "mixtral": {
        "model_type": "mixtral",
        **_TINY_LLAMA,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "sliding_window": None,
    },
    "qwen2": {"model_type": "qwen2", **_TINY_LLAMA, "use_sliding_window": False, "sliding_window": 8},
    "qwen3": {"model_type": "qwen3", **_TINY_LLAMA, "head_dim": 32},
    "gemma2": {
        "model_type": "gemma2",
        **_TINY_LLAMA,
        "num_hidden_layers": 4,
        "head_dim": 32,
        "sliding_window": 8,
        "query_pre_attn_scalar": 32,
    },
    "phi3": {"model_type": "phi3", **_TINY_LLAMA, "sliding_window": 7, "pad_token_id": 0},
    "deepseek_v3": {**_TINY_MLA, "model_type": "deepseek_v3", "first_k_dense_replace": 1, "n_group": 2,
                    "topk_group": 1, "q_lora_rank": 48},
    "gpt2": {
        "model_type": "gpt2",
        "n_embd": 64,
        "n_head": 4,
        "n_layer": 3,
        "n_positions": 256,
        "vocab_size": 512,
    },
    "falcon": {
        "model_type": "falcon",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_kv_heads": 2,
        "num_hidden_layers": 3,
        "new_decoder_architecture": True,
        "parallel_attn": True,
        "bias": False,
        "vocab_size": 512,
        "alibi": False,
    },
    "falcon-mqa": {
        "model_type": "falcon",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_hidden_layers": 3,
        "new_decoder_architecture": False,
        "multi_query": True,
        "parallel_attn": True,
        "bias": False,
        "vocab_size": 512,
        "alibi": False,
    },
    "qwen2_moe": {
        "model_type": "qwen2_moe",
        **_TINY_LLAMA,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 64,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "use_sliding_window": False,
    },
    "bloom": {"model_type": "bloom", "hidden_size": 64, "n_head": 4, "n_layer": 3, "vocab_size": 512},
    "qwen3_moe": {
        "model_type": "qwen3_moe",
        **_TINY_LLAMA,
        "head_dim": 32,
        "moe_intermediate_size": 32,
        "num_experts": 4,
        "num_experts_per_tok": 2,
    },
    # image-text wrapper: record_params.build_config takes its text_config (the language model)
    "gemma3": {
        "model_type": "gemma3",
        "text_config": {
            "model_type": "gemma3_text",
            **_TINY_LLAMA,
            "num_hidden_layers": 7,
            "head_dim": 32,
            "sliding_window": 8,
            "query_pre_attn_scalar": 32,
        },
    },
    "gpt_oss": {
        "model_type": "gpt_oss",
        "hidden_size": 64,
        "intermediate_size": 32,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "sliding_window": 8,
        "vocab_size": 512,
        "max_position_embeddings": 256,
    },
    "deepseek_v2": {
        "model_type": "deepseek_v2",
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 3,
        "first_k_dense_replace": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "n_routed_experts": 8,
        "n_shared_experts": 2,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "greedy",
        "kv_lora_rank": 32,
        "q_lora_rank": None,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "vocab_size": 512,
        "max_position_embeddings": 256,
    },
    # image-text wrapper: the text model; chunked attention (chunk 8) on RoPE layers, MoE every other layer
    "llama4": {
        "model_type": "llama4",
        "text_config": {
            "model_type": "llama4_text",
            "hidden_size": 64,
            "intermediate_size": 32,
            "intermediate_size_mlp": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "num_local_experts": 4,
            "num_experts_per_tok": 1,
            "interleave_moe_layer_step": 2,
            "attention_chunk_size": 8,
            "vocab_size": 512,
            "max_position_embeddings": 256,
        },
    },
    # QK-norm over the whole q/k projection; post-attention and post-feedforward norms
    "olmo2": {"model_type": "olmo2", **_TINY_LLAMA},
    # Gated DeltaNet hybrids: layers 0-2 linear attention, layer 3 full; linear heads 2 key / 4 value of 16
    "qwen3_next": {"model_type": "qwen3_next", **_TINY_LLAMA, "num_hidden_layers": 4, "head_dim": 16,
                   "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
                   "linear_value_head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
                   "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32},
    "qwen3_5": {"model_type": "qwen3_5", "text_config": {**_TINY_LLAMA, "num_hidden_layers": 4, "head_dim": 16,
                                                         "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                                                         "linear_key_head_dim": 16, "linear_value_head_dim": 16}},
    "qwen3_5_moe": {"model_type": "qwen3_5_moe", "text_config": {
        **_TINY_LLAMA, "num_hidden_layers": 4, "head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
        "linear_key_head_dim": 16, "linear_value_head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32}},
    # Llama layout with scalar multipliers (no shape changes)
    "granite": {
        "model_type": "granite",
        **_TINY_LLAMA,
        "embedding_multiplier": 12.0,
        "attention_multiplier": 0.0078125,
        "residual_multiplier": 0.22,
        "logits_scaling": 16.0,
    },
    # parallel attention + MLP off one bias-free LayerNorm; per-head q/k LayerNorms
    "cohere": {"model_type": "cohere", **_TINY_LLAMA, "use_qk_norm": True},
    # Kimi K2's model_type, built as deepseek_v3 (record_params.MODEL_TYPE_ALIASES): MLA latent cache
    "kimi_k2": {**_TINY_MLA, "model_type": "kimi_k2", "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
                "q_lora_rank": 48},
    # GLM-4.7-Flash: MLA (no q LoRA) latent cache; mlp_layer_types default: layer 0 dense, the rest MoE
    "glm4_moe_lite": {**_TINY_MLA, "model_type": "glm4_moe_lite", "q_lora_rank": None},
    # GQA with explicit head_dim, q/k/v biases, per-head QK-norm, partial RoPE; one dense layer then MoE
    "glm4_moe": {
        "model_type": "glm4_moe",
        **_TINY_LLAMA,
        "head_dim": 32,
        "attention_bias": True,
        "use_qk_norm": True,
        "moe_intermediate_size": 32,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
    },
    # GQA with explicit head_dim, full-projection QK-norm, every layer MoE
    "minimax_m2": {
        "model_type": "minimax_m2",
        **_TINY_LLAMA,
        "intermediate_size": 32,
        "head_dim": 32,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "rotary_dim": 16,
    },
    # DeepSeek Sparse Attention: MLA latent cache plus one indexer key per token and layer (index_topk 4 < seq)
    "deepseek_v32": {**_TINY_MLA, "model_type": "deepseek_v32", "q_lora_rank": 48, "index_n_heads": 2,
                     "index_head_dim": 16, "index_topk": 4, "n_group": 1, "topk_group": 1},
    # GLM-5: the same, with "shared" layers that reuse the previous layer's top-k and cache no indexer keys
    "glm_moe_dsa": {**_TINY_MLA, "model_type": "glm_moe_dsa", "q_lora_rank": 48, "index_n_heads": 2,
                    "index_head_dim": 16, "index_topk": 4, "indexer_types": ["full", "shared", "full"]},
    # Nemotron-H: one mixer per block, Mamba-2 (M), MoE (E), attention (*), dense MLP (-); the Mamba blocks keep a
    # conv state and an SSM state per sequence, the attention blocks K/V
    "nemotron_h": {
        "model_type": "nemotron_h",
        "hidden_size": 64,
        "hybrid_override_pattern": "ME*-M*",
        "intermediate_size": 96,
        "mamba_num_heads": 8,
        "mamba_head_dim": 16,
        "ssm_state_size": 16,
        "n_groups": 2,
        "chunk_size": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "moe_shared_expert_intermediate_size": 48,
        "vocab_size": 512,
        "max_position_embeddings": 256,
    },
    # DeepSeek-V4: window 8, a sliding-only, a CSA (ratio 4, indexer), an HCA (ratio 128 > seq: all buffered) and a
    # CSA layer; seq 6..12 crosses the window and the CSA windows
    "deepseek_v4": {"model_type": "deepseek_v4", "vocab_size": 512, "hidden_size": 64, "moe_intermediate_size": 32,
                    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32,
                    "q_lora_rank": 48, "qk_rope_head_dim": 8, "n_routed_experts": 4, "num_experts_per_tok": 2,
                    "o_groups": 2, "o_lora_rank": 16, "index_n_heads": 2, "index_head_dim": 16, "index_topk": 2,
                    "sliding_window": 8, "compress_ratios": [0, 4, 128, 4], "num_hash_layers": 1,
                    "max_position_embeddings": 256},
    # three sliding layers (window 8) per full one (sliding_window_pattern 4)
    "cohere2": {
        "model_type": "cohere2",
        **_TINY_LLAMA,
        "num_hidden_layers": 4,
        "sliding_window": 8,
        "sliding_window_pattern": 4,
    },
}
CROSSCHECK_SEQS = (6, 7, 8, 9, 12)
# model types whose Mamba layers keep a per-sequence state (conv + SSM) beside K/V: recorded also at 2 x 300 tokens
# (several SSD chunks) and, as linear-attention models, after a decode step
STATEFUL = ("nemotron_h",)

_MLA_NOTE = (
    "MLA: transformers caches the compressed latent, not per-head K/V. layer.keys = "
    "kv_a_layernorm(kv latent) viewed as [batch, 1, seq, kv_lora_rank]; layer.values = the RoPE'd shared "
    "key k_rot [batch, 1, seq, qk_rope_head_dim]. kv_b_proj decompresses K/V per head after the cache read "
    "(DeepseekV3Attention.forward / expand_kv)."
)
MODEL_TYPE_NOTES: dict[str, str] = {
    "deepseek_v2": _MLA_NOTE.replace("DeepseekV3Attention", "DeepseekV2Attention"),
    "llama4": (
        "Llama-4 text model: the chunked-attention (RoPE) layers are cached as sliding-window layers of "
        "attention_chunk_size (cache_utils maps chunked_attention to DynamicSlidingWindowLayer); NoPE layers hold "
        "every token. The vision tower is not built (record of the text_config model)."
    ),
    "glm4_moe_lite": _MLA_NOTE.replace("DeepseekV3Attention", "Glm4MoeLiteAttention"),
    "kimi_k2": _MLA_NOTE + " model_type kimi_k2 is built as deepseek_v3 (transformers' own mapping).",
    "deepseek_v32": _MLA_NOTE.replace("DeepseekV3Attention", "DeepseekV32Attention") + (
        " DSA: each layer's DynamicIndexedLayer also keeps indexer_keys [batch, seq, index_head_dim] in the model "
        "dtype (indexer_bytes; not part of kv_bytes)."),
    "glm_moe_dsa": _MLA_NOTE.replace("DeepseekV3Attention", "GlmMoeDsaAttention") + (
        " DSA: indexer_keys [batch, seq, index_head_dim] on the 'full' indexer layers only; 'shared' layers "
        "(indexer_types) reuse the previous top-k and keep none (indexer_bytes; not part of kv_bytes)."),
    "deepseek_v4": (
        "DeepSeek-V4: every layer caches a sliding window of sliding_window - 1 tokens of its one shared KV head "
        "(head_dim); a CSA/HCA layer (DeepseekV4CSACache / DeepseekV4HCACache) reads that one tensor as keys and "
        "values (counted once in kv_bytes), a sliding-only layer (DynamicSlidingWindowLayer) stores keys and values "
        "apart. compressed_bytes: compressed_kv['compressor'], floor(seq / ratio) entries of head_dim per CSA (4) / HCA "
        "(128) layer; indexer_bytes: compressed_kv['indexer'], the CSA layers' indexer keys (index_head_dim); "
        "compressor_state_bytes: the tokens since the last closed window (buffer_kv, buffer_gate) and the CSA "
        "overlap state (overlap_kv, overlap_gate). None of the three is part of kv_bytes."),
    "gemma3": "Gemma-3 text model (record of the text_config model; the SigLIP vision tower is not built).",
    "deepseek_v3": (
        "MLA: transformers caches the compressed latent, not per-head K/V. layer.keys = "
        "kv_a_layernorm(kv latent) viewed as [batch, 1, seq, kv_lora_rank]; layer.values = the RoPE'd shared "
        "key k_rot [batch, 1, seq, qk_rope_head_dim]. kv_b_proj decompresses K/V per head after the cache read "
        "(DeepseekV3Attention.forward / expand_kv)."
    ),
}


# --------------------------------------------------------------------------------------------------
# measuring one cache
# --------------------------------------------------------------------------------------------------


def _layer_plan(cfg) -> list[tuple[str, int | None]]:
    """transformers' own view of each layer's cache kind: (layer_type, sliding_window or None)."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    types, kwargs = get_layer_types_and_kwargs(cfg.get_text_config(decoder=True))
    return [(t, kw.get("sliding_window")) for t, kw in zip(types, kwargs, strict=True)]


def _states(layer) -> list[tuple[str, Any]]:
    """The fixed-size states a linear-attention or Mamba cache layer holds (transformers ``LinearAttentionCacheLayerMixin``:
    ``conv_states`` and ``recurrent_states``, dicts of state index to tensor), as (kind, tensor)."""
    out = []
    for kind in ("conv_states", "recurrent_states"):
        held = getattr(layer, kind, None)
        if isinstance(held, dict):
            out += [(kind, t) for _, t in sorted(held.items()) if t is not None]
    return out


def inspect_cache(cache, plan: list[tuple[str, int | None]] | None) -> dict[str, Any]:
    """Shapes and bytes of every key/value tensor held by a transformers Cache (``cache.layers``); where a layer
    holds linear-attention or Mamba states instead (Qwen3-Next, Qwen3.5, Nemotron-H), their shapes, dtypes and bytes
    too (``state_bytes``, ``state_groups``), and a DSA model's indexer keys (``indexer_bytes``), kept apart from
    ``kv_bytes``."""
    per_seq: list[int] = []
    per_bytes: list[int] = []
    rows: list[dict[str, Any]] = []
    storages: dict[int, int] = {}
    indexer: list[int] = []  # DSA caches (DynamicIndexedLayer): bytes of each layer's indexer_keys (0: none kept)
    state_rows: list[dict[str, Any]] = []
    # DeepSeek-V4 (DeepseekV4CSACache / DeepseekV4HCACache): per layer the compressed entries (compressed_kv
    # "compressor"), the indexer's compressed keys ("indexer") and the compressors' buffered tokens + overlap state
    v4 = [hasattr(layer, "compressed_kv") for layer in cache.layers]
    v4_entries: list[int] = []
    v4_bytes = {"compressed_bytes": [], "indexer_bytes": [], "compressor_state_bytes": []}
    for i, layer in enumerate(cache.layers):
        if any(v4):
            held = getattr(layer, "compressed_kv", {}) or {}
            comp, ix = held.get("compressor"), held.get("indexer")
            v4_entries.append(0 if comp is None else int(comp.shape[-2]))
            v4_bytes["compressed_bytes"].append(_nbytes(comp))
            v4_bytes["indexer_bytes"].append(_nbytes(ix))
            v4_bytes["compressor_state_bytes"].append(sum(_nbytes(t) for kind in (
                "buffer_kv", "buffer_gate", "overlap_kv", "overlap_gate") for t in (getattr(layer, kind, {}) or {}).values()))
        if hasattr(layer, "indexer_keys"):
            ik = layer.indexer_keys
            indexer.append(0 if ik is None else int(ik.numel() * ik.element_size()))
        states = _states(layer)
        if states:
            row = {"class": type(layer).__name__, "bytes_per_layer": sum(int(t.numel() * t.element_size())
                                                                         for _, t in states),
                   **{f"{kind}_shape": [int(x) for x in t.shape] for kind, t in states},
                   **{f"{kind}_dtype": str(t.dtype).removeprefix("torch.") for kind, t in states}}
            if state_rows and all(state_rows[-1].get(k) == v for k, v in row.items()):
                state_rows[-1]["count"] += 1
                state_rows[-1]["layers"][1] = i
            else:
                state_rows.append({**row, "layers": [i, i], "count": 1})
        k, v = getattr(layer, "keys", None), getattr(layer, "values", None)
        ltype, window = plan[i] if plan and i < len(plan) else (None, None)
        if k is None or v is None or k.dim() < 2:
            row = {"class": type(layer).__name__, "keys_shape": None, "values_shape": None, "dtype": None}
            per_seq.append(0)
            per_bytes.append(0)
        else:
            if k.shape[-2] != v.shape[-2]:
                raise AssertionError(f"layer {i}: keys and values hold different lengths {k.shape} {v.shape}")
            nbytes = int(k.numel() * k.element_size() + v.numel() * v.element_size())
            if v4[i] and k is v:  # DeepSeek-V4's shared-KV MQA: one tensor read as key and value, counted once
                nbytes = int(k.numel() * k.element_size())
            row = {
                "class": type(layer).__name__,
                "keys_shape": [int(x) for x in k.shape],
                "values_shape": [int(x) for x in v.shape],
                "dtype": str(k.dtype).removeprefix("torch."),
            }
            if v.dtype != k.dtype:
                row["values_dtype"] = str(v.dtype).removeprefix("torch.")
            per_seq.append(int(k.shape[-2]))
            per_bytes.append(nbytes)
            for t in (k, v):
                st = t.untyped_storage()
                storages[st._cdata] = int(st.nbytes())
        row["layer_type"] = ltype
        row["sliding_window"] = window
        row["bytes_per_layer"] = per_bytes[-1]
        if rows and all(rows[-1][key] == row[key] for key in row):
            rows[-1]["count"] += 1
            rows[-1]["last"] = i
        else:
            rows.append({**row, "first": i, "last": i, "count": 1})
    # collapse rows into run-length groups (identical consecutive layers)
    groups = [
        {"layers": [r["first"], r["last"]], **{k: v for k, v in r.items() if k not in ("first", "last")}}
        for r in rows
    ]
    extra: dict[str, Any] = {}
    if indexer:  # a sparse-attention model: the indexer key cache beside the K/V (layers with and without one)
        extra = {"indexer_bytes": int(sum(indexer)), "indexer_per_layer_bytes": indexer}
    out = {
        **extra,
        "cache_class": type(cache).__name__,
        "kv_bytes": int(sum(per_bytes)),
        "per_layer_seq": per_seq,
        "per_layer_bytes": per_bytes,
        "layer_groups": groups,
        "kv_storage_bytes": int(sum(storages.values())),
    }
    if state_rows:
        out["state_bytes"] = sum(r["bytes_per_layer"] * r["count"] for r in state_rows)
        out["state_groups"] = state_rows
    if any(v4):
        out.update({k: int(sum(v)) for k, v in v4_bytes.items()})
        out["compressed_per_layer_entries"] = v4_entries
        out["compressed_per_layer_bytes"] = v4_bytes["compressed_bytes"]
    return out


def _nbytes(t) -> int:
    return 0 if t is None else int(t.numel() * t.element_size())


_MODELS: dict[tuple[str, str, str | None], tuple[Any, Any]] = {}


def _model(config: dict[str, Any], mode: str, attn: str | None):
    """(context, model) built once per (config, mode, attn): a fake model is reused by every case of a preset."""
    import json

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoModelForCausalLM

    key = (json.dumps(config, sort_keys=True), mode, attn)
    if key not in _MODELS:
        if len(_MODELS) > 4:
            _MODELS.clear()
        cfg = rp.build_config(config)
        kwargs: dict[str, Any] = {"dtype": torch.bfloat16}
        if attn:
            kwargs["attn_implementation"] = attn
        fake = FakeTensorMode() if mode == "fake" else None
        if mode == "real":
            torch.manual_seed(0)
        with fake or contextlib.nullcontext():
            model = AutoModelForCausalLM.from_config(cfg, **kwargs)
        model.eval()
        _MODELS[key] = (fake, model)
    return _MODELS[key]


def run_case(
    config: dict[str, Any],
    batch: int,
    seq: int,
    *,
    mode: str = "fake",
    attn: str | None = None,
    cache: str = "DynamicCache",
    decode_steps: int = 1,
) -> dict[str, Any]:
    """Build the model (fake or real, bf16), prefill ``(batch, seq)`` with ``use_cache=True`` and measure.

    ``decode_steps`` more single-token forward passes then run on the same cache (DynamicCache only) and
    the cache is measured again under ``after_decode_<n>``.
    """
    import torch
    from transformers import StaticCache

    plan = _layer_plan(rp.build_config(config))
    fake, model = _model(config, mode, attn)
    with fake or contextlib.nullcontext(), torch.no_grad():
        ids = torch.zeros((batch, seq), dtype=torch.long)
        call: dict[str, Any] = {"input_ids": ids, "use_cache": True}
        if cache == "StaticCache":
            call["past_key_values"] = StaticCache(config=model.config, max_cache_len=seq)
        elif cache != "DynamicCache":
            raise ValueError(cache)
        out = model(**call)
        if out.past_key_values is None:
            raise RuntimeError("the model returned no past_key_values")
        res = inspect_cache(out.past_key_values, plan)
        res["attn_implementation"] = model.config._attn_implementation
        if decode_steps and cache == "DynamicCache":
            pkv = out.past_key_values
            for _ in range(decode_steps):
                pkv = model(
                    input_ids=torch.zeros((batch, 1), dtype=torch.long), past_key_values=pkv, use_cache=True
                ).past_key_values
            after = inspect_cache(pkv, plan)
            res[f"after_decode_{decode_steps}"] = {
                k: after[k] for k in ("kv_bytes", "per_layer_seq", "per_layer_bytes", "kv_storage_bytes",
                                      "indexer_bytes", "state_bytes", "compressed_bytes",
                                      "compressor_state_bytes", "compressed_per_layer_entries") if k in after
            }
    return res


def _layers_text(idx: list[int]) -> str:
    if idx == list(range(idx[0], idx[-1] + 1)):
        return f"{idx[0]}-{idx[-1]}" if len(idx) > 1 else str(idx[0])
    step = idx[1] - idx[0] if len(idx) > 1 else 0
    if len(idx) > 2 and all(b - a == step for a, b in zip(idx, idx[1:], strict=False)):
        return f"{idx[0]}, {idx[1]}, ..., {idx[-1]}"
    return ", ".join(map(str, idx))


def _notes(config: dict[str, Any], seq: int, res: dict[str, Any]) -> list[str]:
    """Plain-language statements of what was observed (descriptions only; the numbers are measured)."""
    notes: list[str] = []
    mt = config.get("model_type")
    groups = [g for g in res["layer_groups"] if g["keys_shape"] is not None]
    if mt in MODEL_TYPE_NOTES:
        notes.append(MODEL_TYPE_NOTES[mt])
    if mt == "falcon" and groups:
        heads = groups[0]["keys_shape"][1]
        if config.get("new_decoder_architecture"):
            kv = config.get("num_kv_heads")
            notes.append(
                f"Falcon new_decoder_architecture: FalconAttention._split_heads broadcasts the num_kv_heads={kv} K/V "
                f"heads to all num_attention_heads before layer_past.update, so transformers caches {heads} heads per "
                f"layer: {heads // kv if kv else '?'}x the bytes of a cache that keeps only the {kv} grouped K/V heads."
            )
        elif config.get("multi_query", True):
            notes.append(
                f"Falcon multi_query with the old decoder: {heads} K/V head cached per layer "
                "(num_kv_heads in the file, if any, is ignored by transformers)."
            )
    # sliding layers, aggregated by (class, window, tokens held)
    agg: dict[tuple[str, int, int], list[int]] = {}
    for g in groups:
        if g.get("sliding_window") is not None:
            k = (g["class"], g["sliding_window"], g["keys_shape"][-2])
            agg.setdefault(k, []).extend(range(g["layers"][0], g["layers"][1] + 1))
    for (cls, w, held), idx in agg.items():
        if res["cache_class"] == "DynamicCache":
            rel = (
                "= min(seq, sliding_window - 1)" if held == min(seq, w - 1) else "(NOT min(seq, window - 1))"
            )
        else:
            rel = "= min(max_cache_len, sliding_window)" if held == min(seq, w) else "(NOT min(seq, window))"
        notes.append(
            f"{len(idx)} sliding layers ({_layers_text(idx)}; {cls}, window {w}) hold {held} of {seq} tokens {rel}"
        )
    full = [
        i
        for g in groups
        if g.get("sliding_window") is None
        for i in range(g["layers"][0], g["layers"][1] + 1)
    ]
    if agg and full:
        notes.append(f"{len(full)} full-attention layers ({_layers_text(full)}) hold all {seq} tokens")
    if res["kv_storage_bytes"] != res["kv_bytes"]:
        notes.append(
            f"kv_storage_bytes {res['kv_storage_bytes']} > kv_bytes {res['kv_bytes']}: the sliding layers' "
            "tensors are views into the full prefill buffer until the next update reallocates them"
        )
    return notes


# --------------------------------------------------------------------------------------------------
# case list
# --------------------------------------------------------------------------------------------------


def _stateful(config: dict[str, Any]) -> bool:
    """Whether the model keeps a per-sequence state: linear-attention layers (their keys name them:
    ``linear_num_value_heads``) or Mamba layers (:data:`STATEFUL`)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    return "linear_num_value_heads" in text or config.get("model_type") in ("qwen3_next", "qwen3_5", "qwen3_5_moe") \
        or config.get("model_type") in STATEFUL


def _max_window(config: dict[str, Any]) -> int | None:
    windows = [w for _, w in _layer_plan(rp.build_config(config)) if w]
    return max(windows) if windows else None


def _resolve_seq(seq: int | str, window: int | None) -> int | None:
    if isinstance(seq, int):
        return seq
    if window is None:
        return None
    return {"window+100": window + 100, "window": window, "window-1": window - 1}[seq]


def build_cases(sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    by_name = {s["name"]: s for s in sources if s["kind"] == "preset"}
    for src in sources:
        if src["config"].get("model_type") in rp.ENCODERS:  # an encoder keeps no KV cache: nothing to record
            continue
        base = {"name": src["name"], "kind": src["kind"], "config": src["config"]}
        cases.append({**base, "batch": 1, "seq": 16})
        w = _max_window(src["config"])
        if w is not None:
            cases.append({**base, "batch": 1, "seq": w + 100})
        if src["config"].get("model_type") in STATEFUL:  # a prompt of several SSD chunks, two sequences
            cases.append({**base, "batch": 2, "seq": 300})
    for extra in EXTRA_CASES:
        src = by_name.get(extra["name"])
        if src is None:
            print(f"  (extra case skipped: no preset {extra['name']!r})")
            continue
        seq = _resolve_seq(extra["seq"], _max_window(src["config"]))
        if seq is None:
            print(f"  (extra case skipped: preset {extra['name']!r} has no sliding window)")
            continue
        case = {
            "name": src["name"],
            "kind": "preset",
            "config": src["config"],
            "batch": extra["batch"],
            "seq": seq,
        }
        for k in ("attn", "cache"):
            if k in extra:
                case[k] = extra[k]
        cases.append(case)
    # stable order, no duplicates
    uniq: dict[str, dict[str, Any]] = {}
    for c in cases:
        c["case"] = case_id(c)
        uniq.setdefault(f"{c['kind']}/{c['name']}/{c['case']}", c)
    return sorted(
        uniq.values(), key=lambda c: (c["kind"] != "preset", c["name"], c["seq"], c["batch"], c["case"])
    )


def case_id(c: dict[str, Any]) -> str:
    s = f"b{c['batch']}-s{c['seq']}"
    if c.get("cache", "DynamicCache") != "DynamicCache":
        s += "-static"
    if c.get("attn"):
        s += f"-{c['attn']}"
    return s


def compute_records(only: list[str] | None = None) -> list[dict[str, Any]]:
    records = []
    for c in build_cases(rp.load_sources()):
        if only and c["name"] not in only:
            continue
        t0 = time.perf_counter()
        # informative only where a window slides, or where a per-sequence state must stay the same size
        # (and DeepSeek-V4's, whose compressors buffer tokens between their windows)
        decode = 1 if _max_window(c["config"]) is not None or _stateful(c["config"]) or \
            c["config"].get("model_type") == "deepseek_v4" else 0
        try:
            res = run_case(
                c["config"],
                c["batch"],
                c["seq"],
                attn=c.get("attn"),
                cache=c.get("cache", "DynamicCache"),
                decode_steps=decode,
            )
        except Exception as e:
            raise SystemExit(
                f"{c['kind']} {c['name']} {c['case']}: forward pass failed: {type(e).__name__}: {e}"
            ) from e
        rec = {
            "name": c["name"],
            "kind": c["kind"],
            "case": c["case"],
            "config": c["config"],
            "batch": c["batch"],
            "seq": c["seq"],
            "dtype": DTYPE,
            "mode": "fake",
            **res,
            "notes": _notes(c["config"], c["seq"], res),
        }
        records.append(rec)
        print(
            f"  {c['kind']:6} {c['name']:24} {c['case']:22} kv_bytes={res['kv_bytes']:>14,}  "
            f"({time.perf_counter() - t0:.1f}s)"
        )
    return records


def compute_crosscheck(model_types: set[str]) -> list[dict[str, Any]]:
    """Tiny configs of every family in use: real CPU run vs FakeTensorMode, at seqs around the window."""
    rows = []
    for mt in sorted(t for t in model_types if t):
        if not any(c["model_type"] == mt for c in CROSSCHECK_CONFIGS.values()):
            print(f"  (no crosscheck config for model_type {mt!r}: add one to CROSSCHECK_CONFIGS)")
    for label, config in sorted(CROSSCHECK_CONFIGS.items()):
        if config["model_type"] not in model_types:
            continue
        t0 = time.perf_counter()
        runs, same_all = [], True
        for seq in CROSSCHECK_SEQS:
            real = run_case(config, 2, seq, mode="real", decode_steps=2)
            fake = run_case(config, 2, seq, mode="fake", decode_steps=2)
            if real != fake:
                same_all = False
                print(f"  CROSSCHECK MISMATCH {label} s{seq}:\n    real {real}\n    fake {fake}")
            runs.append({"seq": seq, **real})
        rows.append(
            {
                "label": label,
                "model_type": config["model_type"],
                "config": config,
                "batch": 2,
                "dtype": DTYPE,
                "compared": "real CPU forward vs FakeTensorMode forward (prefill, then 2 decode steps)",
                "fake_equals_real": same_all,
                "runs": runs,
            }
        )
        print(f"  crosscheck {label:14} real == fake: {same_all}  ({time.perf_counter() - t0:.1f}s)")
    return rows


def main(argv: list[str] | None = None) -> int:
    args = rp.arg_parser(__doc__).parse_args(argv)
    rp.set_root(args.root)
    rp.quiet()
    t0 = time.perf_counter()
    only = args.only if not args.check else None
    records = compute_records(only)
    model_types = {s["config"].get("model_type") for s in rp.load_sources() if not only or s["name"] in only} - \
        set(rp.ENCODERS)
    crosscheck = compute_crosscheck(model_types)
    path = rp.out_path("kv_cache.json")
    if args.check:
        rc = rp.check_envelope(path, records, key=("kind", "name", "case"), crosscheck=crosscheck)
    elif only:
        print("--only given: not writing the file")
        rc = 0
    else:
        rp.write_envelope(path, GENERATED_BY_KV, records, crosscheck=crosscheck)
        print(
            f"wrote {path.relative_to(rp.ROOT)} ({len(records)} records, {len(crosscheck)} crosscheck rows)"
        )
        rc = 0
    if any(not r["fake_equals_real"] for r in crosscheck):
        print("FAIL: a real CPU run and the FakeTensorMode run disagree (see above)")
        rc = rc or 1
    print(f"record_kv: {time.perf_counter() - t0:.1f}s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
