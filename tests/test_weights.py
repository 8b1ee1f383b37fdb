"""Weights per device at a storage format under TP, against hand-derived figures."""

import pytest

from aicalc.catalog import store
from aicalc.core.geometry import weight_bytes_per_device
from aicalc.core.params import count_params


def arch(m):
    return store.resolve_model(m).arch


def test_bf16_is_two_bytes_per_param():
    a = arch("llama-2-70b")
    assert weight_bytes_per_device(a, "bf16") == 2 * count_params(a).total  # 137.95 GB (128.5 GiB)


def test_tp_splits_everything_but_norms():
    a = arch("llama-3.1-70b")
    n = count_params(a)
    assert weight_bytes_per_device(a, "bf16", 8) == pytest.approx(2 * (n.total - n.norms) / 8 + 2 * n.norms)


def test_tp_beyond_kv_heads_replicates_k_and_v():
    a = arch("llama-3.1-8b")  # 8 kv heads of 128, hidden 4096, 32 layers
    n = count_params(a)
    kv = 32 * 2 * 4096 * 8 * 128
    # at TP 16 every device holds one whole kv head (1/8 of k, v) instead of 1/16
    expected = 2 * ((n.total - n.norms - kv) / 16 + kv / 8 + n.norms)
    assert weight_bytes_per_device(a, "bf16", 16) == pytest.approx(expected)


def test_int4_blocks_with_16_bit_embeddings():
    a = arch("llama-2-7b")
    n = count_params(a)
    blocks = n.total - n.embedding - n.lm_head - n.norms
    # group-128 int4: 4 + 32/128 bits = 0.53125 B per weight; embedding, head and norms stay 2 B
    assert weight_bytes_per_device(a, "int4") == pytest.approx(blocks * 0.53125 + 2 * (n.embedding + n.lm_head + n.norms))


def test_gguf_covers_every_matrix():
    a = arch("llama-2-7b")
    n = count_params(a)
    assert weight_bytes_per_device(a, "q8_0") == pytest.approx((n.total - n.norms) * 8.5 / 8 + 2 * n.norms)
