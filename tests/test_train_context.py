"""The memory a training process holds besides its tensors: the chip class's CUDA context and NCCL buffers
(presets/classes/datacenter-gpu.yaml, each figure with its source), added per layout and judged by ``fits`` on
the reserved peak (docs/train-mem.md "Context and communication buffers")."""

from __future__ import annotations

import pytest

import aicalc
from aicalc.catalog import profiles

MiB = 2**20


def test_class_figures_follow_their_sources():
    """The context measured on an H200 after training steps (tests/data/measured/h200-context.json: NVML's process
    memory less what the allocator reserved) + the cuBLAS workspaces the step peaks' baseline holds
    (h200-step-peak.json); NCCL: 1.06 GB besides PyTorch on 8 H100s less a bare context (426 MiB, unsloth-zoo PR
    #1053, + 32 MiB), and 4.34 − 1.06 GB for the first all-to-all (NVIDIA/nccl #1685)."""
    import json

    from conftest import ROOT

    measured = ROOT / "tests" / "data" / "measured"
    ctx = json.loads((measured / "h200-context.json").read_text())["records"]
    steps = json.loads((measured / "h200-step-peak.json").read_text())["records"]
    outside = {r["stage"]: r["outside_bytes"] for r in ctx}
    assert outside["first allocation"] < outside["bf16 matmul"] < outside["training steps"]
    workspace = steps[0]["baseline_bytes"]  # allocated before any model, after a warm-up step
    opt = profiles.load("class", "datacenter-gpu").options
    assert opt["context_bytes"] == outside["training steps"] + workspace
    assert opt["nccl_communicator_bytes"] == pytest.approx(1.06e9 - (426 + 32) * MiB, rel=0.01)
    assert opt["nccl_all_to_all_bytes"] == pytest.approx(4.34e9 - 1.06e9, rel=1e-9)
    for c in ("datacenter-gpu", "consumer-gpu", "tpu", "amd-gpu", "edge-npu"):
        p = profiles.load("class", c)
        assert all(p.options.get(f"{k}_source") for k in ("context_bytes", "nccl_communicator_bytes",
                                                           "nccl_all_to_all_bytes")), c


def _mem(**kw):
    return aicalc.train_memory("llama-3.1-8b", batch=1, seq=4096, recompute="full", **kw)


def test_overhead_per_parallel_group():
    opt = profiles.load("class", "datacenter-gpu").options
    ctx, comm = opt["context_bytes"], opt["nccl_communicator_bytes"]
    r = _mem(chip="h100-sxm", dp=[1, 8, 4], tp=[1, 1, 2], zero=[0, 3, 3])
    assert list(r["context_bytes"]) == [ctx] * 3
    assert list(r["comm_buffers_bytes"]) == [0.0, comm, 2 * comm]  # none; data parallel; data and tensor parallel
    assert list(r["overhead_bytes"]) == [ctx, ctx + comm, ctx + 2 * comm]
    alloc = r["peak_allocated_bytes"]
    assert list(r["peak_bytes"]) == pytest.approx(list(alloc + r["overhead_bytes"]))
    # the allocator's 8 %, and 12 % more under full recompute (train_memory.RECOMPUTE_RESERVE), outside the overhead
    assert list(r["peak_reserved_bytes"]) == pytest.approx(list(alloc * 1.08 * 1.12 + r["overhead_bytes"]))
    assert list(r["fits"]) == list(r["peak_reserved_bytes"] <= 80 * 2**30)


def test_expert_parallel_all_to_all():
    opt = profiles.load("class", "datacenter-gpu").options
    r = aicalc.train_memory("mixtral-8x7b", batch=1, seq=4096, dp=8, zero=3, ep=8, recompute="full",
                            chip="h100-sxm")
    assert float(r["comm_buffers_bytes"][0]) == opt["nccl_communicator_bytes"] + opt["nccl_all_to_all_bytes"]


def test_stated_default_without_a_class_figure():
    # no chip, a chip whose class states no figure (TPU), or --overhead: the stated 1 GiB or the given bytes
    assert float(_mem()["overhead_bytes"][0]) == 2**30
    assert float(_mem(chip="tpu-v5p", dp=8, zero=3)["overhead_bytes"][0]) == 2**30
    r = _mem(chip="h100-sxm", dp=8, zero=3, overhead=3 * 2**30)
    assert float(r["overhead_bytes"][0]) == 3 * 2**30 and float(r["comm_buffers_bytes"][0]) == 0.0
