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
- NVIDIA H800 SXM5: the H100 SXM's GH100 with NVLink cut to 400 GB/s (bidirectional) and FP64 to 1 TFLOPS; DeepSeek's
  FlashMLA: "peak memory bandwidth of 3.35 TB/s and peak FLOPs of 990 TFlops"; DeepSeek-V3 report: "NVLink offers a
  bandwidth of 160 GB/s, roughly 3.2 times that of IB (50 GB/s)", 8 GPUs per node, one 400 Gb/s CX7 per GPU (DeepEP).
- NVIDIA H20: 96 GB HBM3, 4.0 TB/s, FP16/BF16 148 TFLOPS dense, FP8/INT8 296, NVLink 900 GB/s, 400 W.
- NVIDIA RTX PRO 6000 Blackwell: Server Edition datasheet 96 GB, 1,597 GB/s, 120 TFLOPS FP32, up to 600 W, headline
  "1 PFLOPS" FP16/BF16 and 4 PFLOPS FP4; Workstation Edition (RTX PRO Blackwell whitepaper) 1,792 GB/s, 125 TFLOPS FP32,
  503.8 TFLOPS dense BF16 with FP32 accumulate.
- NVIDIA GeForce RTX 5090: 680 tensor cores at 2,407 MHz, 512 8-bit ops per tensor core and clock (838 TOPS dense), 21,760
  FP32 lanes, 512-bit GDDR7 at 28 Gbps, "3,352 AI TOPS" (FP4 with sparsity); whitepaper BF16 with FP32 accumulate 209.5
  dense (419 sparse).
- NVIDIA A10G (AWS datasheet): FP16/BF16 tensor 70 TFLOPS dense (140 sparse) against the A10's 125; 24 GB, 600 GB/s; a BF16
  8192^3 matmul measured at 66.6 TFLOP/s.
"""

from __future__ import annotations

import math

import pytest

import aicalc
from aicalc.api.catalog import load_node_or_chip
from aicalc.catalog import profiles
from aicalc.catalog.profiles import chip_class
from aicalc.core.exponentials import SFU_SHARE, exp_ratio, flop_per_exp


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


def test_h800_is_an_h100_sxm_with_its_link_and_fp64_cut() -> None:
    h800, h100 = aicalc.load_chip("h800"), aicalc.load_chip("h100-sxm")
    for dtype in ("fp32", "tf32", "bf16", "fp16", "fp8", "int8"):
        assert h800.dense_tflops[dtype] == h100.dense_tflops[dtype], dtype  # the same GH100 SXM5 compute
    assert (h800.memory_bytes, h800.memory_bandwidth_gbs) == (h100.memory_bytes, h100.memory_bandwidth_gbs)
    assert round(h800.dense_tflops["bf16"], -1) == 990 and h800.memory_bandwidth_gbs == 3350  # FlashMLA's figures
    # NVLink 400 GB/s both ways together: 200 GB/s each way, less than half of the H100's 450
    assert h800.interconnect.per_direction_bytes_per_s == 400e9 / 2
    assert h800.interconnect.per_direction_bytes_per_s < h100.interconnect.per_direction_bytes_per_s / 2
    assert 160e9 < h800.interconnect.per_direction_bytes_per_s  # DeepSeek's measured 160 GB/s sits under the peak
    assert h800.scale_out_gbs == 400 / 8  # one 400 Gb/s ConnectX-7 per GPU: DeepSeek's "IB (50 GB/s)"
    assert h800.interconnect.domain == 8
    assert h800.dense_tflops["fp64"] == 1 < h100.dense_tflops["fp64"] / 30
    assert h800.exp_per_s == h100.exp_per_s  # Hopper's special-function units on the same FP32 lanes


def test_h20_from_its_datasheet() -> None:
    chip, h100 = aicalc.load_chip("h20"), aicalc.load_chip("h100-sxm")
    assert chip.dense_tflops["bf16"] == chip.dense_tflops["fp16"] == 148  # dense, not half of a sparse headline
    assert chip.dense_tflops["fp8"] == chip.dense_tflops["int8"] == 2 * 148
    assert 0.14 < chip.dense_tflops["bf16"] / h100.dense_tflops["bf16"] < 0.16  # about 15 % of the H100's compute
    assert chip.memory_bytes == 96 * 2**30 and chip.memory_bandwidth_gbs == 4000  # more, faster memory than the H100
    assert chip.interconnect.bandwidth_gbs == h100.interconnect.bandwidth_gbs == 900  # the full NVLink 4
    assert chip.tdp_w == 400
    assert chip.generation == "Hopper" and chip.exp_per_s == 44e12 / 16  # Hopper's 1/16 share of its own FP32 rate


def test_rtx_pro_6000_server_edition_is_not_the_workstation_card() -> None:
    chip = aicalc.load_chip("rtx-pro-6000")
    assert chip.memory_bytes == 96 * 2**30 and chip.memory_bandwidth_gbs == 1597  # not the Workstation's 1,792
    assert chip.dense_tflops["fp32"] == 120 and chip.tdp_w == 600
    # one GB202 with 188 SMs in both editions: tensor rates scale with the FP32 (clock) figure, so the Server card's
    # dense BF16 is the Workstation whitepaper's 503.8 x 120 / 125 (NVIDIA rounds 125.95 to 125: within 1 %)
    assert _close(chip.dense_tflops["bf16"], 503.8 * 120 / 125, rel=0.01)
    # NVIDIA's "1 PFLOPS" FP16/BF16 and "4 PFLOPS" FP4 are the sparse headlines: twice the dense rates, rounded
    assert _close(2 * chip.dense_tflops["bf16"], 1000, rel=0.05) and _close(2 * chip.dense_tflops["fp4"], 4000, rel=0.05)
    # the professional part accumulates FP16/BF16 in FP32 at the full tensor rate: more than twice the RTX 5090's
    assert chip.dense_tflops["bf16"] > 2 * aicalc.load_chip("rtx-5090").dense_tflops["bf16"]
    assert chip.interconnect.domain is None and chip.interconnect.per_direction_bytes_per_s == 64e9  # PCIe Gen5 x16


def test_rtx_5090_from_tensor_cores_and_clock() -> None:
    chip = aicalc.load_chip("rtx-5090")
    clock = 2.407e9
    int8 = 680 * clock * 512 / 1e12  # 680 tensor cores x 512 8-bit ops per clock: 838 TOPS dense
    assert _close(chip.dense_tflops["int8"], int8, rel=1e-3)
    assert _close(chip.dense_tflops["bf16"], int8 / 4, rel=1e-3)  # 16-bit at half, FP32 accumulate at half again
    assert chip.dense_tflops["fp16"] == chip.dense_tflops["bf16"] == 209.5  # the whitepaper's FP32-accumulate row
    assert _close(chip.dense_tflops["fp4"], 2 * int8, rel=1e-3)
    assert chip.sparse_tflops["fp4"] == 3352  # NVIDIA's "3,352 AI TOPS" is FP4 with sparsity
    assert _close(chip.dense_tflops["fp32"], 21_760 * 2 * clock / 1e12, rel=1e-3)
    assert chip.memory_bandwidth_gbs == 512 / 8 * 28  # 512-bit GDDR7 at 28 Gbps
    assert chip.usable_memory_bytes < chip.memory_bytes == 32 * 2**30


def test_a10g_is_not_an_a10() -> None:
    chip = aicalc.load_chip("a10g")
    assert chip.dense_tflops["bf16"] == chip.dense_tflops["fp16"] == 70  # the A10's 125 does not apply
    assert chip.sparse_tflops["bf16"] == 2 * 70
    assert chip.memory_bytes == 24 * 2**30 and chip.memory_bandwidth_gbs == 600
    assert 0.9 < 66.6 / chip.dense_tflops["bf16"] < 1  # the measured BF16 matmul: under the peak, near it


@pytest.mark.parametrize("chip_id", ["rtx-pro-6000", "rtx-5090", "a10g"])
def test_graphics_die_generations_take_no_datacenter_die_data(chip_id: str) -> None:
    # GB202 (sm_120) and GA102 (sm_86) are not the B200's sm_100 or the A100's sm_80: their generation names select
    # neither the exponential share keyed on those nor the Megatron recipe factors of GB200/B200
    chip = aicalc.load_chip(chip_id)
    assert chip.generation not in SFU_SHARE and chip.exp_per_s == 0.0
    assert chip.generation not in profiles.load("framework", "megatron").options["by_generation"]
    # and no exponential bound is lost: at even Hopper's 1/16 share of their FP32 rate, a head_dim 128 forward's
    # exponentials take a fraction of its 16-bit matmuls' time
    r = exp_ratio(chip.peak_flop_per_s("bf16"), chip.peak_flop_per_s("fp32") / 16, flop_per_exp(128, 128))
    assert r < 0.5


@pytest.mark.parametrize(("chip_id", "cls"), [
    ("h800", "datacenter-gpu"), ("h20", "datacenter-gpu"), ("rtx-pro-6000", "datacenter-gpu"),
    ("a10g", "datacenter-gpu"), ("rtx-5090", "consumer-gpu"),
])
def test_added_nvidia_chips_take_their_class(chip_id: str, cls: str) -> None:
    chip = aicalc.load_chip(chip_id)
    assert chip_class(chip) == cls
    assert chip.default_engine is None
