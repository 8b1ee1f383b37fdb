"""The training layouts a number of devices admits: TP × PP × CP × DP × ZeRO × micro-batch × recompute, each
evaluated by :func:`aicalc.core.train_peak.evaluate` in one vectorized pass, and those that fit ranked by
memory headroom."""

from __future__ import annotations

from dataclasses import replace

SLICE = 1 << 18  # layouts evaluated per slice (a long search reports progress between slices)
MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(arch, chips: int, cps=(1,), vp: int = 1, first=None, last=None) -> list[tuple[int, int, int, int]]:
    """(tp, pp, cp, dp) with tp·pp·cp·dp = chips, TP dividing heads, FFN and kv heads (or a multiple of them),
    TP ≤ 64 and PP any degree whose stages all hold layers (:func:`pipeline_degrees`)."""
    tps = [t for t in divisors(chips) if arch.heads % t == 0 and arch.ffn % t == 0
           and (arch.mla is not None or arch.kv_heads % t == 0 or t % arch.kv_heads == 0) and t <= 64]
    pps = pipeline_degrees(arch.layers, divisors(chips), vp, first, last)
    return [(t, p, c, chips // (t * p * c)) for t in tps for p in pps for c in cps if chips % (t * p * c) == 0]


def pipeline_degrees(layers: int, candidates, vp: int = 1, first=None, last=None) -> list[int]:
    """The PP degrees among ``candidates`` that Megatron-Core or torchtitan split ``layers`` over
    (:func:`aicalc.core.stages.rank_layers`: even where PP divides the layers, else the embedding and the loss
    counted as a layer each), every rank holding at least one layer."""
    from aicalc.core.stages import rank_layers
    from aicalc.errors import ParameterError

    out = []
    for p in candidates:
        if p > layers or (p == 1 and (first is not None or last is not None)):
            continue
        try:
            if min(n for n, _ in rank_layers(layers, p, vp, first, last)) >= 1:
                out.append(p)
        except ParameterError:
            continue
    return out


def search(arch, setup, chips: int, limit: float, seqs, max_batch: int, cps=(1,), recomputes=("none", "full"),
           top: int = 20, progress=None, xla: bool = False):
    """(columns of the ``top`` fitting layouts by headroom, layouts that fit, layouts evaluated). Where none
    fits, the ``top`` closest to fitting (smallest shortfall), with ``fits`` false and their ``shortfall_bytes``."""
    import numpy as np

    from aicalc.core.train_memory import padded_seq
    from aicalc.core.train_peak import evaluate

    lay = np.asarray(layouts(arch, chips, cps, setup.virtual_stages, setup.first_stage_layers,
                             setup.last_stage_layers), dtype=np.float64)
    if not lay.size:
        return None, 0, 0
    mbs = [b for b in MICRO_BATCHES if b <= max_batch] or [1]
    ix, Z, MB, SQ = (m.ravel() for m in np.meshgrid(np.arange(len(lay)), np.arange(4.0), np.asarray(mbs, float),
                                                    np.asarray(seqs, float), indexing="ij"))
    parts, total, done = [], MB.size * len(recomputes), 0
    for rc in recomputes:
        oo = replace(setup, recompute=rc)
        for i in range(0, MB.size, SLICE):
            sl = slice(i, i + SLICE)
            mb, sq = MB[sl], SQ[sl]
            g = {"batch": mb, "seq": sq, "tp": lay[ix[sl], 0], "pp": lay[ix[sl], 1], "cp": lay[ix[sl], 2],
                 "dp": lay[ix[sl], 3], "zero": Z[sl], "recompute": np.full(mb.shape, rc)}
            # sequence parallelism pads each CP rank's tokens to a multiple of tp (train_memory.padded_seq)
            run = {**g, "seq": padded_seq(sq, g["tp"], g["cp"])} if setup.sp and not xla else g
            cols = evaluate(arch, oo, run)
            cols["seq"] = sq
            cols["recompute"] = g["recompute"]
            # a CP degree must split each sequence into 2·cp chunks; EP × expert TP must divide tp·cp·dp
            valid = (sq % (2 * g["cp"]) == 0) | (g["cp"] == 1)
            if setup.ep > 1:
                valid &= (g["tp"] * g["cp"] * g["dp"]) % (setup.ep * (setup.etp or g["tp"])) == 0
            valid &= (g["zero"] == 0) | (g["dp"] * g["cp"] > 1)  # one data-parallel rank: nothing to shard
            cols["valid"] = valid
            parts.append({k: np.broadcast_to(np.asarray(v), mb.shape) for k, v in cols.items()})
            done += mb.size
            if progress:
                progress(done, total)
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    headroom = limit - cols["peak_reserved_bytes"]  # what the allocator reserves must fit
    valid = cols.pop("valid")
    fit = (headroom >= 0) & valid
    keep = fit if fit.any() else valid
    order = np.argsort(-headroom[keep], kind="stable")[:top]
    sel = {k: v[keep][order] for k, v in cols.items()}
    room = headroom[keep][order]
    sel["headroom_bytes"], sel["shortfall_bytes"] = np.maximum(room, 0.0), np.maximum(-room, 0.0)
    sel["fits"] = room >= 0
    return sel, int(fit.sum()), int(valid.sum())
