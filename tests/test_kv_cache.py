"""kv-cache: exact bytes against the published oracles (validation-cases.md §1, IM-xx ids)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aicalc.catalog import store
from aicalc.catalog.hf_config import arch_from_config
from aicalc.core import capacity
from aicalc.core.kv_cache import kv_bytes_per_token, kv_cache_bytes, kv_shape

GiB = 2**30


def arch(model_id):
    return store.resolve_model(model_id).arch


@pytest.mark.parametrize(
    "model, expected",
    [
        ("llama-3.1-8b", 131_072),  # IM-01
        ("llama-3.1-70b", 327_680),  # IM-02
        ("llama-2-7b", 524_288),  # IM-03 (MHA)
        ("qwen2.5-7b", 57_344),  # IM-04
        ("deepseek-v3", 70_272),  # IM-06: MLA latent, no ×2
    ],
)
def test_bytes_per_token_oracles(model, expected):
    assert kv_bytes_per_token(arch(model)) == expected


def test_im01_im02_at_128k_tokens():
    # IM-01: 16 GiB at 131,072 tokens; IM-02: 40 GiB
    assert kv_cache_bytes(kv_shape(arch("llama-3.1-8b")), 1, 131_072) == 16 * GiB
    assert kv_cache_bytes(kv_shape(arch("llama-3.1-70b")), 1, 131_072) == 40 * GiB


def test_im05_explicit_head_dim_qwen3_32b():
    cfg = {"model_type": "qwen3", "hidden_size": 5120, "num_hidden_layers": 64, "num_attention_heads": 64,
           "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 25600, "vocab_size": 151936}
    assert kv_bytes_per_token(arch_from_config(cfg)) == 262_144  # not 163,840 (hidden/heads = 80)


def test_im13_octocoder_mha_vs_mqa():
    # IM-13: L 40, 48 heads, h 6144 at 16,000 tokens: 7,864,320,000 values ≈ 15 GB fp16 as MHA; < 400 MB with MQA
    base = {"model_type": "llama", "hidden_size": 6144, "num_hidden_layers": 40, "num_attention_heads": 48,
            "intermediate_size": 24576, "vocab_size": 49152}
    mha = kv_cache_bytes(kv_shape(arch_from_config(base | {"num_key_value_heads": 48})), 1, 16_000)
    mqa = kv_cache_bytes(kv_shape(arch_from_config(base | {"num_key_value_heads": 1})), 1, 16_000)
    assert mha == 7_864_320_000 * 2
    assert mqa < 400e6


def test_im08_tp_splits_kv_heads_then_replicates():
    a = arch("llama-3.1-70b")  # 8 kv heads
    per_tok = {tp: kv_shape(a, "bf16", tp).bytes_per_token for tp in (1, 2, 4, 8, 16)}
    assert per_tok[2] == per_tok[1] / 2 and per_tok[8] == per_tok[1] / 8
    assert per_tok[16] == per_tok[8]  # one kv head per device, replicated
    mla = arch("deepseek-v3")
    assert kv_shape(mla, "bf16", 8).bytes_per_token == 70_272  # MLA latent replicated on every rank


def test_im09_mistral_rolling_buffer_caps_at_512_mib():
    shape = kv_shape(arch("mistral-7b"))
    assert kv_cache_bytes(shape, 1, 32_768) == 4096 * 131_072 == 512 * 2**20
    assert kv_cache_bytes(shape, 1, 1000) == 1000 * 131_072


def test_gemma2_only_half_the_layers_cap():
    a = arch("gemma-2-9b")  # 42 layers, window 4096 on 21 of them, head_dim 256, 8 kv heads
    per_layer = 2 * 8 * 256 * 2
    S = 8192
    assert kv_cache_bytes(kv_shape(a), 1, S) == per_layer * (21 * S + 21 * 4096)


def test_im10_page_size_and_paging_waste():
    # IM-10: a block of 16 tokens per layer = 16·K·(d + d)·bytes; a 17-token sequence holds 2 blocks
    shape = kv_shape(arch("llama-3.1-8b"))
    assert shape.bytes_per_token_layer * 16 == 16 * 8 * (128 + 128) * 2
    assert kv_cache_bytes(shape, 1, 17, 16) == 32 * 32 * 4096
    assert kv_cache_bytes(shape, 1, 17, None) == 17 * 32 * 4096


def test_im11_vllm_blocks_and_concurrency():
    # Hand-derived: 10 GiB budget; Llama-3.1-8B block of 16 tokens over 32 layers = 16·131,072 B = 2 MiB
    # → 5,120 blocks; 8,192-token requests need 512 blocks → "Maximum concurrency: 10.00x"
    shape = kv_shape(arch("llama-3.1-8b"))
    fit, conc = capacity.max_batch(shape, 10 * GiB, 8192, 16)
    assert conc == pytest.approx(10.0) and fit == 10
    # 8,200 tokens need cdiv(8200, 16) = 513 blocks → 5120/513 = 9.98x
    fit, conc = capacity.max_batch(shape, 10 * GiB, 8200, 16)
    assert conc == pytest.approx(5120 / 513) and fit == 9


def test_im12_im20_suggested_kv_memory_closure():
    # IM-20: 160.53 GiB requested − (8.58 + 9.96 + 0.07 + 0.65) GiB − 150 MiB = 141.12 GiB
    requested = 160.53 * GiB
    budget = capacity.kv_budget_bytes(requested / 0.9, 0.9, 8.58 * GiB, (9.96 + 0.07 + 0.65) * GiB + 150 * 2**20)
    assert budget / GiB == pytest.approx(141.12, abs=0.01)


def test_quantized_kv_dtypes_overheads():
    a = arch("llama-3.1-8b")
    b16 = kv_bytes_per_token(a, "bf16")
    assert kv_bytes_per_token(a, "fp8") == b16 / 2
    # int8: 1 B per element + one fp32 scale per token per kv head for K and for V (vLLM)
    assert kv_bytes_per_token(a, "int8") == 32 * 2 * 8 * (128 + 4)
    # int4: 0.5 B per element + fp16 scale and zero-point per group of 64
    assert kv_bytes_per_token(a, "int4") == 32 * 2 * 8 * (64 + 2 * 4)


def test_max_context_inverts_the_cache_size():
    shape = kv_shape(arch("llama-3.1-8b"))
    budget = 10 * GiB
    mc = capacity.max_context(shape, budget, 4, 16)
    assert kv_cache_bytes(shape, 4, mc, 16) <= budget < kv_cache_bytes(shape, 4, mc + 16, 16)
    sw = kv_shape(arch("gemma-2-9b"))
    mc = capacity.max_context(sw, budget, 2, 16)
    assert kv_cache_bytes(sw, 2, mc, 16) <= budget < kv_cache_bytes(sw, 2, mc + 16, 16)
    assert np.isinf(capacity.max_context(kv_shape(arch("mistral-7b")), budget, 1, 16))


def test_vectorized_grid_matches_scalar_calls():
    shape = kv_shape(arch("gemma-2-27b"), "fp8", 2)
    B, S = np.meshgrid([1, 3, 64], [100, 4096, 5000, 131_072], indexing="ij")
    vec = kv_cache_bytes(shape, B.ravel(), S.ravel(), 16)
    one = [kv_cache_bytes(shape, b, s, 16) for b, s in zip(B.ravel(), S.ravel(), strict=True)]
    assert vec.tolist() == [float(x) for x in one]


# --- the command ---------------------------------------------------------------------------------


def test_cli_rows_and_contract_keys(cli):
    r = cli("kv-cache", "llama-3.1-70b", "--chip", "h100-sxm", "--tp", "4", "--batch", "1,32", "--context", "8Ki", "--json")
    assert r.code == 0
    rows = r.json["rows"]
    assert [row["batch"] for row in rows] == [1, 32]
    for key in ("batch", "context", "kv_cache_bytes", "kv_cache_bytes_per_device", "max_batch"):
        assert key in rows[0]
    # 8192 tokens × 320 KiB/token = 2.5 GiB per sequence in total, a quarter per device at TP 4
    assert rows[0]["kv_cache_bytes"] == 8192 * 327_680
    assert rows[1]["kv_cache_bytes_per_device"] == 32 * 8192 * 327_680 / 4


def test_cli_budget_exit_1_names_rows(cli):
    r = cli("kv-cache", "llama-3.1-8b", "--batch", "1,64", "--context", "32k", "--budget", "80GiB", "--json")
    assert r.code == 1
    assert "batch 64" in " ".join(r.json["warnings"])


def test_cli_does_not_fit_says_by_how_much(cli):
    r = cli("kv-cache", "llama-2-70b", "--chip", "h100-sxm", "--json")
    assert r.code == 1 and "short by" in r.json["warnings"][0]


def test_cli_impossible_tp_exit_2(cli):
    r = cli("kv-cache", "llama-3.1-8b", "--tp", "3")
    assert r.code == 2 and "--tp 3" in r.err


def test_cli_bad_kv_dtype(cli):
    assert cli("kv-cache", "gpt2", "--kv-dtype", "fp4").code == 2


def test_cli_chart_on_a_terminal_for_one_dimensional_sweeps(cli):
    args = ("kv-cache", "llama-3.1-8b", "--context", "4k:32k:x2", "--chip", "h100-sxm")
    assert "memory per device vs context" in cli(*args, tty=True, width=140).out
    assert "memory per device vs context" not in cli(*args).out  # not into a pipe
    assert "memory per device vs context" not in cli(*args[:-2], "--batch", "1,2", tty=True, width=140).out


@settings(max_examples=200, deadline=None)
@given(model=st.sampled_from(["llama-3.1-8b", "gemma-2-9b", "mistral-7b", "deepseek-v3", "falcon-40b"]),
       context=st.integers(1, 200_000), budget_gib=st.floats(0.01, 500), block=st.sampled_from([None, 1, 16, 64]))
def test_max_batch_is_the_largest_batch_that_fits(model, context, budget_gib, block):
    shape = kv_shape(arch(model))
    budget = budget_gib * GiB
    fit, _ = capacity.max_batch(shape, budget, context, block)
    fit = int(fit)
    assert kv_cache_bytes(shape, fit, context, block) <= budget * (1 + 1e-12)
    if block in (None, 1):  # unpaged: one more sequence never fits
        assert kv_cache_bytes(shape, fit + 1, context, block) > budget


@settings(max_examples=200, deadline=None)
@given(model=st.sampled_from(["llama-3.1-8b", "gemma-2-9b", "mistral-7b"]), b=st.integers(1, 64),
       s1=st.integers(1, 100_000), s2=st.integers(1, 100_000))
def test_cache_grows_with_context_and_never_exceeds_the_uncapped_size(model, b, s1, s2):
    shape = kv_shape(arch(model))
    lo, hi = sorted((s1, s2))
    assert kv_cache_bytes(shape, b, lo) <= kv_cache_bytes(shape, b, hi)
    assert kv_cache_bytes(shape, b, hi) <= b * hi * shape.bytes_per_token
