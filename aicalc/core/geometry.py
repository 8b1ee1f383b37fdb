"""Per-device geometry of a model: the one home of every quantity that more than one estimator needs.

KV heads per device, KV bytes per token and layer (MHA/GQA/MQA and MLA, any KV format), resident weight bytes
per tensor class under a storage format (one coverage rule, :func:`aicalc.core.dtypes.edge_bytes_per_param`),
keys attended over full and sliding layers and the causal sum over a pass's new queries, the ring factor of
a collective and the FFN width a token passes through in an MoE layer. Every function broadcasts over numpy
arrays of the TP degree where it takes one. Pure numpy, no I/O.
"""

from aicalc.catalog.arch import Arch
from aicalc.core.dtypes import (
    edge_bytes_per_param,
    kv_bytes_per_element,
    norm_bytes_per_param,
    weight_bytes_per_param,
)
from aicalc.core.params import attention_params, count_params
from aicalc.errors import ParameterError
from aicalc.tuples import Named


def check_tp(arch: Arch, tp: int) -> None:
    """Megatron-style tensor parallelism splits attention heads and FFN columns over ``tp`` devices.

    Query heads must divide evenly; kv heads either divide (each device holds K/tp) or, when tp > K, each kv
    head is replicated on tp/K devices (vLLM, IM-08), which needs tp % K == 0."""
    if not tp >= 1:
        raise ParameterError("tp", tp, "must be at least 1")
    if arch.heads % tp:
        raise ParameterError("tp", tp, f"does not divide the {arch.heads} attention heads")
    if arch.mla is None and arch.kv_heads % tp and tp % arch.kv_heads:
        raise ParameterError("tp", tp, f"neither divides the {arch.kv_heads} kv heads nor is a multiple of them")
    m = arch.mamba
    if m is not None and arch.mamba_layers and (m.heads % tp or m.groups % tp):
        # Megatron's and vLLM's Mamba mixer split heads and B/C groups evenly over the TP ranks
        raise ParameterError("tp", tp, f"does not divide the {m.heads} Mamba heads and their {m.groups} groups")
    la = arch.linear_attention
    if la is not None and arch.linear_layers and la.key_heads % tp:  # vLLM splits the DeltaNet heads, never copies
        raise ParameterError("tp", tp, f"does not divide the {la.key_heads} linear-attention key heads")


def check_parallel(arch: Arch, tp: int, ep: int = 1, attention_dp: int = 1, redundant: int = 0) -> None:
    """A serving replica of ``tp`` chips with ``ep``-way expert parallelism and ``attention_dp`` attention
    data-parallel groups, as SGLang (``--tp N --ep N --dp N --enable-dp-attention``), TensorRT-LLM
    (``tp_size``, ``moe_expert_parallel_size``, ``enable_attention_dp``) and vLLM (``--enable-expert-parallel``)
    lay it out: ``tp`` is the replica's chips; attention runs TP tp/attention_dp in each of attention_dp groups;
    the experts are split ep ways (ep dividing both the experts and the replica's chips), each over tp/ep chips.
    ``redundant`` R: extra replicas of the busiest experts that expert-parallel load balancers place beside the E
    experts (DeepSeek's EPLB; SGLang ``--ep-num-redundant-experts``, vLLM ``--num-redundant-experts``): ep then
    divides the E + R expert slots."""
    for name, v in (("ep", ep), ("attention_dp", attention_dp)):
        if not v >= 1:
            raise ParameterError(name, v, "must be at least 1")
    if not redundant >= 0:
        raise ParameterError("redundant_experts", redundant, "must be 0 or more")
    if redundant and (arch.moe is None or ep <= 1):
        raise ParameterError("redundant_experts", redundant, "replicates experts over expert-parallel ranks: it needs "
                             "a model with experts and ep > 1")
    if ep > 1:
        if arch.moe is None:
            raise ParameterError("ep", ep, "is expert parallelism, and this model has no experts")
        if (arch.moe.experts + redundant) % ep:
            slots = f"{arch.moe.experts} experts" + (f" + {redundant} redundant" if redundant else "")
            raise ParameterError("ep", ep, f"does not divide the {slots}")
        if tp % ep:
            raise ParameterError("ep", ep, f"must divide the {tp} chips of a replica (tp {tp}): the experts are split "
                                 "over the replica's chips")
    if tp % attention_dp:
        raise ParameterError("attention_dp", attention_dp, f"must divide the {tp} chips of a replica (tp {tp})")
    check_tp(arch, tp // attention_dp)


def kv_heads_per_device(arch: Arch, tp=1):
    """K/tp, or 1 when heads are replicated (tp > K, IM-08); MLA keeps one latent, replicated on every device.
    ``tp`` may be a numpy array."""
    import numpy as np

    if arch.mla is not None:
        return 1 if isinstance(tp, int) else np.ones_like(np.asarray(tp, dtype=np.float64))
    if isinstance(tp, int):
        return max(1, arch.kv_heads // tp)
    return np.maximum(1.0, np.floor(arch.kv_heads / np.asarray(tp, dtype=np.float64)))


def kv_vector_bytes(arch: Arch, kv_dtype: str = "bf16") -> float:
    """Bytes one kv head caches per token and layer, K and V together: ``2·d·bytes`` (IM-01); MLA caches one
    latent of ``kv_lora_rank + qk_rope_head_dim`` elements instead (IM-06, DeepSeek-V2 §2.1), no ×2; DeepSeek-V4 one
    ``head_dim`` vector that is both key and value (``DeepseekV4HCACache.update``: ``self.values = self.keys``)."""
    if arch.mla is not None:
        elems = arch.mla.kv_lora_rank + arch.mla.qk_rope_head_dim
        return elems * kv_bytes_per_element(kv_dtype, elems)
    if arch.compressed is not None:  # DeepSeek-V4's shared-KV MQA: one head_dim vector read as key and value
        return arch.head_dim * kv_bytes_per_element(kv_dtype, arch.head_dim)
    return 2 * arch.head_dim * kv_bytes_per_element(kv_dtype, arch.head_dim)


def kv_bytes_per_token_layer(arch: Arch, kv_dtype: str = "bf16", tp=1):
    """Cached bytes of one token in one layer on one device."""
    return kv_heads_per_device(arch, tp) * kv_vector_bytes(arch, kv_dtype)


def cache_bytes_per_token_layer(arch: Arch, kv_dtype: str = "bf16", tp=1, engine: str = "vllm"):
    """Everything an engine caches per token and layer on one device: the KV (:func:`kv_bytes_per_token_layer`)
    plus, for a DSA model, the lightning indexer's keys spread over the softmax-attention layers (Li/La of
    :func:`aicalc.core.indexer.indexer_key_bytes`: whole on every device, the indexer is replicated over TP)."""
    if arch.compressed is not None:  # DeepSeek-V4: the long-run growth, compressed entries and indexer keys (whole on
        # every device, one KV head), spread over the layers; the windows' fixed ≤ W tokens per layer left out
        from aicalc.core.compressed_attention import cache_groups

        per = kv_bytes_per_element(kv_dtype, arch.head_dim)
        return sum(entry / ratio for ratio, entry, _, _ in cache_groups(arch, per, engine)) / arch.attention_layers
    kv = kv_bytes_per_token_layer(arch, kv_dtype, tp)
    if arch.indexer is None:
        return kv
    from aicalc.core.indexer import indexer_cache_bytes_per_token

    return kv + indexer_cache_bytes_per_token(arch, engine) / arch.attention_layers


def tokens_held(full_layers: int, sliding_layers: int, window: int, context):
    """Σ over layers of the tokens a layer holds (or one query attends to) at ``context`` tokens: full layers
    all of them, sliding-window layers at most the window (IM-09)."""
    import numpy as np

    S = np.asarray(context, dtype=np.float64)
    held = full_layers * S
    if sliding_layers:
        held = held + sliding_layers * np.minimum(S, window)
    return held


def causal_keys(past, new, window: int = 0):
    """Σ over ``new`` queries of the keys each attends to, causally after ``past`` cached tokens: query i sees
    P + i + 1 keys, capped at the window (Korthikanti et al. 2022; a full prefill sums T(T+1)/2)."""
    import numpy as np

    P, T = np.asarray(past, dtype=np.float64), np.asarray(new, dtype=np.float64)
    full = T * P + T * (T + 1.0) / 2.0
    if not window:
        return full
    W = float(window)
    a, b = P + 1.0, P + T  # keys of the first and of the last new query before the cap
    part = (a + W) * (W - a + 1.0) / 2.0 + (b - W) * W  # grows until the window, then W per query
    return np.where(b <= W, full, np.where(a >= W, W * T, part))


def ring_factor(n):
    """Bytes each rank sends per byte of payload in a ring all-reduce, ``2(n − 1)/n`` (Patarasuk & Yuan 2009);
    an all-gather or reduce-scatter alone is half of it."""
    import numpy as np

    n = np.asarray(n, dtype=np.float64)
    return 2.0 * (n - 1.0) / np.maximum(n, 1.0)


def moe_active_ffn(arch: Arch) -> int:
    """Intermediate width a token passes through in an MoE layer: k routed experts plus the shared ones."""
    e = arch.moe
    return e.expert_ffn * e.experts_per_token + e.shared_ffn


def attention_params_per_device(arch: Arch, tp=1):
    """One layer's attention parameters on one device: q and o split over ``tp``; k/v split by kv head, or
    replicated when tp > K (IM-08); MLA's down-projections (q_a, kv_a and their norms) replicated."""
    total = attention_params(arch)
    H = arch.hidden
    if arch.compressed is not None:  # DeepSeek-V4: q_a (+ norm) and the one shared kv_proj (+ norm) replicated
        replicated = H * arch.compressed.q_rank + arch.compressed.q_rank + H * arch.head_dim + arch.head_dim
        return (total - replicated) / tp + replicated
    if arch.mla is not None:
        m = arch.mla
        replicated = H * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
        if m.q_lora_rank:
            replicated += H * m.q_lora_rank + m.q_lora_rank
        return (total - replicated) / tp + replicated
    kv = 2 * (H * arch.kv_dim + (arch.kv_dim if arch.qkv_bias else 0))
    return (total - kv) / tp + kv * kv_heads_per_device(arch, tp) / arch.kv_heads


def _indexer_params(arch: Arch) -> int:
    """DSA's indexer weights, whole on every device: vLLM and SGLang build ``wq_b``, ``wk`` and ``weights_proj`` as
    ``ReplicatedLinear`` (:mod:`aicalc.core.indexer`); DeepSeek-V4's KV compressors and CSA indexers, whole on every
    device too (one shared KV head: transformers' TP plan leaves the attention replicated)."""
    if arch.compressed is not None:
        from aicalc.core.compressed_attention import all_compressor_params

        return all_compressor_params(arch)
    if arch.indexer is None:
        return 0
    from aicalc.core.indexer import indexer_params

    return indexer_params(arch)


def mixer_params_per_device(arch: Arch, tp=1):
    """All layers' token mixers on one device: the softmax-attention layers' (:func:`attention_params_per_device`),
    the linear-attention layers' (:func:`aicalc.core.linear_attention.layer_params_per_device`) and the Mamba-2
    layers' (:func:`aicalc.core.mamba.params`, every tensor split with the heads and groups, as Megatron's and vLLM's
    mixer shard them: :func:`check_tp`)."""
    total = arch.attention_layers * attention_params_per_device(arch, tp)
    if arch.linear_layers:
        from aicalc.core.linear_attention import layer_params_per_device

        total = total + arch.linear_layers * layer_params_per_device(arch, tp)
    if arch.mamba_layers:
        from aicalc.core.mamba import params

        total = total + params(arch) / tp
    return total


class WeightBytes(Named):
    """Resident weight bytes on one device, per tensor class (arrays where ``tp`` is one)."""

    embedding: object  # token (+ position) table
    lm_head: object  # 0 when tied to the embedding
    attention: object  # all layers
    ffn: object  # all layers: dense FFNs, experts, routers
    norms: object

    @property
    def total(self):
        return self.embedding + self.lm_head + self.attention + self.ffn + self.norms


def weight_bytes(arch: Arch, dtype: str = "bf16", tp=1, bytes_per_param: float | None = None,
                 edge_bpp: float | None = None, expert_bpp: float | None = None, attention_dp=1,
                 redundant=0) -> WeightBytes:
    """Weights held by one device under tensor parallelism (Megatron-LM, Shoeybi et al. 2019 §3; vLLM's parallel
    linear layers): q, o and FFN/expert matrices, the embedding and the LM head split over ``tp``; norms
    replicated; the format covers the block linears (and every matrix for GGUF). ``bytes_per_param``
    overrides the format's default (int4 with another group size, a checkpoint's measured bytes), ``edge_bpp``
    the embedding's and LM head's, ``expert_bpp`` the routed experts' (gpt-oss's MXFP4 experts).

    ``attention_dp`` D: attention data parallelism inside a replica of ``tp`` chips (SGLang ``--enable-dp-attention``,
    TensorRT-LLM ``enable_attention_dp``): everything but the routed experts is replicated over D groups of tp/D
    chips (split tp/D ways), the routed experts are split over all tp chips (expert parallelism ep × expert TP
    tp/ep; the bytes do not depend on the split); ``redundant`` R extra expert replicas (:func:`check_parallel`)
    add R/E of the routed experts' bytes."""
    from aicalc.core.params import routed_expert_params

    n = count_params(arch)
    q = weight_bytes_per_param(dtype) if bytes_per_param is None else bytes_per_param
    edge = edge_bytes_per_param(dtype, q) if edge_bpp is None else edge_bpp
    routed = routed_expert_params(arch)
    slots = routed * (1.0 + redundant / arch.moe.experts) if (redundant and arch.moe is not None) else routed
    qe = q if expert_bpp is None else expert_bpp
    ta = tp / attention_dp if not (isinstance(attention_dp, int) and attention_dp == 1) else tp
    return WeightBytes(embedding=n.embedding / ta * edge, lm_head=n.lm_head / ta * edge,
                       attention=(mixer_params_per_device(arch, ta) + _indexer_params(arch)) * q,
                       ffn=(n.ffn - routed) / ta * q + slots / tp * qe,
                       norms=n.norms * norm_bytes_per_param(dtype))


def weight_bytes_per_device(arch: Arch, dtype: str = "bf16", tp=1, bytes_per_param: float | None = None,
                            edge_bpp: float | None = None, expert_bpp: float | None = None, attention_dp=1,
                            redundant=0):
    """Total resident weight bytes on one device (see :func:`weight_bytes`)."""
    return weight_bytes(arch, dtype, tp, bytes_per_param, edge_bpp, expert_bpp, attention_dp, redundant).total
