"""KV-cache bytes for batches of sequences: exact per layer kind, per device, paged or not.

Per token and layer (IM-01): ``2 · K · d · bytes`` for MHA/GQA/MQA, with d the explicit head_dim;
MLA (IM-06, DeepSeek-V2 §2.1): one latent of ``kv_lora_rank + qk_rope_head_dim`` elements, no ×2; a DSA model
(DeepSeek-V3.2, GLM-5) also caches its lightning indexer's key per token and indexer layer
(:mod:`aicalc.core.indexer`), counted in the per-layer bytes and reported on its own as ``indexer_bytes_per_token``.
A sliding-window layer holds at most its window of tokens (IM-09); the others hold the whole
context; a layer without attention (a Mamba-2 or MLP/MoE-only block of a hybrid) holds no K/V. Paged allocation
(vLLM, IM-10/IM-11) rounds every sequence up to whole blocks of ``block_size`` tokens per layer. A recurrent layer
caches no tokens: it holds a fixed state per sequence, conv + recurrent, whatever the context: a linear-attention
layer (Gated DeltaNet: Qwen3-Next, Qwen3.5; :func:`aicalc.core.linear_attention.state_bytes`) or a Mamba-2 layer
(Nemotron-H; :func:`aicalc.core.mamba.state_bytes_per_sequence`). Their sum is ``KVShape.state_bytes`` (per
sequence and device), counted with the KV bytes and reported beside them as ``state_bytes``. Everything
broadcasts over numpy arrays of batch and context.
"""

from aicalc.catalog.arch import Arch
from aicalc.core.geometry import cache_bytes_per_token_layer, tokens_held
from aicalc.tuples import Named


class KVShape(Named):
    """Per-device cache geometry of one model under one kv dtype and TP degree."""

    bytes_per_token_layer: float  # one token, one layer, one device
    full_layers: int
    sliding_layers: int
    window: int  # tokens a sliding layer keeps at most (0 when none)
    # of bytes_per_token: a DSA model's indexer keys, one token over all layers, one device (already in the per-layer
    # bytes, spread over the softmax-attention layers; 0 without an indexer)
    indexer_bytes_per_token: float = 0.0
    # one sequence's recurrent state over all linear-attention and Mamba layers, one device (0: none)
    state_bytes: float = 0.0
    # DeepSeek-V4's compressed caches, one sequence, one device: (ratio, bytes per entry over the layers of that
    # ratio, bytes per token waiting in the compressors' buffers, overlap-state bytes once S ≥ ratio)
    # (:func:`aicalc.core.compressed_attention.cache_groups`); () for every other model
    compressed: tuple = ()

    @property
    def bytes_per_token(self) -> float:
        """Marginal bytes of one more token on every layer (no window cap), one device; with compressed caches
        (DeepSeek-V4, whose every layer is windowed) the long-run growth, Σ entry bytes / ratio."""
        if self.compressed:
            return sum(entry / ratio for ratio, entry, _, _ in self.compressed)
        return self.bytes_per_token_layer * (self.full_layers + self.sliding_layers)

    def fixed_bytes(self, context=None) -> float:
        """Bytes one sequence holds beside :attr:`bytes_per_token` × its tokens, one device: the recurrent state
        (:attr:`state_bytes`) and, for DeepSeek-V4 (whose growth leaves the windows out), every layer's window of
        min(``context``, W) tokens and the compressors' buffered tokens and overlap state (``hf`` only) at
        ``context`` tokens (None: a full window and the buffers at their largest, ratio − 1 tokens)."""
        if not self.compressed:
            return self.state_bytes
        held = self.window if context is None else min(float(context), self.window)
        waiting = sum(((ratio - 1) * buffer + overlap) if context is None else
                      (float(context) % ratio * buffer + (context >= ratio) * overlap)
                      for ratio, _, buffer, overlap in self.compressed)
        return self.state_bytes + self.sliding_layers * held * self.bytes_per_token_layer + waiting


ENGINES = ("vllm", "hf")


def kv_shape(arch: Arch, kv_dtype: str = "bf16", tp: int = 1, engine: str = "vllm") -> KVShape:
    """Cache geometry as an engine holds it.

    ``vllm`` (also transformers' StaticCache): a sliding layer keeps W tokens (a rolling buffer, IM-09).
    ``hf``, transformers' default DynamicCache: a sliding layer keeps W − 1 tokens after a forward
    (the new token attends to W − 1 cached ones), and Falcon's new decoder architecture caches K/V
    broadcast to all A query heads (``torch.broadcast_to`` in ``FalconAttention``), not its K kv heads.
    A DSA indexer's keys: fp8 with fp32 block scales under ``vllm`` (the serving engines), the model dtype under
    ``hf`` (:func:`aicalc.core.indexer.indexer_key_bytes`).

    Mamba layers' state: the conv state in the activations' 16 bits (transformers' ``conv_states`` and vLLM's
    take the model dtype), the SSM state in the model's ``ssm_dtype`` (vLLM's ``mamba_ssm_cache_dtype``) under
    ``vllm`` and in fp32 under ``hf`` (transformers' chunk scan upcasts and caches its fp32 final state whatever
    the config says).
    """
    from aicalc.errors import check_choice

    check_choice("engine", engine, ENGINES)
    if arch.compressed is not None:
        return _compressed_shape(arch, kv_dtype, engine)
    if engine == "hf" and arch.family == "falcon" and arch.kv_heads not in (1, arch.heads):
        arch = arch._replace(kv_heads=arch.heads)
    per_layer = cache_bytes_per_token_layer(arch, kv_dtype, tp, engine)
    sliding = arch.sliding_layers
    keep = arch.sliding_window - (1 if engine == "hf" else 0) if sliding else 0
    index = 0.0
    if arch.indexer is not None:
        from aicalc.core.indexer import indexer_cache_bytes_per_token

        index = indexer_cache_bytes_per_token(arch, engine)
    state = 0.0
    if arch.linear_layers:
        from aicalc.core.linear_attention import state_bytes

        state = state_bytes(arch, tp, engine)
    if arch.mamba_layers:
        from aicalc.core.mamba import state_bytes_per_sequence

        state += state_bytes_per_sequence(arch, 2.0, 4.0 if engine == "hf" else None, tp)
    return KVShape(per_layer, arch.attention_layers - sliding, sliding, keep, index, state)


def _compressed_shape(arch: Arch, kv_dtype: str, engine: str) -> KVShape:
    """DeepSeek-V4 (:mod:`aicalc.core.compressed_attention`): every layer's window of the one shared KV head (d
    elements per token; whole on every TP device, as an MQA head is), the "sliding" layers' twice under ``hf``
    (transformers stores their keys and values apart), plus the compressed entries, the CSA indexer keys and, under
    ``hf``, the compressors' buffered tokens and overlap state."""
    from aicalc.core.compressed_attention import cache_groups, indexer_bytes_per_token, window_layers
    from aicalc.core.geometry import kv_vector_bytes

    per_layer = kv_vector_bytes(arch, kv_dtype)
    keep = arch.compressed.window - (1 if engine == "hf" else 0)
    return KVShape(per_layer, 0, window_layers(arch, engine), keep, indexer_bytes_per_token(arch, engine), 0.0,
                   cache_groups(arch, per_layer / arch.head_dim, engine))


def kv_bytes_per_token(arch: Arch, kv_dtype: str = "bf16") -> float:
    """All layers, one sequence, one device without TP, no window cap (the presets' figure; a recurrent
    layer's fixed state is not per token and not in it)."""
    return kv_shape(arch, kv_dtype, 1).bytes_per_token


def cached_tokens(shape: KVShape, context):
    """Tokens held per sequence, summed over layers: full layers S, sliding layers min(S, W)."""
    return tokens_held(shape.full_layers, shape.sliding_layers, shape.window, context)


def held_tokens(shape: KVShape, context, block_size: int | None = None, out=None, each: float = 1.0):
    """Tokens held per sequence, summed over layers, as a new array (or into ``out``, which may be ``context``
    itself): :func:`cached_tokens`, or with ``block_size`` every layer's tokens rounded up to whole blocks (vLLM's
    paged allocation, IM-10/IM-11); each layer's token counted as ``each`` (``shape.bytes_per_token_layer``: one
    sequence's bytes, with the factors multiplied once instead of at every point)."""
    import math

    import numpy as np

    S = np.asarray(context, dtype=np.float64)
    sliding = shape.sliding_layers
    # in place where a temporary is ours; whole numbers below 2⁵³, so every product is exact in any order
    if block_size:
        # a sliding layer's blocks, ceil(min(S, W) / b), are min(ceil(S / b), ceil(W / b)): a correctly rounded
        # division and ceil are both monotone, so the full layers' blocks give the sliding layers' too
        blocks = np.divide(S, block_size, out=out)
        blocks = np.ceil(blocks, out=blocks if isinstance(blocks, np.ndarray) else None)
        window = np.minimum(blocks, float(math.ceil(shape.window / block_size))) if sliding else None
        held = np.multiply(blocks, block_size * shape.full_layers * each,
                           out=blocks if isinstance(blocks, np.ndarray) else None)
        per_window = block_size * sliding * each
    else:
        window = np.minimum(S, float(shape.window)) if sliding else None  # before ``out`` (context itself?) changes
        held = np.multiply(S, shape.full_layers * each, out=out)  # cached_tokens' sum, S · full + min(S, W) · sliding
        per_window = sliding * each
    if window is not None:
        window *= per_window
        held += window
    if shape.compressed:
        held += _compressed_held(shape, S, block_size, each)
    return held


def _compressed_held(shape: KVShape, S, block_size: int | None, each: float):
    """DeepSeek-V4's compressed caches at ``S`` tokens in units of ``shape.bytes_per_token_layer`` (times ``each``):
    floor(S / ratio) entries (paged: whole blocks of ``block_size`` entries), the S mod ratio tokens buffered and the
    overlap state once a window has closed."""
    import numpy as np

    total = np.zeros_like(S)
    for ratio, entry, buffer, overlap in shape.compressed:
        n = np.floor_divide(S, ratio)
        if block_size:
            n = np.ceil(n / block_size) * block_size
        total = total + n * entry
        if buffer:
            total = total + np.mod(S, ratio) * buffer
        if overlap:
            total = total + (S >= ratio) * overlap
    return total * (each / shape.bytes_per_token_layer)


def kv_cache_bytes(shape: KVShape, batch, context, block_size: int | None = None):
    """Bytes per device for ``batch`` sequences of ``context`` tokens, recurrent states included; paged
    when ``block_size``."""
    return bytes_of(shape, batch, held_tokens(shape, context, block_size))


def bytes_of(shape: KVShape, batch, held, out=None):
    """Bytes per device for ``batch`` sequences each holding ``held`` tokens over all layers (:func:`held_tokens`)
    and each its recurrent state (``shape.state_bytes``); into ``out`` when given (``held`` itself, say, when
    the caller has no more use for it)."""
    import numpy as np

    B = np.asarray(batch, dtype=np.float64)
    out = np.multiply(B, held, out=out)
    out *= shape.bytes_per_token_layer
    if shape.state_bytes:
        out += B * shape.state_bytes
    return out
