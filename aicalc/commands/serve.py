"""``aicalc serve``: a deployment under continuous batching: TTFT, time per output token, tokens/s,
what fits, which concurrency meets the latency targets, and what a million tokens cost."""

from __future__ import annotations

from dataclasses import dataclass

from aicalc.errors import AicalcError, ExitCode
from aicalc.result import Result


@dataclass
class ServeRequest:
    model: str
    chip: str = "h100-sxm"
    chips: int | None = None
    tp: int = 1
    prompt: list[float] | None = None
    gen: list[float] | None = None
    concurrency: list[float] | None = None  # None: 1, 2, 4, … up to what fits
    max_ttft: float | None = None
    max_tpot: float | None = None
    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    price: float | None = None
    utilization: float = 0.9


def steady_state(pre_t, dec_t, per_replica, gen):
    """Continuous batching in steady state (the scheduling of vLLM/TensorRT-LLM in-flight batching).

    Each of the ``per_replica`` running sequences emits one token per decode step of time ``dec_t``;
    finished sequences are replaced, so per step ``per_replica / gen`` new prompts are prefilled
    (``pre_t`` each) between decode steps. Hence TPOT = dec_t + per_replica · pre_t / gen, and a new
    request's TTFT = pre_t + dec_t (its own prefill after the running step).
    """
    tpot = dec_t + per_replica * pre_t / gen
    ttft = pre_t + dec_t
    return ttft, tpot


def run(req: ServeRequest) -> Result:
    import numpy as np

    from aicalc.commands.roofline import setup
    from aicalc.core import capacity, cost
    from aicalc.core import roofline as rl
    from aicalc.core.efficiency import IDEAL, Efficiency
    from aicalc.core.kv_cache import kv_cache_bytes, kv_shape
    from aicalc.core.layout import check_tp
    from aicalc.core.weights import weight_bytes_per_device
    from aicalc.sweep import grid

    spec, chip, shape, roofs, fm, cdt, warnings = setup(req.model, req.chip, req.dtype, req.kv_dtype)
    arch = spec.arch
    check_tp(arch, req.tp)
    chips = req.chips or req.tp
    if chips % req.tp:
        raise AicalcError(f"--chips {chips} is not a multiple of --tp {req.tp}")
    replicas = chips // req.tp
    weights = weight_bytes_per_device(arch, req.dtype, req.tp)
    overhead = capacity.runtime_overhead_bytes(arch, req.tp)
    budget = float(capacity.kv_budget_bytes(chip.memory_bytes, req.utilization, weights, overhead))
    kv = kv_shape(arch, req.kv_dtype, req.tp)
    prompts, gens = req.prompt or [1024.0], req.gen or [256.0]
    if req.concurrency is None:
        longest = max(prompts) + max(gens)
        fit = int(capacity.max_batch(kv, budget, longest, 16)[0]) if budget > 0 else 0
        top = max(1, fit * replicas)
        conc = [float(2**i) for i in range(int(np.log2(top)) + 1)] + ([float(top)] if top & (top - 1) else [])
    else:
        conc = req.concurrency
    g = grid(concurrency=conc, prompt=prompts, gen=gens)
    C, P, G = g["concurrency"], g["prompt"], g["gen"]
    per_rep = np.ceil(C / replicas)
    out = {}
    for name, eff in (("est", Efficiency()), ("ideal", IDEAL)):
        pre = rl.phase(shape, roofs, fm, eff, 1.0 + 0 * P, P, 0 * P, req.tp, logits_tokens=1.0)
        dec = rl.phase(shape, roofs, fm, eff, per_rep, 1.0 + 0 * P, P + G / 2.0, req.tp)
        ttft, tpot = steady_state(pre.t_est, dec.t_est, per_rep, G)
        out[name] = (ttft, tpot, replicas * per_rep / tpot)
    ttft, tpot, tps = out["est"]
    kv_dev = kv_cache_bytes(kv, per_rep, P + G, 16)
    fits = (kv_dev <= budget) & (budget > 0)
    meets = np.ones_like(C, dtype=bool)
    if req.max_ttft is not None:
        meets &= ttft <= req.max_ttft
    if req.max_tpot is not None:
        meets &= tpot <= req.max_tpot
    cols = {"concurrency": C.astype(np.int64), "prompt": P.astype(np.int64), "gen": G.astype(np.int64),
            "replicas": replicas, "tp": req.tp, "chips": chips, "batch_per_replica": per_rep.astype(np.int64),
            "ttft_s": ttft, "tpot_s": tpot, "output_tokens_per_s": tps,
            "output_tokens_per_s_per_chip": tps / chips, "tokens_per_s_per_sequence": 1.0 / tpot,
            "ideal_ttft_s": out["ideal"][0], "ideal_tpot_s": out["ideal"][1],
            "ideal_output_tokens_per_s": out["ideal"][2],
            "weights_bytes_per_device": weights, "kv_cache_bytes_per_device": kv_dev,
            "total_bytes_per_device": weights + overhead + kv_dev, "fits": fits, "meets_slo": meets & fits}
    price = req.price or chip.price_per_hour_usd
    if price:
        cols["usd_per_million_output_tokens"] = cost.usd_per_million_tokens(chips, tps, price)
        cols["usd_per_request"] = cost.usd(chips, cost.request_seconds(ttft, tpot, G, C), price)
    if chip.tdp_w:
        cols["joules_per_output_token"] = cost.joules_per_token(chips, tps, chip.tdp_w)
    from aicalc.result import rows_from_columns

    rows = rows_from_columns(cols)
    exit_code = ExitCode.OK
    if not fits.all():
        warnings.append(f"{int((~fits).sum())} row(s) do not fit: the KV cache of {int(per_rep.max())} sequences per "
                        f"replica exceeds the {budget / 2**30:.1f} GiB left per device beside weights and overhead")
    slo = req.max_ttft is not None or req.max_tpot is not None
    ok = meets & fits
    if slo:
        if ok.any():
            best = int(np.argmax(np.where(ok, tps, -1)))
            warnings.append(f"best row meeting the targets: concurrency {int(C[best])} at "
                            f"{tps[best]:,.0f} output tokens/s")
        else:
            warnings.append("no row meets the latency targets on this deployment")
    if (req.concurrency is not None and not (ok if slo else fits).all()) or (slo and not ok.any()):
        exit_code = ExitCode.BUDGET
    columns = ["concurrency", "prompt", "gen", "batch_per_replica", "ttft_s", "tpot_s", "output_tokens_per_s",
               "total_bytes_per_device", "fits"] + (["meets_slo"] if slo else []) + \
              (["usd_per_million_output_tokens"] if price else [])
    inputs = {"model": spec.id, "chip": chip.id, "chips": chips, "tp": req.tp, "replicas": replicas,
              "prompt": prompts, "gen": gens, "concurrency": req.concurrency, "max_ttft_s": req.max_ttft,
              "max_tpot_s": req.max_tpot, "dtype": req.dtype, "kv_dtype": req.kv_dtype, "compute_dtype": cdt,
              "price_per_chip_hour_usd": price, "gpu_memory_utilization": req.utilization}
    notes = ["continuous batching in steady state: TPOT = decode step + prefills interleaved per step; "
             "TTFT = own prefill + one running decode step (docs/serve.md)"]
    return Result("serve", inputs, rows, warnings=warnings, exit_code=exit_code, columns=columns, notes=notes,
                  title=f"{spec.name} on {chips} × {chip.name} (TP {req.tp}, {replicas} replica(s), {req.dtype})")
