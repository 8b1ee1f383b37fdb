"""Training time: FLOPs per token, step time of a TP × PP × DP layout, MFU, total time and chip-hours.

Notation: B global batch (sequences per optimizer step), b micro-batch, s sequence length, L layers,
H hidden, A heads, d head_dim, V vocab, N params, D tokens; tp/pp/dp the parallel degrees, v the
interleaving factor of the pipeline schedule. Inputs may be numpy arrays (broadcast together).

FLOP counts (validation-cases TT-01):

- Model FLOPs per token (no recompute; Korthikanti et al. 2022, eq. for MFU):
  ``6·N_mm + 12·L·s·A·d + 6·V·H`` — 6 FLOPs per matmul weight (forward 2, backward 4; Kaplan et al. 2020),
  the attention score/value products ``12·s·A·d`` per layer (Megatron counts the full s×s product), and the
  LM head. For a GPT with 4H FFN and A·d = H this is exactly ``72·L·h²·(1 + s/(6h) + V/(12hL))``.
- Full recompute adds one more forward of every layer: ``2·N_mm + 4·L·s·A·d`` (Megatron-LM 2021, the
  ``96·B·s·L·h²·(1 + s/(6h) + V/(16Lh))`` formula); selective recompute adds only the attention core
  ``4·L·s·A·d`` (Korthikanti et al. §5, HFU vs MFU of Table 5); torchtitan's op-level selective AC
  (``selective-op``) adds the forward of every second ``aten.mm`` of a block and keeps the attention
  (:func:`op_sac_recompute`).
- ``time = D · FLOPs per token / (chips · achieved FLOP/s)`` (TT-01), which reproduces TT-17…TT-31.

Step-time model (``mfu = auto``): the forward pass of one micro-batch is the operation list of
:mod:`aicalc.core.forward` (b sequences × s tokens, logits for every token), priced by
:mod:`aicalc.core.pricing` exactly as inference prices it. Training multiplies each op by its passes: every
GEMM forward + backward (2×) + recompute forward (full recompute), the attention core likewise (+1 with
selective recompute too, Korthikanti et al. §5), the LM head forward + backward, the TP all-reduces 2 per
forward and backward pass (Shoeybi et al. 2019). The forward's elementwise kernels are replaced by the
training traffic of norms, dropout, residuals and activation functions over all passes
(``train_elementwise_bytes·H`` bytes per token and layer). Then the pipeline bubble ``(pp − 1)/v`` extra
micro-batch slots (Narayanan et al. 2021 §2.2), the data-parallel gradient all-reduce (ring factor; ZeRO-3 /
FSDP gathers the parameters and reduce-scatters the gradients block by block, :func:`fsdp_exposed`; Rajbhandari
et al. 2020 §7) and the optimizer update (memory-bound).

Training-only corrections (fields at the end of :class:`aicalc.core.efficiency.Efficiency`, fitted on
validation/cases/calibration-training.yaml; docs/train-time.md): GEMMs at ``train_gemm_sustained`` of the chip
generation's measured plateau (:data:`GEMM_PLATEAU`); fused attention at ``train_attention_efficiency`` of the
16-bit peak, its backward 2.5 forwards (:data:`FLASH_BACKWARD`); in 8-bit runs only the linear layers in 8-bit
unless the attention core runs in FP8 too (``TrainChip.attention_8bit_flop_per_s``: Transformer Engine's
``fp8_dot_product_attention``, priced as inference prices FP8 attention); int8 runs as AQT quantizes them
(``TrainChip.wgrad_16bit``: the weight-gradient GEMMs in 16-bit);
collectives at ``train_link``; the framework's overlap of DP, TP and EP collectives (:func:`exposed`); context
parallelism splitting the whole sequence's causal attention over the CP ranks; MoE token permutation traffic.
"""

from aicalc.core.efficiency import Efficiency
from aicalc.core.forward import Shape
from aicalc.tuples import Named

RECOMPUTE = ("none", "selective", "full", "selective-op")
ATTN_DROPOUT_BYTES_PER_SCORE = 5.0  # training only: dropout mask (1 B) and output (2 B) written, output read (2 B)
#                                     per materialized score element and pass (Korthikanti et al. 2022 Table 2)
FLASH_BACKWARD = 2.5  # FlashAttention backward: recomputes S = QKᵀ, then dV, dP, dQ, dK (Dao 2023, Algorithm 2)
SSD_BACKWARD = 2.0  # Mamba-2's chunked scan: a backward of twice the forward's matmuls (Kaplan et al. 2020)
MAMBA_STREAMS = ("mamba_conv", "mamba_gate_norm")  # Mamba layers' elementwise ops (aicalc.core.mamba.mamba_ops)
OPTIMIZER_BYTES_PER_PARAM = 34.0  # Adam, mixed precision: read master/m/v/grad (16 B), write master/m/v + bf16 copy


def expert_width(s: Shape) -> float:
    """The width the routed experts read and write, and their tokens are permuted and dispatched on: H, or a latent
    MoE's latent (Nemotron 3 Super's ``moe_latent_size``: ``fc1_latent_proj`` H → latent before the dispatch,
    ``fc2_latent_proj`` after the combine; transformers ``NemotronHMoE.forward``)."""
    e = s.arch.moe
    return float(e.latent) if e is not None and e.latent else float(s.H)


def moe_params_per_token(s: Shape) -> float:
    """Matmul weights one token touches in a MoE layer: its k routed experts (on :func:`expert_width`), the shared
    experts and the router (on H), and a latent MoE's two projections H → latent → H."""
    W = expert_width(s)
    latent = 2.0 * s.H * W if W != s.H else 0.0
    return s.experts_per_token * W * (s.expert_in + s.expert_ffn) + s.H * (s.shared_in + s.shared_ffn + s.experts) \
        + latent


def matmul_params_per_layer(s: Shape) -> float:
    """Average matmul weights per layer touched per token (MoE: :func:`moe_params_per_token`; a Gated DeltaNet
    hybrid's linear-attention layers their input and output projections in place of attention's; a one-mixer
    hybrid's attention on its attention layers only and its Mamba mixers' in and out projections)."""
    dense = s.H * (s.ffn_in + s.ffn)
    moe = moe_params_per_token(s)
    m = s.arch.mamba
    mixer = s.H * (3 * m.inner + 2 * m.groups * m.state + m.heads) if m is not None else 0.0  # in_proj + out_proj
    return ((s.attn_in_params + s.attn_out_params) * s.attn_layers + s.linear_layers * s.H * (s.linear_in + s.linear_out)
            + s.dense_layers * dense + s.moe_layers * moe + s.mamba_layers * mixer) / s.L


def linear_flops_per_token(s: Shape) -> float:
    """Forward FLOPs per token of a hybrid's linear-attention layers beyond their projections: the depthwise conv
    and the chunked delta rule (:mod:`aicalc.core.linear_attention`; training runs the chunked kernel)."""
    return s.linear_layers * (s.linear_chunk_flop + s.linear_conv_flop)


def _attn_keys(s: Shape, seq):
    """Σ over layers of the keys one token's attention spans (full s; sliding layers min(s, W))."""
    from aicalc.core.geometry import tokens_held

    return tokens_held(s.full_layers, s.sliding_layers, s.window, seq)


ATTENTION_FLOPS = ("causal", "full")  # how a model-FLOP count takes attention (train_time's ``attention_flops``)


def flops_per_token(s: Shape, seq, recompute: str = "none", attention_flops: str = "full"):
    """(model FLOPs, hardware FLOPs) per trained token (TT-01). ``attention_flops`` "full": every token's
    attention over all ``seq`` keys, the convention of Megatron-LM's paper formula (Narayanan et al. 2021) and
    PaLM's MFU; "causal": over the keys before it, half as many on average (what FlashAttention's causal kernels
    compute, and the count Megatron-Bridge's and MaxText's current FLOP calculators report: 23.0 GFLOP per token
    for Qwen3-30B-A3B at seq 4096, against 27.9 full)."""
    n_mm = matmul_params_per_layer(s) * s.L
    keys = _attn_keys(s, seq)
    if attention_flops == "causal" and not s.arch.encoder:  # an encoder attends both ways: all keys, computed
        keys = keys / 2.0
    attn = 2.0 * keys * s.A * (s.qk_dim + s.v_dim)  # forward: score + value, per token
    if s.arch.indexer is not None:  # DSA, sparse stage: MLA over the top-k, plus the indexer (aicalc.core.indexer)
        from aicalc.core import indexer as dsa

        params, idx_keys, sparse = dsa.training_terms(s.arch, seq, attention_flops == "causal")
        n_mm = n_mm + params
        La = s.attn_layers  # the softmax-attention layers (all of a DSA model's)
        attn = 2.0 * La * sparse * s.A * (s.qk_dim + s.v_dim) + float(dsa.indexer_layers(s.arch)) * idx_keys \
            * dsa.score_flop_per_key(s.arch)
    if s.arch.compressed is not None:  # DeepSeek-V4: window + compressed entries, the CSA indexers, the mHC
        from aicalc.core import compressed_attention as v4

        params, keys_v4, idx_keys = v4.training_terms(s.arch, seq, attention_flops == "causal")
        n_mm = n_mm + params
        attn = 2.0 * keys_v4 * s.A * (s.qk_dim + s.v_dim) + idx_keys * v4.score_flop_per_key(s.arch) + \
            v4.hc_flop_per_token(s.arch)
    if s.linear_layers:  # the delta rule and conv: forward and two backward passes, like a matmul's
        attn = attn + linear_flops_per_token(s)
    model = 6.0 * n_mm + 3.0 * attn + 6.0 * s.V * s.H
    if s.mamba_layers:  # a Mamba hybrid: model FLOPs as Megatron-Bridge counts them; the hardware does the scan too
        from aicalc.core.mamba import megatron_hybrid_flops, scan_flops_per_token

        scan = s.mamba_layers * scan_flops_per_token(s.arch.mamba, seq)
        hw = 6.0 * n_mm + 3.0 * attn + 3.0 * scan + 6.0 * s.V * s.H
        model = megatron_hybrid_flops(s, keys)
        if recompute == "full":
            return model, hw + 2.0 * n_mm + attn + scan
        return model, hw + (attn if recompute == "selective" else 0.0)
    if recompute == "full":
        return model, model + 2.0 * n_mm + attn
    if recompute == "selective":
        return model, model + attn
    if recompute == "selective-op":
        return model, model + 2.0 * op_sac_recomputed_params(s)
    return model, model


def _block_linears(s: Shape) -> list[tuple[str, float, bool]]:
    """One dense decoder block's linear layers in forward order, as ``(forward op, weights, dispatched as
    aten.mm)``. torchtitan's Llama (``torchtitan/models/llama/model.py``): ``attention.wq``, ``wk``, ``wv``,
    ``wo``, then ``feed_forward`` ``w2(F.silu(w1(x)) * w3(x))`` (w1 the gate before w3 the up projection); a
    bias-free ``nn.Linear`` is ``aten.mm``, a biased one ``aten.addmm`` (the order of
    :func:`aicalc.core.activations._mm_widths`)."""
    a = s.arch
    q, kv = a.heads * a.head_dim * s.H, a.kv_heads * a.head_dim * s.H
    out = [("qkv_proj", q, not a.qkv_bias), ("qkv_proj", kv, not a.qkv_bias), ("qkv_proj", kv, not a.qkv_bias),
           ("o_proj", s.attn_out_params, not a.o_bias)]
    up = [("mlp_up", s.H * s.ffn, not a.mlp_bias)] * (2 if a.gated_ffn else 1)
    return out + up + [("mlp_down", s.ffn * s.H, not a.mlp_bias)]


def op_sac_recompute(s: Shape) -> dict[str, float]:
    """Share of each forward GEMM op (:func:`aicalc.core.forward.forward_ops` names) that torchtitan's op-level
    selective activation checkpointing recomputes in the backward (``activation_checkpoint.mode = "selective"``,
    ``selective_ac_option = "op"``, the default of its Llama 3 configs, e.g. ``train_configs/llama3_8b.toml`` @
    9dec370). ``_apply_ac_to_transformer_block`` (``torchtitan/parallelisms/parallelize_llama.py`` @ 9dec370)
    saves the outputs of ``aten.mm`` and of the SDPA flash / efficient attention kernels, "except every second
    mm" (a counter per block call), and recomputes every other op: a Llama block recomputes wk, wo and w3
    (the up projection), none of the attention core, and every elementwise op. An op not in the save list
    (a biased linear's ``addmm``; MoE expert and router GEMMs) is recomputed whole."""
    done: dict[str, list[float]] = {}
    count = 0
    for name, w, mm in _block_linears(s):
        count += 1 if mm else 0
        again = (not mm) or count % 2 == 0
        tot = done.setdefault(name, [0.0, 0.0])
        tot[0] += w * again
        tot[1] += w
    return {k: (v[0] / v[1] if v[1] else 0.0) for k, v in done.items()}


def op_sac_recomputed_params(s: Shape) -> float:
    """Matmul weights per token, summed over layers, whose forward op-level SAC runs again
    (:func:`op_sac_recompute`): the recomputed share of the attention projections on every layer, of the dense
    FFN on dense layers, and all of a MoE layer's FFN (expert and router GEMMs are not ``aten.mm``)."""
    shares = op_sac_recompute(s)
    attn_in = shares["qkv_proj"] * s.attn_in_params + shares["o_proj"] * s.attn_out_params
    ffn_dense = s.H * (shares["mlp_up"] * s.ffn_in + shares["mlp_down"] * s.ffn)
    return s.attn_layers * attn_in + s.dense_layers * ffn_dense + s.moe_layers * moe_params_per_token(s)


def time_from_rate(tokens, flops_per_token_counted, chips, achieved_flop_per_s_per_chip):
    """TT-01: time = D · FLOPs/token ÷ (chips · achieved FLOP/s), the FLOPs counted as the rate was."""
    return tokens * flops_per_token_counted / (chips * achieved_flop_per_s_per_chip)


class TrainChip(Named):
    """What training time reads of a chip: peaks, links and the size of its scale-up domain."""

    peak_flop_per_s: float
    bandwidth_bytes_per_s: float
    link_bytes_per_s: float  # per direction, scale-up link (NVLink, ICI, Infinity Fabric)
    dp_bytes_per_s: float  # per direction per chip, scale-out network across domains (NICs, DCN)
    low_precision: bool = False
    fp4: bool = False  # NVFP4 linear layers (Transformer Engine's NVFP4 recipe): efficiency.fp4_flop_factor
    domain: int = 8  # chips one scale-up link joins
    vector_flop_per_s: float = 0.0
    peak_16bit_flop_per_s: float = 0.0  # 8-bit runs: the 16-bit peak attention and the LM head run at (0: peak)
    exp_per_s: float = 0.0  # exponentials per second of the special-function units (Chip.exp_per_s; 0: not known)
    # FP8 attention (Transformer Engine's fp8_dot_product_attention, forward and backward): the 8-bit peak the
    # attention core's products run at, at low_precision_flop_factor of it as other 8-bit math (0: 16-bit attention)
    attention_8bit_flop_per_s: float = 0.0
    # int8 training as AQT runs it (MaxText ``quantization=int8``, ``MaxText/layers/quantizations.py``
    # ``_get_int8_quant_config``: ``aqt_config.config_v3(fwd_bits=8, dlhs_bits=8, drhs_bits=None)``): the forward
    # (and its recompute) and the activation-gradient GEMMs (dlhs) in int8, the weight-gradient GEMM (drhs) in 16-bit
    wgrad_16bit: bool = False


ELEMENTWISE_KERNELS_PER_LAYER = 6.0  # norms 2, rope + residuals 3, activation 1 (the forward's stream kernels)

# Large-GEMM plateau per chip generation (the preset's ``generation``): measured fraction of dense peak ÷ the
# shape factor of aicalc.core.efficiency.gemm_efficiency, median over transformer shapes with every dimension
# ≥ 4096; 16-bit and 8-bit math, each against its own peak. A training step's GEMMs reach
# ``train_gemm_sustained`` of it (backward dgrad / wgrad layouts, clocks under sustained load, tails between
# layers). GPU generations without an entry (Blackwell, with no measurement here) take the class profile's
# flop_max (0.825) as their plateau, of which the step sustains train_gemm_sustained too, and its
# low_precision_flop_factor (0.72); TPU v4 / v5e / v5p keep the class's flop_max as it is, which their MaxText
# runs fit (aicalc.api.train_time.gemm_plateau).
GEMM_PLATEAU = {
    "Ampere": {"16bit": 0.92, "source": "A100 fp16 GEMMs, LLMCompass measurements OP-01/OP-02 "
                                        "(shared/reference/validation-cases.md): 0.86-0.94 of 312 TFLOP/s, median 0.91"},
    "Hopper": {"16bit": 0.736, "8bit": 0.665,
               "source": "H100 SXM torch.matmul bf16 / torch._scaled_mm fp8 e4m3, M 4096-16384 × (K, N) of Llama "
                         "shapes (shared/reference/measured/h100-microbench.json): bf16 0.67-0.79 of 989 TFLOP/s, "
                         "median 0.71; fp8 0.53-0.69 of 1979, median 0.65"},
    "TPU v6e (Trillium)": {"16bit": 0.69, "source": "no GEMM measurement: fitted on TP-11 and TP-12 (MaxText Llama "
                                                    "3.1 8B / 70B on v6e-256, validation/cases/training.yaml)"},
    "TPU7x (Ironwood)": {"16bit": 0.80, "8bit": 0.72,
                         "source": "no GEMM measurement: fitted on TP-14 and TP-15 (MaxText Llama 3.1 70B bf16 and "
                                   "fp8_full on 64 TPU7x chips, tpu-recipes training/ironwood/README.md; "
                                   "validation/calibrate.py); held out: the other rows of that table (TP-16..TP-21, "
                                   "MO-41..MO-48)"},
}


def exp_bound(s: Shape, chip: TrainChip, low_precision_flop_factor: float = 1.0):
    """How much longer than its matmuls a fused attention forward and backward take where the softmax's
    exponentials, one per score element in the forward and one again in the backward (which recomputes P, Dao
    2023, Algorithm 2), outlast them on the special-function units: ``(forward, backward)`` factors on the tensor
    time, ``max(1, r)`` and ``max(FLASH_BACKWARD, r) / FLASH_BACKWARD`` with r the exponential time over the
    forward's matmul time per score element, ``peak_16 / (exp_per_s · 2·(d_qk + d_v))``, both units at the same
    share of their peak (the kernel overlaps the two: FlashAttention-3/-4's ping-pong schedules). A forward of
    head_dim 128 on a B200 sits at r = 0.94 (FlashAttention-4's "feeds and speeds": a 128 x 128 tile's MMA and
    its exponentials take the same 1,024 cycles), gpt-oss's head_dim 64 at 1.9: the forward runs at the
    exponential's pace; on an H100 (r = 0.46 and 0.92) and on Blackwell Ultra, with twice the SFU rate, neither
    is bound. FP8 attention (``chip.attention_8bit_flop_per_s``) runs its products at the 8-bit peak times
    ``low_precision_flop_factor`` (as :func:`aicalc.core.pricing.op_times` prices 8-bit math) against the same
    exponentials: r = 0.94 · 2 · 0.72 = 1.35 at head_dim 128 on a B200, 0.68 on a GB300."""
    from aicalc.core.exponentials import exp_ratio, flop_per_exp

    peak = chip.attention_8bit_flop_per_s * low_precision_flop_factor if chip.attention_8bit_flop_per_s > 0 \
        else chip.peak_16bit_flop_per_s or chip.peak_flop_per_s
    r = exp_ratio(peak, chip.exp_per_s, flop_per_exp(s.qk_dim, s.v_dim))
    return max(1.0, r), max(FLASH_BACKWARD, r) / FLASH_BACKWARD


def training_efficiency(eff: Efficiency) -> Efficiency:
    """The efficiency model as a training step sees it: ``train_gemm_sustained`` of the generation's GEMM plateau
    (16-bit; 8-bit relative to it) where one is known, and ``train_link`` for the collectives where it is set."""
    if eff.train_gemm_plateau > 0:
        lp = eff.train_gemm_plateau_8bit / eff.train_gemm_plateau if eff.train_gemm_plateau_8bit > 0 \
            else eff.low_precision_flop_factor
        eff = eff._replace(flop_max=eff.train_gemm_plateau * eff.train_gemm_sustained, low_precision_flop_factor=lp)
    if eff.train_link > 0:
        eff = eff._replace(link=eff.train_link)
    return eff


def exposed(t_comm, t_compute, overlap):
    """Time a collective adds beside ``t_compute`` of independent work: what the compute cannot cover, plus the
    ``1 − overlap`` share of what it covers (the collective's kernels take SMs and memory bandwidth from the
    compute they run beside; overlap 1: ``max(comm − compute, 0)``, 0: all of it)."""
    import numpy as np

    return t_comm - overlap * np.minimum(t_comm, t_compute)


def fsdp_exposed(gather, scatter, t_forward, t_backward, layers, overlap):
    """Seconds FSDP's block collectives add to one micro-batch of a rank holding ``layers`` decoder layers,
    sharded block by block as FSDP2 ``fully_shard`` wraps them (torchtitan ``apply_fsdp``: each TransformerBlock,
    then the root module with the embedding, final norm and LM head, whose collectives the caller adds).
    ``gather`` / ``scatter``: one block's parameter all-gather and gradient reduce-scatter (each half a ring
    all-reduce's volume in its own dtype, plus NCCL's latency); ``t_forward`` / ``t_backward``: one layer's
    forward and backward (with its recompute) compute.

    A block's all-gather is issued on a separate stream while the block before it computes (FSDP2's implicit
    forward prefetch; in the backward the next block's all-gather and the previous block's reduce-scatter run
    beside the current block's backward, Zhao et al. 2023 §3.4, FSDP2 ``fully_shard`` docs), so ``layers − 1``
    blocks hide their all-gather behind one layer's forward and their all-gather plus reduce-scatter behind one
    layer's backward (:func:`exposed`: what the compute cannot cover, plus the ``1 − overlap`` share of what it
    covers). Nothing runs beside the first block's all-gather. The last block is not resharded after forward
    (torchtitan's ``reshard_after_forward = layer_id < n_layers − 1``), so the backward gathers ``layers − 1``
    blocks. The last reduce-scatter is the caller's (nothing waits for it but the optimizer)."""
    import numpy as np

    per_layer = exposed(gather, t_forward, overlap) + exposed(gather + scatter, t_backward, overlap)
    return gather + np.maximum(layers - 1.0, 0.0) * per_layer


def span_bandwidth(chip: TrainChip, span):
    """Per-direction bandwidth of a collective whose group spans ``span`` consecutive ranks: the scale-up link
    inside one domain, the scale-out network per chip beyond it (its slowest link sets a ring's pace)."""
    import numpy as np

    return np.where(np.asarray(span, dtype=np.float64) <= chip.domain, chip.link_bytes_per_s, chip.dp_bytes_per_s)


def step_time(s: Shape, chip: TrainChip, eff: Efficiency, *, seq, global_batch, micro_batch, tp, pp, dp,
              recompute="full", flash=True, sequence_parallel=True, interleave=1, zero=0, grad_bytes=2.0, ep=1,
              cp=1, etp=None, stage_layers=None, gather_bytes=2.0):
    """Seconds per optimizer step and its parts (dict of arrays).

    ``stage_layers``: (first, fullest middle, last) pipeline ranks' decoder layers (:mod:`aicalc.core.stages`;
    None: L/pp each). The pipeline runs at its slowest stage's pace: the bottleneck rank's time per micro-batch
    (its layers, plus the LM head on the last) sets both the m steady-state slots and the ``(pp − 1)/v`` bubble
    slots. ``etp``: the experts' tensor-parallel degree (MoE parallel folding; None: ``tp``), so an EP group spans
    ``etp·ep`` consecutive ranks and the experts' data-parallel group is ``tp·cp·dp/(ep·etp)``.

    Collectives run on the links their group spans, hierarchically across scale-up domains
    (:mod:`aicalc.core.collectives`), at ``train_link`` of the link bandwidth.
    Exposed communication (:func:`exposed`) is what the compute beside it cannot hide plus the ``1 − overlap``
    share of what it can (the collective competes for SMs and memory bandwidth): ``dp_overlap`` against the
    backward pass for the gradient all-reduce (DDP buckets, Megatron's ``--overlap-grad-reduce``), against every
    micro-batch for the FSDP / ZeRO-3 parameter all-gathers (prefetch) and gradient reduce-scatters;
    ``tp_overlap`` against the layer GEMMs for the TP collectives; ``ep_overlap`` against the layer compute
    (another micro-batch's, in 1F1B / DualPipe schedules) for the MoE all-to-alls, which the hierarchical
    dispatchers (DeepEP, HybridEP) send across domains once per destination domain
    (:func:`aicalc.core.collectives.moe_alltoall_copies`). FSDP (``zero`` 3) runs block by block
    (:func:`fsdp_exposed`); ``gather_bytes`` / ``grad_bytes``: bytes per element of its parameter all-gather
    (bf16 2, fp8 1) and of its gradient reduction (bf16 2, fp32 4)."""
    import numpy as np

    from aicalc.core.collectives import allreduce_seconds, moe_alltoall_seconds
    from aicalc.core.forward import ACT_BYTES, formats, forward_ops
    from aicalc.core.pricing import Roofs, op_times

    f = np.float64
    s_, Bg, b = np.asarray(seq, f), np.asarray(global_batch, f), np.asarray(micro_batch, f)
    tp, pp, dp, v = np.asarray(tp, f), np.asarray(pp, f), np.asarray(dp, f), np.asarray(interleave, f)
    ep, cp = np.asarray(ep, f), np.asarray(cp, f)
    etp = tp if etp is None else np.asarray(etp, f)
    if stage_layers is None:
        stage_layers = (s.L / pp,) * 3
    n_first, n_mid, n_last = (np.asarray(x, f) for x in stage_layers)
    bw = chip.bandwidth_bytes_per_s
    s_loc = s_ / cp  # context parallelism: each rank holds a slice of every sequence
    M = b * s_loc  # tokens per micro-batch on one rank
    passes = 3.0 + (1.0 if recompute == "full" else 0.0)  # forward, backward (2×), recompute forward
    # a fused (flash) attention backward recomputes the scores: 5 matmuls against the forward's 2
    attn_passes = 1.0 + (FLASH_BACKWARD if flash else 2.0) + (1.0 if recompute in ("full", "selective") else 0.0)
    eff = training_efficiency(eff)
    attn8 = chip.attention_8bit_flop_per_s > 0  # FP8 attention: its products in 8-bit math
    # a fused attention whose softmax exponentials outlast its matmuls (exp_bound): forward and recompute at the
    # exponential's pace, the backward likewise where it is bound
    if flash:
        f_fwd, f_bwd = exp_bound(s, chip, eff.low_precision_flop_factor if attn8 else 1.0)
        attn_fwd = f_fwd
        attn_passes = f_fwd * (attn_passes - FLASH_BACKWARD) + f_bwd * FLASH_BACKWARD
    else:
        attn_fwd = 1.0
    # the SSD scan of Mamba layers: forward, a backward of twice its matmuls (Kaplan et al. 2020's 2:1), recompute
    ssd_passes = 1.0 + SSD_BACKWARD + (1.0 if recompute == "full" else 0.0)
    # torchtitan's op-level SAC: every second aten.mm of a block and every elementwise op run again
    again = op_sac_recompute(s) if recompute == "selective-op" else {}
    elem_passes = passes + (1.0 if again else 0.0)
    link_tp = span_bandwidth(chip, tp)
    roofs = Roofs(chip.peak_flop_per_s, bw, link_tp, chip.low_precision, chip.vector_flop_per_s, fp4=chip.fp4)
    # 8-bit training (Transformer Engine, torchao float8) runs the linear layers' GEMMs in fp8; attention and the
    # LM head stay in 16-bit, unless the attention core runs in FP8 (fp8_dot_product_attention): then its products
    # at the 8-bit peak and low_precision_flop_factor, as inference prices FP8 attention (op_times)
    roofs16 = Roofs(chip.peak_16bit_flop_per_s or chip.peak_flop_per_s, bw, link_tp, False, chip.vector_flop_per_s) \
        if chip.low_precision else roofs
    roofs_attn = Roofs(chip.attention_8bit_flop_per_s, bw, link_tp, True, chip.vector_flop_per_s) if attn8 \
        else roofs16
    eff_attn = eff._replace(flop_max=eff.train_attention_efficiency,
                            low_precision_flop_factor=eff.low_precision_flop_factor if attn8 else 1.0) \
        if flash and eff.train_attention_efficiency > 0 else eff
    fm = formats("bf16", flash=flash)
    # context parallelism: a rank's s/cp queries attend, on average over the load-balanced chunks, to the keys
    # of (s − s/cp)/2 earlier tokens besides their own causal block — 1/cp of the whole sequence's attention
    ops = forward_ops(s, fm, b, s_loc, (s_ - s_loc) / 2.0, tp, ep=ep)
    for op in ops:
        sixteen = op.name.startswith("attn_") or op.name in ("lm_head", "ssd_scan")
        r_op = roofs_attn if op.name.startswith("attn_") else roofs16 if sixteen else roofs
        op.t_ideal, op.t_est = op_times(op, r_op, eff_attn if op.kind == "attention" else eff, tp, False)
    t_layers, t_tp, t_head, t_gemm, t_fwd = 0.0, 0.0, 0.0, 0.0, 0.0  # t_fwd: the layers' forward pass alone
    for op in ops:
        if op.name == "lm_head":
            t_head = 3.0 * op.t_est  # forward + backward, never recomputed
        elif op.name.startswith("attn_"):
            t_layers = t_layers + attn_passes * op.t_est
            t_fwd = t_fwd + attn_fwd * op.t_est
        elif op.name == "ssd_scan":
            t_layers = t_layers + ssd_passes * op.t_est
            t_fwd = t_fwd + op.t_est
        elif op.name in MAMBA_STREAMS:  # the conv and the gated norm of Mamba layers, in every pass
            t_layers = t_layers + elem_passes * op.t_est
        elif op.name in ("linear_core", "linear_conv"):  # a hybrid's delta rule and conv: backward twice the forward
            t_layers = t_layers + passes * op.t_est
            t_fwd = t_fwd + op.t_est
        elif op.kind == "gemm":
            n = passes + (again.get(op.name, 1.0) if again else 0.0)
            t_op = n * op.t_est
            if chip.wgrad_16bit and chip.low_precision:  # AQT int8: one of the n passes, the weight gradient, in 16-bit
                t_op = t_op + op_times(op, roofs16, eff, tp, False)[1] - op.t_est
            t_layers = t_layers + t_op
            t_gemm = t_gemm + t_op
            t_fwd = t_fwd + op.t_est
        elif op.kind == "collective":
            t_tp = t_tp + (passes - 1.0) * op.t_est  # 2 per forward pass and per backward (2 more with full)
    # TP communication overlap (Transformer Engine userbuffers, PyTorch async TP): the sequence-parallel
    # all-gathers / reduce-scatters are split into chunks pipelined with the GEMMs that consume or produce them
    t_tp = exposed(t_tp, t_gemm, eff.tp_overlap)
    # training elementwise traffic (norms, dropout, residuals, activations over every pass), per layer
    split = tp if sequence_parallel else 1.0
    elem = eff.train_elementwise_bytes * s.H * M / split * elem_passes / 3.0
    if not flash:  # attention dropout over the materialized score matrix (inference has none)
        scores = M * _attn_keys(s, s_) / s.L * s.A / tp
        elem = elem + ATTN_DROPOUT_BYTES_PER_SCORE * scores * attn_passes
    # per pair of sub-blocks (a plain layer's attention and FFN; L for a plain model)
    t_elem = s.pairs * (elem / (bw * eff.bandwidth)
                        + ELEMENTWISE_KERNELS_PER_LAYER * elem_passes * eff.kernel_overhead_s)
    t_layers = t_layers + t_elem
    t_fwd = t_fwd + t_elem / elem_passes
    if s.moe_layers:  # token permutation: the k copies of each token gathered into expert order (read W, write
        #               k·W) and scattered back (read k·W, write W), in the forward, the backward and a recompute;
        #               W the experts' width (expert_width: a latent MoE permutes its latent)
        perm = 2.0 * (1.0 + s.experts_per_token) * expert_width(s) * ACT_BYTES * M / split * (elem_passes - 1.0)
        t_layers = t_layers + s.moe_layers * perm / (bw * eff.bandwidth)
    # MoE: dispatch and combine all-to-alls per MoE layer, in every pass but the last backward's weight grads
    t_a2a = 0.0
    if s.moe_layers:
        # each rank dispatches its own tokens (M/tp with sequence parallelism, 16-bit) to the experts of the other
        # EP ranks (ranks tp apart), across the network once per destination domain, forwarded inside
        # (aicalc.core.collectives.moe_alltoall_copies)
        moe = s.arch.moe
        t_one = moe_alltoall_seconds(M / split * expert_width(s) * ACT_BYTES, s.experts_per_token, ep, etp, chip.domain,
                                     chip.link_bytes_per_s, chip.dp_bytes_per_s, eff.link,
                                     moe.n_group if moe else 1, moe.topk_group if moe else 1)
        n_a2a = 2.0 * (elem_passes - 1.0) * s.moe_layers
        t_a2a = np.where(ep > 1, n_a2a * (t_one + eff.collective_latency_s), 0.0)
        t_a2a = exposed(t_a2a, t_layers, eff.ep_overlap)
    # pipeline: activations (and their gradients) cross each stage boundary once per micro-batch
    t_p2p = np.where(pp > 1, 2.0 * M * s.H * 2.0 / split / (span_bandwidth(chip, tp * cp * dp * pp) * eff.link), 0.0)
    # one micro-batch on the slowest stage: its layers' share of the layer time, the LM head on the last
    t_layer = (t_layers + t_tp + t_a2a) / s.L
    t_compute = np.maximum(np.maximum(n_first, n_mid) * t_layer, n_last * t_layer + t_head / v)
    n_bottleneck = np.where(n_last * t_layer + t_head / v >= np.maximum(n_first, n_mid) * t_layer, n_last,
                            np.maximum(n_first, n_mid))
    # data parallel over dp·cp ranks (CP ranks hold the same parameters): expert parameters over the experts'
    # data-parallel group tp·cp·dp/(ep·etp)
    shards = dp * cp
    eshards = tp * shards / (ep * etp)
    expert_params = s.moe_layers * s.experts * expert_width(s) * (s.expert_in + s.expert_ffn)
    dense_dev = (s.total_params - expert_params) / (tp * pp)
    expert_dev = expert_params / (etp * pp * ep)
    def allreduce(elements_bytes, n, stride):
        return allreduce_seconds(elements_bytes, n, stride, chip.domain, chip.link_bytes_per_s, chip.dp_bytes_per_s,
                                 eff.link)

    m = Bg / (dp * b)  # micro-batches per pipeline per step
    lat = eff.collective_latency_s
    zero = np.asarray(zero)
    fsdp = zero >= 3  # a layout's ZeRO stage (an array of them prices each layout's own)
    fsdp_dp = fsdp_mb = t_once = ddp_dp = ddp_mb = None  # each priced only where some layout needs it

    def pick(of_fsdp, of_ddp):
        """Each layout's own: FSDP's figure where its ZeRO stage is 3, DDP / ZeRO-1/2's elsewhere."""
        return of_fsdp if np.all(fsdp) else of_ddp if not np.any(fsdp) else np.where(fsdp, of_fsdp, of_ddp)

    if np.any(fsdp):  # FSDP / ZeRO-3, block by block (fsdp_exposed)
        root_dev = (s.embedding_params + (0.0 if s.arch.tied_embeddings else s.V * s.H)) / (tp * pp)
        on = np.where(shards > 1, 1.0, 0.0)
        per_elem = (allreduce(dense_dev - root_dev, shards, tp) + allreduce(expert_dev, eshards, etp * ep)) / 2.0 \
            / (s.L / pp)  # one layer's all-gather or reduce-scatter, seconds per byte of each element
        root_gather = allreduce(root_dev, shards, tp) / 2.0 * 2.0 + on * lat  # embedding and LM head in bf16
        root_scatter = allreduce(root_dev, shards, tp) / 2.0 * grad_bytes + on * lat
        gather, scatter = per_elem * gather_bytes + on * lat, per_elem * grad_bytes + on * lat
        t_f, t_b = t_fwd / s.L, (t_layers + t_tp + t_a2a - t_fwd) / s.L
        piped = pp > 1
        # no pipeline: every micro-batch gathers and reduce-scatters (the last reduce-scatters, the first block's
        # and the root's, run beside the next micro-batch's forward; only the optimizer waits for them: once per
        # step). With a pipeline the blocks stay unsharded from the first micro-batch's forward to the end of the
        # step (torchtitan apply_fsdp: reshard_after_forward=False with PP; torch.distributed.pipelining
        # PipelineStage.backward_maybe_with_nosync: set_reshard_after_backward(False) and
        # set_requires_gradient_sync(False) until the last backward, whose run_post_backward reduce-scatters every
        # block): one all-gather per step, beside the first micro-batch's forward, and one reduce-scatter after
        # the last backward, which nothing hides
        exposed_mb = np.where(piped, 0.0, fsdp_exposed(gather, scatter, t_f, t_b, n_bottleneck, eff.dp_overlap)
                              + root_gather)
        t_once = np.where(piped, root_gather + gather + np.maximum(n_bottleneck - 1.0, 0.0)
                          * exposed(gather, t_f, eff.dp_overlap) + n_bottleneck * scatter, scatter) + root_scatter
        fsdp_dp, fsdp_mb = m * exposed_mb + t_once, t_compute + t_p2p + exposed_mb
    if not np.all(fsdp):  # DDP / ZeRO-1/2: one gradient all-reduce (reduce-scatter + all-gather) per step,
        #                   overlapped with the last micro-batch's backward
        t_all = (allreduce(dense_dev, shards, tp) + allreduce(expert_dev, eshards, etp * ep)) * grad_bytes \
            + np.where(shards > 1, lat, 0.0)
        ddp_dp, ddp_mb = exposed(t_all, t_compute * 2.0 / 3.0, eff.dp_overlap), t_compute + t_p2p
    t_dp, t_mb = pick(fsdp_dp, ddp_dp), pick(fsdp_mb, ddp_mb)
    bubble = (pp - 1.0) / v
    t_pipe = (m + bubble) * t_mb
    shard = np.where(zero >= 1, shards, 1.0)
    t_opt = (dense_dev + expert_dev) / shard * OPTIMIZER_BYTES_PER_PARAM / (bw * eff.bandwidth)
    # FSDP's per-micro-batch collectives are in t_pipe already (t_mb): its step adds only what the optimizer waits
    # for, t_once; DDP's adds its gradient all-reduce
    total = t_pipe + pick(t_once, ddp_dp) + t_opt
    return {"step_s": total, "pipeline_s": t_pipe, "bubble_s": bubble * t_mb, "dp_comm_s": t_dp, "optimizer_s": t_opt,
            "tp_comm_s": m * t_tp * n_bottleneck / s.L, "ep_comm_s": m * t_a2a * n_bottleneck / s.L,
            "pp_comm_s": m * t_p2p,
            "microbatches": m}


def training(s: Shape, chip: TrainChip, eff: Efficiency, *, tokens, seq, global_batch, micro_batch, tp, pp, dp,
             recompute="full", mfu=None, achieved_flop_per_s=None, flash=True, sequence_parallel=True, interleave=1,
             zero=0, ep=1, cp=1, goodput=1.0, etp=None, stage_layers=None, grad_bytes=2.0, gather_bytes=2.0,
             attention_flops="full"):
    """Throughput, MFU, total time and chip-hours; ``mfu``/``achieved_flop_per_s`` given (counted with
    ``attention_flops``, :func:`flops_per_token`), else predicted.
    ``goodput``: the share of wall-clock time a run spends on training steps (restarts, evaluation and other
    stages lengthen it); total time and chip-hours are divided by it."""
    import numpy as np

    chips = np.asarray(tp, dtype=np.float64) * pp * dp * cp
    model_f, hw_f = flops_per_token(s, seq, recompute, attention_flops)
    parts = {}
    if achieved_flop_per_s is not None:
        tok_s = chips * achieved_flop_per_s / hw_f
    elif mfu is not None:
        tok_s = chips * mfu * chip.peak_flop_per_s / model_f
    else:
        parts = step_time(s, chip, eff, seq=seq, global_batch=global_batch, micro_batch=micro_batch, tp=tp, pp=pp,
                          dp=dp, recompute=recompute, flash=flash, sequence_parallel=sequence_parallel,
                          interleave=interleave, zero=zero, ep=ep, cp=cp, etp=etp, stage_layers=stage_layers,
                          grad_bytes=grad_bytes, gather_bytes=gather_bytes)
        tok_s = np.asarray(global_batch, dtype=np.float64) * seq / parts["step_s"]
    mfu_v = tok_s * model_f / (chips * chip.peak_flop_per_s)
    total = np.asarray(tokens, dtype=np.float64) / tok_s / goodput
    return {
        "model_flop_per_token": model_f + 0.0 * tok_s, "hardware_flop_per_token": hw_f + 0.0 * tok_s,
        "mfu": mfu_v, "hfu": tok_s * hw_f / (chips * chip.peak_flop_per_s),
        "model_flop_per_s_per_chip": mfu_v * chip.peak_flop_per_s, "tokens_per_s": tok_s,
        "tokens_per_s_per_chip": tok_s / chips, "step_s": np.asarray(global_batch, dtype=np.float64) * seq / tok_s,
        "total_time_s": total, "chip_hours": total * chips / 3600.0, "chips": chips, **parts,
    }
