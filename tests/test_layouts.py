"""Training layouts as the frameworks run them (issue 21 item 4): uneven pipeline stages, expert parallelism folded
over tensor × data ranks with its own expert TP, sequence-parallel padding, no Megatron SP on TPU. Figures come from
the frameworks' own documents and code (quoted beside each), or are computed by hand from the model's config."""

from __future__ import annotations

import pytest

import aicalc
from aicalc.cli import main
from aicalc.core.stages import _chunks_default, describe, rank_layers, stage_candidates

# Llama 3.1 405B (config.json): hidden 16384, 126 layers, 128 heads, 8 KV heads of 128, FFN 53248, vocab 128256
H, L405, KV, F, V = 16384, 126, 8 * 128, 53248, 128256
LAYER_405B = 2 * H * H + 2 * H * KV + 3 * H * F + 2 * H  # q, o; k, v; gate, up, down; two RMSNorm weights


def test_llama3_405b_on_pp16_loses_one_layer_on_the_first_and_last_stages():
    # Llama 3 (arXiv 2407.21783 §3.3.2): "we reduce one Transformer layer each from the first and the last stages"
    assert [n for n, _ in rank_layers(126, 16)] == [7] + [8] * 14 + [7]
    # "the first model chunk on the first stage has only the embedding" with V = 8 chunks per rank
    chunks = _chunks_default(126, 16 * 8)
    assert chunks[0] == 0 and chunks[-1] == 0 and set(chunks[1:-1]) == {1}
    assert describe(126, 16, 8) == "7 + 8×14 + 7"
    assert describe(126, 8) == "15 + 16×6 + 15"


def test_bloom_pp12_first_stage_holds_the_embedding_and_five_blocks():
    # bigscience tr11-176B README: "pp rank 0: [embed | 5 transformer blocks]" (70 layers on PP12)
    ranks = [n for n, _ in rank_layers(70, 12)]
    assert ranks[0] == 5 and sum(ranks) == 70 and max(ranks) == 6


def test_given_first_and_last_stages_match_megatron_bridge_deepseek_layouts():
    # Megatron-Bridge recipes/deepseek/deepseek_v3.py layout map: (4, 1): 16 | 16 | 16 | 13 + mtp + loss;
    # (8, 1): 8 | 8 × 6 | 5; (16, 1): 4 | 4 × 14 | 1
    assert [n for n, _ in rank_layers(61, 4, first=16, last=13)] == [16, 16, 16, 13]
    assert [n for n, _ in rank_layers(61, 8, first=8, last=5)] == [8] * 7 + [5]
    assert [n for n, _ in rank_layers(61, 16, first=4, last=1)] == [4] * 15 + [1]


def test_moe_layers_per_stage_follow_the_dense_prefix():
    # DeepSeek-V3: first_k_dense_replace 3, so the first of 15 + 16 + 16 + 14 layers holds 12 MoE layers
    moe = (False,) * 3 + (True,) * 58
    c = stage_candidates(61, 4, moe_layers=moe)
    assert c["first"] == (0, 15, 12) and c["middle"] == (1, 16, 16) and c["last"] == (3, 14, 14)


def test_memory_reports_the_fullest_middle_stage_when_it_is_the_worst():
    # PP16 over 126 layers: rank 1 holds 8 layers and 15 micro-batches in flight (120 layer-micro-batches) against
    # the first rank's 7 × 16 = 112 plus the embedding; its parameters are 8 layers / tp
    r = aicalc.train_memory("llama-3.1-405b", batch=1, seq=4096, pp=16, tp=8, dp=1, precision="bf16",
                            optimizer="sgd", framework="megatron", sp=True)
    assert int(r["stage"][0]) == 1 and int(r["stage_layers"][0]) == 8
    assert float(r["params_per_device"][0]) == pytest.approx(8 * LAYER_405B / 8, rel=1e-9)
    assert float(r["weights_bytes"][0]) == pytest.approx(2 * 8 * LAYER_405B / 8, rel=1e-9)


def test_memory_of_the_first_stage_with_the_embedding_by_hand():
    # --first-stage-layers 12 makes the first rank the worst: 12 layers + the 128256 × 16384 embedding, / tp 8
    r = aicalc.train_memory("llama-3.1-405b", batch=1, seq=4096, pp=16, tp=8, dp=1, precision="bf16",
                            optimizer="sgd", framework="megatron", sp=True, first_stage_layers=12)
    assert int(r["stage"][0]) == 0 and int(r["stage_layers"][0]) == 12
    assert float(r["params_per_device"][0]) == pytest.approx((12 * LAYER_405B + V * H) / 8, rel=1e-9)


def test_expert_states_shard_over_the_expert_data_parallel_group():
    # Qwen3-30B-A3B (config.json): 48 layers, 128 experts of FFN 768 on hidden 2048. With EP 8 over dp 8 the expert
    # data-parallel group is 8·1/(8·1) = 1 rank: ZeRO-1 cannot shard the experts' master and Adam states (12 B/param
    # in bf16-mixed), while the dense part shards over all 8
    experts = 48 * 128 * 3 * 2048 * 768
    r = aicalc.train_memory("qwen3-30b-a3b", batch=1, seq=2048, dp=8, zero=1, ep=8, precision="bf16-mixed")
    total = int(r["params"][0])
    dense = total - experts
    assert float(r["optimizer_bytes"][0]) == pytest.approx(12 * dense / 8 + 12 * experts / 8, rel=1e-9)
    r = aicalc.train_memory("qwen3-30b-a3b", batch=1, seq=2048, dp=16, zero=1, ep=8, precision="bf16-mixed")
    assert float(r["optimizer_bytes"][0]) == pytest.approx(12 * dense / 16 + 12 * experts / 8 / 2, rel=1e-9)


def test_ep_folds_over_tensor_ranks_with_expert_tp_1():
    # Megatron-Bridge 25.09: Qwen3-235B-A22B on 64 GB200, TP 2 × EP 64 (validation case MO-32): runs with expert TP 1
    r = aicalc.train_time("qwen3-235b-a22b", "gb200", 1e12, seq=4096, global_batch=1024, tp=2, dp=32, ep=64, etp=1,
                          precision="fp8")
    assert float(r["tokens_per_s"][0]) > 0 and int(r["etp"][0]) == 1
    # experts: 94 layers × 128 × 3·4096·1536 over ep·etp = 64 ranks; dense / tp 2
    experts = 94 * 128 * 3 * 4096 * 1536
    m = aicalc.train_memory("qwen3-235b-a22b", seq=4096, tp=2, dp=32, ep=64, etp=1, framework="megatron", sp=True)
    dense = int(m["params"][0]) - experts
    assert float(m["params_per_device"][0]) == pytest.approx(dense / 2 + experts / 64, rel=1e-9)


def test_an_ep_group_inside_the_nvlink_domain_exchanges_faster():
    # TP 2 × EP 8: with expert TP 1 the EP group spans 8 consecutive ranks (one DGX), with expert TP = TP 16 (two)
    kw = dict(seq=4096, global_batch=256, tp=2, dp=8, ep=8, precision="fp8")
    inside = aicalc.train_time("qwen3-30b-a3b", "h100-sxm", 1e12, etp=1, **kw)
    across = aicalc.train_time("qwen3-30b-a3b", "h100-sxm", 1e12, etp=2, **kw)
    assert float(inside["ep_comm_s"][0]) < float(across["ep_comm_s"][0])
    # with EP, expert TP defaults to 1 (Megatron-Bridge's MoE recipes, torchtitan)
    default = aicalc.train_time("qwen3-30b-a3b", "h100-sxm", 1e12, **kw)
    assert int(default["etp"][0]) == 1 and float(default["ep_comm_s"][0]) == float(inside["ep_comm_s"][0])


def test_pipeline_time_follows_the_bottleneck_stage():
    # Llama 3.1 70B, 80 layers on PP4 with the last stage 14 layers: a first stage of 22, 24, 26 layers (middles
    # 22, 21, 20) is the bottleneck, so each two more layers add the same time
    def pipe(first):
        r = aicalc.train_time("llama-3.1-70b", "h100-sxm", 1e12, seq=4096, global_batch=64, tp=8, pp=4, dp=1,
                              first_stage_layers=first, last_stage_layers=14)
        assert int(r["max_stage_layers"][0]) == first
        return float(r["pipeline_s"][0])

    p22, p24, p26 = pipe(22), pipe(24), pipe(26)
    assert p26 - p24 == pytest.approx(p24 - p22, rel=1e-9) and p24 > p22


def test_sequence_parallelism_pads_a_sequence_tp_does_not_divide():
    kw = dict(batch=1, tp=8, pp=1, dp=1, framework="megatron", sp=True)
    padded = aicalc.train_memory("llama-3.1-8b", seq=4100, **kw)
    exact = aicalc.train_memory("llama-3.1-8b", seq=4104, **kw)  # 4100 up to a multiple of 8
    assert any("padded to 4104" in w for w in padded.warnings)
    assert float(padded["activations_bytes"][0]) == float(exact["activations_bytes"][0])
    assert int(padded["seq"][0]) == 4100


def test_palm_tp12_at_2048_tokens_runs_on_tpu_v4():
    # PaLM 540B: "12-way model parallelism" at sequence 2048 on TPU v4 (validation case TP-01); XLA shards the
    # activations over the model axis, so nothing is padded
    arch = {"model_type": "llama", "hidden_size": 18432, "num_hidden_layers": 118, "num_attention_heads": 48,
            "num_key_value_heads": 1, "head_dim": 256, "intermediate_size": 73728, "vocab_size": 256000,
            "max_position_embeddings": 2048}
    m = aicalc.train_memory(arch, batch=1, seq=2048, tp=12, dp=512, zero=3, framework="megatron", sp=True,
                            chip="tpu-v4")
    assert not m.warnings
    code = main(["train-time", "llama-3.1-8b", "--chip", "tpu-v4", "--chips", "12", "--tp", "4", "--seq", "2050",
                 "--global-batch", "12"])
    assert code in (0, 1)


@pytest.mark.parametrize("argv, needle", [
    (["train-mem", "llama-3.1-8b", "--pp", "4", "--first-stage-layers", "30", "--last-stage-layers", "1"],
     "--first-stage-layers 30 leaves a pipeline stage empty"),
    (["train-mem", "llama-3.1-8b", "--first-stage-layers", "4"], "--first-stage-layers 4 needs --pp > 1"),
    (["train-time", "llama-3.1-8b", "--chips", "8", "--pp", "2", "--first-stage-layers", "10",
      "--last-stage-layers", "10"], "leaves 12 of the 32 layers on no stage"),
    (["train-mem", "llama-3.1-8b", "--pp", "40"], "--pp 40 leaves a pipeline stage empty"),
    (["train-mem", "qwen3-235b-a22b", "--ep", "3"], "--ep 3 does not divide the 128 experts"),
    (["train-time", "deepseek-v3", "--chips", "64", "--ep", "256", "--etp", "1"], "is more than the 64"),
    (["train-time", "qwen3-235b-a22b", "--chips", "256", "--tp", "2", "--pp", "8", "--ep", "32",
          "--etp", "2"],
     "--ep 32 × expert TP 2 = 64 is more than the 32"),
    (["train-mem", "qwen3-30b-a3b", "--ep", "8", "--etp", "5"], "--etp 5 does not divide the expert FFN size 768"),
])
def test_what_no_framework_runs_is_one_line_and_exit_2(capsys, argv, needle):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1, err


@pytest.mark.parametrize("argv", [
    ["train-time", "llama-3.1-405b", "--chips", "8192", "--tp", "8", "--pp", "16", "--seq", "8192",
     "--global-batch", "2048", "--interleave", "8", "--recompute", "none"],
    ["train-time", "bloom-176b", "--chip", "a100-80gb", "--chips", "384", "--tp", "4", "--pp", "12", "--seq", "2048",
     "--global-batch", "2048", "--micro-batch", "2", "--recompute", "full", "--framework", "deepspeed", "--zero", "1"],
    ["train-time", "deepseek-v3", "--chips", "256", "--pp", "4", "--ep", "64", "--seq", "4096"],
    ["train-time", "qwen3-235b-a22b", "--chips", "256", "--tp", "2", "--pp", "8", "--ep", "32", "--etp", "1"],
    ["train-mem", "llama-3.1-405b", "--pp", "8", "--tp", "8", "--framework", "megatron", "--sp"],
    ["train-mem", "qwen3-235b-a22b", "--tp", "2", "--dp", "32", "--ep", "64", "--etp", "1"],
])
def test_layouts_real_runs_used_are_accepted(capsys, argv):
    assert main(argv) in (0, 1), capsys.readouterr().err


def test_searches_consider_uneven_stages_and_folded_ep():
    from aicalc.api.train_memory import search_layouts
    from aicalc.core.layout_search import layouts, pipeline_degrees

    arch = aicalc.api.catalog.load_model("llama-3.1-405b").arch
    assert 16 in pipeline_degrees(126, [1, 2, 4, 8, 16, 32]) and 3 not in pipeline_degrees(2, [3])
    assert any(p == 16 for _, p, _, _ in layouts(arch, 64))
    r = search_layouts("llama-3.1-405b", "h100-sxm", 64, seq=4096, top=5, framework="megatron", sp=True,
                       recompute="full")
    assert len(r) and all(int(t) * int(p) * int(d) == 64 for t, p, d in zip(r["tp"], r["pp"], r["dp"], strict=True))
    from aicalc.api.train_time import search_train_layouts

    t = search_train_layouts("qwen3-30b-a3b", "h100-sxm", 16, 1e12, seq=4096, global_batch=256, top=50)
    assert 1 in set(int(x) for x in t["etp"]) and any(int(x) > 1 for x in t["ep"])


def test_a_moe_search_lists_each_layout_once():
    """Every row of the training layout search is a different layout (tp, pp, dp, ep, etp, micro-batch, recompute,
    ZeRO): an unset expert TP and expert TP 1 are the same layout, and were listed twice."""
    from aicalc.api.train_time import search_train_layouts

    for model, chips in (("deepseek-v3", 1024), ("qwen3-30b-a3b", 16)):
        t = search_train_layouts(model, "h100-sxm", chips, 1e12, seq=4096, global_batch=1024, top=40)
        keys = [tuple(str(t[k][i]) for k in ("tp", "pp", "dp", "ep", "etp", "micro_batch", "recompute", "zero"))
                for i in range(len(t))]
        assert len(keys) > 10 and len(set(keys)) == len(keys), model


def test_check_takes_the_layout_options(tmp_path, capsys):
    f = tmp_path / "budget.yaml"
    f.write_text("version: 1\nchecks:\n"
                 "  - name: folded\n    command: train-time\n    model: qwen3-235b-a22b\n"
                 "    args: {chip: h100-sxm, chips: 256, tp: 2, pp: 8, ep: 32, etp: 1, interleave: 4,\n"
                 "           first-stage-layers: 10, last-stage-layers: 10}\n"
                 "    limits: {max_total_time: 1000000000s}\n"
                 "  - name: uneven\n    command: train-mem\n    model: llama-3.1-405b\n"
                 "    args: {pp: 16, tp: 8, framework: megatron, sp: true, last-stage-layers: 6}\n"
                 "    limits: {max_peak_bytes: 1000TB}\n")
    assert main(["check", str(f)]) == 0, capsys.readouterr().err
