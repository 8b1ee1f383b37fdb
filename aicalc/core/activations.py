"""Activation memory: the bytes autograd keeps from the forward pass until the backward pass, loss included.

Two models, chosen by ``framework``:

* ``megatron``: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
  (arXiv 2205.05198), Table 2 per layer, §4.2.3 pipeline rule, §4.3 terms outside the layers
  (validation cases TM-15…TM-19), plus Megatron-LM's own ``compute_activation_memory`` (TM-20).
* ``hf``: what Hugging Face transformers' eager PyTorch code saves, tensor by tensor, derived from the
  modeling code and verified with ``torch.autograd.graph.saved_tensors_hooks``
  (``validation/record_activations.py`` → ``tests/data/validation/activations.json``).

Notation: B micro-batch, S sequence, H hidden, A heads, K kv heads, d head_dim, F ffn size, V vocab,
L layers, t tensor-parallel size, p pipeline size, a bytes per activation element (2 for bf16/fp16, 4 for
fp32). Every function broadcasts over numpy arrays of B, S, t, p, … so one call evaluates one configuration
or a million. Results are bytes (float64).
"""

from __future__ import annotations

from aicalc.catalog.arch import Arch
from aicalc.core.compressed_attention import layer_input_width

# --------------------------------------------------------------------------------------------------
# Megatron / Korthikanti
# --------------------------------------------------------------------------------------------------


def korthikanti_layer(s, b, h, a, t=1, sp=False, recompute="none", flash=False, fp8=False):
    """Activation bytes of one transformer layer, Korthikanti et al. 2022 Table 2 (TM-15).

    16-bit activations, 1-byte dropout masks, layernorm statistics ignored, F = 4h:

    * no parallelism: ``sbh(34 + 5as/h)``; tensor parallel: ``sbh(10 + 24/t + 5as/(ht))``;
      tensor + sequence parallel: ``sbh(34/t + 5as/(ht))`` (t = 1 gives the first form).
    * selective recompute (§5, recompute the attention core) or flash attention drop the ``5as/(ht)``
      term (attention ``11sbh + 5as²b``, MLP ``19sbh``, two LayerNorm inputs ``4sbh``).
    * full recompute keeps only the layer input, ``2sbh`` (Table 2 last row; divided by t with SP).

    ``sp`` and ``flash`` may be boolean arrays. ``recompute`` is "none", "selective" or "full".

    ``fp8``: FP8 GEMMs through TransformerEngine (Megatron ``--fp8-format``): each ``Linear`` /
    ``LayerNormLinear`` saves its input for the weight gradient in FP8, 1 byte per element (the FP8 cast or its
    transpose, ``saved_inputmat``/``saved_inputmat_t`` in ``transformer_engine/pytorch/module/linear.py``)
    instead of 2: the QKV and FC1 inputs (LayerNorm outputs, 2sbh → sbh each), the projection input
    (2sbh → sbh) and the FC2 input (GeLU output, 8sbh → 4sbh); attention (Q, K, V, softmax) stays 16-bit.
    So ``34 → 27`` with SP, ``10 + 24/t → 8 + 19/t`` without. The full-recompute checkpoint (the layer
    input) stays 16-bit.
    """
    import numpy as np

    s, b, h, a, t = (np.asarray(x, dtype=np.float64) for x in (s, b, h, a, t))
    sp = np.asarray(sp, dtype=bool)
    flash = np.asarray(flash, dtype=bool)
    sbh = s * b * h
    attn_core = np.where(flash | (recompute == "selective"), 0.0, 5 * a * s / (h * t))
    f = np.asarray(fp8, dtype=np.float64)
    linear = np.where(sp, (34 - 7 * f) / t, (10 - 2 * f) + (24 - 5 * f) / t)
    per_layer = sbh * (linear + attn_core)
    full = 2 * sbh / np.where(sp, t, 1.0)
    return np.where(np.asarray(recompute) == "full", full, per_layer)


def interleave_factor(p, m=1):
    """Interleaved 1F1B schedule: the first stage holds ``1 + (p − 1)/(p·m)`` times more (TM-16; §4.2.3)."""
    import numpy as np

    p, m = np.asarray(p, dtype=np.float64), np.asarray(m, dtype=np.float64)
    return np.where(m > 1, 1 + (p - 1) / (p * m), 1.0)


def korthikanti_first_stage(s, b, h, a, L, t=1, p=1, sp=False, recompute="none", flash=False,
                            virtual_stages=1, microbatches=None, fp8=False):
    """Layers' activations on the first pipeline stage (TM-16, TM-19).

    With 1F1B the first stage keeps ``min(p, microbatches)`` micro-batches in flight over its L/p
    layers, ``L·per-layer`` when there are at least p micro-batches (§4.2.3); the interleaved schedule
    multiplies that by ``1 + (p − 1)/(p·m)``.
    """
    import numpy as np

    p = np.asarray(p, dtype=np.float64)
    inflight = p if microbatches is None else np.minimum(p, np.asarray(microbatches, dtype=np.float64))
    layer = korthikanti_layer(s, b, h, a, t, sp, recompute, flash, fp8)
    return layer * (np.asarray(L, dtype=np.float64) / p) * inflight * interleave_factor(p, virtual_stages)


def korthikanti_outside(s, b, h, v, t=1, p=1, sp=False):
    """Terms outside the transformer layers, Korthikanti §4.3 (TM-17), on the stage that holds them.

    First stage: embedding dropout mask ``sbhp/t`` (p micro-batches in flight, 1-byte mask). Last
    stage (counted with the first when p = 1): final LayerNorm input ``2sbh/t``, output-layer input
    ``2sbh/t`` and fp32 logits ``4sbv/t``, i.e. ``4sbh/t·(1 + v/h)``. For p > 1 the most-loaded (first)
    stage holds only the embedding term.
    """
    import numpy as np

    s, b, h, v, t, p = (np.asarray(x, dtype=np.float64) for x in (s, b, h, v, t, p))
    emb = s * b * h * p / t
    head = 4 * s * b * h / t * (1 + v / h)
    return emb + np.where(p == 1, head, 0.0)


def pipeline_outputs(s, b, h, p, t=1, a=2):
    """Pipeline-stage output tensors kept for the p in-flight micro-batches when they are not
    deallocated after the send: ``a·sbhp/t`` bytes (Korthikanti Appendix B; TM-35: 2.73 GiB for the
    530B run on pipeline rank 0). Megatron deallocates them (``deallocate_pipeline_outputs``), so the
    estimates above leave them out; this is the saving that option buys."""
    import numpy as np

    s, b, h, p, t = (np.asarray(x, dtype=np.float64) for x in (s, b, h, p, t))
    return a * s * b * h * p / t


def megatron_lm_activation(s, b, h, L, v, F=None, t=1, p=1, sp=True, selective=True,
                           virtual_stages=None, microbatches=None):
    """Megatron-LM ``compute_activation_memory`` (``megatron/training/theoretical_memory_usage.py``), TM-20.

    * SP + selective recompute: per layer ``sbh(18 + 4F/h)`` (34 at F = 4h), × L/p layers × p in flight;
      plus ``8sbp`` (embedding input) and ``sbhp`` (embedding dropout); × the interleave penalty
      ``1 + (p − 1)/(p·m)``, or × ``min(1, microbatches/p)`` without interleaving; plus
      ``4sbh(1 + V/h)`` if p = 1; the total divided by t.
    * otherwise: per layer ``sbh(10 + 24/t)`` (flash attention assumed), the same embedding terms, plus
      ``(sbV/t + sbh)·2`` if p = 1, then × 1.05 (no final division by t).
    """
    import numpy as np

    s, b, h, L, v, t, p = (np.asarray(x, dtype=np.float64) for x in (s, b, h, L, v, t, p))
    F = 4 * h if F is None else np.asarray(F, dtype=np.float64)
    if sp and selective:
        per_layer = s * b * h * (18 + 4 * F / h)
        total = per_layer * L  # (L/p) layers × p micro-batches in flight
        total = total + 8 * s * b * p + s * b * h * p
        if virtual_stages is not None and virtual_stages > 1:
            total = total * (1 + (p - 1) / (p * virtual_stages))
        elif microbatches is not None:
            total = total * np.minimum(1.0, microbatches / p)
        total = total + np.where(p == 1, 4 * s * b * h * (1 + v / h), 0.0)
        return total / t
    per_layer = s * b * h * (10 + 24 / t)
    total = per_layer * L + 8 * s * b * p + s * b * h * p
    if virtual_stages is not None and virtual_stages > 1:
        total = total * (1 + (p - 1) / (p * virtual_stages))
    elif microbatches is not None:
        total = total * np.minimum(1.0, microbatches / p)
    total = total + np.where(p == 1, (s * b * v / t + s * b * h) * 2, 0.0)
    return total * 1.05


# --------------------------------------------------------------------------------------------------
# Hugging Face transformers
# --------------------------------------------------------------------------------------------------

HF_RECOMPUTE_CHOICES = ("with {framework=hf} use none, full (gradient checkpointing), selective-op (torchtitan's "
                        "op-level selective AC: keep matmul and attention outputs) or every-N (checkpoint every N-th "
                        "layer)")
HF_RECOMPUTE_HELP = HF_RECOMPUTE_CHOICES + "; selective is Megatron's (recompute the attention core)"

# Activations whose backward is the tanh approximation written out in Python (transformers'
# ``NewGELUActivation``/``FastGELUActivation``): x, tanh(...), 1 + tanh(...), 0.5·x are all saved.
_PYTHON_GELU = ("gelu_new", "gelu_fast", "gelu_python", "quick_gelu")


def hf_norm(B, S, H, a, norm="rms", stat_bytes=4):
    """Saved bytes of one norm and the linear layer reading its output.

    RMSNorm (``LlamaRMSNorm`` and its copies): ``x.to(float32)`` is saved by ``pow``/``mul`` (4BSH),
    ``rsqrt`` (4BS), the normalized ``.to(input_dtype)`` by the weight multiply (aBSH) and the weighted
    output by the next linear layer (aBSH): ``4BSH + 2aBSH + 4BS``. In fp32 the casts are no-ops and the
    same formula holds (x, x·rsqrt, output = 12BSH).
    LayerNorm (GPT-2): ``native_layer_norm`` saves its input (aBSH), mean and rstd (B·S each, fp32 on
    CUDA), and the next linear saves the output (aBSH).
    """
    BS = B * S  # the bytes per token summed first: one product per point (whole numbers, so the same sums)
    if norm == "rms":
        return BS * (4 * H + 2 * a * H + 4)
    return BS * (2 * a * H + 2 * stat_bytes)


def gemma_norm(B, S, H, a, feeds_linear=True):
    """Gemma's RMSNorm (``modeling_gemma2.py``/``modeling_gemma3.py``): ``_norm(x.float()) * (1.0 + weight.float())``
    saves the fp32 input and its rsqrt for the normalization (4·BSH + 4·BS) and the fp32 normalized tensor for the
    ``(1 + w)`` product (4·BSH, where Llama's RMSNorm saves an a-byte copy), then casts back; the a-byte output is
    saved by the next linear for the input and pre-feed-forward norms (a·BSH), not for the post-attention and
    post-feed-forward norms, which feed the residual sum. Checked with saved-tensor hooks (docs/train-mem.md)."""
    return 8 * B * S * H + 4 * B * S + (a * B * S * H if feeds_linear else 0.0)


def fp32_product_norm(arch: Arch) -> bool:
    """Whether the model's RMSNorm multiplies its weight in fp32 and casts after (:func:`gemma_norm`'s count): Gemma's
    ``(1 + w)·x``, and gpt-oss's ``(self.weight * hidden_states).to(input_dtype)`` (``GptOssRMSNorm``, where
    Llama's casts before the product)."""
    return arch.family.startswith("gemma") or arch.family == "gpt_oss"


def token_ffn(arch: Arch) -> float:
    """The FFN width one token's activations span: F for a dense model; for a MoE each token runs k routed
    experts of size F_e and the shared ones (of their own size where the config gives one, Qwen2-MoE's
    ``shared_expert_intermediate_size``), so a MoE layer counts ``F_e·k + shared·F_s``, averaged with the dense
    layers (checked with the whole-step tracker, ``validation/record_step_peak.py``)."""
    if arch.moe is None or not arch.layers:
        return arch.ffn
    frac = arch.n_moe_layers / arch.layers
    m = arch.moe
    width = m.expert_ffn * m.experts_per_token + m.shared_experts * (m.shared_expert_ffn or m.expert_ffn)
    return frac * width + (1 - frac) * arch.ffn


def moe_routing_saved(B, S, arch: Arch, a):
    """Bytes a MoE layer saves for backward beyond its experts' MLPs, averaged over the layers like
    :func:`token_ffn` (transformers 5 ``grouped_mm_experts_forward`` in ``integrations/moe.py``, the default
    experts implementation; checked with ``validation/record_step_peak.py``):

    * the permutation buffer: the tokens gathered in expert order, ``hidden_states[perm // k]``, which the first
      grouped matmul saves for its weight gradient, ``a·BS·k·H``;
    * the down projection's output, saved by its multiplication with the routing weights, ``a·BS·k·H``;
    * DeepSeek-V2/V3's router computes in fp32 (``F.linear(hidden.float(), weight.float())``) and saves the fp32
      copy of its input, ``4·BSH`` (GLM-4.5's and GLM-4.7-Flash's routers do the same, ``Glm4MoeTopkRouter``,
      ``Glm4MoeLiteTopkRouter``: ``F.linear(hidden_states.type(torch.float32), ...)``); Qwen2-MoE's shared-expert
      sigmoid gate saves the shared expert's output, ``a·BSH``. The routing scores and indices (``BS·E`` fp32, ``BS·k`` int64) are small and not counted."""
    if arch.moe is None or not arch.layers:
        return 0.0
    frac = arch.n_moe_layers / arch.layers
    BS, H, k = B * S, arch.hidden, arch.moe.experts_per_token
    extra = 2 * a * BS * k * H
    if arch.family in ("deepseek_v2", "deepseek_v3", "glm4_moe", "glm4_moe_lite"):
        extra = extra + 4 * BS * H
    if arch.moe.shared_gate:
        extra = extra + a * BS * H
    return frac * extra


# families whose released configs train with dropout 0.1 on the hidden states and the attention probabilities
# (GPT-2 resid/embd/attn_pdrop; BERT and RoBERTa hidden_dropout_prob, attention_probs_dropout_prob); the others 0
DROPOUT_FAMILIES = ("gpt2", "bert", "roberta")


def family_dropout(arch: Arch) -> float:
    """The dropout a family's released config trains with (:data:`DROPOUT_FAMILIES`)."""
    return 0.1 if arch.family in DROPOUT_FAMILIES else 0.0


def hf_layer(B, S, arch: Arch, a, attention="sdpa", t=1, dropout=0.0, attn_dropout=0.0,
             mask_bytes=1, stat_bytes=4, sdpa_math=None):
    """Bytes one decoder layer of transformers saves for backward (no recompute).

    Derived from ``modeling_llama.py``/``modeling_gpt2.py`` (transformers 5.x) and checked with
    saved-tensor hooks (``tests/data/validation/activations.json``):

    * two norms, see :func:`hf_norm` (the q/k/v projections and the MLP's first linears read the
      norm output, which is saved once).
    * attention, eager: q after RoPE (a·BS·Ad), k and v after ``repeat_kv`` (GQA/MQA expand K heads to A
      before the matmuls, so 2·a·BS·Ad), the fp32 softmax output (4·B·A·S², Llama's
      ``softmax(dtype=float32)``; GPT-2 keeps the input dtype, a·B·A·S²), its cast to a for ``probs @ v``
      (a·B·A·S², none when a = 4), attention dropout (mask + dropped probs) when its p > 0, and the
      ``o_proj`` input (a·BS·Ad). RoPE's ``q·cos + rotate_half(q)·sin`` saves only cos/sin (shared by all
      layers, [S, d], negligible).
    * attention, sdpa/flash: q (a·BS·Ad), k and v un-repeated (2·a·BS·Kd; ``enable_gqa``), the output
      (a·BS·Ad, which is also the ``o_proj`` input) and the fp32 log-sum-exp (4·B·A·S). Except where CUDA's SDPA
      takes its math path (:func:`sdpa_math_path`: fp32 with GQA), which saves what eager attention saves.
    * MLP, gated (SwiGLU/GeGLU): gate output, up output, act(gate), and act·up as the ``down_proj`` input:
      4·a·BSF. Plain: the activation input and the second linear's input, 2·a·BSF; the Python tanh-GELU
      (``gelu_new``) saves x, tanh(·), 1 + tanh(·), 0.5·x and the product: 5·a·BSF.
    * residual dropout (GPT-2 ``resid_pdrop``) saves one mask of BSH per sub-block: 2·m·BSH.
    * MoE layers: the routed and shared experts' MLPs over :func:`token_ffn`, plus the routing's own saved
      tensors (:func:`moe_routing_saved`).
    * gpt-oss (``arch.attention_sinks``), eager: the sink column joins the scores and one softmax runs in the
      scores' own dtype (``F.softmax(combined_logits, dtype=combined_logits.dtype)``), so a·B·A·S·(S + 1) is saved
      (the ``probs[..., :-1]`` that multiplies v is a view of it) and the row max's int64 indices, 8·B·A·S, in place
      of Llama's fp32 softmax and its cast. Its experts' clamped SwiGLU (``GptOssExperts._apply_gate``: the
      gate_up output whose two strided halves are clamped, the clamped gate, its sigmoid, gate·sigmoid, up + 1
      and their product, the down projection's input) saves 7F per routed copy where SwiGLU saves 4F:
      3·a·BS·k·F more (transformers 5.23; measured on an H200, ``tests/data/measured/h200-step-peak-3.json``).
    * a gated attention output (Qwen3-Next, Qwen3.5 ``attn_output * torch.sigmoid(gate)``): the sigmoid's output
      and the product, 2·a·BS·Ad more; a hybrid's linear-attention layers save
      :func:`aicalc.core.linear_attention.saved_bytes` (transformers' module, "hf") in place of attention (the per-layer average over its
      layers, as for MoE).
    * DeepSeek-V4 (``arch.compressed``): :func:`aicalc.core.compressed_attention.hf_layer_saved`, the n mHC
      residual streams, the compressors, the sinks, the q LoRA and the grouped output projection, eager attention
      whatever ``attention`` says (transformers 5.23 gives V4 no other path).
    * GPT-2's fused ``c_attn``: the saved q/k/v include one view of the whole 3·H-wide projection output
      plus two copies, 2·a·BSH more than the separate-projection count above (sdpa always; eager only at
      B = 1, where reshaping q for ``bmm`` is a view rather than a copy).

    Tensor parallelism splits the heads and F over t (the norms and masks stay whole, as in Megatron
    without SP). ``mask_bytes`` is 1 for CUDA's fused dropout (bool mask) and ``a`` on the CPU (the
    harness); ``stat_bytes`` is LayerNorm's mean/rstd element size (fp32 on CUDA, a on the CPU); ``sdpa_math``
    whether SDPA takes its math path (None: as CUDA does, :func:`sdpa_math_path`; the CPU's flash kernel never).
    """
    import numpy as np

    if arch.compressed is not None:  # DeepSeek-V4: mHC streams, compressors, sinks, grouped o-proj (eager only)
        from aicalc.core.compressed_attention import hf_layer_saved

        return hf_layer_saved(B, S, arch, a, t)
    B, S, a, t = (np.asarray(x, dtype=np.float64) for x in (B, S, a, t))
    H, A, K, d, F = arch.hidden, arch.heads, arch.kv_heads, arch.head_dim, token_ffn(arch)
    Ad = A * d / t
    Kd = np.maximum(K / t, 1) * d  # kv heads replicated when t > K
    BS = B * S
    norms = 2 * hf_norm(B, S, H, a, arch.norm, stat_bytes)
    if fp32_product_norm(arch):
        norms = 2 * gemma_norm(B, S, H, a) + (arch.norms_per_layer - 2) * gemma_norm(B, S, H, a, feeds_linear=False)
    if sdpa_math is None:
        sdpa_math = sdpa_math_path(arch, a)
    if attention == "eager" or (attention == "sdpa" and sdpa_math):
        heads_ss = B * (A / t) * S * S
        if arch.attention_sinks:  # gpt-oss: one softmax in the logits' dtype over S + 1 columns, max's indices
            soft, cast = a * heads_ss * (S + 1) / S + 8 * B * (A / t) * S, 0.0
        else:
            probs_fp32 = arch.norm == "rms"  # Llama-family eager upcasts the softmax to fp32; GPT-2 does not
            soft = np.where(probs_fp32, 4.0, a) * heads_ss
            cast = np.where(probs_fp32 & (a < 4), a * heads_ss, 0.0)
        drop = (mask_bytes + a) * heads_ss if attn_dropout > 0 else 0.0
        attn = a * BS * Ad * 4 + soft + cast + drop
    else:
        attn = a * BS * (2 * Ad + 2 * Kd) + 4 * B * (A / t) * S
    if arch.family == "gpt2":
        # GPT-2's fused c_attn: one of q/k/v stays a view of the whole [B, S, 3H] projection output, which is
        # then saved in full, while the other two are copied: 2·a·BSH more than separate projections. Eager
        # reshapes q to [B·A, S, d] for ``bmm``, a copy unless B = 1, so there it only happens at B = 1.
        fused_view = (B == 1) if attention == "eager" else True
        attn = attn + np.where(fused_view, 2 * a * BS * Ad, 0.0)
    if arch.attention_gate:  # sigmoid(gate) and the gated output (the o_proj input) beside the ungated output
        attn = attn + 2 * a * BS * Ad
    qk = qk_norm_saved(B, S, arch, a, t)
    if arch.linear_layers:  # a hybrid: attention on its softmax layers, the delta rule on the others, averaged
        from aicalc.core.linear_attention import saved_bytes

        share = arch.attention_layers / arch.layers
        attn = share * attn + (1.0 - share) * saved_bytes(B, S, arch, a, t, "hf")
        qk = share * qk
    if arch.gated_ffn:
        mlp = 4 * a * BS * F / t
    elif arch.activation in _PYTHON_GELU:
        mlp = 5 * a * BS * F / t
    else:
        mlp = 2 * a * BS * F / t
    if arch.family == "gpt_oss":  # clamped SwiGLU experts: the clamped gate, (up + 1) and the two products beside
        mlp = mlp + 3 * a * BS * arch.moe.experts_per_token * arch.moe.expert_ffn / t  # 4F·a (gpt_oss_experts)
    resid = 2 * mask_bytes * BS * H if dropout > 0 else 0.0
    if attention == "eager" and arch.extra.get("attn_logit_softcapping"):
        attn = attn + a * B * (A / t) * S * S  # the tanh output of the soft-capped scores (softcap_saved)
    return norms + attn + mlp + resid + moe_routing_saved(B, S, arch, a) + qk


def sdpa_math_path(arch: Arch, a) -> bool:
    """Whether CUDA's ``scaled_dot_product_attention`` takes its math path for this model in activations of ``a``
    bytes. PyTorch's dispatch (``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``): flash attention takes
    fp16/bf16 only, and the memory-efficient kernel rejects ``enable_gqa`` with fewer kv heads than query heads
    (``check_batch_size_and_num_heads_dense<false>``), so fp32 with GQA/MQA (transformers passes ``enable_gqa``)
    falls to ``_scaled_dot_product_attention_math``: k and v repeated, the scores' softmax saved, as eager attention
    saves them. Measured on an H200 (``tests/data/measured/h200-step-peak.json``): the fp32 SDPA steps of the
    GQA models peak exactly where their eager steps do, and 5-6 % above the CPU trace (whose flash kernel takes
    GQA in fp32)."""
    import numpy as np

    return bool(np.all(np.asarray(a) >= 4)) and arch.kv_heads < arch.heads


def amp_saved(B, S, arch: Arch, a=2.0, t=1, attention="sdpa"):
    """What one transformers decoder layer saves beyond :func:`hf_layer` under torch AMP (``torch.autocast`` with
    fp32 parameters, ``--precision bf16-mixed``/``fp16-mixed``, full training). The embedding's output is fp32, so
    the residual stream is fp32 and each RMSNorm returns fp32 (``LlamaRMSNorm``: ``weight * x.to(input_dtype)``
    with ``input_dtype`` fp32; Gemma's ``type_as(x)``):

    * autocast casts an activation for every op that reads it (its cast cache keeps only weights), so q, k and v
      each save their own a-byte copy of the first norm's output, gate and up of the second's: ``2·a·BSH`` and
      ``a·BSH`` more than the one shared copy of a pure 16-bit model (none where a fused projection reads it,
      Phi-3's ``qkv_proj`` and ``gate_up_proj``);
    * Llama's RMSNorm saves its normalized tensor for the weight's gradient in fp32, ``(4 − a)·BSH`` more per
      norm (Gemma's saves fp32 in any precision, :func:`gemma_norm`).

    Checked with ``train-mem --trace`` (the whole-step tracker at batch 4 × 1024): Llama-3.2-1B 29.95 GiB traced,
    Qwen3-0.6B 23.53, Gemma-2-2B (batch 2, eager) 53.49, each within 0.1 % with this term.

    LayerNorm models (GPT-2, ``modeling_gpt2.py``): ``layer_norm`` runs in fp32 under autocast, so each of the two
    norms saves its fp32 input, ``(4 − a)·BSH`` more each (its output is cast to a by the Conv1D's ``addmm``, as a
    pure 16-bit model saves it); the Python tanh-GELU (``gelu_new``) computes ``pow`` in fp32 (autocast's fp32
    list), so ``pow`` saves an fp32 copy of its input and ``tanh``'s output and ``1 + tanh`` are fp32:
    ``3·(4 − a)·BSF`` more; eager attention's ``softmax`` (fp32 list) saves fp32 probabilities, ``(4 − a)·B·A·S²``
    more. GPT-2 medium at batch 8 × 1024, SDPA, AMP: 26.17 GiB measured on an H200
    (tests/data/measured/h200-step-peak.json), 20.91 without these terms. MoE and MLA layers are not covered."""
    import numpy as np

    if arch.moe is not None or arch.mla is not None:
        return 0.0
    B, S, a = (np.asarray(x, dtype=np.float64) for x in (B, S, a))
    BSH = B * S * arch.hidden
    if arch.norm != "rms":
        extra = 2 * (4.0 - a) * BSH
        if arch.activation in _PYTHON_GELU:
            extra = extra + 3 * (4.0 - a) * B * S * token_ffn(arch) / t
        if attention == "eager":
            extra = extra + (4.0 - a) * B * (arch.heads / t) * S * S
        return extra
    fused = arch.family.startswith("phi3")
    casts = 0.0 if fused else (2.0 + (1.0 if arch.gated_ffn else 0.0)) * a * BSH
    normed = 0.0 if arch.family.startswith("gemma") else 2 * (4.0 - a) * BSH
    return casts + normed


def compiled_saving(B, S, arch: Arch, a, t=1, amp=False, frozen=False):
    """Bytes of :func:`hf_layer` (with :func:`amp_saved` under torch AMP) a decoder layer does not save when it is
    ``torch.compile``'d (torchtitan compiles each TransformerBlock; ``nn.Module.compile``): AOTAutograd's
    min-cut partitioner recomputes cheap pointwise ops in the backward rather than save their outputs, so the
    layer keeps neither RMSNorm's fp32 upcasts (two norms, ``4·BSH`` each; under AMP, where the residual stream is
    fp32, four fp32 ``BSH`` tensors) nor one of SwiGLU's F-wide products (``a·BSF``), nor Qwen3's fp32 copies of
    q and k for their per-head norms (``4·BS·(A + K)·d``). Counted with saved-tensor hooks around compiled
    Llama- and Qwen3-style layers on the CPU (five shapes each, bf16, AMP and fp32: exactly these coefficients;
    validation/record_compiled.py, tests/test_compiled_saving.py),
    and measured on an H200 (tests/data/measured/h200-step-peak-compiled.json): Llama-3.2-1B bf16 −2.18 GB and AMP
    −3.22 GB, Qwen3-1.7B −4.70 GB at batch 2 × 2048, as this predicts. Modelled for dense RMSNorm models with a
    gated FFN (Llama, Mistral, Qwen, Phi-3; :func:`compile_modelled`).

    ``frozen`` (LoRA on 16-bit or fp32 base weights, not torch AMP): the frozen eager layer
    (:func:`hf_frozen_saving`) keeps each norm's fp32 upcast and not its a-byte input; the compiled one keeps the
    two a-byte inputs (the layer's input and the mid-layer residual) and recomputes the upcasts, ``(8 − 2a)·BSH``
    less (Qwen3's head norms likewise keep a-byte q and k for their fp32 copies, ``(4 − a)·BS·(A + K)·d``), and
    still one SwiGLU product less. Counted the same way on PEFT models (Llama and Qwen3 shapes, bf16 and fp32,
    every target set, fp32 and 16-bit adapters; the adapters' own fp32 input copies are
    ``train_peak.lora_compiled_merge``)."""
    import numpy as np

    B, S, a, t = (np.asarray(x, dtype=np.float64) for x in (B, S, a, t))
    if frozen:
        qk = (4.0 - a) * (arch.heads + arch.kv_heads) * arch.head_dim / t if arch.qk_norm else 0.0
        return B * S * ((8.0 - 2.0 * a) * arch.hidden + a * token_ffn(arch) / t + qk)
    norms = np.where(np.asarray(amp), 16.0, 8.0) * arch.hidden
    qk = 4.0 * (arch.heads + arch.kv_heads) * arch.head_dim / t if arch.qk_norm else 0.0
    return B * S * (norms + a * token_ffn(arch) / t + qk)


def compile_modelled(arch: Arch) -> bool:
    """Whether :func:`compiled_saving` covers ``arch``: a dense model with RMSNorm and a gated FFN, not Gemma's
    four norms a layer."""
    return (arch.moe is None and arch.mla is None and arch.norm == "rms" and arch.gated_ffn
            and not arch.family.startswith("gemma"))


def qk_norm_saved(B, S, arch: Arch, a, t=1, frozen=False):
    """Qwen3's RMSNorm on each query and key head (``q_norm``/``k_norm`` in ``modeling_qwen3.py``, the
    ``LlamaRMSNorm`` code over ``head_dim``): like a layer norm (:func:`hf_norm`) it saves the fp32 copy of its
    input (4 bytes per element of q and k), the fp32 rsqrt per head (4 bytes per head and token) and, for the
    weight's gradient, the a-byte normalized tensor (none when the weights are frozen, ``frozen``); its output
    goes through RoPE to the attention, which saves q and k already. Per layer ``(4 + a)·BS·(A + K)·d/t +
    4·BS·(A + K)/t``. Qwen3-0.6B at batch 4 × 1024 in bf16: the tracker's peak is 17.99 GiB, 16.01 without this
    term (validation/record_step_peak.py method, ``train-mem --trace``)."""
    if not arch.qk_norm:
        return 0.0
    heads = (arch.heads + arch.kv_heads) / t
    return B * S * heads * ((4.0 + (0.0 if frozen else a)) * arch.head_dim + 4.0)


def softcap_saved(arch: Arch) -> dict:
    """Gemma-2's logit soft-capping, ``cap·tanh(x/cap)`` (``modeling_gemma2.py``: the eager attention scores before
    the softmax, ``attn_logit_softcapping``; the output logits before the loss, ``final_logit_softcapping``):
    ``tanh`` saves its output for backward, one more tensor of the scores' size (a·B·A·S² per layer, eager only;
    transformers 5.23 gives Gemma-2 no SDPA path) and of the logits' (a·BS·V, in the model dtype, before the loss
    upcasts them). Checked with saved-tensor hooks on a Gemma-2-style model (docs/train-mem.md)."""
    return {k: arch.extra.get(k) for k in ("attn_logit_softcapping", "final_logit_softcapping")}


# Recompute modes of ``--framework hf`` besides "none" and "full" (docs/train-mem.md "Selective checkpointing"):
# torchtitan's op-level selective AC and checkpointing every N-th layer.
SELECTIVE_OP = "selective-op"
EVERY_PREFIX = "every-"


def parse_every(text: str) -> int | None:
    """N of ``every-N`` (N ≥ 1), else None."""
    if isinstance(text, str) and text.startswith(EVERY_PREFIX) and text[len(EVERY_PREFIX):].isdigit():
        n = int(text[len(EVERY_PREFIX):])
        return n if n >= 1 else None
    return None


def recompute_every(recompute):
    """Checkpoint period per element of ``recompute`` (a string or an array of them): 1 for "full", N for
    "every-N", 0 where no layer is fully checkpointed ("none", "selective-op", Megatron's "selective")."""
    import numpy as np

    def one(x: str) -> float:
        return 1.0 if x == "full" else float(parse_every(x) or 0)

    rc = np.asarray(recompute)
    if rc.ndim == 0:
        return np.float64(one(str(rc)))
    if rc.size and np.all(rc == rc.flat[0]):  # the usual case (a search slice has one recompute mode): no sort
        return np.full(rc.shape, one(str(rc.flat[0])))
    values, inverse = np.unique(rc, return_inverse=True)
    return np.array([one(str(v)) for v in values], dtype=np.float64)[inverse].reshape(rc.shape)


def checkpointed_layers(recompute, layers):
    """Of ``layers`` decoder layers, how many run under a full checkpoint (keeping only their input): all with
    "full"; with "every-N", torchtitan's ``selective_ac_option = "N"`` (``_apply_layer_sac``: a block is wrapped
    when its running count, from 1, is a multiple of N), ``floor(layers/N)``; none otherwise. transformers'
    ``activation_checkpointing_enable(every_n_layers=N)`` wraps layers 0, N, 2N, … instead, ``ceil(layers/N)``:
    the same when N divides the layers, one more layer checkpointed otherwise."""
    import numpy as np

    every = recompute_every(recompute)
    if np.ndim(every) == 0 and every == 0:
        return np.float64(0.0)
    L = np.asarray(layers, dtype=np.float64)
    return np.where(every > 0, np.floor(L / np.maximum(every, 1.0)), 0.0)


def _pick(cond, x, y):
    """``np.where(cond, x, y)``, without building arrays when ``cond`` is one boolean (the usual scalar mode)."""
    import numpy as np

    if np.ndim(cond) == 0:
        return x if cond else y
    return np.where(cond, x, y)


def _mm_widths(arch: Arch, t=1) -> list:
    """Output widths (per token) of one decoder layer's linears that PyTorch dispatches as ``aten.mm``, in
    forward order. ``nn.Linear`` without bias decomposes (``aten::linear`` → ``matmul``, folding [B, S, in] to
    2-D) into ``aten.mm``; with a bias and a contiguous 3-D input it becomes ``aten.addmm``
    (``_flatten_nd_linear``), and GPT-2's ``Conv1D`` calls ``torch.addmm`` itself: those are not ``aten.mm``.
    Llama/Mistral: q, k, v, o, gate, up, down; Qwen2 (q/k/v biases): o, gate, up, down; GPT-2: none;
    Phi-3 (transformers' ``Phi3Attention.qkv_proj`` and ``Phi3MLP.gate_up_proj``, one linear each): qkv, o,
    gate_up, down. Column-parallel outputs are split over t; the row-parallel o/down outputs are full-width
    partial sums."""
    import numpy as np

    H, A, K, d, F = arch.hidden, arch.heads, arch.kv_heads, arch.head_dim, token_ffn(arch)
    t = np.asarray(t, dtype=np.float64)
    Kd = np.maximum(K / t, 1) * d
    if arch.family.startswith("phi3"):
        return [A * d / t + 2 * Kd, H, 2 * F / t, H]
    widths: list = []
    if not arch.qkv_bias:
        widths += [A * d / t, Kd, Kd]
    if not arch.o_bias:
        widths.append(H)
    if not arch.mlp_bias:
        widths += [F / t, F / t, H] if arch.gated_ffn else [F / t, H]
    return widths


def hf_selective_op_layer(B, S, arch: Arch, a, attention="sdpa", t=1):
    """Bytes one decoder layer keeps under torchtitan's op-level selective activation checkpointing
    (``activation_checkpoint.mode = "selective"``, ``selective_ac_option = "op"``).

    torchtitan (``torchtitan/parallelisms/parallelize_llama.py`` → ``torchtitan/distributed/activation_checkpoint.py``,
    ``_apply_ac_to_transformer_block``) wraps each block in ``checkpoint_wrapper(..., context_fn=...)`` whose
    context is ``torch.utils.checkpoint.create_selective_checkpoint_contexts(policy)``; its ``_custom_policy``
    returns ``CheckpointPolicy.MUST_SAVE`` for the ops in ``_save_list`` — ``aten.mm``,
    ``aten._scaled_dot_product_flash_attention``/``_efficient_attention`` (``reduce_scatter`` with SP) —
    "except every second mm" (a counter reset per block call), and ``PREFER_RECOMPUTE`` for everything else.
    PyTorch's checkpoint docs (``torch.utils.checkpoint``, "selective activation checkpoint"): the caching
    dispatch mode stores the MUST_SAVE outputs during the forward and hands them back during the recompute
    instead of running the op; everything else autograd would save inside the block is recomputed. So a block
    keeps:

    * its input hidden state, ``a·BSH`` (the non-reentrant checkpoint saves its positional inputs);
    * the 1st, 3rd, 5th, … ``aten.mm`` outputs (:func:`_mm_widths`): Llama/Mistral q (``a·BS·Ad``), v
      (``a·BS·Kd``), gate (``a·BSF``) and down (``a·BSH``); Qwen2 (biased q/k/v are ``addmm``) o and up;
      GPT-2 (``Conv1D`` is ``addmm``) none;
    * with sdpa/flash attention the kernel's outputs: the attention output ``a·BS·Ad`` and the fp32
      log-sum-exp ``4·B·A·S`` (eager attention is ``bmm``/``softmax``: recomputed).

    Checked with saved-tensor hooks plus the SAC cache itself (``validation/record_activations.py``,
    ``selective-op`` cases; the CPU's ``_scaled_dot_product_flash_attention_for_cpu`` stands in for CUDA's
    flash kernel). Not checked: the flash-attn package's own op (transformers' ``flash_attention_2``) is not in
    torchtitan's list and would be recomputed; MoE experts are counted like the dense MLP over the routed width.
    """
    import numpy as np

    B, S, a, t = (np.asarray(x, dtype=np.float64) for x in (B, S, a, t))
    BS = B * S
    widths = _mm_widths(arch, t)
    mm = sum(widths[0::2]) if widths else 0.0
    attn = 0.0 if attention == "eager" else a * BS * arch.heads * arch.head_dim / t + 4 * B * (arch.heads / t) * S
    return a * BS * arch.hidden + a * BS * mm + attn


def compiled_selective_saving(B, S, arch: Arch, a, t=1):
    """Bytes of :func:`hf_selective_op_layer` a layer does not keep when torchtitan compiles it under op-level
    selective activation checkpointing (``torchtitan/models/llama3/infra/parallelize.py``: ``apply_ac`` wraps each
    block in ``checkpoint_wrapper(block, context_fn=...)``, then ``apply_compile`` compiles the wrapped block).
    Dynamo traces the checkpoint and its policy into the graph and AOTAutograd's partitioner saves the ``MUST_SAVE``
    outputs that the backward or its recomputation reads; the eager checkpoint's cache keeps every one. The only
    kept output nothing reads again is ``down_proj``'s, when it is kept: the last ``aten.mm`` of a layer with an odd
    count of them (:func:`_mm_widths`: Llama, Mistral, Qwen3, seven), which feeds only the layer's closing residual
    add, ``a·BSH`` (a row-parallel partial sum under TP: full width). ``o_proj``'s output, kept where the q/k/v
    biases make the count four (Qwen2), stays: recomputing the post-attention norm reads the residual sum it
    forms. Phi-3's four (its fused qkv and gate_up) keep neither o nor down: nothing. Everything else the compiled
    layer keeps is the eager SAC set: its input, the kept mm outputs, SDPA's output and log-sum-exp.

    Counted with saved-tensor hooks (plus the eager SAC cache) on the CPU around eager and compiled
    ``checkpoint_wrapper`` layers with record_activations' copy of torchtitan's policy: Llama in bf16, AMP and fp32,
    Qwen3 and Qwen2 in bf16, five shapes each (hidden, FFN, heads, head size varied one at a time): the
    difference is exactly ``a·H`` a token for Llama and Qwen3 (512 bytes at H = 256 in bf16, 1,024 in fp32, 768 at
    H = 384) and 0 for Qwen2 (validation/record_compiled.py, ``selective-op`` records;
    tests/test_compiled_saving.py)."""
    import numpy as np

    widths = _mm_widths(arch, t)
    if arch.mlp_bias or not widths or len(widths) % 2 == 0:
        return 0.0
    B, S, a = (np.asarray(x, dtype=np.float64) for x in (B, S, a))
    return a * B * S * widths[-1]


def hf_frozen_saving(B, S, arch: Arch, a, attention="sdpa", t=1):
    """Bytes of :func:`hf_layer` a layer does not save when its base weights are frozen (LoRA, QLoRA).

    Autograd saves a matmul's input only to compute its weight's gradient (``mm``/``addmm`` save ``self``
    when ``mat2`` requires grad; bitsandbytes' ``MatMul4Bit`` keeps no input at all), and a norm's weight
    multiply saves the normalized input only for the weight's gradient. With frozen weights these go:
    each norm's normalized copy and the output the next linear reads (RMSNorm 2·a·BSH; LayerNorm, whose
    ``native_layer_norm`` needs its input for the input gradient anyway, a·BSH), the ``down_proj`` input
    (a·BSF: gated and plain MLPs alike; the Python tanh-GELU's product too), and with eager attention the
    ``o_proj`` input (a·BS·Ad; SDPA saves its output for its own backward, which is the ``o_proj`` input).
    Checked with saved-tensor hooks on PEFT models (``validation/record_activations.py``, ``lora`` cases)."""
    import numpy as np

    B, S, a, t = (np.asarray(x, dtype=np.float64) for x in (B, S, a, t))
    H, F = arch.hidden, token_ffn(arch)
    BS = B * S
    norms = 2 * (2 if arch.norm == "rms" else 1) * a * BS * H
    o_in = a * BS * arch.heads * arch.head_dim / t if attention == "eager" else 0.0
    qk = qk_norm_saved(B, S, arch, a, t) - qk_norm_saved(B, S, arch, a, t, frozen=True)
    return norms + a * BS * F / t + o_in + qk


def hf_frozen_outside(B, S, arch: Arch, a, stat_bytes=4, stage="all", compiled=False):
    """Bytes of :func:`hf_outside` not saved when the base weights are frozen: the final norm's normalized
    copy and the ``lm_head`` input (as in :func:`hf_frozen_saving`), and, on the first stage, the first
    layer's input norm entirely: the frozen embedding's output needs no gradient, so nothing reading it
    saves it (RMSNorm's fp32 copy and rstd, 4BSH + 4BS; LayerNorm's input, mean and rstd). ``compiled``: a
    compiled frozen layer keeps the norm's a-byte input instead of its fp32 copy (:func:`compiled_saving`), so the
    first layer's norm saves ``a·BSH + 4BS`` less there (validation/record_compiled.py, ``layer0`` records)."""
    import numpy as np

    B, S, a = (np.asarray(x, dtype=np.float64) for x in (B, S, a))
    BS, H = B * S, arch.hidden
    upcast = a if compiled else 4.0
    first = (upcast * BS * H + 4 * BS) if arch.norm == "rms" else (a * BS * H + 2 * stat_bytes * BS)
    last = (2 if arch.norm == "rms" else 1) * a * BS * H
    return {"first": first, "last": last, "all": first + last}[stage]


def hf_outside(B, S, arch: Arch, a, t=1, dropout=0.0, mask_bytes=1, stat_bytes=4, recompute="none",
               attention="sdpa", loss="full", stage="all", layers=None, compiled=False):
    """Bytes saved outside the decoder layers, loss included (``labels=input_ids``).

    * embedding: the int64 token ids (8BS); learned positions (GPT-2) also the position ids (8S);
      rotary models the RoPE cos and sin tables (2·a·S·d, saved by every layer's ``q·cos``, one storage);
      with ``embd_pdrop``, a dropout mask (m·BSH).
    * final norm and the lm_head input: :func:`hf_norm`.
    * loss (``ForCausalLMLoss``): the logits are upcast to fp32 and ``cross_entropy`` saves the fp32
      ``log_softmax`` output over the whole padded sequence (4·BS·V; transformers 5 pads the labels
      instead of slicing the logits), the int64 targets (8·B·(S + 1), a view of the padded labels) and a
      scalar.
    * with full recompute the RoPE tables live inside the checkpoints (not saved), and GPT-2's eager path
      saves its [B, 1, S, S] causal mask once as a checkpoint input. The 16-bit logits themselves
      are not saved (transient; see ``train_memory.transient_bytes``).
    * with selective checkpoints (``recompute="selective-op"``, or "every-N" when some of the device's
      ``layers`` are checkpointed) the non-reentrant checkpoints hold the layers' keyword arguments until
      backward: the RoPE tables and the int64 position ids (8S), and with eager attention the [B, 1, S, S]
      causal mask (a·B·S², one storage for all layers). Compiled (``compiled``, torchtitan's ``apply_compile``
      over its ``apply_ac`` wrapper) selective-op layers hold no closure: their graphs save the keyword arguments
      their backward reads, the RoPE tables, and not the position ids (validation/record_compiled.py,
      ``selective-op`` records: 8S less, 4 bytes a token at batch 2).
    With t > 1 the vocabulary is split (Megatron's vocab-parallel loss): 4·BS·V/t.

    ``stage``: under pipeline parallelism the embedding terms live on the first stage ("first") and the
    final norm and loss on the last ("last"); "all" is both (one stage).

    ``loss="chunked"``: torchtune's ``CEWithChunkedOutputLoss`` (``torchtune/modules/loss/ce_chunked_output_loss.py``;
    the recipes compile it with ``compile: True``): the output projection returns the logits in
    ``num_output_chunks`` = 8 sequence chunks in the activation dtype, and each chunk is upcast and reduced
    by a compiled cross-entropy that keeps its a-byte input instead of an fp32 log-softmax, so the loss saves
    ``a·BS·V/t`` (half of the fp32 form at a = 2); the fp32 work is one chunk at a time (a transient,
    ``train_memory.transient_bytes``). Without ``compile`` each chunk's eager ``cross_entropy`` saves its fp32
    log-softmax, which is the ``full`` figure again (only the transient shrinks).
    """
    import numpy as np

    B, S, a, t = (np.asarray(x, dtype=np.float64) for x in (B, S, a, t))
    H, V = arch.hidden, arch.vocab
    every = recompute_every(recompute)
    full = every == 1
    L = np.asarray(arch.layers if layers is None else layers, dtype=np.float64)
    # selective checkpoints (non-reentrant, torch.utils.checkpoint with use_reentrant=False) on this device:
    # selective-op on every layer, or every-N (N > 1) with at least N layers here
    selective = (np.asarray(recompute) == SELECTIVE_OP) & ~np.asarray(compiled, dtype=bool)
    if np.any(every > 1):
        selective = selective | ((every > 1) & (L >= every))
    if arch.compressed is not None:  # DeepSeek-V4: the token ids; the mHC head's collapse and the final norm
        from aicalc.core.compressed_attention import hf_outside_saved

        emb = 0.0 if stage == "last" else hf_outside_saved(B, S, arch, a, t, "first")
        if stage == "first":
            return emb
        final = hf_outside_saved(B, S, arch, a, t, "last")
    else:
        if stage == "last":
            emb = 0.0  # on the first stage
        else:
            emb = _embedding_saved(B, S, arch, a, dropout, mask_bytes, attention, full, selective, stat_bytes)
            if stage == "first":
                return emb
        final = gemma_norm(B, S, H, a) if fp32_product_norm(arch) else hf_norm(B, S, H, a, arch.norm, stat_bytes)
    if arch.encoder:
        # an encoder's classifier: no final norm; the pooler's input, the first token's hidden state, is a view of
        # the last layer's output and keeps all of it (a·BSH); the pooler, classifier and loss over B × labels
        # save a few bytes per sequence, the int64 labels 8·B
        final = a * B * S * H + 8 * B + 4
        return final if stage == "last" else emb + final
    per_logit = a if loss == "chunked" else 4.0
    # labels are padded by one and shifted (a view): 8·B·(S + 1); the factors that are one number multiply first
    # (whole numbers: the same products), the division last
    BS = B * S
    loss = BS * (per_logit * V) / t + (BS + B) * 8 + 4
    if arch.extra.get("final_logit_softcapping"):
        loss = loss + BS * (a * V) / t  # the soft-capped logits' tanh output (softcap_saved)
    return final + loss if stage == "last" else emb + final + loss


def _embedding_saved(B, S, arch: Arch, a, dropout, mask_bytes, attention, full, selective, stat_bytes=4):
    """:func:`hf_outside`'s embedding terms (the first pipeline stage's)."""
    import numpy as np

    H = arch.hidden
    emb = 8 * B * S
    if arch.learned_positions:
        emb = emb + 8 * S
    if arch.embedding_norm:  # a LayerNorm over the summed embeddings (BERT, BLOOM) saves its input and statistics
        emb = emb + B * S * (a * H + 2 * stat_bytes)
    if dropout > 0:
        emb = emb + mask_bytes * B * S * H
    else:
        # RoPE cos and sin, [1, S, d] each, shared by all layers; inside the checkpoints with full recompute.
        # Selective checkpoints hold them (keyword arguments of the layer) with the int64 position ids.
        # (A term that is one False mode's zero is not added: x + 0 is x.)
        if np.ndim(full) or not full:
            emb = emb + _pick(full, 0.0, S * (2 * a * arch.head_dim))
        if np.ndim(selective) or selective:
            emb = emb + _pick(selective, 8 * S, 0.0)
    if attention == "eager":
        # the eager [B, 1, S, S] causal mask (one storage): GPT-2 passes it positionally, so any checkpoint keeps
        # it; Llama-family layers take it as a keyword argument, kept by the non-reentrant selective checkpoints
        # (the reentrant full-recompute closure keeps it too, but the harness does not see it there)
        kept = (full | selective) if arch.family == "gpt2" else selective
        emb = emb + _pick(kept, a * B * S * S, 0.0)
    return emb


def hf_activations(B, S, arch: Arch, a, attention="sdpa", recompute="none", t=1, layers=None,
                   dropout=0.0, attn_dropout=0.0, mask_bytes=1, stat_bytes=4, sdpa_math=None):
    """All saved bytes of one forward + loss in transformers, on a device holding ``layers`` layers.

    ``recompute="full"`` is ``gradient_checkpointing_enable()``: each checkpointed layer keeps only its
    input hidden state (a·BSH; DeepSeek-V4's n mHC streams, a·BS·nH; checked with ``use_reentrant=True``, where it goes through
    ``ctx.save_for_backward``); the embedding and the loss are outside the checkpoints and keep theirs.
    ``"every-N"`` checkpoints ``floor(L/N)`` of the layers that way and leaves the others whole
    (:func:`checkpointed_layers`); ``"selective-op"`` is torchtitan's op-level SAC on every layer
    (:func:`hf_selective_op_layer`).
    """
    import numpy as np

    L = arch.layers if layers is None else layers
    if recompute == "none" or recompute == SELECTIVE_OP:
        if recompute == "none":
            per_layer = hf_layer(B, S, arch, a, attention, t, dropout, attn_dropout, mask_bytes, stat_bytes,
                                 sdpa_math)
        else:
            per_layer = hf_selective_op_layer(B, S, arch, a, attention, t)
        total = L * per_layer
    elif recompute == "full" or parse_every(recompute):
        n = checkpointed_layers(recompute, L)
        layer = hf_layer(B, S, arch, a, attention, t, dropout, attn_dropout, mask_bytes, stat_bytes, sdpa_math)
        total = n * a * np.asarray(B, dtype=np.float64) * S * layer_input_width(arch) + (L - n) * layer
    else:
        from aicalc.errors import ParameterError

        raise ParameterError("recompute", recompute, HF_RECOMPUTE_HELP)
    return total + hf_outside(B, S, arch, a, t, dropout, mask_bytes, stat_bytes, recompute, attention, layers=L)
