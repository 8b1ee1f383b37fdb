"""Bytes of model weights per device at a storage format, under tensor parallelism.

Which tensors a format covers (the convention of GPTQ/AWQ, bitsandbytes and vLLM's fp8): the
quantized formats (fp8, int8, int4, nf4) cover the linear layers of the transformer blocks; the
token embedding, the LM head and the norms stay 16-bit. GGUF formats (q8_0, q4_k_m, …) cover every
matrix at the format's average bits per weight (llama.cpp quantizes embeddings and head too).

Tensor parallelism (Megatron-LM, Shoeybi et al. 2019 §3; vLLM's parallel linear layers): q, o and
FFN/expert matrices, the embedding and the LM head are split over ``tp``; norms are replicated; k/v
projections are split by kv head, or replicated when tp > K (IM-08); MLA's down-projections
(q_a, kv_a and their norms) are replicated.
"""

from __future__ import annotations

from aicalc.catalog.arch import Arch
from aicalc.core.dtypes import weight_bytes_per_param
from aicalc.core.layout import kv_heads_per_device
from aicalc.core.params import attention_params, count_params

GGUF = ("q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0")


def _attention_per_device(arch: Arch, tp: int) -> float:
    """One layer's attention parameters held by one device."""
    total = attention_params(arch)
    H = arch.hidden
    if arch.mla is not None:
        m = arch.mla
        replicated = H * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
        if m.q_lora_rank:
            replicated += H * m.q_lora_rank + m.q_lora_rank
        return (total - replicated) / tp + replicated
    kv = 2 * (H * arch.kv_dim + (arch.kv_dim if arch.qkv_bias else 0))
    return (total - kv) / tp + kv * kv_heads_per_device(arch, tp) / arch.kv_heads


def weight_bytes_per_device(arch: Arch, dtype: str = "bf16", tp=1, bytes_per_param: float | None = None):
    """Resident weight bytes on one device; ``tp`` may be an array. ``bytes_per_param`` overrides the
    format's default (e.g. int4 with another group size)."""
    n = count_params(arch)
    q = weight_bytes_per_param(dtype) if bytes_per_param is None else bytes_per_param
    edge = q if dtype in GGUF or dtype in ("fp32", "bf16", "fp16") else 2.0
    norms = n.norms * (4.0 if dtype == "fp32" else 2.0)
    emb_head = (n.embedding + n.lm_head) / tp * edge
    attention = arch.layers * _attention_per_device(arch, tp)
    return emb_head + (attention + n.ffn / tp) * q + norms
