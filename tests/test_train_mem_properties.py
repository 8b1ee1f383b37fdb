"""Properties every layout must satisfy, over random configurations (hypothesis)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aicalc.catalog import store
from aicalc.core.train_peak import TrainSetup, evaluate

ARCH = {m: store.resolve_model(m).arch for m in ("llama-3.1-8b", "llama-2-13b", "mixtral-8x7b")}


def peak(model, **g):
    grid = {k: np.asarray([float(v)]) for k, v in {"batch": 1, "seq": 2048, "dp": 1, "tp": 1, "pp": 1, "zero": 0,
                                                    **g}.items()}
    return float(evaluate(ARCH[model], TrainSetup(), grid)["peak_bytes"][0])


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(list(ARCH)), dp=st.sampled_from([2, 4, 8, 64]), batch=st.integers(1, 8),
       seq=st.sampled_from([512, 2048, 8192]))
def test_higher_zero_stages_never_need_more_memory(model, dp, batch, seq):
    peaks = [peak(model, dp=dp, zero=z, batch=batch, seq=seq) for z in range(4)]
    assert all(a >= b for a, b in zip(peaks, peaks[1:], strict=False)), peaks


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(list(ARCH)), zero=st.integers(1, 3), batch=st.integers(1, 8))
def test_more_data_parallel_shards_never_need_more_memory(model, zero, batch):
    peaks = [peak(model, dp=dp, zero=zero, batch=batch) for dp in (2, 4, 8, 16)]
    assert all(a >= b for a, b in zip(peaks, peaks[1:], strict=False)), peaks


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(list(ARCH)), b1=st.integers(1, 16), b2=st.integers(1, 16))
def test_bigger_micro_batches_never_need_less_memory(model, b1, b2):
    lo, hi = sorted((b1, b2))
    assert peak(model, batch=lo) <= peak(model, batch=hi)
