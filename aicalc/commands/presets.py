"""``aicalc presets list|show``: browse the catalog and inspect one entry or a config.json."""

from __future__ import annotations

from aicalc.catalog import store
from aicalc.errors import AicalcError
from aicalc.result import Result


def model_row(spec) -> dict:
    from aicalc.core.kv_cache import kv_bytes_per_token
    from aicalc.core.params import count_params

    a = spec.arch
    n = count_params(a)
    row = {
        "id": spec.id, "kind": "model", "name": spec.name, "family": a.family, "attention": a.attention_kind,
        "params": n.total, "active_params": n.active, "official_params": spec.official_params,
        "embedding_params": n.embedding, "lm_head_params": n.lm_head,
        "layers": a.layers, "hidden": a.hidden, "heads": a.heads, "kv_heads": a.kv_heads, "head_dim": a.head_dim,
        "ffn": a.ffn, "ffn_type": "gated" if a.gated_ffn else "plain", "activation": a.activation,
        "vocab": a.vocab, "tied_embeddings": a.tied_embeddings, "norm": a.norm, "max_context": a.max_context,
        "sliding_window": a.sliding_window, "sliding_layers": a.sliding_layers,
        "kv_bytes_per_token": None if a.encoder else kv_bytes_per_token(a, "bf16"),
    }
    if a.encoder:  # a sequence classifier: lm_head_params counts its pooler and classifier
        row |= {"classifier_labels": a.labels, "token_types": a.token_types}
    if a.moe:
        row |= {"experts": a.moe.experts, "experts_per_token": a.moe.experts_per_token,
                "shared_experts": a.moe.shared_experts, "expert_ffn": a.moe.expert_ffn, "moe_layers": a.n_moe_layers}
    if a.mamba is not None:
        from aicalc.core.kv_cache import kv_shape

        m = a.mamba
        row |= {"attention_layers": a.attention_layers, "mamba_layers": a.mamba_layers,
                "mamba_heads": m.heads, "mamba_head_dim": m.head_dim, "ssm_state": m.state, "mamba_groups": m.groups,
                "mamba_params": n.mamba, "state_bytes_per_sequence": kv_shape(a).state_bytes}
    if a.linear_layers:  # Gated DeltaNet layers: no KV cache, a fixed state per sequence (16-bit, as vLLM keeps it)
        from aicalc.core.kv_cache import kv_shape

        la = a.linear_attention
        row |= {"linear_attention_layers": a.linear_layers, "linear_key_heads": la.key_heads,
                "linear_value_heads": la.value_heads, "linear_key_head_dim": la.key_head_dim,
                "linear_value_head_dim": la.value_head_dim, "state_bytes_per_sequence": kv_shape(a).state_bytes}
    if a.mla:
        row |= {"q_lora_rank": a.mla.q_lora_rank, "kv_lora_rank": a.mla.kv_lora_rank,
                "qk_rope_head_dim": a.mla.qk_rope_head_dim, "v_head_dim": a.mla.v_head_dim}
    if a.indexer:  # DeepSeek Sparse Attention's lightning indexer
        row |= {"index_heads": a.indexer.heads, "index_head_dim": a.indexer.head_dim, "index_topk": a.indexer.topk,
                "indexer_layers": sum(a.indexer.layers)}
    return row | {"source": spec.source}


def chip_row(chip, count: int = 1, node_id: str | None = None) -> dict:
    row = {
        "id": node_id or chip.id, "kind": "node" if node_id else "chip", "name": chip.name, "vendor": chip.vendor,
        "chip": chip.id, "count": count, "memory_bytes": chip.memory_bytes,
        "usable_memory_bytes": chip.usable_memory_bytes, "memory_type": chip.memory_type,
        "memory_bandwidth_bytes_per_s": chip.memory_bandwidth_bytes_per_s,
        "peak_bf16_flop_per_s": chip.peak_flop_per_s("bf16") or chip.peak_flop_per_s("fp16"),
    }
    for dt in ("fp32", "tf32", "fp16", "fp8", "int8", "fp4", "int4"):
        if dt in chip.dense_tflops:
            row[f"peak_{dt}_flop_per_s"] = chip.peak_flop_per_s(dt)
    ic = chip.interconnect
    row |= {
        "sram_bytes": int(chip.sram) if chip.sram else None,
        "interconnect": ic.name if ic else None,
        "interconnect_per_direction_bytes_per_s": ic.per_direction_bytes_per_s if ic else None,
        "tdp_w": chip.tdp_w, "price_per_hour_usd": chip.price_per_hour_usd,
        "generation": chip.generation, "source": chip.source,
    }
    return row


def _node_totals(row: dict, node, chip, count: int) -> dict:
    """A node's row in node terms: memory, bandwidth and peaks summed over its chips, its own link, power and
    price (a node without its own price: count × the chip's); the chip's figures stay under ``…_per_chip``."""
    out = {**row, "name": node.name}
    for k in [k for k in row if k == "memory_bytes" or k.endswith(("_bytes_per_s", "_flop_per_s"))
              and not k.startswith("interconnect")]:
        if row[k] is not None:
            out[k], out[f"{k}_per_chip"] = row[k] * count, row[k]
    ic = getattr(node, "interconnect", None)
    if ic is not None:
        out["interconnect"] = ic.name
        out["interconnect_per_direction_bytes_per_s"] = ic.per_direction_bytes_per_s
    out.pop("tdp_w", None)
    out["system_power_w"] = getattr(node, "system_power_w", None)
    out["source"] = getattr(node, "source", None) or row.get("source")
    own = getattr(node, "price_per_hour_usd", None)
    chip_price = row.get("price_per_hour_usd")
    out["price_per_hour_usd"] = own or (chip_price * count if chip_price else None)
    return out


def show(name: str) -> Result:
    name = store.canonical("chip", name) or store.canonical("node", name) or store.canonical("model", name) or name
    if name in store.ids("chip") or name in store.ids("node"):
        chip, count = store.resolve_chip(name)
        row = chip_row(chip, count, name if name in store.ids("node") and name not in store.ids("chip") else None)
        notes = list(chip.notes)
        if row["kind"] == "node":
            row, notes = _node_totals(row, store.load("node", name), chip, count), \
                [*store.load("node", name).notes, f"per chip: aicalc presets show {chip.id}"]
    else:
        from aicalc.api.catalog import load_model
        from aicalc.errors import UnknownPreset

        try:
            spec = load_model(name)  # a preset, a config.json / folder, a .gguf file or a Hub id
        except UnknownPreset:
            raise UnknownPreset("preset", store._short(name),
                                [*store.ids("chip"), *store.ids("node"), *store.ids("model")]) from None
        row = model_row(spec)
        from aicalc.api.catalog import resident_weights, weight_format

        # the weights as released (a preset's release: block, a checkpoint's own bytes, else bf16), one device
        row |= {"release_dtype": weight_format(spec, "release").label,
                "release_weights_bytes": float(resident_weights(spec, "release", 1))}
        rel = getattr(spec, "release", None)
        if rel is not None and rel.checkpoint_bytes:
            row["release_checkpoint_bytes"] = rel.checkpoint_bytes  # published, for comparison
        ck = getattr(spec, "checkpoint", None)
        if ck is not None:  # what the files store, exactly
            row |= {"checkpoint_bytes": ck.total_bytes, "checkpoint_tensors": ck.tensors,
                    "checkpoint_quant_method": ck.quant_method, "checkpoint_kv_dtype": ck.kv_dtype}
        notes = [f"sized: {spec.arch.extra['sized']}"] if spec.arch.extra.get("sized") else []
    return Result("presets show", {"id": name}, [row], title=row["name"], notes=notes)


def list_(kind: str | None) -> Result:
    if kind not in (None, "chip", "model", "node"):
        raise AicalcError(f"--kind must be chip, model or node, got '{kind}'")
    rows = []
    for k in ("chip", "node", "model") if kind is None else (kind,):
        for pid in store.ids(k):
            if k == "model":
                r = model_row(store.resolve_model(pid))
                rows.append({"id": pid, "kind": k, "name": r["name"], "params": r["params"],
                             "active_params": r["active_params"], "layers": r["layers"], "attention": r["attention"],
                             "kv_bytes_per_token": r["kv_bytes_per_token"]})
            else:
                chip, count = store.resolve_chip(pid)
                rows.append({"id": pid, "kind": k, "name": chip.name if k == "chip" else store.load("node", pid).name,
                             "memory_bytes": chip.memory_bytes * count,
                             "memory_bandwidth_bytes_per_s": chip.memory_bandwidth_bytes_per_s * count,
                             "peak_bf16_flop_per_s": (chip.peak_flop_per_s("bf16") or chip.peak_flop_per_s("fp16") or 0) * count or None})
    return Result("presets list", {"kind": kind}, rows)


def fits_on(chip: str, context="4k", dtype: str = "release", lora: bool = False) -> Result:
    """The model presets that fit on ``chip`` (a chip, or a node's chips): serving one sequence of ``context``
    tokens at ``dtype`` (vLLM's accounting, TP over a node's chips), and with ``lora`` a LoRA fine-tune (rank 16,
    q/v, bf16, full recompute, micro-batch 1 at the context) per chip."""
    import aicalc
    from aicalc.api.catalog import load_node_or_chip
    from aicalc.core.geometry import check_tp
    from aicalc.errors import AicalcError as Err
    from aicalc.units import parse_int

    chip_obj, count = load_node_or_chip(chip)
    ctx = parse_int(str(context), "--context")
    rows = []
    encoders = 0
    for pid in store.ids("model"):
        spec = store.resolve_model(pid)
        if spec.arch.encoder:  # no KV cache, nothing to serve: a sequence classifier is sized for training only
            encoders += 1
            continue
        tp = count
        try:
            check_tp(spec.arch, tp)
        except Err:
            tp = 1
        kv = aicalc.kv_cache(spec, batch=1, context=ctx, dtype=dtype, tp=tp, chip=chip_obj, max_context=True)
        row = {"id": pid, "params": model_row(spec)["params"], "tp": tp,
               "weights_bytes_per_device": float(kv.weights_bytes_per_device[0]),
               "fits": bool(kv.fits[0]) and ctx <= spec.arch.max_context, "max_batch": int(kv.max_batch[0]),
               "max_context": float(kv.max_context[0])}
        if "chips_needed" in kv.columns:  # SRAM-only chips: the model spans as many as its bytes fill
            row["chips_needed"] = int(kv.chips_needed[0])
        if lora:
            t = aicalc.train_memory(spec, batch=1, seq=ctx, tp=1, recompute="full", lora_rank=16,
                                    lora_targets="q,v", chip=chip_obj)
            row["lora_peak_bytes"] = float(t.peak_bytes[0])
            row["lora_fits"] = bool(t.fits[0])
        rows.append(row)
    total = len(rows)
    rows = sorted((r for r in rows if r["fits"]), key=lambda r: -r["params"])  # the answer: the models that fit
    n = len(rows)
    where = f"{count} × {chip_obj.id}" if count > 1 else chip_obj.id
    notes = [f"{n} of {total} models fit {where} at {dtype} with one {ctx:,}-token sequence (weights, runtime "
             "overhead and KV cache within 90 % of memory, and the context within the model's own limit); the "
             f"other {total - n} are left out"
             + ("; lora: rank 16 on q/v, bf16, full recompute, micro-batch 1 on one chip" if lora else "")
             + (f"; the {encoders} encoders (BERT, RoBERTa: no KV cache) are sized by train-mem only" if encoders
                else "")]
    columns = ["id", "params", "tp", *(["chips_needed"] if rows and "chips_needed" in rows[0] else []),
               "weights_bytes_per_device", "max_batch", "max_context"] + \
        (["lora_peak_bytes", "lora_fits"] if lora else [])
    return Result("presets list", {"fits_on": chip, "context": ctx, "dtype": dtype, "lora": lora}, rows,
                  title=f"models on {where}", notes=notes, columns=columns)
