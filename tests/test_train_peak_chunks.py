"""A long grid evaluated in chunks (core.train_peak.evaluate) gives, column by column, what each of its points gives
evaluated alone: the same values, types and shapes, whichever pipeline stage holds the peak (a one-point grid is
evaluated at once, on the path every layout search slice takes)."""

import numpy as np
import pytest

from aicalc.catalog import store
from aicalc.core import train_peak
from aicalc.core.train_peak import TrainSetup, evaluate

SETUPS = [
    ("llama-3.1-8b", TrainSetup(), dict(dp=8.0, tp=1.0, pp=1.0, zero=3.0)),
    ("llama-3.1-8b", TrainSetup(recompute="every-2", attention="eager"), dict(dp=4.0, tp=2.0, pp=5.0, zero=2.0)),
    ("llama-3.1-8b", TrainSetup(lora_rank=8, quant="nf4", framework="litgpt", bnb_keeps_inputs=True),
     dict(dp=2.0, tp=1.0, pp=1.0, zero=3.0)),
    ("mixtral-8x7b", TrainSetup(ep=4, etp=1, framework="megatron", last_stage_layers=8, sp=True),
     dict(dp=4.0, tp=2.0, pp=3.0, zero=1.0)),
    ("deepseek-v3", TrainSetup(ep=8, etp=1), dict(dp=16.0, tp=4.0, pp=8.0, zero=1.0)),
]


@pytest.mark.parametrize("model,setup,layout", SETUPS)
def test_chunks_give_each_points_own_columns(monkeypatch, model, setup, layout):
    monkeypatch.setattr(train_peak, "CHUNK", 16)
    arch = store.resolve_model(model).arch
    rng = np.random.default_rng(3)
    n = 100  # seven chunks, the last one short
    B = rng.integers(1, 16, n).astype(float)
    S = rng.choice([512.0, 2048.0, 8192.0, 32768.0], n)
    zero = rng.integers(0, 4, n).astype(float)  # a layout column that varies, beside ones that do not
    grid = {"batch": B, "seq": S, **{k: np.full(n, v) for k, v in layout.items()}, "zero": zero}
    got = evaluate(arch, setup, grid)
    for i in range(n):
        one = evaluate(arch, setup, {k: v[i:i + 1] for k, v in grid.items()})
        assert list(one) == list(got)
        for k, v in one.items():
            if np.ndim(v) == 0:  # one number for the whole grid (cp not given, params…)
                assert np.ndim(got[k]) == 0 and got[k] == v, k
                continue
            assert np.shape(got[k]) == (n,) and np.asarray(got[k]).dtype == np.asarray(v).dtype, k
            assert got[k][i] == np.asarray(v).reshape(-1)[0], (k, i)
