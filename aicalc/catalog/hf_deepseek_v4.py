"""Read a DeepSeek-V4 ``config.json`` (``model_type: deepseek_v4``: DeepSeek-V4-Flash, -Pro, their -Base) into an Arch.

As transformers 5.23 builds it (``DeepseekV4Config.__post_init__``, ``modeling_deepseek_v4.py``): each layer's
attention kind comes from ``layer_types`` when given, else from the released files' ``compress_ratios`` (one int per
layer, 0 sliding window only, 4 CSA, 128 HCA; the files list one more entry per MTP layer, which is dropped), else
the class default (two HCA layers, then CSA and HCA alternating). Compression rates: ``compress_rates`` (a mapping),
``compress_rate_csa`` / ``compress_rate_hca``, default 4 and 128. One shared MTP layer (``num_nextn_predict_layers``)
is in the released checkpoints but not built by transformers and not counted, as for DeepSeek-V3.
"""

from __future__ import annotations

from typing import Any

from aicalc.catalog.arch import Arch, CompressedAttention, MoE
from aicalc.errors import AicalcError

_KINDS = {"sliding_attention": "sliding", "compressed_sparse_attention": "csa", "heavily_compressed_attention": "hca"}
_RATIO_KINDS = {0: "sliding", 4: "csa", 128: "hca"}  # transformers' _COMPRESS_RATIO_TO_LAYER_TYPE
# DeepSeek-V4.1's keys for layers that read another layer's compressed KV or index keys (its reference inference
# code's ``kv_source_layers``, ``index_source_layers``, ``candidate_source_layer``; Engram layers), and its
# image-text wrapper's ``text_config``: a different layer graph, refused by name
_V41_KEYS = ("text_config", "kv_source_layers", "kv_source_layer_ids", "index_source_layers",
             "index_source_layer_ids", "candidate_source_layer", "candidate_source_layer_id", "engram_layer_ids")


def _kinds(r: Any, L: int) -> tuple[str, ...]:
    explicit = r.cfg.get("layer_types")
    if explicit is not None:
        if not isinstance(explicit, list) or len(explicit) < L or any(t not in _KINDS for t in explicit[:L]):
            raise AicalcError(f"{r.origin}: field 'layer_types' must list one of {', '.join(_KINDS)} for each of "
                              f"the {L} layers")
        return tuple(_KINDS[t] for t in explicit[:L])
    ratios = r.cfg.get("compress_ratios")
    if ratios is not None:
        if not isinstance(ratios, list) or len(ratios) < L or \
                any(isinstance(x, bool) or x not in _RATIO_KINDS for x in ratios[:L]):
            raise AicalcError(f"{r.origin}: field 'compress_ratios' must give 0, 4 or 128 for each of the {L} layers")
        return tuple(_RATIO_KINDS[x] for x in ratios[:L])
    return tuple(["hca"] * min(L, 2) + ["csa" if i % 2 else "hca" for i in range(max(L - 2, 0))])


def _rates(r: Any) -> tuple[int, int]:
    rates = r.cfg.get("compress_rates")
    if rates is not None and not isinstance(rates, dict):
        raise AicalcError(f"{r.origin}: field 'compress_rates' must map attention kinds to compression rates")
    rates = rates or {}
    csa = r._check("compress_rates", rates["compressed_sparse_attention"], int) \
        if "compressed_sparse_attention" in rates else r.get("compress_rate_csa", default=4)
    hca = r._check("compress_rates", rates["heavily_compressed_attention"], int) \
        if "heavily_compressed_attention" in rates else r.get("compress_rate_hca", default=128)
    return csa, hca


def read(r: Any) -> Arch:
    """DeepSeek-V4 (``DeepseekV4Config``; defaults are the class's, V4-Flash's shape): shared-KV MQA (the modeling code
    builds one KV head whatever ``num_key_value_heads`` says, so another value is refused), a q LoRA, a grouped
    low-rank output projection and attention sinks on every layer, CSA / HCA / sliding layers
    (:class:`aicalc.catalog.arch.CompressedAttention`), mHC residual streams, and an MoE on every layer: routed
    experts, one shared expert of the same width (``DeepseekV4MLP(config)``: one, whatever ``n_shared_experts``
    says, so another value is refused) and a bias-free router (the first ``num_hash_layers`` route by a frozen
    token-id table, a buffer: the same parameters)."""
    shared = [k for k in _V41_KEYS if k in r.cfg]
    if shared:
        raise AicalcError(f"{r.origin}: {', '.join(shared)}: DeepSeek-V4.1's cross-layer KV / index sharing (decoder "
                          "layers reading the encoder's compressed KV) is not represented, and transformers 5.23 "
                          "does not build it; only DeepSeek-V4 (-Flash, -Pro) files are read")
    L = r.get("num_hidden_layers", default=43)
    H = r.get("hidden_size", default=4096)
    A = r.get("num_attention_heads", default=64)
    d = r.get("head_dim", default=512)
    if r.get("num_key_value_heads", default=1) != 1:
        raise AicalcError(f"{r.origin}: num_key_value_heads must be 1 for model_type 'deepseek_v4' (one shared KV "
                          "head: transformers' DeepseekV4Attention builds kv_proj to head_dim)")
    if r.get("n_shared_experts", default=1) != 1:
        raise AicalcError(f"{r.origin}: n_shared_experts must be 1 for model_type 'deepseek_v4' (transformers "
                          "builds one shared expert)")
    for key in ("attention_bias", "mlp_bias"):
        if r.get(key, default=False, kind=bool):
            raise AicalcError(f"{r.origin}: {key} true is not supported for model_type 'deepseek_v4'")
    g = r.get("o_groups", default=8)
    if (A * d) % g:
        raise AicalcError(f"{r.origin}: o_groups ({g}) does not divide the {A} heads × head_dim {d}")
    rope = r.cfg.get("qk_rope_head_dim")
    if rope is None:
        factor = r.cfg.get("partial_rotary_factor")
        rope = int(d * factor) if isinstance(factor, (int, float)) and not isinstance(factor, bool) else d // 8
    rope = r._check("qk_rope_head_dim", rope, int)
    if rope > d:
        raise AicalcError(f"{r.origin}: qk_rope_head_dim ({rope}) is larger than head_dim ({d})")
    csa, hca = _rates(r)
    kinds = _kinds(r, L)
    compressed = CompressedAttention(
        kinds=kinds, window=r.get("sliding_window", default=128), q_rank=r.get("q_lora_rank", default=1024),
        rope_dim=rope, o_groups=g, o_rank=r.get("o_lora_rank", default=1024), hc_mult=r.get("hc_mult", default=4),
        index_heads=r.get("index_n_heads", default=64), index_head_dim=r.get("index_head_dim", default=128),
        index_topk=r.get("index_topk", default=512), csa_ratio=csa, hca_ratio=hca,
        sinkhorn_iters=r.get("hc_sinkhorn_iters", default=20))
    F = r.get("moe_intermediate_size", default=2048)
    moe = MoE(experts=r.get("n_routed_experts", "num_local_experts", default=256),
              experts_per_token=r.get("num_experts_per_tok", default=6), expert_ffn=F, shared_experts=1)
    hashed = min(r.get("num_hash_layers", default=3, minimum=0), L)
    return Arch(
        family="deepseek_v4", hidden=H, layers=L, heads=A, kv_heads=1, head_dim=d, ffn=F, gated_ffn=True,
        vocab=r.get("vocab_size", default=129280),
        tied_embeddings=r.get("tie_word_embeddings", default=False, kind=bool),
        max_context=r.get("max_position_embeddings", default=1048576), attention_sinks=True,
        activation=r.get("hidden_act", default="silu", kind=str), moe=moe, moe_layers=(True,) * L,
        compressed=compressed,
        extra={"attention": "DeepSeek-V4 hybrid: " + ", ".join(f"{kinds.count(k)} {k}" for k in ("sliding", "csa", "hca")
                                                                if k in kinds),
               "hash_moe_layers": hashed,
               "mtp_layers": r.get("num_nextn_predict_layers", default=1, minimum=0)},
    )
