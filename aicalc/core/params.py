"""Exact parameter counts, term by term, as ``sum(p.numel() for p in model.parameters())`` of the
transformers implementation counts them (tied embeddings once; buffers such as DeepSeek's router
``e_score_correction_bias`` are not parameters).

Sources: module definitions of transformers' ``modeling_<family>.py``; the per-term algebra follows
the explicit formula of ``shared/reference/specs.md`` §2 (q = H·A·d, k = v = H·K·d, o = A·d·H;
gated FFN 3·H·F, plain 2·H·F; RMSNorm H, LayerNorm 2H).
"""

from aicalc.catalog.arch import Arch
from aicalc.tuples import Named


class ParamCount(Named):
    """Parameters of a model by part, and those one token touches."""

    embedding: int  # token embedding (+ learned positions, + embedding norm)
    attention: int  # all layers
    ffn: int  # all layers: dense FFNs, routed experts, shared experts, routers
    norms: int  # per-layer norms of all layers plus the final norm
    lm_head: int  # 0 when tied to the embedding
    active: int  # parameters touched per token (MoE: k routed + shared experts)
    mamba: int = 0  # all layers' Mamba-2 mixers (projections, conv, per-head scalars, gated norm)

    @property
    def total(self) -> int:
        return self.embedding + self.attention + self.ffn + self.norms + self.lm_head + self.mamba

    @property
    def embedding_table(self) -> int:
        return self.embedding


def _norm(arch: Arch, width: int) -> int:
    return 2 * width if arch.norm == "layer" else width


def attention_params(arch: Arch) -> int:
    """One softmax-attention layer's projections (and MLA's internal norms), plus ``A`` attention-sink logits where
    the model has them: gpt-oss's ``self.sinks = nn.Parameter(torch.empty(config.num_attention_heads))`` in
    ``GptOssAttention`` (transformers ``modeling_gpt_oss.py``). A gated output (``attention_gate``) doubles q_proj:
    ``nn.Linear(hidden_size, num_attention_heads * head_dim * 2)`` in ``Qwen3NextAttention``."""
    return _projection_params(arch) + (arch.heads if arch.attention_sinks else 0)


def _projection_params(arch: Arch) -> int:
    H = arch.hidden
    if arch.compressed is not None:  # DeepSeek-V4: q LoRA, one shared KV head, grouped low-rank output
        from aicalc.core.compressed_attention import projection_params

        return projection_params(arch)
    if arch.mla is not None:
        m = arch.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank:
            q = H * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * arch.heads * qk  # q_a, q_a_layernorm, q_b
        else:
            q = H * arch.heads * qk
        kv = H * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank  # kv_a_proj_with_mqa, kv_a_layernorm
        kv += m.kv_lora_rank * arch.heads * (m.qk_nope_head_dim + m.v_head_dim)  # kv_b_proj
        o = arch.heads * m.v_head_dim * H
        bias = (m.q_lora_rank or 0) + (m.kv_lora_rank + m.qk_rope_head_dim) if arch.qkv_bias else 0
        return q + kv + o + bias + (H if arch.o_bias else 0)
    q = arch.q_dim * (2 if arch.attention_gate else 1)  # a gated output: q_proj holds the gate's A·d columns too
    qkv = H * (q + 2 * arch.kv_dim) + ((q + 2 * arch.kv_dim) if arch.qkv_bias else 0)
    o = arch.q_dim * H + (H if arch.o_bias else 0)
    return qkv + o


def mlp_params(arch: Arch, width: int) -> int:
    """One FFN of intermediate size ``width``: gated 3·H·F, plain 2·H·F, plus biases (2F + H gated: also each gpt-oss
    expert's ``gate_up_proj_bias`` [2F] and ``down_proj_bias`` [H], ``GptOssExperts`` in ``modeling_gpt_oss.py``)."""
    H = arch.hidden
    mats = (3 if arch.gated_ffn else 2) * H * width
    bias = ((2 * width if arch.gated_ffn else width) + H) if arch.mlp_bias else 0
    return mats + bias


def qk_norm_params(arch: Arch) -> int:
    """One layer's query/key norm weights (0 without QK-norm).

    * one norm over ``head_dim`` shared by all heads, on q and on k: ``2·d`` (Qwen3 ``q_norm``/``k_norm``,
      ``Qwen3RMSNorm(self.head_dim)`` in ``modeling_qwen3.py``; Gemma-3 the same);
    * ``qk_norm_full``: a weight per channel of the whole projection, ``A·d + K·d``. OLMo-2 normalizes the full
      q_proj/k_proj outputs, ``Olmo2RMSNorm(config.num_attention_heads * self.head_dim)`` and
      ``Olmo2RMSNorm(config.num_key_value_heads * self.head_dim)`` (``Olmo2Attention``, ``modeling_olmo2.py``);
      Cohere with ``use_qk_norm`` has a per-head LayerNorm without bias whose weight is shaped
      ``(num_attention_heads, head_dim)`` on q and ``(num_key_value_heads, head_dim)`` on k (``CohereAttention``,
      ``modeling_cohere.py``): the same count.

    Layer norms elsewhere follow the per-family reader's ``norms_per_layer``: OLMo-2 places its two RMSNorms after
    attention and after the MLP (``post_attention_layernorm``, ``post_feedforward_layernorm``; no input norm),
    Cohere/Cohere2 run attention and MLP in parallel off a single ``input_layernorm`` (``CohereDecoderLayer``),
    a ``CohereLayerNorm`` with a weight and no bias (H parameters, counted like an RMSNorm), and tie the embeddings
    by default (``tie_word_embeddings=True`` in ``CohereConfig``/``Cohere2Config``). Granite's
    ``embedding_multiplier``, ``attention_multiplier``, ``residual_multiplier`` and ``logits_scaling`` are scalars
    applied in ``GraniteModel``/``GraniteAttention``/``GraniteDecoderLayer``/``GraniteForCausalLM``
    (``modeling_granite.py``): no shape changes, its count is Llama's."""
    if not arch.qk_norm:
        return 0
    if arch.qk_norm_full:
        return _norm(arch, arch.q_dim) + _norm(arch, arch.kv_dim)
    return 2 * _norm(arch, arch.head_dim)


def per_arch(f):
    """``f(arch)`` worked out once per architecture (a pure function of its fields; ``extra`` is left out of an
    Arch's ``==`` and is no input of the counts): a layout search asks for the same counts for every layout
    block. Keyed by the fields and their types (an np.int64 field gives np.int64 counts); an Arch that cannot be
    hashed (a list where a tuple belongs) is counted each time."""
    memo: dict = {}

    def once(arch):
        try:
            key = (arch, tuple(map(type, arch)))
            hit = memo.get(key)
        except TypeError:
            return f(arch)
        if hit is None:
            if len(memo) >= 64:
                memo.clear()
            hit = memo[key] = f(arch)
        return hit

    once.__doc__, once.__name__, once.__wrapped__ = f.__doc__, f.__name__, f
    return once


def expert_params(arch: Arch) -> int:
    """One routed expert: an FFN of ``expert_ffn`` on H, or on the latent width of a latent MoE (Nemotron 3 Super:
    ``NemotronHExperts`` up (E, F_e, latent) and down (E, latent, F_e), no biases)."""
    e = arch.moe
    if e.latent:
        return (3 if arch.gated_ffn else 2) * e.latent * e.expert_ffn
    return mlp_params(arch, e.expert_ffn)


def latent_projection_params(arch: Arch) -> int:
    """A latent MoE layer's two projections H → latent and latent → H (``fc1_latent_proj``, ``fc2_latent_proj`` of
    ``NemotronHMoE``; biased with ``mlp_bias``, which the nemotron_h reader refuses); 0 without a latent."""
    e = arch.moe
    return 2 * arch.hidden * e.latent + ((e.latent + arch.hidden) if arch.mlp_bias else 0) if e.latent else 0


@per_arch
def count_params(arch: Arch) -> ParamCount:
    """Parameters by part. A layer without an FFN (``Arch.ffn_layers``) or without attention (``layer_types`` "mamba"
    or "none", hybrid one-mixer blocks) counts none; Mamba-2 mixers are :func:`aicalc.core.mamba.params`."""
    H, V, L = arch.hidden, arch.vocab, arch.layers
    La = arch.attention_layers
    embedding = V * H + arch.learned_positions * H + (_norm(arch, H) if arch.embedding_norm else 0)
    embedding += arch.token_types * H  # BERT's token_type_embeddings
    attention = La * attention_params(arch)
    if arch.linear_layers:  # Gated DeltaNet layers (Qwen3-Next, Qwen3.5): their whole token mixer
        from aicalc.core.linear_attention import layer_params

        attention += arch.linear_layers * layer_params(arch)
    if arch.indexer is not None:  # DSA's lightning indexers, inside ``self_attn`` (aicalc.core.indexer)
        from aicalc.core.indexer import indexer_params

        attention += indexer_params(arch)
    if arch.compressed is not None:  # DeepSeek-V4's KV compressors and CSA indexers, inside ``self_attn``
        from aicalc.core.compressed_attention import all_compressor_params

        attention += all_compressor_params(arch)
    dense_ffn = mlp_params(arch, arch.ffn)
    ffn = 0
    active_ffn = 0
    for is_moe, has_ffn in zip(arch.moe_layers, arch.ffn_layers, strict=False):
        if not has_ffn:
            continue
        if is_moe and arch.moe is not None:
            e = arch.moe
            expert = expert_params(arch)
            router = H * e.experts + (e.experts if e.router_bias else 0)
            # shared experts run as one FFN of their summed width (DeepSeek ``shared_experts``, Qwen-MoE
            # ``shared_expert`` + gate, Llama-4 ``Llama4TextMoe.shared_expert`` in ``modeling_llama4.py``)
            shared = (mlp_params(arch, e.shared_ffn) if e.shared_experts else 0) + (H if e.shared_gate else 0)
            shared += latent_projection_params(arch)
            ffn += e.experts * expert + router + shared
            active_ffn += e.experts_per_token * expert + router + shared
        else:
            ffn += dense_ffn
            active_ffn += dense_ffn
    # the final norm; an encoder (post-LN) has none, its embeddings' LayerNorm is counted with the embedding
    norms = L * arch.norms_per_layer * _norm(arch, H) + (0 if arch.encoder else _norm(arch, H))
    norms += La * qk_norm_params(arch)
    if arch.compressed is not None:  # DeepSeek-V4's mHC mixing parameters, counted with the norms they sit beside
        from aicalc.core.compressed_attention import hyper_connection_params

        norms += hyper_connection_params(arch)
    lm_head = 0 if arch.tied_embeddings else V * H
    if arch.encoder:
        lm_head = classifier_params(arch)
    mixers = 0
    if arch.mamba is not None:
        from aicalc.core.mamba import params as mamba_params

        mixers = mamba_params(arch)
    active = embedding + attention + active_ffn + norms + lm_head + mixers
    return ParamCount(embedding=embedding, attention=attention, ffn=ffn, norms=norms, lm_head=lm_head, active=active,
                      mamba=mixers)


def classifier_params(arch: Arch) -> int:
    """An encoder's sequence-classification head: H·H + H then H·labels + labels. BERT: ``BertPooler.dense``
    (tanh over the first token) and ``BertForSequenceClassification.classifier``; RoBERTa: the same two linears
    as ``RobertaClassificationHead.dense`` and ``.out_proj`` (its model is built without a pooler)
    (transformers ``modeling_bert.py``, ``modeling_roberta.py``)."""
    H = arch.hidden
    return H * H + H + H * arch.labels + arch.labels


def routed_expert_params(arch: Arch) -> int:
    """Parameters of the routed experts of all MoE layers (routers and shared experts excluded): the tensors a
    release may store in their own format and expert parallelism splits."""
    if arch.moe is None:
        return 0
    return sum(arch.moe_layers) * arch.moe.experts * expert_params(arch)
