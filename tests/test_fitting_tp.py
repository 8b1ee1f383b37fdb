"""``serve`` with ``chips`` and no ``tp``: the smallest tensor-parallel degree whose replicas hold the load."""

import pytest

import aicalc

# DeepSeek-R1's official release is FP8 (quantization_config fp8, e4m3, 128x128 blocks): 671e9 parameters, about a
# byte each (deepseek-ai/DeepSeek-R1 config.json; arXiv:2412.19437 §3.3)
R1_PARAMS = 671e9
H200_BYTES = 141e9  # NVIDIA H200 SXM datasheet, decimal GB


def test_deepseek_r1_on_eight_h200s_runs_tp8():
    """At TP 4 a device would hold a quarter of ~671 GB of FP8 weights, more than 90 % of an H200's 141 GB; at TP 8
    an eighth fits: the default is TP 8, one replica, FP8 weights (the release's)."""
    assert R1_PARAMS / 4 > 0.9 * H200_BYTES > R1_PARAMS / 8
    r = aicalc.serve("deepseek-r1", "h200", chips=8)
    assert int(r["tp"][0]) == 8 and int(r["replicas"][0]) == 1 and bool(r["fits"].all())
    assert float(r["weights_bytes_per_device"][0]) == pytest.approx(R1_PARAMS / 8, rel=0.05)


def test_the_chosen_tp_is_the_smallest_that_fits():
    """Every smaller divisor of the chips leaves the same load not fitting."""
    for model, chip, chips, conc in (("llama-3.1-70b", "h100-sxm", 8, 64), ("deepseek-r1", "mi355x", 8, 1),
                                     ("llama-3.1-8b", "l4", 4, 8)):
        r = aicalc.serve(model, chip, conc, chips=chips)
        tp = int(r["tp"][0])
        assert bool(r["fits"].all()) and chips % tp == 0
        for smaller in (d for d in range(1, tp) if chips % d == 0):
            assert not bool(aicalc.serve(model, chip, conc, chips=chips, tp=smaller)["fits"].all()), (model, smaller)


def test_a_given_tp_or_a_node_is_kept():
    assert int(aicalc.serve("llama-3.1-8b", "h100-sxm", chips=8, tp=4)["tp"][0]) == 4
    assert int(aicalc.serve("llama-3.1-8b", "dgx-h100")["tp"][0]) == 8  # a node: one TP group of its chips
    assert int(aicalc.serve("llama-3.1-8b", "h100-sxm", chips=8)["tp"][0]) == 1  # 16 GB fits one H100: 8 replicas
    # an SRAM-only chip's replica is a pipeline over the chips its bytes fill (chips_needed), not a TP group
    assert int(aicalc.serve("llama-3.1-8b", "groq-lpu", chips=640)["tp"][0]) == 1


def test_nothing_fits_takes_the_largest_and_says_no(capsys):
    from aicalc.cli import main

    r = aicalc.serve("deepseek-r1", "h100-sxm", chips=8)  # ~690 GB over 8 x 80 GB at 90 %: no TP holds it
    assert int(r["tp"][0]) == 8 and not bool(r["fits"].any())
    code = main(["serve", "deepseek-r1", "--chip", "h100-sxm", "--chips", "8"])
    out = capsys.readouterr()
    assert code != 0 and "TP 8: the largest" in out.out + out.err


def test_the_eight_gpu_nodes_users_rent_are_nodes():
    """8x H200 and AMD's 8-GPU platforms as nodes: a node is one TP group of its chips, its memory 8 chips' worth."""
    from aicalc.api.catalog import load_node_or_chip

    for node, chip in (("dgx-h200", "h200"), ("mi300x-platform", "mi300x"), ("mi325x-platform", "mi325x"),
                       ("mi355x-platform", "mi355x")):
        c, n = load_node_or_chip(node)
        assert (c.id, n) == (chip, 8)
        assert int(aicalc.serve("llama-3.1-8b", node)["tp"][0]) == 8
