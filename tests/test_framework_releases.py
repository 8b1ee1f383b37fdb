"""Framework releases and what their recipes do per chip generation (issue 21): ``--framework megatron`` is the
latest Megatron-Bridge containers (26.06+), whose Blackwell MXFP8 MoE recipes capture the whole iteration in one
CUDA graph; ``megatron-26.04`` the earlier ones. Checked against Megatron-Bridge's published rows that no factor
was fitted on (held out in validation/cases/moe-training.yaml)."""

from __future__ import annotations

import pytest
from test_profiles_hostile import refused, write
from test_robustness import run

import aicalc
from aicalc.catalog import profiles

QWEN3_30B = dict(tokens=1e12, seq=4096, global_batch=512, micro_batch=4, tp=1, pp=1, ep=8, precision="fp8")


def _tok_s(chip, framework, **kw):
    args = {**QWEN3_30B, **kw}
    args.setdefault("dp", 8)
    r = aicalc.train_time("qwen3-30b-a3b", chip=chip, framework=framework, **args)
    return float(r["tokens_per_s_per_chip"][0])


def test_megatron_is_the_latest_release_of_its_family():
    latest, earlier = profiles.load("framework", "megatron"), profiles.load("framework", "megatron-26.04")
    assert profiles.family(latest) == profiles.family(earlier) == "megatron"
    assert latest.options["release"]["date"] > earlier.options["release"]["date"]
    assert latest.factors == earlier.factors  # the same factors; what differs is per generation
    assert set(latest.options["by_generation"]) == {"Blackwell", "Blackwell Ultra"}
    assert earlier.options["by_generation"] == {}


def test_held_out_blackwell_row_of_the_latest_container():
    """MO-38: Megatron-Bridge 26.08, Qwen3-30B-A3B on 8 GB200s, EP8, MXFP8: 39,936 tokens/s per GPU (held out)."""
    assert _tok_s("gb200", "megatron") == pytest.approx(39936, rel=0.10)


def test_the_generation_factor_applies_to_blackwell_only():
    # H100: the same recipes' partial CUDA graphs in both releases (MO-08 26.04.01 8,960 and MO-23 26.06 8,826
    # tokens/s per GPU on 16 H100s: the containers agree within 2 %)
    h100 = dict(dp=16, ep=16, micro_batch=1, global_batch=1024)
    assert _tok_s("h100-sxm", "megatron", **h100) == _tok_s("h100-sxm", "megatron-26.04", **h100)
    # GB200: 26.04.01 ran MO-22's layout at 26,112 tokens/s per GPU (the archive's 26.04.01 table; no case, no
    # factor fitted on it), 26.06 at 40,706: the earlier release's profile lands within 25 % of its own row (-22 %)
    assert _tok_s("gb200", "megatron-26.04") == pytest.approx(26112, rel=0.25)
    assert _tok_s("gb200", "megatron") > 1.5 * _tok_s("gb200", "megatron-26.04")
    # dense models have no grouped GEMMs: the releases agree
    dense = dict(model="llama-3.1-8b", chip="gb200", tokens=1e12, seq=4096, global_batch=512, micro_batch=2, tp=1,
                 pp=1, dp=8)
    assert float(aicalc.train_time(framework="megatron", **dense)["mfu"][0]) == \
        float(aicalc.train_time(framework="megatron-26.04", **dense)["mfu"][0])


def test_the_table_names_the_release_and_the_generation_factor():
    r = run("train-time", "qwen3-30b-a3b", "--chip", "gb200", "--chips", "8", "--ep", "8", "--seq", "4096",
            "--global-batch", "512", "--micro-batch", "4", "--precision", "fp8")
    assert r.code == 0, r
    assert "framework megatron (26.06, 2026-06); on Blackwell: grouped_gemm_half_dim 450" in r.out
    assert "megatron-26.04" in r.out


@pytest.mark.parametrize("body,key", [
    ("factors: {}\nby_generation: [1]", "by_generation"),
    ("factors: {}\nby_generation: {Blackwell: 5}", "by_generation.Blackwell"),
    ("factors: {}\nby_generation: {Blackwell: {factors: {bandwidth: {value: 5, source: x}}}}", "bandwidth"),
    ("factors: {}\nby_generation: {Blackwell: {factor: {}}}", "factor"),
    ("factors: {}\nrelease: {version: '1', date: 'June', source: x}", "release"),
    ("factors: {}\nfamily: [megatron]", "family"),
])
def test_framework_profile_of_the_wrong_shape(tmp_path, body, key):
    write(tmp_path, "framework", "f", body)
    r = run("--presets-dir", tmp_path, "train-time", "llama-3.1-8b", "--framework", "f", "--chips", "8")
    refused(r, "f.yaml", key)


def test_by_generation_is_a_framework_option_only(tmp_path):
    write(tmp_path, "engine", "x", "factors: {}\nby_generation: {Hopper: {factors: {}}}")
    refused(run("--presets-dir", tmp_path, "serve", "llama-3.1-8b", "--engine", "x", "--concurrency", "max"),
            "x.yaml", "by_generation")
