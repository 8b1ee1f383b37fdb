"""``aicalc roofline``: is a model's prefill/decode compute- or memory-bound on a chip, and how fast is it.

Resolves the model and chip, picks the compute dtype the chip supports, builds the per-device roofs and
formats, calls :mod:`aicalc.core.roofline` over the sweep grid and returns one row per grid point and phase
(and per operation with ``--ops``). Always reports the ideal bound beside the efficiency-model estimate.
"""

from __future__ import annotations

import math

from aicalc.errors import AicalcError
from aicalc.result import Result

SIXTEEN_BIT = ("bf16", "fp16")
EIGHT_BIT_COMPUTE = ("fp8", "int8")
PCIE_FALLBACK_BYTES_PER_S = 32e9  # PCIe Gen4 x16, one direction


def weight_format_bytes(dtype: str, group_size: int | None) -> float:
    """Bytes per weight; ``int4`` with ``group_size`` G adds an fp16 scale and zero per group (4 + 32/G bits)."""
    from aicalc.core.dtypes import weight_bytes_per_param

    if group_size is not None:
        if dtype != "int4":
            raise AicalcError("--group-size applies to --dtype int4 only")
        if group_size < 1:
            raise AicalcError(f"--group-size must be at least 1, got {group_size}")
        return (4.0 + 32.0 / group_size) / 8.0
    return weight_bytes_per_param(dtype)


def pick_compute(chip, dtype: str, compute_dtype: str | None, warnings: list[str]) -> tuple[str, bool]:
    """(compute dtype, weight-only quantized?). fp8 weights run fp8 math where the chip has fp8; other
    quantized formats are weight-only (dequantized to 16-bit in the kernel). Without a 16-bit figure the
    chip's best listed dtype is used, with a warning."""
    have = chip.dense_tflops
    if compute_dtype:
        if compute_dtype not in have:
            raise AicalcError(f"{chip.id} lists no {compute_dtype} throughput (it has: {', '.join(have)})")
        return compute_dtype, dtype not in (compute_dtype, "fp32") and not (dtype in SIXTEEN_BIT and compute_dtype in SIXTEEN_BIT)
    if dtype == "fp8":
        if "fp8" in have:
            return "fp8", False
        warnings.append(f"{chip.id} has no fp8 tensor math: fp8 weights are dequantized and multiplied in 16-bit "
                        "(weight-only), as on Ampere")
    if dtype in have and dtype in SIXTEEN_BIT + ("fp32",):
        return dtype, False
    for c in SIXTEEN_BIT:
        if c in have:
            return c, dtype not in SIXTEEN_BIT + ("fp32",)
    for c in ("fp32", "int8"):
        if c in have:
            warnings.append(f"{chip.id} lists no 16-bit throughput; compute is modelled at its {c} figure")
            return c, dtype not in (c,)
    raise AicalcError(f"{chip.id} lists no usable throughput figure")


def setup(model: str, chip_id: str, dtype: str, kv_dtype: str, compute_dtype: str | None = None,
          group_size: int | None = None, attention: str = "flash", kv_shared: bool = True):
    """Model and chip → (spec, chip, Shape, Roofs, Formats, compute dtype, warnings)."""
    from aicalc.catalog.store import resolve_chip, resolve_model
    from aicalc.core.dtypes import kv_bytes_per_element
    from aicalc.core.roofline import Formats, Roofs, shape_of

    if attention not in ("flash", "materialized"):
        raise AicalcError(f"--attention must be flash or materialized, got '{attention}'")
    spec = resolve_model(model)
    chip, _count = resolve_chip(chip_id)
    warnings: list[str] = []
    wb = weight_format_bytes(dtype, group_size)
    cdt, quantized = pick_compute(chip, dtype, compute_dtype, warnings)
    head_dim = spec.arch.mla.kv_lora_rank if spec.arch.mla else spec.arch.head_dim
    ic = chip.interconnect
    link = ic.per_direction_bytes_per_s if ic else None
    roofs = Roofs(peak_flop_per_s=chip.peak_flop_per_s(cdt), bandwidth_bytes_per_s=chip.memory_bandwidth_bytes_per_s,
                  link_bytes_per_s=link or 0.0, low_precision=cdt in EIGHT_BIT_COMPUTE)
    fm = Formats(weight_bytes=wb, kv_bytes=kv_bytes_per_element(kv_dtype, head_dim), quantized=quantized,
                 flash=attention == "flash", kv_shared=kv_shared)
    return spec, chip, shape_of(spec.arch), roofs, fm, cdt, warnings


def run(model: str, chip: str, batch: str = "1", prompt: str = "512", gen: str = "256", dtype: str = "bf16",
        kv_dtype: str = "bf16", tp: str = "1", compute_dtype: str | None = None, group_size: int | None = None,
        attention: str = "flash", ops: bool = False, eff: list[str] | None = None, kv_shared: bool = True) -> Result:
    import numpy as np

    from aicalc.core import roofline as rl
    from aicalc.core.efficiency import Efficiency, parse_overrides
    from aicalc.core.kv_cache import kv_cache_bytes, kv_shape
    from aicalc.core.layout import check_tp
    from aicalc.core.weights import weight_bytes_per_device
    from aicalc.sweep import grid, int_sweep

    spec, chip_obj, shape, roofs, fm, cdt, warnings = setup(model, chip, dtype, kv_dtype, compute_dtype, group_size,
                                                            attention, kv_shared)
    effm = Efficiency().with_overrides(parse_overrides(eff))
    tps = int_sweep(tp, "--tp")
    for t in tps:
        check_tp(spec.arch, t)
    if max(tps) > 1 and not roofs.link_bytes_per_s:
        warnings.append(f"{chip_obj.id} has no interconnect figure; TP collectives use PCIe Gen4 x16 "
                        f"({PCIE_FALLBACK_BYTES_PER_S / 1e9:.0f} GB/s per direction)")
        from dataclasses import replace

        roofs = replace(roofs, link_bytes_per_s=PCIE_FALLBACK_BYTES_PER_S)
    g = grid(tp=tps,
             batch=int_sweep(batch, "--batch"), prompt=int_sweep(prompt, "--prompt"), gen=int_sweep(gen, "--gen"))
    B, S, G, TP = g["batch"], g["prompt"], g["gen"], g["tp"]
    pre, dec, out = rl.inference(shape, roofs, fm, effm, B, S, G, TP)
    ridge = roofs.ridge_point
    weights = weight_bytes_per_device(spec.arch, dtype, TP, bytes_per_param=fm.weight_bytes)
    kv = kv_cache_bytes(kv_shape(spec.arch, kv_dtype, TP), B, S + G)
    need = weights + kv
    mem = float(chip_obj.memory_bytes)
    chips_needed = np.ceil(need * TP / mem)
    fits = need <= mem
    cb = rl.compute_bound_batch(shape, roofs, fm, S + G / 2.0, TP)
    sram_only = chip_obj.kind in ("lpu", "wafer") or (chip_obj.sram is not None and chip_obj.sram == chip_obj.memory)
    if not bool(np.all(fits)):
        worst = int(np.max(chips_needed))
        what = "on-chip SRAM" if sram_only else "memory"
        warnings.append(f"weights + KV cache exceed one device's {what} at some points "
                        f"(up to {worst} {chip_obj.id} chips needed; see chips_needed)")

    rows = []
    for i in range(B.size):
        common = {"batch": int(B[i]), "prompt": int(S[i]), "gen": int(G[i]), "tp": int(TP[i]),
                  "ridge_point": ridge}
        mem_row = {"weights_bytes_per_device": float(weights[i]), "kv_cache_bytes_per_device": float(kv[i]),
                   "fits": bool(fits[i]), "chips_needed": int(chips_needed[i])}
        e, ideal = out["est"], out["ideal"]
        tails = {"ttft_s": float(e["ttft_s"][i]), "tpot_s": float(e["tpot_s"][i]),
                 "output_tokens_per_s": float(e["output_tokens_per_s"][i]),
                 "output_tokens_per_s_per_chip": float(e["output_tokens_per_s"][i] / TP[i]),
                 "tokens_per_s_per_sequence": float(1.0 / e["tpot_s"][i]),
                 "ideal_ttft_s": float(ideal["ttft_s"][i]), "ideal_tpot_s": float(ideal["tpot_s"][i]),
                 "ideal_output_tokens_per_s": float(ideal["output_tokens_per_s"][i])}
        for name, ph in (("prefill", pre), ("decode", dec)):
            ai = float(ph.intensity[i])
            row = {"phase": name, "op": "total", **common, "flop": float(ph.flop[i]), "bytes": float(ph.bytes[i]),
                   "arithmetic_intensity": ai, "bound": "compute" if ai >= ridge else "memory",
                   "time_s": float(ph.t_est[i]), "ideal_time_s": float(ph.t_ideal[i]),
                   "efficiency": float(ph.t_ideal[i] / ph.t_est[i]), **tails, **mem_row}
            if name == "decode":
                cbv = float(cb[i])
                row["compute_bound_batch"] = int(cbv) if math.isfinite(cbv) else None
            rows.append(row)
            if ops:
                for o in ph.ops:
                    f, by = float(o.flop[i]), float(o.bytes[i])
                    if f == 0 and by == 0 and not float(np.asarray(o.comm_bytes + 0.0 * B)[i]):
                        continue
                    oai = f / by if by else math.inf
                    bound = "network" if o.name == "tp_allreduce" else ("compute" if oai >= ridge else "memory")
                    rows.append({"phase": name, "op": o.name, **common, "flop": f, "bytes": by,
                                 "arithmetic_intensity": oai if math.isfinite(oai) else None, "bound": bound,
                                 "time_s": float(o.t_est[i]), "ideal_time_s": float(o.t_ideal[i]),
                                 "efficiency": float(o.t_ideal[i] / o.t_est[i]) if o.t_est[i] else None,
                                 **tails})
    inputs = {"model": spec.id, "chip": chip_obj.id, "batch": batch, "prompt": prompt, "gen": gen, "dtype": dtype,
              "kv_dtype": kv_dtype, "tp": tp, "compute_dtype": cdt, "attention": attention,
              "group_size": group_size, "kv_shared": kv_shared, "efficiency": effm.as_dict(),
              "peak_flop_per_s": roofs.peak_flop_per_s, "memory_bandwidth_bytes_per_s": roofs.bandwidth_bytes_per_s}
    columns = ["phase", "op", "batch", "prompt", "gen", "tp", "arithmetic_intensity", "bound", "time_s", "ideal_time_s",
               "ttft_s", "tpot_s", "output_tokens_per_s", "ideal_output_tokens_per_s", "chips_needed"]
    if not ops:
        columns.remove("op")
    notes = [f"ridge point {ridge:,.0f} FLOP/byte = {roofs.peak_flop_per_s / 1e12:,.1f} TFLOP/s dense {cdt} ÷ "
             f"{roofs.bandwidth_bytes_per_s / 1e9:,.0f} GB/s; below it a pass is memory-bound",
             "estimate = efficiency model (docs/roofline.md); ideal = bare roofline, no overheads; "
             "override factors with --eff KEY=VALUE"]
    chart = None
    if not ops and B.size <= 64:
        from aicalc.plot import terminal_chart

        chart = terminal_chart(rows, ridge, roofs.peak_flop_per_s, roofs.bandwidth_bytes_per_s)
    return Result("roofline", inputs, rows, warnings=warnings, title=f"{spec.id} on {chip_obj.id} ({dtype}, {cdt} math)",
                  notes=notes, columns=columns, chart=chart)
