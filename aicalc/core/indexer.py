"""DeepSeek Sparse Attention's lightning indexer (DSA): the formula terms every estimator adds for it.

DSA (DeepSeek-V3.2 tech report, arXiv 2512.02556, §2.1, Eq. 1-2; DeepSeek-V3.2-Exp; GLM-5's ``glm_moe_dsa``) keeps
DeepSeek-V3's MLA and adds, per layer, a lightning indexer: index scores
``I[t, s] = Σ_j w[t, j] · ReLU(q[t, j] · k[s])`` over ``heads`` indexer heads of ``head_dim``, one shared key ``k[s]``
per cached token, then MLA attends to the ``topk`` tokens of highest score only. So per query the indexer costs
O(S) and the attention O(min(S, topk)) (the paper's "O(L²) → O(L·k)").

Notation: H hidden, L layers, S keys, T new tokens, P cached tokens, Li the layers that run their own indexer
(GLM-MoE-DSA's "shared" layers reuse the previous full layer's top-k: transformers ``indexer_types``).
"""

from aicalc.catalog.arch import Arch

# bytes the serving engines cache per token per indexer layer and 128-element block: fp8 keys plus one fp32 scale per
# block of 128 (the reference inference code's ``k_cache`` fp8 + ``k_scale_cache`` fp32; vLLM
# ``DeepseekV32IndexerCache`` / SGLang ``DSATokenToKVPool`` / TensorRT-LLM, all ``head_dim + head_dim // 128 * 4``)
QUANT_BLOCK = 128
SCALE_BYTES = 4.0


def indexer_layers(arch: Arch) -> int:
    """Li, the layers that run (and cache keys for) their own indexer; 0 without DSA."""
    ix = arch.indexer
    if ix is None:
        return 0
    return sum(ix.layers) if ix.layers else arch.layers


def indexer_layer_params(arch: Arch) -> int:
    """One indexer's parameters, as transformers' ``DeepseekV32Indexer`` builds them: ``wq_b`` q_rank·heads·head_dim,
    ``wk`` H·head_dim, ``k_norm`` a LayerNorm (weight and bias, 2·head_dim), ``weights_proj`` H·heads (no biases)."""
    ix = arch.indexer
    if ix is None:
        return 0
    d = ix.head_dim
    return ix.q_rank * ix.heads * d + arch.hidden * d + 2 * d + arch.hidden * ix.heads


def indexer_params(arch: Arch) -> int:
    """All indexers' parameters, Li · one indexer's (a shared layer has none: ``self.indexer = None``)."""
    return indexer_layers(arch) * indexer_layer_params(arch)


def indexer_key_bytes(arch: Arch, engine: str = "vllm") -> float:
    """Bytes of one token's indexer key in one indexer layer: ``vllm`` (the serving engines and the reference code)
    fp8 keys plus an fp32 scale per 128 elements, ``head_dim + head_dim/128 · 4`` (132 B at head_dim 128, whatever the
    KV dtype of the MLA cache); ``hf`` transformers' ``DynamicIndexedLayer.indexer_keys``, [B, S, head_dim] in the
    model dtype (bf16: 2·head_dim)."""
    ix = arch.indexer
    if ix is None:
        return 0.0
    if engine == "hf":
        return 2.0 * ix.head_dim
    return ix.head_dim + (ix.head_dim // QUANT_BLOCK) * SCALE_BYTES


def indexer_cache_bytes_per_token(arch: Arch, engine: str = "vllm") -> float:
    """Indexer cache bytes of one token over all layers, Li · key bytes. The indexer is replicated on every
    tensor-parallel rank (vLLM and SGLang build ``wq_b``/``wk``/``weights_proj`` as ``ReplicatedLinear``), so each
    device holds this whole cache, like MLA's latent."""
    return indexer_layers(arch) * indexer_key_bytes(arch, engine)


def score_flop_per_key(arch: Arch) -> float:
    """FLOPs of one query's index score against one key in one layer: ``2·heads·head_dim`` for the q·k products,
    then per head a ReLU, a multiply by w and an add (3·heads) (Eq. 1 of the tech report)."""
    ix = arch.indexer
    return 2.0 * ix.heads * ix.head_dim + 3.0 * ix.heads


def projection_flop_per_token(arch: Arch) -> float:
    """FLOPs of one token's indexer projections in one layer: 2·(q_rank·heads·head_dim + H·head_dim + H·heads)."""
    ix = arch.indexer
    return 2.0 * (ix.q_rank * ix.heads * ix.head_dim + arch.hidden * ix.head_dim + arch.hidden * ix.heads)


def sparse_keys(arch: Arch, past, new):
    """Σ over ``new`` queries of the keys MLA attends to per layer after ``past`` cached tokens: query i sees
    min(P + i + 1, topk) keys (the top-k of the P + i + 1 it may see; all of them while there are fewer)."""
    from aicalc.core.geometry import causal_keys

    return causal_keys(past, new, arch.indexer.topk)


def training_terms(arch: Arch, seq, causal: bool):
    """DSA's terms in a trained token's FLOPs (TT-01's ``6·N_mm + 3·attention``), for the sparse training stage
    (DeepSeek-V3.2 report §2.1.1: the indexer is warmed up over a dense stage, then every layer attends to the top-k):
    (indexer matmul weights per token over all layers, Li·(q_rank·heads·head_dim + H·head_dim + H·heads); keys per
    token and layer of the indexer's scoring; keys per token and layer of MLA). ``causal``: each token over the
    keys before it, averaged over the sequence ((S + 1)/2 for the indexer, Σ min(i, topk)/S for MLA); else the
    "full" convention, every token over S keys, min(S, topk) for MLA. The indexer is counted like every other layer
    (backward twice its forward): an upper bound, the sparse stage detaches the indexer's input so its backward
    computes weight gradients only."""
    import numpy as np

    from aicalc.core.geometry import causal_keys

    ix = arch.indexer
    S = np.asarray(seq, dtype=np.float64)
    params = indexer_layers(arch) * (ix.q_rank * ix.heads * ix.head_dim + arch.hidden * (ix.head_dim + ix.heads))
    if causal:
        return params, causal_keys(0.0, S) / S, causal_keys(0.0, S, ix.topk) / S
    return params, S, np.minimum(S, float(ix.topk))


def score_op(arch: Arch, batch, new, past, zero=0.0):
    """The indexer's scoring of one pass as an :class:`aicalc.core.forward.Op` (``per`` sequence, B times a cost of T
    and P): every new query against all P + i + 1 keys it may see, on the Li indexer layers, in fp8 (the tech report
    §2.1: "the lightning indexer can be implemented in FP8"; DeepGEMM's fp8 MQA-logits kernels in vLLM and SGLang).
    Bytes: the cached indexer keys read once per layer and the new ones written (:func:`indexer_key_bytes`), the fp8
    queries read, the fp32 logits written and read back by the top-k (8 B per query and key) and the top-k indices
    written (4 B each). Replicated over TP: every device scores its sequences whole. Two kernels per layer (logits,
    top-k)."""
    import numpy as np

    from aicalc.core.forward import Op
    from aicalc.core.geometry import causal_keys

    ix = arch.indexer
    B, T, P = (np.asarray(x, dtype=np.float64) for x in (batch, new, past))
    Li = float(indexer_layers(arch))
    keys = causal_keys(P, T)
    kb = indexer_key_bytes(arch)
    flop = B * Li * score_flop_per_key(arch) * keys
    nbytes = B * Li * ((P + 2.0 * T) * kb + T * ix.heads * ix.head_dim + 8.0 * keys
                       + 4.0 * T * np.minimum(P + T, float(ix.topk)))
    return Op("attn_indexer", "attention", flop + zero, nbytes + zero, zero, 2.0 * Li + zero, layers=Li,
              per="sequence", compute="fp8")
