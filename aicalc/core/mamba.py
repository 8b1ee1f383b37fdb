"""Mamba-2 (SSD) mixer terms: parameters, the per-sequence state, FLOPs per token.

Notation: H hidden, nh Mamba heads of P channels (inner width I = nh·P), N state size, G groups of heads sharing
B and C, K_c conv taps, Q chunk length, B sequences, T new tokens per sequence.

Sources:

- Shapes: transformers 5.23 ``NemotronHMamba2Mixer`` (``modeling_nemotron_h.py``): ``in_proj`` H → 2I + 2GN + nh
  (z, then x·B·C, then dt), a depthwise ``conv1d`` over the I + 2GN channels of x·B·C (K_c taps, bias with
  ``use_conv_bias``), per-head ``dt_bias``, ``A_log`` and ``D``, a gated RMSNorm of I weights, ``out_proj`` I → H;
  the two projections biased with ``use_bias``.
- State: the cache keeps per sequence and Mamba layer a conv state of (I + 2GN)·K_c values (``conv_states``, in
  the activations' dtype) and an SSM state of nh·P·N values (``recurrent_states``; fp32 in transformers' chunk
  scan, which upcasts, and ``mamba_ssm_cache_dtype`` in vLLM), whatever the context: Dao & Gu 2024 (Mamba-2,
  arXiv:2405.21060) §3-4, the recurrent form h_t = exp(Δ_t A) h_{t-1} + Δ_t B_t x_tᵀ, y_t = C_tᵀ h_t.
- FLOPs of the SSD scan: the chunked algorithm of Mamba-2 §6 (Listing 1, ``ssd_minimal_discrete``), per token
  and head: the intra-chunk "attention-like" products C·Bᵀ (2·Q·N per token, summed over the Q-token chunk) and
  their application to x (2·Q·P), the chunk state B·x (2·N·P) and the state-to-output C·h (2·N·P): in all
  2·Q·(N + P) + 4·N·P per token and head (the paper's §6 cost: the SSD algorithm's training FLOPs are O(T·N·P)
  in the state-passing terms plus O(T·Q·(N+P)) in the diagonal blocks); the inter-chunk recurrence over T/Q chunk
  states (2·N·P per chunk) is below one term per token and is left out. Decode (T = 1) is the recurrent step:
  decay and update of the state (3·N·P: multiply, then add Δ·B·x) and the output C·h (2·N·P), 5·N·P per head.
"""

from aicalc.catalog.arch import Arch, Mamba

SSM_DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}  # the SSM state dtypes a config may name


def mixer_params(m: Mamba, hidden: int) -> int:
    """One Mamba-2 mixer's parameters (module docstring, transformers' shapes)."""
    H, inner = hidden, m.inner
    width = 2 * inner + 2 * m.groups * m.state + m.heads  # z, x·B·C, dt
    in_proj = H * width + (width if m.proj_bias else 0)
    conv = m.conv_dim * m.conv_kernel + (m.conv_dim if m.conv_bias else 0)
    out_proj = inner * H + (H if m.proj_bias else 0)
    return in_proj + conv + 3 * m.heads + inner + out_proj  # dt_bias, A_log, D; the gated norm's I weights


def params(arch: Arch) -> int:
    """All Mamba layers' mixer parameters."""
    return arch.mamba_layers * mixer_params(arch.mamba, arch.hidden) if arch.mamba is not None else 0


def conv_state_elements(m: Mamba) -> int:
    """Values of one sequence's conv state in one Mamba layer: the last K_c inputs of the I + 2GN conv channels
    (transformers ``LinearAttentionLayer.conv_states``: shape (batch, conv_dim, conv_kernel))."""
    return m.conv_dim * m.conv_kernel


def ssm_state_elements(m: Mamba) -> int:
    """Values of one sequence's SSM state in one Mamba layer: nh·P·N (``recurrent_states``: (batch, nh, P, N))."""
    return m.heads * m.head_dim * m.state


def state_bytes_per_sequence(arch: Arch, conv_bytes: float = 2.0, ssm_bytes: float | None = None, tp=1) -> float:
    """Bytes of the state one sequence keeps over all Mamba layers, per device of a ``tp``-way split of the heads
    (conv channels and heads split evenly, as Megatron and vLLM shard the mixer): conv state at ``conv_bytes`` per
    value (the activations' dtype), SSM state at ``ssm_bytes`` (default: the model's ``ssm_dtype``)."""
    m = arch.mamba
    if m is None or not arch.mamba_layers:
        return 0.0
    if ssm_bytes is None:
        ssm_bytes = SSM_DTYPE_BYTES[m.ssm_dtype]
    return arch.mamba_layers * (conv_state_elements(m) * conv_bytes + ssm_state_elements(m) * ssm_bytes) / tp


def scan_flops_per_token(m: Mamba, new_tokens) -> object:
    """FLOPs of the SSD scan per token and layer, all heads (module docstring): chunked (T > 1) 2·Q·(N + P) +
    4·N·P per head with Q = min(chunk, T), recurrent (T = 1) 5·N·P per head. Broadcasts over T."""
    import numpy as np

    T = np.asarray(new_tokens, dtype=np.float64)
    N, P = float(m.state), float(m.head_dim)
    Q = np.minimum(float(m.chunk), T)
    chunked = 2.0 * Q * (N + P) + 4.0 * N * P
    return m.heads * np.where(T > 1.0, chunked, 5.0 * N * P)


def megatron_layer_flops(arch: Arch) -> float:
    """Forward FLOPs per token of one Mamba layer as Megatron-Bridge counts them for its "Model TFLOP/s"
    (``mamba_layer_flops`` in ``src/megatron/bridge/training/utils/flop_utils.py``): with d_in = 2·H (the expand-2
    inner width the formula assumes whatever the heads say), in_proj 2·H·(2·d_in + 2·G·N + nh), the scan
    7·d_in·N, out_proj 2·d_in·H."""
    m, H = arch.mamba, float(arch.hidden)
    d_in = 2.0 * H
    return 2.0 * H * (2.0 * d_in + 2.0 * m.groups * m.state + m.heads) + 7.0 * d_in * m.state + 2.0 * d_in * H


SSD_KERNELS = 5.0  # mamba_ssm's chunked scan (``_mamba_chunk_scan_combined_fwd``): chunk cumsum, chunk state, state
#                    passing, C·Bᵀ bmm, chunk scan; a decode step is one ``selective_state_update``


def mamba_ops(s, fm, M, B, T, P, tp, zero, gemm, stream, core: bool = True) -> list:
    """The Mamba-2 layers' operations of one forward pass, per device of ``tp`` ranks splitting heads and groups
    (:func:`aicalc.core.forward.forward_ops` passes its ``gemm`` and ``stream`` builders, which add the per-token
    ops to its list; the SSD scan is returned). Per Mamba layer:

    - ``mamba_in_proj``: the GEMM H → 2I + 2GN + nh (z, x·B·C, dt);
    - ``mamba_conv``: the depthwise causal conv (2·K_c FLOPs per channel and token) and SiLU over the I + 2GN
      channels of x·B·C, read and written in 16 bits;
    - ``ssd_scan`` (per sequence, ``attention`` kind: chunked matmuls on the tensor cores as a fused kernel): the
      scan's FLOPs (:func:`scan_flops_per_token`), x, B, C and dt read and y written, and the state: the SSM and
      conv state written after every pass and read first where the sequence has one (P > 0: every decode step
      reads and writes it, the recurrent form of Mamba-2 §3);
    - ``mamba_gate_norm``: y·SiLU(z) and the grouped RMSNorm (read y and z, write), then ``mamba_out_proj``, the
      GEMM I → H.
    """
    import numpy as np

    from aicalc.core.forward import ACT_BYTES, Op

    m, H, ab, wb = s.arch.mamba, float(s.H), ACT_BYTES, fm.weight_bytes
    Lm = float(s.mamba_layers)
    inner, conv, n_in = float(m.inner), float(m.conv_dim), float(2 * m.inner + 2 * m.groups * m.state + m.heads)
    bias = 1.0 if m.proj_bias else 0.0
    gemm("mamba_in_proj", M, n_in / tp, H, Lm, Lm * (H + bias) * n_in / tp * wb)
    stream("mamba_conv", M, lambda x: x / tp * 2.0 * conv * ab * Lm, Lm, flop=lambda x: x / tp * 2.0 * m.conv_kernel
           * conv * Lm, weights=Lm * conv * (m.conv_kernel + (1.0 if m.conv_bias else 0.0)) / tp * wb, layers=Lm)
    out = []
    if core:
        state = (ssm_state_elements(m) * SSM_DTYPE_BYTES[m.ssm_dtype] + conv_state_elements(m) * ab) / tp
        io = T * (conv + m.heads + inner) / tp * ab  # x·B·C and dt in, y out, per sequence
        touches = np.where(P > 0.0, 2.0, 1.0)  # write the state; read it first where there is one
        out.append(Op("ssd_scan", "attention", B * T * scan_flops_per_token(m, T) / tp * Lm + zero,
                      B * (io + touches * state) * Lm + zero, zero, Lm * np.where(T > 1.0, SSD_KERNELS, 1.0) + zero,
                      layers=Lm, per="sequence", compute=fm.attention_compute))
    stream("mamba_gate_norm", M, lambda x: x / tp * 3.0 * inner * ab * Lm, Lm, flop=lambda x: x / tp * 8.0 * inner * Lm,
           weights=Lm * inner / tp * fm.norm_bytes, layers=Lm)
    gemm("mamba_out_proj", M, H, inner / tp, Lm, Lm * (inner + bias) * H / tp * wb)
    return out


def megatron_hybrid_flops(s, keys) -> float:
    """Model FLOPs per trained token of a hybrid model as Megatron-Bridge reports them ("Model TFLOP/sec/GPU" of its
    performance summary; ``hybrid_flops`` in ``src/megatron/bridge/training/utils/flop_utils.py``), three times
    the forward: per attention layer 4·H·d·(A + K) for the projections, the core 2·keys·A·(d_qk + d_v) over
    ``keys`` (Σ over attention layers of the keys a token attends to: half the sequence, causal, in
    Megatron-Bridge's count); per MLP 4·F·H (×1.5 gated); per MoE 4·H·F_e·k (a latent MoE 4·latent·F_e·k +
    4·H·latent) + 4·H·F_shared, no router; per Mamba layer :func:`megatron_layer_flops`; the LM head 2·H·V."""
    a, H = s.arch, float(s.H)
    g = 1.5 if a.gated_ffn else 1.0
    fwd = s.attn_layers * 4.0 * H * a.head_dim * (a.heads + a.kv_heads) + 2.0 * keys * s.A * (s.qk_dim + s.v_dim)
    fwd = fwd + s.dense_layers * 4.0 * s.ffn * H * g
    e = a.moe
    if e is not None and s.moe_layers:
        routed = 4.0 * (e.latent or H) * e.expert_ffn * e.experts_per_token * g + (4.0 * H * e.latent if e.latent else 0.0)
        fwd = fwd + s.moe_layers * (routed + 4.0 * H * e.shared_ffn * g)
    fwd = fwd + s.mamba_layers * megatron_layer_flops(a) + 2.0 * H * s.V
    return 3.0 * fwd


def _block_bytes(arch: Arch, kind: str, s, t, sp, core: bool):
    """Bytes per token one block saves for backward in Korthikanti et al. 2022's accounting (Table 2: 16-bit tensors,
    1-byte dropout masks, norm statistics ignored), as (replicated, split over the t TP ranks) parts; the replicated
    part is split too under sequence parallelism. ``kind``: "attention", "mlp", "moe", "mamba"."""
    import numpy as np

    H = float(arch.hidden)
    repl = 5.0 * H  # the block's norm input 2h, its first linear's input 2h, the residual dropout mask h
    if kind == "attention":  # Q, K, V, the projection input (Table 2's 4sbh + 2sbh + 2sbh for K = A)
        split = 4.0 * arch.q_dim + 4.0 * arch.kv_dim + (5.0 * arch.heads * s if core else 0.0)
    elif kind == "mlp":  # the activation's input and the down projection's input, 2F each (gated: gate, up, product)
        split = (6.0 if arch.gated_ffn else 4.0) * arch.ffn
    elif kind == "moe":  # k routed copies of the token (or of its latent) and their FFN, the shared FFN
        e = arch.moe
        width = float(e.latent or H)
        g = 6.0 if arch.gated_ffn else 4.0
        split = 2.0 * width * e.experts_per_token + g * e.expert_ffn * e.experts_per_token + g * e.shared_ffn
        if e.latent:  # the latent projections' inputs: H (the router's too) and the experts' latent output
            split += 2.0 * width
    else:  # Mamba-2: in_proj's output zxbcdt and the scan output (mamba_ssm MambaSplitConv1dScanCombinedFn's
        #     save_for_backward(zxbcdt, ..., out_x, ..., rstd)), the out_proj input (Megatron's MambaMixer runs out_proj
        #     as its own linear), the norm's fp32 rstd per group
        m = arch.mamba
        split = 2.0 * (2 * m.inner + 2 * m.groups * m.state + m.heads) + 2.0 * m.inner + 2.0 * m.inner + 4.0 * m.groups
    sp = np.asarray(sp, dtype=bool)
    return np.where(sp, repl / t, repl) + split / t


def megatron_layer_ratio(arch: Arch, s, t=1, sp=False, recompute="none", flash=True, baseline="korthikanti"):
    """Activation bytes of a hybrid's average block over those of the plain layer Korthikanti's formula prices
    (:func:`aicalc.core.activations.korthikanti_layer`, ``sbh(10 + 24/t)`` or ``34/t`` with SP, F = 4h), for the
    Megatron path of the training-memory estimate: each block saves what its one mixer saves (:func:`_block_bytes`:
    an attention block Table 2's attention part, an MLP or MoE block its FFN part, a Mamba block the mixer's saved
    tensors), plus its norm input, first linear input and dropout mask. Under full recompute a block keeps only its
    input, as a plain layer does: ratio 1. ``baseline`` "layer": over a plain layer of this model's own attention and
    FFN (MoE where it has one) instead, for an estimate whose per-layer formula reads the model's widths (the hf
    path's :func:`aicalc.core.activations.hf_layer`)."""
    import numpy as np

    s, t = np.asarray(s, dtype=np.float64), np.asarray(t, dtype=np.float64)
    H = float(arch.hidden)
    core = not flash and recompute != "selective"
    total = 0.0
    for mixer, ffn, moe in zip(arch.layer_types, arch.ffn_layers, arch.moe_layers, strict=False):
        if mixer in ("full_attention", "sliding_attention"):
            total = total + _block_bytes(arch, "attention", s, t, sp, core)
        elif mixer == "mamba":
            total = total + _block_bytes(arch, "mamba", s, t, sp, core)
        if ffn:
            total = total + _block_bytes(arch, "moe" if moe else "mlp", s, t, sp, core)
    if baseline == "layer":
        plain = _block_bytes(arch, "attention", s, t, sp, core) + _block_bytes(
            arch, "moe" if arch.moe is not None else "mlp", s, t, sp, core)
    else:
        plain = np.where(np.asarray(sp, dtype=bool), 34.0 * H / t, 10.0 * H + 24.0 * H / t) + (
            5.0 * arch.heads * s / t if core else 0.0)
    return np.where(np.asarray(recompute) == "full", 1.0, total / (arch.layers * plain))
