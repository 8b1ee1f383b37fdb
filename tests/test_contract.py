"""The stable interface of ../shared/CONTRACT.md: every command, its required options and JSON row keys."""

import pytest

CASES = [
    (["presets", "show", "llama-3.1-8b"], ["id", "params", "active_params", "layers", "kv_bytes_per_token"]),
    (["presets", "show", "h100-sxm"], ["id", "memory_bytes", "memory_bandwidth_bytes_per_s", "peak_bf16_flop_per_s"]),
    (["kv-cache", "llama-3.1-70b", "--batch", "1,8", "--context", "8k", "--kv-dtype", "fp8", "--tp", "2",
      "--chip", "h100-sxm", "--budget", "80GiB"], ["batch", "context", "kv_cache_bytes", "kv_cache_bytes_per_device",
                                                   "max_batch"]),
    (["train-mem", "llama-3.1-8b", "--batch", "1", "--seq", "2048", "--precision", "bf16-mixed", "--optimizer", "adamw",
      "--zero", "1", "--dp", "2", "--tp", "1", "--pp", "1", "--recompute", "full", "--framework", "hf",
      "--attention", "sdpa", "--lora-rank", "8", "--quant", "nf4", "--chip", "h100-sxm", "--budget", "80GiB"],
     ["params", "trainable_params", "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
      "peak_bytes"]),
    (["roofline", "llama-3.1-8b", "--chip", "a100-80gb", "--batch", "1,8", "--prompt", "512", "--gen", "128",
      "--dtype", "int8", "--kv-dtype", "fp8", "--tp", "1"],
     ["phase", "batch", "bound", "arithmetic_intensity", "ridge_point", "ttft_s", "tpot_s", "output_tokens_per_s"]),
    (["train-time", "llama-3.1-8b", "--chip", "h100-sxm", "--chips", "64", "--tokens", "1T", "--seq", "4096",
      "--global-batch", "512", "--tp", "1", "--pp", "1", "--dp", "64", "--mfu", "auto"],
     ["mfu", "model_flop_per_s_per_chip", "tokens_per_s", "total_time_s", "chip_hours"]),
    (["serve", "llama-3.1-8b", "--chip", "h100-sxm", "--chips", "2", "--tp", "1", "--prompt", "1k", "--gen", "256",
      "--concurrency", "8", "--max-ttft", "2s", "--max-tpot", "200ms", "--dtype", "bf16", "--kv-dtype", "bf16"],
     ["concurrency", "ttft_s", "tpot_s", "output_tokens_per_s"]),
    (["compare", "llama-3.1-8b", "--chip", "h100-sxm", "--chip", "l4"], ["chip", "phase", "memory_bytes", "chips_needed"]),
]


@pytest.mark.parametrize("argv, keys", CASES, ids=[" ".join(c[0][:2]) for c in CASES])
def test_command_options_and_row_keys(cli, argv, keys):
    r = cli(*argv, "--json")
    assert r.code in (0, 1), r.err  # 1 only where a budget or fit check fails
    env = r.json
    assert env["schema_version"] == 1 and env["rows"] and isinstance(env["warnings"], list)
    for row in env["rows"]:
        missing = [k for k in keys if k not in row]
        assert not missing, missing


def test_roofline_phases_and_bounds(cli):
    rows = cli("roofline", "llama-3.1-8b", "--chip", "h100-sxm", "--json").json["rows"]
    assert {r["phase"] for r in rows} == {"prefill", "decode"}
    assert {r["bound"] for r in rows} <= {"compute", "memory"}


def test_compare_phases(cli):
    rows = cli("compare", "gpt2", "--chip", "h100-sxm", "--json").json["rows"]
    assert [r["phase"] for r in rows] == ["training", "inference"]


def test_check_row_keys(cli, tmp_path):
    (tmp_path / "b.yaml").write_text(
        "version: 1\nchecks:\n  - name: a\n    command: kv-cache\n    model: gpt2\n    args: {context: 1k}\n"
        "    limits: {max_memory_per_device: 80GB}\n")
    row = cli("check", tmp_path / "b.yaml", "--json").json["rows"][0]
    assert {"name", "status", "value", "limit"} <= set(row) and row["status"] in ("pass", "fail", "warn")


@pytest.mark.parametrize("fmt", ["table", "json", "csv", "markdown"])
@pytest.mark.parametrize("command", [["kv-cache", "gpt2"], ["roofline", "gpt2"], ["train-mem", "gpt2"],
                                     ["serve", "gpt2", "--concurrency", "4"], ["train-time", "gpt2", "--chips", "8"],
                                     ["presets", "list"]])
def test_every_command_every_format(cli, command, fmt):
    r = cli(*command, "--format", fmt)
    assert r.code == 0, r.err
    assert r.out.strip()


@pytest.mark.parametrize("chips", [[], ["--chips", "8"]], ids=["fleet", "fixed"])
def test_serve_search_with_traffic_row_keys(cli, chips):
    """serve --search with --rate: the contract's search keys and the simulated p99s (a fleet sized without
    --chips, each deployment of --chips simulated with it)."""
    r = cli("serve", "llama-3.1-8b", "--chip", "h100-sxm", *chips, "--rate", "30", "--max-ttft", "1s", "--max-tpot",
            "50ms", "--search", "--json")
    assert r.code == 0, r.err
    for row in r.json["rows"]:
        keys = ["chip", "chips", "tp", "replicas", "dtype", "kv_dtype", "usd_per_million_output_tokens", "meets_slo",
                "p99_ttft_s", "p99_tpot_s"] + (["prefill_tp", "decode_tp"] if row["mode"] == "disaggregated" else [])
        assert not [k for k in keys if k not in row]


def test_compare_fleet_keys(cli):
    rows = cli("compare", "llama-3.1-8b", "--chip", "h100-sxm", "--requests-per-day", "1M", "--json").json["rows"]
    infer = next(r for r in rows if r["phase"] == "inference")
    assert infer["fleet_chips"] >= 1 and infer["annual_inference_cost_usd"] > 0
