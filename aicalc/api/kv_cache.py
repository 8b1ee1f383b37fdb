"""KV-cache and inference memory per device, and how many sequences fit (vLLM's accounting, IM-10…IM-12)."""

from __future__ import annotations

from aicalc.api.results import Block, Table


class KVCache(Table):
    """Columns: ``batch``, ``context``, ``kv_bytes_per_token`` (all devices; a DSA model's indexer keys included, and
    shown on their own as ``indexer_bytes_per_token``), ``kv_cache_bytes`` (all
    devices), ``kv_cache_bytes_per_device`` (for a DSA model with ``indexer_cache_bytes_per_device``, the indexer keys'
    part of it), ``kv_per_sequence_bytes``, ``paging_waste_bytes_per_device``,
    ``weights_bytes_per_device``, ``runtime_overhead_bytes``, ``total_bytes_per_device``; with a chip also
    ``memory_bytes``, ``kv_budget_bytes_per_device``, ``max_batch``, ``max_concurrency``, ``fits``,
    ``headroom_bytes`` (what is left, never negative), ``shortfall_bytes`` (what is missing) and, when asked,
    ``max_context``; on a chip whose only memory is on-chip SRAM also ``chips_needed`` (the per-device columns
    are then shares of those chips). ``kv_per_sequence_bytes`` is one sequence's cache on one device. A model with
    recurrent layers, linear attention (Qwen3-Next, Qwen3.5) or Mamba-2 (Nemotron-H), also has ``state_bytes`` and
    ``state_bytes_per_device``: the fixed conv + recurrent state those layers keep per sequence, whatever the
    context, part of the cache columns above (and so of the total and of what fits)."""


def kv_cache(model, batch=1, context=4096, *, kv_dtype: str = "bf16", dtype: str = "release", tp: int | None = None,
             chip=None, block_size: int | None = 16, engine: str = "vllm", utilization=0.9, overhead=None,
             max_context: bool = False) -> KVCache:
    """KV cache of ``batch`` sequences of ``context`` tokens each (arrays broadcast), per device under TP.

    ``block_size``: paged-cache block in tokens (vLLM 16; None or 1 is exact); ``engine``: ``vllm`` (rolling
    sliding windows) or ``hf`` (transformers' DynamicCache). With ``chip`` (a chip or node id): the KV budget
    beside weights and runtime overhead at ``utilization`` of memory, ``max_batch`` and ``fits``; ``tp``
    defaults to the node's chips (a chip: 1);
    ``max_context=True`` adds the longest context that fits at each batch."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.catalog import (
        SRAM_KINDS,
        kv_format,
        load_decoder,
        load_node_or_chip,
        resident_weights,
        weight_format,
    )
    from aicalc.core import capacity
    from aicalc.core.geometry import check_tp
    from aicalc.core.kv_cache import bytes_of, held_tokens, kv_shape
    from aicalc.errors import ParameterError

    spec = load_decoder(model, "kv-cache")
    arch = spec.arch
    kv_dtype = kv_format(spec, kv_dtype)
    chip_obj, count = load_node_or_chip(chip) if chip is not None else (None, 1)
    tp = inputs.whole("tp", count if tp is None else tp)  # a node: one TP group over its chips
    check_tp(arch, tp)
    g = inputs.broadcast(batch=inputs.positive("batch", batch, whole=True),
                         context=inputs.positive("context", context, whole=True))
    B, S = g["batch"], g["context"]
    if block_size is not None:
        block_size = inputs.count("block_size", block_size)  # a whole number of tokens ≥ 1, as --block-size
    utilization = inputs.fraction("utilization", utilization)
    if count > 1 and tp > count:
        raise ParameterError("tp", tp, f"exceeds the {count} chips of '{chip}'")
    if max_context and chip_obj is None:
        raise ParameterError("max_context", True, "needs a chip")
    shape = kv_shape(arch, kv_dtype, tp, engine=engine)
    weights = resident_weights(spec, dtype, tp)
    dtype = weight_format(spec, dtype).label  # "release" resolved: the format the weights were counted in
    over = capacity.runtime_overhead_bytes(arch, tp) if overhead is None else inputs.nbytes("overhead", overhead)
    fl, ints = Block(B.size, 16), Block(B.size, 4, np.int64)  # the columns, written in place (out=)
    sram = chip_obj is not None and chip_obj.kind in SRAM_KINDS
    cols = {"batch": ints.row(), "context": ints.row(), "kv_bytes_per_token": fl.full(shape.bytes_per_token * tp),
            **({"indexer_bytes_per_token": fl.full(shape.indexer_bytes_per_token * tp)}
               if arch.indexer or arch.compressed else {}),
            "kv_cache_bytes": fl.row(), "kv_cache_bytes_per_device": fl.row(), "kv_per_sequence_bytes": fl.row(),
            "paging_waste_bytes_per_device": fl.row(), "weights_bytes_per_device": fl.full(weights),
            "runtime_overhead_bytes": fl.full(over), "total_bytes_per_device": fl.row()}
    if shape.state_bytes:  # recurrent layers: a fixed state per sequence, reported on its own
        cols["state_bytes_per_device"] = np.multiply(B, shape.state_bytes, out=fl.row())
        cols["state_bytes"] = np.multiply(cols["state_bytes_per_device"], tp, out=fl.row())
    room = None
    if chip_obj is not None and not sram:
        room = capacity.room_bytes(chip_obj.usable_memory_bytes, utilization, weights, over)  # one number: no array
        budget = fl.full(np.maximum(room, 0.0))
        cols |= {"memory_bytes": ints.full(chip_obj.usable_memory_bytes), "kv_budget_bytes_per_device": budget,
                 "max_batch": ints.row(), "max_concurrency": fl.row(),
                 "fits": np.empty(B.shape, dtype=bool) if room > 0 else np.zeros(B.shape, dtype=bool),
                 "headroom_bytes": fl.row(), "shortfall_bytes": fl.row()}
    for lo in range(0, B.size, CHUNK):
        sl = slice(lo, lo + CHUNK)
        _fill({k: v[sl] for k, v in cols.items() if isinstance(v, np.ndarray) and v.strides[0]}, shape, B[sl], S[sl],
              block_size, tp, weights + over, room)
    if arch.indexer is not None:  # the indexer keys' share of the cache (DSA has no sliding layers: one ratio)
        tokens = cols["kv_cache_bytes_per_device"]
        if shape.state_bytes:  # of the tokens' bytes only: a linear-attention state is per sequence
            tokens = tokens - cols["state_bytes_per_device"]
        cols["indexer_cache_bytes_per_device"] = tokens * (shape.indexer_bytes_per_token / shape.bytes_per_token)
    if arch.compressed is not None:  # DeepSeek-V4: window, compressed entries, indexer keys (and hf's buffers) apart
        from aicalc.core.compressed_attention import cache_columns

        cols |= cache_columns(arch, shape, B, S, engine)
    warnings = []
    longest = float(S.max())
    if longest > arch.max_context:
        warnings.append(f"context {int(longest):,} exceeds the model's max_position_embeddings {arch.max_context:,}")
    if sram:
        cols |= _sram_only(chip_obj, weights * tp, bytes_of(shape, B, held_tokens(shape, S)) * tp, B)
        if max_context:  # more chips hold a longer cache: the model's own limit
            cols["max_context"] = np.full(B.shape, float(arch.max_context))
    elif chip_obj is not None:
        if max_context:
            mc = capacity.max_context(shape, budget, B, block_size)
            capped = mc > arch.max_context
            cols["max_context"] = np.where(capped, arch.max_context, mc)
            if capped.any():
                warnings.append(f"max_context capped at the model's limit of {arch.max_context:,} tokens")
        if room <= 0:
            warnings.append(f"weights ({_gib(weights)}) and runtime overhead ({_gib(over)}) leave no room on "
                            f"{chip_obj.id} at {utilization:.0%} utilization: short by {_gib(-room)} "
                            "per device")
    return KVCache(cols, warnings, model=spec, chip=chip_obj, shape=shape, tp=tp, kv_dtype=kv_dtype, dtype=dtype,
                   block_size=block_size, engine=engine, utilization=utilization, overhead_bytes=over)


CHUNK = 1 << 18  # points computed at a time (2 MB a column): a chunk's intermediates stay in the processor's cache


def _fill(rows: dict, shape, B, S, block_size, tp, fixed, room) -> None:
    """The columns' values for a chunk of ``B`` sequences of ``S`` tokens, written into ``rows`` (the chunk's
    slices of the columns that are arrays): the bytes as :func:`aicalc.core.kv_cache.kv_cache_bytes` counts them
    (exact and paged), ``fixed`` (weights and runtime overhead) beside them, and with a chip's ``room`` (None: no
    chip) what fits in it (:func:`aicalc.core.capacity.fit_of_bytes`)."""
    import numpy as np

    from aicalc.core import capacity
    from aicalc.core.kv_cache import held_tokens

    np.copyto(rows["batch"], B, casting="unsafe")  # as astype(np.int64)
    np.copyto(rows["context"], S, casting="unsafe")
    # one sequence's bytes over all layers (every token, then whole blocks), then the batch's
    exact = held_tokens(shape, S, None, out=rows["paging_waste_bytes_per_device"], each=shape.bytes_per_token_layer)
    exact = np.multiply(B, exact, out=exact)
    per_seq = held_tokens(shape, S, block_size, out=rows["kv_per_sequence_bytes"], each=shape.bytes_per_token_layer)
    if shape.state_bytes:  # every sequence's recurrent state (the same in the exact and the paged count)
        per_seq += shape.state_bytes
        exact += B * shape.state_bytes
    paged = np.multiply(B, per_seq, out=rows["kv_cache_bytes_per_device"])
    np.multiply(paged, tp, out=rows["kv_cache_bytes"])
    np.subtract(paged, exact, out=exact)  # the paging waste
    np.add(fixed, paged, out=rows["total_bytes_per_device"])
    if room is None:
        return
    # the whole sequences a temporary: max_batch takes them as ints
    fit, _ = capacity.fit_of_bytes(shape, np.maximum(room, 0.0), per_seq, block_size, into=rows["max_concurrency"])
    np.copyto(rows["max_batch"], fit, casting="unsafe")
    if room > 0:
        np.greater_equal(fit, B, out=rows["fits"])
    headroom = np.subtract(room, paged, out=rows["headroom_bytes"])
    np.maximum(headroom, 0.0, out=headroom)
    shortfall = np.subtract(paged, room, out=rows["shortfall_bytes"])
    np.maximum(shortfall, 0.0, out=shortfall)


def _sram_only(chip, weights, kv, B) -> dict:
    """The columns of a chip whose only memory is on-chip SRAM (Groq LPU, Cerebras WSE): the weights and the
    cache are spread over as many chips as they fill, ``chips_needed`` (the count roofline and compare price, by
    the same formula as :func:`aicalc.api.roofline.roofline`), with no engine runtime beside them; per device is
    a share of that deployment. ``max_batch``: sequences of this context that fit beside the weights on those
    chips."""
    import numpy as np

    mem = float(chip.usable_memory_bytes)
    chips = np.ceil((weights + kv) / mem)
    per_seq = kv / B  # one sequence, all devices
    fit = np.floor((chips * mem - weights) / np.maximum(per_seq, 1.0))
    return {"chips_needed": chips.astype(np.int64), "kv_cache_bytes": kv, "weights_bytes_per_device": weights / chips,
            "kv_cache_bytes_per_device": kv / chips, "kv_per_sequence_bytes": per_seq / chips,
            "runtime_overhead_bytes": 0.0, "total_bytes_per_device": (weights + kv) / chips,
            "paging_waste_bytes_per_device": 0.0, "memory_bytes": chip.usable_memory_bytes,
            "kv_budget_bytes_per_device": (chips * mem - weights) / chips, "max_batch": fit.astype(np.int64),
            "max_concurrency": fit, "fits": np.ones(B.shape, dtype=bool), "headroom_bytes": (chips * mem - weights - kv)
            / chips, "shortfall_bytes": np.zeros(B.shape)}


def _gib(x: float) -> str:
    from aicalc.units import fmt_bytes

    return fmt_bytes(float(x))
