"""Gated DeltaNet linear-attention layers (Qwen3-Next, Qwen3.5): parameters, the per-sequence state that replaces
their KV cache, and FLOPs per token. Pure arithmetic, no I/O.

Notation: H hidden; per layer ``h_k`` key heads of ``d_k``, ``h_v`` value heads of ``d_v`` (``la`` =
:class:`aicalc.catalog.arch.LinearAttention`), key width ``K_w = h_k·d_k``, value width ``V_w = h_v·d_v``, conv
channels ``C_w = 2·K_w + V_w`` (q, k, v), ``w`` conv taps, C the chunk length of the chunked delta rule.

Sources:

- Shapes: transformers 5.23 ``Qwen3NextGatedDeltaNet`` (``modeling_qwen3_next.py``) and ``Qwen3_5GatedDeltaNet``
  (``modeling_qwen3_5.py``, the same weights split into ``in_proj_qkv``/``in_proj_z``/``in_proj_b``/``in_proj_a``).
- State: transformers' ``LinearAttentionLayer`` cache (``cache_utils.py``): ``conv_states`` of (B, C_w, w) in the
  activations' dtype and ``recurrent_states`` of (B, h_v, d_k, d_v) as the delta rule returns them, float32
  (``torch_chunk_gated_delta_rule`` computes in float32). vLLM (``MambaStateShapeCalculator.gated_delta_net_state_shape``
  and ``MambaStateDtypeCalculator.gated_delta_net_state_dtype``): a conv state of w − 1 taps and the recurrent state,
  both in the model's dtype (``mamba_cache_dtype`` "auto").
- FLOPs of the delta rule: Yang, Kautz & Hatamizadeh 2024, "Gated Delta Networks" (arXiv:2412.06464) §2-3 and the
  flash-linear-attention kernels it ships (``chunk_gated_delta_rule``, ``fused_recurrent_gated_delta_rule``), counted
  step by step on transformers' torch reference of both (``torch_chunk_gated_delta_rule``,
  ``torch_recurrent_gated_delta_rule``).
"""

from aicalc.catalog.arch import Arch

CHUNK = 64  # C: flash-linear-attention's chunk_gated_delta_rule and transformers' torch_chunk_gated_delta_rule


def layer_params(arch: Arch) -> int:
    """One linear-attention layer's parameters: ``in_proj_qkvz`` H·(2·K_w + 2·V_w), ``in_proj_ba`` H·2·h_v, the
    depthwise ``conv1d`` C_w·w (no bias), ``dt_bias`` and ``A_log`` h_v each, the gated RMSNorm d_v and ``out_proj``
    V_w·H (``Qwen3NextGatedDeltaNet.__init__``)."""
    la, H = arch.linear_attention, arch.hidden
    return (H * (2 * la.key_dim + 2 * la.value_dim + 2 * la.value_heads) + la.conv_dim * la.conv_kernel
            + 2 * la.value_heads + la.value_head_dim + la.value_dim * H)


def layer_params_per_device(arch: Arch, tp=1):
    """One layer on one device under tensor parallelism: projections, conv channels, ``A_log`` and ``dt_bias`` split
    by head over ``tp`` (vLLM's column-parallel ``in_proj_qkvz``/``in_proj_ba``, row-parallel ``out_proj``); the
    gated norm's d_v weights replicated."""
    d_v = arch.linear_attention.value_head_dim
    return (layer_params(arch) - d_v) / tp + d_v


def in_proj_width(arch: Arch) -> int:
    """Output columns of the input projections: q, k, v, the gate z, and β and α per value head."""
    la = arch.linear_attention
    return 2 * la.key_dim + 2 * la.value_dim + 2 * la.value_heads


def state_bytes(arch: Arch, tp=1, engine: str = "vllm", act_bytes: float = 2.0):
    """Bytes of one sequence's state over all linear-attention layers, on one device of ``tp`` (heads and conv
    channels split): per layer a conv state of C_w channels and a recurrent state of h_v·d_k·d_v. ``hf``
    (transformers' cache): w conv taps in the activations' dtype, the recurrent state in float32; ``vllm``: w − 1
    taps, both in the model's dtype (``act_bytes``; module doc). 0 for a model without linear attention."""
    la = arch.linear_attention
    if la is None or not arch.linear_layers:
        return 0.0
    recurrent = la.value_heads * la.key_head_dim * la.value_head_dim
    if engine == "hf":
        per_layer = la.conv_dim * la.conv_kernel * act_bytes + recurrent * 4.0
    else:
        per_layer = (la.conv_dim * (la.conv_kernel - 1) + recurrent) * act_bytes
    return arch.linear_layers * per_layer / tp


def recurrent_flop_per_token(arch: Arch) -> float:
    """Delta-rule FLOPs of one token in one layer, recurrent form (decode): per value head the decay S·g (d_k·d_v),
    the read k·S (2·d_k·d_v), the rank-one write k·δᵀ (2·d_k·d_v) and the output q·S (2·d_k·d_v): 7·d_k·d_v
    (``torch_recurrent_gated_delta_rule``, ``fused_recurrent_gated_delta_rule``)."""
    la = arch.linear_attention
    return 7.0 * la.value_heads * la.key_head_dim * la.value_head_dim


def chunk_flop_per_token(arch: Arch, chunk: int = CHUNK) -> float:
    """Delta-rule FLOPs of one token in one layer, chunked form (prefill, training) with chunks of C tokens, per
    value head: the intra-chunk products k_β·kᵀ and q·kᵀ (2·C·d_k each), the two unit-triangular solves of the UT
    transform (C·d_v and C·d_k), the intra-chunk output A·v (2·C·d_v), and three state products per token, the
    decayed keys' read of the state, q's read of it and the chunk's write k·vᵀ (2·d_k·d_v each):
    6·d_k·d_v + C·(5·d_k + 3·d_v) (``torch_chunk_gated_delta_rule``; Yang et al. 2024 §3.2, the WY/UT form)."""
    la = arch.linear_attention
    dk, dv = la.key_head_dim, la.value_head_dim
    return float(la.value_heads * (6 * dk * dv + chunk * (5 * dk + 3 * dv)))


def conv_flop_per_token(arch: Arch) -> float:
    """The causal depthwise convolution: a multiply-add per tap and channel, 2·w·C_w."""
    la = arch.linear_attention
    return 2.0 * la.conv_kernel * la.conv_dim


def saved_bytes(B, S, arch: Arch, a, t=1, path="fla"):
    """Bytes one linear-attention layer keeps for backward (beyond its input norm's output, which the norm term
    counts), on one of ``t`` TP ranks (heads and conv channels split), measured on an H100 with
    flash-linear-attention 0.6 (``tests/data/measured/h100-gdn-saved.json``, ``validation/measure_gdn.py``: bf16,
    every record to the byte).

    ``fla``, the fused kernels everywhere (fla's causal conv, ``chunk_gated_delta_rule``, ``FusedRMSNormGated``):
    per token a·(C_w + 2·K_w + 4·V_w + h_v·(C + 1)) + 4·(2·h_k + 4·h_v):

    * the causal conv saves its input, the concatenated q/k/v, a·C_w (its SiLU is fused; its output is not kept:
      the rule takes contiguous copies);
    * ``ChunkGatedDeltaRuleFunction`` (``use_qk_l2norm_in_kernel``) saves the L2-normalized q and k (a·2·K_w) and
      their fp32 rstd (4·2·h_k), a contiguous v (a·V_w), the gate's chunk-local cumsum (fp32, 4·h_v), β (a·h_v,
      also the sigmoid's saved output) and the UT-transform matrix A of each chunk (a·h_v·C);
    * the gate's softplus input and output in fp32 (transformers' ``-A_log.exp() * softplus(a.float() +
      dt_bias)``): 4·2·h_v;
    * the gated norm saves the rule's output and a contiguous gate z (a·2·V_w) and its fp32 rstd (4·h_v), and
      ``out_proj`` its input (a·V_w).

    ``megatron``: Megatron-LM's ``GatedDeltaNet`` L2-normalizes q and k outside the rule and repeats them to the
    h_v value heads before it (``_prepare_qkv_for_gated_delta_rule``): the rule then saves the repeated q and k,
    a·2·h_v·d_k more than ``fla`` (read in the code, then measured on an H200 to the byte:
    ``tests/data/measured/h200-gdn-saved-megatron.json``).

    ``hf``, transformers' ``Qwen3NextGatedDeltaNet`` with flash-linear-attention installed (the rule fused; the
    causal conv and ``Qwen3NextRMSNormGated`` in PyTorch, as without ``causal-conv1d`` and hub kernels): ``fla``
    plus the conv's padded output kept as the SiLU's input, a·C_w·(S + w − 1)/S, and the gated norm's fp32
    copies of its input, the gate and the gate's SiLU, 4·3·V_w, and its bf16 normalized output and weighted
    output, a·2·V_w, where the fused norm kept the bf16 input and gate (a·2·V_w).

    Without flash-linear-attention, transformers' torch fallback keeps its per-chunk intermediates in fp32 and
    saves 2.8 times ``hf`` (5.8 times ``fla``) on the same H100; it is not what a training run uses, so it is
    not modelled."""
    import numpy as np

    la = arch.linear_attention
    B, S, a, t = (np.asarray(x, dtype=np.float64) for x in (B, S, a, t))
    per_token = (a * (la.conv_dim + 2 * la.key_dim + 4 * la.value_dim + la.value_heads * (CHUNK + 1))
                 + 4.0 * (2 * la.key_heads + 4 * la.value_heads))
    if path == "megatron":
        per_token = per_token + a * 2 * la.value_heads * la.key_head_dim
    elif path == "hf":
        per_token = per_token + a * la.conv_dim * (S + la.conv_kernel - 1) / S + 4.0 * 3 * la.value_dim
    return B * S * per_token / t


def korthikanti_delta(s, b, arch: Arch, t=1, recompute="none", flash=False):
    """Bytes one linear-attention layer saves beyond the attention block Korthikanti et al. 2022 (Table 2) count for
    every layer of the Megatron model (:func:`aicalc.core.activations.korthikanti_layer`), on one of ``t`` TP ranks:
    :func:`saved_bytes` on Megatron-LM's path (causal-conv1d and flash-linear-attention kernels) in place of the
    block's Q, K, V and output-projection input (8·sbh/t) and, without flash attention or selective recompute, its
    5·a·s²·b/t scores. The block's input (the norm output) and its dropout mask stay in both. 0 with
    full recompute (a layer keeps only its input)."""
    import numpy as np

    s, b, t = (np.asarray(x, dtype=np.float64) for x in (s, b, t))
    recompute = np.asarray(recompute)
    core = np.where(np.asarray(flash, dtype=bool) | (recompute == "selective"), 0.0,
                    5.0 * arch.heads * s * s * b / t)
    delta = saved_bytes(b, s, arch, 2.0, t, "megatron") - 8.0 * s * b * arch.hidden / t - core
    return np.where(recompute == "full", 0.0, delta)
