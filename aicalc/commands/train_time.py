"""``aicalc train-time``: FLOPs per token, step time, MFU, total time and chip-hours of a training run."""

from __future__ import annotations

from aicalc.errors import AicalcError
from aicalc.result import Result

DEFAULT_DP_BYTES_PER_S = 25e9  # per chip per direction across nodes: 200 Gb/s InfiniBand per GPU (DGX A100)


def run(model: str, chip: str, tokens: str = "1T", seq: str = "4096", global_batch: str = "1024",
        micro_batch: str = "1", tp: str = "1", pp: str = "1", dp: str | None = None, chips: str | None = None,
        mfu: str = "auto", achieved: str | None = None, recompute: str = "selective", attention: str = "flash",
        sequence_parallel: bool = True, interleave: int = 1, zero: int = 0, precision: str = "bf16",
        dp_bandwidth: str | None = None, eff: list[str] | None = None) -> Result:
    import numpy as np

    from aicalc.catalog.store import resolve_chip, resolve_model
    from aicalc.core import train_time as tt
    from aicalc.core.efficiency import Efficiency, parse_overrides
    from aicalc.core.layout import check_tp
    from aicalc.core.roofline import shape_of
    from aicalc.sweep import grid, int_sweep
    from aicalc.units import parse_count, parse_fraction, parse_int, parse_rate

    if recompute not in tt.RECOMPUTE:
        raise AicalcError(f"--recompute must be one of {', '.join(tt.RECOMPUTE)}, got '{recompute}'")
    if attention not in ("flash", "materialized"):
        raise AicalcError(f"--attention must be flash or materialized, got '{attention}'")
    if zero not in (0, 1, 2, 3):
        raise AicalcError(f"--zero must be 0, 1, 2 or 3, got {zero}")
    if interleave < 1:
        raise AicalcError(f"--interleave must be at least 1, got {interleave}")
    spec = resolve_model(model)
    chip_obj, _ = resolve_chip(chip)
    warnings: list[str] = []
    peak = chip_obj.peak_flop_per_s(precision)
    if peak is None:
        if precision == "bf16" and chip_obj.peak_flop_per_s("fp16"):
            peak = chip_obj.peak_flop_per_s("fp16")
            warnings.append(f"{chip_obj.id} lists no bf16 figure; fp16 peak used")
        else:
            raise AicalcError(f"{chip_obj.id} lists no {precision} throughput (it has: {', '.join(chip_obj.dense_tflops)})")
    ic = chip_obj.interconnect
    link = (ic.per_direction_bytes_per_s if ic else None) or 32e9
    dpbw = parse_rate(dp_bandwidth, "bytes", "--dp-bandwidth") if dp_bandwidth else DEFAULT_DP_BYTES_PER_S
    tchip = tt.TrainChip(peak, chip_obj.memory_bandwidth_bytes_per_s, link, dpbw, low_precision=precision == "fp8")

    tps, pps = int_sweep(tp, "--tp"), int_sweep(pp, "--pp")
    for t in tps:
        check_tp(spec.arch, t)
    for p in pps:
        if spec.arch.layers % p:
            warnings.append(f"--pp {p} does not divide the {spec.arch.layers} layers; stages are unbalanced")
    if dp is None and chips is None:
        dps = [1]
    elif dp is not None:
        dps = int_sweep(dp, "--dp")
    else:
        dps = []
    axes = dict(tp=tps, pp=pps, dp=dps or [0], seq=int_sweep(seq, "--seq"), global_batch=int_sweep(global_batch, "--global-batch"),
                micro_batch=int_sweep(micro_batch, "--micro-batch"))
    g = grid(**axes)
    if not dps:  # --chips given: dp = chips / (tp·pp)
        n = parse_int(chips, "--chips")
        mp = g["tp"] * g["pp"]
        if np.any(n % mp):
            raise AicalcError(f"--chips {n} is not a multiple of tp × pp")
        g["dp"] = n // mp
    elif chips is not None:
        n = parse_int(chips, "--chips")
        if np.any(g["tp"] * g["pp"] * g["dp"] != n):
            raise AicalcError(f"--chips {n} does not equal tp × pp × dp")
    if np.any(g["global_batch"] % (g["dp"] * g["micro_batch"])):
        warnings.append("global batch is not a multiple of dp × micro-batch at some points; micro-batches rounded")
    D = parse_count(tokens, "--tokens")
    mfu_v = achieved_v = None
    if achieved:
        achieved_v = parse_rate(achieved, "flop", "--achieved")
    elif str(mfu).lower() != "auto":
        mfu_v = parse_fraction(mfu, "--mfu")
    effm = Efficiency().with_overrides(parse_overrides(eff))
    s = shape_of(spec.arch)
    kw = dict(tokens=D, seq=g["seq"], global_batch=g["global_batch"], micro_batch=g["micro_batch"], tp=g["tp"],
              pp=g["pp"], dp=g["dp"], recompute=recompute, flash=attention == "flash",
              sequence_parallel=sequence_parallel, interleave=interleave, zero=zero)
    r = tt.training(s, tchip, effm, mfu=mfu_v, achieved_flop_per_s=achieved_v, **kw)
    from aicalc.core.efficiency import IDEAL

    ideal = tt.training(s, tchip, IDEAL, **kw)
    price = chip_obj.price_per_hour_usd
    rows = []
    for i in range(g["tp"].size):
        row = {"tp": int(g["tp"][i]), "pp": int(g["pp"][i]), "dp": int(g["dp"][i]), "chips": int(r["chips"][i]),
               "seq": int(g["seq"][i]), "global_batch": int(g["global_batch"][i]),
               "micro_batch": int(g["micro_batch"][i]), "tokens": D,
               "model_flop_per_token": float(r["model_flop_per_token"][i]),
               "hardware_flop_per_token": float(r["hardware_flop_per_token"][i]),
               "mfu": float(r["mfu"][i]), "hfu": float(r["hfu"][i]),
               "model_flop_per_s_per_chip": float(r["model_flop_per_s_per_chip"][i]),
               "tokens_per_s": float(r["tokens_per_s"][i]), "tokens_per_s_per_chip": float(r["tokens_per_s_per_chip"][i]),
               "step_s": float(r["step_s"][i]), "total_time_s": float(r["total_time_s"][i]),
               "chip_hours": float(r["chip_hours"][i]),
               "ideal_mfu": float(ideal["mfu"][i]), "ideal_total_time_s": float(ideal["total_time_s"][i])}
        for k in ("pipeline_s", "bubble_s", "tp_comm_s", "dp_comm_s", "optimizer_s"):
            if k in r:
                row[k] = float(np.asarray(r[k] + 0.0 * r["mfu"])[i])
        if price:
            row["cost_usd"] = row["chip_hours"] * price
        rows.append(row)
    source = "given" if mfu_v is not None else ("from --achieved" if achieved_v is not None else "auto (efficiency model)")
    inputs = {"model": spec.id, "chip": chip_obj.id, "tokens": D, "seq": seq, "global_batch": global_batch,
              "micro_batch": micro_batch, "tp": tp, "pp": pp, "dp": dp, "chips": chips, "mfu": mfu,
              "achieved": achieved, "recompute": recompute, "attention": attention,
              "sequence_parallel": sequence_parallel, "interleave": interleave, "zero": zero, "precision": precision,
              "dp_bandwidth_bytes_per_s": dpbw, "efficiency": effm.as_dict()}
    notes = [f"MFU {source}; model FLOPs = 6·N_mm + 12·L·s·A·d + 6·V·H per token (TT-01); ideal = bare roofline "
             "of the same layout (no efficiency factors)",
             f"peak {peak / 1e12:,.1f} TFLOP/s dense {precision} per chip; DP network {dpbw / 1e9:,.0f} GB/s per chip "
             "per direction (--dp-bandwidth)"]
    columns = ["tp", "pp", "dp", "chips", "global_batch", "mfu", "ideal_mfu", "model_flop_per_s_per_chip",
               "tokens_per_s", "step_s", "total_time_s", "chip_hours"]
    return Result("train-time", inputs, rows, warnings=warnings, title=f"{spec.id} on {chip_obj.id}", notes=notes,
                  columns=columns)
