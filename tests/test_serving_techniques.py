"""Speculative decoding and prefix caching in serve: oracles and the physics the model must show."""

import numpy as np
import pytest

import aicalc
from aicalc.core.speculative import expected_tokens


@pytest.mark.parametrize("a, k, tokens", [(0.8, 4, (1 - 0.8**5) / 0.2), (1.0, 4, 5.0), (0.0, 4, 1.0),
                                          (0.6, 1, 1.6)])
def test_expected_tokens_per_round_leviathan_eq1(a, k, tokens):
    assert float(expected_tokens(a, k)) == pytest.approx(tokens)


def test_speculation_pays_at_small_batch_and_fades_as_decode_turns_compute_bound():
    r = aicalc.serve("llama-3.1-70b", "h100-sxm", concurrency=[1, 8, 64, 256], tp=4, draft="llama-3.2-3b",
                     draft_tokens=4, acceptance=0.8)
    s = r.speculative_speedup
    assert s[0] > 1.5 and np.all(np.diff(s) < 0) and s[-1] < 1.1


def test_a_draft_that_is_never_accepted_slows_decoding():
    r = aicalc.serve("llama-3.1-8b", "h100-sxm", concurrency=1, draft="llama-3.2-3b", acceptance=0.01)
    assert r.speculative_speedup[0] < 1.0


def test_draft_heads_and_draft_memory():
    base = aicalc.serve("llama-3.1-8b", "h100-sxm", concurrency=8)
    eagle = aicalc.serve("llama-3.1-8b", "h100-sxm", concurrency=8, draft="eagle", draft_tokens=3, acceptance=0.75)
    assert eagle.weights_bytes_per_device[0] > base.weights_bytes_per_device[0]  # one more layer
    assert eagle.tokens_per_target_pass[0] == pytest.approx((1 - 0.75**4) / 0.25)
    with pytest.raises(aicalc.ParameterError, match="tokenizer"):
        aicalc.serve("llama-3.1-8b", "h100-sxm", draft="llama-2-7b")


def test_prefix_cache_cuts_prefill_and_shares_its_blocks():
    """A 75 % hit leaves a quarter of a long prompt to prefill (TTFT falls towards a quarter) and holds the shared
    prefix once per replica instead of once per sequence."""
    cold = aicalc.serve("llama-3.1-8b", "h100-sxm", concurrency=16, prompt=8192, gen=256)
    warm = aicalc.serve("llama-3.1-8b", "h100-sxm", concurrency=16, prompt=8192, gen=256, prefix_hit=0.75)
    assert 0.25 < warm.ttft_s[0] / cold.ttft_s[0] < 0.45
    per_token = aicalc.kv_cache("llama-3.1-8b", context=1, block_size=None).kv_bytes_per_token[0]
    shared = 6144 * per_token
    expect = cold.kv_cache_bytes_per_device[0] - 15 * shared  # 16 sequences' copies of the prefix become one
    assert warm.kv_cache_bytes_per_device[0] == pytest.approx(expect, rel=1e-3)


def test_cli_speculative_columns(cli):
    r = cli("serve", "llama-3.1-8b", "--chip", "h100-sxm", "--concurrency", "1", "--draft", "eagle",
            "--acceptance", "80%", "--json")
    assert r.code == 0 and r.json["rows"][0]["speculative_speedup"] > 1
    assert cli("serve", "llama-3.1-8b", "--prefix-hit", "1.5").code == 2


def test_deepseek_v3_mtp_speedup_published():
    """DeepSeek-V3 technical report §5.4.3: the MTP module's second-token acceptance is 85-90 %, giving 1.8x
    tokens per second. aicalc with one drafted token at 87.5 % on 8 x H200 (FP8): within 15 % of 1.8x at small
    batch, where the verification pass is still memory-bound."""
    r = aicalc.serve("deepseek-v3", "h200", concurrency=[1, 8], tp=8, dtype="fp8", draft="mtp", draft_tokens=1,
                     acceptance=0.875)
    assert r.speculative_speedup[0] == pytest.approx(1.8, rel=0.15)


def test_roofline_prices_speculative_decoding_like_serve():
    """The same round (K draft passes + one target pass over K + 1 tokens) in roofline: the speed-up shrinks as
    the batch grows, and at batch 1 it lies below the expected tokens per round (the draft passes cost time)."""
    r = aicalc.roofline("llama-3.1-70b", "h100-sxm", batch=[1, 8, 64, 256], tp=4, draft="llama-3.2-3b",
                        draft_tokens=4, acceptance=0.8)
    s = r.columns["speculative_speedup"]
    assert all(a > b for a, b in zip(s, s[1:], strict=False)), s
    assert 1.0 < s[0] < float(expected_tokens(0.8, 4))
    plain = aicalc.roofline("llama-3.1-70b", "h100-sxm", batch=[1, 8, 64, 256], tp=4)
    assert (r.columns["weights_bytes_per_device"] > plain.columns["weights_bytes_per_device"]).all()
    assert aicalc.roofline("llama-3.1-8b", "h100-sxm", draft="llama-3.2-3b",
                           acceptance=0.01).columns["speculative_speedup"][0] < 1.0


def test_roofline_speculative_cli(cli):
    r = cli("roofline", "llama-3.1-8b", "--draft", "eagle", "--draft-tokens", "3", "--acceptance", "75%", "--json")
    assert r.code == 0 and all(row["speculative_speedup"] > 1 for row in r.json["rows"])
    assert r.json["inputs"]["draft"] == "eagle"
