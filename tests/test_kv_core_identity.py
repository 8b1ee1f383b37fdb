"""kv_cache_bytes, vectorized and computed in place (issue 25), equals the formula of its docstring evaluated one
point at a time in plain Python: paged, every layer holds ceil(tokens / block) · block tokens, a sliding layer at
most its window; bytes = batch · Σ layers' tokens · bytes per token and layer."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aicalc.core.kv_cache import KVShape, kv_cache_bytes


def _scalar(shape: KVShape, b: float, s: float, block: int | None) -> float:
    if block:
        full = math.ceil(s / block) * block
        window = math.ceil(min(s, shape.window) / block) * block if shape.sliding_layers else 0
    else:
        full, window = s, min(s, shape.window) if shape.sliding_layers else 0
    return b * (shape.full_layers * full + shape.sliding_layers * window) * shape.bytes_per_token_layer


SHAPES = [KVShape(4096.0, 32, 0, 0), KVShape(2048.0, 21, 21, 4096), KVShape(1152.0, 0, 28, 512),
          KVShape(576.0 * 1.0625, 61, 0, 0), KVShape(0.5, 3, 5, 7)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("block", [None, 1, 16, 256])
def test_vectorized_equals_the_scalar_formula(shape, block):
    rng = np.random.default_rng(7)
    B = rng.integers(1, 1 << 14, 400).astype(np.float64)
    S = np.concatenate([rng.integers(1, 1 << 30, 200), rng.integers(1, 9000, 200)]).astype(np.float64)
    got = kv_cache_bytes(shape, B, S, block)
    want = [_scalar(shape, float(b), float(s), block) for b, s in zip(B, S, strict=True)]
    assert got.tolist() == want
    one = kv_cache_bytes(shape, 3, 5000.0, block)  # scalars in, a scalar out
    assert float(one) == _scalar(shape, 3.0, 5000.0, block) and np.ndim(one) == 0
