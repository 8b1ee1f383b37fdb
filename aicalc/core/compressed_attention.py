"""DeepSeek-V4's hybrid attention and hyper-connections: the parameter and cache terms every estimator adds for them.

Sources: DeepSeek-V4 tech report ("Towards Highly Efficient Million-Token Context Intelligence", §2.2 mHC, §2.3 CSA
/ HCA, §2.3.1 grouped output projection and lightning indexer) and transformers 5.23 ``modeling_deepseek_v4.py``,
whose module shapes every count below copies (``sum(p.numel() for p in model.parameters())``; the hash-MoE layers'
``tid2eid`` table and the routers' ``e_score_correction_bias`` are buffers, not parameters).

Notation: H hidden, A heads, d head_dim (one shared KV head), q the q LoRA rank, g o_groups, r o_lora_rank,
n hc_mult, m / m' the CSA / HCA compression ratios, I_h / I_d the indexer's heads and head_dim, W the window,
S the tokens of a sequence.
"""

from aicalc.catalog.arch import Arch


def projection_params(arch: Arch) -> int:
    """One layer's attention projections (``DeepseekV4Attention``): ``q_a_proj`` H·q, ``q_a_norm`` q, ``q_b_proj``
    q·A·d (``q_b_norm`` has no weight), ``kv_proj`` H·d (one KV head), ``kv_norm`` d, the grouped ``o_a_proj``
    (A·d/g)·(g·r) = A·d·r and ``o_b_proj`` g·r·H; no biases. The A attention sinks are ``attention_params``'."""
    c, H, d = arch.compressed, arch.hidden, arch.head_dim
    q = H * c.q_rank + c.q_rank + c.q_rank * arch.heads * d
    kv = H * d + d
    o = arch.heads * d * c.o_rank + c.o_groups * c.o_rank * H
    return q + kv + o


def indexer_params(arch: Arch) -> int:
    """One "csa" layer's lightning indexer (``DeepseekV4Indexer``): its own compressor over 2·I_d channels (``kv_proj``
    and ``gate_proj`` H·2I_d each, ``position_bias`` m·2I_d, ``kv_norm`` I_d), ``q_b_proj`` q·I_h·I_d from the
    attention's q latent and the scorer's ``weights_proj`` H·I_h."""
    c, H = arch.compressed, arch.hidden
    w = 2 * c.index_head_dim
    return 2 * H * w + c.csa_ratio * w + c.index_head_dim + c.q_rank * c.index_heads * c.index_head_dim + \
        H * c.index_heads


def compressor_params(arch: Arch, kind: str) -> int:
    """One layer's KV compressor: "hca" (``DeepseekV4HCACompressor``) ``kv_proj`` and ``gate_proj`` H·d each,
    ``position_bias`` m'·d, ``kv_norm`` d; "csa" (``DeepseekV4CSACompressor``, two overlapping series: 2d wide)
    ``kv_proj`` and ``gate_proj`` H·2d each, ``position_bias`` m·2d, ``kv_norm`` d, plus its indexer; "sliding": 0."""
    c, H, d = arch.compressed, arch.hidden, arch.head_dim
    if kind == "hca":
        return 2 * H * d + c.hca_ratio * d + d
    if kind == "csa":
        return 4 * H * d + c.csa_ratio * 2 * d + d + indexer_params(arch)
    return 0


def all_compressor_params(arch: Arch) -> int:
    """The compressors (and indexers) of all layers."""
    return sum(compressor_params(arch, k) for k in arch.compressed.kinds)


def hyper_connection_params(arch: Arch) -> int:
    """The mHC's mixing parameters: per layer two ``DeepseekV4HyperConnection`` (before attention and before the
    MoE), each ``fn`` (2+n)·n × n·H, ``base`` (2+n)·n and ``scale`` 3; once ``DeepseekV4HyperHead`` (the final
    collapse of the n streams) ``hc_fn`` n × n·H, ``hc_base`` n, ``hc_scale`` 1."""
    n, H = arch.compressed.hc_mult, arch.hidden
    mix = (2 + n) * n
    return arch.layers * 2 * (mix * n * H + mix + 3) + (n * n * H + n + 1)


def compressed_entries(context, ratio: int):
    """Compressed entries a layer of compression ``ratio`` holds after ``context`` tokens: one per closed window,
    floor(S / ratio) (transformers ``DeepseekV4HCACache.store_compression_weights`` keeps the rest in its buffer)."""
    import numpy as np

    return np.floor_divide(np.asarray(context, dtype=np.float64), ratio)


def cache_groups(arch: Arch, kv_dtype_bytes: float, engine: str = "vllm") -> tuple[tuple[int, float, float, float], ...]:
    """The compressed caches of one sequence, one device, as (ratio, bytes per entry summed over the layers of that
    ratio, bytes per not-yet-compressed token held in the compressors' buffers, bytes of the overlap state kept once
    a window has closed).

    Per entry: d elements of the KV dtype per compressed layer; a "csa" layer also caches one indexer key of I_d per
    entry (``compressed_kv["indexer"]``): ``hf`` in the model dtype (bf16, 2·I_d bytes), ``vllm`` as the serving
    engines store DSA indexer keys, fp8 plus an fp32 scale per 128 (:func:`aicalc.core.indexer.indexer_key_bytes`'s
    layout). ``hf`` only (transformers' ``DeepseekV4HCACache`` / ``DeepseekV4CSACache``, model dtype): the tokens
    since the last closed window wait in ``buffer_kv`` and ``buffer_gate`` (hca 2·d per token, csa 2·2d plus the
    indexer's 2·2I_d), and a csa layer keeps the last window's first series in ``overlap_kv`` / ``overlap_gate``
    (2·m·d plus 2·m·I_d) once S ≥ m. vLLM keeps its compressor state as a sliding-window cache of its own whose
    size this does not model (0 here)."""
    c = arch.compressed
    b16 = 2.0
    groups = []
    for kind in ("csa", "hca"):
        layers = c.count(kind)
        if not layers:
            continue
        ratio = c.ratio(kind)
        entry = arch.head_dim * kv_dtype_bytes
        buffer = overlap = 0.0
        if kind == "csa":
            if engine == "hf":
                entry += b16 * c.index_head_dim
                buffer = 2 * b16 * (2 * arch.head_dim + 2 * c.index_head_dim)
                overlap = 2 * b16 * ratio * (arch.head_dim + c.index_head_dim)
            else:
                from aicalc.core.indexer import QUANT_BLOCK, SCALE_BYTES

                entry += c.index_head_dim + (c.index_head_dim // QUANT_BLOCK) * SCALE_BYTES
        elif engine == "hf":
            buffer = 2 * b16 * arch.head_dim
        groups.append((ratio, layers * entry, layers * buffer, layers * overlap))
    return tuple(groups)


def window_layers(arch: Arch, engine: str = "vllm") -> int:
    """Layer-equivalents of one window token: a compressed layer caches the shared K=V once (``keys is values`` in
    ``DeepseekV4HCACache.update``); a "sliding" layer is transformers' ``DynamicSlidingWindowLayer``, which under
    ``hf`` stores keys and values as two tensors (2 each), one under ``vllm``."""
    c = arch.compressed
    sliding = c.count("sliding")
    return arch.layers + (sliding if engine == "hf" else 0)


def indexer_bytes_per_token(arch: Arch, engine: str = "vllm") -> float:
    """Indexer-key bytes per token of context over all "csa" layers (1/m of an entry per token): the column the DSA
    indexer's keys are reported in."""
    from aicalc.core.indexer import QUANT_BLOCK, SCALE_BYTES

    c = arch.compressed
    per_entry = 2.0 * c.index_head_dim if engine == "hf" else \
        c.index_head_dim + (c.index_head_dim // QUANT_BLOCK) * SCALE_BYTES
    return c.count("csa") * per_entry / c.csa_ratio


def cache_columns(arch: Arch, shape, batch, context, engine: str = "vllm") -> dict:
    """The parts of a DeepSeek-V4 cache for ``batch`` sequences of ``context`` tokens, one device (no paging):
    the windows of the shared KV (``window_cache_bytes_per_device``: transformers' ``keys``/``values``), the
    compressed entries (``compressed_cache_bytes_per_device``: ``compressed_kv["compressor"]``), the CSA indexer keys
    (``indexer_cache_bytes_per_device``: ``compressed_kv["indexer"]``) and, ``hf`` only, the compressors' buffered
    tokens and overlap state (``compressor_state_bytes_per_device``); their sum is the cache
    :func:`aicalc.core.kv_cache.kv_cache_bytes` counts."""
    import numpy as np

    from aicalc.core.indexer import QUANT_BLOCK, SCALE_BYTES

    c = arch.compressed
    B = np.asarray(batch, dtype=np.float64)
    S = np.asarray(context, dtype=np.float64)
    per = shape.bytes_per_token_layer  # one window token of one layer: d elements of the KV dtype
    cols = {"window_cache_bytes_per_device": B * np.minimum(S, shape.window) * shape.sliding_layers * per}
    comp = np.zeros_like(S)
    for kind in ("csa", "hca"):
        comp = comp + c.count(kind) * np.floor_divide(S, c.ratio(kind)) * per
    cols["compressed_cache_bytes_per_device"] = B * comp
    key = 2.0 * c.index_head_dim if engine == "hf" else \
        c.index_head_dim + (c.index_head_dim // QUANT_BLOCK) * SCALE_BYTES
    cols["indexer_cache_bytes_per_device"] = B * c.count("csa") * np.floor_divide(S, c.csa_ratio) * key
    if engine == "hf":
        state = np.zeros_like(S)
        for ratio, _, buffer, overlap in shape.compressed:
            state = state + np.mod(S, ratio) * buffer + (S >= ratio) * overlap
        cols["compressor_state_bytes_per_device"] = B * state
    return cols


# --------------------------------------------------------------------------------------------------
# cost terms of a forward pass and a trained token (aicalc.core.forward, aicalc.core.train_time)
# --------------------------------------------------------------------------------------------------


def attended_keys(arch: Arch, past, new):
    """Σ over ``new`` queries and over the layers of the keys each attends to after ``past`` cached tokens: every
    layer its window (query i sees min(P + i + 1, W) tokens), a CSA layer also min(x/m, topk) compressed entries
    and an HCA layer x/m' (x = P + i + 1 visible tokens; floor(x/m) closed windows, taken as x/m here) (the tech
    report §2.3.1-2.3.2; ``DeepseekV4Attention``: the window's K=V concatenated with the selected or all compressed
    entries). min(x/m, k) = min(x, m·k)/m, a capped causal sum."""
    from aicalc.core.geometry import causal_keys

    c = arch.compressed
    keys = arch.layers * causal_keys(past, new, c.window)
    if c.count("csa"):
        keys = keys + c.count("csa") * causal_keys(past, new, c.csa_ratio * c.index_topk) / c.csa_ratio
    if c.count("hca"):
        keys = keys + c.count("hca") * causal_keys(past, new) / c.hca_ratio
    return keys


def read_entries(arch: Arch, past, new):
    """Cached vectors one sequence's pass reads (each once, flash attention), summed over layers: the window,
    min(S/m, T·topk) selected CSA entries and all S/m' HCA entries, S = P + T; plus the T/m and T/m' entries the
    pass writes (its T window tokens are the caller's)."""
    import numpy as np

    c = arch.compressed
    S = np.asarray(past, dtype=np.float64) + np.asarray(new, dtype=np.float64)
    T = np.asarray(new, dtype=np.float64)
    held = arch.layers * np.minimum(S, float(c.window))
    if c.count("csa"):
        m = float(c.csa_ratio)
        held = held + c.count("csa") * (np.minimum(S / m, T * float(c.index_topk)) + T / m)
    if c.count("hca"):
        held = held + c.count("hca") * (S + T) / c.hca_ratio
    return held


def index_key_bytes(arch: Arch) -> float:
    """One CSA indexer key as the serving engines keep it: fp8 plus an fp32 scale per 128 (the DSA layout)."""
    from aicalc.core.indexer import QUANT_BLOCK, SCALE_BYTES

    d = arch.compressed.index_head_dim
    return d + (d // QUANT_BLOCK) * SCALE_BYTES


def score_flop_per_key(arch: Arch) -> float:
    """One query's index score against one compressed key: 2·I_h·I_d for the q·k products, then ReLU, the weight
    and the sum over heads (3·I_h) (``DeepseekV4IndexerScorer``)."""
    c = arch.compressed
    return 2.0 * c.index_heads * c.index_head_dim + 3.0 * c.index_heads


def score_op(arch: Arch, batch, new, past, zero=0.0):
    """The CSA indexers' scoring of one pass as an :class:`aicalc.core.forward.Op` (``per`` sequence), as
    :func:`aicalc.core.indexer.score_op` prices DSA's but over the compressed keys: query i against x/m of them
    (x = P + i + 1), in fp8, on the CSA layers; bytes: the cached indexer keys read once per layer and the T/m new
    ones written, the fp8 queries read, the fp32 logits written and read back by the top-k, the top-k indices
    written. Replicated over TP."""
    import numpy as np

    from aicalc.core.forward import Op
    from aicalc.core.geometry import causal_keys

    c = arch.compressed
    B, T, P = (np.asarray(x, dtype=np.float64) for x in (batch, new, past))
    Li, m = float(c.count("csa")), float(c.csa_ratio)
    keys = causal_keys(P, T) / m
    kb = index_key_bytes(arch)
    flop = B * Li * score_flop_per_key(arch) * keys
    nbytes = B * Li * ((P + 2.0 * T) / m * kb + T * c.index_heads * c.index_head_dim + 8.0 * keys
                       + 4.0 * T * np.minimum((P + T) / m, float(c.index_topk)))
    return Op("attn_indexer", "attention", flop + zero, nbytes + zero, zero, 2.0 * Li + zero, layers=Li,
              per="sequence", compute="fp8")


def compressed_layers(arch: Arch) -> int:
    """Layers with a KV compressor (CSA and HCA)."""
    return arch.compressed.count("csa") + arch.compressed.count("hca")


def pool_widths(arch: Arch) -> int:
    """Channels one token feeds the compressors' softmax pooling over all layers: kv and gate, 2d per HCA layer,
    2·2d (two overlapping series) plus the indexer's 2·2I_d per CSA layer."""
    c, d = arch.compressed, arch.head_dim
    return c.count("hca") * 2 * d + c.count("csa") * 2 * (2 * d + 2 * c.index_head_dim)


def hc_flop_per_token(arch: Arch) -> float:
    """mHC FLOPs of one token beyond its ``fn`` projections (those are matmul weights, :func:`hc_matmul_params`):
    per sub-block (two per layer) the collapse of n streams (2nH), the expansion of the output (2nH) and the
    combination of the residual streams by the n×n matrix (2n²H) (``DeepseekV4DecoderLayer.forward``); the
    Sinkhorn iterations on n×n are negligible."""
    n, H = arch.compressed.hc_mult, arch.hidden
    return 2.0 * arch.layers * (4.0 * n * H + 2.0 * n * n * H)


def hc_matmul_params(arch: Arch) -> int:
    """The mHC's projection matrices a token multiplies, (2+n)n × nH per sub-block and n × nH for the head."""
    n, H = arch.compressed.hc_mult, arch.hidden
    return arch.layers * 2 * (2 + n) * n * n * H + n * n * H


def hc_bytes_per_token(arch: Arch) -> float:
    """Activation bytes (16-bit) one token's mHC moves beyond a plain residual: per sub-block the n streams read for
    the mixing projection, read again to collapse them, read as the residual and written back mixed with the
    output (4·n·H values), less the plain residual add's 3·H that the forward's elementwise op already counts."""
    n, H = arch.compressed.hc_mult, arch.hidden
    return 2.0 * arch.layers * (4.0 * n - 3.0) * H * 2.0


def training_terms(arch: Arch, seq, causal: bool):
    """DeepSeek-V4's terms in a trained token's FLOPs (TT-01's ``6·N_mm + 3·attention``): (matmul weights per token
    beyond the attention and FFN projections: the compressors, indexers and mHC projections; keys per token over all
    layers of the attention; keys per token over the CSA layers of the indexer's scoring). ``causal``: each token over
    the keys before it ((S + 1)/2 visible tokens on average, capped per kind); else every token over S."""
    import numpy as np

    c = arch.compressed
    S = np.asarray(seq, dtype=np.float64)
    params = all_compressor_params(arch) + hc_matmul_params(arch)
    if causal:
        return params, attended_keys(arch, 0.0, S) / S, c.count("csa") * (S + 1.0) / 2.0 / c.csa_ratio
    keys = arch.layers * np.minimum(S, float(c.window)) + \
        c.count("csa") * np.minimum(S / c.csa_ratio, float(c.index_topk)) + c.count("hca") * S / c.hca_ratio
    return params, keys, c.count("csa") * S / c.csa_ratio


# --------------------------------------------------------------------------------------------------
# Training activations under transformers (``--framework hf``): what autograd saves for backward
# --------------------------------------------------------------------------------------------------
# Every term below is read from transformers 5.23 ``modeling_deepseek_v4.py`` (eager attention: the only path it
# gives V4) and checked tensor by tensor with saved-tensor hooks (validation/record_activations.py,
# "deepseek-v4-style" records in tests/data/validation/activations.json; bf16 and fp32, B 1 and 2). B batch,
# S sequence, H hidden, A heads, d head_dim, n hc_mult, q q_rank, ρ rope_dim, g o_groups, r o_rank, I_d index
# head_dim, E routed experts, k top-k, F expert width, F_s the shared expert's, V vocab, a bytes per activation.
# ``c`` is 1 where a < 4: the code's ``.float()``/``.to(float32)`` casts are copies in a 16-bit model and no-ops
# (the tensor itself) in an fp32 one.


def _copies(a):
    import numpy as np

    return np.where(np.asarray(a) < 4, 1.0, 0.0)


def v4_norm_saved(B, S, width, a=None):
    """``DeepseekV4RMSNorm`` over ``width``: the fp32 copy of its input (the input itself in fp32) and the fp32
    normalized tensor, which the fp32 weight multiplies (``self.weight * hidden_states``, then one cast), 4 bytes
    each, and the fp32 rsqrt per token: ``8·BS·w + 4·BS``. Its a-byte output is saved by the linear it feeds (counted
    there)."""
    return B * S * (8.0 * width + 4.0)


def hc_saved(B, S, arch: Arch, a):
    """One ``DeepseekV4HyperConnection`` (two per layer, before the attention and before the MoE), the n·H-wide
    residual streams collapsed to one block input:

    * ``input_norm`` (``DeepseekV4UnweightedRMSNorm`` over the flattened streams, ``.float()``): the fp32 copy
      (c·4·BS·nH), the fp32 rsqrt (4·BS) and the normalized streams, saved by ``F.linear`` (4·BS·nH);
    * ``F.linear(flattened, self.fn.float())``: the fp32 copy of ``fn`` (c·4·nH·(2 + n)·n, once per call) and the
      fp32 output, kept whole by the scale products of its ``pre``/``post``/``comb`` views (4·BS·(2 + n)·n);
    * the two sigmoids' outputs (2·4·BS·n) and the softmax's (4·BS·n²);
    * Sinkhorn-Knopp: 1 + 2·(iters − 1) divisions, each saving its numerator (4·BS·n²) and denominator (4·BS·n);
    * the collapse ``pre.unsqueeze(-1) * hidden_streams``: ``pre`` (4·BS·n) and the streams themselves (a·BS·nH:
      the layer's input, or the streams after the attention's update)."""
    import numpy as np

    c = arch.compressed
    n, H = c.hc_mult, arch.hidden
    a = np.asarray(a, dtype=np.float64)
    BS = B * S
    per_token = (4.0 * _copies(a) * n * H + 4.0 + 4.0 * n * H + 4.0 * (2 + n) * n + 8.0 * n + 4.0 * n * n
                 + (2 * c.sinkhorn_iters - 1) * 4.0 * (n * n + n) + 4.0 * n + a * n * H)
    return BS * per_token + 4.0 * _copies(a) * n * H * (2 + n) * n


def hc_update_saved(B, S, arch: Arch, a):
    """``DeepseekV4DecoderLayer``'s stream update after a block, ``post.to(dtype).unsqueeze(-1) * out.unsqueeze(-2)
    + matmul(comb.to(dtype).transpose(-1, -2), streams)``: the cast ``post`` (a·BS·n), the block's output (a·BSH)
    and the cast ``comb`` (a·BS·n²); the streams are the hyper-connection's (:func:`hc_saved`). Twice per layer."""
    n = arch.compressed.hc_mult
    return B * S * a * (n + arch.hidden + n * n)


def rope_saved(B, rows, arch: Arch, a):
    """V4's ``apply_rotary_pos_emb``: ``cos``/``sin`` expanded by ``repeat_interleave`` on every call (a new tensor each
    time), both saved by the fp32 rotation, 2·a·rows·ρ; ``rows`` is S for the per-layer calls (the model's position ids
    have batch 1) and B·entries for the compressors' (positions expanded over the batch)."""
    return 2.0 * a * rows * arch.compressed.rope_dim


def pool_saved(B, S, arch: Arch, a, kind: str, width: int, overlap: bool):
    """One compressor's gated pooling (``DeepseekV4HCACompressor``, ``DeepseekV4CSACompressor`` and the indexer's own,
    ``DeepseekV4Indexer``) over U = ⌊S/m⌋·m tokens pooled into ⌊S/m⌋ entries of ``width``: the fp32 softmax of the
    gates (4·B·U'·w) and its a-byte cast (c·a·B·U'·w), the kv tensor the softmax weighs (a·B·U'·w), where U' is U
    for the HCA's windows and 2U for the CSA's overlapping two-series layout (``new_kv``/``new_gate``, 2m slots per
    entry) and the HCA's kv is its whole ``kv_proj`` output (a·BS·w: the pooled chunk is a view of it); then the
    entries' ``kv_norm`` (:func:`v4_norm_saved`) and RoPE (:func:`rope_saved`). Nothing without a whole window."""
    import numpy as np

    m = arch.compressed.ratio(kind)
    entries = np.floor(np.asarray(S, dtype=np.float64) / m)
    pooled = (2.0 if overlap else 1.0) * entries * m
    kv = B * pooled * width if overlap else B * np.asarray(S, dtype=np.float64) * width
    saved = (B * pooled * width * (4.0 + a * _copies(a)) + a * kv + v4_norm_saved(B, entries, width)
             + rope_saved(B, B * entries, arch, a))
    return np.where(entries > 0, saved, 0.0)


def attention_saved(B, S, arch: Arch, a, kind: str, t=1):
    """One ``DeepseekV4Attention`` with eager attention (the only path transformers gives V4), beyond the input norm:

    * the q LoRA: ``q_a_norm`` (:func:`v4_norm_saved` over q) and its output, ``q_b_proj``'s input (a·BS·q);
      ``q_b_norm`` (unweighted, per head): the fp32 copy of q (4·BS·Ad) and its rsqrt (4·BS·A), in 16 bits also q
      itself and the rsqrt's cast (c·a·BS·(Ad + A));
    * ``kv_norm`` over the one shared KV head (:func:`v4_norm_saved` over d; its output is not saved);
    * RoPE on q, on kv and (``-sin``) on the output (:func:`rope_saved`, three calls);
    * the scores ``matmul(q, kv)``: q (a·BS·Ad) and the keys, the window's S plus the compressor's ⌊S/m⌋ entries
      (T); ``repeat_kv`` expands the one KV head to A without a copy, and ``matmul`` folds [B, A] to one batch dim,
      which is a view at B = 1 (a·T·d, read as key and value) and a copy of the key and of the value otherwise
      (2·a·B·A·T·d);
    * the sinks: the logits with one sink column, shifted by their max (int64 indices, 8·B·A·S) and softmaxed in the
      activation dtype, a·B·A·S·(T + 1) (the probabilities without the sink column are a view of it);
    * the grouped output projection: ``o_a_proj``'s input (a·BS·Ad) and ``o_b_proj``'s (a·BS·g·r);
    * the compressor (:func:`pool_saved`; the CSA's and its indexer's, whose keys the DynamicCache of transformers'
      forward holds; the indexer's scoring only feeds a top-k, so what it saves is freed with it).
    Heads split over ``t`` (checked at t = 1)."""
    import numpy as np

    c = arch.compressed
    B, S, a, t = (np.asarray(x, dtype=np.float64) for x in (B, S, a, t))
    BS, A, d = B * S, arch.heads / t, arch.head_dim
    Ad = A * d
    m = c.ratio(kind)
    T = S + (np.floor(S / m) if m else 0.0)
    q = v4_norm_saved(B, S, c.q_rank) + a * BS * c.q_rank + BS * (4.0 * (Ad + A) + _copies(a) * a * (Ad + A))
    kv = v4_norm_saved(B, S, d) + 3 * rope_saved(B, S, arch, a)
    keys = np.where(B == 1, a * T * d, 2.0 * a * B * A * T * d)
    scores = a * BS * Ad + keys + 8.0 * B * A * S + a * B * A * S * (T + 1)
    out = a * BS * Ad + a * BS * c.o_groups * c.o_rank / t
    pool = 0.0
    if kind == "hca":
        pool = pool_saved(B, S, arch, a, kind, d, False)
    elif kind == "csa":
        pool = pool_saved(B, S, arch, a, kind, d, True) + pool_saved(B, S, arch, a, kind, c.index_head_dim, True)
    return q + kv + scores + out + pool


def moe_saved(B, S, arch: Arch, a, t=1):
    """``DeepseekV4SparseMoeBlock`` beyond its input norm's output (which the router, the experts and the shared expert
    read: saved once, a·BSH, counted with the norm):

    * the router (``DeepseekV4TopKRouter``, or ``DeepseekV4HashRouter`` whose experts come from ``tid2eid``: the same
      tensors): the logits and ``sqrtsoftplus``'s output (2·a·BS·E), the int64 indices the gather keeps (8·BS·k), the
      gathered weights and their sum (a·BS·(k + 1));
    * the routed experts, ``grouped_mm_experts_forward`` (transformers 5's default): the tokens in expert order
      (a·BSk·H), the fused gate/up output (a·BSk·2F), the clamped gate and up, the SiLU and the product
      (4·a·BSk·F), the routing weights in that order (a·BSk), the down output they multiply (a·BSk·H), three int64
      index vectors (24·BSk) and the int32 expert offsets (4·E);
    * the shared expert (``DeepseekV4MLP`` with the SwiGLU clamp): gate and up outputs, both clamps, the SiLU and the
      product, 6·a·BS·F_s."""
    import numpy as np

    moe = arch.moe
    B, S, a, t = (np.asarray(x, dtype=np.float64) for x in (B, S, a, t))
    BS, H, k, E, F = B * S, arch.hidden, moe.experts_per_token, moe.experts, moe.expert_ffn
    Fs = moe.shared_experts * (moe.shared_expert_ffn or F)
    router = BS * (2.0 * a * E + 8.0 * k + a * (k + 1))
    experts = BS * k * (a * (2.0 * H + 6.0 * F / t + 1.0) + 24.0) + 4.0 * E
    return router + experts + 6.0 * a * BS * Fs / t


def hf_layer_saved(B, S, arch: Arch, a, t=1):
    """Bytes one DeepSeek-V4 decoder layer (``DeepseekV4DecoderLayer``) saves for backward under transformers,
    averaged over the layers' kinds (sliding / CSA / HCA): two hyper-connections (:func:`hc_saved`) and their stream
    updates (:func:`hc_update_saved`), the input and post-attention norms (:func:`v4_norm_saved` over H, and their
    a-byte outputs read by ``q_a_proj``/``kv_proj`` and by the MoE), the attention (:func:`attention_saved`) and the
    MoE (:func:`moe_saved`). The n·H-wide streams are what a plain model's residual stream is, n times over."""
    import numpy as np

    B, S, a = (np.asarray(x, dtype=np.float64) for x in (B, S, a))
    c = arch.compressed
    H = arch.hidden
    common = (2 * hc_saved(B, S, arch, a) + 2 * hc_update_saved(B, S, arch, a)
              + 2 * (v4_norm_saved(B, S, H) + a * B * S * H) + moe_saved(B, S, arch, a, t))
    attn = sum(c.count(kind) * attention_saved(B, S, arch, a, kind, t) for kind in ("sliding", "csa", "hca")
               if c.count(kind))
    return common + attn / len(c.kinds)


def hf_outside_saved(B, S, arch: Arch, a, t=1, stage="all"):
    """What a DeepSeek-V4 model saves outside its decoder layers: the int64 token ids (8·BS) on the first stage; on the
    last ``DeepseekV4HyperHead`` (the final collapse of the n streams: the fp32 copy, normalized streams and rsqrt of
    its unweighted norm, c·4·BS·nH + 4·BS·nH + 4·BS, the fp32 copies of ``hc_fn`` and ``hc_scale``, c·4·(nH·n + 1),
    the mixes and the sigmoid's output, 2·4·BS·n, ``pre`` and the last layer's output streams, 4·BS·n + a·BS·nH),
    the final norm (:func:`v4_norm_saved`) and the ``lm_head`` input (a·BSH); the loss is
    :func:`aicalc.core.activations.hf_outside`'s. The layers' RoPE tables are saved per call (:func:`rope_saved`)."""
    import numpy as np

    B, S, a = (np.asarray(x, dtype=np.float64) for x in (B, S, a))
    n, H = arch.compressed.hc_mult, arch.hidden
    BS = B * S
    first = 8.0 * BS
    head = (BS * (4.0 * _copies(a) * n * H + 4.0 * n * H + 4.0 + 12.0 * n + a * n * H)
            + 4.0 * _copies(a) * (n * H * n + 1))
    last = head + v4_norm_saved(B, S, H) + a * BS * H
    return {"first": first, "last": last, "all": first + last}[stage]


def layer_input_width(arch: Arch) -> int:
    """Elements per token of a decoder layer's input, what a full checkpoint keeps: n·H for V4's mHC streams."""
    return arch.hidden * (arch.compressed.hc_mult if arch.compressed is not None else 1)
