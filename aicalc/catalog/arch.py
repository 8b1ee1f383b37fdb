"""The internal architecture description every estimator reads.

Notation (used throughout aicalc): H hidden, L layers, A attention heads, K kv heads, d head_dim,
F ffn size, V vocab, E experts, k experts per token.

A layer is an attention block and an FFN unless its per-layer fields say otherwise. Hybrid models whose blocks
hold ONE mixer each (Nemotron-H: a Mamba-2 mixer, an attention, a dense MLP or an MoE, chosen per block) say so
with two per-layer fields: ``layer_types`` names the sequence mixer of each layer ("full_attention",
"sliding_attention", "linear_attention" for Gated DeltaNet, "mamba" for a Mamba-2 mixer, "none" for a block without
one) and ``ffn_layers`` is False where a layer has no FFN (``moe_layers`` True where the FFN it has is an MoE). A
Nemotron-H "M" block is ("mamba", no FFN), "*" ("full_attention", no FFN), "-" ("none", dense FFN), "E" ("none", MoE
FFN); a Gated DeltaNet hybrid's layers (Qwen3-Next) all keep their FFN. Unset, every layer has both, so every
pre-existing model reads as before.
"""

from aicalc.tuples import Named


class MoE(Named):
    """Routed (and shared) experts of a mixture-of-experts FFN."""

    experts: int  # E routed experts per MoE layer
    experts_per_token: int  # k
    expert_ffn: int  # F_e, intermediate size of one expert
    shared_experts: int = 0  # always-active experts (DeepSeek, Qwen-MoE)
    shared_expert_ffn: int | None = None  # intermediate size of one shared expert (default F_e)
    shared_gate: bool = False  # a learned sigmoid gate H→1 on the shared expert's output (Qwen-MoE)
    router_bias: bool = False  # a learned per-expert bias parameter on the router
    # group-limited routing (DeepSeek-V2 "device-limited", V3 "node-limited"): the E experts split into n_group
    # groups of consecutive experts, each token picks its k experts inside the topk_group best groups
    # (transformers ``n_group`` / ``topk_group``); 1 / 1: no limit
    n_group: int = 1
    topk_group: int = 1
    # latent MoE (Nemotron 3 Super, transformers ``moe_latent_size``): the routed experts run on a width-``latent``
    # projection of H (``fc1_latent_proj`` H→latent before, ``fc2_latent_proj`` latent→H after); None: on H
    latent: int | None = None

    @property
    def group_limited(self) -> bool:
        """Whether a token's experts are confined to fewer groups than there are."""
        return self.topk_group < self.n_group

    @property
    def shared_ffn(self) -> int:
        """Total intermediate width of the shared experts, run as one FFN."""
        return self.shared_experts * (self.shared_expert_ffn or self.expert_ffn)


class MLA(Named):
    """Multi-head latent attention (DeepSeek-V2/V3): K/V compressed to one latent per token."""

    q_lora_rank: int | None  # None: q projected directly from H
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


class Indexer(Named):
    """DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2 tech report, arXiv 2512.02556, §2.1; transformers
    ``DeepseekV32Indexer``): per layer its own small q projection from MLA's q latent (``wq_b``, q_rank → heads ·
    head_dim), one shared key per token (``wk`` H → head_dim, ``k_norm`` a LayerNorm) and per-head weights
    (``weights_proj`` H → heads); it scores every cached token and the layer's MLA attends to the ``topk`` best."""

    heads: int  # index_n_heads
    head_dim: int  # index_head_dim (the width of the one cached indexer key per token)
    topk: int  # index_topk, tokens each query's MLA attends to
    q_rank: int  # input width of wq_b: MLA's q_lora_rank
    # per layer: True where the layer runs (and caches keys for) its own indexer; GLM-MoE-DSA's "shared" layers
    # reuse the previous full layer's top-k (transformers ``indexer_types``); () means every layer
    layers: tuple[bool, ...] = ()
class Mamba(Named):
    """A Mamba-2 (SSD) mixer (Dao & Gu 2024, arXiv:2405.21060; transformers ``NemotronHMamba2Mixer``): ``heads``
    heads of ``head_dim`` channels (inner width I = heads·head_dim), B and C of ``state`` channels shared by each of
    ``groups`` head groups, a depthwise causal conv of ``conv_kernel`` taps over x, B and C, and the SSD scan in
    chunks of ``chunk`` tokens. Per sequence it keeps a conv state of (I + 2·G·N)·(conv_kernel) values and an SSM
    state of heads·head_dim·N values, whatever the context."""

    heads: int  # nh
    head_dim: int  # P
    state: int  # N, ssm_state_size
    groups: int  # G, n_groups
    conv_kernel: int  # d_conv
    chunk: int = 128  # SSD chunk size
    conv_bias: bool = True  # use_conv_bias
    proj_bias: bool = False  # in_proj / out_proj biases (Nemotron-H ``use_bias``)
    ssm_dtype: str = "fp32"  # the dtype the SSM state is cached in (``mamba_ssm_cache_dtype``)

    @property
    def inner(self) -> int:
        """I = heads·head_dim, the width of x, z and the SSD output."""
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the depthwise conv: x, B and C, I + 2·G·N."""
        return self.inner + 2 * self.groups * self.state


class LinearAttention(Named):
    """Gated DeltaNet linear attention (Yang et al. 2024, arXiv:2412.06464) as Qwen3-Next and Qwen3.5 build it
    (transformers ``Qwen3NextGatedDeltaNet``): per token, q and k over ``key_heads`` heads of ``key_head_dim``, v and
    the output gate z over ``value_heads`` heads of ``value_head_dim``, a causal depthwise convolution of
    ``conv_kernel`` taps over the q/k/v channels, and per value head a recurrent state of key_head_dim ×
    value_head_dim in place of a KV cache."""

    key_heads: int  # linear_num_key_heads
    value_heads: int  # linear_num_value_heads
    key_head_dim: int  # linear_key_head_dim
    value_head_dim: int  # linear_value_head_dim
    conv_kernel: int  # linear_conv_kernel_dim

    @property
    def key_dim(self) -> int:
        return self.key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the convolution: q, k and v concatenated."""
        return 2 * self.key_dim + self.value_dim


class CompressedAttention(Named):
    """DeepSeek-V4's hybrid attention (DeepSeek-V4 tech report §2.3; transformers ``DeepseekV4Attention``,
    ``modeling_deepseek_v4.py``): every layer is a shared-KV MQA (one KV head of ``head_dim``, the same tensor read as
    key and value) over a sliding window of ``window`` tokens; a "csa" layer also attends to entries compressed
    ``csa_ratio``:1 (overlapping windows, ``DeepseekV4CSACompressor``) of which a lightning indexer keeps the
    ``index_topk`` best per query, an "hca" layer to entries compressed ``hca_ratio``:1 (``DeepseekV4HCACompressor``),
    a "sliding" layer to its window only. q is a LoRA (``q_lora_rank``), the output a grouped low-rank projection
    (``o_groups`` groups of A·d/g → ``o_lora_rank``, then g·o_lora_rank → H), and the residual is ``hc_mult``
    streams mixed by manifold-constrained hyper-connections (mHC)."""

    kinds: tuple[str, ...]  # per layer: "sliding", "csa" or "hca"
    window: int  # sliding_window
    q_rank: int  # q_lora_rank
    rope_dim: int  # qk_rope_head_dim: the rotated part of each head
    o_groups: int  # g
    o_rank: int  # o_lora_rank
    hc_mult: int  # residual streams of the mHC
    index_heads: int  # index_n_heads
    index_head_dim: int  # index_head_dim: width of one cached indexer key
    index_topk: int  # compressed entries each query of a "csa" layer attends to
    csa_ratio: int = 4
    hca_ratio: int = 128
    sinkhorn_iters: int = 20  # hc_sinkhorn_iters: Sinkhorn-Knopp iterations of each mHC's comb matrix

    def count(self, kind: str) -> int:
        """Layers of one kind."""
        return sum(k == kind for k in self.kinds)

    def ratio(self, kind: str) -> int:
        """Tokens per compressed entry of a kind ("sliding": 0, none)."""
        return {"csa": self.csa_ratio, "hca": self.hca_ratio}.get(kind, 0)


class _ArchFields(Named):
    """The fields of :class:`Arch`, in order."""

    family: str  # Hugging Face model_type
    hidden: int  # H
    layers: int  # L
    heads: int  # A
    kv_heads: int  # K
    head_dim: int  # d (explicit head_dim when the config has one, else H / A)
    ffn: int  # F, dense FFN intermediate size
    gated_ffn: bool  # SwiGLU/GeGLU: three matrices, else two
    vocab: int  # V
    tied_embeddings: bool
    max_context: int
    # "rms": a weight-only norm (RMSNorm; also Cohere's bias-free LayerNorm, whose H weights count the same);
    # "layer": LayerNorm with weight and bias
    norm: str = "rms"
    norms_per_layer: int = 2
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    learned_positions: int = 0  # rows of a learned position table (GPT-2/3)
    embedding_norm: bool = False  # a norm right after the token embedding (BLOOM)
    qk_norm: bool = False  # RMSNorm over head_dim on queries and keys (Qwen3)
    # with qk_norm: the q/k norm weights span the whole projection, A·d on q and K·d on k (OLMo-2's RMSNorm over
    # q_proj/k_proj outputs, Cohere's per-head LayerNorm of shape (heads, head_dim)), not one head_dim vector each
    qk_norm_full: bool = False
    attention_sinks: bool = False  # one learned sink logit per query head and layer (gpt-oss ``self_attn.sinks``)
    activation: str = "silu"
    sliding_window: int | None = None
    # per layer: "full_attention", "sliding_attention", "linear_attention", "mamba" or "none"
    layer_types: tuple[str, ...] = ()
    moe: MoE | None = None
    moe_layers: tuple[bool, ...] = ()  # per layer: True where the FFN is a routed MoE
    mla: MLA | None = None
    # softmax attention output gated per channel by sigmoid(x·W_g), W_g packed into q_proj (twice as wide)
    # (Qwen3-Next / Qwen3.5 ``Qwen3NextAttention``)
    attention_gate: bool = False
    linear_attention: LinearAttention | None = None  # the "linear_attention" layers' shape
    indexer: Indexer | None = None  # DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5); None: dense attention
    ffn_layers: tuple[bool, ...] = ()  # per layer: False where the layer has no FFN (hybrid one-mixer blocks)
    mamba: Mamba | None = None  # the Mamba-2 mixer of the "mamba" layers
    # DeepSeek-V4's compressed sparse / heavily compressed attention and mHC; None: none
    compressed: CompressedAttention | None = None
    # a bidirectional encoder (BERT, RoBERTa) sized as ``AutoModelForSequenceClassification`` builds it: post-LN
    # layers, no final norm, a head of ``labels`` classes on the first token (pooler H→H + classifier H→labels)
    # in place of the LM head: no token-wide logits, no KV cache, no decode
    encoder: bool = False
    token_types: int = 0  # rows of the token-type (segment) embedding table (BERT: type_vocab_size 2)
    labels: int = 0  # classes of an encoder's classifier head (num_labels)
    extra: dict | None = None  # notes beside the shape (None: {}); left out of == and hash


class Arch(_ArchFields):
    """A transformer's shape as every estimator reads it, in aicalc's notation (module docstring). A named tuple
    (``_replace`` for a copy with other fields) compared and hashed without ``extra``: a frozen dataclass of its
    fields compiled its generated methods at import, ~10 M instructions of every query (docs/robustness.md)."""

    __slots__ = ()

    def __new__(cls, *args, **kw):
        self = super().__new__(cls, *args, **kw)
        if self.layer_types and self.moe_layers and self.ffn_layers and self.extra is not None:
            return self
        # Unset per-layer patterns mean the plain case: every layer full attention and an FFN, every FFN dense.
        return self._replace(layer_types=self.layer_types or ("full_attention",) * self.layers,
                             moe_layers=self.moe_layers or (self.moe is not None,) * self.layers,
                             ffn_layers=self.ffn_layers or (True,) * self.layers,
                             extra={} if self.extra is None else self.extra)

    def __eq__(self, other):
        return self[:-1] == other[:-1] if other.__class__ is self.__class__ else NotImplemented

    def __ne__(self, other):
        return self[:-1] != other[:-1] if other.__class__ is self.__class__ else NotImplemented

    def __hash__(self):
        return hash(self[:-1])

    @property
    def output_vocab(self) -> int:
        """Width of the token-wide logits the output layer makes: V for a language model, 0 for an encoder's
        classifier (its logits are B × labels, a few bytes: the loss terms that scale with B·S·V vanish)."""
        return 0 if self.encoder else self.vocab

    @property
    def q_dim(self) -> int:
        """Width of the concatenated query heads, A·d."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of one of K or V over all kv heads, K·d."""
        return self.kv_heads * self.head_dim

    @property
    def sliding_layers(self) -> int:
        return self.layer_types.count("sliding_attention")

    @property
    def linear_layers(self) -> int:
        """Layers whose token mixer is linear attention (no KV cache)."""
        return self.layer_types.count("linear_attention")

    @property
    def n_moe_layers(self) -> int:
        return sum(self.moe_layers)

    @property
    def attention_layers(self) -> int:
        """Layers with softmax attention (full or sliding): the ones that hold a KV cache."""
        return self.layer_types.count("full_attention") + self.layer_types.count("sliding_attention")

    @property
    def mamba_layers(self) -> int:
        """Layers whose mixer is a Mamba-2 block."""
        return self.layer_types.count("mamba")

    @property
    def n_ffn_layers(self) -> int:
        """Layers with an FFN (dense or MoE)."""
        return sum(self.ffn_layers)

    @property
    def dense_ffn_layers(self) -> int:
        """Layers with a dense FFN."""
        return sum(f and not m for f, m in zip(self.ffn_layers, self.moe_layers, strict=False))

    @property
    def hybrid(self) -> bool:
        """Whether some layer lacks a token mixer of attention or linear attention, or an FFN (a one-mixer-per-block
        hybrid such as Nemotron-H; a Gated DeltaNet hybrid, every layer a mixer and an FFN, is not one)."""
        return self.mamba is not None or not all(self.ffn_layers) or \
            self.attention_layers + self.linear_layers != self.layers

    @property
    def attention_kind(self) -> str:
        if self.mla is not None:
            return "MLA"
        if self.kv_heads == self.heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else "GQA"


def megatron_gpt(layers: int, hidden: int, heads: int, vocab: int = 51200, seq: int = 2048) -> Arch:
    """A Megatron-LM GPT of the given size (LayerNorm, GeLU 4H FFN, biases, learned positions, tied embeddings):
    the models of the Megatron-LM and Korthikanti et al. scaling tables (Narayanan et al. 2021 Table 1)."""
    return Arch(family="gpt", hidden=hidden, layers=layers, heads=heads, kv_heads=heads, head_dim=hidden // heads,
                ffn=4 * hidden, gated_ffn=False, vocab=vocab, tied_embeddings=True, max_context=seq, norm="layer",
                qkv_bias=True, o_bias=True, mlp_bias=True, learned_positions=seq, activation="gelu",
                moe_layers=(False,) * layers)
