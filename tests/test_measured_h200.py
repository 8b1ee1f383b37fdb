"""aicalc and the CPU trace against training steps measured on a GPU (issue 23).

``tests/data/measured/h200-step-peak.json`` was measured by ``validation/measure_gpu.py`` on one NVIDIA H200 (real
tensors, three training steps, ``torch.cuda.max_memory_allocated`` less the allocations made before the model):
the small configurations the CPU harness traces (``validation/record_step_peak.py``) and full-size models. The
CPU trace must stand for the GPU where it claims to, and aicalc's peak must land within 5 % of every measured
step except the banded ones (``validation/step_peak_doc.GPU_BANDS``, with their reasons).
"""

from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "validation"))
from step_peak_doc import (  # noqa: E402
    GPU_BANDS,
    GPU_DATA,
    RESERVE_CALIBRATION,
    RESERVE_FACTOR_CALIBRATION,
    estimate,
    gpu_records,
    gpu_rows,
    not_cuda,
    reserved_error,
)

DOC = json.loads(GPU_DATA.read_text())
ROWS = gpu_rows()
DOC_RECORDS_ALL = gpu_records()
BY = {r["name"]: r for r in DOC["records"]}
ROWS_BY = {r["name"]: {"est": est} for r, est, _ in ROWS}


def test_measured_steps_cover_the_traced_matrix_and_real_sizes():
    traced = json.loads((ROOT / "tests" / "data" / "validation" / "step_peak.json").read_text())["records"]
    # the encoder records (BERT, TM-32's model; RoBERTa) were traced after the H200 run, in a session lent no GPU
    assert {r["name"] for r in traced if r["config"]["model_type"] not in ("bert", "roberta")} <= set(BY)
    full = [r for r, _, _ in ROWS if r["name"].startswith("full-size/")]
    assert len(full) >= 20 and max(r["params"] for r in full) > 7e9
    assert "H200" in DOC["meta"]["device"]


@pytest.mark.parametrize("row", ROWS, ids=[r["name"] for r, _, _ in ROWS])
def test_aicalc_within_5_percent_of_the_gpu(row):
    rec, est, _ = row
    lo, hi = GPU_BANDS.get(rec["name"], (-0.05, 0.05))
    err = est / rec["peak_bytes"] - 1
    assert lo <= err <= hi, f"{rec['name']}: aicalc {est:,.0f} vs measured {rec['peak_bytes']:,} ({err:+.2%})"


def test_cpu_trace_stands_for_the_gpu():
    """Every traced record that claims to stand for a CUDA run is within 3 % of the GPU's peak; the two kinds that
    do not are what the harness says they are."""
    for rec, _, cpu in ROWS:
        if cpu is None:
            continue
        err = cpu / rec["peak_bytes"] - 1
        if rec["model"] == "deepseekv3-style" and rec["attention"] == "sdpa":
            continue  # the CPU's math-path fallback (test_train_peak), not compared
        if not_cuda(rec):  # fp32 SDPA with GQA: CUDA's math path saves what eager saves
            eager = BY[rec["name"].replace("/sdpa/", "/eager/")]
            assert rec["peak_bytes"] == pytest.approx(eager["peak_bytes"], rel=0.005), rec["name"]
            assert err <= 0.005, rec["name"]  # the CPU's flash kernel saves less, never more
        else:
            assert abs(err) <= 0.03, f"{rec['name']}: traced {cpu:,} vs measured {rec['peak_bytes']:,} ({err:+.2%})"


@pytest.mark.parametrize("name", ["mistral-style/sdpa/fp32/foreach/b2s256", "qwen2-style/sdpa/fp32/foreach/b2s256"])
def test_fp32_gqa_sdpa_peaks_where_eager_does(name):
    """On the GPU these fp32 SDPA steps peak exactly where their eager twins do (CUDA's math path); so must
    aicalc's (the CPU trace put them 5-6 % lower)."""
    sdpa = dict(ROWS_BY[name])
    eager = dict(ROWS_BY[name.replace("/sdpa/", "/eager/")])
    assert BY[name]["peak_bytes"] == pytest.approx(BY[name.replace("/sdpa/", "/eager/")]["peak_bytes"], rel=0.005)
    assert sdpa["est"] == pytest.approx(eager["est"], rel=0.01)


def test_reserved_peak_on_full_size_steps():
    """The allocator's reserve: ``ALLOCATOR_RESERVE`` fitted on eight full-size steps without recompute
    (``RESERVE_CALIBRATION``: the dense ones within 5 % of ``max_memory_reserved``), ``RECOMPUTE_RESERVE`` and
    ``MOE_RESERVE`` on the first run's steps with full recompute or fine-grained experts. The second run (18 steps
    measured after those were set) is held out: within 20 % each, 13 of 17 within 10 %, and closer on the whole
    (geometric mean) than the plain reserve alone (docs/validation-train.md)."""
    import math

    from aicalc.core import train_memory as tm

    full = {r["name"]: (r, reserved_error(r)) for r, _, _ in ROWS if r["name"].startswith("full-size/")}
    assert set(RESERVE_CALIBRATION) | set(RESERVE_FACTOR_CALIBRATION) <= set(full)
    dense = [full[n][1] for n in RESERVE_CALIBRATION if "moe" not in n]
    assert len(dense) >= 6 and all(abs(e) <= 0.05 for e in dense), dense
    assert all(abs(full[n][1]) <= 0.18 for n in RESERVE_FACTOR_CALIBRATION)
    held = [(r, e) for r, e in full.values() if r.get("run") == 2]
    assert len(held) >= 15
    assert all(abs(e) <= 0.20 for _, e in held), held
    assert sum(abs(e) <= 0.10 for _, e in held) >= 13

    def geomean(errs):
        return math.exp(sum(math.log1p(abs(e)) for e in errs) / len(errs)) - 1

    plain = [ROWS_BY[r["name"]]["est"] * (1 + tm.ALLOCATOR_RESERVE) / r["reserved_peak_bytes"] - 1 for r, _ in held]
    assert geomean([e for _, e in held]) < geomean(plain)


def test_third_run_new_families_and_the_step_that_ran_out_of_memory():
    """The third run (held out: new families at released widths) holds every step to 5 % like the others, and its
    one step that ran out of memory on the H200 (Gemma-3 4B's widths, eager, batch 6 × 4,096) is called out of
    memory, while the same model at batch 4, which ran, is called a fit."""
    third = [r for r in DOC_RECORDS_ALL if r.get("run") == 3]
    assert len({r["config"]["model_type"] for r in third}) >= 12
    oom = [r for r in third if "OutOfMemoryError" in r.get("error", "")]
    assert len(oom) == 1
    ran = [r for r in third if "peak_bytes" in r and r["config"] == oom[0]["config"]
           and r["attention"] == oom[0]["attention"] and r["seq"] == oom[0]["seq"]]
    assert ran and all(r["batch"] < oom[0]["batch"] for r in ran)

    def fits(r):
        return bool(estimate(r, chip="h200")["fits"][0])

    assert not fits(oom[0])
    assert all(fits(r) for r in ran)
