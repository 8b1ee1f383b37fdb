"""One home per quantity: the estimators agree with each other where they share a quantity.

- Decode at batch 1 reads every resident weight once, except the embedding table (a gather of one row per
  token): for every weight format, dense presets, TP 1 and 2.
- The KV bytes the decode step reads and writes are the KV cache ``kv_cache`` holds, for every preset and KV
  format (MHA/GQA/MQA, sliding windows, MLA); sparse-attention models read less by design (tests/test_dsa.py).
- The int8 KV of an MLA model carries one fp32 scale per cached latent (deepseek-v3: 576 + 4 = 580 B).
"""

import numpy as np
import pytest

import aicalc
from aicalc.catalog import store
from aicalc.core.dtypes import KV_DTYPES, WEIGHT_BITS
from aicalc.core.forward import ACT_BYTES, formats, forward_ops, shape_of
from aicalc.core.geometry import kv_bytes_per_token_layer, weight_bytes
from aicalc.core.params import count_params

MODELS = [m for m in store.ids("model") if not store.resolve_model(m).arch.encoder]  # encoders decode nothing
DENSE = [m for m in MODELS if store.resolve_model(m).arch.moe is None]


@pytest.mark.parametrize("dtype", list(WEIGHT_BITS))
@pytest.mark.parametrize("model", DENSE)
def test_decode_weight_traffic_is_resident_weights_minus_the_embedding_table(model, dtype):
    arch = store.resolve_model(model).arch
    for tp in (1, 2):
        if arch.heads % tp or (arch.kv_heads % tp and tp % arch.kv_heads):
            continue
        ops = forward_ops(shape_of(arch), formats(dtype), 1.0, 1.0, 100.0, float(tp))
        traffic = sum(float(o.weight_bytes) for o in ops)
        w = weight_bytes(arch, dtype, tp)
        head_reads_table = arch.tied_embeddings  # a tied head reads the table the embedding holds
        vocab_table = arch.vocab * arch.hidden / tp * (w.embedding / (count_params(arch).embedding / tp))
        expected = w.total - w.embedding + (vocab_table if head_reads_table else 0.0)
        assert traffic == pytest.approx(expected, rel=2e-4), (model, dtype, tp)


def test_moe_decode_reads_every_expert_once_the_batch_is_large():
    arch = store.resolve_model("mixtral-8x7b").arch
    ops = forward_ops(shape_of(arch), formats("bf16"), 4096.0, 1.0, 100.0, 1.0)
    traffic = sum(float(o.weight_bytes) for o in ops)
    w = weight_bytes(arch, "bf16", 1)
    assert traffic == pytest.approx(w.total - w.embedding, rel=1e-4)


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize("model", [m for m in MODELS if store.resolve_model(m).arch.indexer is None
                                   and store.resolve_model(m).arch.compressed is None])  # sparse: top-k reads only
def test_decode_kv_traffic_equals_the_kv_cache(model, kv_dtype):
    """A decode step at P cached tokens reads the cache of P + 1 tokens (its own token included, flash
    attention) and writes one token per attention layer: what ``kv_cache`` holds at context P + 1, plus the
    write; a hybrid's recurrent layers (linear attention, Mamba) read and write their state instead (the cache's
    ``state_bytes``), in the delta rule's or the SSD scan's op, not the attention core's."""
    spec = store.resolve_model(model)
    arch, s = spec.arch, shape_of(spec.arch)
    B, P = 4.0, 5000.0
    La = arch.attention_layers
    ops = forward_ops(s, formats("bf16", kv_dtype), B, 1.0, P, 1.0)
    attn = sum(float(o.bytes) for o in ops if o.name.startswith("attn_"))
    q_io = B * s.A * (s.qk_dim + s.v_dim) * ACT_BYTES * La
    writes = B * La * kv_bytes_per_token_layer(arch, kv_dtype, 1)
    cache = aicalc.kv_cache(spec, batch=B, context=P + 1, kv_dtype=kv_dtype, block_size=None)
    state = float(cache.state_bytes_per_device[0]) if arch.linear_layers or arch.mamba_layers else 0.0
    assert attn - q_io - writes == pytest.approx(float(cache.kv_cache_bytes_per_device[0]) - state, rel=1e-12)
    if arch.linear_layers:  # read and written once per step, besides the delta rule's q, k, v, z in and output out
        core = next(o for o in ops if o.name == "linear_core")
        io = B * arch.linear_layers * (s.linear_in + s.linear_out) * ACT_BYTES
        assert float(core.bytes) - io == pytest.approx(2 * state, rel=1e-12)


def test_roofline_and_serve_kv_equal_kv_cache():
    r = aicalc.roofline("gemma-2-9b", "h100-sxm", batch=[1, 8], prompt=6000, gen=1000, kv_dtype="int8", tp=2)
    kv = aicalc.kv_cache("gemma-2-9b", batch=[1, 8], context=7000, kv_dtype="int8", tp=2, block_size=None)
    assert np.allclose(r.kv_cache_bytes_per_device, kv.kv_cache_bytes_per_device, rtol=1e-12)
    s = aicalc.serve("gemma-2-9b", "h100-sxm", concurrency=[1, 8], prompt=6000, gen=1000, kv_dtype="int8", tp=2)
    paged = aicalc.kv_cache("gemma-2-9b", batch=[1, 8], context=6500, kv_dtype="int8", tp=2, block_size=16)  # live
    assert np.allclose(s.kv_cache_bytes_per_device, paged.kv_cache_bytes_per_device, rtol=1e-12)


def test_mla_int8_kv_has_one_scale_per_latent():
    arch = store.resolve_model("deepseek-v3").arch
    latent = arch.mla.kv_lora_rank + arch.mla.qk_rope_head_dim  # 512 + 64
    assert kv_bytes_per_token_layer(arch, "int8") == latent + 4 == 580
    assert aicalc.kv_cache("deepseek-v3", context=1, kv_dtype="int8", block_size=None).kv_bytes_per_token[0] == \
        580 * arch.layers


def test_int4_lm_head_stays_16_bit_in_decode():
    """llama-3.1-8b int4 decode reads the 16-bit LM head (1.05 GB), not a 4.25-bit one."""
    arch = store.resolve_model("llama-3.1-8b").arch
    ops = forward_ops(shape_of(arch), formats("int4"), 1.0, 1.0, 0.0, 1.0)
    head = next(o for o in ops if o.name == "lm_head")
    assert float(head.weight_bytes) == 2 * 128256 * 4096
