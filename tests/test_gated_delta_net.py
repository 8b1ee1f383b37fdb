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

from conftest import DATA, fixture_config, fixture_records

PARAMS = fixture_records()
# type and total count: tests/test_deployed_archs.py
FIXTURES = ("qwen3-next-80b-a3b-instruct", "qwen3.5-4b", "qwen3.5-35b-a3b")
_config = fixture_config


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


KV = json.loads((DATA / "validation" / "kv_cache.json").read_text())


@pytest.mark.parametrize("name", FIXTURES)
def test_cache_after_prefill_and_decode_equals_transformers(name):
    """transformers' DynamicCache after a 16-token prefill and one decode step: K/V only on the full-attention
    layers, and on each linear-attention layer a conv state (B, C_w, w) in bf16 and a recurrent state
    (B, h_v, d_k, d_v) in float32 that do not grow with the tokens."""
    from aicalc.core.kv_cache import kv_cache_bytes, kv_shape

    rec = next(r for r in KV["records"] if r["name"] == name and r["case"] == "b1-s16")
    arch = arch_from_config(rec["config"])
    shape = kv_shape(arch, "bf16", 1, engine="hf")
    assert shape.full_layers == arch.attention_layers == sum(s > 0 for s in rec["per_layer_seq"])
    assert shape.state_bytes == rec["state_bytes"] == rec["after_decode_1"]["state_bytes"]
    assert kv_cache_bytes(shape, 1, 16) == rec["kv_bytes"] + rec["state_bytes"]
    assert kv_cache_bytes(shape, 1, 17) == rec["after_decode_1"]["kv_bytes"] + rec["state_bytes"]
    (group,) = rec["state_groups"]
    assert (group["conv_states_dtype"], group["recurrent_states_dtype"]) == ("bfloat16", "float32")
    assert group["count"] == arch.linear_layers


def test_vllm_state_is_its_shape_calculator():
    """vLLM's ``MambaStateShapeCalculator.gated_delta_net_state_shape``: a conv state of (w − 1) × C_w/tp and a
    temporal state of h_v/tp × d_k × d_v, both in the model dtype (``gated_delta_net_state_dtype``, "auto"):
    Qwen3-Next at TP 4, 36 layers × (3 × 8192/4 + 8 × 128 × 128) × 2 bytes."""
    from aicalc.core.kv_cache import kv_shape

    arch = arch_from_config(_config("qwen3-next-80b-a3b-instruct"))
    assert kv_shape(arch, "fp8", 4).state_bytes == 36 * (3 * 2048 + 8 * 128 * 128) * 2  # not the kv dtype
    from aicalc.core.geometry import check_tp

    with pytest.raises(AicalcError, match="does not divide the 16 linear-attention key heads"):
        check_tp(arch._replace(heads=32), 32)  # attention heads would split 32 ways; the DeltaNet's 16 would not


def test_kv_cache_command_reports_the_state(cli):
    path = DATA / "configs" / "qwen3-next-80b-a3b-instruct"
    rows = cli("kv-cache", path, "--context", "16,32k", "--batch", "8", "--json").json["rows"]
    state = 8 * 36 * (3 * 8192 + 32 * 128 * 128) * 2  # vLLM, TP 1
    assert [r["state_bytes"] for r in rows] == [state, state]
    # 12 full-attention layers × 2 kv heads × 256 × 2 (K, V) × 2 bytes per token, in blocks of 16 tokens
    assert rows[1]["kv_cache_bytes"] - rows[0]["kv_cache_bytes"] == 8 * 12 * 2 * 256 * 2 * 2 * (32000 - 16)
    assert rows[0]["kv_cache_bytes"] == state + 8 * 12 * 2048 * 16
    text = cli("kv-cache", path, "--context", "16").out
    assert "36 linear-attention (Gated DeltaNet) layers cache no tokens" in text


def _forward(name="qwen3-next-80b-a3b", **kw):
    from aicalc.api.roofline import cost_setup
    from aicalc.core.forward import forward_ops

    cs = cost_setup(name, "h100-sxm")
    return {op.name: op for op in forward_ops(cs.shape, cs.formats, **kw)}


def test_decode_step_ops_are_the_layers_own():
    """One decode step of one sequence after 1,000 tokens, TP 1, Qwen3-Next: attention only on its 12 full layers
    (score over 1,001 keys: 2·16·256·1001 per layer), each of its 36 DeltaNet layers its projections (H = 2048 →
    q, k (2 × 2048), v, z (2 × 4096), β, α (2 × 32); out 4096 → 2048), its conv (2 FLOPs × 4 taps × 8192
    channels) and the recurrent delta rule, 7·d_k·d_v per value head (decay, read, write, output: 1 + 2 + 2 + 2
    FLOPs per state element), reading and writing its 16-bit state once: 32·128·128 + 3·8192 elements."""
    ops = _forward(batch=1.0, new_tokens=1.0, past=1000.0, tp=1.0)
    assert float(ops["attn_score"].flop) == 12 * 2 * 16 * 256 * 1001
    assert float(ops["qkv_proj"].flop) == 12 * 2 * 2048 * (2 * 4096 + 2 * 512)  # q and its gate, k, v
    assert float(ops["linear_in_proj"].flop) == 36 * 2 * 2048 * (2 * 2048 + 2 * 4096 + 2 * 32)
    assert float(ops["linear_out_proj"].flop) == 36 * 2 * 4096 * 2048
    assert float(ops["linear_conv"].flop) == 36 * 2 * 4 * 8192
    core = ops["linear_core"]
    assert float(core.flop) == 36 * 32 * 7 * 128 * 128
    state = (32 * 128 * 128 + 3 * 8192) * 2
    io = (2 * 2048 + 2 * 4096 + 64 + 4096) * 2  # q, k, v, z, β, α read and the 4096-wide output written, 16-bit
    assert float(core.bytes) == 36 * (2 * state + io)
    # eight sequences: eight states; the weights stream once
    assert float(_forward(batch=8.0, new_tokens=1.0, past=1000.0, tp=1.0)["linear_core"].bytes) == 8 * 36 * (2 * state + io)


def test_prefill_uses_the_chunked_delta_rule():
    """A 4,096-token prompt: per token and value head 6·d_k·d_v + C·(5·d_k + 3·d_v) with chunks of C = 64
    (Yang et al. 2024 §3, the UT transform of flash-linear-attention's chunk kernel), and every chunk's state
    written and read back (64 chunks of 32·128·128 16-bit elements) besides the state itself."""
    ops = _forward(batch=1.0, new_tokens=4096.0, past=0.0, tp=2.0)
    per_head = 6 * 128 * 128 + 64 * (5 * 128 + 3 * 128)
    assert float(ops["linear_core"].flop) == 4096 * 36 * 16 * per_head  # 32 value heads over TP 2
    state = (16 * 128 * 128 + 3 * 4096) * 2
    chunks = 64 * 2 * 16 * 128 * 128 * 2
    io = 4096 * (2 * 2048 + 2 * 4096 + 64 + 4096) / 2 * 2
    assert float(ops["linear_core"].bytes) == 36 * (2 * state + chunks + io)


def test_training_flops_agree_with_megatron_bridge():
    """Megatron-Bridge's FLOP calculator (``training/utils/flop_utils.py``, GDN branch) for Qwen3-Next per token at
    seq 4096, causal: GDN layers 6·(H·(2·K_w + 2·V_w + 2·h_v) + w·C_w + 4·h_v·d_v² + H·V_w), gated attention layers
    6·(H·(q + k + v + gate) + q·H + q·s), MoE 6·H·3·(k·F_e + F_shared), logits 6·H·V. aicalc also counts the
    router (6·H·E per layer) and the chunked delta rule's intra-chunk work (6·d_k·d_v + C·(5·d_k + 3·d_v) per head
    against Megatron-Bridge's 8·d_v²): the two differ by exactly those terms."""
    from aicalc.api.roofline import cost_setup
    from aicalc.core.train_time import flops_per_token

    H, s, V, E = 2048, 4096, 151936, 512
    Kw, Vw, hv, C = 16 * 128, 32 * 128, 32, 2 * 16 * 128 + 32 * 128
    gdn = 6 * (H * (2 * Kw + 2 * Vw + 2 * hv) + 4 * C + hv * 128 * 128 * 4 + H * Vw)
    q, kv = 16 * 256, 2 * 256
    attn = 6 * (H * (q + 2 * kv + q) + q * H + q * s)
    moe = 6 * H * 3 * (10 * 512 + 512)
    megatron = 36 * gdn + 12 * attn + 48 * moe + 6 * H * V
    ours, _ = flops_per_token(cost_setup("qwen3-next-80b-a3b").shape, s, attention_flops="causal")
    router = 48 * 6 * H * E
    core = 36 * 3 * hv * ((6 * 128 * 128 + 64 * (5 * 128 + 3 * 128)) - 8 * 128 * 128)
    assert float(ours) == megatron + router + core
    assert float(ours) == pytest.approx(megatron, rel=0.02)  # 1.8 % apart


def test_activations_of_a_linear_layer_are_the_fused_kernels_saved_tensors():
    """Per token and layer, bf16, Qwen3-Next (C_w 8192, K_w 2048, V_w 4096, h_k 16, h_v 32, d_k 128, chunk 64, w 4),
    fla's kernels: the conv's input (8192), normalized q and k (2 × 2048), v, the gated norm's input and gate and
    out_proj's input (4 × 4096), β and A (32 × (1 + 64)) in bf16; q/k rstd (2 × 16), g, the softplus input and
    output and the norm's rstd (4 × 32) in fp32: 62,144 bytes. Megatron's repeated q and k add 2 × 32 × 128 bf16;
    transformers' module adds the conv's padded output (8192 × (S + 3)/S bf16) and its PyTorch gated norm's three
    fp32 copies (3 × 4096). The hybrid's layer average weights transformers' layer by 36 of 48 layers against the
    gated attention's."""
    from aicalc.catalog import store
    from aicalc.core import activations as act
    from aicalc.core.linear_attention import saved_bytes

    arch = store.resolve_model("qwen3-next-80b-a3b").arch
    fla = 2 * (8192 + 2 * 2048 + 4 * 4096 + 32 * 65) + 4 * (2 * 16 + 4 * 32)
    assert fla == 62144
    assert float(saved_bytes(1, 1, arch, 2.0)) == fla
    assert float(saved_bytes(2, 4096, arch, 2.0, 4)) == 2 * 4096 * fla / 4
    assert float(saved_bytes(1, 4096, arch, 2.0, 1, "megatron")) == 4096 * (fla + 2 * 2 * 32 * 128)
    hf = 4096 * (fla + 4 * 3 * 4096) + 2 * 8192 * (4096 + 3)
    assert float(saved_bytes(1, 4096, arch, 2.0, 1, "hf")) == hf
    full = arch._replace(layer_types=("full_attention",) * 48, linear_attention=None)
    hybrid, plain = (float(act.hf_layer(1, 4096, a, 2.0)) for a in (arch, full))
    attn = 2 * 4096 * (2 * 4096 + 2 * 512 + 2 * 4096) + 4 * 16 * 4096  # sdpa q, k, v, out, lse; gate and product
    qk = float(act.qk_norm_saved(1, 4096, arch, 2.0))
    assert hybrid - plain == pytest.approx(36 / 48 * (hf - attn - qk), rel=1e-12)


def test_saved_bytes_match_the_h100_measurements():
    """Each layer measured on an H100 (``validation/measure_gdn.py``: bf16, flash-linear-attention 0.6, what the
    forward leaves allocated less its output), at three widths and three batch × length shapes, is what
    ``saved_bytes`` counts for its path, within the allocator's 512-byte rounding of the small tensors; Megatron's
    order likewise, measured on an H200 at two of the widths."""
    import json

    from aicalc.catalog import store
    from aicalc.catalog.arch import LinearAttention
    from aicalc.core.linear_attention import saved_bytes

    doc = json.loads((DATA / "measured" / "h100-gdn-saved.json").read_text())
    base = store.resolve_model("qwen3-next-80b-a3b").arch
    seen = set()
    for r in doc["records"]:
        if r["variant"] not in ("fla", "hf"):
            continue
        la = LinearAttention(key_heads=r["hk"], value_heads=r["hv"], key_head_dim=r["dk"], value_head_dim=r["dv"],
                             conv_kernel=r["w"])
        arch = base._replace(hidden=r["hidden"], linear_attention=la)
        est = float(saved_bytes(r["B"], r["S"], arch, 2.0, 1, r["variant"]))
        assert est == pytest.approx(r["saved"], abs=4096), r
        seen.add(r["variant"])
    assert seen == {"fla", "hf"}
    megatron = json.loads((DATA / "measured" / "h200-gdn-saved-megatron.json").read_text())
    assert len(megatron["records"]) >= 6 and {r["shape"] for r in megatron["records"]} >= {"qwen3-next-80b-a3b"}
    for r in megatron["records"]:  # Megatron-LM's order, measured on an H200 (counted first from its code)
        la = LinearAttention(key_heads=r["hk"], value_heads=r["hv"], key_head_dim=r["dk"], value_head_dim=r["dv"],
                             conv_kernel=r["w"])
        arch = base._replace(hidden=r["hidden"], linear_attention=la)
        assert float(saved_bytes(r["B"], r["S"], arch, 2.0, 1, "megatron")) == pytest.approx(r["saved"], abs=4096), r
    torch_path = [r["saved"] / r["B"] / r["S"] for r in doc["records"] if r["variant"] == "hf-torch"]
    hf = [r["saved"] / r["B"] / r["S"] for r in doc["records"] if r["variant"] == "hf"]
    assert min(t / h for t, h in zip(torch_path, hf, strict=True)) > 2.5  # why the torch fallback is not modelled


def test_sequences_that_fit_pay_their_state():
    """On an H100 at TP 4 (2 kv heads: one replicated per device), a 32,000-token sequence of Qwen3-Next holds
    12 layers × 32,000 tokens × 1,024 bytes of KV and 36 × (3 × 2048 + 8 × 128 × 128) × 2 bytes of state per device;
    the sequences that fit are the budget over their sum, and the longest context for 64 sequences leaves the 64
    states out of the budget first."""
    import math

    import aicalc

    r = aicalc.kv_cache("qwen3-next-80b-a3b", batch=64, context=32000, chip="h100-sxm", tp=4, block_size=None,
                        max_context=True)
    budget = float(r.kv_budget_bytes_per_device[0])
    state = 36 * (3 * 2048 + 8 * 128 * 128) * 2
    assert float(r.state_bytes_per_device[0]) == 64 * state
    assert int(r.max_batch[0]) == math.floor(budget / (12 * 32000 * 1024 + state))
    assert float(r.max_context[0]) == math.floor((budget - 64 * state) / (64 * 12 * 1024))


def test_megatron_layers_trade_attentions_block_for_the_kernels_tensors():
    """Korthikanti et al. 2022 Table 2 count Q, K, V and the output projection's input (8·sbh/t) and, unfused, the
    5·a·s²·b/t scores for each layer's attention; a DeltaNet layer keeps the fused kernels' 78,528 bytes per token
    instead (Qwen3-Next, bf16, Megatron's path: fla's 62,144 and the repeated q and k, 16,384); with full recompute a
    layer keeps its input alone, whatever its kind."""
    from aicalc.catalog import store
    from aicalc.core.linear_attention import korthikanti_delta

    arch = store.resolve_model("qwen3-next-80b-a3b").arch
    s, b, t, H = 4096, 1, 8, 2048
    assert float(korthikanti_delta(s, b, arch, t, "none", True)) == s * b * (78528 - 8 * H) / t
    assert float(korthikanti_delta(s, b, arch, t, "none", False)) == s * b * (78528 - 8 * H) / t - 5 * 16 * s * s * b / t
    assert float(korthikanti_delta(s, b, arch, t, "selective", False)) == s * b * (78528 - 8 * H) / t
    assert float(korthikanti_delta(s, b, arch, t, "full", False)) == 0.0
