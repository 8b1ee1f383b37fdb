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
