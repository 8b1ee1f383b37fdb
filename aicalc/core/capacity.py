"""How many sequences fit beside the weights: vLLM's memory accounting (IM-11, IM-12).

``requested = memory × utilization`` caps the whole instance (vLLM ``gpu_memory_utilization``,
default 0.9); the KV budget is what remains after weights and the runtime overhead; blocks are
``floor(budget / block_bytes)`` and concurrency is blocks ÷ blocks per sequence.
"""

from __future__ import annotations

from aicalc.catalog.arch import Arch
from aicalc.core.kv_cache import KVShape, held_tokens

FIXED_OVERHEAD_BYTES = 1 << 30
MAX_BATCHED_TOKENS = 8192
MAX_SEQS = 256


def runtime_overhead_bytes(arch: Arch, tp: int = 1, max_batched_tokens: int = MAX_BATCHED_TOKENS) -> float:
    """Memory a serving engine holds besides weights and KV cache, per device.

    Terms: (1) the activation peak of vLLM's profile run over ``max_batched_tokens`` tokens
    (default 8192, vLLM V1's chunked-prefill budget): the 16-bit hidden state and residual
    (2 × T·H), the attention q/k/v outputs (T·(A + 2K)·d/tp) and the FFN gate/up/act
    intermediates (3 × T·F/tp; experts per token for MoE), all 2 bytes; (2) fp32 logits for
    ``max_num_seqs`` = 256 sampled rows (256·V·4 / tp); (3) a fixed 1 GiB for the CUDA context's
    non-torch allocations, CUDA graphs and vLLM's 150 MiB redundancy buffer (IM-12, IM-20 show
    0.07 + 0.65 + 0.15 GiB on an H200).
    """
    T = max_batched_tokens
    ffn = arch.ffn
    if arch.moe is not None and arch.n_moe_layers:
        ffn = max(arch.ffn if arch.n_moe_layers < arch.layers else 0,
                  arch.moe.expert_ffn * arch.moe.experts_per_token + arch.moe.shared_ffn)
    act = 2 * (2 * T * arch.hidden + T * (arch.heads + 2 * arch.kv_heads) * arch.head_dim / tp + 3 * T * ffn / tp)
    logits = MAX_SEQS * arch.vocab * 4 / tp
    return act + logits + FIXED_OVERHEAD_BYTES


def room_bytes(memory_bytes: float, utilization: float, weights: float, overhead: float):
    """``requested − weights − overhead`` with ``requested = ceil(memory × utilization)`` (IM-11 step 1, 3):
    below zero when the weights and overhead alone exceed the request, by that shortfall."""
    import numpy as np

    return np.ceil(memory_bytes * utilization) - weights - overhead


KV_BUDGET = ("total", "free")  # what an engine's memory fraction is a fraction of (engine profiles' ``kv_budget``)
DEFAULT_UTILIZATION = 0.9  # vLLM's gpu_memory_utilization and TensorRT-LLM's free_gpu_memory_fraction default


def prefill_graph_sizes(runs, max_tokens: int) -> int:
    """How many token counts the prefill CUDA graph captures up to ``max_tokens``: the counts of ``runs``, each
    [first, last (None: no end of its own), step], that are at most ``max_tokens`` (sgl-project/sglang
    python/sglang/srt/arg_groups/cuda_graph_hook.py, generate_prefill_cuda_graph_batch_sizes: 'capture_sizes =
    (list(range(4, 33, 4)) + ... + list(range(4608, max_bs + 1, 512)))', then '[s for s in capture_sizes if s <=
    max_bs]')."""
    n = 0
    for first, last, step in runs:
        top = max_tokens if last is None else min(last, max_tokens)
        if top >= first:
            n += (top - first) // step + 1
    return n


def static_reserve_mib(gpu_mem_mib: float, chunk: int, graph_bs: int, tp: int, pp: int, dp: int,
                       prefill_graph_mib: float, rule: dict) -> float:
    """MiB SGLang keeps out of --mem-fraction-static for activations and CUDA graphs on a device of
    ``gpu_mem_mib`` (sgl-project/sglang @ 031ed82d8b5ec8db9cf88cffb057c2e91c964262,
    python/sglang/srt/arg_groups/memory_hook.py, handle_gpu_memory_settings and reserve_for_graph_mb), with the
    constants of ``rule`` (an engine profile's ``mem_fraction_static_reserve``):

    base_mib + max(``chunk``, min_activation_tokens) × per_chunk_token_mib ('reserved_mem = 512; reserved_mem +=
    activation_tokens * 1.5', activation_tokens = max(chunked_prefill_size, 2048)) + ``tp`` · ``pp`` ×
    per_rank_mib ('cfg.tp_size * cfg.pp_size / 8 * 1024') + ``graph_bs`` × per_graph_bs_mib (the decode graph:
    'decode_cuda_graph_config.max_bs * 2'); with DP attention (``dp`` > 1 ranks) ``graph_bs`` · ``dp`` ×
    dp_attention_per_graph_bs_mib ('max_bs * cfg.dp_size * 3') and, above dp_attention_large_graph_bs, ``graph_bs``
    · ``dp`` × dp_attention_large_per_graph_bs_mib ('if max_bs > 300: ... max_bs * cfg.dp_size * 1.5'); plus the
    prefill graph's ``prefill_graph_mib``; then, on a device above floor_above_mib, at least floor_mib ('if gpu_mem
    > 60 * 1024: reserved_mem = max(reserved_mem, 10 * 1024)')."""
    r = rule
    reserved = r["base_mib"] + max(chunk, r["min_activation_tokens"]) * r["per_chunk_token_mib"]
    reserved += tp * pp * r["per_rank_mib"] + graph_bs * r["per_graph_bs_mib"]
    if dp > 1:
        reserved += graph_bs * dp * r["dp_attention_per_graph_bs_mib"]
        if graph_bs > r["dp_attention_large_graph_bs"]:
            reserved += graph_bs * dp * r["dp_attention_large_per_graph_bs_mib"]
    reserved += prefill_graph_mib
    if gpu_mem_mib > r["floor_above_mib"]:
        reserved = max(reserved, r["floor_mib"])
    return float(reserved)


def static_fraction(gpu_mem_mib: float, reserved_mib: float) -> float:
    """SGLang's default --mem-fraction-static: 'round((gpu_mem - reserved_mem) / gpu_mem, 3)'
    (memory_hook.py, handle_gpu_memory_settings), the share of the device's memory that weights and the KV pool
    take (0 where the device reports none)."""
    return round((gpu_mem_mib - reserved_mib) / gpu_mem_mib, 3) if gpu_mem_mib > 0 else 0.0


def kv_budget_bytes(memory_bytes: float, utilization: float, weights: float, overhead: float, of: str = "total"):
    """The bytes per device left for the KV cache, 0 when there is none (vLLM then refuses to start: "No
    available memory for the cache blocks"). ``of`` "total": :func:`room_bytes` (vLLM's gpu_memory_utilization,
    a share of the whole memory the weights and overhead come out of); "free": ``utilization`` of what the weights
    and overhead leave (TensorRT-LLM's KvCacheConfig.free_gpu_memory_fraction, 0.9 by default)."""
    import numpy as np

    if of == "free":
        return np.maximum((memory_bytes - weights - overhead) * utilization, 0.0)
    return np.maximum(room_bytes(memory_bytes, utilization, weights, overhead), 0.0)


def max_batch(shape: KVShape, budget, context, block_size: int | None):
    """Sequences of ``context`` tokens that fit in ``budget`` bytes (per device).

    Paged (IM-11 steps 4–5): blocks = floor(budget / (block · bytes_per_token_layer · layers)),
    concurrency = blocks / blocks-per-sequence, and whole sequences = floor(concurrency).
    """
    return fit_of(shape, budget, held_tokens(shape, context, block_size), block_size)


def fit_of(shape: KVShape, budget, held, block_size: int | None, out=None):
    """:func:`max_batch` from the tokens one sequence holds over all layers, ``held``
    (:func:`aicalc.core.kv_cache.held_tokens`, a new array this call may overwrite), and its recurrent
    state; the whole sequences into ``out`` when given."""
    import numpy as np

    budget = np.asarray(budget, dtype=np.float64)
    # in place where held is an array of the result's shape (1 · held · bytes_per_token_layer: bytes_of's product)
    mine = isinstance(held, np.ndarray) and np.broadcast_shapes(budget.shape, held.shape) == held.shape
    per_seq = np.multiply(held, shape.bytes_per_token_layer, out=held if mine else None)
    if shape.state_bytes:
        per_seq += shape.state_bytes
    return fit_of_bytes(shape, budget, per_seq, block_size, out, per_seq if mine else None)


def fit_of_bytes(shape: KVShape, budget, per_seq, block_size: int | None, out=None, into=None):
    """:func:`fit_of` from one sequence's bytes, ``per_seq`` (held tokens · bytes_per_token_layer, plus its
    recurrent state; with ``block_size`` the state takes its share of blocks as bytes do): (whole
    sequences, into ``out`` when given; concurrency, into ``into`` when given, which may be ``per_seq`` itself)."""
    import numpy as np

    budget = np.maximum(np.asarray(budget, dtype=np.float64), 0)
    if block_size:
        block_bytes = block_size * shape.bytes_per_token_layer * (shape.full_layers + shape.sliding_layers)
        concurrency = np.divide(per_seq, block_bytes, out=into)  # blocks per sequence, a new array or ``into``
        mine = isinstance(concurrency, np.ndarray) and np.broadcast_shapes(budget.shape,
                                                                            concurrency.shape) == concurrency.shape
        concurrency = np.divide(np.floor(budget / block_bytes), concurrency, out=concurrency if mine else None)
    else:
        concurrency = np.divide(budget, per_seq, out=into)
    fit = np.add(concurrency, 1e-9, out=out)
    return np.floor(fit, out=fit if isinstance(fit, np.ndarray) else None), concurrency


def max_context(shape: KVShape, budget, batch, block_size: int | None):
    """Longest context (whole blocks) for which ``batch`` sequences fit in ``budget``.

    Inverts ``kv_cache_bytes``: full layers grow with S, sliding layers stop at the window W; the sequences'
    recurrent states (linear attention, Mamba) come off the budget first. Returns inf where the cache stops
    growing (every layer sliding) and the window fits.
    """
    import numpy as np

    B = np.asarray(batch, dtype=np.float64)
    if shape.compressed:
        return _max_compressed_context(shape, budget, B, block_size)
    per_tok = B * shape.bytes_per_token_layer
    room = np.asarray(budget, dtype=np.float64) - B * shape.state_bytes
    avail = np.maximum(room, 0) / per_tok  # layer-tokens affordable
    full, slide, W = shape.full_layers, shape.sliding_layers, shape.window
    b = block_size or 1
    Wb = np.ceil(W / b) * b if slide else 0
    # below the window every layer grows: S ≤ avail / (full + slide)
    s_low = avail / (full + slide)
    with np.errstate(divide="ignore"):
        s_high = (avail - slide * Wb) / full if full else np.where(avail >= slide * Wb, np.inf, 0.0)
    s = np.where(s_low <= W, s_low, s_high) if slide else s_low
    return np.where(np.isfinite(s), np.floor(s / b) * b, s)


def _max_compressed_context(shape: KVShape, budget, B, block_size: int | None):
    """:func:`max_context` of a DeepSeek-V4 cache (``shape.compressed``): the windows full, the compressors' buffers
    and overlap state at their largest, then Σ entry / ratio bytes per token; a lower bound (floor(S / ratio)
    entries are at most S / ratio), in whole blocks."""
    import numpy as np

    room = np.maximum(np.asarray(budget, dtype=np.float64) / B - shape.fixed_bytes(), 0.0)
    b = block_size or 1
    return np.floor(room / shape.bytes_per_token / b) * b


def swa_bytes_per_full_token(shape: KVShape, ratio: float) -> float:
    """Bytes one full-pool token costs a hybrid sliding-window model whose SWA pool is sized at ``ratio`` SWA
    tokens per full token (SGLang, one scheduler's device; sgl-project/sglang
    python/sglang/srt/model_executor/pool_configurator.py): HybridSWAPoolConfigurator's cell size
    ``full_per_token × full_layers + ratio × swa_per_token × swa_layers`` (with no full layer, every layer
    windowed: ``swa_per_token × swa_layers``, the ratio unused); DeepSeek-V4 (DSV4PoolConfigurator's
    bytes_per_full_token): its compressed entries and indexer keys at 1/ratio of a full token each, plus ``ratio``
    × every layer's window entry."""
    per = shape.bytes_per_token_layer
    if shape.compressed:
        return shape.bytes_per_token + ratio * per * shape.sliding_layers
    if not shape.full_layers:
        return per * shape.sliding_layers
    return per * (shape.full_layers + ratio * shape.sliding_layers)


def swa_pools(shape: KVShape, budget: float, ratio: float) -> tuple[float, float]:
    """(full-pool tokens, SWA-pool tokens) SGLang sizes from ``budget`` bytes of one scheduler's device
    (pool_configurator.py, HybridSWAPoolConfigurator._solve_pool_sizes and DSV4PoolConfigurator._compute_dsv4_sizes):
    full = floor(budget / :func:`swa_bytes_per_full_token`), swa = floor(full × ``ratio``); a model with no full
    layer has only the SWA pool, of floor(budget / its bytes per token) tokens (returned as both). Page rounding
    (to 1 token by default, 256 for DeepSeek-V4) is not modelled."""
    import math

    per_full = swa_bytes_per_full_token(shape, ratio)
    if budget <= 0 or per_full <= 0:
        return 0.0, 0.0
    full = float(math.floor(budget / per_full))
    if not shape.full_layers and not shape.compressed:
        return full, full
    return full, float(math.floor(full * ratio))


def swa_fit(shape: KVShape, budget: float, ratio: float, context: float) -> tuple[int, float]:
    """(requests of ``context`` tokens one scheduler's SGLang pools hold, its full-pool tokens): each request holds
    its whole context in the full pool and at most the window in the SWA pool (the scheduler frees a running
    request's SWA slots once they leave the window: ScheduleBatch.maybe_evict_swa), so min(full // context,
    swa // min(context, W)); the eviction's slack of a page or interval beyond the window is not modelled."""
    full, _ = swa_pools(shape, budget, ratio)
    if context <= 0 or full <= 0:
        return 0, full
    return int(swa_requests(shape, budget, ratio, context)), full


def swa_requests(shape: KVShape, budget, ratio: float, context):
    """:func:`swa_fit`'s requests, elementwise over ``budget`` bytes and ``context`` tokens per request (arrays
    broadcast): the pools of :func:`swa_pools` (full = floor(budget / bytes per full token), swa = floor(full ×
    ``ratio``), one pool of ``full`` tokens with no full layer), then min(full // context, swa // min(context, W));
    0 where the budget holds no token."""
    import numpy as np

    per_full = swa_bytes_per_full_token(shape, ratio)
    ctx = np.maximum(np.asarray(context, dtype=np.float64), 1.0)
    b = np.maximum(np.asarray(budget, dtype=np.float64), 0.0)
    if per_full <= 0:
        return np.zeros(np.broadcast_shapes(b.shape, ctx.shape))
    full = np.floor(b / per_full)
    both = bool(shape.full_layers or shape.compressed)
    swa = np.floor(full * ratio) if both else full
    n = np.floor(full / ctx) if both else np.full(np.broadcast_shapes(b.shape, ctx.shape), np.inf)
    if shape.window:
        n = np.minimum(n, np.floor(swa / np.minimum(ctx, float(shape.window))))
    return np.where(full > 0, n, 0.0)
