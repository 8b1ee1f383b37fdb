"""The library face: typed results of numpy columns, broadcasting, human strings, errors that name parameters."""

import numpy as np
import pytest

import aicalc
from aicalc.errors import AicalcError, ParameterError

GiB = 2**30


def test_import_is_light_and_exposes_the_estimators():
    for name in ("kv_cache", "roofline", "serve", "train_memory", "search_layouts", "train_time", "compare",
                 "load_model", "load_chip", "ParameterError"):
        assert callable(getattr(aicalc, name))
    with pytest.raises(AttributeError):
        aicalc.no_such_thing  # noqa: B018


def test_kv_cache_broadcasts_arrays_and_reads_strings():
    kv = aicalc.kv_cache("llama-3.1-8b", batch=[1, 2, 4], context="128Ki")
    # llama-3.1-8b: 32 layers × 8 kv heads × 128 × 2 (K, V) × 2 B = 128 KiB per token; 128Ki tokens = 16 GiB
    assert list(kv.kv_cache_bytes) == [16 * GiB, 32 * GiB, 64 * GiB]
    assert len(kv) == 3 and kv.rows()[2]["batch"] == 4
    two = aicalc.kv_cache("llama-3.1-8b", batch=[1, 2], context=np.array([131072, 65536]))
    assert list(two.kv_cache_bytes) == [16 * GiB, 16 * GiB]  # element by element, not a grid


def test_results_are_columns_with_rows():
    r = aicalc.roofline("llama-2-7b", "a100-80gb", batch=[1, 8])
    assert isinstance(r.tpot_s, np.ndarray) and r.tpot_s.shape == (2,)
    assert r["tpot_s"] is r.tpot_s
    assert set(r.rows()[0]) == set(r.columns)
    assert r.meta["setup"].chip.id == "a100-80gb"


@pytest.mark.parametrize("call, param, text", [
    (lambda: aicalc.kv_cache("llama-3.1-70b", tp=3), "tp", "tp=3 does not divide the 64 attention heads"),
    (lambda: aicalc.kv_cache("llama-3.1-8b", kv_dtype="fp6"), "kv_dtype", "kv_dtype=fp6 is not one of"),
    (lambda: aicalc.kv_cache("llama-3.1-8b", batch=[1, -2]), "batch", "batch=-2 must be a finite number"),
    (lambda: aicalc.kv_cache("llama-3.1-8b", batch=1.5), "batch", "batch=1.5 must be a whole number"),
    (lambda: aicalc.roofline("llama-2-7b", "a100-80gb", dtype="int4", group_size=0), "group_size", "group_size=0"),
    (lambda: aicalc.train_memory("llama-3.1-8b", quant="nf4"), "quant", "needs lora_rank"),
    (lambda: aicalc.train_time("llama-3.1-8b", recompute="some"), "recompute", "recompute=some is not one of"),
    (lambda: aicalc.serve("llama-3.1-8b", chips=3, tp=2), "chips", "chips=3 is not a positive multiple of tp=2"),
])
def test_errors_name_the_parameter(call, param, text):
    with pytest.raises(ParameterError) as e:
        call()
    assert e.value.param == param and text in str(e.value)
    assert "--" not in str(e.value)  # the library never names a flag


def test_the_cli_names_the_flag(cli):
    r = cli("kv-cache", "llama-3.1-70b", "--tp", "3")
    assert r.code == 2 and "--tp 3 does not divide the 64 attention heads" in r.err
    r = cli("train-mem", "llama-3.1-8b", "--offload", "params")
    assert r.code == 2 and "--offload params needs --zero 3" in r.err


def test_models_from_a_config_dict_and_objects():
    cfg = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
           "max_position_embeddings": 131072}
    a = aicalc.kv_cache(cfg, context=1000, block_size=None).kv_cache_bytes[0]
    spec = aicalc.load_model("llama-3.1-8b")
    b = aicalc.kv_cache(spec, context=1000, block_size=None).kv_cache_bytes[0]
    assert a == b == 32 * 8 * 128 * 2 * 2 * 1000
    assert aicalc.load_chip("h100-sxm").memory_bytes == 80 * GiB  # the preset: 80 GiB of HBM3
    with pytest.raises(AicalcError):
        aicalc.load_model("no-such-model")


def test_too_many_configurations_are_refused_before_work():
    with pytest.raises(ParameterError, match="configurations"):
        aicalc.kv_cache("llama-3.1-8b", batch=np.ones(1_000_001), context=4096)


def test_train_time_from_a_given_mfu():
    """tokens/s = chips · MFU · peak / model FLOPs per token (TT-01), whatever the layout."""
    r = aicalc.train_time("llama-3.1-8b", "h100-sxm", 1e12, dp=8, mfu=0.4)
    assert r.tokens_per_s[0] == pytest.approx(8 * 0.4 * 989.4e12 / r.model_flop_per_token[0], rel=1e-3)
    assert r.total_time_s[0] == pytest.approx(1e12 / r.tokens_per_s[0])


@pytest.mark.parametrize("call", [
    lambda: aicalc.train_time("llama-3.1-8b", "h100-sxm", [1e12, 2e12], dp=8),
    lambda: aicalc.train_time("llama-3.1-8b", "h100-sxm", 1e12, dp=8, cp=[1, 2]),
    lambda: aicalc.compare("llama-3.1-8b", ["h100-sxm"], seq=[2048, 4096]),
    lambda: aicalc.compare("llama-3.1-8b", ["h100-sxm"], years=[1, 3]),
    lambda: aicalc.disaggregated("llama-3.1-8b", "h100-sxm", 8, prompt=[512, 1024]),
    lambda: aicalc.serve("llama-3.1-8b", "h100-sxm", price=[1.0, 2.0]),
])
def test_a_sweep_where_one_value_is_taken_is_refused_not_read_as_its_first(call):
    """A list where the estimate takes one number used to be read as its first element, silently."""
    with pytest.raises(ParameterError, match="takes one number, not a sweep"):
        call()
