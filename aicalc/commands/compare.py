"""``aicalc compare``: training vs inference for one model, chip by chip, in one table.

Every number comes from the itemized commands, called as a library with the defaults named in the
inputs: ``train-mem --search`` (the fewest chips any layout fits on), ``train-time`` (time, MFU and
chip-hours at that layout), ``serve`` (the smallest tensor-parallel group that holds the weights, at
the concurrency with the most tokens/s inside MLPerf's llama2-70b server limits, TTFT ≤ 2 s and TPOT
≤ 200 ms), ``roofline`` for SRAM-only chips, and ``core.cost`` for money and energy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aicalc.errors import AicalcError
from aicalc.result import Result

MAX_CHIPS = 16384
EDGE_KINDS = ("npu", "soc")
SRAM_KINDS = ("lpu", "wafer")


@dataclass
class CompareRequest:
    model: str
    chips: list[str] = field(default_factory=lambda: ["h100-sxm"])
    tokens: float | None = None  # training tokens; default 20 per parameter (Chinchilla, Hoffmann et al. 2022)
    seq: int = 4096
    prompt: int = 1024
    gen: int = 256
    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    requests_per_day: float = 1e6
    years: float = 1.0
    max_ttft: float = 2.0
    max_tpot: float = 0.2


def _training(req: CompareRequest, chip_id: str, tokens: float, warnings: list[str]) -> dict:
    from aicalc.commands import train_mem, train_time

    n = 1
    best = None
    row = {"chip": chip_id, "phase": "training", "precision": "bf16-mixed, AdamW", "stored":
           "weights + gradients + optimizer states + activations"}
    while n <= MAX_CHIPS:
        try:
            res = train_mem.run(train_mem.Options(model=req.model, chip=chip_id, search=True, chips=n,
                                                  seq=[float(req.seq)]))
        except AicalcError as e:
            warnings.append(f"no training estimate on {chip_id}: {e}")
            return row | {"fits": False, "chips_needed": None, "memory_bytes": None}
        rows = [r for r in res.rows if r.get("tp", 1) <= 8] or res.rows
        if rows:
            best = rows[0]
            break
        n *= 2
    if best is None:
        warnings.append(f"training does not fit on {MAX_CHIPS:,} × {chip_id}")
        return row | {"fits": False, "chips_needed": None, "memory_bytes": None}
    layout = f"TP {best['tp']} × PP {best['pp']} × DP {best['dp']}, ZeRO-{best['zero']}, recompute {best['recompute']}"
    row |= {"fits": True, "chips_needed": n, "layout": layout, "batch": best["batch"],
            "memory_bytes": best["peak_bytes"], "weights_bytes": best["weights_bytes"],
            "gradients_bytes": best["gradients_bytes"], "optimizer_bytes": best["optimizer_bytes"],
            "activations_bytes": best["activations_bytes"]}
    rec = "full" if best["recompute"] == "full" else "selective"
    try:
        tt = train_time.run(req.model, chip_id, tokens=str(tokens), seq=str(req.seq), global_batch=str(max(n, 8) * 8),
                            tp=str(best["tp"]), pp=str(best["pp"]), chips=str(n), recompute=rec, zero=int(best["zero"]))
    except AicalcError as e:
        warnings.append(f"no training time on {chip_id}: {e}")
        return row
    t = tt.rows[0]
    row |= {"tokens": tokens, "mfu": t["mfu"], "model_flop_per_s_per_chip": t["model_flop_per_s_per_chip"],
            "tokens_per_s": t["tokens_per_s"], "total_time_s": t["total_time_s"], "chip_hours": t["chip_hours"],
            "bound": "compute", "metric": "MFU, time to train"}
    return row


def _inference(req: CompareRequest, chip, warnings: list[str]) -> dict:
    from aicalc.commands import roofline, serve
    from aicalc.core.layout import check_tp
    from aicalc.errors import AicalcError as Err

    row = {"chip": chip.id, "phase": "inference", "stored": "weights + KV cache", "batch": None}
    dtypes = [req.dtype] + ([d for d in ("int8", "int4") if d != req.dtype] if chip.kind in EDGE_KINDS else [])
    if chip.kind in SRAM_KINDS:
        r = roofline.run(req.model, chip.id, batch="1", prompt=str(req.prompt), gen=str(req.gen), dtype=req.dtype,
                         kv_dtype=req.kv_dtype)
        dec = next(x for x in r.rows if x["phase"] == "decode")
        need = dec["chips_needed"]
        return row | {"fits": True, "chips_needed": need, "precision": req.dtype, "batch": 1,
                      "layout": f"weights spread over {need} chips' SRAM (pipeline)",
                      "memory_bytes": (dec["weights_bytes_per_device"] + dec["kv_cache_bytes_per_device"]) / need,
                      "kv_cache_bytes": dec["kv_cache_bytes_per_device"], "ttft_s": dec["ttft_s"], "tpot_s": dec["tpot_s"],
                      "output_tokens_per_s": dec["output_tokens_per_s"], "bound": dec["bound"],
                      "metric": "TTFT, time per output token, tokens/s"}
    from aicalc.catalog.store import resolve_model

    arch = resolve_model(req.model).arch
    reasons: list[str] = []
    for dtype in dtypes:
        for tp in (1, 2, 4, 8, 16, 32, 64):
            try:
                check_tp(arch, tp)
            except Err:
                continue
            try:
                res = serve.run(serve.ServeRequest(model=req.model, chip=chip.id, tp=tp, prompt=[float(req.prompt)],
                                                   gen=[float(req.gen)], max_ttft=req.max_ttft,
                                                   max_tpot=req.max_tpot, dtype=dtype, kv_dtype=req.kv_dtype))
            except Err as e:  # e.g. no throughput figure for this dtype on this chip
                reasons.append(f"{dtype}: {e}")
                break
            ok = [r for r in res.rows if r["meets_slo"]] or [r for r in res.rows if r["fits"]]
            if not ok:
                continue
            best = max(ok, key=lambda r: r["output_tokens_per_s"])
            if dtype != req.dtype:
                warnings.append(f"{req.model} fits {chip.id} only at {dtype} weights")
            return row | {
                "fits": True, "chips_needed": tp, "precision": dtype, "layout": f"TP {tp}", "batch": best["concurrency"],
                "memory_bytes": best["total_bytes_per_device"], "weights_bytes": best["weights_bytes_per_device"],
                "kv_cache_bytes": best["kv_cache_bytes_per_device"], "ttft_s": best["ttft_s"], "tpot_s": best["tpot_s"],
                "output_tokens_per_s": best["output_tokens_per_s"], "meets_slo": best["meets_slo"],
                "bound": "memory" if best["concurrency"] < _ridge_batch(req, chip.id, dtype, tp) else "compute",
                "metric": "TTFT, time per output token, tokens/s"}
    warnings.append(f"inference does not fit on up to 64 × {chip.id} at {', '.join(dtypes)}"
                    + (f" ({'; '.join(reasons)})" if reasons else ""))
    return row | {"fits": False, "chips_needed": None, "memory_bytes": None, "precision": dtypes[-1]}


def _ridge_batch(req: CompareRequest, chip_id: str, dtype: str, tp: int) -> float:
    from aicalc.commands import roofline

    r = roofline.run(req.model, chip_id, batch="1", prompt=str(req.prompt), gen=str(req.gen), dtype=dtype,
                     kv_dtype=req.kv_dtype, tp=str(tp))
    cb = next(x for x in r.rows if x["phase"] == "decode").get("compute_bound_batch")
    return float("inf") if cb is None else cb


def _money(row: dict, chip, req: CompareRequest) -> None:
    from aicalc.core import cost

    price, tdp = chip.price_per_hour_usd, chip.tdp_w
    n = row.get("chips_needed")
    if not row.get("fits") or not n:
        return
    if row["phase"] == "training":
        if price:
            row["training_cost_usd"] = row["chip_hours"] * price
        if tdp:
            row["training_kwh"] = cost.kwh(1, row["chip_hours"] * 3600, tdp)
        return
    tps = row["output_tokens_per_s"]
    if price:
        row["usd_per_million_output_tokens"] = cost.usd_per_million_tokens(n, tps, price)
        per_req = cost.usd(n, cost.request_seconds(row["ttft_s"], row["tpot_s"], req.gen, row["batch"] or 1), price)
        row["usd_per_request"] = per_req
        row["annual_inference_cost_usd"] = per_req * req.requests_per_day * 365
    if tdp:
        row["joules_per_output_token"] = cost.joules_per_token(n, tps, tdp)


def run(req: CompareRequest) -> Result:
    from aicalc.catalog.store import resolve_chip, resolve_model
    from aicalc.core.params import count_params

    if not req.chips:
        raise AicalcError("compare needs at least one --chip")
    spec = resolve_model(req.model)
    n = count_params(spec.arch)
    tokens = req.tokens or 20.0 * n.total
    warnings: list[str] = []
    rows = []
    for chip_id in req.chips:
        chip, count = resolve_chip(chip_id)
        if count > 1:
            raise AicalcError(f"compare takes chip ids, not nodes: use --chip {chip.id}")
        pair = [_training(req, chip.id, tokens, warnings), _inference(req, chip, warnings)]
        for row in pair:
            _money(row, chip, req)
        train, infer = pair
        if train.get("training_cost_usd") and infer.get("annual_inference_cost_usd"):
            from aicalc.core.cost import lifetime_split

            share = lifetime_split(train["training_cost_usd"], infer["annual_inference_cost_usd"], req.years)
            for row in pair:
                row["inference_share_of_lifetime_cost"] = share
        rows += pair
    inputs = {"model": spec.id, "params": n.total, "active_params": n.active, "chips": req.chips,
              "training_tokens": tokens, "training_seq": req.seq, "prompt": req.prompt, "gen": req.gen,
              "dtype": req.dtype, "kv_dtype": req.kv_dtype, "requests_per_day": req.requests_per_day,
              "years": req.years, "max_ttft_s": req.max_ttft, "max_tpot_s": req.max_tpot}
    columns = ["chip", "phase", "precision", "layout", "chips_needed", "batch", "memory_bytes", "bound", "mfu",
               "total_time_s", "ttft_s", "tpot_s", "output_tokens_per_s", "training_cost_usd",
               "usd_per_million_output_tokens", "annual_inference_cost_usd"]
    notes = ["memory is per device; training: the fewest chips any train-mem layout fits on (TP ≤ 8 preferred), "
             f"{tokens:.3g} tokens; inference: smallest TP that serves {req.prompt}+{req.gen}-token requests within "
             f"TTFT ≤ {req.max_ttft:g} s, TPOT ≤ {req.max_tpot * 1e3:g} ms at the best concurrency",
             f"cost: chip presets' on-demand prices; annual inference for {req.requests_per_day:,.0f} requests/day"]
    return Result("compare", inputs, rows, warnings=warnings, columns=columns, notes=notes,
                  title=f"{spec.name}: training vs inference")
