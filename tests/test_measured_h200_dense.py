"""The dense roofline's terms on an H200 against micro-benchmarks measured there (``validation/measure_gpu.py
--part dense``, ``tests/data/measured/h200-dense-gemm.json``): the memory roof that every decode step rides, and
GEMMs of transformer shapes from one row to 16,384."""

from __future__ import annotations

import json
import math

import pytest

from conftest import ROOT

DATA = json.loads((ROOT / "tests" / "data" / "measured" / "h200-dense-gemm.json").read_text())["records"]


@pytest.fixture(scope="module")
def h200():
    from aicalc.api.roofline import cost_setup

    return cost_setup("llama-3.1-8b", chip="h200", dtype="bf16")


def test_memory_roof_is_what_a_copy_and_a_read_reach(h200):
    """The class's bandwidth factor (0.89, fitted on gpt-fast's A100 rows) times the H200's 4.8 TB/s is within 2 %
    of a 4 GiB device-to-device copy and of a read-only reduction measured on the chip (4.28 and 4.23 TB/s)."""
    roof = h200.roofs.bandwidth_bytes_per_s * h200.efficiency.bandwidth
    for r in DATA:
        if r["what"] in ("copy", "read"):
            assert roof == pytest.approx(r["bytes_per_s"], rel=0.02), r["what"]


def test_gemms_of_transformer_shapes(h200):
    """GEMMs that stream at least 100 MB of weights (decode's down/up projections of 8B-70B models) or run 512
    rows and more: aicalc's time within 12 % geometric mean of cuBLAS's, each within 30 %. (Isolated GEMMs of 34 MB
    take 1.3-1.6x aicalc's time: launch and ramp-up that a decode pass under CUDA graphs overlaps.)"""
    from aicalc.core.forward import Op
    from aicalc.core.pricing import op_times

    ratios = []
    for r in DATA:
        if r["what"] != "gemm":
            continue
        M, K, N = r["M"], r["K"], r["N"]
        w = 2.0 * K * N
        if w < 100e6 and M < 512:
            continue
        op = Op("linear", "gemm", flop=2.0 * M * K * N, bytes=2.0 * (M * K + M * N) + w, weight_bytes=w, kernels=1.0,
                dims=(float(M), float(N), float(K)))
        ratios.append(float(op_times(op, h200.roofs, h200.efficiency, 1.0)[1]) / r["bf16_s"])
    assert len(ratios) >= 20
    assert math.exp(sum(abs(math.log(q)) for q in ratios) / len(ratios)) - 1 < 0.12
    assert all(0.7 < q < 1.3 for q in ratios), ratios
