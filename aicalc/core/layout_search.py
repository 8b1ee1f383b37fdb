"""The training layouts a number of devices admits: TP × PP × CP × DP × ZeRO × micro-batch × recompute, their
peaks evaluated a block at a time (:func:`aicalc.core.train_peak.peak_reserved_staged`), those that fit ranked by memory
headroom and the best evaluated in full (:func:`aicalc.core.train_peak.evaluate`)."""

from __future__ import annotations

SLICE = 1 << 18  # layouts evaluated per block (a long search reports progress between blocks)
MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MAX_LAYOUTS = 30_000_000  # one search: about 2 s and 0.05 GiB at the speed of docs/robustness.md; 10⁸ is refused


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(arch, chips: int, cps=(1,), vp: int = 1, first=None, last=None) -> list[tuple[int, int, int, int]]:
    """(tp, pp, cp, dp) with tp·pp·cp·dp = chips, TP dividing heads, FFN and kv heads (or a multiple of them),
    TP ≤ 64 and PP any degree whose stages all hold layers (:func:`pipeline_degrees`). An encoder (``Arch.encoder``)
    is data parallel only, as transformers' Trainer runs it."""
    if arch.encoder:
        return [(1, 1, 1, chips)] if 1 in cps else []
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
           top: int = 20, progress=None, xla: bool = False, closest: bool = True):
    """(columns of the ``top`` fitting layouts by headroom, layouts that fit, layouts evaluated). Where none
    fits, the ``top`` closest to fitting (smallest shortfall), with ``fits`` false and their ``shortfall_bytes``
    (``closest`` False: none, the columns ``{}``).

    The layouts are numbered recompute mode × (tp, pp, cp, dp) × ZeRO stage × micro-batch × sequence, row-major,
    and ranked by headroom, ties in that order. They are evaluated a block at a time, one recompute mode per block,
    every pipeline depth and its candidate stages in it (:func:`_stage_table`), each axis on its own dimension
    (:func:`aicalc.core.train_peak.peak_reserved_staged`: a term that depends on a few axes is computed once per
    value of those), only the peak; the running ``top``
    by headroom is kept (with the counts), so memory does not grow with the search, and the layouts that make
    the top are evaluated in full at the end (:func:`aicalc.core.train_peak.evaluate`, the same numbers)."""
    import numpy as np

    from aicalc.core.train_memory import padded_seq
    from aicalc.core.train_peak import peak_reserved_staged

    lay = np.asarray(layouts(arch, chips, cps, setup.virtual_stages, setup.first_stage_layers,
                             setup.last_stage_layers), dtype=np.float64)
    if not lay.size:
        return None, 0, 0
    mbs = np.asarray([b for b in MICRO_BATCHES if b <= max_batch] or [1], dtype=np.float64)
    seqs = np.asarray(seqs, dtype=np.float64).reshape(-1)
    shape = (len(lay), 4, len(mbs), len(seqs))  # layout × ZeRO stage × micro-batch × sequence, row-major
    size = int(np.prod(shape))
    zeros = np.arange(4.0).reshape(1, 4, 1, 1)
    batch = mbs.reshape(1, 1, -1, 1)
    # a block: layouts of any pipeline depth × their candidate stages × every ZeRO stage and micro-batch × a run of
    # sequences, ≈ SLICE points
    run_s = max(1, min(len(seqs), SLICE // (4 * len(mbs))))
    stages, needed = _stage_table(arch, setup, lay[:, 1])  # (stage, rank / layers / MoE layers, layout)
    most = int(needed.max())
    if len(lay) * most * 4 * len(mbs) * run_s <= SLICE:  # a short search: every layout in one block
        groups = [(most, np.arange(len(lay)))]
    else:  # a long one: the layouts with as many stages together, so that no stage is evaluated twice
        groups = [(k, np.flatnonzero(needed == k)) for k in range(1, most + 1) if np.any(needed == k)]
    best_h, best_i = np.empty(0), np.empty(0, dtype=np.int64)  # the running top: headroom, layout number
    fit_n = valid_n = done = 0
    total = size * len(recomputes)
    for r, rc in enumerate(recomputes):
        oo = setup._replace(recompute=rc)
        for k, rows in groups:
            run_l = max(1, SLICE // (k * 4 * len(mbs) * run_s))
            for lo in range(0, len(rows), run_l):
                li = rows[lo:lo + run_l]
                tp, pp, cp, dp = (lay[li, c].reshape(-1, 1, 1, 1) for c in range(4))
                rank, layers, moe = (stages[:k, c, li].reshape(k, -1, 1, 1, 1) for c in range(3))
                for so in range(0, len(seqs), run_s):
                    sq = seqs[so:so + run_s].reshape(1, 1, 1, -1)
                    g = {"batch": batch, "seq": sq, "tp": tp, "pp": pp, "cp": cp, "dp": dp, "zero": zeros}
                    if setup.sp and not xla:  # each CP rank's tokens padded to a multiple of tp (padded_seq)
                        g["seq"] = padded_seq(sq, tp, cp)
                    headroom = limit - peak_reserved_staged(arch, oo, g, rank, layers, moe)  # what is reserved must fit
                    # a CP degree must split each sequence into 2·cp chunks; EP × expert TP must divide tp·cp·dp
                    valid = (sq % (2 * cp) == 0) | (cp == 1)
                    if setup.ep > 1:
                        valid = valid & ((tp * cp * dp) % (setup.ep * (setup.etp or tp)) == 0)
                    valid = valid & ((zeros == 0) | (dp * cp > 1))  # one data-parallel rank: nothing to shard
                    headroom = np.broadcast_to(headroom, (len(li), 4, len(mbs), sq.size))
                    valid = np.broadcast_to(valid, headroom.shape)
                    fit_n += int(np.count_nonzero((headroom >= 0) & valid))
                    valid_n += int(np.count_nonzero(valid))
                    cand = np.flatnonzero(valid)
                    h = headroom.reshape(-1)[cand]
                    if top and len(best_h) >= top and not np.isnan(best_h[-1]):  # only what can beat the top so far
                        keep = h >= best_h[-1]
                        cand, h = cand[keep], h[keep]
                    if h.size > top > 0 and not np.isnan(h).any():
                        cut = np.partition(h, h.size - top)[h.size - top]  # the top-th largest: at or above stays
                        keep = h >= cut
                        cand, h = cand[keep], h[keep]
                    lr, z, m, s = np.unravel_index(cand, headroom.shape)
                    num = r * size + np.ravel_multi_index((li[lr], z, m, so + s), shape)
                    best_h, best_i = np.concatenate([best_h, h]), np.concatenate([best_i, num])
                    order = np.lexsort((best_i, -best_h))[:top]  # most headroom first (NaN last), ties in order
                    best_h, best_i = best_h[order], best_i[order]
                    done += headroom.size
                    if progress:
                        progress(done, total)
    if not fit_n and not closest:  # none fits and the closest are not wanted: none is evaluated in full
        return {}, 0, valid_n
    sel = _columns(arch, setup, lay, mbs, seqs, shape, recomputes, best_i, xla)
    room = limit - sel["peak_reserved_bytes"]
    keep = room >= 0 if fit_n else np.ones(room.shape, dtype=bool)
    sel = {k: v[keep] for k, v in sel.items()}
    room = room[keep]
    sel["headroom_bytes"], sel["shortfall_bytes"] = np.maximum(room, 0.0), np.maximum(-room, 0.0)
    sel["fits"] = room >= 0
    return sel, fit_n, valid_n


STAGES = ("first", "last", "middle")  # the pipeline ranks whose peak can be the highest, in the order compared


def _stage_table(arch, setup, pps):
    """For the pipeline depths ``pps``: (stage, rank / layers / MoE layers, layout), the first, last and fullest
    middle rank (:func:`aicalc.core.stages.stage_candidates`), and how many of those each depth has. A stage a
    depth does not have (no last rank at PP 1, no middle rank at PP ≤ 2 or one that holds no more layers than
    the first) repeats the first, whose peak it then cannot beat (:func:`aicalc.core.train_peak.peak_reserved_staged`);
    the stages a depth has come first (a middle rank only where there is a last)."""
    import numpy as np

    from aicalc.core.stages import stage_candidates

    moe = tuple(arch.moe_layers) if arch.moe is not None else None
    out, needed = np.empty((len(STAGES), 3, len(pps))), np.empty(len(pps), dtype=np.int64)
    for p in sorted(set(pps.tolist())):
        c = stage_candidates(arch.layers, int(p), setup.virtual_stages, setup.first_stage_layers,
                             setup.last_stage_layers, moe)
        first = c["first"]
        use = {"first": first, "last": c["last"] if p > 1 else None,
               "middle": c["middle"] if p > 2 and c["middle"][1] > first[1] else None}
        at = pps == p
        needed[at] = sum(v is not None for v in use.values())
        for k, name in enumerate(STAGES):
            out[k, :, at] = use[name] or first
    return out, needed


def _columns(arch, setup, lay, mbs, seqs, shape, recomputes, nums, xla: bool) -> dict:
    """Every column of :func:`aicalc.core.train_peak.evaluate` for the layouts numbered ``nums`` (as
    :func:`search` numbers them), in that order."""
    import numpy as np

    from aicalc.core.train_memory import padded_seq
    from aicalc.core.train_peak import evaluate

    size = int(np.prod(shape))
    rcs, (li, zi, mi, si) = nums // size, np.unravel_index(nums % size, shape)
    # Megatron's step is one phase whatever the recompute mode (train_peak._stage), so its modes are evaluated
    # together, the mode a column of the grid (the same numbers, one evaluation instead of one per mode); the hf
    # loop's phases depend on the mode (autocast's cached casts), so each mode has its own
    joint = setup.framework == "megatron" and nums.size > 0
    parts, where = [], []
    for r, rc in ((None, None),) if joint else enumerate(recomputes):
        at = np.arange(nums.size) if joint else np.flatnonzero(rcs == r)
        if r and not at.size:
            continue  # the first mode is evaluated even on no layout: it says which columns there are
        mb, sq = mbs[mi[at]], seqs[si[at]]
        g = {"batch": mb, "seq": sq, "tp": lay[li[at], 0], "pp": lay[li[at], 1], "cp": lay[li[at], 2],
             "dp": lay[li[at], 3], "zero": zi[at].astype(np.float64)}
        # sequence parallelism pads each CP rank's tokens to a multiple of tp (train_memory.padded_seq)
        run = {**g, "seq": padded_seq(sq, g["tp"], g["cp"])} if setup.sp and not xla else g
        if joint:
            run = {**run, "recompute": np.asarray(recomputes)[rcs]}
        cols = evaluate(arch, setup if joint else setup._replace(recompute=rc), run)
        cols["seq"] = sq
        # one string width for every mode
        cols["recompute"] = np.asarray(recomputes)[rcs] if joint else np.asarray(rc, dtype=np.asarray(recomputes).dtype)
        parts.append({k: np.broadcast_to(np.asarray(v), mb.shape) for k, v in cols.items()})
        where.append(at)
    order = np.argsort(np.concatenate(where), kind="stable")
    return {k: np.concatenate([p[k] for p in parts])[order] for k in parts[0]}


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
