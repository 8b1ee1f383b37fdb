"""Bytes per element of each storage format, scale overhead included: the one home of every bits figure.

Weight formats (``dtype``): bf16/fp16 2 B; fp8 1 B (per-tensor scale, negligible); int8 1 B with a
per-output-channel fp16 scale (negligible for large matrices, not counted; LLM.int8() likewise); int4 with
group size G and an fp16 scale + fp16 zero-point per group (GPTQ/AWQ convention: 4 + 32/G bits, 4.25 at the
default G = 128); fp4 is NVFP4 (Blackwell, TensorRT-LLM): E2M1 values with an FP8 scale per 16-element block,
4 + 8/16 = 4.5 bits (NVIDIA, "Introducing NVFP4", 2025); mxfp4 is the OCP Microscaling FP4 (gpt-oss's released experts):
E2M1 values with an E8M0 scale per 32-element block, 4 + 8/32 = 4.25 bits (OCP Microscaling Formats MX v1.0 §5;
the gpt-oss checkpoint stores ``*_blocks`` U8 tensors of two values a byte and ``*_scales`` U8, one per 32); GGUF formats by
their published bits per weight (llama.cpp ``ggml-common.h`` block layouts: q8_0 = 34 B per 32 weights =
8.5 bits, q4_0 = 18 B per 32 = 4.5 bits, q4_k_m ≈ 4.85 bits as reported by llama.cpp for Llama-class
models, q5_k_m ≈ 5.69, q6_k = 6.5625); nf4 (QLoRA, Dettmers et al. 2023 §3): 4 bits + an fp32 absmax per
64 weights = 4.5 bits, or with double quantization 4 + 8/64 + 32/(64·256) = 4.127 bits.

KV-cache formats (``kv_dtype``): bf16/fp16 2 B; fp8 1 B (per-tensor scale, not counted); int8 1 B + one fp32
scale per token for each cached vector (vLLM's per-token-head scales, ``kv_cache_interface.py``: one per kv
head for each of K and V; MLA caches one latent vector per token, so one scale); int4 0.5 B + an fp16 scale
and fp16 zero-point per group of 64 elements (Hugging Face ``QuantizedCache`` default ``q_group_size=64``).
"""

from __future__ import annotations

from aicalc.errors import ParameterError, check_choice

INT4_GROUP = 128
WEIGHT_BITS = {
    "fp32": 32.0, "bf16": 16.0, "fp16": 16.0, "fp8": 8.0, "int8": 8.0, "int4": 4.0 + 32.0 / INT4_GROUP,
    "fp4": 4.0 + 8.0 / 16, "mxfp4": 4.0 + 8.0 / 32,
    "nf4": 4.0 + 32.0 / 64, "nf4-dq": 4.0 + 8 / 64 + 32 / (64 * 256),
    "q8_0": 8.5, "q6_k": 6.5625, "q5_k_m": 5.69, "q4_k_m": 4.85, "q4_0": 4.5,
}
GGUF = ("q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0")
FULL = ("fp32", "bf16", "fp16")  # formats that are not quantized
FP4 = ("fp4", "mxfp4")  # formats fp4 tensor math runs natively (Blackwell: NVFP4 and MXFP4)
KV_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4")
INT4_KV_GROUP = 64
QLORA_QUANT = ("none", "nf4", "nf4-dq", "int8")  # bitsandbytes base-weight formats for LoRA fine-tuning


def weight_bytes_per_param(dtype: str, group_size: int | None = None, param: str = "dtype") -> float:
    """Bytes per weight of a format; ``int4`` with ``group_size`` G adds an fp16 scale and zero per group."""
    check_choice(param, dtype, tuple(WEIGHT_BITS))
    if group_size is None:
        return WEIGHT_BITS[dtype] / 8
    if dtype != "int4":
        raise ParameterError("group_size", group_size, f"applies to int4 weights only, not {dtype}")
    if not group_size >= 1:
        raise ParameterError("group_size", group_size, "must be at least 1")
    return (4.0 + 32.0 / group_size) / 8.0


def edge_bytes_per_param(dtype: str, bytes_per_param: float) -> float:
    """Bytes per weight of the token embedding and the LM head under a format (the one coverage rule).

    GPTQ/AWQ, bitsandbytes and vLLM's fp8 quantize the linear layers of the transformer blocks and keep the
    embedding, the LM head and the norms 16-bit; GGUF (llama.cpp) quantizes every matrix, embedding and head
    included; unquantized formats store everything at their own width."""
    return bytes_per_param if dtype in GGUF or dtype in FULL else 2.0


def norm_bytes_per_param(dtype: str) -> float:
    """Norm weights stay 16-bit under every quantized format (fp32 checkpoints keep them fp32)."""
    return 4.0 if dtype == "fp32" else 2.0


def is_weight_only(dtype: str) -> bool:
    """Formats dequantized to 16-bit inside the matmul kernel (everything quantized but fp8 on fp8 chips)."""
    return dtype not in FULL


def kv_bytes_per_element(kv_dtype: str, vector: int, param: str = "kv_dtype") -> float:
    """Average bytes per cached element, its share of scales and zero-points included; ``vector`` is the
    length of one cached vector (head_dim, or MLA's latent) that an int8 scale covers."""
    check_choice(param, kv_dtype, KV_DTYPES)
    if kv_dtype in ("bf16", "fp16"):
        return 2.0
    if kv_dtype == "fp8":
        return 1.0
    if kv_dtype == "int8":
        return 1.0 + 4.0 / vector
    return 0.5 + 4.0 / INT4_KV_GROUP


def qlora_bytes_per_param(quant: str) -> float | None:
    """Frozen base linear weights under a bitsandbytes format (None: not quantized)."""
    check_choice("quant", quant, QLORA_QUANT)
    return None if quant == "none" else WEIGHT_BITS[quant] / 8
