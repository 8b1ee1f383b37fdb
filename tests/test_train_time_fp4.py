"""train-time --precision fp4 (NVFP4 linear layers on Blackwell): the linear GEMMs at the chip's FP4 rate times
the class's fp4_flop_factor, attention in 16-bit; refused where a chip has no FP4 math."""

from __future__ import annotations

import pytest

import aicalc
from aicalc.catalog import profiles
from aicalc.errors import ParameterError

LAYOUT = dict(seq=8192, global_batch=256, micro_batch=1, tp=1, pp=4, dp=16, interleave=5, recompute="selective",
              framework="megatron-26.04")


def test_fp4_is_faster_than_fp8_by_less_than_its_peak_ratio():
    f = profiles.load("class", "datacenter-gpu").factors["fp4_flop_factor"]
    fp8 = float(aicalc.train_time("llama-3.1-70b", "gb300", 1e12, precision="fp8", **LAYOUT)["tokens_per_s_per_chip"][0])
    fp4 = float(aicalc.train_time("llama-3.1-70b", "gb300", 1e12, precision="fp4", **LAYOUT)["tokens_per_s_per_chip"][0])
    # GB300: 15 PFLOP/s of FP4 against 5 of FP8 (presets/chips/gb300.yaml), the GEMMs at fp4_flop_factor of FP8's
    # share; attention, the LM head, communication and the optimizer do not speed up
    assert 1.0 < fp4 / fp8 < 3.0 * f


def test_fp4_needs_fp4_math():
    with pytest.raises(ParameterError, match="fp4"):
        aicalc.train_time("llama-3.1-70b", "h100-sxm", 1e12, precision="fp4", **LAYOUT)


def test_fp4_on_the_command_line(cli):
    ok = cli("train-time", "llama-3.1-70b", "--chip", "gb300", "--chips", "64", "--tp", "1", "--pp", "4",
             "--interleave", "5", "--seq", "8192", "--global-batch", "256", "--precision", "fp4", "--json")
    assert ok.code in (0, 1), ok.err
    bad = cli("train-time", "llama-3.1-70b", "--chip", "h100-sxm", "--precision", "fp4")
    assert bad.code == 2 and bad.err.count("\n") == 1
