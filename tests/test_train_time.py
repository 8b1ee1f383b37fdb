"""train-time: TT-01 FLOP formulas, TT-17…TT-31 oracles fed the published TFLOP/s, and the CLI."""

from __future__ import annotations

import json

import pytest

from aicalc.catalog.arch import megatron_gpt as gpt
from aicalc.cli import main
from aicalc.core.forward import shape_of
from aicalc.core.train_time import flops_per_token, time_from_rate

S, V = 2048, 51200
DAY = 86400.0


def _megatron_full(L, h):
    """Megatron-LM 2021: 96·s·L·h²·(1 + s/(6h) + V/(16·L·h)) per sequence."""
    return 96 * L * h**2 * (1 + S / (6 * h) + V / (16 * L * h))


def _korthikanti_model(L, h):
    return 72 * L * h**2 * (1 + S / (6 * h) + V / (12 * h * L))


@pytest.mark.parametrize("L,h,a", [(96, 12288, 96), (105, 20480, 128), (24, 2304, 24)])
def test_tt01_formulas(L, h, a):
    s = shape_of(gpt(L, h, a))
    model, full = flops_per_token(s, S, "full")
    assert model == pytest.approx(_korthikanti_model(L, h), rel=2e-3)  # biases are the only difference
    assert full == pytest.approx(_megatron_full(L, h), rel=2e-3)
    m2, sel = flops_per_token(s, S, "selective")
    assert m2 == model and model < sel < full


TABLE2 = [  # id, params: (L, h, a), GPUs, TFLOP/s, published days
    ("TT-17", (96, 12288, 96), 384, 144, 90), ("TT-18", (96, 12288, 96), 768, 88, 74),
    ("TT-19", (96, 12288, 96), 1536, 44, 74), ("TT-20", (105, 20480, 128), 640, 138, 169),
    ("TT-21", (105, 20480, 128), 1120, 98, 137), ("TT-22", (105, 20480, 128), 2240, 48, 140),
    ("TT-23", (96, 12288, 96), 384, 153, 84), ("TT-24", (96, 12288, 96), 768, 149, 43),
    ("TT-25", (96, 12288, 96), 1536, 141, 23), ("TT-26", (105, 20480, 128), 560, 171, 156),
    ("TT-27", (105, 20480, 128), 1120, 167, 80), ("TT-28", (105, 20480, 128), 2240, 159, 42),
]


@pytest.mark.parametrize("case", TABLE2, ids=[c[0] for c in TABLE2])
def test_tt17_to_tt28_training_days(case):
    _id, arch, gpus, tflops, days = case
    _, hw = flops_per_token(shape_of(gpt(*arch)), S, "full")
    t = time_from_rate(300e9, hw, gpus, tflops * 1e12) / DAY
    # published days are rounded to whole days: ≤ 1 % or ≤ 0.5 day
    assert abs(t - days) <= max(0.01 * days, 0.5 + 1e-9) + 0.01 * days


@pytest.mark.parametrize("case", [("TT-29", 2240, 126, 60.1), ("TT-30", 2800, 121, 50.2), ("TT-31", 3360, 113, 44.4)])
def test_tt29_to_tt31_iteration_time(case):
    _id, gpus, tflops, sec = case
    _, hw = flops_per_token(shape_of(gpt(105, 20480, 128)), S, "full")
    t = time_from_rate(1920 * S, hw, gpus, tflops * 1e12)
    assert t == pytest.approx(sec, rel=0.01)


def _run(capsys, argv):
    code = main(argv)
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip().startswith("{") else out


def test_cli_given_mfu_matches_formula(capsys):
    code, d = _run(capsys, ["train-time", "llama-2-7b", "--chip", "a100-80gb", "--chips", "64", "--tokens", "2T",
                            "--seq", "4096", "--mfu", "40%", "--json"])
    assert code == 0
    r = d["rows"][0]
    for k in ("mfu", "model_flop_per_s_per_chip", "tokens_per_s", "total_time_s", "chip_hours"):
        assert k in r
    assert r["mfu"] == pytest.approx(0.4)
    assert r["tokens_per_s"] == pytest.approx(64 * 0.4 * 312e12 / r["model_flop_per_token"])
    assert r["chip_hours"] == pytest.approx(r["total_time_s"] * 64 / 3600)
    # 6N rule of thumb within a few percent of the exact count at s = 4096
    assert r["model_flop_per_token"] / (6 * 6.74e9) == pytest.approx(1.0, abs=0.15)


def test_cli_auto_mfu_and_sweep(capsys):
    code, d = _run(capsys, ["train-time", "llama-3.1-70b", "--chip", "h100-sxm", "--chips", "512", "--tp", "8",
                            "--pp", "1,2,4", "--global-batch", "512", "--json"])
    assert code == 0 and len(d["rows"]) == 3
    for r in d["rows"]:
        assert 0.15 < r["mfu"] < r["ideal_mfu"] <= 1.0
        assert r["dp"] * r["tp"] * r["pp"] == 512


def test_cli_bad_layout(capsys):
    assert main(["train-time", "llama-2-7b", "--chip", "a100-80gb", "--chips", "10", "--tp", "4"]) == 2
    assert main(["train-time", "llama-2-7b", "--chip", "a100-80gb", "--mfu", "1.5"]) == 2
    assert main(["train-time", "llama-2-7b", "--chip", "a100-80gb", "--recompute", "some"]) == 2
