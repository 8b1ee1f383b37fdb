"""Gated DeltaNet hybrids: Qwen3-Next (``qwen3_next``), Qwen3.5 dense (``qwen3_5``) and MoE (``qwen3_5_moe``), read from
real published config files (``tests/data/configs/*``, sources in ``tests/data/configs/SOURCES.md``).

Independent references: transformers 5.23's parameter counts (``validation/record_params.py``, recorded per layer part),
the released checkpoints' tensor tables (shapes and counts as the source reports list them, typed in below) and the
vendors' model cards.
"""

import json

import pytest

from aicalc.catalog.hf_config import arch_from_config
from aicalc.core.linear_attention import layer_params
from aicalc.core.params import attention_params, count_params, qk_norm_params
from aicalc.errors import AicalcError

from conftest import DATA

PARAMS = {r["name"]: r for r in json.loads((DATA / "validation" / "params.json").read_text())["records"]}
FIXTURES = {"qwen3-next-80b-a3b-instruct": "qwen3_next", "qwen3.5-4b": "qwen3_5", "qwen3.5-35b-a3b": "qwen3_5_moe"}


def _config(name):
    return json.loads((DATA / "configs" / name / "config.json").read_text())


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_counts_like_transformers(name):
    cfg = _config(name)
    assert cfg["model_type"] == FIXTURES[name]
    assert PARAMS[name]["config"] == cfg
    assert count_params(arch_from_config(cfg)).total == PARAMS[name]["params"]


@pytest.mark.parametrize("name", FIXTURES)
def test_each_layer_kind_equals_the_recorded_layer(name):
    """Layer 0 is a Gated DeltaNet layer, the last a full-attention one: their token mixers equal transformers'
    ``numel()`` of ``linear_attn.*`` and of ``self_attn.*`` (q_proj twice as wide for the output gate)."""
    arch = arch_from_config(_config(name))
    first, last = (PARAMS[name]["breakdown"][k] for k in ("layer_0_parts", "layer_last_parts"))
    assert arch.layer_types[0] == "linear_attention" and arch.layer_types[-1] == "full_attention"
    assert sum(v for k, v in first.items() if k.startswith("linear_attn")) == layer_params(arch)
    assert sum(v for k, v in last.items() if k.startswith("self_attn")) == attention_params(arch) + qk_norm_params(arch)
    assert last["self_attn.q_proj"] == 2 * arch.hidden * arch.heads * arch.head_dim


def test_qwen3_next_equals_the_checkpoint_without_its_mtp_layer():
    """The Qwen3-Next-80B-A3B-Instruct checkpoint stores 81,324,862,720 elements (the report's safetensors table);
    its ``mtp.*`` tensors (listed there, typed in here) are not built by transformers. What is left is the count."""
    H, E, Fe = 2048, 512, 512
    mtp = (H * 2 * H  # mtp.fc
           + 3 * E * Fe * H + E * H + 3 * Fe * H + H  # experts, router, shared expert, its gate
           + 8192 * H + 2 * 512 * H + H * 4096 + 2 * 256  # q (gated), k, v, o, q/k norms
           + 5 * H)  # input/post-attention norms, mtp.norm, pre_fc_norm_embedding, pre_fc_norm_hidden
    assert count_params(arch_from_config(_config("qwen3-next-80b-a3b-instruct"))).total == 81_324_862_720 - mtp


def test_qwen3_5_4b_equals_the_checkpoints_language_model():
    """Qwen3.5-4B: the ``model.language_model.*`` tensors of the released checkpoint (shapes × layers from the
    report's table; the LM head is tied, the vision tower and ``mtp.*`` are not the language model)."""
    H, F, linear, full = 2560, 9216, 24, 8
    per_linear = 32 + 8192 * 4 + 32 + 2 * 32 * H + 8192 * H + 4096 * H + 128 + H * 4096
    per_full = 2 * 256 + 2 * 1024 * H + H * 4096 + 8192 * H
    per_layer = 2 * H + 3 * H * F
    total = 248320 * H + linear * per_linear + full * per_full + 32 * per_layer + H
    assert count_params(arch_from_config(_config("qwen3.5-4b"))).total == total == 4_205_751_296


# Model cards: Qwen3-Next-80B-A3B "80B in total and 3B activated"; Qwen3.5-35B-A3B "35B in total and 3B activated"
# (language model; transformers builds no MTP layer).
@pytest.mark.parametrize("name, total, active", [("qwen3-next-80b-a3b-instruct", 80e9, 3e9),
                                                 ("qwen3.5-35b-a3b", 35e9, 3e9)])
def test_published_totals(name, total, active):
    n = count_params(arch_from_config(_config(name)))
    assert n.total == pytest.approx(total, rel=0.02)
    assert n.active == pytest.approx(active, rel=0.3)


def test_layer_pattern_and_wrapper():
    nxt = arch_from_config(_config("qwen3-next-80b-a3b-instruct"))  # full_attention_interval 4, no layer_types
    assert (nxt.linear_layers, nxt.attention_layers) == (36, 12)
    assert nxt.layer_types[:4] == ("linear_attention",) * 3 + ("full_attention",)
    assert (nxt.moe.experts, nxt.moe.shared_experts, nxt.moe.shared_gate, nxt.n_moe_layers) == (512, 1, True, 48)
    dense = arch_from_config(_config("qwen3.5-4b"))
    assert dense.extra["sized"].startswith("text_config of the qwen3_5 wrapper")
    assert (dense.moe, dense.tied_embeddings, dense.linear_layers) == (None, True, 24)
    # full_attention_interval 2 instead of the listed pattern
    cfg = _config("qwen3-next-80b-a3b-instruct")
    assert arch_from_config({**cfg, "full_attention_interval": 2}).linear_layers == 24


@pytest.mark.parametrize("change, message", [
    ({"layer_types": ["linear_attention"] * 47}, "must list 'linear_attention' or 'full_attention' for each of the 48"),
    ({"layer_types": ["sliding_attention"] * 48}, "must list 'linear_attention' or 'full_attention'"),
    ({"linear_num_value_heads": 24}, "linear_num_value_heads \\(24\\) is not a multiple of linear_num_key_heads"),
    ({"linear_key_head_dim": 0}, "'linear_key_head_dim' must be a positive integer"),
])
def test_bad_files_are_refused(change, message):
    with pytest.raises(AicalcError, match=message):
        arch_from_config({**_config("qwen3-next-80b-a3b-instruct"), **change})
