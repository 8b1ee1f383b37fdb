"""The training layouts a number of devices admits: TP × PP × CP × DP × ZeRO × micro-batch × recompute, each
evaluated by :func:`aicalc.core.train_peak.evaluate` in one vectorized pass, and those that fit ranked by
memory headroom."""

from __future__ import annotations

SLICE = 1 << 18  # layouts evaluated per slice (a long search reports progress between slices)
MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MAX_LAYOUTS = 30_000_000  # one search: about 6 s and 0.2 GiB at the speed of docs/robustness.md; 10⁸ is refused


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(arch, chips: int, cps=(1,), vp: int = 1, first=None, last=None) -> list[tuple[int, int, int, int]]:
    """(tp, pp, cp, dp) with tp·pp·cp·dp = chips, TP dividing heads, FFN and kv heads (or a multiple of them),
    TP ≤ 64 and PP any degree whose stages all hold layers (:func:`pipeline_degrees`)."""
    tps = [t for t in divisors(chips) if arch.heads % t == 0 and arch.ffn % t == 0
           and (arch.mla is not None or arch.kv_heads % t == 0 or t % arch.kv_heads == 0) and t <= 64]
    pps = pipeline_degrees(arch.layers, divisors(chips), vp, first, last)
    return [(t, p, c, chips // (t * p * c)) for t in tps for p in pps for c in cps if chips % (t * p * c) == 0]


def count(arch, chips: int, seqs, max_batch: int, cps=(1,), recomputes=("none", "full"), vp: int = 1, first=None,
          last=None) -> int:
    """Layouts :func:`search` evaluates, known before any is (the caller bounds it)."""
    mbs = [b for b in MICRO_BATCHES if b <= max_batch] or [1]
    return len(layouts(arch, chips, cps, vp, first, last)) * 4 * len(mbs) * len(seqs) * len(recomputes)


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
    fits, the ``top`` closest to fitting (smallest shortfall), with ``fits`` false and their ``shortfall_bytes``.

    The layouts are evaluated a slice at a time and only the running ``top`` by headroom is kept (with the
    counts), so memory does not grow with the search: the ``top`` fitting layouts are the fitting ones among the
    ``top`` valid layouts with the most headroom. Ties keep the order of evaluation."""
    import numpy as np

    from aicalc.core.train_memory import padded_seq
    from aicalc.core.train_peak import evaluate

    lay = np.asarray(layouts(arch, chips, cps, setup.virtual_stages, setup.first_stage_layers,
                             setup.last_stage_layers), dtype=np.float64)
    if not lay.size:
        return None, 0, 0
    mbs = np.asarray([b for b in MICRO_BATCHES if b <= max_batch] or [1], dtype=np.float64)
    seqs = np.asarray(seqs, dtype=np.float64).reshape(-1)
    shape = (len(lay), 4, len(mbs), len(seqs))  # layout × ZeRO stage × micro-batch × sequence, row-major
    size = int(np.prod(shape))
    best: dict | None = None  # the running top, sorted by headroom (most first)
    fit_n = valid_n = done = 0
    total = size * len(recomputes)
    for rc in recomputes:
        oo = setup._replace(recompute=rc)
        for i in range(0, size, SLICE):
            li, zi, mi, si = np.unravel_index(np.arange(i, min(i + SLICE, size)), shape)
            mb, sq = mbs[mi], seqs[si]
            g = {"batch": mb, "seq": sq, "tp": lay[li, 0], "pp": lay[li, 1], "cp": lay[li, 2],
                 "dp": lay[li, 3], "zero": zi.astype(np.float64)}
            # sequence parallelism pads each CP rank's tokens to a multiple of tp (train_memory.padded_seq)
            run = {**g, "seq": padded_seq(sq, g["tp"], g["cp"])} if setup.sp and not xla else g
            cols = evaluate(arch, oo, run)  # one recompute mode for the whole slice: the setup's
            cols["seq"] = sq
            cols["recompute"] = np.asarray(rc)
            # a CP degree must split each sequence into 2·cp chunks; EP × expert TP must divide tp·cp·dp
            valid = (sq % (2 * g["cp"]) == 0) | (g["cp"] == 1)
            if setup.ep > 1:
                valid &= (g["tp"] * g["cp"] * g["dp"]) % (setup.ep * (setup.etp or g["tp"])) == 0
            valid &= (g["zero"] == 0) | (g["dp"] * g["cp"] > 1)  # one data-parallel rank: nothing to shard
            headroom = limit - np.broadcast_to(cols["peak_reserved_bytes"], mb.shape)  # what is reserved must fit
            fit_n += int(np.count_nonzero((headroom >= 0) & valid))
            valid_n += int(np.count_nonzero(valid))
            pick = _top(headroom, np.flatnonzero(valid), top)
            part = {k: np.broadcast_to(np.asarray(v), mb.shape)[pick] for k, v in cols.items()}
            part["_headroom"] = headroom[pick]
            best = part if best is None else _merge(best, part, top)
            done += mb.size
            if progress:
                progress(done, total)
    if best is None:
        return None, 0, 0
    room = best.pop("_headroom")
    keep = room >= 0 if fit_n else np.ones(room.shape, dtype=bool)
    sel = {k: v[keep] for k, v in best.items()}
    room = room[keep]
    sel["headroom_bytes"], sel["shortfall_bytes"] = np.maximum(room, 0.0), np.maximum(-room, 0.0)
    sel["fits"] = room >= 0
    return sel, fit_n, valid_n


def _top(headroom, candidates, top: int):
    """The indices among ``candidates`` of the ``top`` largest ``headroom`` (NaN last), in order, ties in index
    order: a stable sort of a short list, after a partition has dropped what cannot make the top."""
    import numpy as np

    h = headroom[candidates]
    if h.size > top and top > 0 and not np.isnan(h).any():
        cut = np.partition(h, h.size - top)[h.size - top]  # the top-th largest: everything at or above it stays
        keep = h >= cut
        candidates, h = candidates[keep], h[keep]
    return candidates[np.argsort(-h, kind="stable")[:top]]


def _merge(best: dict, part: dict, top: int) -> dict:
    """The ``top`` of two sorted tops, ``best`` evaluated before ``part`` (so it wins ties)."""
    import numpy as np

    both = {k: np.concatenate([best[k], part[k]]) for k in best}
    order = np.argsort(-both["_headroom"], kind="stable")[:top]
    return {k: v[order] for k, v in both.items()}
