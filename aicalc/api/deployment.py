"""Which deployment serves a traffic within its latency targets at the lowest cost: aggregated replicas
(:func:`aicalc.api.serving.serve`) or disaggregated prefill and decode pools (DistServe, Zhong et al. 2024;
Splitwise, Patel et al. 2024), over chips, TP degrees and formats."""

from __future__ import annotations

from aicalc.api.results import Table


class Deployments(Table):
    """One row per deployment: ``mode`` (aggregated or disaggregated), ``chip``, ``chips``, ``tp``,
    ``replicas`` (decode replicas when disaggregated), ``prefill_replicas``, ``prefill_tp``, ``dtype``,
    ``kv_dtype``, ``concurrency``, ``ttft_s``, ``tpot_s``, ``output_tokens_per_s``,
    ``output_tokens_per_s_per_chip``, ``tokens_per_s_per_user``, ``requests_per_s``,
    ``usd_per_million_output_tokens``, ``meets_slo``, ``pareto`` (not dominated in tokens/s per chip and per
    user)."""


def disaggregated(model, chip="h100-sxm", chips: int = 8, *, prompt=1024, gen=256, prefill_tp: int = 1,
                  decode_tp: int = 1, dtype="release", kv_dtype="bf16", max_ttft=None, max_tpot=None, engine=None,
                  utilization=None):
    """Every split of ``chips`` into prefill replicas (TP ``prefill_tp``) and decode replicas (TP ``decode_tp``):
    prefill pools prefill prompts in batches within the token budget, no larger than meets ``max_ttft``, and ship
    each request's KV cache to a
    decode replica (over the scale-up link inside a domain, else the scale-out NIC); decode pools decode with
    no prefill interleaved, at the largest batch that fits their KV and meets ``max_tpot``. A split serves
    min(prefill rate, decode rate) requests/s. Returns a list of row dicts."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.roofline import cost_setup
    from aicalc.api.serving import max_concurrency
    from aicalc.core import latency
    from aicalc.core.geometry import cache_bytes_per_token_layer, check_tp
    from aicalc.core.kv_cache import kv_shape
    from aicalc.core.serving import TOKEN_BUDGET

    P = inputs.whole("prompt", prompt)
    G = inputs.whole("gen", gen)
    chips = inputs.whole("chips", chips)
    prefill_tp, decode_tp = inputs.whole("prefill_tp", prefill_tp), inputs.whole("decode_tp", decode_tp)
    ttft_cap = inputs.seconds("max_ttft", max_ttft) if max_ttft is not None else np.inf
    tpot_cap = inputs.seconds("max_tpot", max_tpot) if max_tpot is not None else np.inf
    pre = cost_setup(model, chip, dtype, kv_dtype, tp_needs_link=prefill_tp > 1, engine=engine)
    dec = cost_setup(model, chip, dtype, kv_dtype, tp_needs_link=decode_tp > 1, engine=engine)
    arch = pre.model.arch
    check_tp(arch, prefill_tp)
    check_tp(arch, decode_tp)
    # prefill: k prompts per pass, at most the token budget's, and no more than the TTFT target allows (a
    # prefill pool sizes its batches to the target, DistServe §4); rate = k / t_pre(k) per replica
    k_max = max(1.0, np.floor(TOKEN_BUDGET / P))
    ks = np.array(inputs.distinct(np.minimum(np.round(np.geomspace(1, k_max, 16)), k_max)))
    t_pres = latency.phase(pre.shape, pre.roofs, pre.formats, pre.efficiency, ks, P, 0.0, prefill_tp,
                           logits_tokens=1.0).t_est
    # KV transfer of one request: its cache leaves the prefill replica over each chip's link
    ic = pre.chip.interconnect
    domain = (ic.domain if ic else None) or 8
    up = (ic.per_direction_bytes_per_s if ic else None) or 32e9
    out = (pre.chip.scale_out_gbs or 25.0) * 1e9
    # (a hybrid's recurrent layers, linear attention or Mamba, ship their fixed state instead of tokens; DeepSeek-V4
    # its windows beside the compressed entries)
    kv_bytes = float(cache_bytes_per_token_layer(arch, kv_dtype, 1)) * arch.attention_layers * P + \
        kv_shape(arch, kv_dtype).fixed_bytes(P)
    # decode: the largest batch that fits and meets the TPOT target
    top = max(1, max_concurrency(model, chip, tp=decode_tp, prompt=P, gen=G, dtype=dtype, kv_dtype=kv_dtype,
                                 utilization=utilization))
    batches = np.array(inputs.distinct(np.minimum(np.round(np.geomspace(1, top, 24)), top)))
    t_dec = latency.phase(dec.shape, dec.roofs, dec.formats, dec.efficiency, batches, 1.0, P + G / 2.0,
                          decode_tp).t_est
    ok = t_dec <= tpot_cap
    b = float(batches[ok][-1]) if ok.any() else float(batches[0])
    tpot = float(t_dec[ok][-1]) if ok.any() else float(t_dec[0])
    decode_rate = b / tpot / G  # requests/s one decode replica completes
    rows = []
    for n_p in range(1, chips // prefill_tp):
        n_d = (chips - n_p * prefill_tp) // decode_tp
        if n_d < 1:
            continue
        used = n_p * prefill_tp + n_d * decode_tp
        transfer = kv_bytes / (prefill_tp * (up if used <= domain else out))
        fast = t_pres + transfer <= ttft_cap
        i = int(np.flatnonzero(fast)[-1]) if fast.any() else 0
        t_pre, k = float(t_pres[i]), float(ks[i])
        req_s = min(n_p * k / t_pre, n_d * decode_rate)
        ttft = t_pre + transfer
        rows.append({"mode": "disaggregated", "chip": pre.chip.id, "chips": used, "tp": decode_tp,
                     "replicas": n_d, "prefill_replicas": n_p, "prefill_tp": prefill_tp, "decode_tp": decode_tp,
                     "dtype": dec.dtype_label,
                     "kv_dtype": kv_dtype, "concurrency": int(b * n_d), "ttft_s": ttft, "tpot_s": tpot,
                     "kv_transfer_s": transfer, "requests_per_s": req_s, "output_tokens_per_s": req_s * G,
                     "meets_slo": bool(ttft <= ttft_cap and tpot <= tpot_cap)})
    return rows


# Bounds on one deployment search (docs/robustness.md), counted before any is evaluated: each configuration (chip ×
# TP × dtype × KV dtype) costs a serving estimate over a concurrency ladder (~30 ms), each disaggregated split of a
# configuration's chips a prefill/decode balance (~0.1 ms). A search of every chip preset, five TP degrees and four
# formats is ~600 configurations of ~8 splits.
MAX_SEARCH_CONFIGS = 2_000
MAX_SEARCH_SPLITS = 200_000


def search_size(chips, total_chips: int | None, tps=None, dtypes=("release",), kv_dtypes=("bf16",),
                disaggregate: bool = True, pipeline: bool = True) -> tuple[int, int]:
    """(configurations, disaggregated splits) a :func:`search_deployments` of these arguments evaluates at most,
    counted from the arguments alone."""
    from aicalc.api.catalog import load_node_or_chip

    configs = splits = 0
    formats = len(dtypes) * len(kv_dtypes)
    for chip_id in [chips] if isinstance(chips, str) else chips:
        chip, count = load_node_or_chip(chip_id)
        n = total_chips or count
        for tp in tps or [t for t in (1, 2, 4, 8, 16) if n % t == 0]:
            configs += formats * len(pipelines(chip, int(tp), n, pipeline))
            if disaggregate and n >= 2:
                splits += formats * max(0, n // max(int(tp), 1) - 1)
    return configs, splits


def check_search_size(configs: int, splits: int, param: str = "total_chips") -> None:
    """Refuse a search (or the searches of a budget file together) above MAX_SEARCH_CONFIGS configurations or
    MAX_SEARCH_SPLITS disaggregated splits, before any is evaluated."""
    from aicalc.errors import ParameterError

    if configs > MAX_SEARCH_CONFIGS:
        raise ParameterError(param, "…", f"makes a deployment search of {configs:,} configurations (chip × TP × dtype "
                             f"× KV dtype); a search is limited to {MAX_SEARCH_CONFIGS:,} (see docs/robustness.md)")
    if splits > MAX_SEARCH_SPLITS:
        raise ParameterError(param, "…", f"makes a deployment search of {splits:,} prefill/decode splits; a search is "
                             f"limited to {MAX_SEARCH_SPLITS:,} (fewer chips or a larger TP; see "
                             "docs/robustness.md)")


PIPELINES = (2, 4)  # pipeline stages a search tries across scale-up domains


def pipelines(chip, tp: int, n: int | None, on: bool = True) -> list[int]:
    """Pipeline stages a search tries at ``tp`` chips per replica on ``n`` chips: 1; with ``on``, a TP group
    that fills the chip's scale-up domain also in 2 and 4 stages over as many domains (vLLM's multi-node layout:
    TP inside a node, PP across nodes), where tp × pp divides n (``n`` None: a fleet of any size)."""
    ic = getattr(chip, "interconnect", None)
    domain = (ic.domain if ic else None) or 0
    if not on or tp != domain:
        return [1]
    return [1] + [p for p in PIPELINES if n is None or n % (tp * p) == 0]


MOE_LAYOUTS = ("tp", "ep", "dep")  # per TP degree of an MoE model: plain TP, EP over the TP chips, EP + DP attention


def moe_layouts(arch, tp: int, speculation=None) -> list[tuple[int, int]]:
    """(ep, attention_dp) a search tries at ``tp`` chips per replica: (1, 1); for an MoE model also EP over the
    replica's chips with TP attention (vLLM ``--enable-expert-parallel``) and with DP attention (SGLang and
    TensorRT-LLM's DEP), where the engines can lay them out (:func:`aicalc.core.geometry.check_parallel`);
    speculative decoding is priced on plain TP replicas only."""
    from aicalc.core.geometry import check_parallel
    from aicalc.errors import ParameterError

    out = [(1, 1)]
    if arch.moe is None or tp < 2 or speculation:
        return out
    for par in ((tp, 1), (tp, tp)):
        try:
            check_parallel(arch, tp, *par)
        except ParameterError:
            continue
        out.append(par)
    return out


def search_deployments(model, chips=("h100-sxm",), total_chips: int = 8, *, prompt=1024, gen=256, dtypes=("release",),
           kv_dtypes=("bf16",), tps=None, max_ttft=None, max_tpot=None, disaggregate: bool = True,
           engine=None, speculation: dict | None = None, moe_parallel: bool = True,
           pipeline: bool = True) -> Deployments:
    """Every deployment of ``total_chips`` chips of each kind in ``chips`` (TP degrees dividing it, each dtype
    and KV dtype; aggregated at the best concurrency meeting the targets, and disaggregated splits), ranked by
    cost per million output tokens (then chips), those meeting the targets first; ``pareto`` marks the front of
    tokens/s per chip against tokens/s per user. An MoE model's TP degrees are also tried with expert and
    attention-data parallelism (:func:`moe_layouts`; ``moe_parallel`` False: plain TP only); rows say ``ep`` and
    ``attention_dp``. A TP group that fills a scale-up domain is also tried in pipelines over 2 and 4 domains
    (:func:`pipelines`; ``pipeline`` False: none; speculation: none); rows say ``pp``."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.api.catalog import load_decoder, load_node_or_chip
    from aicalc.api.serving import max_concurrency, serve
    from aicalc.core.geometry import check_tp
    from aicalc.core.serving import concurrency_ladder
    from aicalc.errors import AicalcError, ParameterError

    if isinstance(chips, str):
        chips = [chips]
    if total_chips is not None:
        total_chips = inputs.whole("total_chips", total_chips)
    if tps is not None:
        tps = [inputs.whole("tp", t) for t in tps]
    model = load_decoder(model, "serve --search")  # read once: every layout below prices this one
    arch = model.arch
    pipeline = pipeline and not speculation
    configs, splits = search_size(chips, total_chips, tps, dtypes, kv_dtypes, disaggregate, pipeline)
    if arch.moe is not None and moe_parallel:
        configs *= len(MOE_LAYOUTS)  # each TP degree also with expert (and attention-data) parallelism
    try:
        check_search_size(configs, splits)
    except ParameterError as e:  # named by the value asked for
        raise ParameterError("total_chips", total_chips, e.problem) from None
    rows: list[dict] = []
    for chip_id in chips:
        chip, count = load_node_or_chip(chip_id)
        n = total_chips or count
        for tp in tps or [t for t in (1, 2, 4, 8, 16) if n % t == 0]:
            try:
                check_tp(arch, tp)
            except ParameterError:
                continue
            layouts = [(1, par) for par in moe_layouts(arch, tp, speculation or not moe_parallel)]
            layouts += [(pp, (1, 1)) for pp in pipelines(chip, tp, n, pipeline)[1:]]
            for dt, kvd, (pp, (ep, adp)) in ((dt, kvd, lay) for dt in dtypes for kvd in kv_dtypes for lay in layouts):
                try:
                    top = max_concurrency(model, chip, tp=tp, chips=n, prompt=prompt, gen=gen, dtype=dt,
                                          kv_dtype=kvd, ep=ep, attention_dp=adp, pp=pp)
                    if top < 1:
                        continue
                    r = serve(model, chip, concurrency_ladder(top, n // (tp * pp)), prompt, gen, tp=tp, chips=n,
                              dtype=dt, kv_dtype=kvd, max_ttft=max_ttft, max_tpot=max_tpot, engine=engine,
                              ep=ep, attention_dp=adp, pp=pp, **(speculation or {}))
                except AicalcError:
                    continue  # e.g. no math for this dtype on this chip
                c = r.columns
                ok = np.flatnonzero(c["meets_slo"]) if c["meets_slo"].any() else np.flatnonzero(c["fits"])
                if not ok.size:
                    continue
                i = int(ok[np.argmax(c["output_tokens_per_s"][ok])])
                rows.append({"mode": "aggregated", "chip": chip.id, "chips": n, "tp": tp, "pp": pp, "ep": ep,
                             "attention_dp": adp, "replicas": n // (tp * pp), "prefill_replicas": 0, "prefill_tp": 0,
                             "dtype": r.meta["setup"].dtype_label,
                             "kv_dtype": kvd, "concurrency": int(c["concurrency"][i]),
                             "ttft_s": float(c["ttft_s"][i]), "tpot_s": float(c["tpot_s"][i]),
                             "kv_transfer_s": 0.0,
                             "requests_per_s": float(c["output_tokens_per_s"][i]) / float(c["gen"][i]),
                             "output_tokens_per_s": float(c["output_tokens_per_s"][i]),
                             "meets_slo": bool(c["meets_slo"][i])})
                if disaggregate and n >= 2 and ep == 1 and adp == 1 and pp == 1:
                    try:
                        rows += disaggregated(model, chip, n, prompt=prompt, gen=gen, prefill_tp=tp,
                                              decode_tp=tp, dtype=dt, kv_dtype=kvd, max_ttft=max_ttft,
                                              max_tpot=max_tpot, engine=engine)
                    except AicalcError:
                        pass
    if not rows:
        raise ParameterError("chips", ", ".join(map(str, chips)), f"admit no deployment of {total_chips} chips "
                             "that holds the model")
    for row in rows:
        chip, _ = load_node_or_chip(row["chip"])
        row["output_tokens_per_s_per_chip"] = row["output_tokens_per_s"] / row["chips"]
        row["tokens_per_s_per_user"] = 1.0 / row["tpot_s"]
        price = chip.price_per_hour_usd
        row["usd_per_million_output_tokens"] = (row["chips"] * price / 3600.0 / row["output_tokens_per_s"] * 1e6
                                                if price else None)
    per_chip = np.asarray([r["output_tokens_per_s_per_chip"] for r in rows])
    per_user = np.asarray([r["tokens_per_s_per_user"] for r in rows])
    for i, row in enumerate(rows):
        row["pareto"] = not bool(np.any((per_chip >= per_chip[i]) & (per_user >= per_user[i])
                                        & ((per_chip > per_chip[i]) | (per_user > per_user[i]))))
    rows.sort(key=lambda r: (not r["meets_slo"], r["usd_per_million_output_tokens"] is None,
                             r["usd_per_million_output_tokens"] or 0.0, r["chips"]))
    keys = list(dict.fromkeys(k for r in rows for k in r))
    cols = {k: _column([r.get(k) for r in rows]) for k in keys}
    return Deployments(cols, [], row_dicts=rows)


def _column(values):
    import numpy as np

    if any(v is None or isinstance(v, str) for v in values):
        a = np.empty(len(values), dtype=object)
        a[:] = values
        return a
    return np.asarray(values)
