"""KV bytes equal transformers' own cache, exactly (records of validation/record_kv.py: a forward pass with
use_cache=True on fake tensors, summing the bytes of every cached key/value tensor, and of the conv and recurrent
states of linear-attention and Mamba layers, ``state_bytes``; versions in the file)."""

import json

import pytest

from aicalc.catalog.hf_config import arch_from_config
from aicalc.core.kv_cache import kv_cache_bytes, kv_shape

from conftest import DATA

DOC = json.loads((DATA / "validation" / "kv_cache.json").read_text())
RECORDS = DOC["records"]
# transformers' DynamicCache is aicalc's "hf" engine; StaticCache keeps W tokens per sliding layer, as vLLM does
ENGINE = {"DynamicCache": "hf", "StaticCache": "vllm"}


@pytest.mark.parametrize("rec", RECORDS, ids=[f"{r['name']}-{r['case']}" for r in RECORDS])
def test_kv_bytes_equal_transformers_cache(rec):
    arch = arch_from_config(rec["config"])
    shape = kv_shape(arch, "bf16", 1, engine=ENGINE[rec["cache_class"]])
    # a sparse-attention model's cache also holds the indexer keys, a linear-attention model's its fixed states,
    # DeepSeek-V4's its compressed entries and its compressors' buffered tokens (each recorded apart from the K/V)
    assert kv_cache_bytes(shape, rec["batch"], rec["seq"]) == \
        rec["kv_bytes"] + rec.get("indexer_bytes", 0) + rec.get("state_bytes", 0) + rec.get("compressed_bytes", 0) + \
        rec.get("compressor_state_bytes", 0)
    assert shape.state_bytes * rec["batch"] == rec.get("state_bytes", 0)


def test_records_cover_sliding_windows_below_and_above_and_mla():
    sliding = {r["name"] for r in RECORDS if r["seq"] > 4000 and any(g["layer_type"] == "sliding_attention"
                                                                       for g in r["layer_groups"])}
    assert {"mistral-7b", "gemma-2-9b"} <= sliding
    assert any(r["name"] == "deepseek-v3" for r in RECORDS)
    assert DOC["versions"]["transformers"] and DOC["versions"]["torch"].startswith("2.13.0")


def test_falcon_engines_differ_by_the_broadcast_heads():
    rec = next(r for r in RECORDS if r["name"] == "falcon-40b")
    arch = arch_from_config(rec["config"])  # 128 query heads, 8 kv heads
    assert kv_cache_bytes(kv_shape(arch, engine="vllm"), 1, 16) * 16 == rec["kv_bytes"]


def test_cli_engine_hf_matches_transformers(cli):
    rec = next(r for r in RECORDS if r["name"] == "mistral-7b" and r["seq"] == 4196 and r["cache_class"] == "DynamicCache")
    row = cli("kv-cache", "mistral-7b", "--context", "4196", "--engine", "hf", "--json").json["rows"][0]
    assert row["kv_cache_bytes"] == rec["kv_bytes"]
