"""Readers of the Hugging Face model types whose layers go beyond attention + FFN: DeepSeek Sparse Attention
(deepseek_v32, glm_moe_dsa), Gated DeltaNet hybrids (qwen3_next, qwen3_5_text, qwen3_5_moe_text) and Nemotron-H's
one-mixer blocks (nemotron_h). :mod:`aicalc.catalog.hf_config` dispatches to them (its ``_READERS``) and imports
this module only for those types; its helpers and checks apply as to every other type."""

from __future__ import annotations

from aicalc.catalog.arch import Arch, Indexer, LinearAttention, Mamba, MoE
from aicalc.catalog.hf_config import (
    _LAYERS,
    _expert_groups,
    _index_list,
    _mla_with_defaults,
    _Reader,
    _show,
)
from aicalc.errors import AicalcError


def _mlp_layer_types(r: _Reader, L: int, dense_default: int) -> tuple[bool, ...]:
    """Which layers are MoE: ``mlp_layer_types`` ("dense"/"sparse") when given, else the first
    ``first_k_dense_replace`` layers dense (the DeepseekV32Config / GlmMoeDsaConfig ``__post_init__``)."""
    kinds = r.cfg.get("mlp_layer_types")
    if kinds is None:
        dense = min(r.get("first_k_dense_replace", default=dense_default, minimum=0), L)
        return tuple(i >= dense for i in range(L))
    if not isinstance(kinds, list) or len(kinds) != L or any(k not in ("dense", "sparse") for k in kinds):
        raise AicalcError(f"{r.origin}: field 'mlp_layer_types' must list 'dense' or 'sparse' for each of the {L} layers")
    return tuple(kind == "sparse" for kind in kinds)


def _dsa(r: _Reader, family: str, *, defaults: dict, index_heads: int, indexer_layers: tuple[bool, ...] = ()) -> Arch:
    """DeepSeek Sparse Attention models (``DeepseekV32Config`` / ``GlmMoeDsaConfig``, transformers
    ``modeling_deepseek_v32.py`` / ``modeling_glm_moe_dsa.py``): DeepSeek-V3's MLA with a q LoRA (the indexer's
    ``wq_b`` reads its q latent, so ``q_lora_rank`` null is refused) and MoE (routed experts, shared experts, a
    bias-free router whose ``e_score_correction_bias`` is a buffer), plus a lightning indexer of ``index_n_heads`` ×
    ``index_head_dim`` keeping the ``index_topk`` best tokens per query (:class:`aicalc.catalog.arch.Indexer`). The
    MTP layer of the released files (``num_nextn_predict_layers``) is not built by transformers and not counted.
    Omitted keys take the class defaults ``defaults``."""
    L = r.get("num_hidden_layers", default=defaults["layers"])
    if "q_lora_rank" in r.cfg and r.cfg["q_lora_rank"] is None:
        raise AicalcError(f"{r.origin}: q_lora_rank null is not supported for model_type '{family}' (the sparse-"
                          "attention indexer projects its queries from MLA's q latent)")
    mla = _mla_with_defaults(r, q_lora=defaults["q_lora"], nope=defaults["nope"], v=defaults["v"])
    experts = r.get("n_routed_experts", "num_local_experts", default=defaults["experts"])
    k = r.get("num_experts_per_tok", default=8)
    moe = MoE(experts=experts, experts_per_token=k, expert_ffn=r.get("moe_intermediate_size", default=2048),
              shared_experts=r.get("n_shared_experts", default=1, minimum=0),
              **_expert_groups(r, experts, r.get("n_group", default=defaults["n_group"]),
                               r.get("topk_group", default=defaults["topk_group"]), k))
    indexer = Indexer(heads=r.get("index_n_heads", default=index_heads), head_dim=r.get("index_head_dim", default=128),
                      topk=r.get("index_topk", default=2048), q_rank=mla.q_lora_rank,
                      layers=indexer_layers or (True,) * L)
    if indexer.head_dim < mla.qk_rope_head_dim:
        raise AicalcError(f"{r.origin}: index_head_dim ({indexer.head_dim}) is smaller than qk_rope_head_dim "
                          f"({mla.qk_rope_head_dim}): the indexer applies RoPE to its first qk_rope_head_dim channels")
    A = r.get("num_attention_heads", default=defaults["heads"])
    bias = r.get("attention_bias", default=False, kind=bool)
    return Arch(
        family=family, hidden=r.get("hidden_size", default=defaults["hidden"]), layers=L, heads=A, kv_heads=A,
        head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim,
        ffn=r.get("intermediate_size", default=defaults["ffn"]), gated_ffn=True,
        vocab=r.get("vocab_size", default=defaults["vocab"]),
        tied_embeddings=r.get("tie_word_embeddings", default=False, kind=bool),
        max_context=r.get("max_position_embeddings", default=defaults["context"]), qkv_bias=bias, o_bias=bias,
        activation=r.get("hidden_act", default="silu", kind=str), moe=moe,
        moe_layers=_mlp_layer_types(r, L, 3), mla=mla, indexer=indexer,
    )


_V32 = {"layers": 61, "q_lora": 1536, "nope": 128, "v": 128, "experts": 256, "n_group": 8, "topk_group": 4,
        "heads": 128, "hidden": 7168, "ffn": 18432, "vocab": 129280, "context": 163840}
_GLM_DSA = {**_V32, "layers": 78, "q_lora": 2048, "nope": 192, "v": 256, "n_group": 1, "topk_group": 1, "heads": 64,
            "hidden": 6144, "ffn": 12288, "vocab": 154880, "context": 202752}


def _deepseek_v32(r):
    """DeepSeek-V3.2 / V3.2-Exp (``DeepseekV32Config``): an indexer on every layer (64 heads by default)."""
    return _dsa(r, "deepseek_v32", defaults=_V32, index_heads=64)


def _glm_moe_dsa(r):
    """GLM-5 (``GlmMoeDsaConfig``): DeepSeek-V3.2's layout with GLM's defaults (32 indexer heads) and cross-layer
    top-k sharing: ``indexer_types`` ("full" runs the layer's own indexer, "shared" reuses the previous full layer's
    top-k and has no indexer), else ``index_topk_pattern`` ("F"/"S" per layer), else layer i is full when
    max(i − ``index_skip_topk_offset`` + 1, 0) is a multiple of ``index_topk_freq`` (defaults 2 and 1: every layer
    full), as ``GlmMoeDsaConfig.__post_init__`` derives it."""
    L = r.get("num_hidden_layers", default=_GLM_DSA["layers"])
    kinds = r.cfg.get("indexer_types")
    if kinds is None:
        pattern = r.cfg.get("index_topk_pattern")
        if pattern is not None:
            if not isinstance(pattern, str) or any(c not in "FS" for c in pattern):
                raise AicalcError(f"{r.origin}: field 'index_topk_pattern' must be a text of 'F' and 'S' per layer")
            kinds = ["full" if c == "F" else "shared" for c in pattern]
        else:
            freq = r.get("index_topk_freq", default=1)
            offset = r.get("index_skip_topk_offset", default=2, minimum=0)
            kinds = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(L)]
    if not isinstance(kinds, list) or len(kinds) != L or any(k not in ("full", "shared") for k in kinds):
        raise AicalcError(f"{r.origin}: field 'indexer_types' must list 'full' or 'shared' for each of the {L} layers")
    if kinds[0] != "full":
        raise AicalcError(f"{r.origin}: layer 0's indexer is 'shared', with no earlier layer's top-k to reuse")
    return _dsa(r, "glm_moe_dsa", defaults=_GLM_DSA, index_heads=32,
                indexer_layers=tuple(k == "full" for k in kinds))


# Nemotron-H block kinds: the letters of ``hybrid_override_pattern`` and the names of ``layers_block_type`` (the
# current names and the legacy ones transformers remaps, ``_LEGACY_LAYER_TYPE_REMAP``), as aicalc's per-layer
# (mixer, has an FFN, the FFN is MoE)
_NEMOTRON_H_BLOCKS = {"M": ("mamba", False, False), "*": ("full_attention", False, False), "-": ("none", True, False),
                      "E": ("none", True, True)}
_NEMOTRON_H_NAMES = {"linear_attention": "M", "mamba": "M", "full_attention": "*", "attention": "*", "mlp": "-",
                     "moe": "E"}


def _nemotron_h_blocks(r: _Reader) -> str:
    """The block pattern as ``NemotronHConfig`` resolves it: ``layers_block_type`` (alias ``layer_types``) when
    given, else ``hybrid_override_pattern``, else the class default "M", "E", "*", "-"; ``num_hidden_layers`` is
    ignored (the class derives it from the pattern)."""
    listed = r.cfg.get("layers_block_type", r.cfg.get("layer_types"))
    if listed is not None:
        if not isinstance(listed, list) or not all(isinstance(t, str) and t in _NEMOTRON_H_NAMES for t in listed):
            raise AicalcError(f"{r.origin}: field 'layers_block_type' must list block kinds among "
                              f"{', '.join(_NEMOTRON_H_NAMES)}")
        pattern = "".join(_NEMOTRON_H_NAMES[t] for t in listed)
    else:
        pattern = r.get("hybrid_override_pattern", default="ME*-", kind=str)
        if any(c not in _NEMOTRON_H_BLOCKS for c in pattern):
            raise AicalcError(f"{r.origin}: field 'hybrid_override_pattern' may only hold M, *, - and E, got "
                              f"{_show(pattern)}")
    if not pattern or len(pattern) > _LAYERS:
        raise AicalcError(f"{r.origin}: the block pattern must have 1 to {_LAYERS} blocks, got {len(pattern)}")
    return pattern


def _nemotron_h(r):
    """Nemotron-H and Nemotron 3 (``NemotronHConfig``/``modeling_nemotron_h.py``): each block is one RMS pre-norm and
    ONE mixer chosen by the block pattern: a Mamba-2 mixer (M), GQA attention without biases or positional encoding
    (*; ``JambaAttention``: q/k/v/o without bias whatever ``attention_bias`` says), a plain MLP up/down with squared
    ReLU (-), or an MoE (E: ``n_routed_experts`` plain MLP experts without biases, a sigmoid router of E·H weights
    whose ``e_score_correction_bias`` is a buffer, one shared MLP of ``moe_shared_expert_intermediate_size``, and with
    ``moe_latent_size`` the experts on a latent width between two projections). The lm_head is never tied
    (``_tied_weights_keys = {}``). The ``num_nextn_predict_layers`` MTP blocks are not built by transformers and not
    counted. Class defaults for omitted keys; the ``mamba_*`` spellings (``mamba_n_groups``, ``mamba_d_conv``,
    ``mamba_chunk_size``, ``mamba_conv_bias``) win over the plain ones, as ``NemotronHConfig.__post_init__`` reads
    them."""
    if r.get("mlp_bias", default=False, kind=bool):
        raise AicalcError(f"{r.origin}: mlp_bias true is not supported for model_type 'nemotron_h' (the routed experts "
                          "have no biases while the MLPs would)")
    pattern = _nemotron_h_blocks(r)
    kinds = [_NEMOTRON_H_BLOCKS[c] for c in pattern]
    H = r.get("hidden_size", default=4096)
    A = r.get("num_attention_heads", default=32)
    # NemotronHConfig: 8 kv heads by default; an explicit null means as many as query heads
    K = A if "num_key_value_heads" in r.cfg and r.cfg["num_key_value_heads"] is None else \
        r.get("num_key_value_heads", default=8)
    dtype = r.get("mamba_ssm_cache_dtype", default="float32", kind=str)
    ssm_dtype = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(dtype)
    if ssm_dtype is None:
        raise AicalcError(f"{r.origin}: mamba_ssm_cache_dtype must be float32, bfloat16 or float16, got {_show(dtype)}")
    mamba = Mamba(heads=r.get("mamba_num_heads", default=128), head_dim=r.get("mamba_head_dim", default=64),
                  state=r.get("ssm_state_size", default=128), groups=r.get("mamba_n_groups", "n_groups", default=8),
                  conv_kernel=r.get("mamba_d_conv", "conv_kernel", default=4),
                  chunk=r.get("mamba_chunk_size", "chunk_size", default=128),
                  conv_bias=r.get("mamba_conv_bias", "use_conv_bias", default=True, kind=bool),
                  proj_bias=r.get("use_bias", default=False, kind=bool), ssm_dtype=ssm_dtype)
    if mamba.heads % mamba.groups:
        raise AicalcError(f"{r.origin}: n_groups ({mamba.groups}) does not divide the {mamba.heads} Mamba heads")
    moe = None
    if "E" in pattern:
        experts = r.get("n_routed_experts", "num_local_experts", default=8)
        k = r.get("num_experts_per_tok", default=2)
        moe = MoE(experts=experts, experts_per_token=k, expert_ffn=r.get("moe_intermediate_size", default=7688),
                  shared_experts=1, shared_expert_ffn=r.get("moe_shared_expert_intermediate_size", default=7688),
                  latent=r.get("moe_latent_size", default=None),
                  **_expert_groups(r, experts, r.get("n_group", default=1), r.get("topk_group", default=1), k))
    return Arch(
        family="nemotron_h", hidden=H, layers=len(pattern), heads=A, kv_heads=K,
        head_dim=r.get("head_dim", default=128), ffn=r.get("intermediate_size", default=21504), gated_ffn=False,
        vocab=r.get("vocab_size", default=131072), tied_embeddings=False,
        max_context=r.get("max_position_embeddings", default=4096), norms_per_layer=1,
        activation=r.get("mlp_hidden_act", default="relu2", kind=str), layer_types=tuple(t for t, _, _ in kinds),
        moe=moe, moe_layers=tuple(m for _, _, m in kinds), ffn_layers=tuple(f for _, f, _ in kinds), mamba=mamba,
    )


def _gated_delta_net(r: _Reader, *, H: int, L: int, A: int, K: int, vocab: int, ffn: int, moe: MoE | None,
                     moe_layers: tuple[bool, ...]) -> Arch:
    """The layout Qwen3-Next and Qwen3.5 share (transformers ``Qwen3NextConfig``, ``Qwen3_5TextConfig``,
    ``Qwen3_5MoeTextConfig``): ``layer_types`` names each layer "linear_attention" (Gated DeltaNet) or
    "full_attention"; without it every ``full_attention_interval``-th layer (default 4) is full attention. The full
    layers are GQA with a sigmoid output gate packed into q_proj (always built: Qwen3.5's ``attn_output_gate`` key is
    not read by transformers), QK-norm over ``head_dim`` (default 256) and partial RoPE (``partial_rotary_factor``,
    no shape). Zero-centred RMSNorms (``1 + weight``) count H weights like any RMSNorm. The MTP layer the releases
    ship (``mtp_num_hidden_layers``, ``mtp.*`` weights) is not built by transformers and not counted."""
    types = r.cfg.get("layer_types")
    if types is None:
        every = r.get("full_attention_interval", default=4)
        types = ["linear_attention" if (i + 1) % every else "full_attention" for i in range(L)]
    if not isinstance(types, list) or len(types) != L or any(t not in ("linear_attention", "full_attention")
                                                              for t in types):
        raise AicalcError(f"{r.origin}: field 'layer_types' must list 'linear_attention' or 'full_attention' for each "
                          f"of the {L} layers")
    la = LinearAttention(key_heads=r.get("linear_num_key_heads", default=16),
                         value_heads=r.get("linear_num_value_heads", default=32),
                         key_head_dim=r.get("linear_key_head_dim", default=128),
                         value_head_dim=r.get("linear_value_head_dim", default=128),
                         conv_kernel=r.get("linear_conv_kernel_dim", default=4))
    bias = r.get("attention_bias", default=False, kind=bool)
    return Arch(
        family=r.cfg["model_type"], hidden=H, layers=L, heads=A, kv_heads=K, head_dim=r.get("head_dim", default=256),
        ffn=ffn, gated_ffn=True, vocab=vocab, tied_embeddings=r.get("tie_word_embeddings", default=False, kind=bool),
        max_context=r.get("max_position_embeddings", default=32768), qkv_bias=bias, o_bias=bias, qk_norm=True,
        activation=r.get("hidden_act", default="silu", kind=str), layer_types=tuple(types), moe=moe,
        moe_layers=moe_layers, attention_gate=True, linear_attention=la,
    )


def _qwen_shared_moe(r: _Reader, experts: int, k: int) -> MoE:
    """Qwen3-Next / Qwen3.5-MoE sparse block: routed experts of ``moe_intermediate_size`` behind a bias-free router,
    one shared expert of ``shared_expert_intermediate_size`` and its sigmoid gate (``shared_expert_gate``, H → 1,
    built whatever the shared width)."""
    shared = r.get("shared_expert_intermediate_size", default=512, minimum=0)
    return MoE(experts=experts, experts_per_token=k, expert_ffn=r.get("moe_intermediate_size", default=512),
               shared_experts=1 if shared else 0, shared_expert_ffn=shared or None, shared_gate=True)


def _qwen3_next(r):
    """Qwen3-Next (``Qwen3NextConfig``/``modeling_qwen3_next.py``): a layer's FFN is the sparse block
    (:func:`_qwen_shared_moe`) when ``num_experts`` > 0, the layer is not in ``mlp_only_layers`` and sits on the
    ``decoder_sparse_step`` grid, else a dense MLP of ``intermediate_size``. Class defaults for omitted keys
    (shaped like Qwen3-Next-80B-A3B but for intermediate_size 5632 and max_position_embeddings 32768)."""
    L = r.get("num_hidden_layers", default=48)
    A = r.get("num_attention_heads", default=16)
    experts = r.get("num_experts", default=512, minimum=0)
    step = r.get("decoder_sparse_step", default=1)
    dense = set(_index_list(r, "mlp_only_layers"))
    moe_layers = tuple(experts > 0 and i not in dense and (i + 1) % step == 0 for i in range(L))
    moe = _qwen_shared_moe(r, experts, r.get("num_experts_per_tok", default=10)) if experts else None
    return _gated_delta_net(r, H=r.get("hidden_size", default=2048), L=L, A=A,
                            K=r.get("num_key_value_heads", default=2), vocab=r.get("vocab_size", default=151936),
                            ffn=r.get("intermediate_size", default=5632), moe=moe, moe_layers=moe_layers)


def _qwen3_5_text(r):
    """Qwen3.5 dense (``Qwen3_5TextConfig``/``modeling_qwen3_5.py``): a dense MLP of ``intermediate_size`` in every
    layer. Class defaults for omitted keys."""
    L = r.get("num_hidden_layers", default=32)
    return _gated_delta_net(r, H=r.get("hidden_size", default=4096), L=L, A=r.get("num_attention_heads", default=16),
                            K=r.get("num_key_value_heads", default=4), vocab=r.get("vocab_size", default=248320),
                            ffn=r.get("intermediate_size", default=12288), moe=None, moe_layers=(False,) * L)


def _qwen3_5_moe_text(r):
    """Qwen3.5 MoE (``Qwen3_5MoeTextConfig``/``modeling_qwen3_5_moe.py``): every layer's FFN is the sparse block
    (:func:`_qwen_shared_moe`; no dense layers, no ``mlp_only_layers``). Class defaults for omitted keys (shaped
    like Qwen3.5-35B-A3B)."""
    L = r.get("num_hidden_layers", default=40)
    moe = _qwen_shared_moe(r, r.get("num_experts", default=256), r.get("num_experts_per_tok", default=8))
    return _gated_delta_net(r, H=r.get("hidden_size", default=2048), L=L, A=r.get("num_attention_heads", default=16),
                            K=r.get("num_key_value_heads", default=2), vocab=r.get("vocab_size", default=248320),
                            ffn=moe.expert_ffn, moe=moe, moe_layers=(True,) * L)
