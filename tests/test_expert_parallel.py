"""Expert parallelism and attention data parallelism inside a serving replica (roofline, serve)."""

import json
import math

import numpy as np
import pytest

import aicalc
from aicalc.api.roofline import roofline
from aicalc.core.moe import experts_touched, imbalance, padded_rows

# DeepSeek-V3 from its config.json: 61 layers, the first 3 dense; 256 routed experts of FFN 2048, hidden 7168
H, E, FE, LM = 7168, 256, 2048, 58
ROUTED = LM * E * 3 * H * FE  # gate, up and down of every routed expert
TOTAL = 671_026_404_352  # transformers' count (presets/models/deepseek-v3.yaml)
VOCAB_TABLES = 2 * 129280 * H  # parameters of the embedding and the LM head, bf16 in the fp8 release


def test_attention_dp_replicates_all_but_the_routed_experts():
    """DEP8 on 8 chips: each chip holds 1/8 of the routed experts and a whole copy of everything else
    (attention TP 1); fp8 linears at 1 byte, vocabulary tables at 2, norms at 2 (a rounding here)."""
    r = roofline("deepseek-v3", "h200", 8, 1000, 1000, tp=8, ep=8, attention_dp=8)
    rest = TOTAL - ROUTED
    expected = ROUTED / 8 + rest + VOCAB_TABLES  # the vocabulary tables at 1 B in rest, + 1 B more
    assert r.weights_bytes_per_device[0] == pytest.approx(expected, rel=0.002)
    assert int(r.ep[0]) == 8 and int(r.attention_dp[0]) == 8


def test_attention_dp_splits_the_mla_cache_over_the_groups():
    """MLA caches one latent per token, replicated on every TP rank; with attention DP each rank holds only its
    own sequences' latents: 1/8 of the TP8 cache per device for the same 64 sequences."""
    tp8 = roofline("deepseek-v3", "h200", 64, 1000, 1000, tp=8)
    dep8 = roofline("deepseek-v3", "h200", 64, 1000, 1000, tp=8, ep=8, attention_dp=8)
    assert dep8.kv_cache_bytes_per_device[0] == pytest.approx(tp8.kv_cache_bytes_per_device[0] / 8, rel=1e-9)
    per_token = (512 + 64) * 2 * 61  # kv_lora_rank + rope dims, bf16, every layer
    assert tp8.kv_cache_bytes_per_device[0] == pytest.approx(64 * 2000 * per_token, rel=1e-9)


def test_expert_flops_are_conserved_across_the_replica():
    """However the experts are split, the replica computes every routed copy once: per-device FLOPs of the expert
    GEMMs times the chips = tokens · k · 2 · (gate/up + down) (busiest-rank imbalance divided out)."""
    B, T = 512, 1
    r = roofline("deepseek-v3", "h200", B, 1000, 1000, tp=8, ep=8, attention_dp=8)
    ops = {o.name: o for o in r.meta["decode"].ops}
    per_device = float(np.ravel(ops["moe_up"].flop)[0] + np.ravel(ops["moe_down"].flop)[0])
    imb = float(imbalance(B * T * 8, 8))
    assert per_device * 8 / imb == pytest.approx(B * T * 8 * 2 * 3 * H * FE * LM, rel=1e-9)


def test_imbalance_matches_a_simulation_of_uniform_routing():
    """The expected busiest-rank load over the mean, against a Monte Carlo draw of multinomial loads."""
    rng = np.random.default_rng(0)
    for copies, ep in ((4096, 8), (512, 8), (2048, 64)):
        loads = rng.multinomial(copies, [1 / ep] * ep, size=4000)
        simulated = loads.max(axis=1).mean() / (copies / ep)
        assert float(imbalance(copies, ep)) == pytest.approx(simulated, rel=0.08)
    assert float(imbalance(1000, 1)) == 1.0


def test_experts_touched_and_padding():
    """All E experts are reached by many tokens, k of them by one; a reached expert computes at least one tile."""
    assert float(experts_touched(256, 8, 1)) == pytest.approx(8.0)
    assert float(experts_touched(256, 8, 10_000)) == pytest.approx(256.0)
    assert float(experts_touched(256, 8, 10_000, 8)) == pytest.approx(32.0)
    assert float(padded_rows(3, 64)) == 64 and float(padded_rows(1000, 64)) == 1032


@pytest.mark.parametrize("args, needle", [
    (["deepseek-v3", "--ep", "3", "--tp", "3"], "does not divide the 256 experts"),
    (["llama-3.1-8b", "--ep", "2", "--tp", "2"], "has no experts"),
    (["deepseek-v3", "--tp", "8", "--attention-dp", "3"], "must divide the 8 chips"),
    (["deepseek-v3", "--tp", "4", "--ep", "8"], "must divide the 4 chips"),
])
def test_layouts_no_engine_runs_are_one_line_and_exit_2(cli, args, needle):
    r = cli("roofline", *args, "--chip", "h200")
    assert r.code == 2 and needle in r.err and r.err.count("\n") == 1, r.err


def test_rows_report_ep_and_attention_dp(cli):
    for cmd in (["roofline", "--batch", "64"], ["serve", "--concurrency", "64"]):
        r = cli(cmd[0], "deepseek-v3", "--chip", "h200", "--tp", "8", "--ep", "8", "--attention-dp", "8",
                *cmd[1:], "--json")
        assert r.code == 0, r.err
        rows = json.loads(r.out)["rows"]
        assert all(row["ep"] == 8 and row["attention_dp"] == 8 for row in rows)


def test_dp_attention_raises_deepseek_decode_throughput_at_load():
    """SGLang's DP attention for DeepSeek "achieves up to 1.9x decoding throughput improvement" over TP (LMSYS,
    "SGLang v0.4", 2024-12-04): it removes the MLA cache's replication and its compute. At a large batch DEP8 must
    beat TP8 on the same 8 chips, and by no more than about 2x."""
    kw = dict(prompt=1000, gen=1000)
    tp8 = aicalc.serve("deepseek-v3", "h200", 256, tp=8, **kw)
    dep8 = aicalc.serve("deepseek-v3", "h200", 256, tp=8, ep=8, attention_dp=8, **kw)
    ratio = dep8.output_tokens_per_s[0] / tp8.output_tokens_per_s[0]
    assert 1.0 < ratio < 2.5


def test_the_deployment_search_tries_expert_and_attention_data_parallelism_for_moe():
    """An 8-chip DeepSeek-V3 question: each TP degree is also tried as EP over the replica's chips and as DEP
    (SGLang/TensorRT-LLM), rows say which; a dense model gets plain TP only."""
    r = aicalc.search_deployments("deepseek-v3", ["h200"], 8, prompt=1000, gen=1000, max_ttft=2, max_tpot=0.1,
                                  disaggregate=False)
    layouts = {(row["tp"], row["ep"], row["attention_dp"]) for row in r.rows()}
    assert {(8, 1, 1), (8, 8, 1), (8, 8, 8)} <= layouts
    assert r.rows()[0]["dtype"] == "fp8"  # the release's format, named
    dense = aicalc.search_deployments("llama-3.1-8b", ["h100-sxm"], 2, disaggregate=False)
    assert {(row["ep"], row["attention_dp"]) for row in dense.rows()} == {(1, 1)}


def test_traffic_simulation_and_fleet_take_expert_and_attention_data_parallelism():
    """A DEP8 replica's attention groups each cache only their own sequences' MLA latents, so it holds more blocks
    than TP8 replicates (the KV budget per device is smaller: everything but the experts is replicated per group,
    so not a full 8×); the fleet search sizes MoE layouts too and says which."""
    from aicalc.api.traffic import Layout, replica

    tp8 = replica("deepseek-v3", Layout("h200", 8, "fp8", "bf16"))
    dep8 = replica("deepseek-v3", Layout("h200", 8, "fp8", "bf16", 8, 8))
    assert 2 * tp8.kv_blocks < dep8.kv_blocks < 8 * tp8.kv_blocks
    r = aicalc.simulate("deepseek-v3", "h200", rate=2, tp=8, ep=8, attention_dp=8, prompt=1000, gen=200,
                        num_requests=100)
    assert r.requests[0] == 100 and math.isfinite(r.p99_tpot_s[0])
    f = aicalc.size_fleet("deepseek-v3", ["h200"], rate=2, prompt=1000, gen=200, max_ttft="2s", max_tpot="100ms",
                          num_requests=100, disaggregate=False)
    assert {(row["ep"], row["attention_dp"]) for row in f.rows()} >= {(1, 1), (8, 8)}


def test_redundant_experts_let_ep_divide_the_slots_and_hold_their_weights():
    # SGLang's DeepSeek decode on 72 GPUs: 256 experts + 32 EPLB replicas = 288 slots, 4 per rank; each rank holds
    # R/E more of the routed experts' bytes than without replicas, split over the EP ranks
    from aicalc.api.catalog import load_model
    from aicalc.core.params import routed_expert_params
    from aicalc.errors import ParameterError

    with pytest.raises(ParameterError, match="does not divide the 256 experts"):
        aicalc.roofline("deepseek-v3", "h100-sxm", batch=72, prompt=64, gen=8, tp=72, ep=72, attention_dp=72)
    kw = dict(batch=72, prompt=64, gen=8, tp=64, ep=64, attention_dp=64)
    plain = aicalc.roofline("deepseek-v3", "h100-sxm", **kw)
    extra = aicalc.roofline("deepseek-v3", "h100-sxm", redundant_experts=64, **kw)
    arch = load_model("deepseek-v3").arch
    fp8_block = 1.0 + 4.0 / (128 * 128)  # DeepSeek-V3's release: fp8 with an fp32 scale per 128x128 block
    added = routed_expert_params(arch) * 64 / 256 / 64 * fp8_block
    got = float(extra["weights_bytes_per_device"][0]) - float(plain["weights_bytes_per_device"][0])
    assert got == pytest.approx(added, rel=1e-3)
    ok = aicalc.roofline("deepseek-v3", "h100-sxm", batch=72, prompt=64, gen=8, tp=72, ep=72, attention_dp=72,
                         redundant_experts=32)
    assert int(ok["redundant_experts"][0]) == 32
    with pytest.raises(ParameterError, match="256 experts \\+ 8 redundant"):
        aicalc.roofline("deepseek-v3", "h100-sxm", redundant_experts=8, **{**kw, "tp": 72, "ep": 72,
                                                                            "attention_dp": 72})


def test_redundant_experts_need_expert_parallelism(cli):
    r = cli("roofline", "deepseek-v3", "--tp", "8", "--redundant-experts", "8")
    assert r.code == 2 and "ep > 1" in r.err
