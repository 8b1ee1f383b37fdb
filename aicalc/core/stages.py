"""Pipeline stages: how many decoder layers each pipeline rank holds, as Megatron-Core and torchtitan split them.

* **Even split**: when ``pp`` divides the layers, every rank holds ``L/pp`` (Megatron-Core's default,
  ``get_num_layers_to_build``: ``num_layers // pipeline_model_parallel_size``).
* **Embedding and loss counted as layers** (otherwise): Megatron-Core's ``--account-for-embedding-in-pipeline-split``
  and ``--account-for-loss-in-pipeline-split`` count the embedding and the loss as one layer each, split the
  ``L + 2`` over the ``pp·vp`` virtual stages and take one Transformer layer from the first and from the last
  (``num_layers_to_build -= 1`` there); torchtitan's ``generate_llm_fqn_per_model_part(num_stages, num_layers,
  input_weight=1, output_weight=1)`` does the same and, where ``L + 2`` does not divide, gives the
  ``(L + 2) mod (pp·vp)`` leftover layers to the earliest stages. Llama 3 (arXiv 2407.21783 §3.3.2): "we reduce one
  Transformer layer each from the first and the last stages". Llama 3.1 405B's 126 layers on PP16: 7, 8 × 14, 7.
* **Given first and last stages** (Megatron-Core's ``--decoder-first-pipeline-num-layers`` /
  ``--decoder-last-pipeline-num-layers``): the other stages share the rest; where it does not divide, the earliest
  take one more (torchtitan's ``module_fqns_per_model_part`` runs any such split; Megatron asserts it divides).

With virtual stages (``vp`` > 1, the interleaved schedule) virtual stage ``j`` lives on rank ``j mod pp`` (Megatron's
and torchtitan's looped layout); a rank's layers are the sum of its chunks.
"""

from __future__ import annotations

from functools import lru_cache

from aicalc.errors import ParameterError


def _chunks_default(L: int, n: int) -> list[int]:
    """Layers per virtual stage for ``n`` stages: even where ``n`` divides L, else embedding and loss weighted as a
    layer each (torchtitan ``generate_llm_fqn_per_model_part``; Megatron's account-for-embedding/loss split)."""
    if L % n == 0:
        return [L // n] * n
    eff = L + 2
    per, extra = divmod(eff, n)
    if per < 1:
        raise ParameterError("pp", n, f"leaves a pipeline stage empty: {n} stages for {L} layers plus the "
                             "embedding and the loss")
    out = [per + (1 if j < extra else 0) for j in range(n)]
    out[0] -= 1
    out[-1] -= 1
    return out


@lru_cache(maxsize=4096)
def rank_layers(L: int, pp: int, vp: int = 1, first: int | None = None, last: int | None = None,
                moe_layers: tuple[bool, ...] | None = None) -> tuple[tuple[int, int], ...]:
    """Per pipeline rank, in order: (decoder layers, MoE layers among them). ``first``/``last``: the first and last
    ranks' layers (Megatron's ``--decoder-{first,last}-pipeline-num-layers``); ``moe_layers`` marks each layer (the
    model's ``Arch.moe_layers``)."""
    if pp < 1 or vp < 1:
        raise ParameterError("pp", pp, "must be at least 1")
    if pp == 1:
        if first is not None or last is not None:
            which = "first_stage_layers" if first is not None else "last_stage_layers"
            raise ParameterError(which, first if first is not None else last, "needs {pp} > 1 (one stage holds "
                                 "every layer)")
        ranks = [L]
    elif first is None and last is None:
        chunks = _chunks_default(L, pp * vp)
        ranks = [sum(chunks[k * pp + r] for k in range(vp)) for r in range(pp)]
    else:
        ranks = _ranks_given(L, pp, first, last)
    if moe_layers is None:
        return tuple((n, 0) for n in ranks)
    # model order of the chunks: virtual stage j = k·pp + r is chunk k of rank r
    if first is None and last is None and pp > 1:
        chunks = _chunks_default(L, pp * vp)
    else:
        chunks = [ranks[r] // vp + (1 if k < ranks[r] % vp else 0) for k in range(vp) for r in range(pp)]
    moe = [0] * pp
    start = 0
    for j, c in enumerate(chunks):
        moe[j % pp] += sum(moe_layers[start:start + c])
        start += c
    return tuple(zip(ranks, moe, strict=True))


def _ranks_given(L: int, pp: int, first: int | None, last: int | None) -> list[int]:
    for name, v in (("first_stage_layers", first), ("last_stage_layers", last)):
        if v is not None and not 0 <= v <= L:
            raise ParameterError(name, v, f"must lie between 0 and the {L} layers")
    rest, stages = L, pp
    for v in (first, last):
        if v is not None:
            rest -= v
            stages -= 1
    if rest < 0:
        raise ParameterError("last_stage_layers" if last is not None else "first_stage_layers",
                             last if last is not None else first,
                             f"with the first stage's {first} leaves fewer than 0 of the {L} layers")
    if stages == 0:
        if rest:
            raise ParameterError("last_stage_layers", last, f"with {{first_stage_layers}} {first} and {{pp}} 2 leaves "
                                 f"{rest} of the {L} layers on no stage")
        return [first, last]
    per, extra = divmod(rest, stages)
    if per < 1:
        which, v = ("first_stage_layers", first) if first is not None else ("last_stage_layers", last)
        raise ParameterError(which, v, f"leaves a pipeline stage empty: {rest} layer{'' if rest == 1 else 's'} for the other {stages} stages "
                             f"of {{pp}} {pp}")
    others = [per + (1 if i < extra else 0) for i in range(stages)]
    head = [first] if first is not None else [others.pop(0)]
    tail = [last] if last is not None else [others.pop()]
    return head + others + tail


def stage_candidates(L: int, pp: int, vp: int = 1, first: int | None = None, last: int | None = None,
                     moe_layers: tuple[bool, ...] | None = None) -> dict:
    """The stages whose memory can be the worst, as ``{name: (rank, layers, moe layers)}``: the first (embedding,
    the most micro-batches in flight under 1F1B), the second (the fullest middle stage with the most in flight: the
    leftover layers go to the earliest stages) and the last (LM head and loss)."""
    ranks = rank_layers(L, pp, vp, first, last, moe_layers)
    out = {"first": (0, *ranks[0])}
    if pp > 2:
        mids = ranks[1:-1]
        r = 1 + max(range(len(mids)), key=lambda i: (mids[i][0] * (pp - 1 - i), mids[i][1]))
        out["middle"] = (r, *ranks[r])
    if pp > 1:
        out["last"] = (pp - 1, *ranks[-1])
    return out


def describe(L: int, pp: int, vp: int = 1, first: int | None = None, last: int | None = None) -> str:
    """The split in words: ``7 + 8×14 + 7`` (layers per pipeline rank, equal runs collapsed)."""
    ranks = [n for n, _ in rank_layers(L, pp, vp, first, last)]
    parts, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[i]:
            j += 1
        parts.append(str(ranks[i]) if j == i else f"{ranks[i]}×{j - i + 1}")
        i = j + 1
    return " + ".join(parts)


def serving_stage_layers(L: int, pp: int) -> tuple[int, ...]:
    """Decoder layers per pipeline rank of a serving replica, as vLLM splits them (``get_pp_indices`` in
    vllm/distributed/utils.py): ``L // pp`` each, the ``L mod pp`` leftover layers one each to the ranks before
    the last (which holds the LM head), from the second-to-last backwards."""
    if pp < 1 or pp > L:
        raise ParameterError("pp", pp, f"must be between 1 and the model's {L} layers (one layer per stage at least)")
    parts = [L // pp] * pp
    for i in range(2, L % pp + 2):
        parts[-i] += 1
    return tuple(parts)


def stage_weight_bytes(wb, L: int, pp: int, tied: bool):
    """Weight bytes of the fullest rank of a ``pp``-stage serving replica, from one device's bytes of the whole
    model ``wb`` (:class:`aicalc.core.geometry.WeightBytes`): each rank its layers' share of the block weights,
    the first the embedding, the last the LM head (with tied embeddings the last holds its own copy of the table:
    vLLM's LlamaModel builds ``embed_tokens`` on the first rank, and on the last where ``tie_word_embeddings``)."""
    import numpy as np

    if pp == 1:
        return wb.total
    layers = serving_stage_layers(L, pp)
    block = wb.attention + wb.ffn + wb.norms
    head = wb.embedding if tied else wb.lm_head
    per = [block * n / L + (wb.embedding if r == 0 else 0.0) + (head if r == pp - 1 else 0.0)
           for r, n in enumerate(layers)]
    out = per[0]
    for x in per[1:]:
        out = np.maximum(out, x)
    return out
