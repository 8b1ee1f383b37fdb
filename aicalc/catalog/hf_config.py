"""Read a Hugging Face ``config.json`` (a dict) into an :class:`Arch`.

Supported ``model_type`` values: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma2,
gemma3_text, gemma3 (image-text wrapper: the language model in ``text_config`` is sized), phi3, gpt2, falcon,
bloom, deepseek_v2, deepseek_v3, kimi_k2 (Kimi K2: DeepSeek-V3's architecture), glm4_moe (GLM-4.5/4.6/4.7),
glm4_moe_lite (GLM-4.7-Flash), deepseek_v32 (DeepSeek-V3.2, -Exp), glm_moe_dsa (GLM-5), minimax_m2, gpt_oss, llama4_text,
llama4 (wrapper: ``text_config``), olmo2, granite, cohere, cohere2, qwen3_next (Qwen3-Next), qwen3_5_text and
qwen3_5_moe_text (Qwen3.5 dense and MoE) with their image-text wrappers qwen3_5 and qwen3_5_moe (``text_config``
sized): Gated DeltaNet linear-attention layers between gated softmax-attention layers; nemotron_h (Nemotron-H /
Nemotron 3: hybrid Mamba-2 blocks); deepseek_v4 (DeepSeek-V4-Flash/-Pro:
compressed sparse attention, :mod:`aicalc.catalog.hf_deepseek_v4`); bert and roberta (encoders, sized as the
sequence classifier ``AutoModelForSequenceClassification`` builds: ``Arch.encoder``).
Types whose layers aicalc's cost model does not represent are refused with the rest (:data:`NOT_REPRESENTED`
names them: other linear attentions, other state-space layers). Keys that a real
config.json may leave out take the defaults of the transformers configuration class of that family (e.g.
Gemma-2 ties embeddings, Falcon's FFN is 4·H, DeepSeek-V2's q_lora_rank is 1536 unless set to null); keys no
default exists for must be present, and a missing one is reported by name.
"""

from __future__ import annotations

from typing import Any

from aicalc.catalog.arch import MLA, Arch, MoE
from aicalc.errors import AicalcError

SUPPORTED = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma2", "gemma3_text", "gemma3",
             "phi3", "gpt2", "falcon", "bloom", "deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe", "glm4_moe_lite",
             "deepseek_v32", "glm_moe_dsa", "minimax_m2", "gpt_oss", "llama4_text", "llama4", "olmo2", "granite", "cohere",
             "cohere2", "qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "nemotron_h",
             "deepseek_v4", "bert", "roberta")
# Deployed model types whose layers aicalc does not represent (no cost-model terms for them), named in the refusal so
# that the reason is plain: other linear attentions (Kimi Linear, MiniMax-M1/Text-01) and the other Mamba/state-space
# hybrids. (DeepSeek-V4's compressed sparse attention is represented: Arch.compressed, aicalc/catalog/hf_deepseek_v4.py.) (Gated DeltaNet is represented: Arch.linear_attention; so is
# DeepSeek-V3.2's and GLM-5's sparse-attention indexer: Arch.indexer; and Nemotron-H's Mamba-2 blocks: Arch.mamba.)
NOT_REPRESENTED = {
    "kimi_linear": "Kimi delta attention (linear)", "minimax": "lightning (linear) attention",
    "mamba": "state-space layers", "mamba2": "state-space layers", "jamba": "Mamba layers",
    "falcon_h1": "Mamba layers", "granitemoehybrid": "Mamba layers",
}
# Image-text wrappers whose language model sits in ``text_config``: aicalc sizes that model only (the vision tower
# and projector are not counted), as transformers' ``AutoModelForCausalLM`` of the text config builds it.
WRAPPERS = {"gemma3": "gemma3_text", "llama4": "llama4_text", "qwen3_5": "qwen3_5_text",
            "qwen3_5_moe": "qwen3_5_moe_text"}

# Caps on model dimensions (docs/robustness.md): ~30-100x the largest released models, so that a typo or a
# hostile file is refused before any per-layer table is built or an estimate leaves exact arithmetic.
_LAYERS, _WIDTH, _HEADS, _FFN, _EXPERTS, _TOKENS = 4096, 2**18, 2**14, 2**20, 2**16, 2**30
MAX_DIM = {
    "num_hidden_layers": _LAYERS, "n_layer": _LAYERS, "decoder_sparse_step": _LAYERS,
    "hidden_size": _WIDTH, "n_embd": _WIDTH, "n_embed": _WIDTH, "q_lora_rank": _WIDTH, "kv_lora_rank": _WIDTH,
    "num_attention_heads": _HEADS, "n_head": _HEADS, "num_key_value_heads": _HEADS, "num_kv_heads": _HEADS,
    "n_head_kv": _HEADS, "head_dim": _HEADS, "qk_nope_head_dim": _HEADS, "qk_rope_head_dim": _HEADS,
    "v_head_dim": _HEADS, "num_ln_in_parallel_attn": 16, "index_n_heads": _HEADS, "index_head_dim": _HEADS,
    "index_topk": _TOKENS,
    "intermediate_size": _FFN, "n_inner": _FFN, "ffn_hidden_size": _FFN, "moe_intermediate_size": _FFN,
    "shared_expert_intermediate_size": _FFN, "vocab_size": 2**24,
    "num_local_experts": _EXPERTS, "num_experts": _EXPERTS, "n_routed_experts": _EXPERTS,
    "num_experts_per_tok": _EXPERTS, "n_shared_experts": _EXPERTS, "n_group": _EXPERTS, "topk_group": _EXPERTS,
    "max_position_embeddings": _TOKENS, "n_positions": _TOKENS, "seq_length": _TOKENS, "sliding_window": _TOKENS,
    "intermediate_size_mlp": _FFN, "interleave_moe_layer_step": _LAYERS, "no_rope_layer_interval": _LAYERS,
    "attention_chunk_size": _TOKENS, "sliding_window_pattern": _LAYERS, "full_attention_interval": _LAYERS,
    "linear_num_key_heads": _HEADS, "linear_num_value_heads": _HEADS, "linear_key_head_dim": _HEADS,
    "linear_value_head_dim": _HEADS, "linear_conv_kernel_dim": 64,
    "mamba_num_heads": _HEADS, "mamba_head_dim": _HEADS, "ssm_state_size": _HEADS, "n_groups": _HEADS,
    "mamba_n_groups": _HEADS, "conv_kernel": 64, "mamba_d_conv": 64, "chunk_size": _TOKENS, "mamba_chunk_size": _TOKENS,
    "moe_shared_expert_intermediate_size": _FFN, "moe_latent_size": _WIDTH,
    "type_vocab_size": 2**16, "num_labels": 2**20,
}
MAX_OTHER = 2**30  # any other integer field
MAX_PARAMS = 10**15  # parameters of the whole model (the largest released: ~2·10^12)


def _show(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # an integer of more digits than Python prints
        return "an integer of thousands of digits"
    return text if len(text) <= 60 else text[:59] + "…"


class _Reader:
    def __init__(self, cfg: dict[str, Any], origin: str):
        self.cfg, self.origin = cfg, origin

    def get(self, *keys: str, default: Any = ..., kind: type = int, minimum: int = 1) -> Any:
        """First present key among ``keys`` (aliases); ``default`` when none is; error when no default."""
        for key in keys:
            value = self.cfg.get(key)
            if value is not None:
                return self._check(key, value, kind, minimum)
        if default is ...:
            raise AicalcError(f"{self.origin}: missing field '{keys[0]}' for model_type '{self.cfg.get('model_type')}'")
        return default

    def _check(self, key: str, value: Any, kind: type, minimum: int = 1) -> Any:
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                what = "a positive integer" if minimum == 1 else f"an integer ≥ {minimum}"
                raise AicalcError(f"{self.origin}: field '{key}' must be {what}, got {_show(value)}")
            cap = MAX_DIM.get(key, MAX_OTHER)
            if value > cap:
                raise AicalcError(f"{self.origin}: field '{key}' is {_show(value)}, above aicalc's cap of {cap:,} "
                                  "for a model dimension (see docs/robustness.md)")
        elif kind is bool and not isinstance(value, bool):
            raise AicalcError(f"{self.origin}: field '{key}' must be true or false, got {_show(value)}")
        elif kind is str and not (isinstance(value, str) and len(value) <= 200):
            raise AicalcError(f"{self.origin}: field '{key}' must be a short text, got {_show(value)}")
        return value


def arch_from_config(cfg: dict[str, Any], origin: str = "config.json") -> Arch:
    if not isinstance(cfg, dict):
        raise AicalcError(f"{origin}: expected a JSON object with model fields")
    model_type = cfg.get("model_type")
    if model_type is None:
        raise AicalcError(f"{origin}: missing field 'model_type'")
    if not isinstance(model_type, str) or model_type not in SUPPORTED:
        shown = model_type if isinstance(model_type, str) and len(model_type) <= 60 else _show(model_type)
        known = isinstance(model_type, str) and model_type in NOT_REPRESENTED
        why = f"{NOT_REPRESENTED[model_type]}, not represented; " if known else ""
        raise AicalcError(f"{origin}: unsupported model_type '{shown}' ({why}supported: {', '.join(SUPPORTED)})")
    if model_type in WRAPPERS:
        return _wrapped_text_model(cfg, model_type, origin)
    r = _Reader(cfg, origin)
    arch = _READERS[model_type](r)
    _check_shapes(arch, origin)
    from aicalc.core.params import count_params

    total = count_params(arch).total
    if total > MAX_PARAMS:
        raise AicalcError(f"{origin}: {total:.3g} parameters is above aicalc's cap of {MAX_PARAMS:.0e} for one "
                          "model (see docs/robustness.md)")
    return arch


def _wrapped_text_model(cfg: dict[str, Any], model_type: str, origin: str) -> Arch:
    """The language model of an image-text wrapper (Gemma3Config, Llama4Config): its ``text_config`` read as the
    text model type, as ``AutoModelForCausalLM.from_config(config.get_text_config())`` builds it."""
    text = cfg.get("text_config")
    if text is None:
        raise AicalcError(f"{origin}: missing field 'text_config' for model_type '{model_type}' (the language model)")
    if not isinstance(text, dict):
        raise AicalcError(f"{origin}: field 'text_config' must be a JSON object with the language model's fields")
    arch = arch_from_config({**text, "model_type": WRAPPERS[model_type]}, f"{origin} text_config")
    return arch._replace(extra={**arch.extra, "sized": f"text_config of the {model_type} wrapper (vision tower not counted)"})


def _check_shapes(arch: Arch, origin: str) -> None:
    if arch.head_dim < 1:
        raise AicalcError(f"{origin}: hidden size {arch.hidden} is smaller than the {arch.heads} attention heads "
                          "(head_dim would be 0)")
    if arch.moe is not None and arch.moe.experts_per_token > arch.moe.experts:
        raise AicalcError(f"{origin}: {arch.moe.experts_per_token} experts per token exceed the "
                          f"{arch.moe.experts} experts")
    la = arch.linear_attention
    if la is not None and la.value_heads % la.key_heads:
        raise AicalcError(f"{origin}: linear_num_value_heads ({la.value_heads}) is not a multiple of "
                          f"linear_num_key_heads ({la.key_heads})")
    if arch.heads % arch.kv_heads:
        raise AicalcError(f"{origin}: num_attention_heads ({arch.heads}) is not a multiple of the kv heads ({arch.kv_heads})")
    if len(arch.layer_types) != arch.layers:
        raise AicalcError(f"{origin}: layer_types has {len(arch.layer_types)} entries for {arch.layers} layers")
    kinds = {"full_attention", "sliding_attention"} | ({"mamba", "none"} if arch.family in _HYBRID else set()) | \
        ({"linear_attention"} if arch.linear_attention is not None else set())
    bad = set(arch.layer_types) - kinds
    if bad:
        raise AicalcError(f"{origin}: layer_types holds unknown kinds {_show(sorted(bad))}")
    if arch.sliding_layers and not arch.sliding_window:
        raise AicalcError(f"{origin}: layer_types names sliding layers but sliding_window is not set")
    _check_hybrid(arch, origin)


def _check_hybrid(arch: Arch, origin: str) -> None:
    """Per-layer fields of a one-mixer-per-block hybrid agree: every layer has a mixer or an FFN, an MoE layer has
    an FFN, Mamba layers come with their mixer's shape."""
    if len(arch.ffn_layers) != arch.layers or len(arch.moe_layers) != arch.layers:
        raise AicalcError(f"{origin}: per-layer FFN kinds cover {len(arch.ffn_layers)} of {arch.layers} layers")
    if any(t == "none" and not f for t, f in zip(arch.layer_types, arch.ffn_layers, strict=True)):
        raise AicalcError(f"{origin}: a layer has neither a mixer nor an FFN")
    if any(m and not f for m, f in zip(arch.moe_layers, arch.ffn_layers, strict=True)):
        raise AicalcError(f"{origin}: an MoE layer without an FFN")
    if arch.mamba_layers and arch.mamba is None:
        raise AicalcError(f"{origin}: Mamba layers without the Mamba mixer's shape")


def _layer_types(r: _Reader, layers: int, window: int | None, default_pattern) -> tuple[str, ...]:
    explicit = r.cfg.get("layer_types")
    if explicit is not None:
        if not isinstance(explicit, list) or not all(isinstance(t, str) for t in explicit):
            raise AicalcError(f"{r.origin}: field 'layer_types' must be a list of layer kinds (texts)")
        if len(explicit) != layers:
            raise AicalcError(f"{r.origin}: layer_types has {len(explicit)} entries for {layers} layers")
        return tuple(explicit)
    if window is None:
        return ("full_attention",) * layers
    return tuple("sliding_attention" if default_pattern(i) else "full_attention" for i in range(layers))


def _llama_like(r: _Reader, *, window_default=None, tied_default=False, head_dim_default=None, qkv_bias=None,
                norms=2, pattern=lambda i: True, window=...) -> dict[str, Any]:
    H = r.get("hidden_size")
    A = r.get("num_attention_heads")
    L = r.get("num_hidden_layers")
    K = r.get("num_key_value_heads", default=A)
    d = r.get("head_dim", default=head_dim_default or H // A)
    attention_bias = r.get("attention_bias", default=False, kind=bool)
    if window is ...:
        window = r.get("sliding_window", default=window_default)
    return dict(
        family=r.cfg["model_type"], hidden=H, layers=L, heads=A, kv_heads=K, head_dim=d,
        ffn=r.get("intermediate_size"), gated_ffn=True, vocab=r.get("vocab_size"),
        tied_embeddings=r.get("tie_word_embeddings", default=tied_default, kind=bool),
        max_context=r.get("max_position_embeddings", default=2048),
        norm="rms", norms_per_layer=norms,
        qkv_bias=attention_bias if qkv_bias is None else qkv_bias, o_bias=attention_bias,
        mlp_bias=r.get("mlp_bias", default=False, kind=bool),
        activation=r.get("hidden_act", "hidden_activation", default="silu", kind=str),
        sliding_window=window, layer_types=_layer_types(r, L, window, pattern),
    )


def _llama(r):
    return Arch(**_llama_like(r, window=None))


def _mistral(r):
    # MistralConfig defaults sliding_window to 4096 when the key is absent; an explicit null disables it.
    window = r.cfg["sliding_window"] if "sliding_window" in r.cfg else 4096
    return Arch(**_llama_like(r, window=_positive_or_none(r, "sliding_window", window)))


def _mixtral(r):
    fields = _llama_like(r, window=_positive_or_none(r, "sliding_window", r.cfg.get("sliding_window")))
    moe = MoE(experts=r.get("num_local_experts", "num_experts"), experts_per_token=r.get("num_experts_per_tok"),
              expert_ffn=fields["ffn"])
    return Arch(**{**fields, "moe": moe})


def _qwen_window(r) -> dict[str, Any]:
    """Qwen's sliding window: only with ``use_sliding_window``, on layers ≥ ``max_window_layers`` (Qwen2/3 configs)."""
    use = r.get("use_sliding_window", default=False, kind=bool)
    first = r.get("max_window_layers", default=28)
    return {"window": r.get("sliding_window", default=4096) if use else None, "pattern": lambda i: i >= first}


def _qwen2(r):
    return Arch(**_llama_like(r, qkv_bias=True, **_qwen_window(r)) | {"o_bias": False})


def _qwen2_moe(r):
    fields = _llama_like(r, qkv_bias=r.get("qkv_bias", default=True, kind=bool), **_qwen_window(r)) | {"o_bias": False}
    experts = r.get("num_experts", default=60)
    step = r.get("decoder_sparse_step", default=1)
    dense = set(_index_list(r, "mlp_only_layers"))
    moe_layers = tuple(i not in dense and (i + 1) % step == 0 for i in range(fields["layers"]))
    shared = r.get("shared_expert_intermediate_size", default=5632, minimum=0)
    moe = MoE(experts=experts, experts_per_token=r.get("num_experts_per_tok", default=4),
              expert_ffn=r.get("moe_intermediate_size", default=1408), shared_experts=1 if shared else 0,
              shared_expert_ffn=shared or None, shared_gate=bool(shared))
    return Arch(**fields | {"moe": moe, "moe_layers": moe_layers})


def _qwen3(r):
    return Arch(**_llama_like(r, **_qwen_window(r)) | {"qk_norm": True})


def _index_list(r: _Reader, key: str) -> list[int]:
    """A list of layer indices (``mlp_only_layers``, ``moe_layers``); absent or null means empty."""
    value = r.cfg.get(key) or []
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise AicalcError(f"{r.origin}: field '{key}' must be a list of layer indices")
    return value


def _qwen3_moe(r):
    """Qwen3-MoE (transformers ``Qwen3MoeConfig``/``modeling_qwen3_moe.py``): Qwen3 attention with QK-norm; a layer is
    a routed MoE (no shared expert, router without bias) unless in ``mlp_only_layers`` or off the
    ``decoder_sparse_step`` grid; ``use_sliding_window`` puts the window on every layer (no ``max_window_layers``)."""
    use = r.get("use_sliding_window", default=False, kind=bool)
    fields = _llama_like(r, window=r.get("sliding_window", default=4096) if use else None) | {"qk_norm": True}
    experts = r.get("num_experts", "num_local_experts", default=128)
    step = r.get("decoder_sparse_step", default=1)
    dense = set(_index_list(r, "mlp_only_layers"))
    moe_layers = tuple(i not in dense and (i + 1) % step == 0 for i in range(fields["layers"]))
    moe = MoE(experts=experts, experts_per_token=r.get("num_experts_per_tok", default=8),
              expert_ffn=r.get("moe_intermediate_size", default=768))
    return Arch(**fields | {"ffn": r.get("intermediate_size", default=6144), "moe": moe, "moe_layers": moe_layers})


def _gemma2(r):
    """Gemma-2; ``extra`` keeps its logit soft-capping (``Gemma2Config`` defaults 50 on the attention scores, 30 on
    the output logits: ``cap·tanh(x/cap)``), whose ``tanh`` outputs training saves (``activations.softcap_saved``)."""
    window = r.get("sliding_window", default=4096)
    caps = {k: r.cfg.get(k, d) for k, d in (("attn_logit_softcapping", 50.0), ("final_logit_softcapping", 30.0))}
    return Arch(**_llama_like(r, tied_default=True, head_dim_default=256, norms=4, window=window,
                              pattern=lambda i: (i + 1) % 2 == 1),
                extra={k: float(v) for k, v in caps.items() if isinstance(v, (int, float)) and v})


# Gemma3TextConfig's defaults for the keys a file may leave out (the 4B/12B/27B files omit vocab_size and more).
_GEMMA3_TEXT_DEFAULTS = {"hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8,
                         "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262_208,
                         "max_position_embeddings": 131_072}


def _gemma3_text(r):
    """Gemma-3 text model (``Gemma3TextConfig``/``modeling_gemma3.py``): Gemma-2's four norms per layer plus QK-norm;
    five sliding layers per full one (``sliding_window_pattern``, default 6) unless ``layer_types`` is given;
    ``use_bidirectional_attention`` shrinks the window to ``sliding_window // 2 + 1``, as the config class does."""
    r = _Reader({**_GEMMA3_TEXT_DEFAULTS, **r.cfg}, r.origin)
    window = _positive_or_none(r, "sliding_window", r.cfg.get("sliding_window", 4096))
    if window and r.get("use_bidirectional_attention", default=False, kind=bool):
        window = window // 2 + 1
    period = r.get("sliding_window_pattern", default=6)
    fields = _llama_like(r, tied_default=True, norms=4, window=window, pattern=lambda i: (i + 1) % period != 0)
    activation = r.get("hidden_activation", "hidden_act", default="gelu_pytorch_tanh", kind=str)
    return Arch(**fields | {"qk_norm": True, "activation": activation})


def _gpt_oss(r):
    """gpt-oss (``GptOssConfig``/``modeling_gpt_oss.py``): biased q/k/v/o, one learned attention sink per query head,
    every layer a routed MoE whose experts have biases (``gate_up_proj_bias``, ``down_proj_bias``) and whose router
    has a bias; sliding window on even layers unless ``layer_types`` says otherwise. Every key has a class default
    (the class is shaped like gpt-oss-120b)."""
    H = r.get("hidden_size", default=2880)
    A = r.get("num_attention_heads", default=64)
    L = r.get("num_hidden_layers", default=36)
    window = _positive_or_none(r, "sliding_window", r.cfg.get("sliding_window", 128))
    bias = r.get("attention_bias", default=True, kind=bool)
    F = r.get("intermediate_size", default=2880)
    moe = MoE(experts=r.get("num_local_experts", "num_experts", default=128),
              experts_per_token=r.get("num_experts_per_tok", "experts_per_token", default=4), expert_ffn=F,
              router_bias=True)
    return Arch(
        family="gpt_oss", hidden=H, layers=L, heads=A, kv_heads=r.get("num_key_value_heads", default=8),
        head_dim=r.get("head_dim", default=64), ffn=F, gated_ffn=True, vocab=r.get("vocab_size", default=201088),
        tied_embeddings=r.get("tie_word_embeddings", default=False, kind=bool),
        max_context=r.get("max_position_embeddings", default=131072), qkv_bias=bias, o_bias=bias, mlp_bias=True,
        attention_sinks=True, activation=r.get("hidden_act", default="silu", kind=str), sliding_window=window,
        layer_types=_layer_types(r, L, window, lambda i: (i + 1) % 2 == 1) if window else ("full_attention",) * L,
        moe=moe,
    )


def _llama4_text(r):
    """Llama-4 text model (``Llama4TextConfig``/``modeling_llama4.py``). MoE layers (``moe_layers``, else every
    ``interleave_moe_layer_step``-th) hold routed experts of ``intermediate_size``, a shared expert of the same size and a
    bias-free router; the others a dense FFN of ``intermediate_size_mlp``. RoPE layers (``no_rope_layers`` = 1, else
    all but every ``no_rope_layer_interval``-th) use chunked attention, cached by transformers as a sliding window of
    ``attention_chunk_size``; NoPE layers attend globally. The QK-norm is a parameter-free L2 norm."""
    L = r.get("num_hidden_layers", default=48)
    chunk = _positive_or_none(r, "attention_chunk_size", r.cfg.get("attention_chunk_size", 8192))
    interval = r.get("no_rope_layer_interval", default=4)
    rope = r.cfg.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(L)]
    if not isinstance(rope, list) or len(rope) != L or not all(v in (0, 1) and not isinstance(v, bool) for v in rope):
        raise AicalcError(f"{r.origin}: field 'no_rope_layers' must be a list of 0/1 flags, one per layer")
    explicit = r.cfg.get("layer_types")
    if explicit is None and chunk:
        explicit = ["chunked_attention" if flag else "full_attention" for flag in rope]
    if explicit is not None:
        if not isinstance(explicit, list) or len(explicit) != L:
            raise AicalcError(f"{r.origin}: field 'layer_types' must list one layer kind per layer")
        explicit = ["sliding_attention" if t == "chunked_attention" else t for t in explicit]
    step = r.get("interleave_moe_layer_step", default=1)
    moe_at = set(_index_list(r, "moe_layers")) if r.cfg.get("moe_layers") is not None else set(range(step - 1, L, step))
    F_e = r.get("intermediate_size", default=8192)
    moe = MoE(experts=r.get("num_local_experts", default=16), experts_per_token=r.get("num_experts_per_tok", default=1),
              expert_ffn=F_e, shared_experts=1, shared_expert_ffn=F_e)
    bias = r.get("attention_bias", default=False, kind=bool)
    H = r.get("hidden_size", default=5120)
    A = r.get("num_attention_heads", default=40)
    return Arch(
        family="llama4_text", hidden=H, layers=L, heads=A, kv_heads=r.get("num_key_value_heads", default=8),
        head_dim=r.get("head_dim", default=128), ffn=r.get("intermediate_size_mlp", default=16384), gated_ffn=True,
        vocab=r.get("vocab_size", default=202048),
        tied_embeddings=r.get("tie_word_embeddings", default=False, kind=bool),
        max_context=r.get("max_position_embeddings", default=131072), qkv_bias=bias, o_bias=bias,
        activation=r.get("hidden_act", default="silu", kind=str), sliding_window=chunk,
        layer_types=tuple(explicit) if explicit is not None else ("full_attention",) * L,
        moe=moe, moe_layers=tuple(i in moe_at for i in range(L)),
    )


def _olmo2(r):
    """OLMo-2 (``Olmo2Config``/``modeling_olmo2.py``): Llama's projections and SwiGLU, an RMSNorm over the whole q_proj
    and k_proj outputs (A·d and K·d weights, not one head_dim vector) and two RMSNorms per layer placed after
    attention and after the MLP (no input norm); untied embeddings by default."""
    return Arch(**_llama_like(r, window=None) | {"qk_norm": True, "qk_norm_full": True})


def _granite(r):
    """Granite 3.x (``GraniteConfig``/``modeling_granite.py``): Llama's layout; the embedding, attention, residual and
    logits multipliers scale activations and change no shape."""
    return Arch(**_llama_like(r, window=None))


def _cohere(r):
    """Cohere Command-R (``CohereConfig``/``modeling_cohere.py``): attention and MLP in parallel off one bias-free
    LayerNorm per layer, tied embeddings by default (``tie_word_embeddings`` true), ``use_qk_norm`` adds per-head
    LayerNorms of (heads, head_dim) weights on q and k; max_position_embeddings defaults to 8192."""
    qk = r.get("use_qk_norm", default=False, kind=bool)
    fields = _llama_like(r, tied_default=True, norms=1, window=None)
    return Arch(**fields | {"qk_norm": qk, "qk_norm_full": qk,
                            "max_context": r.get("max_position_embeddings", default=8192)})


def _cohere2(r):
    """Cohere2 / Command R7B (``Cohere2Config``/``modeling_cohere2.py``): Cohere's parallel block, single bias-free
    LayerNorm and tied embeddings, no QK-norm; head_dim hidden_size // num_attention_heads unless the file sets one
    (transformers 5 keeps an explicit ``head_dim``); three sliding-window layers (window 4096 by default) per full one: layer i slides
    unless (i + 1) is a multiple of ``sliding_window_pattern`` (default 4), unless ``layer_types`` says otherwise."""
    window = _positive_or_none(r, "sliding_window", r.cfg.get("sliding_window", 4096))
    period = r.get("sliding_window_pattern", default=4)
    fields = _llama_like(r, tied_default=True, norms=1, window=window, pattern=lambda i: (i + 1) % period != 0)
    return Arch(**fields | {"max_context": r.get("max_position_embeddings", default=8192)})


def _phi3(r):
    window = _positive_or_none(r, "sliding_window", r.cfg.get("sliding_window"))
    return Arch(**_llama_like(r, window=window))


def _gpt2(r):
    H = r.get("n_embd", "hidden_size")
    L = r.get("n_layer", "num_hidden_layers")
    A = r.get("n_head", "num_attention_heads")
    P = r.get("n_positions", "max_position_embeddings", default=1024)
    return Arch(
        family="gpt2", hidden=H, layers=L, heads=A, kv_heads=A, head_dim=H // A,
        ffn=r.get("n_inner", default=4 * H), gated_ffn=False, vocab=r.get("vocab_size"),
        tied_embeddings=r.get("tie_word_embeddings", default=True, kind=bool), max_context=P,
        norm="layer", norms_per_layer=2, qkv_bias=True, o_bias=True, mlp_bias=True, learned_positions=P,
        activation=r.get("activation_function", default="gelu_new", kind=str),
    )


# BertConfig's / RobertaConfig's defaults (transformers configuration_bert.py, configuration_roberta.py)
_ENCODER_DEFAULTS = {"bert": (30522, 512, 2), "roberta": (50265, 512, 2)}  # vocab, positions, token types


def _labels(r: _Reader) -> int:
    """Classes of the classifier head: ``PretrainedConfig.num_labels``, the length of ``id2label`` when the file has
    one, else ``num_labels``, else transformers' default 2."""
    id2label = r.cfg.get("id2label")
    if isinstance(id2label, dict) and id2label:
        if len(id2label) > MAX_OTHER:
            raise AicalcError(f"{r.origin}: field 'id2label' has {len(id2label)} entries, above {MAX_OTHER}")
        return len(id2label)
    return r.get("num_labels", default=2)


def _encoder(r):
    """BERT and RoBERTa (``BertForSequenceClassification``, ``RobertaForSequenceClassification``): post-LN layers
    (self-attention, ``BertSelfOutput`` dense + LayerNorm, ``BertIntermediate`` and ``BertOutput`` dense +
    LayerNorm), every linear biased, learned positions, token-type embeddings and an embedding LayerNorm, no final
    norm; the classifier head of :func:`aicalc.core.params.classifier_params`."""
    family = r.cfg["model_type"]
    vocab, positions, types = _ENCODER_DEFAULTS[family]
    H = r.get("hidden_size", default=768)
    A = r.get("num_attention_heads", default=12)
    if H % A:
        raise AicalcError(f"{r.origin}: hidden_size {H} is not a multiple of num_attention_heads {A}")
    P = r.get("max_position_embeddings", default=positions)
    return Arch(
        family=family, hidden=H, layers=r.get("num_hidden_layers", default=12), heads=A, kv_heads=A,
        head_dim=H // A, ffn=r.get("intermediate_size", default=3072), gated_ffn=False,
        vocab=r.get("vocab_size", default=vocab), tied_embeddings=False, max_context=P, norm="layer",
        norms_per_layer=2, qkv_bias=True, o_bias=True, mlp_bias=True, learned_positions=P, embedding_norm=True,
        activation=r.get("hidden_act", default="gelu", kind=str), encoder=True,
        token_types=r.get("type_vocab_size", default=types, minimum=0), labels=_labels(r),
    )


def _falcon(r):
    H = r.get("hidden_size", "n_embed")
    L = r.get("num_hidden_layers", "n_layer")
    A = r.get("num_attention_heads", "n_head")
    new_arch = r.get("new_decoder_architecture", default=False, kind=bool)
    if new_arch:
        K = r.get("num_kv_heads", "n_head_kv", default=A)
    else:
        K = 1 if r.get("multi_query", default=True, kind=bool) else A
    parallel = r.get("parallel_attn", default=True, kind=bool)
    n_ln = r.get("num_ln_in_parallel_attn", default=2 if new_arch else 1)
    bias = r.get("bias", default=False, kind=bool)
    return Arch(
        family="falcon", hidden=H, layers=L, heads=A, kv_heads=K, head_dim=H // A,
        ffn=r.get("ffn_hidden_size", default=4 * H), gated_ffn=False, vocab=r.get("vocab_size"),
        tied_embeddings=r.get("tie_word_embeddings", default=True, kind=bool),
        max_context=r.get("max_position_embeddings", default=2048),
        norm="layer", norms_per_layer=(2 if not parallel else n_ln), qkv_bias=bias, o_bias=bias, mlp_bias=bias,
        activation=r.get("activation", default="gelu", kind=str),
    )


def _bloom(r):
    H = r.get("hidden_size", "n_embed")
    L = r.get("n_layer", "num_hidden_layers")
    A = r.get("n_head", "num_attention_heads")
    return Arch(
        family="bloom", hidden=H, layers=L, heads=A, kv_heads=A, head_dim=H // A, ffn=4 * H, gated_ffn=False,
        vocab=r.get("vocab_size"), tied_embeddings=r.get("tie_word_embeddings", default=True, kind=bool),
        max_context=r.get("seq_length", "max_position_embeddings", default=2048),
        norm="layer", norms_per_layer=2, qkv_bias=True, o_bias=True, mlp_bias=True, embedding_norm=True,
        activation="gelu",
    )


def _deepseek_v2(r):
    """DeepSeek-V2 (``DeepseekV2Config``/``modeling_deepseek_v2.py``): the MLA and MoE layout of DeepSeek-V3, with the
    V2 class defaults (q_lora_rank 1536 unless null, as in the V2-Lite files; 64 routed and 2 shared experts of 1407;
    first_k_dense_replace 0). Its experts never have biases, so ``mlp_bias`` (dense and shared FFNs only) is refused."""
    if r.get("mlp_bias", default=False, kind=bool):
        raise AicalcError(f"{r.origin}: mlp_bias true is not supported for model_type 'deepseek_v2' (the routed "
                          "experts have no biases while the dense and shared FFNs would)")
    mla = _mla_with_defaults(r, q_lora=1536, nope=128, v=128)
    L = r.get("num_hidden_layers", default=32)
    A = r.get("num_attention_heads", default=32)
    dense = r.get("first_k_dense_replace", default=0, minimum=0)
    experts = r.get("n_routed_experts", default=64)
    # DeepseekV2Config: n_group / topk_group default to None and only topk_method "group_limited_greedy" uses them
    limited = r.get("topk_method", default="greedy", kind=str) == "group_limited_greedy"
    moe = MoE(experts=experts, experts_per_token=r.get("num_experts_per_tok"),
              expert_ffn=r.get("moe_intermediate_size", default=1407),
              shared_experts=r.get("n_shared_experts", default=2, minimum=0),
              **(_expert_groups(r, experts, r.get("n_group"), r.get("topk_group")) if limited else {}))
    bias = r.get("attention_bias", default=False, kind=bool)
    return Arch(
        family="deepseek_v2", hidden=r.get("hidden_size", default=4096), layers=L, heads=A, kv_heads=A,
        head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim, ffn=r.get("intermediate_size", default=11008),
        gated_ffn=True, vocab=r.get("vocab_size", default=102400),
        tied_embeddings=r.get("tie_word_embeddings", default=False, kind=bool),
        max_context=r.get("max_position_embeddings", default=2048), qkv_bias=bias, o_bias=bias, moe=moe,
        moe_layers=tuple(i >= dense for i in range(L)), mla=mla,
    )


def _deepseek_v3(r):
    H = r.get("hidden_size")
    L = r.get("num_hidden_layers")
    A = r.get("num_attention_heads")
    mla = MLA(
        q_lora_rank=r.get("q_lora_rank", default=None), kv_lora_rank=r.get("kv_lora_rank"),
        qk_nope_head_dim=r.get("qk_nope_head_dim"), qk_rope_head_dim=r.get("qk_rope_head_dim"),
        v_head_dim=r.get("v_head_dim"),
    )
    dense = r.get("first_k_dense_replace", default=0, minimum=0)
    experts = r.get("n_routed_experts")
    # DeepseekV3Config: n_group 8, topk_group 4 by default; the router always picks the topk_group best groups
    moe = MoE(experts=experts, experts_per_token=r.get("num_experts_per_tok"),
              expert_ffn=r.get("moe_intermediate_size"), shared_experts=r.get("n_shared_experts", default=0, minimum=0),
              **_expert_groups(r, experts, r.get("n_group", default=8), r.get("topk_group", default=4)))
    bias = r.get("attention_bias", default=False, kind=bool)
    return Arch(
        family="deepseek_v3", hidden=H, layers=L, heads=A, kv_heads=A,
        head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim, ffn=r.get("intermediate_size"), gated_ffn=True,
        vocab=r.get("vocab_size"), tied_embeddings=r.get("tie_word_embeddings", default=False, kind=bool),
        max_context=r.get("max_position_embeddings", default=4096), qkv_bias=bias, o_bias=bias, moe=moe,
        moe_layers=tuple(i >= dense for i in range(L)), mla=mla,
    )


def _expert_groups(r: _Reader, experts: int, n_group: int, topk_group: int, k: int | None = None) -> dict:
    """Group-limited routing fields, checked as the router uses them: the experts split evenly into ``n_group``
    groups (``scores.view(-1, n_group, E // n_group)``), of which ``topk_group`` are kept."""
    if experts % n_group:
        raise AicalcError(f"{r.origin}: n_group ({n_group}) does not divide the {experts} routed experts")
    if topk_group > n_group:
        raise AicalcError(f"{r.origin}: topk_group ({topk_group}) exceeds n_group ({n_group})")
    k = r.get("num_experts_per_tok") if k is None else k
    if k > topk_group * (experts // n_group):
        raise AicalcError(f"{r.origin}: {k} experts per token exceed the {topk_group * (experts // n_group)} experts "
                          f"of the topk_group ({topk_group}) groups a token may use")
    return {"n_group": n_group, "topk_group": topk_group}


def _glm4_moe(r):
    """GLM-4.5 / 4.6 / 4.7 (``Glm4MoeConfig``/``modeling_glm4_moe.py``): GQA with biases on q/k/v only
    (``attention_bias``; ``o_proj`` has none), an explicit ``head_dim`` (128 while H/A is 53.3 or 42.7), per-head
    QK-norm over ``head_dim`` when ``use_qk_norm``; partial RoPE (``partial_rotary_factor`` 0.5) changes no shape.
    Layers from ``first_k_dense_replace`` on are MoE: ``n_routed_experts`` experts of ``moe_intermediate_size``, a
    bias-free router (its ``e_score_correction_bias`` is a buffer) and one shared MLP of
    ``moe_intermediate_size · n_shared_experts``; the others a dense FFN of ``intermediate_size``. The
    ``num_nextn_predict_layers`` MTP layer of the released files is not built by transformers ("The implementation in
    transformers does not include an MTP layer", its GLM-4.5 model page), so it is not counted. Omitted keys take the
    class defaults (shaped like GLM-4.5-Air)."""
    H = r.get("hidden_size", default=4096)
    A = r.get("num_attention_heads", default=96)
    L = r.get("num_hidden_layers", default=46)
    dense = r.get("first_k_dense_replace", default=1, minimum=0)
    experts = r.get("n_routed_experts", "num_local_experts", default=128)
    k = r.get("num_experts_per_tok", default=8)
    moe = MoE(experts=experts, experts_per_token=k, expert_ffn=r.get("moe_intermediate_size", default=1408),
              shared_experts=r.get("n_shared_experts", default=1, minimum=0),
              **_expert_groups(r, experts, r.get("n_group", default=1), r.get("topk_group", default=1), k))
    return Arch(
        family="glm4_moe", hidden=H, layers=L, heads=A, kv_heads=r.get("num_key_value_heads", default=8),
        head_dim=r.get("head_dim", default=H // A), ffn=r.get("intermediate_size", default=10944), gated_ffn=True,
        vocab=r.get("vocab_size", default=151552),
        tied_embeddings=r.get("tie_word_embeddings", default=False, kind=bool),
        max_context=r.get("max_position_embeddings", default=131072),
        qkv_bias=r.get("attention_bias", default=False, kind=bool),
        qk_norm=r.get("use_qk_norm", default=False, kind=bool),
        activation=r.get("hidden_act", default="silu", kind=str), moe=moe,
        moe_layers=tuple(i >= dense for i in range(L)),
    )


def _glm4_moe_lite(r):
    """GLM-4.7-Flash (``Glm4MoeLiteConfig``/``modeling_glm4_moe_lite.py``): DeepSeek-V3's multi-head latent attention
    (``q_lora_rank`` null: q projected straight from H; ``attention_bias`` on q_a, kv_a and o; the latent cached
    compressed) and MoE (routed experts of ``moe_intermediate_size``, ``n_shared_experts`` shared, a bias-free router
    whose ``e_score_correction_bias`` is a buffer). Which layers are MoE comes from ``mlp_layer_types``
    ("dense"/"sparse"), else layer 0 dense and the rest MoE: the class ignores ``first_k_dense_replace``, so a file
    whose ``first_k_dense_replace`` says otherwise is refused rather than read two ways. The
    ``num_nextn_predict_layers`` MTP layer is not built by transformers and not counted. Class defaults for omitted
    keys (shaped like GLM-4.7-Flash)."""
    L = r.get("num_hidden_layers", default=47)
    kinds = r.cfg.get("mlp_layer_types")
    if kinds is None:
        kinds = ["dense"] + ["sparse"] * (L - 1)
        dense_k = r.get("first_k_dense_replace", default=1, minimum=0)
        if dense_k != 1:
            raise AicalcError(f"{r.origin}: first_k_dense_replace {dense_k} without mlp_layer_types: transformers' "
                              "glm4_moe_lite builds layer 0 dense and the rest MoE regardless; give mlp_layer_types")
    if not isinstance(kinds, list) or len(kinds) != L or any(k not in ("dense", "sparse") for k in kinds):
        raise AicalcError(f"{r.origin}: field 'mlp_layer_types' must list 'dense' or 'sparse' for each of the {L} layers")
    mla = _mla_with_defaults(r, q_lora=768, nope=192, v=256)
    experts = r.get("n_routed_experts", "num_local_experts", default=64)
    k = r.get("num_experts_per_tok", default=4)
    moe = MoE(experts=experts, experts_per_token=k, expert_ffn=r.get("moe_intermediate_size", default=1536),
              shared_experts=r.get("n_shared_experts", default=1, minimum=0),
              **_expert_groups(r, experts, r.get("n_group", default=1), r.get("topk_group", default=1), k))
    A = r.get("num_attention_heads", default=20)
    bias = r.get("attention_bias", default=False, kind=bool)
    return Arch(
        family="glm4_moe_lite", hidden=r.get("hidden_size", default=2048), layers=L, heads=A, kv_heads=A,
        head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim, ffn=r.get("intermediate_size", default=10240),
        gated_ffn=True, vocab=r.get("vocab_size", default=154880),
        tied_embeddings=r.get("tie_word_embeddings", default=False, kind=bool),
        max_context=r.get("max_position_embeddings", default=202752), qkv_bias=bias, o_bias=bias,
        activation=r.get("hidden_act", default="silu", kind=str), moe=moe,
        moe_layers=tuple(kind == "sparse" for kind in kinds), mla=mla,
    )


def _minimax_m2(r):
    """MiniMax-M2 (``MiniMaxM2Config``/``modeling_minimax_m2.py``): GQA without biases, ``head_dim`` 128 by default
    (A·d = 6144 while H = 3072), QK-norm over the whole projection (``MiniMaxM2RMSNorm(num_attention_heads *
    head_dim)`` on q, ``num_key_value_heads * head_dim`` on k), every layer a routed MoE of ``num_local_experts``
    experts of ``intermediate_size`` with a bias-free router (``e_score_correction_bias`` is a buffer), no shared
    expert and no dense FFN. Partial RoPE (``rotary_dim`` 64) changes no shape. The released files' MTP keys
    (``use_mtp``, ``num_mtp_modules``) and ``shared_intermediate_size`` 0 are not read by transformers; an
    ``attn_type_list`` naming a linear-attention layer (0, MiniMax-M1's lightning attention) is refused, since
    transformers' class builds softmax attention on every layer."""
    kinds = r.cfg.get("attn_type_list")
    if kinds is not None and (not isinstance(kinds, list) or any(v != 1 or isinstance(v, bool) for v in kinds)):
        raise AicalcError(f"{r.origin}: attn_type_list must list 1 (softmax attention) for every layer of model_type "
                          "'minimax_m2'; linear (lightning) attention layers are not represented")
    H = r.get("hidden_size", default=3072)
    L = r.get("num_hidden_layers", default=62)
    F = r.get("intermediate_size", default=1536)
    moe = MoE(experts=r.get("num_local_experts", "num_experts", default=256),
              experts_per_token=r.get("num_experts_per_tok", default=8), expert_ffn=F)
    return Arch(
        family="minimax_m2", hidden=H, layers=L, heads=r.get("num_attention_heads", default=48),
        kv_heads=r.get("num_key_value_heads", default=8), head_dim=r.get("head_dim", default=128), ffn=F,
        gated_ffn=True, vocab=r.get("vocab_size", default=200064),
        tied_embeddings=r.get("tie_word_embeddings", default=False, kind=bool),
        max_context=r.get("max_position_embeddings", default=196608), qk_norm=True, qk_norm_full=True,
        activation=r.get("hidden_act", default="silu", kind=str), moe=moe,
    )


# model types with blocks of one mixer each (Mamba-2 or attention, or an FFN alone): their layers may be "mamba" or
# "none"
_HYBRID = ("nemotron_h",)


def _mla_with_defaults(r: _Reader, q_lora: int, nope: int, v: int) -> MLA:
    """The MLA fields of a config class whose keys all have defaults (DeepSeek-V2's, GLM-4.7-Flash's): an explicit
    ``q_lora_rank`` null means q is projected straight from H; the cache's latent and RoPE widths default to
    512 and 64 in both classes."""
    q = r.cfg["q_lora_rank"] if "q_lora_rank" in r.cfg else q_lora
    return MLA(q_lora_rank=_positive_or_none(r, "q_lora_rank", q), kv_lora_rank=r.get("kv_lora_rank", default=512),
               qk_nope_head_dim=r.get("qk_nope_head_dim", default=nope),
               qk_rope_head_dim=r.get("qk_rope_head_dim", default=64), v_head_dim=r.get("v_head_dim", default=v))


def _positive_or_none(r: _Reader, key: str, value: Any) -> int | None:
    return None if value is None else r._check(key, value, int)


def _hybrid(name: str):
    """The reader ``name`` of :mod:`aicalc.catalog.hf_hybrid` (sparse-attention and hybrid-layer model types),
    imported when a config of its type is read: a preset of another type does not load their ~300 lines."""

    def read(r):
        from aicalc.catalog import hf_hybrid

        return getattr(hf_hybrid, name)(r)

    return read


def _deepseek_v4(r):
    """DeepSeek-V4 (``DeepseekV4Config``): read in :mod:`aicalc.catalog.hf_deepseek_v4`."""
    from aicalc.catalog.hf_deepseek_v4 import read

    return read(r)


_READERS = {
    "llama": _llama, "mistral": _mistral, "mixtral": _mixtral, "qwen2": _qwen2, "qwen2_moe": _qwen2_moe, "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe, "gemma2": _gemma2, "gemma3_text": _gemma3_text, "phi3": _phi3, "gpt2": _gpt2,
    "falcon": _falcon, "bloom": _bloom, "deepseek_v2": _deepseek_v2, "deepseek_v3": _deepseek_v3,
    # Kimi K2's files name model_type kimi_k2 for its custom code, a copy of DeepSeek-V3's (architectures
    # DeepseekV3ForCausalLM); transformers reads a kimi_k2 config as deepseek_v3 (Kimi_K25Config.__post_init__)
    "kimi_k2": _deepseek_v3, "glm4_moe": _glm4_moe, "glm4_moe_lite": _glm4_moe_lite, "minimax_m2": _minimax_m2,
    "deepseek_v32": _hybrid("_deepseek_v32"), "glm_moe_dsa": _hybrid("_glm_moe_dsa"), "gpt_oss": _gpt_oss,
    "llama4_text": _llama4_text, "olmo2": _olmo2, "granite": _granite, "cohere": _cohere, "cohere2": _cohere2,
    "qwen3_next": _hybrid("_qwen3_next"), "qwen3_5_text": _hybrid("_qwen3_5_text"), "qwen3_5_moe_text": _hybrid("_qwen3_5_moe_text"),
    "nemotron_h": _hybrid("_nemotron_h"), "deepseek_v4": _deepseek_v4, "bert": _encoder, "roberta": _encoder,
}
