"""A serving deployment under continuous batching: TTFT, TPOT, tokens/s, fit, latency targets and cost."""

from __future__ import annotations

from aicalc.api.results import Table

BLOCK = 16  # vLLM's paged-cache block


class Serving(Table):
    """Columns: ``concurrency``, ``prompt``, ``gen``, ``replicas``, ``tp``, ``chips``, ``batch_per_replica``,
    ``ttft_s``, ``tpot_s``, ``output_tokens_per_s`` (whole deployment), ``output_tokens_per_s_per_chip``,
    ``tokens_per_s_per_sequence``, ``ideal_ttft_s``, ``ideal_tpot_s``, ``ideal_output_tokens_per_s``,
    ``weights_bytes_per_device``, ``kv_cache_bytes_per_device``, ``total_bytes_per_device``, ``fits``,
    ``meets_slo``; with a price ``usd_per_million_output_tokens`` and ``usd_per_request``; with a TDP
    ``joules_per_output_token``."""


def max_concurrency(model, chip="h100-sxm", *, tp: int = 1, chips: int | None = None, prompt=1024, gen=256,
                    dtype: str = "bf16", kv_dtype: str = "bf16", utilization=0.9) -> int:
    """Requests of ``prompt + gen`` tokens the whole deployment holds in its KV budget (0 when none)."""
    from aicalc.api import inputs
    from aicalc.api.catalog import load_model, load_node_or_chip
    from aicalc.core import capacity
    from aicalc.core.geometry import weight_bytes_per_device
    from aicalc.core.kv_cache import kv_shape

    arch = load_model(model).arch
    chip_obj, _ = load_node_or_chip(chip)
    replicas = (chips or tp) // tp
    weights = weight_bytes_per_device(arch, dtype, tp)
    budget = float(capacity.kv_budget_bytes(chip_obj.memory_bytes, inputs.fraction("utilization", utilization),
                                            weights, capacity.runtime_overhead_bytes(arch, tp)))
    from aicalc.core.serving import live_context

    longest = float(live_context(inputs.positive("prompt", prompt).max(), inputs.positive("gen", gen).max()))
    fit = int(capacity.max_batch(kv_shape(arch, kv_dtype, tp), budget, longest, BLOCK)[0]) if budget > 0 else 0
    return fit * replicas


def serve(model, chip="h100-sxm", concurrency=1, prompt=1024, gen=256, *, tp: int = 1, chips: int | None = None,
          dtype: str = "bf16", kv_dtype: str = "bf16", max_ttft=None, max_tpot=None, price=None,
          utilization=0.9, engine: str | None = None, efficiency=None) -> Serving:
    """``concurrency`` requests of ``prompt`` + ``gen`` tokens over ``chips`` chips in replicas of TP ``tp``
    (arrays broadcast); ``concurrency="max"``: as many as the KV budget holds (serving at full load).
    ``max_ttft`` / ``max_tpot`` (seconds or ``"500ms"``) set ``meets_slo``; ``price``: USD per chip-hour
    (default: the chip preset's); ``engine``: an engine profile (default generic)."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.roofline import cost_setup
    from aicalc.core import capacity, cost, latency
    from aicalc.core.efficiency import IDEAL
    from aicalc.core.geometry import check_tp, weight_bytes_per_device
    from aicalc.core.kv_cache import kv_cache_bytes, kv_shape
    from aicalc.core.serving import live_context, prefill_batch, steady_state
    from aicalc.errors import ParameterError

    tp = int(tp)
    chips = int(chips) if chips is not None else tp
    cs = cost_setup(model, chip, dtype, kv_dtype, tp_needs_link=tp > 1, engine=engine, efficiency=efficiency)
    arch = cs.model.arch
    check_tp(arch, tp)
    if chips < 1 or chips % tp:
        raise ParameterError("chips", chips, f"is not a positive multiple of tp={tp}")
    replicas = chips // tp
    if isinstance(concurrency, str) and concurrency == "max":
        concurrency = max(1, max_concurrency(model, chip, tp=tp, chips=chips, prompt=prompt, gen=gen, dtype=dtype,
                                             kv_dtype=kv_dtype, utilization=utilization))
    g = inputs.broadcast(concurrency=inputs.positive("concurrency", concurrency, whole=True),
                         prompt=inputs.positive("prompt", prompt, whole=True),
                         gen=inputs.positive("gen", gen, whole=True))
    C, P, G = g["concurrency"], g["prompt"], g["gen"]
    max_ttft = inputs.seconds("max_ttft", max_ttft) if max_ttft is not None else None
    max_tpot = inputs.seconds("max_tpot", max_tpot) if max_tpot is not None else None
    if price is not None:
        price = float(inputs.positive("price", price).reshape(-1)[0])
    utilization = inputs.fraction("utilization", utilization)
    weights = weight_bytes_per_device(arch, dtype, tp)
    overhead = capacity.runtime_overhead_bytes(arch, tp)
    budget = float(capacity.kv_budget_bytes(cs.chip.memory_bytes, utilization, weights, overhead))
    per_rep = np.ceil(C / replicas)
    k = prefill_batch(per_rep, G, P)  # prompts prefilled together in one pass
    out = {}
    for name, eff in (("est", cs.efficiency), ("ideal", IDEAL)):
        pre = latency.phase(cs.shape, cs.roofs, cs.formats, eff, k, P, 0.0, tp, logits_tokens=1.0)
        dec = latency.phase(cs.shape, cs.roofs, cs.formats, eff, per_rep, 1.0, P + G / 2.0, tp)
        t_pre, t_dec = (pre.t_est, dec.t_est) if name == "est" else (pre.t_ideal, dec.t_ideal)
        ttft, tpot = steady_state(t_pre, t_dec, per_rep, G, k)
        out[name] = (ttft, tpot, replicas * per_rep / tpot)
    ttft, tpot, tps = out["est"]
    kv_dev = kv_cache_bytes(kv_shape(arch, kv_dtype, tp), per_rep, live_context(P, G), BLOCK)
    fits = (kv_dev <= budget) & (budget > 0)
    meets = np.ones_like(C, dtype=bool)
    if max_ttft is not None:
        meets &= ttft <= max_ttft
    if max_tpot is not None:
        meets &= tpot <= max_tpot
    cols = {"concurrency": C.astype(np.int64), "prompt": P.astype(np.int64), "gen": G.astype(np.int64),
            "replicas": replicas, "tp": tp, "chips": chips, "batch_per_replica": per_rep.astype(np.int64),
            "prefill_batch": k,
            "ttft_s": ttft, "tpot_s": tpot, "output_tokens_per_s": tps,
            "output_tokens_per_s_per_chip": tps / chips, "tokens_per_s_per_sequence": 1.0 / tpot,
            "ideal_ttft_s": out["ideal"][0], "ideal_tpot_s": out["ideal"][1],
            "ideal_output_tokens_per_s": out["ideal"][2],
            "weights_bytes_per_device": weights, "kv_cache_bytes_per_device": kv_dev,
            "total_bytes_per_device": weights + overhead + kv_dev, "fits": fits, "meets_slo": meets & fits}
    price = price or cs.chip.price_per_hour_usd
    if price:
        cols["usd_per_million_output_tokens"] = cost.usd_per_million_tokens(chips, tps, price)
        cols["usd_per_request"] = cost.usd(chips, cost.request_seconds(ttft, tpot, G, C), price)
    if cs.chip.tdp_w:
        cols["joules_per_output_token"] = cost.joules_per_token(chips, tps, cs.chip.tdp_w)
    warnings = list(cs.warnings)
    if not fits.all():
        warnings.append(f"{int((~fits).sum())} row(s) do not fit: the KV cache of {int(per_rep.max())} sequences per "
                        f"replica exceeds the {budget / 2**30:.1f} GiB left per device beside weights and overhead")
    return Serving(cols, warnings, setup=cs, replicas=replicas, chips=chips, price=price, budget_bytes=budget,
                   max_ttft=max_ttft, max_tpot=max_tpot, utilization=utilization)
