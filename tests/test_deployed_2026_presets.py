"""Presets of the hybrid models deployed in 2026 whose architecture aicalc reads: NVIDIA Nemotron 3 Super 120B-A12B (its
NVFP4 release; ``nemotron_h`` with LatentMoE), Qwen3.5 35B-A3B, 4B and 0.8B-Base and Qwen3.6 27B (``qwen3_5`` /
``qwen3_5_moe`` image-text wrappers of Gated DeltaNet hybrids).

Exactness against transformers is checked for every preset by tests/test_params.py and tests/test_kv_transformers.py
(records of validation/record_params.py and record_kv.py). Here each preset is held to figures worked out by hand from
its own config numbers, module by module as the released checkpoints' tensor tables list them, independently of
aicalc's formulas; to the element counts of the released safetensors files (model-information reports' tables, sources
in each preset's notes), which also hold the vision tower and the MTP layer that transformers does not build into the
causal LM; to the vendors' headline sizes; and, for Nemotron 3 Super, to the bytes of its mixed-precision NVFP4 release
worked out from the release's per-module precision map.
"""

import json

import pytest

from aicalc.api.catalog import load_model, resident_weights, weight_format
from aicalc.catalog.hf_config import arch_from_config
from aicalc.core import linear_attention, mamba
from aicalc.core.kv_cache import kv_bytes_per_token

from conftest import BOOKKEEPING, DATA, check_preset_answers, model_preset, preset_config, preset_params

NEW = ("nemotron-3-super-120b-a12b", "qwen3.5-35b-a3b", "qwen3.5-4b", "qwen3.5-0.8b-base", "qwen3.6-27b")
QWEN = NEW[1:]


@pytest.mark.parametrize("preset, fixture", [("nemotron-3-super-120b-a12b", "nemotron-3-super-120b-a12b-nvfp4"),
                                             ("qwen3.5-35b-a3b", "qwen3.5-35b-a3b"), ("qwen3.5-4b", "qwen3.5-4b")])
def test_preset_is_the_fixture_file_less_its_bookkeeping(preset, fixture):
    """Three presets were read from the same published copies as the fixtures (tests/data/configs/SOURCES.md)."""
    real = json.loads((DATA / "configs" / fixture / "config.json").read_text())
    assert preset_config(preset) == {k: v for k, v in real.items() if k not in BOOKKEEPING}


# --- Nemotron 3 Super 120B-A12B ------------------------------------------------------------------------------------

SUPER = "nemotron-3-super-120b-a12b"
SUPER_PATTERN = "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME"


def _super_modules(c):
    """Nemotron 3 Super's modules from its config numbers, as the checkpoint names them (each block one RMS norm of H
    and ONE mixer; transformers' NemotronH modules):

    - Mamba-2 mixer: in_proj H x (2I + 2GN + nh) (z, x, B, C, dt; no bias), conv1d of the I + 2GN channels (kernel
      K_c, with a bias: use_conv_bias), dt_bias, A_log, D (nh each), the gated RMSNorm (I), out_proj I x H;
    - LatentMoE mixer: router E x H, fc1_latent_proj H x l and fc2_latent_proj l x H, E experts of up l x F and down
      F x l (squared ReLU, no gate), one shared expert of up H x F_s and down F_s x H;
    - attention mixer: q H x A·d, k and v H x K·d, o A·d x H, no biases, no QK-norm.
    """
    H, V = c["hidden_size"], c["vocab_size"]
    nh, P, N, G, Kc = c["mamba_num_heads"], c["mamba_head_dim"], c["ssm_state_size"], c["n_groups"], c["conv_kernel"]
    I = nh * P  # noqa: E741 - the Mamba inner width, as the papers write it
    conv = I + 2 * G * N
    E, latent, F, Fs = c["n_routed_experts"], c["moe_latent_size"], c["moe_intermediate_size"], \
        c["moe_shared_expert_intermediate_size"]
    A, K, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    return {
        "in_proj": H * (2 * I + 2 * G * N + nh), "conv1d": conv * Kc + conv, "ssm": 3 * nh, "gated_norm": I,
        "out_proj": I * H,
        "router": E * H, "latent": 2 * H * latent, "experts": E * 2 * latent * F, "shared_up": H * Fs,
        "shared_down": Fs * H,
        "q": H * A * d, "kv": 2 * H * K * d, "o": A * d * H,
        "norm": H, "embedding": V * H,
    }


def test_super_counts_by_hand():
    c = preset_config(SUPER)
    m = _super_modules(c)
    assert c["hybrid_override_pattern"] == SUPER_PATTERN and c["num_hidden_layers"] == len(SUPER_PATTERN)
    n_m, n_e, n_a = (SUPER_PATTERN.count(k) for k in "ME*")
    assert (n_m, n_e, n_a, SUPER_PATTERN.count("-")) == (40, 40, 8, 0)
    mamba_block = m["in_proj"] + m["conv1d"] + m["ssm"] + m["gated_norm"] + m["out_proj"] + m["norm"]
    moe_common = m["router"] + m["latent"] + m["shared_up"] + m["shared_down"] + m["norm"]
    attention_block = m["q"] + m["kv"] + m["o"] + m["norm"]
    outside = m["norm"] + 2 * m["embedding"]  # final norm; embedding and the untied head
    total = n_m * mamba_block + n_e * (moe_common + m["experts"]) + n_a * attention_block + outside
    k, E = c["num_experts_per_tok"], c["n_routed_experts"]
    active = n_m * mamba_block + n_e * (moe_common + m["experts"] * k // E) + n_a * attention_block + outside
    n = preset_params(SUPER)
    assert (n.total, n.active) == (total, active) == (120_668_687_360, 12_770_216_960)
    # the same with every number written out: in_proj 4096 x (2·8192 + 2·8·128 + 128), conv 10240 x 4 + 10240 bias
    assert mamba_block == 4096 * 18560 + 10240 * 5 + 3 * 128 + 8192 + 8192 * 4096 + 4096
    assert m["experts"] == 512 * 2 * 1024 * 2688 and m["latent"] == 2 * 4096 * 1024


def test_super_published_sizes():
    """NVIDIA: "120 billion (active 12 billion)" (the tech report's abstract, the model cards' "120B (12B active)").
    The active figure leaves out the embedding and the untied head (11.70B); with them it is 12.77B. The MTP module
    (mtp_hybrid_override_pattern "*E") is not built by transformers and is not in the count."""
    n = preset_params(SUPER)
    assert n.total == pytest.approx(120e9, rel=0.006)
    assert n.active - n.embedding - n.lm_head == pytest.approx(12e9, rel=0.03)


def test_super_cache_and_state_by_hand():
    """Only the 8 attention blocks cache K/V (2 KV heads of 128, K and V, 2 bytes); each of the 40 Mamba blocks keeps
    a conv state of its I + 2GN channels x K_c taps (bf16) and an SSM state of nh x P x N in float32
    (mamba_ssm_cache_dtype), transformers' cache layout."""
    c = preset_config(SUPER)
    arch = arch_from_config(c)
    assert kv_bytes_per_token(arch, "bf16") == 8 * 2 * 128 * 2 * 2 == 8192
    assert c["mamba_ssm_cache_dtype"] == "float32"
    per_layer = (8192 + 2 * 8 * 128) * 4 * 2 + 128 * 64 * 128 * 4
    assert mamba.state_bytes_per_sequence(arch) == 40 * per_layer == 171_048_960


# The NVFP4 release's per-module precision (its quantization_config, quant_algo MIXED_PRECISION, as a C++ test header
# rebuilds it from per-class layer lists: stored-copy id 70608027248; preset notes). Layers whose module of that name
# is per-tensor FP8; every routed expert is NVFP4 and so is layer 1's shared down_proj; any other module is BF16.
SUPER_FP8 = {
    "in_proj": [0, 2, 4, 6, 9, 11, 13, 15, 18, 20, 27, 29, 31, 40, 49, 51, 53, 55, 57, 60, 62, 66, 68, 71, 73, 82, 84,
                86],
    "out_proj": [0, 2, 4, 9, 11, 13, 18, 38, 40, 42, 44, 49, 51, 53, 55, 57, 60, 62, 64, 66, 68, 71, 73, 75, 77, 80,
                 82, 84, 86],
    "shared_up": [1, 3, 5, 8, 10, 12, 14, 17, 19, 21, 23, 26, 28, 30, 32, 34, 37, 39, 43, 45, 48, 50, 52, 54, 56, 59,
                  61, 63, 65, 67, 70, 72, 74, 76, 79, 81, 83, 85, 87],
    "shared_down": [3, 5, 10, 12, 14, 17, 19, 21, 23, 26, 28, 30, 32, 34, 37, 39, 41, 43, 45, 48, 50, 52, 54, 56, 59,
                    61, 63, 65, 67, 70, 72, 74, 79, 81, 83, 85, 87],
    "fc1_latent": [1, 3, 5], "fc2_latent": [3], "o": [69, 78],
}
NVFP4 = 4.5 / 8  # bytes per weight: E2M1 values and an E4M3 scale per 16 (the fp32 per-tensor scale is negligible)


def _super_release_bytes_by_hand(c):
    """Bytes of the NVFP4 release's weights from the per-module map: NVFP4 experts, FP8 (1 byte) and BF16 (2 bytes)
    block linears as listed; the routers, Mamba conv/dt/A/D/gated-norm weights, block norms and the embedding and head
    taken at 2 bytes (the map quantizes none of them; the checkpoint's exact storage of the routers and A_log is not
    in the sources, 0.2 % of the total either way)."""
    m = _super_modules(c)
    blocks = list(SUPER_PATTERN)
    layers = {k: [i for i, b in enumerate(blocks) if b == k] for k in "ME*"}
    assert all(i in layers["M"] for i in SUPER_FP8["in_proj"] + SUPER_FP8["out_proj"])
    assert all(i in layers["E"] for key in ("shared_up", "shared_down", "fc1_latent", "fc2_latent")
               for i in SUPER_FP8[key])
    assert all(i in layers["*"] for i in SUPER_FP8["o"])
    size = {"in_proj": m["in_proj"], "out_proj": m["out_proj"], "shared_up": m["shared_up"],
            "shared_down": m["shared_down"], "fc1_latent": m["latent"] // 2, "fc2_latent": m["latent"] // 2,
            "o": m["o"]}
    count = {"in_proj": len(layers["M"]), "out_proj": len(layers["M"]), "shared_up": len(layers["E"]),
             "shared_down": len(layers["E"]), "fc1_latent": len(layers["E"]), "fc2_latent": len(layers["E"]),
             "o": len(layers["*"])}
    fp8 = sum(len(SUPER_FP8[k]) * size[k] for k in size)
    nvfp4_shared = m["shared_down"]  # layer 1's shared down_proj
    bf16 = sum(count[k] * size[k] for k in size) - fp8 - nvfp4_shared
    bf16 += len(layers["*"]) * (m["q"] + m["kv"])
    rest = (len(layers["M"]) * (m["conv1d"] + m["ssm"] + m["gated_norm"]) + len(layers["E"]) * m["router"]
            + len(blocks) * m["norm"] + m["norm"] + 2 * m["embedding"])
    experts = len(layers["E"]) * m["experts"]
    return {"fp8": fp8, "bf16": bf16, "total": (experts + nvfp4_shared) * NVFP4 + fp8 + 2 * (bf16 + rest)}


def test_super_release_is_nvfp4_experts_and_fp8_block_linears():
    """The release block names one format for the block linears; the release's map has 71 % of those parameters in
    FP8 and the rest BF16. fp8 sizes the checkpoint 2.7 % under the map's bytes, bf16 would be 6.5 % over: the preset
    says fp8, and its resident weights are within 3 % of the release's."""
    c = preset_config(SUPER)
    spec = load_model(SUPER)
    assert weight_format(spec, None).label == "fp8+fp4-experts"
    by_hand = _super_release_bytes_by_hand(c)
    assert by_hand["fp8"] / (by_hand["fp8"] + by_hand["bf16"]) == pytest.approx(0.71, abs=0.01)
    release = resident_weights(spec, None)
    bf16_blocks = resident_weights(spec, "fp4-experts")
    assert release == pytest.approx(by_hand["total"], rel=0.03) and release < by_hand["total"]
    assert abs(release - by_hand["total"]) < abs(bf16_blocks - by_hand["total"])
    assert 74e9 < by_hand["total"] < 75e9


# --- Qwen3.5 / Qwen3.6 ---------------------------------------------------------------------------------------------


def _qwen35_language_model(t):
    """The language model of a Qwen3.5 text config by hand (transformers' Qwen3_5 / Qwen3_5Moe modules):

    - Gated DeltaNet layer: in_proj_qkv H x (2·h_k·d_k + h_v·d_v), in_proj_z H x h_v·d_v, in_proj_b and in_proj_a
      H x h_v, a depthwise conv1d of the q/k/v channels (kernel w, no bias), dt_bias and A_log (h_v each), the gated
      norm (d_v), out_proj h_v·d_v x H;
    - gated full-attention layer: q_proj H x 2·A·d (queries and the output gate), k and v H x K·d, o A·d x H, q_norm
      and k_norm (d each);
    - FFN: a SwiGLU MLP 3·H·F, or E experts of 3·H·F_e, the router E x H, a shared expert 3·H·F_s and its gate H;
    - two RMSNorms per layer, the final norm, the embedding and (untied) the head.
    """
    H, V, L = t["hidden_size"], t["vocab_size"], t["num_hidden_layers"]
    hk, hv, dk, dv, w = (t["linear_num_key_heads"], t["linear_num_value_heads"], t["linear_key_head_dim"],
                         t["linear_value_head_dim"], t["linear_conv_kernel_dim"])
    A, K, d = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    qkv = 2 * hk * dk + hv * dv
    linear = H * qkv + H * hv * dv + 2 * H * hv + qkv * w + 2 * hv + dv + hv * dv * H
    full = H * 2 * A * d + 2 * H * K * d + A * d * H + 2 * d
    if "num_experts" in t:
        E, k = t["num_experts"], t["num_experts_per_tok"]
        expert, common = 3 * H * t["moe_intermediate_size"], E * H + 3 * H * t["shared_expert_intermediate_size"] + H
        ffn, ffn_active = E * expert + common, k * expert + common
    else:
        ffn = ffn_active = 3 * H * t["intermediate_size"]
    kinds = t["layer_types"]
    assert len(kinds) == L and set(kinds) == {"linear_attention", "full_attention"}
    mixers = kinds.count("linear_attention") * linear + kinds.count("full_attention") * full
    outside = H + V * H * (1 if t["tie_word_embeddings"] else 2)
    return {"total": mixers + L * (ffn + 2 * H) + outside, "active": mixers + L * (ffn_active + 2 * H) + outside,
            "full_layer": full, "ffn": ffn}


def _qwen35_vision_tower(v):
    """The vision tower of the release (model.visual.*): per block a LayerNorm pair (weight and bias each), qkv
    D x 3D and proj D x D with biases, an MLP D x F and F x D with biases; the merger's LayerNorm, fc1 4D x 4D and fc2
    4D x out with biases (2 x 2 patches merged: spatial_merge_size 2); the Conv3d patch embedding (D x 3 x 2 x 16 x 16
    with a bias) and the learned position table."""
    D, F, out = v["hidden_size"], v["intermediate_size"], v["out_hidden_size"]
    merged = D * v["spatial_merge_size"] ** 2
    block = 4 * D + (D * 3 * D + 3 * D) + (D * D + D) + (D * F + F) + (F * D + D)
    merger = 2 * D + merged * merged + merged + merged * out + out
    patch = D * v["in_channels"] * v["temporal_patch_size"] * v["patch_size"] ** 2 + D
    return v["depth"] * block + merger + patch + v["num_position_embeddings"] * D


def _qwen35_mtp(t, lm):
    """The release's mtp.* module: fc 2H x H, one full-attention decoder layer with the model's FFN and its two
    norms, and mtp.norm, pre_fc_norm_embedding, pre_fc_norm_hidden (mtp_use_dedicated_embeddings false: no table)."""
    H = t["hidden_size"]
    assert t["mtp_num_hidden_layers"] == 1 and t["mtp_use_dedicated_embeddings"] is False
    return 2 * H * H + lm["full_layer"] + lm["ffn"] + 2 * H + 3 * H


# Elements stored in the released safetensors files (each report's "参数总量", its tensor table: language model, vision
# tower and mtp.*; stored-copy ids in the presets' notes).
RELEASED = {"qwen3.5-35b-a3b": 35_951_822_704, "qwen3.5-4b": 4_659_865_088, "qwen3.5-0.8b-base": 873_438_784,
            "qwen3.6-27b": 27_781_427_952}
COUNTS = {"qwen3.5-35b-a3b": 34_660_610_688, "qwen3.5-4b": 4_205_751_296, "qwen3.5-0.8b-base": 752_393_024,
          "qwen3.6-27b": 26_895_998_464}


@pytest.mark.parametrize("name", QWEN)
def test_qwen_counts_by_hand_and_the_released_checkpoint(name):
    c = preset_config(name)
    t = c["text_config"]
    lm = _qwen35_language_model(t)
    n = preset_params(name)
    assert (n.total, n.active) == (lm["total"], lm["active"])
    assert n.total == COUNTS[name]
    assert n.total + _qwen35_vision_tower(c["vision_config"]) + _qwen35_mtp(t, lm) == RELEASED[name]


def test_qwen3_5_35b_a3b_written_out_and_the_model_card():
    """Layer by layer with the numbers written out (hidden 2048): 30 Gated DeltaNet layers (in_proj_qkv 2048 x 8192,
    z 2048 x 4096, b and a 2048 x 32, conv 8192 x 4, dt/A 32 each, norm 128, out 4096 x 2048), 10 gated attention
    layers (q 2048 x 8192, k and v 2048 x 512, o 4096 x 2048, norms 2 x 256), 40 MoE layers of 256 experts of
    3 x 2048 x 512 (8 active), router 256 x 2048, shared expert 3 x 2048 x 512 and its gate, 2 norms. Card: "35B in
    total and 3B activated" (the name's A3B rounds 3.45B down)."""
    linear = 2048 * 8192 + 2048 * 4096 + 2 * 2048 * 32 + 8192 * 4 + 2 * 32 + 128 + 4096 * 2048
    full = 2048 * 8192 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 256
    expert, common = 3 * 2048 * 512, 256 * 2048 + 3 * 2048 * 512 + 2048 + 2 * 2048
    outside = 2048 + 2 * 248320 * 2048
    n = preset_params("qwen3.5-35b-a3b")
    assert n.total == 30 * linear + 10 * full + 40 * (256 * expert + common) + outside == 34_660_610_688
    assert n.active == 30 * linear + 10 * full + 40 * (8 * expert + common) + outside == 3_454_988_928
    assert n.total == pytest.approx(35e9, rel=0.01) and 3e9 < n.active < 3.5e9


# KV cache per token at 16 bit, by hand: only the full-attention layers (every 4th), K and V, KV heads x head_dim 256.
@pytest.mark.parametrize("name, by_hand", [
    ("qwen3.5-35b-a3b", 10 * 2 * 2 * 256 * 2),  # 20,480 B
    ("qwen3.5-4b", 8 * 2 * 4 * 256 * 2),  # 32,768 B
    ("qwen3.5-0.8b-base", 6 * 2 * 2 * 256 * 2),  # 12,288 B
    ("qwen3.6-27b", 16 * 2 * 4 * 256 * 2),  # 65,536 B
])
def test_qwen_kv_bytes_per_token_by_hand(name, by_hand):
    assert kv_bytes_per_token(arch_from_config(preset_config(name)), "bf16") == by_hand


@pytest.mark.parametrize("name, layers, conv_channels, value_heads", [
    ("qwen3.5-35b-a3b", 30, 2 * 16 * 128 + 32 * 128, 32), ("qwen3.5-4b", 24, 2 * 16 * 128 + 32 * 128, 32),
    ("qwen3.5-0.8b-base", 18, 2 * 16 * 128 + 16 * 128, 16), ("qwen3.6-27b", 48, 2 * 16 * 128 + 48 * 128, 48)])
def test_qwen_state_per_sequence_by_hand(name, layers, conv_channels, value_heads):
    """vLLM's per-sequence state of a Gated DeltaNet layer: w − 1 = 3 conv taps of the q/k/v channels and a recurrent
    state of h_v x d_k x d_v, both in bf16 (its MambaStateShapeCalculator, tests/test_gated_delta_net.py)."""
    arch = arch_from_config(preset_config(name))
    assert linear_attention.state_bytes(arch) == layers * (conv_channels * 3 + value_heads * 128 * 128) * 2


@pytest.mark.parametrize("name", QWEN)
def test_qwen_presets_are_bf16_releases(name):
    """The official repositories these presets name hold bf16 weights (the reports' tensor tables; A_log and the
    gated norms fp32 in some): no release block, the default weight format is bf16."""
    assert "release" not in model_preset(name)
    assert preset_config(name)["text_config"]["dtype"] == "bfloat16"
    assert weight_format(load_model(name), None).label == "bf16"


@pytest.mark.parametrize("name", NEW)
def test_cli_runs_each_new_preset(cli, name):
    check_preset_answers(cli, name, preset_params(name).total)


def test_serve_on_b200_answers_offline_with_the_release_weights(cli):
    """``aicalc serve nemotron-3-super-120b-a12b --chip b200`` (no network): one B200 holds the NVFP4 release."""
    r = cli("serve", SUPER, "--chip", "b200", "--json")
    assert r.code == 0, r.err
    assert r.json["inputs"]["dtype"] == "fp8+fp4-experts"
