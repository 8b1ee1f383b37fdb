"""Models as they are released: the official checkpoint's precision per tensor group is the default weight format.

Expected figures come from the releases themselves: the gpt-oss model card (arXiv:2508.10925, Table 1: checkpoint
12.8 GiB for gpt-oss-20b, 60.8 GiB for gpt-oss-120b, MXFP4 experts and bf16 elsewhere) and DeepSeek-V3's FP8
release (671B parameters at one byte each plus bf16 embeddings: about 0.68 TB without the MTP module).
"""

import json

import pytest

import aicalc
from aicalc.api.catalog import load_model, weight_format
from aicalc.api.roofline import roofline

from conftest import fixture_config


@pytest.mark.parametrize("model, gib", [("gpt-oss-20b", 12.8), ("gpt-oss-120b", 60.8)])
def test_gpt_oss_weights_are_the_released_mxfp4_checkpoint(model, gib):
    r = roofline(model, "h100-sxm", 1, 128, 128)
    assert r.meta["setup"].dtype_label == "mxfp4-experts"
    assert r.weights_bytes_per_device[0] / 2**30 == pytest.approx(gib, rel=0.01)
    spec = load_model(model)
    assert spec.release.checkpoint_bytes / 2**30 == pytest.approx(gib, rel=0.005)


def test_deepseek_v3_defaults_to_its_fp8_release():
    """671,026,404,352 parameters; the 1.85B embedding and 0.93B LM-head parameters stay bf16 (2 B), the rest 1 B."""
    r = roofline("deepseek-v3", "h200", 1, 128, 128, tp=1)  # one device holds it all (TP replicates MLA's down-proj)
    expected = 671_026_404_352 + 2 * 129280 * 7168  # one byte each, one more for the two bf16 vocabulary tables
    assert r.meta["setup"].dtype_label == "fp8"
    assert r.weights_bytes_per_device[0] == pytest.approx(expected, rel=0.002)


def test_a_bf16_release_stays_bf16_and_dtype_overrides_the_release():
    assert roofline("llama-3.1-8b", "h100-sxm").meta["setup"].dtype_label == "bf16"
    bf16 = roofline("gpt-oss-20b", "h100-sxm", dtype="bf16")
    assert bf16.meta["setup"].dtype_label == "bf16"
    assert bf16.weights_bytes_per_device[0] == pytest.approx(2 * 20_914_757_184, rel=0.002)  # keras-hub's count


def test_experts_format_is_accepted_as_a_dtype_and_refused_for_dense_models():
    spec = load_model("mixtral-8x7b")
    wf = weight_format(spec, "mxfp4-experts")
    assert (wf.name, wf.experts, wf.label) == ("bf16", "mxfp4", "mxfp4-experts")
    assert weight_format(spec, "fp8+mxfp4-experts").label == "fp8+mxfp4-experts"
    with pytest.raises(aicalc.ParameterError, match="no experts"):
        weight_format(load_model("llama-3.1-8b"), "mxfp4-experts")


def test_gpt_oss_20b_fits_one_l4_with_the_release_weights(cli):
    """Made for 16 GB cards; an L4 has 24 GB. Before, bf16 weights (41.8 GB) did not fit."""
    r = cli("kv-cache", "gpt-oss-20b", "--chip", "l4", "--context", "8k", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["inputs"]["dtype"] == "mxfp4-experts"
    assert doc["rows"][0]["max_batch"] >= 1


def test_mxfp4_experts_run_against_mxfp8_activations_on_blackwell_and_are_dequantized_on_hopper():
    # TensorRT-LLM's gpt-oss guide: B200/GB200 run MXFP4 expert weights against MXFP8 activations, H200 against
    # BF16 (Triton); the fp8 rate is the chip's, not fp4's
    b200 = roofline("gpt-oss-120b", "b200", 1, 128, 128).meta["setup"]
    h100 = roofline("gpt-oss-120b", "h100-sxm", 1, 128, 128).meta["setup"]
    assert b200.formats.expert_compute == "fp8" and not b200.formats.expert_quantized
    assert dict(b200.roofs.peaks)["fp8"] == b200.chip.peak_flop_per_s("fp8") < b200.chip.peak_flop_per_s("fp4")
    assert h100.formats.expert_compute is None and h100.formats.expert_quantized
    assert any("mxfp4" in w for w in h100.warnings)


# checkpoint_bytes: gpt-oss's model card; Kimi K2's and MiniMax-M2.7's released tensor lists (shapes x dtype widths,
# presets/models/kimi-k2.yaml and minimax-m2.7.yaml): FP8 linears with fp32 128x128 block scales, bf16 embeddings
@pytest.mark.parametrize("model, label", [("gpt-oss-20b", "mxfp4-experts"), ("gpt-oss-120b", "mxfp4-experts"),
                                          ("kimi-k2", "fp8"), ("minimax-m2.7", "fp8")])
def test_presets_show_states_the_release_and_its_bytes_match_the_published_size(cli, model, label):
    r = cli("presets", "show", model, "--json")
    row = json.loads(r.out)["rows"][0]
    assert row["release_dtype"] == label
    assert row["release_weights_bytes"] == pytest.approx(row["release_checkpoint_bytes"], rel=0.01)


# a model read from its config.json alone (no safetensors headers): the format its quantization_config declares
def test_a_config_with_an_fp8_quantization_config_is_priced_as_its_fp8_release():
    """Kimi-K2-Instruct's file declares quant_method fp8 (block-scaled e4m3, as DeepSeek-V3's): 1,026,408,209,408
    parameters (transformers' count, tests/data/configs/SOURCES.md), one byte each but the 163,840 × 7,168
    embedding and LM head, which stay bf16."""
    cfg = fixture_config("kimi-k2-instruct")
    r = roofline(cfg, "h200", 1, 128, 128, tp=1)
    assert r.meta["setup"].dtype_label == "fp8"
    assert r.weights_bytes_per_device[0] == pytest.approx(1_026_408_209_408 + 2 * 163840 * 7168, rel=0.002)
    assert roofline(cfg, "h200", 1, 128, 128, tp=1, dtype="bf16").meta["setup"].dtype_label == "bf16"


def test_config_quantization_schemes_and_their_coverage():
    from aicalc.catalog.checkpoint import release_format

    assert release_format({"quantization_config": {"quant_method": "mxfp4"}}) == ("bf16", "mxfp4")  # gpt-oss
    # NVIDIA's GLM-4.7 NVFP4: ModelOpt over the MLPs and experts, the attention left bf16 by its ignore list
    assert release_format(fixture_config("glm-4.7-nvfp4")) == ("bf16", "fp4")
    assert release_format({"quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8",
                                                   "ignore": ["lm_head"]}}) == ("fp8", None)
    assert release_format({"quantization_config": {"quant_method": "awq", "bits": 4}}) == ("int4", None)
    assert release_format({"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}}) == \
        ("nf4", None)
    int4 = {"quant_method": "compressed-tensors", "ignore": ["lm_head", "re:.*self_attn.*"],
            "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int"}}}}
    assert release_format({"quantization_config": int4}) == ("bf16", "int4")  # Kimi K2 Thinking's INT4 experts
    assert release_format({"quantization_config": {"quant_method": "hqq"}}) is None  # not listed: bf16 as before
    assert release_format({"model_type": "llama"}) is None


def test_a_dense_config_with_an_experts_only_scheme_takes_it_for_every_linear():
    cfg = dict(fixture_config("qwen3-0.6b"), quantization_config={"quant_method": "mxfp4"})
    assert weight_format(load_model(cfg), None).label == "mxfp4"
    assert weight_format(load_model(fixture_config("qwen3-0.6b")), None).label == "bf16"
