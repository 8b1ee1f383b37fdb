"""Nemotron-H / Nemotron 3 (``nemotron_h``): hybrid blocks of ONE mixer each (Mamba-2, attention, MLP or MoE), read
from real published ``config.json`` files (``tests/data/configs/nemotron-3-*``, sources in SOURCES.md).

Exactness: parameter counts equal what transformers 5.23 builds from the same files (``validation/record_params.py``
records, block by block); the per-layer kinds follow the published block pattern.
"""

import json

import pytest

from aicalc.catalog.hf_config import arch_from_config
from aicalc.core import mamba
from aicalc.core.params import count_params
from aicalc.errors import AicalcError

from conftest import DATA, ROOT, fixture_config, fixture_records

PARAMS = fixture_records()
FIXTURES = ("nemotron-3-nano-30b-a3b", "nemotron-3-super-120b-a12b-nvfp4")
_config = fixture_config


@pytest.mark.parametrize("name", FIXTURES)
def test_counts_like_transformers(name):
    cfg = _config(name)
    assert PARAMS[name]["config"] == cfg and PARAMS[name]["model_class"] == "NemotronHForCausalLM"
    assert count_params(arch_from_config(cfg)).total == PARAMS[name]["params"]


@pytest.mark.parametrize("name", FIXTURES)
def test_mamba_block_equals_the_recorded_block(name):
    """Block 0 of both files is a Mamba block ("M"): its mixer's parameters (in_proj, conv1d, dt_bias/A_log/D, the
    gated norm, out_proj) as transformers reports them, and the block's one RMS norm."""
    arch = arch_from_config(_config(name))
    parts = PARAMS[name]["breakdown"]["layer_0_parts"]
    assert arch.layer_types[0] == "mamba" and not arch.ffn_layers[0]
    assert sum(v for k, v in parts.items() if k.startswith("mixer")) == mamba.mixer_params(arch.mamba, arch.hidden)
    assert parts["norm"] == arch.hidden
    # in_proj: H x (2I + 2GN + nh), transformers' projection_size
    m = arch.mamba
    assert parts["mixer.in_proj"] == arch.hidden * (2 * m.inner + 2 * m.groups * m.state + m.heads)


def test_nano_block_kinds_and_shapes():
    cfg = _config("nemotron-3-nano-30b-a3b")
    arch = arch_from_config(cfg)
    pattern = cfg["hybrid_override_pattern"]
    assert (arch.layers, arch.mamba_layers, arch.n_moe_layers, arch.attention_layers) == (52, 23, 23, 6)
    assert (pattern.count("M"), pattern.count("E"), pattern.count("*"), pattern.count("-")) == (23, 23, 6, 0)
    assert arch.dense_ffn_layers == 0 and arch.n_ffn_layers == 23 and arch.hybrid
    assert [i for i, t in enumerate(arch.layer_types) if t == "full_attention"] == [5, 12, 19, 26, 33, 42]
    assert (arch.mamba.inner, arch.mamba.conv_dim, arch.mamba.ssm_dtype) == (4096, 4096 + 2 * 8 * 128, "fp32")
    assert (arch.gated_ffn, arch.activation, arch.tied_embeddings, arch.norms_per_layer) == (False, "relu2", False, 1)
    # the layer list spelling (layers_block_type, legacy names) reads the same
    names = {"M": "mamba", "E": "moe", "*": "attention", "-": "mlp"}
    listed = {k: v for k, v in cfg.items() if k != "hybrid_override_pattern"} | {
        "layers_block_type": [names[c] for c in pattern]}
    assert arch_from_config(listed) == arch


def test_super_latent_moe_against_the_recorded_moe_block():
    """Super's MoE blocks run 512 experts on a 1024-wide latent: the last block ("E") as transformers counts it."""
    name = "nemotron-3-super-120b-a12b-nvfp4"
    arch = arch_from_config(_config(name))
    parts = PARAMS[name]["breakdown"]["layer_last_parts"]
    assert arch.moe_layers[-1] and (arch.moe.latent, arch.moe.experts, arch.moe.experts_per_token) == (1024, 512, 22)
    assert parts["mixer.experts"] == 512 * 2 * 1024 * 2688  # up (E, F_e, latent), down (E, latent, F_e)
    assert parts["mixer.fc1_latent_proj"] == parts["mixer.fc2_latent_proj"] == 4096 * 1024
    assert parts["mixer.gate"] == 512 * 4096 and parts["mixer.shared_experts"] == 2 * 4096 * 5376
    # the 40 MoE and 8 attention blocks of the release (the C++ header's per-class layer list names 40 MoE layers)
    assert (arch.n_moe_layers, arch.attention_layers, arch.mamba_layers) == (40, 8, 40)
    # the MTP block (num_nextn_predict_layers 1) is not built: 88 blocks counted
    assert PARAMS[name]["breakdown"]["num_layers"] == 88


def test_dense_block_and_the_shapes_transformers_builds():
    """A dense "-" block is up_proj Linear(H, F) and down_proj Linear(F, H) without biases (``NemotronHMLP``); an
    attention block q/k/v/o without biases whatever attention_bias says (``JambaAttention``); the head is never tied
    (``_tied_weights_keys = {}``). Counts from those module shapes."""
    H, F, A, K, d, V = 64, 96, 4, 2, 16, 512
    base = dict(model_type="nemotron_h", hidden_size=H, intermediate_size=F, num_attention_heads=A,
                num_key_value_heads=K, head_dim=d, vocab_size=V, mamba_num_heads=8, mamba_head_dim=16,
                ssm_state_size=16, n_groups=2)
    mixer = mamba.mixer_params(arch_from_config({**base, "hybrid_override_pattern": "M"}).mamba, H)
    dense = count_params(arch_from_config({**base, "hybrid_override_pattern": "M-*-", "attention_bias": True,
                                           "tie_word_embeddings": True}))
    expected = 2 * V * H + 4 * H + H + mixer + 2 * (2 * H * F) + (H * A * d + 2 * H * K * d + A * d * H)
    assert dense.total == expected


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hybrid_override_pattern": "MEX"}, "may only hold M, \\*, - and E"),
        ({"mlp_bias": True}, "mlp_bias true is not supported for model_type 'nemotron_h'"),
        ({"n_groups": 3}, "n_groups \\(3\\) does not divide the 64 Mamba heads"),
        ({"mamba_ssm_cache_dtype": "int8"}, "mamba_ssm_cache_dtype must be"),
        ({"layers_block_type": ["mamba", "conv"]}, "field 'layers_block_type' must list block kinds"),
    ],
)
def test_bad_files_are_refused(change, message):
    with pytest.raises(AicalcError, match=message):
        arch_from_config({**_config("nemotron-3-nano-30b-a3b"), **change})


def test_other_families_keep_a_full_block_per_layer():
    """Every other preset still reads as a token mixer + FFN on every layer (the one-mixer fields at their
    defaults)."""
    from aicalc.catalog.store import resolve_model

    for path in (ROOT / "presets" / "models").glob("*.yaml"):
        arch = resolve_model(path.stem).arch
        if arch.family == "nemotron_h":
            continue
        assert all(arch.ffn_layers) and arch.mamba is None and not arch.hybrid, path.stem
        # every layer a token mixer: attention, or Gated DeltaNet linear attention (Qwen3-Next)
        assert arch.attention_layers + arch.linear_layers == arch.layers


KV = [r for r in json.loads((DATA / "validation" / "kv_cache.json").read_text())["records"]
      if r["name"] in FIXTURES and r["kind"] == "config"]


@pytest.mark.parametrize("rec", KV, ids=lambda r: f"{r['name']}-{r['case']}")
def test_kv_and_state_equal_transformers_cache(rec):
    """After a prefill transformers' cache holds K/V for the attention blocks only and, for each Mamba block, a conv
    state (bf16) and an SSM state (fp32) per sequence, whatever the prompt: aicalc's "hf" engine counts the same
    bytes; one decode step later the state has not grown."""
    from aicalc.core.kv_cache import kv_cache_bytes, kv_shape

    arch = arch_from_config(rec["config"])
    shape = kv_shape(arch, "bf16", 1, engine="hf")
    assert shape.state_bytes * rec["batch"] == rec["state_bytes"]
    assert kv_cache_bytes(shape, rec["batch"], rec["seq"]) == rec["kv_bytes"] + rec["state_bytes"]
    after = rec["after_decode_1"]
    assert after["state_bytes"] == rec["state_bytes"]
    assert kv_cache_bytes(shape, rec["batch"], rec["seq"] + 1) == after["kv_bytes"] + rec["state_bytes"]
    groups = rec["state_groups"]
    assert {(g["conv_states_dtype"], g["recurrent_states_dtype"]) for g in groups} == {("bfloat16", "float32")}
    assert sum(g["count"] for g in groups) == arch.mamba_layers


def test_kv_records_cover_both_fixtures_at_two_lengths():
    assert {(r["name"], r["case"]) for r in KV} == {(n, c) for n in FIXTURES for c in ("b1-s16", "b2-s300")}


def test_state_counts_in_what_fits(cli):
    """The kv-cache command reports the state as its own column, part of the cache column, and counts it against the
    budget: a batch's state is batch x the per-sequence figure, the cache is K/V + state and the total is weights +
    overhead + cache."""
    out = cli("kv-cache", DATA / "configs" / "nemotron-3-nano-30b-a3b", "--batch", "4", "--context", "8192",
              "--chip", "h100-sxm", "--json").json["rows"][0]
    m = arch_from_config(_config("nemotron-3-nano-30b-a3b")).mamba
    # 23 Mamba layers x (conv (I + 2GN) x 4 taps in bf16 + SSM nh x P x N in fp32, as the config's
    # mamba_ssm_cache_dtype float32 says)
    per_seq = 23 * ((4096 + 2 * 8 * 128) * 4 * 2 + 64 * 64 * 128 * 4)
    assert (m.inner, m.state) == (4096, 128)
    assert out["state_bytes_per_device"] == 4 * per_seq
    # K/V of the 6 attention layers, 2 kv heads of 128 in bf16, over 8192 tokens paged in blocks of 16
    assert out["kv_cache_bytes_per_device"] == 4 * (6 * 2 * 2 * 128 * 2 * 8192 + per_seq)
    assert out["total_bytes_per_device"] == pytest.approx(out["weights_bytes_per_device"] + out["runtime_overhead_bytes"]
                                                          + out["kv_cache_bytes_per_device"])

