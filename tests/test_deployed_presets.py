"""Presets of the models deployed in 2025-26: Kimi K2, MiniMax-M2.7, GLM-4.7-Flash, Qwen3-Coder-480B-A35B, Qwen3-32B and
Qwen3-14B.

Each preset's ``config`` is the official config.json (sources in the preset's notes). Exactness against transformers is
checked for every preset by tests/test_params.py and tests/test_kv_transformers.py; here the presets are held to what
the vendors and the released checkpoints state, figures published independently of aicalc: the model cards' headline
sizes, and the element counts and bytes of the released safetensors files (tensor lists in the presets' sources).
"""

import json

import pytest

from aicalc.catalog.hf_config import arch_from_config
from aicalc.core.kv_cache import kv_bytes_per_token

from conftest import BOOKKEEPING, DATA, model_preset, preset_params


@pytest.mark.parametrize("preset, fixture", [("kimi-k2", "kimi-k2-instruct"), ("minimax-m2.7", "minimax-m2.7"),
                                             ("glm-4.7-flash", "glm-4.7-flash")])
def test_preset_is_the_fixture_file_less_its_bookkeeping(preset, fixture):
    """The three presets were read from the same published files as the fixtures (tests/data/configs/SOURCES.md)."""
    real = json.loads((DATA / "configs" / fixture / "config.json").read_text())
    assert model_preset(preset)["config"] == {k: v for k, v in real.items() if k not in BOOKKEEPING}


# Model cards: Kimi K2 "1 trillion total parameters" (transformers' count is 2.6 % over: the card rounds to 1T);
# MiniMax-M2 "230 billion total parameters"; GLM-4.7-Flash "a 30B-A3B MoE model"; Qwen3-Coder "480B-parameter
# Mixture-of-Experts model with 35B active parameters"; Qwen3-32B "32.8B" (31.2B non-embedding); Qwen3-14B "14.8B"
# (13.2B non-embedding). The MTP modules of Kimi, MiniMax and GLM are not built by transformers and not counted.
@pytest.mark.parametrize("name, total, rel", [("kimi-k2", 1e12, 0.03), ("minimax-m2.7", 230e9, 0.01),
                                              ("glm-4.7-flash", 30e9, 0.01), ("qwen3-coder-480b-a35b", 480e9, 0.001),
                                              ("qwen3-32b", 32.8e9, 0.002), ("qwen3-14b", 14.8e9, 0.003)])
def test_published_totals(name, total, rel):
    assert preset_params(name).total == pytest.approx(total, rel=rel)


def test_published_active_and_non_embedding_counts():
    assert preset_params("qwen3-coder-480b-a35b").active == pytest.approx(35e9, rel=0.015)  # 35.47B: the card rounds down
    for name, non_embedding in (("qwen3-32b", 31.2e9), ("qwen3-14b", 13.2e9)):  # untied: embedding and head excluded
        n = preset_params(name)
        assert n.total - n.embedding - n.lm_head == pytest.approx(non_embedding, rel=0.002), name


def test_qwen3_14b_equals_its_checkpoint():
    """The released safetensors hold 14,768,307,200 elements, all bf16 (27.51 GiB): every tensor is a parameter."""
    assert preset_params("qwen3-14b").total == 14_768_307_200


@pytest.mark.parametrize("name, stored, extra", [
    # Kimi-K2-Instruct: fp32 block scales of the attention linears (5x56, 128x4, 56x64, 12x56, 96x12 in each of 61
    # layers), of the dense FFN (3 x 56x144), of the routed and shared experts (3 x 16x56 each, 60 layers x 385), then
    # 60 x 384 e_score_correction_bias and 61 x 56 rotary inv_freq
    ("kimi-k2", 1_026_470_731_056,
     61 * (5 * 56 + 128 * 4 + 56 * 64 + 12 * 56 + 96 * 12) + 3 * 56 * 144 + 60 * 385 * 3 * 16 * 56 + 60 * 384 + 61 * 56),
    # MiniMax-M2.7: block scales of the experts (3 x 12x24, 62 layers x 256) and of q, k, v, o (48x24, 8x24, 8x24,
    # 24x48), then 62 x 256 e_score_correction_bias
    ("minimax-m2.7", 228_703_644_928, 62 * 256 * 3 * 12 * 24 + 62 * (2 * 48 * 24 + 2 * 8 * 24) + 62 * 256),
])
def test_checkpoint_elements_are_the_parameters_plus_scales_and_buffers(name, stored, extra):
    """The released tensor lists count more elements than the model's parameters: what the FP8 release adds (one fp32
    scale per 128 x 128 block) and buffers transformers does not count as parameters. Worked out from the tensor
    shapes, independently of aicalc's formulas."""
    assert preset_params(name).total == stored - extra


def test_kimi_k2_caches_deepseek_v3s_latent():
    """61 layers x (512 latent + 64 rope) x 2 bytes = 70,272 B/token, the same as DeepSeek-V3 (MLA)."""
    assert kv_bytes_per_token(arch_from_config(model_preset("kimi-k2")["config"]), "bf16") == 61 * 576 * 2
