"""The layout search keeps only a running top and counts (issue 25): its answer is the one a search that keeps every
layout and sorts them all gives, ties in the order of evaluation; a search too large is refused before any work."""

from __future__ import annotations

import numpy as np
import pytest

from aicalc.catalog import store
from aicalc.core import layout_search
from aicalc.core.train_peak import TrainSetup, evaluate


def _everything(arch, setup, chips, limit, seqs, max_batch, cps, recomputes, top, xla=False):
    """Every layout evaluated by the plain :func:`evaluate` in one grid, then one stable sort: the search as it was
    before it streamed, and before it evaluated only the peak, a block of one pipeline depth at a time."""
    from aicalc.core.train_memory import padded_seq

    lay = np.asarray(layout_search.layouts(arch, chips, cps, setup.virtual_stages, setup.first_stage_layers,
                                           setup.last_stage_layers), dtype=np.float64)
    mbs = [b for b in layout_search.MICRO_BATCHES if b <= max_batch] or [1]
    ix, Z, MB, SQ = (m.ravel() for m in np.meshgrid(np.arange(len(lay)), np.arange(4.0), np.asarray(mbs, float),
                                                    np.asarray(seqs, float), indexing="ij"))
    parts = []
    for rc in recomputes:
        g = {"batch": MB, "seq": SQ, "tp": lay[ix, 0], "pp": lay[ix, 1], "cp": lay[ix, 2], "dp": lay[ix, 3],
             "zero": Z, "recompute": np.full(MB.shape, rc)}
        run = {**g, "seq": padded_seq(SQ, g["tp"], g["cp"])} if setup.sp and not xla else g
        cols = evaluate(arch, setup._replace(recompute=rc), run)
        cols["seq"] = SQ
        cols["recompute"] = g["recompute"]
        valid = (SQ % (2 * g["cp"]) == 0) | (g["cp"] == 1)
        if setup.ep > 1:
            valid &= (g["tp"] * g["cp"] * g["dp"]) % (setup.ep * (setup.etp or g["tp"])) == 0
        valid &= (g["zero"] == 0) | (g["dp"] * g["cp"] > 1)
        cols["valid"] = valid
        parts.append({k: np.broadcast_to(np.asarray(v), MB.shape) for k, v in cols.items()})
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    headroom = limit - cols["peak_reserved_bytes"]
    valid = cols.pop("valid")
    fit = (headroom >= 0) & valid
    keep = fit if fit.any() else valid
    order = np.argsort(-headroom[keep], kind="stable")[:top]
    sel = {k: v[keep][order] for k, v in cols.items()}
    room = headroom[keep][order]
    sel["headroom_bytes"], sel["shortfall_bytes"] = np.maximum(room, 0.0), np.maximum(-room, 0.0)
    sel["fits"] = room >= 0
    return sel, int(fit.sum()), int(valid.sum())


HF, MEG = TrainSetup(), TrainSetup(framework="megatron", sp=True, attention="flash")
CASES = [  # (model, setup, chips, limit bytes, seqs, max batch, cps, recomputes, top)
    ("llama-3.1-8b", HF, 8, 80e9, [1024, 2048, 4096], 8, (1, 2), ("none", "full", "every-2"), 20),
    ("llama-3.1-70b", MEG, 64, 80e9, [2048, 8192], 4, (1, 2, 4), ("none", "full", "selective"), 15),
    ("llama-3.1-70b", HF, 8, 20e9, [4096, 8192], 2, (1,), ("none", "full"), 10),  # none fits
    ("llama-3.1-8b", HF, 16, 24e9, [8192, 32768], 16, (1, 2), ("none", "full"), 50),  # few fit: < top
    ("gpt2", HF, 4, 80e9, [512, 1024], 2, (1,), ("none", "full"), 500),  # a top larger than the search
    # sequences that SP pads (1000 over cp·tp), pipelines of 3+ stages (a middle stage) and 80 layers split unevenly
    ("llama-3.1-70b", MEG, 96, 80e9, [1000, 4096, 6000], 2, (1, 2), ("none", "full", "selective"), 40),
    ("llama-3.1-70b", MEG._replace(virtual_stages=2, precision="fp8-mixed"), 64, 60e9, [4096], 2, (1,),
     ("none", "full"), 25),
    ("llama-3.1-70b", MEG._replace(first_stage_layers=6), 64, 80e9, [4096], 4, (1,), ("none", "full"), 25),
    ("qwen3-30b-a3b", TrainSetup(ep=8), 64, 80e9, [2048, 8192], 4, (1, 2), ("none", "full", "selective-op"), 30),
    ("deepseek-v2-lite", MEG._replace(ep=4, etp=2), 32, 40e9, [4096], 4, (1, 2), ("none", "selective"), 30),
    ("llama-3.1-8b", TrainSetup(lora_rank=16, lora_targets="all"), 8, 16e9, [1024, 4096], 8, (1,),
     ("none", "full", "every-2"), 30),
    ("llama-3.1-8b", TrainSetup(lora_rank=16, quant="nf4", framework="litgpt"), 2, 24e9, [2048], 4, (1,),
     ("none", "full"), 20),
    ("llama-3.1-8b", TrainSetup(offload="optimizer", optimizer_in_backward=True, attention="eager"), 4, 24e9,
     [512, 2048], 4, (1,), ("none", "full"), 20),
    ("llama-3.1-8b", TrainSetup(context_bytes=5e8, comm_bytes=3e8), 16, 80e9, [4096], 8, (1, 2, 4),
     ("none", "full"), 20),  # NCCL's buffers per layout
    ("gpt2", HF, 4, 80e9, [6], 2, (2,), ("none", "full"), 10),  # no layout valid: 6 tokens in 2·cp = 4 chunks
]


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{c[0]}-{c[2]}" for i, c in enumerate(CASES)])
@pytest.mark.parametrize("slice_size", [37, 1 << 18])
def test_running_top_is_the_full_sort(case, slice_size, monkeypatch):
    model, setup, chips, limit, seqs, max_batch, cps, recomputes, top = case
    arch = store.resolve_model(model).arch
    monkeypatch.setattr(layout_search, "SLICE", slice_size)  # many blocks: the top is merged across them
    sel, fit, n = layout_search.search(arch, setup, chips, limit, seqs, max_batch, cps, recomputes, top)
    ref, ref_fit, ref_n = _everything(arch, setup, chips, limit, seqs, max_batch, cps, recomputes, top)
    assert (fit, n) == (ref_fit, ref_n)
    assert set(sel) == set(ref)
    for k in ref:
        assert sel[k].tolist() == ref[k].tolist(), k
    assert len(sel["fits"]) == min(top, fit if fit else n)


def test_a_tpu_search_runs_the_sequence_unpadded():
    """XLA shards the sequence without padding it to tp (train_memory's ``xla``): the search's rows are the plain
    evaluation's there too."""
    arch = store.resolve_model("llama-3.1-70b").arch
    args = (arch, MEG._replace(attention="sdpa"), 32, 95e9, [1000, 4096], 4, (1, 2), ("none", "full"), 30)
    sel, fit, n = layout_search.search(*args, xla=True)
    ref, ref_fit, ref_n = _everything(*args, xla=True)
    assert (fit, n) == (ref_fit, ref_n) and fit
    for k in ref:
        assert sel[k].tolist() == ref[k].tolist(), k


def test_equal_headrooms_keep_the_order_of_evaluation():
    """Many layouts with the same peak (the micro-batch and sequence axes of a one-token model change little, and
    a limit far above): the top is the first of them in evaluation order, across recompute modes and blocks."""
    arch = store.resolve_model("gpt2").arch
    args = (arch, HF, 8, 1e15, [8, 16], 4, (1, 2), ("none", "full", "every-2"), 40)
    sel, fit, n = layout_search.search(*args)
    ref, ref_fit, ref_n = _everything(*args)
    assert (fit, n) == (ref_fit, ref_n)
    assert len(set(ref["headroom_bytes"].tolist())) < len(ref["headroom_bytes"])  # ties in the top
    for k in ref:
        assert sel[k].tolist() == ref[k].tolist(), k


def test_ties_keep_the_order_of_evaluation():
    headroom = np.array([5.0, 7.0, 5.0, 7.0, 1.0, 7.0, np.nan, 5.0])
    picked = layout_search._top(headroom, np.arange(8), 4)
    assert picked.tolist() == [1, 3, 5, 0]
    best = {"_headroom": np.array([7.0, 5.0]), "i": np.array([1, 0])}
    part = {"_headroom": np.array([7.0, 6.0]), "i": np.array([9, 8])}
    assert layout_search._merge(best, part, 3)["i"].tolist() == [1, 9, 8]


def test_count_is_the_layouts_evaluated():
    arch = store.resolve_model("llama-3.1-8b").arch
    seqs = [1024, 2048, 4096]
    calls = []
    layout_search.search(arch, TrainSetup(), 8, 80e9, seqs, 8, (1, 2), ("none", "full"),
                         progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (layout_search.count(arch, 8, seqs, 8, (1, 2), ("none", "full")),) * 2


def test_a_search_too_large_is_refused_before_it_starts(monkeypatch):
    """10⁸ layouts: exit 2 with the count and what to give fewer of, and no layout evaluated. 328 (tp, pp, cp, dp)
    layouts of 4096 chips (PP 32 and 64 split 80 layers unevenly) × 4 ZeRO stages × 9 micro-batches × 5000
    sequences × 2 recompute modes = 118,080,000."""
    import aicalc
    from aicalc.errors import ParameterError

    def boom(*a, **k):
        raise AssertionError("evaluated")

    monkeypatch.setattr(layout_search, "search", boom)
    seqs = list(range(256, 256 * 5001, 256))
    with pytest.raises(ParameterError, match=r"118,080,000 layouts.*limited to 30,000,000"):
        aicalc.search_layouts("llama-3.1-70b", "h100-sxm", 4096, seq=seqs, max_batch=256, cp=[1, 2, 4, 8])


def test_a_search_too_large_exits_2_on_the_command_line(cli):
    r = cli("train-mem", "llama-3.1-70b", "--chip", "h100-sxm", "--chips", "4096", "--search", "--batch", "256",
            "--seq", "256:1280000:+256", "--cp", "1,2,4,8")
    assert r.code == 2
    assert "118,080,000 layouts" in r.err and "--seq" in r.err and "Traceback" not in r.err


def test_a_moe_search_without_ep_says_so(cli):
    """A MoE search without --ep holds every expert on every rank, which no MoE training run does: the table says
    so and names --ep; with --ep, or for a dense model, no such note."""
    base = ("train-mem", "mixtral-8x7b", "--chip", "h100-sxm", "--chips", "16", "--search", "--framework", "megatron")
    out = cli(*base).out
    assert "without expert parallelism" in out and "--ep N" in out
    assert "without expert parallelism" not in cli(*base, "--ep", "8").out
    assert "without expert parallelism" not in cli("train-mem", "llama-3.1-8b", "--chip", "h100-sxm", "--chips",
                                                  "8", "--search").out


def test_an_ep_list_searches_each_degree_and_merges_them():
    """--ep 1,8 is the two searches with --ep 1 and --ep 8, ranked together: the layouts that fit add up, each
    row names its EP degree, and the merged top holds the best of each search in headroom order."""
    import aicalc

    kw = dict(seq=2048, framework="megatron", top=10)
    both = aicalc.search_layouts("mixtral-8x7b", "h100-sxm", 16, ep=[1, 8], **kw)
    one, eight = (aicalc.search_layouts("mixtral-8x7b", "h100-sxm", 16, ep=e, **kw) for e in (1, 8))
    assert both.meta["layouts_fit"] == one.meta["layouts_fit"] + eight.meta["layouts_fit"]
    assert both.meta["layouts"] == one.meta["layouts"] + eight.meta["layouts"]
    rows = both.rows()
    heads = sorted([r["headroom_bytes"] for r in one.rows()] + [r["headroom_bytes"] for r in eight.rows()],
                   reverse=True)[:10]
    assert [r["headroom_bytes"] for r in rows] == heads
    assert {r["ep"] for r in rows} == {1, 8} and all(r["ep"] == 1 for r in one.rows())


def test_an_ep_list_outside_a_search_is_refused(cli):
    r = cli("train-mem", "mixtral-8x7b", "--chip", "h100-sxm", "--tp", "2", "--dp", "4", "--ep", "2,4")
    assert r.code == 2 and "--ep" in r.err and "--search" in r.err and "Traceback" not in r.err
    for bad in ("2.5", "1,2.5"):  # not truncated to 2
        r = cli("train-mem", "mixtral-8x7b", "--chip", "h100-sxm", "--chips", "16", "--search", "--ep", bad)
        assert r.code == 2 and "whole number" in r.err
    assert cli("train-mem", "mixtral-8x7b", "--chip", "h100-sxm", "--tp", "2", "--dp", "4", "--ep", "8",
               "--json").json["inputs"]["ep"] == 8  # the envelope's value as the option was
    shown = cli("train-mem", "mixtral-8x7b", "--chip", "h100-sxm", "--chips", "16", "--search", "--framework",
                "megatron", "--ep", "1,8")
    header = next(line for line in shown.out.splitlines() if "headroom" in line)
    assert "ep" in [cell.strip() for cell in header.split("┃")]
