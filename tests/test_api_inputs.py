"""The library's inputs checked in one place (aicalc.api.inputs, issue 26): every value the command line would
refuse is a ParameterError naming the parameter (never a raw TypeError, ValueError or OverflowError); values numpy
would silently turn into numbers (dates, complex numbers, booleans, masked or multi-dimensional arrays, objects) are
refused; the command line's human strings work; rows are JSON-ready."""

import datetime
import json
from fractions import Fraction

import numpy as np
import pytest

import aicalc
from aicalc import ParameterError

M = "llama-3.1-8b"


def refused(param, call):
    with pytest.raises(ParameterError) as e:
        call()
    assert e.value.param == param, (e.value.param, str(e.value))
    return str(e.value)


@pytest.mark.parametrize("value", ["x", 0, -4, 2.5, 10**400, float("nan"), [8, 16], {}, object(), True, 1 + 0j])
def test_counts_the_command_line_refuses_are_parameter_errors(value):
    refused("lora_rank", lambda: aicalc.train_memory(M, lora_rank=value))
    refused("microbatches", lambda: aicalc.train_memory(M, microbatches=value))
    refused("interleave", lambda: aicalc.train_time(M, interleave=value))
    refused("block_size", lambda: aicalc.kv_cache(M, block_size=value))
    refused("total_chips", lambda: aicalc.search_deployments(M, total_chips=value))
    refused("chips", lambda: aicalc.disaggregated(M, chips=value))
    refused("chips", lambda: aicalc.max_concurrency(M, chips=value))


@pytest.mark.parametrize("value", ["x", -0.1, 1.0, float("nan"), 1 + 0j, "150%"])
def test_shares_the_command_line_refuses_are_parameter_errors(value):
    refused("prefix_hit", lambda: aicalc.serve(M, prefix_hit=value))
    refused("dropout", lambda: aicalc.train_memory(M, dropout=value))


@pytest.mark.parametrize("value, what", [
    (np.datetime64("2020-01-01"), "dates"),  # was batch 18262: days since 1970
    (np.array(["2020-01-01", "2021-01-01"], dtype="datetime64[D]"), "dates"),
    (np.timedelta64(5, "s"), "time spans"),
    (np.array([1 + 0j, 2 + 0j]), "complex"),
    (np.ma.masked_array([1, 2, 3], mask=[0, 1, 0]), "mask"),  # the mask was ignored
    (np.ones((3, 3)), "one-dimensional"),  # was 9 rows
    (np.array([True, False]), "true/false"),
    (np.array([Fraction(1, 2)], dtype=object), "objects"),
    (datetime.date(2020, 1, 1), "objects"),
])
def test_values_numpy_would_misread_are_refused(value, what):
    assert what in refused("batch", lambda: aicalc.kv_cache(M, batch=value, context=1024))
    assert what in refused("concurrency", lambda: aicalc.serve(M, concurrency=value))


def test_text_errors_name_the_parameter():
    assert "cannot be read" in refused("context", lambda: aicalc.kv_cache(M, context="lots"))
    assert "a range is START:STOP" in refused("batch", lambda: aicalc.kv_cache(M, batch="1:8:y"))


def test_human_strings_read_as_the_command_line_reads_them():
    assert aicalc.kv_cache(M, context="8k").kv_cache_bytes[0] == aicalc.kv_cache(M, context=8000).kv_cache_bytes[0]
    a, b = aicalc.serve(M, prefix_hit="75%"), aicalc.serve(M, prefix_hit=0.75)
    assert a.rows() == b.rows()
    # 75% of a 1,024-token prompt is cached: floor(768) tokens, read from the prefix cache
    assert a.prefix_cached_tokens[0] == 768
    assert aicalc.train_memory(M, lora_rank="16").rows() == aicalc.train_memory(M, lora_rank=16).rows()


def test_max_concurrency_holds_prompts_and_gens_to_whole_tokens_as_the_command_line_does():
    refused("prompt", lambda: aicalc.max_concurrency(M, prompt=2.5))
    refused("gen", lambda: aicalc.max_concurrency(M, gen=np.ones((2, 2))))
    refused("prompt", lambda: aicalc.max_concurrency(M, prompt=2**31))  # above the 2^30-token cap


def test_rows_are_json_ready():
    """A non-finite value (roofline's compute_bound_batch is infinite where no batch makes the chip compute-bound)
    is None in rows(), as the command line's JSON writes null."""
    r = aicalc.roofline(M, chip="h100-sxm", batch=[1, 64])
    rows = r.rows()
    json.dumps(rows, allow_nan=False)  # raises on inf or nan
    for key, col in r.columns.items():
        if np.asarray(col).dtype.kind == "f":
            assert [row[key] is None for row in rows] == [not np.isfinite(x) for x in col], key
    table = aicalc.Table({"x": np.array([1.0, np.inf, -np.inf, np.nan])})
    assert [row["x"] for row in table.rows()] == [1.0, None, None, None]
