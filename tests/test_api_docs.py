"""Every ```python block of docs/api.md runs, and its assertions hold."""

import re

import pytest

from conftest import ROOT

DOC = ROOT / "docs" / "api.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_there_are_examples():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_api_doc_example_runs(code, capsys):
    exec(compile(code, str(DOC), "exec"), {})  # noqa: S102 - our own documentation


def test_constant_columns_are_read_only_views_of_one_number():
    """kv_cache's weights column at a fixed layout is one number at every row: a read-only broadcast view (no
    memory written per row), equal to the weights a one-row call reports."""
    import numpy as np

    import aicalc

    one = aicalc.kv_cache("llama-3.1-8b", batch=1, context=4096, chip="h100-sxm")
    many = aicalc.kv_cache("llama-3.1-8b", batch=np.arange(1, 1001), context=4096, chip="h100-sxm")
    col = many["weights_bytes_per_device"]
    assert col.shape == (1000,) and not col.flags.writeable and col.strides == (0,)
    assert float(col[999]) == float(one["weights_bytes_per_device"][0])


def test_a_tables_one_number_columns_are_read_only_views():
    """serve's replicas, TP and weights per device at one layout are one number at every row: read-only broadcast
    views (api.results.Table, as Block.full gives them), not a column written per row, equal to a one-row call's."""
    import numpy as np

    import aicalc

    one = aicalc.serve("llama-3.1-8b", chip="h100-sxm", concurrency=1)
    many = aicalc.serve("llama-3.1-8b", chip="h100-sxm", concurrency=np.arange(1, 1001))
    for key in ("replicas", "tp", "weights_bytes_per_device"):
        col = many[key]
        assert col.shape == (1000,) and not col.flags.writeable and col.strides == (0,), key
        assert col[999] == one[key][0], key
