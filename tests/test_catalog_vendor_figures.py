"""Chips added after the reference data (Blackwell Ultra, CDNA 4, Ironwood): each preset's figures against the
vendor's own headline, divided or scaled as the preset's notes derive them, so a transcription slip (a sparse figure
kept as dense, a rack total kept per GPU, GB read as GiB) fails here.

Published numbers, by chip:
- NVIDIA HGX B300 table, 8 GPUs: FP8 72 PFLOPS and FP16/BF16 36 PFLOPS with sparsity (the HGX B200 column prints
  the same), FP4 108 PFLOPS without sparsity, FP64 10 TFLOPS, about 2.1 TB of HBM3e; MLPerf systems named
  B300-SXM-270GB.
- NVIDIA GB300 NVL72 table, 72 GPUs: FP4 1,080 PFLOPS dense, FP8 720 PFLOPS and FP16/BF16 360 PFLOPS with
  sparsity, 576 TB/s HBM3e, 130 TB/s NVLink; Blackwell Ultra blog: 15 PFLOPS dense NVFP4 per GPU.
- AMD CDNA 4 (ISSCC 2026): 256 CUs, 8,192 FP8 FLOPs per CU per clock; peak engine clock 2.4 GHz (MI355X) and
  2.2 GHz (MI350X); Infinity Fabric 7 links x 153.6 GB/s; MI355X headline 5 PF FP8, 10 PF MXFP4.
- Google Cloud TPU7x: 4,614 TFLOPS FP8 per chip, 192 GiB HBM, 9,216 chips per pod, 42.5 FP8 EFLOPS per pod.
- NVIDIA DGX B300: 72 PF FP8 training with sparsity for 8 GPUs.
"""

from __future__ import annotations

import math

import pytest

import aicalc
from aicalc.api.catalog import load_node_or_chip
from aicalc.catalog.profiles import chip_class


def _close(a: float, b: float, rel: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel)


def test_b300_per_gpu_from_the_hgx_table() -> None:
    chip = aicalc.load_chip("b300")
    assert _close(chip.dense_tflops["fp8"], 72_000 / 8 / 2)  # sparse 8-GPU total -> dense per GPU
    assert _close(chip.dense_tflops["bf16"], 36_000 / 8 / 2)
    assert _close(chip.dense_tflops["fp4"], 108_000 / 8)  # printed without sparsity already
    assert _close(chip.dense_tflops["fp64"], 10 / 8)
    assert "int8" not in chip.dense_tflops, "Blackwell Ultra cut INT8: B200's 4.5 POPS must not be carried over"
    # 2.1 TB per 8 GPUs is 8 x 270 GiB in binary units (as HGX B200's 1.4 TB is 8 x 180 GiB).
    assert chip.memory_bytes == 270 * 2**30
    assert round(8 * chip.memory_bytes / 2**40, 1) == 2.1


def test_blackwell_ultra_sparse_fp4_is_not_twice_dense() -> None:
    # The pitfall the notes warn of: NVIDIA prints FP4 18 PF sparse per HGX GPU (144/8) and 20 PF per NVL72 GPU
    # (1,440/72), against 13.5 and 15 dense: halving the sparse headline would understate dense FP4.
    b300, gb300 = aicalc.load_chip("b300"), aicalc.load_chip("gb300")
    assert _close(b300.sparse_tflops["fp4"], 144_000 / 8) and b300.dense_tflops["fp4"] > 144_000 / 8 / 2
    assert _close(gb300.sparse_tflops["fp4"], 1_440_000 / 72) and gb300.dense_tflops["fp4"] > 1_440_000 / 72 / 2


def test_gb300_per_gpu_from_the_nvl72_table() -> None:
    chip = aicalc.load_chip("gb300")
    assert _close(chip.dense_tflops["fp4"], 1_080_000 / 72)
    assert _close(chip.dense_tflops["fp4"], 15_000)  # the Blackwell Ultra blog's per-GPU figure
    assert _close(chip.dense_tflops["fp8"], 720_000 / 72 / 2)
    assert _close(chip.dense_tflops["bf16"], 360_000 / 72 / 2)
    assert _close(chip.memory_bandwidth_gbs, 576_000 / 72)
    assert chip.interconnect.domain == 72
    assert _close(chip.interconnect.bandwidth_gbs, 130_000 / 72, rel=0.01)  # 130 TB/s is 72 x 1.8 TB/s, rounded
    assert chip.interconnect.per_direction_bytes_per_s == 900e9


@pytest.mark.parametrize(("chip_id", "clock_ghz"), [("mi355x", 2.4), ("mi350x", 2.2)])
def test_cdna4_rates_from_cus_and_clock(chip_id: str, clock_ghz: float) -> None:
    chip = aicalc.load_chip(chip_id)
    fp8 = 256 * 8192 * clock_ghz * 1e9 / 1e12  # CUs x FP8 FLOPs per CU per clock x clock, in TFLOP/s
    assert _close(chip.dense_tflops["fp8"], fp8, rel=1e-4)  # AMD prints one decimal
    assert _close(chip.dense_tflops["bf16"], fp8 / 2, rel=1e-4)
    assert _close(chip.dense_tflops["fp4"], fp8 * 2, rel=1e-4)
    assert _close(chip.dense_tflops["fp6"], fp8 * 2, rel=1e-4)  # MXFP6 at the MXFP4 rate on CDNA 4
    assert _close(chip.interconnect.bandwidth_gbs, 7 * 153.6)
    assert chip.memory_bytes == 288 * 2**30


def test_mi355x_matches_amds_rounded_headline() -> None:
    chip = aicalc.load_chip("mi355x")
    assert round(chip.dense_tflops["fp8"] / 1000) == 5 and round(chip.dense_tflops["fp4"] / 1000) == 10
    assert round(chip.dense_tflops["bf16"] / 1000, 1) == 2.5


def test_tpu7x_from_googles_table() -> None:
    chip = aicalc.load_chip("tpu7x")
    assert _close(chip.dense_tflops["fp8"], 4614)
    assert _close(chip.dense_tflops["bf16"], 4614 / 2)  # FP8 at twice BF16, unlike v5p
    assert chip.memory_bytes == 192 * 2**30
    assert chip.interconnect.domain == 9216
    assert round(chip.interconnect.domain * chip.dense_tflops["fp8"] / 1e6, 1) == 42.5  # FP8 EFLOPS per pod


def test_dgx_b300_is_eight_b300() -> None:
    chip, count = load_node_or_chip("dgx-b300")
    assert (chip.id, count) == ("b300", 8)
    assert _close(count * chip.dense_tflops["fp8"], 72_000 / 2)  # '72 PF FP8 training' is sparse


@pytest.mark.parametrize(("chip_id", "cls", "engine"), [
    ("b300", "datacenter-gpu", None), ("gb300", "datacenter-gpu", None),
    ("mi355x", "amd-gpu", None), ("mi350x", "amd-gpu", None), ("tpu7x", "tpu", "vllm"),
])
def test_new_chips_take_their_vendors_class_and_engine(chip_id: str, cls: str, engine: str | None) -> None:
    chip = aicalc.load_chip(chip_id)
    assert chip_class(chip) == cls
    assert chip.default_engine == engine
