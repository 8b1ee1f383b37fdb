"""Bytes per element of each storage format, scale overhead included.

Weight formats (``--dtype``): bf16/fp16 2 B; fp8 1 B (per-tensor scale, negligible); int8 1 B with a
per-output-channel fp16 scale (negligible for large matrices, not counted); int4 with group size
128 and an fp16 scale + fp16 zero-point per group (GPTQ/AWQ convention: 4 + 32/128 = 4.25 bits);
GGUF formats by their published bits per weight (llama.cpp ``ggml-common.h`` block layouts:
q8_0 = 34 B per 32 weights = 8.5 bits, q4_0 = 18 B per 32 = 4.5 bits, q4_k_m ≈ 4.85 bits as
reported by llama.cpp for Llama-class models, q5_k_m ≈ 5.69, q6_k = 6.5625);
nf4 (QLoRA, Dettmers et al. 2023 §3): 4 bits + fp32 absmax per 64 weights = 4.5 bits, or with
double quantization 4 + 8/64 + 32/(64·256) = 4.127 bits.

KV-cache formats (``--kv-dtype``): bf16/fp16 2 B; fp8 1 B (per-tensor scale, not counted);
int8 1 B + one fp32 scale per token, per kv head, for each of K and V (vLLM's per-token-head
scales, ``kv_cache_interface.py``); int4 0.5 B + an fp16 scale and fp16 zero-point per group of
64 elements along head_dim (Hugging Face ``QuantizedCache`` default ``q_group_size=64``).
"""

from __future__ import annotations

from aicalc.errors import AicalcError

WEIGHT_BITS = {
    "fp32": 32.0, "bf16": 16.0, "fp16": 16.0, "fp8": 8.0, "int8": 8.0, "int4": 4.25, "fp4": 4.25,
    "nf4": 4.5, "nf4-dq": 4.0 + 8 / 64 + 32 / (64 * 256),
    "q8_0": 8.5, "q6_k": 6.5625, "q5_k_m": 5.69, "q4_k_m": 4.85, "q4_0": 4.5,
}
KV_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4")
INT4_KV_GROUP = 64

# The compute dtype a weight format runs its matmuls in, before checking the chip supports it.
COMPUTE_DTYPE = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8"}


def weight_bytes_per_param(dtype: str) -> float:
    try:
        return WEIGHT_BITS[dtype] / 8
    except KeyError:
        raise AicalcError(f"unknown weight dtype '{dtype}' (known: {', '.join(WEIGHT_BITS)})") from None


def kv_bytes_per_element(kv_dtype: str, head_dim: int) -> float:
    """Average bytes per cached K or V element, its share of scales and zero-points included."""
    if kv_dtype in ("bf16", "fp16"):
        return 2.0
    if kv_dtype == "fp8":
        return 1.0
    if kv_dtype == "int8":
        return 1.0 + 4.0 / head_dim
    if kv_dtype == "int4":
        return 0.5 + 4.0 / INT4_KV_GROUP
    raise AicalcError(f"unknown kv dtype '{kv_dtype}' (known: {', '.join(KV_DTYPES)})")
