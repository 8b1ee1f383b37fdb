"""Roofline and latency of inference: prefill and decode of each configuration, ideal and estimated."""

from __future__ import annotations

from dataclasses import dataclass

from aicalc.api.results import Table

SIXTEEN_BIT = ("bf16", "fp16")
EIGHT_BIT_COMPUTE = ("fp8", "int8")
PCIE_FALLBACK_BYTES_PER_S = 32e9  # PCIe Gen4 x16, one direction: chips without a listed interconnect
SRAM_KINDS = ("lpu", "wafer")  # chips whose only memory is on-chip SRAM


class Roofline(Table):
    """Columns per configuration: ``batch``, ``prompt``, ``gen``, ``tp``; ``prefill_flop``,
    ``prefill_bytes``, ``prefill_time_s``, ``prefill_ideal_time_s`` and the same for ``decode_``; ``ttft_s``,
    ``tpot_s``, ``output_tokens_per_s`` (whole TP group), ``ideal_ttft_s``, ``ideal_tpot_s``,
    ``ideal_output_tokens_per_s``; ``weights_bytes_per_device``, ``kv_cache_bytes_per_device``, ``fits``,
    ``chips_needed``, ``compute_bound_batch`` (inf where decode never turns compute-bound) and
    ``ridge_point``. ``meta['prefill']`` / ``meta['decode']`` hold the per-operation breakdown (``.ops``)."""


@dataclass(frozen=True)
class CostSetup:
    """A model on a chip as the cost model sees it."""

    model: object  # ModelSpec
    chip: object
    shape: object  # aicalc.core.forward.Shape
    roofs: object  # aicalc.core.pricing.Roofs
    formats: object  # aicalc.core.forward.Formats
    compute_dtype: str
    warnings: tuple[str, ...]


def pick_compute(chip, dtype: str, compute_dtype: str | None, warnings: list[str]) -> tuple[str, bool]:
    """(compute dtype, weight-only quantized?). fp8 weights run fp8 math where the chip has fp8; other
    quantized formats are weight-only (dequantized to 16-bit in the kernel). Without a 16-bit figure the
    chip's best listed dtype is used, with a warning."""
    from aicalc.errors import ParameterError

    have = chip.dense_tflops
    if compute_dtype:
        if compute_dtype not in have:
            raise ParameterError("compute_dtype", compute_dtype,
                                 f"has no throughput figure on {chip.id} (it lists: {', '.join(have)})")
        return compute_dtype, dtype not in (compute_dtype, "fp32") and not (dtype in SIXTEEN_BIT and
                                                                           compute_dtype in SIXTEEN_BIT)
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
    raise ParameterError("chip", chip.id, "lists no usable throughput figure")


def cost_setup(model, chip="h100-sxm", dtype: str = "bf16", kv_dtype: str = "bf16", *,
               compute_dtype: str | None = None, group_size: int | None = None, attention: str = "flash",
               kv_shared: bool = True, tp_needs_link: bool = False) -> CostSetup:
    """Model and chip → the cost model's view: shape, roofs (PCIe Gen4 x16 where a chip lists no
    interconnect and TP needs one, with a warning) and formats."""
    from aicalc.api.catalog import load_model, load_node_or_chip
    from aicalc.core.forward import formats, shape_of
    from aicalc.core.pricing import Roofs
    from aicalc.errors import check_choice

    check_choice("attention", attention, ("flash", "materialized"))
    spec = load_model(model)
    chip_obj, _count = load_node_or_chip(chip)
    warnings: list[str] = []
    cdt, quantized = pick_compute(chip_obj, dtype, compute_dtype, warnings)
    fm = formats(dtype, kv_dtype, group_size=group_size, quantized=quantized, flash=attention == "flash",
                 kv_shared=kv_shared)
    ic = chip_obj.interconnect
    link = (ic.per_direction_bytes_per_s if ic else None) or 0.0
    if not link and tp_needs_link:
        warnings.append(f"{chip_obj.id} has no interconnect figure; TP collectives use PCIe Gen4 x16 "
                        f"({PCIE_FALLBACK_BYTES_PER_S / 1e9:.0f} GB/s per direction)")
        link = PCIE_FALLBACK_BYTES_PER_S
    roofs = Roofs(peak_flop_per_s=chip_obj.peak_flop_per_s(cdt), bandwidth_bytes_per_s=chip_obj.memory_bandwidth_bytes_per_s,
                  link_bytes_per_s=link, low_precision=cdt in EIGHT_BIT_COMPUTE)
    return CostSetup(spec, chip_obj, shape_of(spec.arch), roofs, fm, cdt, tuple(warnings))


def efficiency_of(efficiency):
    """None (the defaults), an Efficiency, or a dict of overrides ``{"bandwidth": 0.8}``."""
    from aicalc.core.efficiency import Efficiency

    if efficiency is None:
        return Efficiency()
    if isinstance(efficiency, Efficiency):
        return efficiency
    return Efficiency().with_overrides(dict(efficiency))


def roofline(model, chip="h100-sxm", batch=1, prompt=512, gen=256, *, dtype: str = "bf16", kv_dtype: str = "bf16",
             tp=1, compute_dtype: str | None = None, group_size: int | None = None, attention: str = "flash",
             kv_shared: bool = True, efficiency=None) -> Roofline:
    """Prefill and decode of ``batch`` sequences of ``prompt`` + ``gen`` tokens on a TP group of ``chip``
    (arrays broadcast): FLOPs, bytes, bound, TTFT, TPOT and tokens/s, estimated and ideal."""
    import numpy as np

    from aicalc.api import inputs
    from aicalc.core import latency
    from aicalc.core.geometry import check_tp, weight_bytes_per_device
    from aicalc.core.kv_cache import kv_cache_bytes, kv_shape

    g = inputs.broadcast(tp=inputs.positive("tp", tp, whole=True), batch=inputs.positive("batch", batch, whole=True),
                         prompt=inputs.positive("prompt", prompt, whole=True),
                         gen=inputs.positive("gen", gen, whole=True))
    B, S, G, TP = g["batch"], g["prompt"], g["gen"], g["tp"]
    cs = cost_setup(model, chip, dtype, kv_dtype, compute_dtype=compute_dtype, group_size=group_size,
                    attention=attention, kv_shared=kv_shared, tp_needs_link=bool(TP.max() > 1))
    arch = cs.model.arch
    for t in np.unique(TP):
        check_tp(arch, int(t))
    eff = efficiency_of(efficiency)
    pre, dec, out = latency.inference(cs.shape, cs.roofs, cs.formats, eff, B, S, G, TP)
    weights = weight_bytes_per_device(arch, dtype, TP, bytes_per_param=cs.formats.weight_bytes)
    kv = np.zeros_like(B)
    for t in np.unique(TP):  # the cache geometry per TP degree
        sel = TP == t
        kv[sel] = kv_cache_bytes(kv_shape(arch, kv_dtype, int(t)), B[sel], S[sel] + G[sel])
    need = weights + kv
    mem = float(cs.chip.memory_bytes)
    e, ideal = out["est"], out["ideal"]
    cols = {"batch": B.astype(np.int64), "prompt": S.astype(np.int64), "gen": G.astype(np.int64),
            "tp": TP.astype(np.int64), "ridge_point": cs.roofs.ridge_point,
            "prefill_flop": pre.flop, "prefill_bytes": pre.bytes, "prefill_time_s": pre.t_est,
            "prefill_ideal_time_s": pre.t_ideal, "decode_flop": dec.flop, "decode_bytes": dec.bytes,
            "decode_time_s": dec.t_est, "decode_ideal_time_s": dec.t_ideal,
            "ttft_s": e["ttft_s"], "tpot_s": e["tpot_s"], "output_tokens_per_s": e["output_tokens_per_s"],
            "ideal_ttft_s": ideal["ttft_s"], "ideal_tpot_s": ideal["tpot_s"],
            "ideal_output_tokens_per_s": ideal["output_tokens_per_s"],
            "weights_bytes_per_device": weights, "kv_cache_bytes_per_device": kv, "fits": need <= mem,
            "chips_needed": np.ceil(need * TP / mem).astype(np.int64),
            "compute_bound_batch": latency.compute_bound_batch(cs.shape, cs.roofs, cs.formats, S + G / 2.0, TP)}
    warnings = list(cs.warnings)
    if not bool(np.all(cols["fits"])):
        sram_only = cs.chip.kind in SRAM_KINDS or (cs.chip.sram is not None and cs.chip.sram == cs.chip.memory)
        warnings.append(f"weights + KV cache exceed one device's {'on-chip SRAM' if sram_only else 'memory'} at "
                        f"some points (up to {int(cols['chips_needed'].max())} {cs.chip.id} chips needed; see "
                        "chips_needed)")
    return Roofline(cols, warnings, setup=cs, efficiency=eff, prefill=pre, decode=dec)
