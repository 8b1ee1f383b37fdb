"""Training vs inference for one model, chip by chip: memory, chips needed, speed, cost and energy.

Training: the fewest chips a :func:`aicalc.api.train_memory.search_layouts` layout with TP ≤ 8 fits on (wider TP
only where none does; a MoE model with expert parallelism, :func:`expert_degrees`), and of the layouts that fit there
the one :func:`aicalc.api.train_time.train_time` gives the shortest step (:func:`_fastest`). Inference: the smallest
TP group that :func:`aicalc.api.serving.serve` fits (``chips_needed``), and of the TPs from it up to one 8-GPU server
(a MoE model's also with expert and attention-data parallelism) the layout with the lowest cost per output token at
its concurrency with the most tokens/s inside the latency targets (default MLPerf's llama2-70b server limits, TTFT ≤
2 s and TPOT ≤ 200 ms); SRAM-only chips through :func:`aicalc.api.roofline.roofline`. Money and energy from
:mod:`aicalc.core.cost`.
"""

from __future__ import annotations

from aicalc.api.results import Table

MAX_CHIPS = 16384
RECOMPUTE_ORDER = ("none", "selective", "full")  # the search's Megatron modes, least recompute first
SERVER_CHIPS = 8  # the inference row's TP choices: up to one 8-GPU server (or the smallest TP, where larger; on
#                   an edge chip the smallest)
CANDIDATES = 1000  # fitting training layouts whose step times are compared (every one, at compare's sizes)
EDGE_KINDS = ("npu", "soc")
ON_DEVICE_KINDS = ("npu",)  # a phone's or a laptop's NPU: one device, one user, no training unless asked
ON_DEVICE_LAYOUT = "on-device, one user (batch 1)"


class Comparison(Table):
    """Two rows per chip (one, inference, for an on-device chip unless ``training=True``) (``phase`` training and inference): ``chip``, ``phase``, ``fits``, ``chips_needed``,
    ``memory_bytes`` (per device), ``layout``, ``precision``, ``batch``; training: the layout's ``tp``, ``pp``,
    ``dp``, ``ep``, ``zero`` and ``recompute``, ``mfu``, ``tokens_per_s``,
    ``total_time_s``, ``chip_hours``, ``training_cost_usd``, ``training_kwh``; inference: ``tp`` (the chips its
    numbers run on, ``chips_needed`` or more; ``ep`` and ``attention_dp``: a MoE model's experts and attention over
    them, :func:`aicalc.api.deployment.moe_layouts`), ``ttft_s``, ``tpot_s``, ``output_tokens_per_s``,
    ``usd_per_million_output_tokens``, ``usd_per_request``,
    ``fleet_chips``, ``fleet_layout``, ``daily_inference_cost_usd``, ``annual_inference_cost_usd`` (the simulated
    fleet's; none on SRAM-only or on-device chips), ``joules_per_output_token``; both
    ``inference_share_of_lifetime_cost``."""


def _training(model, chip, seq: int, tokens: float, warnings: list[str]) -> dict:
    from aicalc.api.train_memory import search_layouts
    from aicalc.errors import AicalcError

    row = {"chip": chip.id, "phase": "training", "precision": "bf16-mixed, AdamW",
           "stored": "weights + gradients + optimizer states + activations"}
    n, rows, wide = fewest_possible(model, chip), [], None  # wide: the first chips where only TP > 8 fits
    # an edge chip (a laptop's SoC) trains on its own machine: no training stack spans laptops (TP, ZeRO, EP over
    # Thunderbolt is not priced), so one device or no training row
    last = 1 if chip.kind in EDGE_KINDS else MAX_CHIPS
    while n <= last:
        # a MoE model with EP first (every degree of expert_degrees, one search), then without
        for eps in dict.fromkeys((expert_degrees(model.arch, n), (1,))):
            try:
                # Megatron's memory model (sequence parallelism, selective recompute, ZeRO): the framework the
                # training time below assumes, and the one that lays a model out over many chips
                res = search_layouts(model, chip, n, seq=seq, framework="megatron", sp=True, attention="flash",
                                     closest=False, ep=list(eps), top=CANDIDATES)
            except AicalcError as e:
                warnings.append(f"no training estimate on {chip.id}: {e}")
                return row | {"fits": False, "chips_needed": None, "memory_bytes": None}
            fitting = [r for r in res.rows() if r["fits"]]  # none fits: no row (closest=False); each says its ep
            # TP inside one 8-GPU server: a layout whose TP spans servers runs at a few % MFU (DeepSeek-V3 on 64
            # MI300Xs: TP 64 at 1.6 %, where 128 with TP ≤ 8 train several times faster); wider only where
            # no TP ≤ 8 layout fits on any number of chips
            rows = [r for r in fitting if r["tp"] <= 8]
            if fitting and wide is None:
                wide = (n, fitting)
            if rows:
                break
        if rows:
            break
        n *= 2
    if not rows and wide is not None:
        n, rows = wide
    if not rows:
        warnings.append(f"training does not fit on one {chip.id} (a {chip.kind} trains on its own machine)"
                        if last == 1 else f"training does not fit on {MAX_CHIPS:,} × {chip.id}")
        return row | {"fits": False, "chips_needed": None, "memory_bytes": None}
    try:
        best, t = _fastest(model, chip, rows, tokens, seq, max(n, 8) * 8)
    except AicalcError as e:  # no step time (e.g. no training profile for the chip): the most headroom
        warnings.append(f"no training time on {chip.id}: {e}")
        best, t = rows[0], None
    ep = best["ep"]
    row |= {"fits": True, "chips_needed": n, "batch": best["batch"], "tp": best["tp"], "pp": best["pp"],
            "dp": best["dp"], "ep": ep, "zero": int(best["zero"]), "recompute": best["recompute"],
            "layout": f"TP {best['tp']} × PP {best['pp']} × DP {best['dp']}{f' (EP {ep})' if ep > 1 else ''}, "
                      f"ZeRO-{best['zero']}, recompute {best['recompute']}",
            "memory_bytes": best["peak_bytes"], "weights_bytes": best["weights_bytes"],
            "gradients_bytes": best["gradients_bytes"], "optimizer_bytes": best["optimizer_bytes"],
            "activations_bytes": best["activations_bytes"]}
    if t is None:
        return row
    return row | {"tokens": tokens, "mfu": t["mfu"], "model_flop_per_s_per_chip": t["model_flop_per_s_per_chip"],
                  "tokens_per_s": t["tokens_per_s"], "total_time_s": t["total_time_s"], "chip_hours": t["chip_hours"],
                  "bound": "compute", "metric": "MFU, time to train"}


def _fastest(model, chip, rows: list[dict], tokens: float, seq: int, global_batch: int):
    """(layout, train-time row) of the fitting ``rows`` (train-mem's layouts with their ZeRO stages and EP degrees,
    most headroom first) whose step :func:`aicalc.api.train_time.train_time` prices shortest, ties to the one with
    more headroom; the layouts of one EP degree and recompute mode are priced in one call, each layout and ZeRO
    stage with the least recompute it fits with (more recompute adds only compute: the step model never prices its
    step shorter, tests/test_train_time.py::test_more_recompute_is_never_faster)."""
    from aicalc.api.train_time import train_time

    lightest: dict = {}  # each layout and ZeRO stage: the least recompute it fits with
    for r in rows:
        key = (r["tp"], r["pp"], r["dp"], r["ep"], r["zero"])
        lightest[key] = min(lightest.get(key, len(RECOMPUTE_ORDER)), RECOMPUTE_ORDER.index(r["recompute"]))
    groups: dict = {}
    for i, r in enumerate(rows):
        if RECOMPUTE_ORDER.index(r["recompute"]) == lightest[(r["tp"], r["pp"], r["dp"], r["ep"], r["zero"])]:
            groups.setdefault((r["ep"], r["recompute"]), []).append((i, r))
    priced = []
    for (ep, recompute), group in groups.items():
        times = train_time(model, chip, tokens, seq=seq, global_batch=global_batch,
                           tp=[r["tp"] for _, r in group], pp=[r["pp"] for _, r in group],
                           dp=[r["dp"] for _, r in group], zero=[int(r["zero"]) for _, r in group],
                           recompute=_time_recompute(recompute), ep=ep).rows()
        priced += [(t["step_s"], i, r, t) for (i, r), t in zip(group, times, strict=True)]
    _, _, best, t = min(priced, key=lambda x: x[:2])
    return best, t


def expert_degree(arch, chips: int) -> int:
    """The expert parallelism a MoE model trains with here: the largest power of two up to 8 (the experts of
    one 8-GPU node's scale-up domain, their all-to-all on its links) that divides both its routed experts and
    ``chips``; 1 for a dense model. Megatron-Bridge's performance recipes run EP 8 for Qwen3-30B-A3B,
    Qwen3-235B-A22B and gpt-oss-120B on 8-GPU nodes and for DeepSeek-V3 on 256 B200s, Megatron-Core's Mixtral
    8x7B reference mapping EP 8 (validation/cases/moe-training.yaml: MO-03, MO-05, MO-07, MO-09, MO-11); EP is
    folded over the data-parallel ranks with expert TP 1 (Megatron-Core's MoE parallel folding), as
    :func:`aicalc.api.train_memory.search_layouts` and :func:`aicalc.api.train_time.train_time` take it."""
    if arch.moe is None:
        return 1
    ep = 8
    while ep > 1 and (arch.moe.experts % ep or chips % ep):
        ep //= 2
    return ep


MAX_EXPERT_DEGREE = 64  # the widest EP compare lays a MoE model out with (Megatron-Bridge's recipes: 8 to 64)


def expert_degrees(arch, chips: int) -> tuple[int, ...]:
    """The EP degrees a MoE model's training layouts are searched with: :func:`expert_degree` (up to one 8-GPU
    node) and every power of two above it up to :data:`MAX_EXPERT_DEGREE` that divides both its routed experts and
    ``chips``, as Megatron-Bridge's recipes run EP 32 and 64 across nodes (Qwen3-235B-A22B on 256 H100s EP 32,
    DeepSeek-V3 on 1,024 H100s and 256 GB200s EP 64, Kimi K2 EP 64: validation/cases/moe-training.yaml MO-02,
    MO-10, MO-14, MO-61); the step model prices the all-to-all that leaves the node. (1,) for a dense model."""
    ep = expert_degree(arch, chips)
    out = [ep]
    while ep > 1 and ep * 2 <= MAX_EXPERT_DEGREE and not (arch.moe.experts % (ep * 2) or chips % (ep * 2)):
        ep *= 2
        out.append(ep)
    return tuple(out)


def fewest_possible(model, chip) -> int:
    """The fewest chips (a power of two) whose memory can hold the training states at all: however a layout
    splits and shards them (TP, PP, ZeRO over DP), the most-loaded device holds at least its share, bytes per
    parameter (weights, gradients, fp32 master, optimizer, :func:`aicalc.core.train_memory.state_bytes`) × N /
    chips, so fewer chips cannot fit and the search starts here (70B on 80 GB: 16, where it started at 1)."""
    from aicalc.core import train_memory as tm
    from aicalc.core.train_peak import TrainSetup

    st = TrainSetup()
    sb = tm.state_bytes(st.precision, st.optimizer, st.grad_dtype, st.optimizer_dtype)
    need = (sb.weights + sb.grads + sb.master + sb.optimizer) * tm.split_params(model.arch).total / chip.usable_memory_bytes
    n = 1
    while n < need and n <= MAX_CHIPS:
        n *= 2
    return n


def _inference(model, chip, prompt, gen, dtype, kv_dtype, max_ttft, max_tpot, warnings: list[str],
               engine: str | None = None) -> dict:
    from aicalc.api.roofline import SRAM_KINDS, ridge_batch, roofline
    from aicalc.catalog import profiles
    from aicalc.core.geometry import check_tp
    from aicalc.errors import AicalcError

    row = {"chip": chip.id, "phase": "inference", "stored": "weights + KV cache", "batch": None,
           "engine": profiles.load("engine", engine or profiles.default_engine(chip)).id}
    metric = "TTFT, time per output token, tokens/s"
    if chip.kind in SRAM_KINDS:
        r = roofline(model, chip, 1, prompt, gen, dtype=dtype, kv_dtype=kv_dtype, engine=engine).rows()[0]
        need = r["chips_needed"]
        return row | {"fits": True, "chips_needed": need, "precision": dtype, "batch": 1,
                      "layout": f"weights + one {prompt}+{gen}-token sequence's KV over {need} chips' SRAM",
                      "memory_bytes": (r["weights_bytes_per_device"] + r["kv_cache_bytes_per_device"]) / need,
                      "kv_cache_bytes": r["kv_cache_bytes_per_device"], "ttft_s": r["ttft_s"], "tpot_s": r["tpot_s"],
                      "output_tokens_per_s": r["output_tokens_per_s"],
                      "bound": "compute" if r["decode_flop"] / r["decode_bytes"] >= r["ridge_point"] else "memory",
                      "metric": metric}
    from aicalc.api.catalog import load_decoder
    from aicalc.api.deployment import moe_layouts
    from aicalc.api.serving import best_row

    arch = load_decoder(model, "compare").arch
    dtypes = [dtype] + ([d for d in ("int8", "int4") if d != dtype] if chip.kind in EDGE_KINDS else [])
    on_device = chip.kind in ON_DEVICE_KINDS
    price = chip.price_per_hour_usd or 1.0  # without a price, chips per token rank the same
    reasons: list[str] = []
    for dt in dtypes:
        found = []  # (cost per output token, tp, ep, attention DP, the best row) of each layout that serves
        failed = False
        for tp in (1,) if on_device else (1, 2, 4, 8, 16, 32, 64):
            if failed or found and (tp > SERVER_CHIPS or chip.kind in EDGE_KINDS):
                break  # the smallest TP that holds the model, and every larger one within one server (a laptop or
                #        a phone: the fewest devices, as its user runs it)
            try:
                check_tp(arch, tp)
            except AicalcError:
                continue
            # a MoE model also with its experts over the TP group's chips, attention TP or DP (moe_layouts: the
            # layouts serve --search and the fleet below try; not on a laptop's or a phone's runtime)
            for ep, adp in [(1, 1)] if chip.kind in EDGE_KINDS else moe_layouts(arch, tp):
                try:
                    best = best_row(model, chip, tp=tp, prompt=prompt, gen=gen, dtype=dt, kv_dtype=kv_dtype,
                                    max_ttft=max_ttft, max_tpot=max_tpot, engine=engine, ep=ep, attention_dp=adp,
                                    one=on_device)
                except AicalcError as e:  # e.g. no throughput figure for this dtype on this chip
                    reasons.append(f"{dt}: {e}")
                    failed = True
                    break
                if best is not None:
                    found.append((tp * price / best["output_tokens_per_s"], tp, ep, adp, best))
        if not found:
            continue
        # the cheapest per output token, ties to fewer chips, then to plain TP (tried first)
        _, tp, ep, adp, best = min(found, key=lambda x: x[:2])
        if dt != dtype:
            warnings.append(f"{arch.family} model fits {chip.id} only at {dt} weights")
        ridge = ridge_batch(model, chip, prompt, gen, dtype=dt, kv_dtype=kv_dtype, tp=tp, engine=engine)
        return row | {
            "fits": True, "chips_needed": found[0][1], "tp": tp, "ep": ep, "attention_dp": adp, "precision": dt,
            "layout": ON_DEVICE_LAYOUT if on_device else f"TP {tp}" + (f", EP {ep}" if ep > 1 else "")
            + (f", attention DP {adp}" if adp > 1 else ""), "batch": best["concurrency"],
            "memory_bytes": best["total_bytes_per_device"], "weights_bytes": best["weights_bytes_per_device"],
            "kv_cache_bytes": best["kv_cache_bytes_per_device"], "ttft_s": best["ttft_s"], "tpot_s": best["tpot_s"],
            "output_tokens_per_s": best["output_tokens_per_s"], "meets_slo": best["meets_slo"],
            "bound": "memory" if best["concurrency"] < ridge else "compute", "metric": metric}
    warnings.append(f"inference does not fit on {'one' if on_device else 'up to 64 ×'} {chip.id} at "
                    f"{', '.join(dtypes)}"
                    + (f" ({'; '.join(reasons)})" if reasons else ""))
    return row | {"fits": False, "chips_needed": None, "memory_bytes": None, "precision": dtypes[-1]}


def _money(row: dict, chip, gen, requests_per_day, price=None) -> None:
    from aicalc.core import cost

    price, tdp = price or chip.price_per_hour_usd, chip.tdp_w
    n = row.get("tp") or row.get("chips_needed")  # the chips the row's numbers run on
    if not row.get("fits") or not n:
        return
    if row["phase"] == "training":
        if "chip_hours" not in row:
            return
        if price:
            row["training_cost_usd"] = row["chip_hours"] * price
        if tdp:
            row["training_kwh"] = cost.kwh(1, row["chip_hours"] * 3600, tdp)
        return
    tps = row["output_tokens_per_s"]
    if price:
        row["usd_per_million_output_tokens"] = cost.usd_per_million_tokens(n, tps, price)
        per_req = cost.usd(n, cost.request_seconds(row["ttft_s"], row["tpot_s"], gen, row["batch"] or 1), price)
        row["usd_per_request"] = per_req
    if tdp:
        row["joules_per_output_token"] = cost.joules_per_token(n, tps, tdp)


def _fleet(spec, chip, row: dict, prompt, gen, dtype, kv_dtype, requests_per_day, peak_factor, max_ttft, max_tpot,
           price, warnings: list[str], engine: str | None = None) -> None:
    """The inference row's fleet: the fewest chips that serve ``requests_per_day`` within the latency targets
    (:func:`aicalc.api.fleet.size_fleet`, the search ``serve --search`` runs) and what it costs a day and a
    year (only its cheapest row is read: ``cheapest`` spares the search the layouts that cannot beat it)."""
    from aicalc.api.fleet import size_fleet
    from aicalc.api.roofline import SRAM_KINDS
    from aicalc.errors import AicalcError

    if not row.get("fits"):
        return
    if chip.kind in SRAM_KINDS:  # no KV cache in the serving model the simulation steps: no fleet
        warnings.append(f"no fleet sized on {chip.id} (its weights sit in SRAM over {row['chips_needed']} chips; "
                        "the scheduler simulation models HBM replicas): no annual inference cost")
        return
    if chip.kind in EDGE_KINDS:  # an on-device chip serves its own user: no fleet of laptops or phones
        warnings.append(f"no fleet sized on {chip.id}: an on-device chip serves its own user, not a traffic")
        return
    try:
        fleet = size_fleet(spec, [chip], requests_per_day=requests_per_day, peak_factor=peak_factor, prompt=prompt,
                           gen=gen, max_ttft=max_ttft, max_tpot=max_tpot, dtypes=(row.get("precision") or dtype,),
                           kv_dtypes=(kv_dtype,), price=price, engine=engine, cheapest=True)
    except AicalcError as e:
        warnings.append(f"no fleet sized on {chip.id}: {e}")
        return
    rows = fleet.meta["row_dicts"]
    if not rows:
        warnings.append(f"no fleet of up to {fleet.meta.get('max_chips', 16384):,} × {chip.id} serves "
                        f"{requests_per_day:,.0f} requests a day within the latency targets")
        return
    best = rows[0]
    row["fleet_chips"] = best["chips"]
    row["fleet_layout"] = (f"{best['replicas']} × TP {best['tp']}" if best["mode"] == "aggregated" else
                           f"prefill {best['prefill_replicas']} × TP {best['prefill_tp']}, decode "
                           f"{best['decode_replicas']} × TP {best['decode_tp']}")
    row["fleet_p99_ttft_s"], row["fleet_p99_tpot_s"] = best["p99_ttft_s"], best["p99_tpot_s"]
    if best["usd_per_day"] is not None:
        row["daily_inference_cost_usd"] = best["usd_per_day"]
        row["annual_inference_cost_usd"] = best["usd_per_day"] * 365.0


def compare(model, chips=("h100-sxm",), *, tokens=None, seq: int = 4096, prompt: int = 1024, gen: int = 256,
            dtype: str = "release", kv_dtype: str = "bf16", requests_per_day=1e6, years: float = 1.0, max_ttft=2.0,
            max_tpot=0.2, price=None, peak_factor=1.0, engine: str | None = None,
            training: bool | None = None) -> Comparison:
    """Training (``tokens``, default 20 per parameter) and inference (``prompt`` + ``gen`` tokens per request)
    of ``model`` on each chip; ``price``: USD per chip-hour for every chip (default: each chip preset's on-demand
    price). The inference row's service cost is that of the fleet that serves ``requests_per_day`` (at the day's
    average rate × ``peak_factor``) within ``max_ttft`` and ``max_tpot`` at the 99th percentile of the scheduler
    simulation (:func:`aicalc.api.fleet.size_fleet`): ``fleet_chips``, ``fleet_layout``,
    ``daily_inference_cost_usd`` and ``annual_inference_cost_usd`` (365 days of it). ``engine``: the inference
    engine profile (default: each chip's own, :func:`aicalc.catalog.profiles.default_engine`). ``training``: whether
    to estimate training (default: on every chip but on-device ones, ``npu`` chips, which serve one user at
    batch 1, and SRAM-only inference chips, Groq's LPU and Cerebras' wafer)."""
    from aicalc.api import inputs
    from aicalc.api.catalog import load_decoder, load_node_or_chip
    from aicalc.core import cost
    from aicalc.core.params import count_params
    from aicalc.errors import ParameterError

    if isinstance(chips, str):
        chips = [chips]
    if not chips:
        raise ParameterError("chips", "[]", "is empty: give at least one chip")
    from aicalc.core.dtypes import kv_bytes_per_element

    if kv_dtype != "auto":
        kv_bytes_per_element(kv_dtype, 128)
    spec = load_decoder(model, "compare")
    from aicalc.api.catalog import named_format

    # an unknown format is bad input here, not a blank inference row; "checkpoint" needs a model read from its
    # files; "release" is the official checkpoint's precision, named as tables show it (mxfp4-experts)
    dtype = named_format(spec, dtype)
    price = inputs.single("price", price) if price is not None else None
    n = count_params(spec.arch)
    tokens = inputs.single("tokens", tokens) if tokens is not None else \
        cost.chinchilla_tokens(n.total)
    seq, prompt, gen = (inputs.whole(k, v)
                        for k, v in (("seq", seq), ("prompt", prompt), ("gen", gen)))
    requests_per_day = inputs.single("requests_per_day", requests_per_day)
    years = inputs.single("years", years)
    max_ttft, max_tpot = inputs.seconds("max_ttft", max_ttft), inputs.seconds("max_tpot", max_tpot)
    warnings: list[str] = []
    rows = []
    for chip_id in chips:
        chip, _ = load_node_or_chip(chip_id)  # a node stands for its chip: compare finds how many it takes
        from aicalc.api.roofline import SRAM_KINDS

        train = training if training is not None else chip.kind not in ON_DEVICE_KINDS + SRAM_KINDS
        if training is None and chip.kind in SRAM_KINDS:
            warnings.append(f"no training row on {chip.id}: an inference chip whose weights sit in on-chip SRAM "
                            "(--training estimates it anyway)")
        pair = ([_training(spec, chip, seq, tokens, warnings)] if train else []) + \
            [_inference(spec, chip, prompt, gen, dtype, kv_dtype, max_ttft, max_tpot, warnings, engine)]
        for row in pair:
            _money(row, chip, gen, requests_per_day, price)
        train, infer = pair if len(pair) == 2 else ({}, pair[0])
        _fleet(spec, chip, infer, prompt, gen, dtype, kv_dtype, requests_per_day, peak_factor, max_ttft, max_tpot,
               price, warnings, engine)
        if train.get("training_cost_usd") and infer.get("annual_inference_cost_usd"):
            share = cost.lifetime_split(train["training_cost_usd"], infer["annual_inference_cost_usd"], years)
            for row in pair:
                row["inference_share_of_lifetime_cost"] = share
        rows += pair
    keys = list(dict.fromkeys(k for r in rows for k in r))
    cols = {k: _objects([r.get(k) for r in rows]) for k in keys}
    return Comparison(cols, warnings, model=spec, params=n, tokens=tokens, seq=seq, prompt=prompt, gen=gen,
                      requests_per_day=requests_per_day, years=years, max_ttft=max_ttft, max_tpot=max_tpot,
                      row_dicts=rows)


def _objects(values):
    """A column that may hold None (a quantity a row does not have): an object array of Python values."""
    import numpy as np

    a = np.empty(len(values), dtype=object)
    a[:] = values
    return a


def _time_recompute(memory_mode: str) -> str:
    """The step model's recompute for a train-mem layout's: none and full as they are; a partial mode
    (Megatron's selective, torchtitan's selective-op, every-N layers) as the step model's partial one."""
    return memory_mode if memory_mode in ("none", "full") else "selective"
