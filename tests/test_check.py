"""check: verdicts derived independently from the itemized commands' JSON, boundaries, units, reports."""

import json
import shlex
import xml.etree.ElementTree as ET

import pytest
import yaml

from conftest import ROOT

KV_ARGS = ["kv-cache", "llama-3.1-70b", "--chip", "h100-sxm", "--tp", "4", "--batch", "32", "--context", "8k", "--json"]


def write(tmp_path, checks, name="budget.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"version": 1, "checks": checks}, sort_keys=False))
    return path


def kv_check(limits, severity="error", **args):
    return {"name": "c", "command": "kv-cache", "model": "llama-3.1-70b",
            "args": {"chip": "h100-sxm", "tp": 4, "batch": 32, "context": "8k"} | args,
            "limits": limits, "severity": severity}


@pytest.fixture
def kv_row(cli):
    return cli(*KV_ARGS).json["rows"][0]


def test_exactly_at_the_limit_passes_one_byte_under_fails(cli, tmp_path, kv_row):
    total = int(kv_row["total_bytes_per_device"])
    assert total == kv_row["total_bytes_per_device"]
    at = cli("check", write(tmp_path, [kv_check({"max_memory_per_device": str(total)})]), "--json")
    assert at.code == 0 and at.json["rows"][0]["status"] == "pass" and at.json["rows"][0]["value"] == total
    under = cli("check", write(tmp_path, [kv_check({"max_memory_per_device": str(total - 1)})]), "--json")
    assert under.code == 1 and under.json["rows"][0]["status"] == "fail"


def test_gb_vs_gib(cli, tmp_path, kv_row):
    total = kv_row["total_bytes_per_device"]  # ~54.03 GiB = ~58.0 GB
    gib = total / 2**30
    gb = total / 1e9
    assert int(gib) + 1 < gb  # N = ceil(GiB): "N GiB" is enough, "N GB" is too small
    ok = cli("check", write(tmp_path, [kv_check({"max_memory_per_device": f"{int(gib) + 1}GiB"})]))
    bad = cli("check", write(tmp_path, [kv_check({"max_memory_per_device": f"{int(gib) + 1}GB"})]))
    assert ok.code == 0 and bad.code == 1


def test_min_max_batch_boundary(cli, tmp_path, kv_row):
    mb = kv_row["max_batch"]
    assert cli("check", write(tmp_path, [kv_check({"min_max_batch": mb})])).code == 0
    assert cli("check", write(tmp_path, [kv_check({"min_max_batch": mb + 1})])).code == 1


def test_any_row_of_a_sweep_breaks_the_check(cli, tmp_path):
    rows = cli("kv-cache", "llama-3.1-8b", "--batch", "1,16,64", "--context", "8k", "--json").json["rows"]
    worst = max(r["total_bytes_per_device"] for r in rows)
    middle = sorted(r["total_bytes_per_device"] for r in rows)[1]
    check = {"name": "s", "command": "kv-cache", "model": "llama-3.1-8b", "args": {"batch": [1, 16, 64], "context": "8k"},
             "limits": {"max_memory_per_device": str(int(middle))}}
    r = cli("check", write(tmp_path, [check]), "--json")
    assert r.code == 1 and r.json["rows"][0]["value"] == worst


def test_warn_severity_and_fail_on_warn(cli, tmp_path):
    path = write(tmp_path, [kv_check({"max_memory_per_device": "1GB"}, severity="warn")])
    r = cli("check", path, "--json")
    assert r.code == 0 and r.json["rows"][0]["status"] == "warn"
    assert cli("check", path, "--fail-on-warn").code == 1


def test_max_kv_cache_bytes(cli, tmp_path, kv_row):
    kv = int(kv_row["kv_cache_bytes_per_device"])
    assert cli("check", write(tmp_path, [kv_check({"max_kv_cache_bytes_per_device": kv})])).code == 0
    assert cli("check", write(tmp_path, [kv_check({"max_kv_cache_bytes_per_device": kv - 1})])).code == 1


def test_limit_without_row_key_is_an_error(cli, tmp_path):
    r = cli("check", write(tmp_path, [kv_check({"max_ttft": "200ms"})]))
    assert r.code == 2 and "max_ttft" in r.err


def test_invalid_file_lists_every_problem_with_lines(cli, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("version: 2\nchecks:\n  - name: a\n    command: kv-cache\n    model: llama-3.1-8x\n"
                    "    limits: {max_ttft: -1, bogus: 3}\n    args: {chip: h100-sxn}\n")
    r = cli("check", path)
    assert r.code == 2 and r.out == ""
    lines = r.err.strip().splitlines()
    assert any(":1: version" in line for line in lines)
    assert any(":6: checks.0.limits" in line and "bogus" in line and "max_ttft" in line for line in lines)
    assert any(":5: checks.0.model" in line and "llama-3.1-8x" in line for line in lines)
    assert any(":7: checks.0.args.chip" in line for line in lines)


def test_duplicate_names_and_missing_file(cli, tmp_path):
    c = kv_check({"max_memory_per_device": "80GB"})
    assert "used twice" in cli("check", write(tmp_path, [c, c])).err
    assert cli("check", tmp_path / "none.yaml").code == 2


def test_config_path_relative_to_budget_file(cli, tmp_path):
    cfg = json.loads((ROOT / "tests/data/configs/llama-3.2-1b/config.json").read_text())
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    check = {"name": "local", "command": "kv-cache", "model": "m/config.json", "args": {"context": "4k"},
             "limits": {"max_memory_per_device": "80GB"}}
    assert cli("check", write(tmp_path, [check])).code == 0


def test_junit_report(cli, tmp_path):
    path = write(tmp_path, [kv_check({"max_memory_per_device": "1GB", "min_max_batch": 1})])
    cli("check", path, "--junit", tmp_path / "j.xml")
    suite = ET.parse(tmp_path / "j.xml").getroot()
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    assert len(suite.findall("testcase/failure")) == 1


def test_github_annotations(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    r = cli("check", write(tmp_path, [kv_check({"max_memory_per_device": "1GB"})]))
    assert r.code == 1 and "::error file=" in r.out


def test_schema_shipped_is_current(cli):
    shipped = json.loads((ROOT / "aicalc" / "schemas" / "budget.schema.json").read_text())
    assert cli("check", "x", "--schema").json == shipped
    assert set(shipped["$defs"]["Check"]["properties"]) >= {"name", "command", "model", "args", "limits", "severity"}


def test_docs_ci_examples_run(cli, monkeypatch):
    """The commands the GitHub workflow and the pre-commit hook run, executed."""
    monkeypatch.chdir(ROOT)
    wf = yaml.safe_load((ROOT / "docs/examples/ci/github-workflow.yml").read_text())
    runs = [s["run"] for s in wf["jobs"]["budgets"]["steps"] if str(s.get("run", "")).startswith("aicalc ")]
    hook = yaml.safe_load((ROOT / "docs/examples/ci/pre-commit-config.yaml").read_text())["repos"][0]["hooks"][0]
    runs.append(" ".join([hook["entry"], *hook["args"]]))
    assert len(runs) == 2
    for command in runs:
        args = shlex.split(command)[1:]
        args = [str(ROOT / "aicalc-budgets.xml.test") if a == "aicalc-budgets.xml" else a for a in args]
        assert cli(*args).code == 0, command
    (ROOT / "aicalc-budgets.xml.test").unlink(missing_ok=True)


SERVE = ["serve", "llama-3.1-8b", "--chip", "h100-sxm", "--concurrency", "16", "--json"]


def serve_check(limits):
    return {"name": "s", "command": "serve", "model": "llama-3.1-8b",
            "args": {"chip": "h100-sxm", "concurrency": 16}, "limits": limits}


@pytest.mark.parametrize("limit, key, unit", [("max_ttft", "ttft_s", "s"), ("max_tpot", "tpot_s", "s")])
def test_latency_limits_against_serve(cli, tmp_path, limit, key, unit):
    value = cli(*SERVE).json["rows"][0][key]
    above = f"{value * 1.001 * 1e3}ms"
    below = f"{value * 0.999 * 1e3}ms"
    assert cli("check", write(tmp_path, [serve_check({limit: above})])).code == 0
    assert cli("check", write(tmp_path, [serve_check({limit: below})])).code == 1


def test_min_throughput_and_cost_limits_against_serve(cli, tmp_path):
    row = cli(*SERVE).json["rows"][0]
    tps, usd = row["output_tokens_per_s"], row["usd_per_million_output_tokens"]
    assert cli("check", write(tmp_path, [serve_check({"min_output_tokens_per_s": tps * 0.999})])).code == 0
    assert cli("check", write(tmp_path, [serve_check({"min_output_tokens_per_s": tps * 1.001})])).code == 1
    assert cli("check", write(tmp_path, [serve_check({"max_usd_per_million_tokens": usd * 1.001})])).code == 0
    assert cli("check", write(tmp_path, [serve_check({"max_usd_per_million_tokens": usd * 0.999})])).code == 1


def test_train_mem_peak_limits(cli, tmp_path):
    args = ["train-mem", "llama-3.1-8b", "--batch", "2", "--seq", "2048", "--lora-rank", "16", "--json"]
    peak = int(cli(*args).json["rows"][0]["peak_bytes"])
    check = {"name": "t", "command": "train-mem", "model": "llama-3.1-8b",
             "args": {"batch": 2, "seq": 2048, "lora-rank": 16}, "limits": {"max_peak_bytes": str(peak)}}
    assert cli("check", write(tmp_path, [check])).code == 0
    check["limits"] = {"max_memory_per_device": str(peak - 1)}
    r = cli("check", write(tmp_path, [check]), "--json")
    assert r.code == 1 and r.json["rows"][0]["key"] == "peak_bytes"


def test_compare_chips_needed_limit(cli, tmp_path):
    rows = cli("compare", "llama-2-70b", "--chip", "h100-sxm", "--json").json["rows"]
    worst = max(r["chips_needed"] for r in rows)
    check = {"name": "c", "command": "compare", "model": "llama-2-70b", "args": {"chip": "h100-sxm"},
             "limits": {"max_chips_needed": worst}}
    assert cli("check", write(tmp_path, [check])).code == 0
    check["limits"] = {"max_chips_needed": worst - 1}
    assert cli("check", write(tmp_path, [check])).code == 1


def test_tail_latency_limits_on_simulated_traffic(cli, tmp_path):
    args = {"chip": "h100-sxm", "rate": "5,40", "num_requests": 500, "max_ttft": "1s", "max_tpot": "50ms"}
    check = {"name": "traffic", "command": "serve", "model": "llama-3.1-8b", "args": args,
             "limits": {"max_p99_ttft": "2s", "min_goodput": "10"}}
    r = cli("check", write(tmp_path, [check]), "--json")
    rows = {x["limit_name"]: x for x in r.json["rows"]}
    assert rows["max_p99_ttft"]["status"] == "fail"  # 40 req/s overloads one H100: the queue grows
    assert rows["min_goodput"]["status"] == "fail" and rows["min_goodput"]["value"] < 10 and r.code == 1


def test_a_broken_error_budget_reads_as_a_failure_and_a_warn_budget_as_a_warning(cli, tmp_path):
    fail = cli("check", write(tmp_path, [kv_check({"max_memory_per_device": "1GB"})]))
    assert fail.code == 1 and fail.err.startswith("fail: ") and "warning:" not in fail.err
    warn = cli("check", write(tmp_path, [kv_check({"max_memory_per_device": "1GB"}, severity="warn")]))
    assert warn.code == 0 and warn.err.startswith("warning: ")


def test_an_invalid_file_lists_unknown_args_duplicate_names_and_suggestions_together(cli, tmp_path):
    a = kv_check({"max_memry": "80GB"}, chip="h100", tpp=2)
    b = kv_check({"max_memory_per_device": "80GB"})  # the same name "c"
    r = cli("check", write(tmp_path, [a, b]))
    lines = r.err.splitlines()
    assert r.code == 2 and len(lines) == 4, r.err
    assert any("unknown limit 'max_memry'; did you mean max_memory_per_device" in x for x in lines)
    assert any("kv-cache has no option --tpp" in x for x in lines)
    assert any("unknown chip 'h100'; did you mean" in x and "h100-sxm" in x for x in lines)
    assert any("names check 0 too" in x for x in lines)


def test_a_check_name_cannot_forge_a_workflow_command(cli, tmp_path, monkeypatch):
    """GitHub runs every stdout line that starts with "::" as a command: a name holding a newline and
    "::error …" must stay inside its own annotation (escaped as %0A, as actions/toolkit does)."""
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    check = kv_check({"max_memory_per_device": "1GB"}) | {"name": "c\n::error file=x::injected"}
    r = cli("check", write(tmp_path, [check]))
    commands = [line for line in r.out.splitlines() if line.startswith("::")]
    assert r.code == 1 and len(commands) == 1 and "%0A%3A%3Aerror" in commands[0]


def test_markdown_and_csv_cells_stay_cells(cli, tmp_path):
    """A name with "|" or a newline kept its markdown row whole; one starting with "=" is not a formula."""
    import json as js

    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 4, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64,
           "_name_or_path": "=HYPERLINK(\"x\")|a\nb"}
    (tmp_path / "config.json").write_text(js.dumps(cfg))
    md = cli("presets", "show", str(tmp_path / "config.json"), "--format", "markdown").out
    assert all(line.count("|") - line.count("\\|") == 3 for line in md.splitlines() if line.startswith("| "))
    csv = cli("presets", "show", str(tmp_path / "config.json"), "--format", "csv").out
    assert ",'=HYPERLINK" in csv or "\"'=HYPERLINK" in csv


# --- budget files as hostile input (issue 26): no file written, no file read outside the budget's folder, no
# more work than one command may do -----------------------------------------------------------------------------


def one_error(r):
    assert r.code == 2 and r.err.count("\n") == 1 and r.err.startswith("aicalc: error: "), (r.code, r.err)
    return r.err


def test_a_budget_cannot_write_a_file(cli, tmp_path):
    victim = tmp_path / "victim.svg"
    victim.write_text("<svg/>")
    (tmp_path / "b").mkdir()
    check = {"name": "p", "command": "serve", "model": "llama-3.1-8b", "args": {"search": True, "plot": "../victim.svg"},
             "limits": {"max_ttft": "1s"}}
    err = one_error(cli("check", write(tmp_path / "b", [check])))
    assert "args.plot: --plot writes a file; a budget file cannot ask for one" in err
    assert victim.read_text() == "<svg/>"


def test_a_budget_reads_model_files_only_under_its_folder(cli, tmp_path):
    cfg = (ROOT / "tests/data/configs/llama-3.2-1b/config.json").read_text()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "config.json").write_text(cfg)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "link").symlink_to(tmp_path / "outside")
    for model in ("../outside/config.json", str(tmp_path / "outside" / "config.json"), "link/config.json"):
        check = {"name": "m", "command": "kv-cache", "model": model, "limits": {"max_memory_per_device": "80GB"}}
        assert "is outside the budget file's folder" in one_error(cli("check", write(tmp_path / "b", [check])))
    (tmp_path / "b" / "in").mkdir()
    (tmp_path / "b" / "in" / "config.json").write_text(cfg)
    check = {"name": "m", "command": "kv-cache", "model": "in/config.json", "limits": {"max_memory_per_device": "80GB"}}
    assert cli("check", write(tmp_path / "b", [check])).code == 0


def test_a_budget_does_at_most_what_one_command_may(cli, tmp_path, monkeypatch):
    """200 traffic checks, each within its own cap, add up to 2·10^6 simulated requests: refused before any
    runs (the simulator is never called), as is a search over 720,720 chips."""
    import aicalc.api.traffic as traffic

    calls = []
    monkeypatch.setattr(traffic, "simulate", lambda *a, **k: calls.append(1))
    checks = [{"name": f"t{i}", "command": "serve", "model": "llama-3.1-8b",
               "args": {"rate": "1,2", "num_requests": 5000}, "limits": {"max_p99_ttft": "2s"}} for i in range(200)]
    err = one_error(cli("check", write(tmp_path, checks)))
    assert "its checks together make 2,000,000 simulated requests" in err and "1,000,000" in err
    assert calls == []
    search = {"name": "s", "command": "serve", "model": "llama-3.1-8b", "args": {"search": True, "chips": 720720},
              "limits": {"max_ttft": "1s"}}
    assert "prefill/decode splits searched" in one_error(cli("check", write(tmp_path, [search])))


def test_a_newline_in_a_check_name_stays_on_its_stderr_line(cli, tmp_path):
    check = kv_check({"max_memory_per_device": "1GB"}) | {"name": "c\nwarning: all checks passed"}
    r = cli("check", write(tmp_path, [check]))
    assert r.code == 1
    assert [line for line in r.err.splitlines() if line.startswith("warning: all")] == [], r.err
    assert "c?warning: all checks passed" in r.err


def test_a_deployment_that_does_not_fit_fails_every_limit(cli, tmp_path):
    """Llama-3.1-70B's bf16 weights (~141 GB) do not fit one 24 GB L4: its latencies describe nothing that can
    run, so even a generous latency limit fails (it passed)."""
    check = {"name": "big", "command": "serve", "model": "llama-3.1-70b", "args": {"chip": "l4", "tp": 1, "concurrency": 1},
             "limits": {"max_ttft": "1000s"}}
    r = cli("check", write(tmp_path, [check]), "--json")
    assert r.code == 1 and [row["status"] for row in r.json["rows"]] == ["fail"]
    assert r.json["warnings"] == ["fail: big: 1 of 1 row(s) do not fit the chips' memory, so no limit holds"]
    fits = dict(check, args={"chip": "h100-sxm", "tp": 4, "concurrency": 1})
    assert cli("check", write(tmp_path, [fits])).code == 0
