"""compare: every number traceable to the itemized commands (derived here from their own JSON)."""

import math

import pytest

import aicalc


@pytest.fixture(scope="module")
def rows():
    import io

    from aicalc.cli import main
    from aicalc.env import Env

    out = io.StringIO()
    code = main(["compare", "llama-2-70b", "--chip", "h100-sxm", "--chip", "groq-lpu", "--requests-per-day", "10M",
                 "--json"], env=Env(out, io.StringIO(), False))
    assert code == 0
    import json

    return {(r["chip"], r["phase"]): r for r in json.loads(out.getvalue())["rows"]}


def test_contract_keys(rows):
    for row in rows.values():
        for key in ("chip", "phase", "memory_bytes", "chips_needed"):
            assert key in row
    assert {p for _, p in rows} == {"training", "inference"}


def test_training_chips_needed_is_the_fewest_train_mem_fits_on(cli, rows):
    n = rows[("h100-sxm", "training")]["chips_needed"]
    megatron = ("--framework", "megatron", "--sp", "--attention", "flash", "--seq", "4096", "--json")
    assert any(r["fits"] for r in cli("train-mem", "llama-2-70b", "--chip", "h100-sxm", "--search", "--chips", n,
                                      *megatron).json["rows"])
    assert not any(r["fits"] for r in cli("train-mem", "llama-2-70b", "--chip", "h100-sxm", "--search", "--chips",
                                          n // 2, *megatron).json["rows"])


def test_inference_chips_needed_is_the_smallest_tp_that_fits(cli, rows):
    r = rows[("h100-sxm", "inference")]
    assert r["chips_needed"] == 2  # 68.98e9 params × 2 B = 128.5 GiB > 0.9 × 80 GiB
    # a running request holds its prompt and half its output in steady state: 1024 + 256/2 tokens
    one = cli("kv-cache", "llama-2-70b", "--chip", "h100-sxm", "--context", "1152", "--json").json["rows"][0]
    assert not one["fits"]
    two = cli("kv-cache", "llama-2-70b", "--chip", "h100-sxm", "--tp", "2", "--context", "1152", "--json").json["rows"][0]
    assert two["fits"]
    # the row's numbers run on its layout's TP, whose cache holds the row's batch
    held = cli("kv-cache", "llama-2-70b", "--chip", "h100-sxm", "--tp", r["tp"], "--context", "1152",
               "--batch", r["batch"], "--json").json["rows"][0]
    assert r["layout"] == f"TP {r['tp']}" and held["fits"]


def test_inference_layout_is_the_cheapest_per_token_within_a_server(cli, rows):
    """Of the TPs from the smallest that holds Llama-2-70B up to one 8-GPU server, the row serves on the one with
    the lowest cost per output token at its best concurrency within the latency targets (serve's own rows): TP 2
    holds only a few dozen requests beside 128 GiB of weights, so TP 4 costs about half as much per token."""
    r = rows[("h100-sxm", "inference")]
    per_token = {}
    for tp in (2, 4, 8):
        out = cli("serve", "llama-2-70b", "--chip", "h100-sxm", "--tp", tp, "--prompt", 1024, "--gen", 256,
                  "--max-ttft", "2s", "--max-tpot", "200ms", "--json").json["rows"]
        best = max((x for x in out if x["meets_slo"]), key=lambda x: x["output_tokens_per_s"])
        per_token[tp] = (best["usd_per_million_output_tokens"], best["output_tokens_per_s"])
    tp = min(per_token, key=lambda t: per_token[t][0])
    assert r["tp"] == tp != 2
    assert r["usd_per_million_output_tokens"] == pytest.approx(per_token[tp][0], rel=1e-9)
    assert r["output_tokens_per_s"] == pytest.approx(per_token[tp][1], rel=1e-9)
    assert per_token[2][0] > 1.5 * per_token[tp][0]


def test_moe_inference_row_takes_the_cheapest_moe_layout(cli):
    """DeepSeek-V3 on H100s needs 16 (its 671 GB of FP8 weights over 8 leave no room): of the layouts serve prices at
    TP 16 — plain TP, EP 16 with TP attention, EP 16 with DP attention (SGLang's and TensorRT-LLM's DEP) — the row
    serves on the cheapest per output token. Under TP attention every rank holds every request's MLA latent (one KV
    head, nothing to split), so DP attention, each rank holding its own requests', serves several times the
    concurrency and costs less than half as much per token."""
    r = next(x for x in cli("compare", "deepseek-v3", "--chip", "h100-sxm", "--json").json["rows"]
             if x["phase"] == "inference")
    assert r["chips_needed"] == r["tp"] == 16
    per_token = {}
    for ep, adp in ((1, 1), (16, 1), (16, 16)):
        out = cli("serve", "deepseek-v3", "--chip", "h100-sxm", "--tp", 16, "--ep", ep, "--attention-dp", adp,
                  "--prompt", 1024, "--gen", 256, "--max-ttft", "2s", "--max-tpot", "200ms", "--json").json["rows"]
        best = max((x for x in out if x["meets_slo"]), key=lambda x: x["output_tokens_per_s"])
        per_token[(ep, adp)] = (best["usd_per_million_output_tokens"], best["output_tokens_per_s"], best["concurrency"])
    ep, adp = min(per_token, key=lambda k: per_token[k][0])
    assert (r["ep"], r["attention_dp"]) == (ep, adp) == (16, 16)
    assert r["layout"] == "TP 16, EP 16, attention DP 16" and r["batch"] == per_token[(ep, adp)][2]
    assert r["usd_per_million_output_tokens"] == pytest.approx(per_token[(ep, adp)][0], rel=1e-9)
    assert per_token[(1, 1)][0] > 2 * per_token[(16, 16)][0]


def test_sram_chip_count(rows):
    # 68,976,648,192 params × 2 B over 230 MB of SRAM per chip: at least 600 chips
    r = rows[("groq-lpu", "inference")]
    assert r["chips_needed"] >= math.ceil(68_976_648_192 * 2 / 230e6)
    assert ("groq-lpu", "training") not in rows  # an SRAM-only inference chip: no training row unless asked


def test_sram_chip_training_only_when_asked():
    """It used to be a row of nulls (chips_needed, memory_bytes) that did not fit, at exit 0."""
    r = aicalc.compare("llama-2-7b", ["groq-lpu"], training=True)
    assert "training" in list(r["phase"]) and any("groq-lpu" in w for w in r.warnings)


def test_cost_arithmetic(rows):
    t, i = rows[("h100-sxm", "training")], rows[("h100-sxm", "inference")]
    assert t["training_cost_usd"] == pytest.approx(t["chip_hours"] * 3.99)
    # the service cost is the simulated fleet's: its chips all day, every day, at the chip's price
    assert i["daily_inference_cost_usd"] == pytest.approx(i["fleet_chips"] * 3.99 * 24)
    assert i["annual_inference_cost_usd"] == pytest.approx(i["daily_inference_cost_usd"] * 365)
    share = i["annual_inference_cost_usd"] / (i["annual_inference_cost_usd"] + t["training_cost_usd"])
    assert i["inference_share_of_lifetime_cost"] == pytest.approx(share)
    # per 1M output tokens: the layout's chips × $/h ÷ tokens per hour
    assert i["usd_per_million_output_tokens"] == pytest.approx(i["tp"] * 3.99 / 3600 / i["output_tokens_per_s"] * 1e6)


def test_fleet_is_the_one_serve_search_sizes(cli, rows):
    """10M requests a day are 115.7 requests/s (10^7 / 86,400); compare's fleet is serve --search's answer for
    that rate, and it is no smaller than the traffic's output tokens over the best steady-state throughput per
    chip that serve reports at these targets (a fleet cannot beat its chips' full-load rate)."""
    i = rows[("h100-sxm", "inference")]
    fleet = cli("serve", "llama-2-70b", "--chip", "h100-sxm", "--rate", 10e6 / 86400, "--max-ttft", "2s",
                "--max-tpot", "200ms", "--search", "--json").json["rows"]
    assert i["fleet_chips"] == fleet[0]["chips"]
    per_chip = max(r["output_tokens_per_s"] / r["chips"] for tp in (2, 4, 8) for r in cli(
        "serve", "llama-2-70b", "--chip", "h100-sxm", "--tp", tp, "--max-tpot", "200ms", "--json").json["rows"]
        if r["fits"])
    assert i["fleet_chips"] >= 10e6 / 86400 * 256 / per_chip
    assert rows[("groq-lpu", "inference")].get("fleet_chips") is None  # SRAM-only: no simulated fleet


def test_training_time_matches_train_time(cli, rows):
    t = rows[("h100-sxm", "training")]
    assert t["total_time_s"] == pytest.approx(t["tokens"] / t["tokens_per_s"], rel=1e-6)


def test_edge_npu_falls_back_to_smaller_weights(cli):
    r = cli("compare", "llama-3.1-8b", "--chip", "qualcomm-hexagon", "--json")
    inf = next(x for x in r.json["rows"] if x["phase"] == "inference")
    assert inf["fits"] and inf["precision"] in ("bf16", "int8", "int4")


def test_a_node_stands_for_its_chip(cli):
    node = cli("compare", "gpt2", "--chip", "dgx-h100", "--json").json["rows"]
    chip = cli("compare", "gpt2", "--chip", "h100-sxm", "--json").json["rows"]
    assert [{k: v for k, v in r.items() if k != "chip"} for r in node] == \
        [{k: v for k, v in r.items() if k != "chip"} for r in chip]


def test_narrow_terminal_keeps_the_answers_and_names_chips_without_a_price(cli):
    """On a narrow terminal the columns that give way are the long layout/precision strings at the right, not
    the chips, memory, cost and time at the left (at 80 columns the first six fit; the time too a few columns
    wider); a chip with no on-demand price is named in the footer instead of leaving its cost cells unexplained."""
    for width, kept in ((80, ("chips", "memory", "train cost", "$/year")), (88, ("time",))):
        out = cli("compare", "llama-3.1-8b", "--chip", "gaudi3", "--chip", "h100-sxm", tty=True, width=width).out
        header = next(line for line in out.splitlines() if "chip" in line and "phase" in line)
        assert all(h in header for h in kept), header
        assert "layout" not in header and "precision" not in header
    assert "(none for gaudi3)" in cli("compare", "llama-3.1-8b", "--chip", "gaudi3", "--chip", "h100-sxm",
                                      width=400).out


def test_price_comma_chips_and_format_sweep_as_in_the_other_commands(cli):
    base = cli("compare", "llama-3.1-8b", "--chip", "l4", "--chip", "h100-sxm", "--json").json["rows"]
    comma = cli("compare", "llama-3.1-8b", "--chip", "l4,h100-sxm", "--json").json["rows"]
    assert [(r["chip"], r["phase"]) for r in comma] == [(r["chip"], r["phase"]) for r in base]
    priced = cli("compare", "llama-3.1-8b", "--chip", "l4,h100-sxm", "--price", "$2/h", "--json").json["rows"]
    for r in priced:  # cost = chip-hours x the given price, whatever the presets say
        if r["phase"] == "training":
            assert r["training_cost_usd"] == pytest.approx(r["chip_hours"] * 2.0)
    swept = cli("compare", "llama-3.1-8b", "--dtype", "bf16,fp8", "--json").json["rows"]
    assert {r["dtype"] for r in swept} == {"bf16", "fp8"}
    assert cli("compare", "llama-3.1-8b", "--dtype", "checkpoint").code == 2  # a preset has no files to read


def test_a_tp_without_room_for_one_request_has_no_fitting_row():
    """compare skips serving a TP whose KV budget holds no request (max_concurrency < 1): exact only if serve's own
    ``fits`` is then false at one request, checked here over models and chips of every size."""
    from aicalc.api.serving import max_concurrency, serve

    skipped = 0
    for model in ("llama-3.1-70b", "deepseek-v3", "gpt-oss-120b", "gemma-2-27b", "mixtral-8x22b"):
        for chip in ("h100-sxm", "l4", "mi300x", "tpu-v6e"):
            for tp in (1, 2, 4, 8):
                if max_concurrency(model, chip, tp=tp, prompt=1024, gen=256) < 1:
                    skipped += 1
                    assert not serve(model, chip, [1.0], 1024, 256, tp=tp).rows()[0]["fits"], (model, chip, tp)
    assert skipped >= 20


def test_training_layout_is_the_fastest_that_fits(cli, rows):
    """Of the layouts (with their ZeRO stages) train-mem finds fitting on the row's chips (TP ≤ 8), none trains
    faster by train-time than the one the row takes (derived here from the two commands)."""
    t = rows[("h100-sxm", "training")]
    n = t["chips_needed"]
    fitting = [r for r in cli("train-mem", "llama-2-70b", "--chip", "h100-sxm", "--search", "--chips", n,
                              "--framework", "megatron", "--sp", "--attention", "flash", "--seq", "4096",
                              "--top", 1000, "--json").json["rows"] if r["fits"] and r["tp"] <= 8]
    assert len(fitting) > 10  # a choice was made
    times = {}
    for r in fitting:
        rc = r["recompute"]
        times[(r["tp"], r["pp"], r["dp"], rc, r["zero"])] = cli(
            "train-time", "llama-2-70b", "--chip", "h100-sxm", "--tokens", t["tokens"], "--seq", "4096",
            "--global-batch", max(n, 8) * 8, "--tp", r["tp"], "--pp", r["pp"], "--dp", r["dp"],
            "--recompute", rc if rc in ("none", "full") else "selective", "--zero", r["zero"],
            "--json").json["rows"][0]["total_time_s"]
    assert t["total_time_s"] == pytest.approx(min(times.values()), rel=1e-9)
    tp, pp, dp, rc, zero = min(times, key=times.get)
    assert t["layout"] == f"TP {tp} × PP {pp} × DP {dp}, ZeRO-{zero}, recompute {rc}"
    # the layout with the most headroom (the row's choice before) is slower here
    first = fitting[0]
    assert times[(first["tp"], first["pp"], first["dp"], first["recompute"], first["zero"])] > t["total_time_s"]


@pytest.mark.parametrize("model, chips, ep", [
    ("llama-3.1-8b", 8, 1),  # dense: no experts to split
    ("mixtral-8x7b", 16, 8),  # 8 experts
    ("mixtral-8x7b", 4, 4),  # no more EP ranks than chips
    ("deepseek-v2", 64, 8),  # 160 experts: 8 divides them
    ("llama-4-scout", 2, 2),
    ("qwen3-30b-a3b", 12, 4),  # 12 chips: 4 divides both 128 and 12
])
def test_expert_degree(model, chips, ep):
    from aicalc.api.compare import expert_degree

    assert expert_degree(aicalc.load_model(model).arch, chips) == ep


def test_moe_training_row_uses_expert_parallelism(cli):
    """Qwen3-30B-A3B (128 experts) on H100s trains with EP 8: the row's layout names it, train-mem with --ep 8
    fits that layout on the row's chips, and train-time with --ep 8 gives the row's time."""
    r = next(x for x in cli("compare", "qwen3-30b-a3b", "--chip", "h100-sxm", "--json").json["rows"]
             if x["phase"] == "training")
    assert "(EP 8)" in r["layout"]
    tp, pp, dp = (int(r["layout"].split(k)[1].split()[0]) for k in ("TP ", "PP ", "DP "))
    zero = int(r["layout"].split("ZeRO-")[1][0])
    rc = r["layout"].split("recompute ")[1]
    mem = cli("train-mem", "qwen3-30b-a3b", "--chip", "h100-sxm", "--framework", "megatron", "--sp", "--attention",
              "flash", "--seq", "4096", "--tp", tp, "--pp", pp, "--dp", dp, "--zero", zero, "--recompute", rc,
              "--ep", 8, "--json").json["rows"][0]
    assert mem["fits"] and mem["peak_bytes"] == pytest.approx(r["memory_bytes"], rel=1e-9)
    time = cli("train-time", "qwen3-30b-a3b", "--chip", "h100-sxm", "--tokens", r["tokens"], "--seq", "4096",
               "--global-batch", max(r["chips_needed"], 8) * 8, "--tp", tp, "--pp", pp, "--dp", dp, "--zero", zero,
               "--recompute", rc if rc in ("none", "full") else "selective", "--ep", 8, "--json").json["rows"][0]
    assert time["total_time_s"] == pytest.approx(r["total_time_s"], rel=1e-9)


def test_moe_training_row_is_the_fastest_over_expert_degrees(cli):
    """gpt-oss-120B (128 experts) on 32 H100s: of the layouts train-mem fits with EP 8, 16 and 32 (TP ≤ 8, every
    ZeRO stage), none trains faster by train-time with its EP than the row's; the row's EP crosses the 8-GPU node
    (EP 8 alone, the row before, was slower)."""
    r = next(x for x in cli("compare", "gpt-oss-120b", "--chip", "h100-sxm", "--json").json["rows"]
             if x["phase"] == "training")
    n = r["chips_needed"]
    fitting = [x for x in cli("train-mem", "gpt-oss-120b", "--chip", "h100-sxm", "--search", "--chips", n,
                              "--ep", "8,16,32", "--framework", "megatron", "--sp", "--attention", "flash", "--seq",
                              "4096", "--top", 1000, "--json").json["rows"] if x["fits"] and x["tp"] <= 8]
    assert len({x["ep"] for x in fitting}) == 3
    times = {}
    for x in fitting:
        rc = x["recompute"]
        times[(x["tp"], x["pp"], x["dp"], x["ep"], rc, x["zero"])] = cli(
            "train-time", "gpt-oss-120b", "--chip", "h100-sxm", "--tokens", r["tokens"], "--seq", "4096",
            "--global-batch", max(n, 8) * 8, "--tp", x["tp"], "--pp", x["pp"], "--dp", x["dp"], "--ep", x["ep"],
            "--recompute", rc if rc in ("none", "full") else "selective", "--zero", x["zero"],
            "--json").json["rows"][0]["total_time_s"]
    assert r["total_time_s"] == pytest.approx(min(times.values()), rel=1e-9)
    tp, pp, dp, ep, rc, zero = min(times, key=times.get)
    assert r["layout"] == f"TP {tp} × PP {pp} × DP {dp} (EP {ep}), ZeRO-{zero}, recompute {rc}"
    assert (r["tp"], r["pp"], r["dp"], r["ep"], r["recompute"], r["zero"]) == (tp, pp, dp, ep, rc, zero)
    assert ep > 8 and min(t for k, t in times.items() if k[3] == 8) > r["total_time_s"]


def test_training_keeps_tp_within_a_server_before_more_chips(cli):
    """DeepSeek-V3 on MI300Xs: on 64 chips only layouts with TP over 8 (across servers) fit (train-mem's search with
    every EP degree); the row takes 128 chips with TP ≤ 8, which train in fewer chip-hours than any of those 64-chip
    layouts (train-time)."""
    r = next(x for x in cli("compare", "deepseek-v3", "--chip", "mi300x", "--json").json["rows"]
             if x["phase"] == "training")
    tp = int(r["layout"].split("TP ")[1].split()[0])
    assert r["chips_needed"] == 128 and tp <= 8
    megatron = ("--framework", "megatron", "--sp", "--attention", "flash", "--seq", "4096", "--top", 1000, "--json")
    wide = [x for x in cli("train-mem", "deepseek-v3", "--chip", "mi300x", "--search", "--chips", 64, "--ep",
                           "8,16,32,64", *megatron).json["rows"] if x["fits"]]
    assert wide and all(x["tp"] > 8 for x in wide)
    hours = [cli("train-time", "deepseek-v3", "--chip", "mi300x", "--tokens", r["tokens"], "--seq", "4096",
                 "--global-batch", 64 * 8, "--tp", x["tp"], "--pp", x["pp"], "--dp", x["dp"], "--ep", x["ep"],
                 "--zero", x["zero"], "--recompute", x["recompute"],
                 "--json").json["rows"][0]["chip_hours"] for x in wide]
    assert r["chip_hours"] < min(hours) / 3


@pytest.mark.parametrize("model, chips, eps", [
    ("llama-3.1-8b", 64, (1,)),
    ("mixtral-8x7b", 64, (8,)),  # 8 experts
    ("deepseek-v3", 256, (8, 16, 32, 64)),  # 256 experts: up to MAX_EXPERT_DEGREE
    ("deepseek-v3", 48, (8, 16)),  # 48 chips: 16 divides both, 32 not the chips
    ("deepseek-v2", 320, (8, 16, 32)),  # 160 experts: 64 does not divide them
])
def test_expert_degrees(model, chips, eps):
    from aicalc.api.compare import expert_degrees

    assert expert_degrees(aicalc.load_model(model).arch, chips) == eps


def test_an_edge_chip_serves_on_the_fewest_devices(cli):
    """A Mac serves its user on the fewest devices that hold the model; the cheapest-per-token widening is a
    server's: Qwen3-30B-A3B on one M4 Max (1 chip needed) is served on that one, not spread over four."""
    r = next(x for x in cli("compare", "qwen3-30b-a3b", "--chip", "apple-m4-max", "--json").json["rows"]
             if x["phase"] == "inference")
    assert r["chips_needed"] == r["tp"] == 1 and r["layout"] == "TP 1"
    # and without a server engine's expert or attention-data parallelism: DeepSeek-V3 over two M3 Ultras is TP 2
    r = next(x for x in cli("compare", "deepseek-v3", "--chip", "apple-m3-ultra", "--json").json["rows"]
             if x["phase"] == "inference")
    assert (r["chips_needed"], r["layout"], r["ep"], r["attention_dp"]) == (2, "TP 2", 1, 1)


def test_a_laptop_soc_trains_on_its_own_machine(cli):
    # a Mac trains on one machine: compare's training row is one device or none, never TP/ZeRO across laptops
    one = [r for r in cli("compare", "llama-3.2-1b", "--chip", "apple-m4-max", "--json").json["rows"]
           if r["phase"] == "training"][0]
    assert (one["chips_needed"], one["tp"], one["dp"], one["ep"]) == (1, 1, 1, 1)
    # Llama-3.1-8B: bf16-mixed AdamW states alone are 16 B × 8.03 B parameters, above the M4 Max's memory, so
    # train-mem finds no one-device layout, and compare gives no training row (it gave 2 Macs under ZeRO-2)
    one_mac = cli("train-mem", "llama-3.1-8b", "--chip", "apple-m4-max", "--search", "--chips", "1", "--json")
    assert one_mac.json["rows"] and not any(x["fits"] for x in one_mac.json["rows"])
    r = cli("compare", "llama-3.1-8b", "--chip", "apple-m4-max", "--json")
    train = [x for x in r.json["rows"] if x["phase"] == "training"][0]
    assert train["fits"] is False and any("one apple-m4-max" in w for w in r.json["warnings"])
