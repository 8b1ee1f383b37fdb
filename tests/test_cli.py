"""The CLI frame and the output contract (../shared/CONTRACT.md): formats, exit codes, errors."""

import csv
import io
import json
import os
import subprocess
import sys

import pytest

from aicalc import __version__

CONTRACT_CHIPS = """h100-sxm h100-pcie h200 b200 a100-40gb a100-80gb l40s l4 rtx-4090 v100 mi300x tpu-v4 tpu-v5e
tpu-v5p tpu-v6e gaudi3 groq-lpu cerebras-wse3 apple-m2-ultra apple-m4-max apple-neural-engine qualcomm-hexagon""".split()
CONTRACT_NODES = ["dgx-h100", "dgx-b200"]
CONTRACT_MODELS = """gpt2 gpt3-175b llama-2-7b llama-2-13b llama-2-70b llama-3.1-8b llama-3.1-70b llama-3.1-405b
mistral-7b mixtral-8x7b mixtral-8x22b qwen2.5-7b qwen2.5-72b gemma-2-9b gemma-2-27b phi-3-mini deepseek-v3 falcon-40b
bloom-176b""".split()


def test_presets_list_has_every_contract_chip(cli):
    r = cli("presets", "list", "--kind", "chip", "--json")
    assert r.code == 0
    ids = {row["id"] for row in r.json["rows"]}
    assert set(CONTRACT_CHIPS) <= ids


def test_presets_list_has_every_contract_model_and_node(cli):
    models = {row["id"] for row in cli("presets", "list", "--kind", "model", "--json").json["rows"]}
    nodes = {row["id"] for row in cli("presets", "list", "--kind", "node", "--json").json["rows"]}
    assert set(CONTRACT_MODELS) <= models
    assert set(CONTRACT_NODES) <= nodes


def test_json_envelope(cli):
    r = cli("presets", "show", "llama-3.1-8b", "--format", "json")
    env = r.json
    assert set(env) == {"schema_version", "command", "inputs", "rows", "warnings"}
    assert env["schema_version"] == 1 and env["command"] == "presets show"
    row = env["rows"][0]
    for key in ("id", "params", "active_params", "layers", "kv_bytes_per_token"):
        assert key in row
    # IM-01: Llama-3.1-8B, 2·32·8·128·2 = 131,072 B per token at 16 bits
    assert row["kv_bytes_per_token"] == 131_072


def test_chip_show_contract_keys(cli):
    row = cli("presets", "show", "h100-sxm", "--json").json["rows"][0]
    assert row["memory_bytes"] == 80 * 2**30
    assert row["memory_bandwidth_bytes_per_s"] == 3.35e12
    assert row["peak_bf16_flop_per_s"] == 989.4e12  # dense, not the 1979 sparse headline


def test_node_resolves_to_its_chips(cli):
    row = cli("presets", "show", "dgx-h100", "--json").json["rows"][0]
    assert row["kind"] == "node" and row["count"] == 8 and row["chip"] == "h100-sxm"


def test_csv_and_markdown(cli):
    r = cli("presets", "list", "--kind", "chip", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.out)))
    assert {"id", "memory_bytes"} <= set(rows[0]) and len(rows) >= len(CONTRACT_CHIPS)
    md = cli("presets", "list", "--kind", "chip", "--format", "markdown").out
    assert md.splitlines()[0].startswith("| id |") and "h100-sxm" in md


def test_piped_table_is_complete(cli):
    out = cli("presets", "list", "--kind", "chip", width=None).out
    assert "…" not in out and "NVIDIA H100 SXM5 80GB" in out
    assert "\x1b[" not in out  # no colour codes into a pipe


def test_terminal_table_has_no_colour_with_no_color(cli, monkeypatch):
    from aicalc.env import Env

    out = io.StringIO()
    from aicalc.cli import main

    main(["presets", "show", "gpt2"], env=Env(stdout=out, stderr=io.StringIO(), stdout_isatty=True, no_color=True, width=120))
    assert "\x1b[3" not in out.getvalue() and "124M" in out.getvalue()


def test_version(cli):
    r = subprocess.run([sys.executable, "-m", "aicalc", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == f"aicalc {__version__}"


def test_console_script_keeps_exit_code_and_output_without_teardown(cli):
    """The console script leaves without the interpreter's teardown (cli._leave): what it printed must still
    arrive whole, in a pipe, with the command's exit code, and a reader that stops early is no error."""
    import json

    run = [sys.executable, "-m", "aicalc"]
    r = subprocess.run([*run, "kv-cache", "llama-3.1-8b", "--chip", "l4", "--context", "1m", "--batch", "64",
                        "--json"], capture_output=True, text=True)
    assert r.returncode == 1, r.stderr  # does not fit: the contract's exit 1
    assert json.loads(r.stdout)["rows"][0]["fits"] is False  # the whole document arrived
    r = subprocess.run([*run, "kv-cache", "no-such-model"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stdout == ""
    p = subprocess.Popen([*run, "presets", "list", "--format", "csv"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.read(10)
    p.stdout.close()  # the reader goes away after 10 bytes, as `| head -c 10` does
    err = p.stderr.read().decode()
    # the reader leaving early is no failure: exit 0 whether the output was in the pipe or a write failed (click
    # answers EPIPE with exit 1, which read as "a budget was exceeded")
    assert p.wait(timeout=30) == 0 and "Traceback" not in err and "Exception ignored" not in err


def one_line_error(r, code=2):
    assert r.code == code
    assert r.out == ""
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert "Traceback" not in r.err
    return lines[0]


def test_unknown_preset_suggests(cli):
    line = one_line_error(cli("presets", "show", "llama-3.1-7b"))
    assert "did you mean" in line and "llama-3.1-8b" in line


def test_unknown_option_is_one_line(cli):
    line = one_line_error(cli("presets", "list", "--colour"))
    assert "--colour" in line


def test_bad_format(cli):
    assert "--format" in one_line_error(cli("presets", "list", "--format", "xml"))


def test_missing_config_file(cli, tmp_path):
    assert "config.json" in one_line_error(cli("presets", "show", str(tmp_path / "nope" / "config.json")))


def test_config_missing_field_is_named(cli, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
    line = one_line_error(cli("presets", "show", str(tmp_path)))
    assert "num_attention_heads" in line


def test_config_unknown_model_type(cli, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    assert "unsupported model_type 'mamba'" in one_line_error(cli("presets", "show", str(tmp_path)))


def test_config_not_json(cli, tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    assert "not a readable JSON" in one_line_error(cli("presets", "show", str(tmp_path / "config.json")))


@pytest.mark.parametrize("value", [0, -8, "8"])
def test_config_bad_values(cli, tmp_path, value):
    cfg = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": value, "num_hidden_layers": 2,
           "intermediate_size": 128, "vocab_size": 100}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert "num_attention_heads" in one_line_error(cli("presets", "show", str(tmp_path)))


def write_user_chip(folder, text):
    (folder / "chips").mkdir(parents=True, exist_ok=True)
    (folder / "chips" / "my-chip.yaml").write_text(text)


MY_CHIP = """id: my-chip
name: My chip
vendor: Me
kind: gpu
memory: 24GiB
memory_type: GDDR6
memory_bandwidth_gbs: 500
dense_tflops: {bf16: 100}
source: https://example.com/datasheet
"""


def test_user_presets_dir(cli, tmp_path):
    write_user_chip(tmp_path, MY_CHIP)
    row = cli("--presets-dir", tmp_path, "presets", "show", "my-chip", "--json").json["rows"][0]
    assert row["memory_bytes"] == 24 * 2**30 and row["peak_bf16_flop_per_s"] == 100e12


def test_user_presets_env_overrides_builtin(cli, tmp_path, monkeypatch):
    write_user_chip(tmp_path, MY_CHIP.replace("my-chip", "h100-sxm"))
    (tmp_path / "chips" / "my-chip.yaml").rename(tmp_path / "chips" / "h100-sxm.yaml")
    monkeypatch.setenv("AICALC_PRESETS", str(tmp_path))
    from aicalc.catalog import store

    store._index.cache_clear()
    try:
        row = cli("presets", "show", "h100-sxm", "--json").json["rows"][0]
        assert row["memory_bytes"] == 24 * 2**30
    finally:
        monkeypatch.delenv("AICALC_PRESETS")
        store._index.cache_clear()


def test_malformed_yaml_names_file_and_line(cli, tmp_path):
    write_user_chip(tmp_path, "id: my-chip\nname: [unclosed\n")
    line = one_line_error(cli("--presets-dir", tmp_path, "presets", "show", "my-chip"))
    assert "my-chip.yaml" in line and "invalid YAML" in line and "line" in line


def test_schema_violation_names_file_and_field(cli, tmp_path):
    write_user_chip(tmp_path, MY_CHIP.replace("memory_bandwidth_gbs: 500", "memory_bandwidth_gbs: -5"))
    line = one_line_error(cli("--presets-dir", tmp_path, "presets", "show", "my-chip"))
    assert "my-chip.yaml" in line and "memory_bandwidth_gbs" in line


def test_negative_size_in_yaml_rejected(cli, tmp_path):
    write_user_chip(tmp_path, MY_CHIP.replace("memory: 24GiB", "memory: 0GiB"))
    line = one_line_error(cli("--presets-dir", tmp_path, "presets", "show", "my-chip"))
    assert "memory" in line


def test_unsafe_yaml_is_not_executed(cli, tmp_path):
    write_user_chip(tmp_path, "!!python/object/apply:os.system ['echo pwned']\n")
    line = one_line_error(cli("--presets-dir", tmp_path, "presets", "show", "my-chip"))
    assert "invalid YAML" in line


def test_missing_presets_dir(cli, tmp_path):
    assert "does not exist" in one_line_error(cli("--presets-dir", tmp_path / "nope", "presets", "list"))


def test_internal_error_exit_3(cli, monkeypatch):
    from aicalc.commands import presets

    def boom(kind):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(presets, "list_", boom)
    r = cli("presets", "list")
    assert r.code == 3 and "internal error" in r.err and "Traceback" not in r.err
    r = cli("--debug", "presets", "list")
    assert r.code == 3 and "Traceback" in r.err


def test_help_does_not_import_heavy_modules():
    code = ("import io, sys; from aicalc.cli import main; from aicalc.env import Env; "
            "main(['--help'], env=Env(io.StringIO(), io.StringIO(), False)); "
            "main(['kv-cache', '--help'], env=Env(io.StringIO(), io.StringIO(), False)); "
            "print(sorted(m for m in ('numpy', 'rich', 'yaml', 'matplotlib') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "Usage: aicalc" in r.stdout  # click writes help to the process's stdout
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout + r.stderr


def test_no_arguments_shows_help(cli):
    for args in ([], ["presets"]):
        r = cli(*args)
        assert r.code == 0 and r.out.startswith("Usage: aicalc") and r.err == ""


def test_presets_fits_on(cli):
    # the answer is the list: only the models that fit (140 GB of bf16 70B weights do not fit one 80 GB H100)
    one = {r["id"]: r for r in cli("presets", "list", "--fits-on", "h100-sxm", "--json").json["rows"]}
    assert one["llama-3.1-8b"]["fits"] and "llama-3.1-70b" not in one and all(r["fits"] for r in one.values())
    node = {r["id"]: r for r in cli("presets", "list", "--fits-on", "dgx-h100", "--json").json["rows"]}
    assert node["llama-3.1-70b"]["fits"] and node["llama-3.1-70b"]["tp"] == 8
    long = {r["id"]: r for r in cli("presets", "list", "--fits-on", "h200", "--context", "32k", "--json").json["rows"]}
    assert "llama-2-7b" not in long and "llama-3.1-8b" in long  # 4,096-token model: a 32k context is past its limit
    table = cli("presets", "list", "--fits-on", "l4").out
    assert "llama-3.1-8b" in table and "llama-2-13b" not in table and "are left out" in table
    lora = cli("presets", "list", "--fits-on", "h100-sxm", "--lora", "--json").json["rows"]
    assert all("lora_fits" in r for r in lora)


@pytest.mark.parametrize("cmd", [("kv-cache", "llama-3.1-8b", "--chip", "l4"), ("roofline", "llama-3.1-8b"),
                                 ("serve", "llama-3.1-8b", "--concurrency", "8")])
def test_dtype_lists_make_one_table(cli, cmd):
    rows = cli(*cmd, "--dtype", "bf16,int4", "--kv-dtype", "bf16,fp8", "--json").json["rows"]
    pairs = {(r["dtype"], r["kv_dtype"]) for r in rows}
    assert pairs == {("bf16", "bf16"), ("int4", "bf16"), ("bf16", "fp8"), ("int4", "fp8")}
    w = {p: [r["weights_bytes_per_device"] for r in rows if (r["dtype"], r["kv_dtype"]) == p][0] for p in pairs}
    assert w[("int4", "fp8")] < 0.5 * w[("bf16", "fp8")]


@pytest.mark.parametrize("cmd", ["kv-cache", "train-mem", "roofline", "serve", "train-time", "compare", "check"])
def test_every_command_help_has_an_example_that_runs(cli, cmd, monkeypatch, tmp_path):
    import shlex

    import typer

    from aicalc.cli import app

    sub = typer.main.get_command(app).commands[cmd]
    line = next(x for x in sub.help.splitlines() if x.strip().startswith("Example: aicalc"))
    argv = shlex.split(line.strip()[len("Example: aicalc "):])
    if cmd == "check":  # the example names a budget file; run it on a minimal one
        (tmp_path / "budgets.yaml").write_text("version: 1\nchecks:\n  - name: a\n    command: kv-cache\n"
                                               "    model: gpt2\n    limits: {max_memory_per_device: 80GB}\n")
        monkeypatch.chdir(tmp_path)
    assert cli(*argv).code in (0, 1)


def test_short_version_flag(cli):
    from aicalc import __version__

    assert __version__ in cli("-V").out


def test_shell_completion_of_preset_ids():
    import os
    import subprocess
    import sys

    env = {**os.environ, "_AICALC_COMPLETE": "complete_bash", "COMP_WORDS": "aicalc serve llama-3.1-8b --chip h1",
           "COMP_CWORD": "4"}
    out = subprocess.run([sys.executable, "-m", "aicalc"], env=env, capture_output=True, text=True).stdout.split()
    assert "h100-sxm" in out and all(x.startswith("h1") for x in out)


def test_repeated_chip_is_a_chip_sweep(cli):
    for cmd in (("serve", "llama-3.1-8b", "--concurrency", "8"), ("roofline", "llama-3.1-8b"),
                ("train-time", "llama-3.1-8b", "--chips", "8"), ("kv-cache", "llama-3.1-8b"),
                ("train-mem", "llama-3.1-8b")):
        rows = cli(*cmd, "--chip", "l4", "--chip", "h100-sxm", "--json").json["rows"]
        assert {r["chip"] for r in rows} == {"l4", "h100-sxm"}, cmd
        title = cli(*cmd, "--chip", "l4", "--chip", "h100-sxm", width=200).out.splitlines()[0]
        # the title names both chips (it named the first chip's alone, above rows of both)
        t = title.lower()
        head = t.split(" — ")[0]  # the title proper, before any "— chip l4, h100-sxm"
        assert "l4" in t and "h100" in t and t.count("llama") == 1, (cmd, title)
        assert ("l4" in head) == ("h100" in head), (cmd, title)


def test_one_vocabulary_aliases(cli):
    a = cli("train-mem", "llama-3.1-8b", "--micro-batch", "2", "--json").json["rows"][0]
    b = cli("train-mem", "llama-3.1-8b", "--batch", "2", "--json").json["rows"][0]
    assert a["peak_bytes"] == b["peak_bytes"]
    eager = cli("roofline", "llama-3.1-8b", "--attention", "eager", "--json").json
    assert eager["inputs"]["attention"] == "materialized"
    assert cli("train-mem", "llama-3.1-8b", "--attention", "materialized").code in (0, 1)
    r = cli("train-time", "llama-3.1-8b", "--chips", "8", "--pp", "2", "--virtual-stages", "2", "--json")
    assert r.code in (0, 1) and r.json["inputs"]["interleave"] == 2  # 1: the layout does not fit (not the point)


def test_ids_are_case_insensitive(cli):
    upper = cli("kv-cache", "Llama-3.1-8B", "--chip", "H100-SXM", "--json").json["rows"][0]
    lower = cli("kv-cache", "llama-3.1-8b", "--chip", "h100-sxm", "--json").json["rows"][0]
    assert upper == lower
    assert cli("presets", "show", "DGX-H100").code == 0
    assert cli("roofline", "llama_3.1_8b", "--chip", "H100_SXM").code == 0


def test_did_you_mean_ranks_the_family_first(cli):
    err = cli("kv-cache", "llama3").err  # a llama 3 model, not llama-2 nor another family
    assert "did you mean llama-3." in err, err
    err = cli("roofline", "gpt2", "--chip", "h100").err
    assert "did you mean h100-" in err and all(c.startswith("h100-") for c in
                                                   err.split("did you mean ")[1].rstrip("?\n").split(", ")), err
    err = cli("presets", "show", "dgx-h10").err  # presets show looks across chips, nodes and models
    assert "did you mean dgx-h100" in err, err


def test_a_repeated_single_valued_option_is_bad_input(cli):
    r = cli("roofline", "gpt2", "--tp", "1", "--tp", "2")
    assert r.code == 2 and "--tp given twice" in r.err, r.err
    r = cli("train-mem", "gpt2", "--batch", "2", "--micro-batch=4")  # two spellings of one option
    assert r.code == 2 and "--micro-batch given twice (also as --batch)" in r.err, r.err
    r = cli("train-time", "gpt2", "--sp", "--no-sp")
    assert r.code == 2, r.err
    assert cli("roofline", "gpt2", "--chip", "l4", "--chip", "h100-sxm", "--eff", "bandwidth=0.8",
               "--eff", "flop_max=0.8").code == 0  # repeatable options repeat


def test_help_groups_options_in_panels_with_units(cli, capsys):
    cli("serve", "--help")
    out = capsys.readouterr().out
    for panel in ("Model and hardware:", "Workload:", "Parallelism:", "Precision and memory:", "Limits and cost:",
                  "Output:"):
        assert panel in out, panel
    assert out.index("Workload:") < out.index("--prompt TOKENS") < out.index("Parallelism:") < out.index("--tp N")
    assert "--max-ttft SECONDS" in out and "--price USD/h" in out and "<str>" not in out
    assert "Other options" not in out  # every option of serve has its panel


def _rows(cli, *argv):
    r = cli(*argv, "--json")
    assert r.code in (0, 1), r.err
    return [{k: v for k, v in row.items() if k != "chip"} for row in r.json["rows"]]


def test_a_node_means_its_chips_in_every_command(cli):
    """dgx-h100 is 8 × h100-sxm on NVLink: with no split given, each command uses all 8 as a chip id with the
    split written out would."""
    m = "llama-3.1-70b"
    assert _rows(cli, "roofline", m, "--chip", "dgx-h100") == _rows(cli, "roofline", m, "--chip", "h100-sxm",
                                                                     "--tp", "8")
    assert _rows(cli, "serve", m, "--chip", "dgx-h100", "--concurrency", "8") == \
        _rows(cli, "serve", m, "--chip", "h100-sxm", "--tp", "8", "--chips", "8", "--concurrency", "8")
    assert _rows(cli, "serve", m, "--chip", "dgx-h100", "--tp", "4", "--concurrency", "8") == \
        _rows(cli, "serve", m, "--chip", "h100-sxm", "--tp", "4", "--chips", "8", "--concurrency", "8")
    assert _rows(cli, "train-time", "llama-3.1-8b", "--chip", "dgx-h100") == \
        _rows(cli, "train-time", "llama-3.1-8b", "--chip", "h100-sxm", "--chips", "8")
    node = _rows(cli, "kv-cache", m, "--chip", "dgx-h100")[0]
    chip = _rows(cli, "kv-cache", m, "--chip", "h100-sxm", "--tp", "8")[0]
    assert node == chip
    assert _rows(cli, "train-mem", "llama-3.1-8b", "--chip", "dgx-h100", "--zero", "3", "--tp", "2")[0]["dp"] == 4
    assert cli("compare", "gpt2", "--chip", "dgx-h100").code == 0


def test_tp_chips_and_zero_sweep_as_one_table(cli):
    rows = cli("serve", "llama-3.1-70b", "--chips", "8", "--tp", "2,4,8", "--concurrency", "16", "--json").json["rows"]
    assert [(r["tp"], r["replicas"]) for r in rows] == [(2, 4), (4, 2), (8, 1)]
    one = cli("serve", "llama-3.1-70b", "--chips", "8", "--tp", "4", "--concurrency", "16", "--json").json["rows"][0]
    assert rows[1] == one  # a point of the sweep is the single run
    rows = cli("kv-cache", "llama-3.1-70b", "--tp", "1:8:x2", "--json").json["rows"]
    assert [r["kv_cache_bytes_per_device"] * r["tp"] for r in rows] == [rows[0]["kv_cache_bytes_per_device"]] * 4
    rows = cli("train-time", "llama-3.1-8b", "--chips", "8,64", "--zero", "0,3", "--json").json["rows"]
    assert [(r["chips"], r["zero"]) for r in rows] == [(8, 0), (8, 3), (64, 0), (64, 3)]
    assert cli("train-time", "llama-3.1-8b", "--zero", "4").code == 2


@pytest.mark.parametrize("argv, named", [
    (("roofline", "llama-3.1-8b", "--seq", "4k"), "--prompt"),
    (("serve", "llama-3.1-8b", "--batch", "8"), "--concurrency"),
    (("train-mem", "llama-3.1-8b", "--dtype", "fp8"), "--precision"),
    (("kv-cache", "llama-3.1-8b", "--seq", "8k"), "--context"),
])
def test_another_commands_option_name_points_to_this_ones(cli, argv, named):
    """Click guessed by spelling (roofline --seq → --eff, --gen, --ops); the concept's name here is the answer."""
    r = cli(*argv)
    assert r.code == 2 and named in r.err and r.err.count("\n") == 1


def test_presets_show_a_node_in_node_terms(cli):
    """dgx-h100 is 8 × h100-sxm: memory and peaks summed (as presets list shows them), the chip's under
    *_per_chip, the node's own power, link and source."""
    node = cli("presets", "show", "dgx-h100", "--json").json["rows"][0]
    chip = cli("presets", "show", "h100-sxm", "--json").json["rows"][0]
    assert node["memory_bytes"] == 8 * chip["memory_bytes"] and node["memory_bytes_per_chip"] == chip["memory_bytes"]
    assert node["peak_bf16_flop_per_s"] == 8 * chip["peak_bf16_flop_per_s"]
    assert node["system_power_w"] == 10200 and "tdp_w" not in node  # the DGX H100 datasheet's 10.2 kW
    assert node["price_per_hour_usd"] == pytest.approx(8 * chip["price_per_hour_usd"])
    listed = {r["id"]: r for r in cli("presets", "list", "--kind", "node", "--json").json["rows"]}
    assert listed["dgx-h100"]["memory_bytes"] == node["memory_bytes"]


def test_a_title_that_differs_in_several_places_elides_them(cli):
    """serve --tp 2,4,8: chips, TP and replicas all change; the title keeps what is common and names the sweep
    (it joined three whole titles, or pieces of them, with " / ")."""
    title = cli("serve", "llama-3.1-70b", "--chip", "h100-sxm", "--tp", "2,4,8", "--concurrency", "8",
                width=300).out.splitlines()[0]
    assert title.count("NVIDIA H100") == 1 and title.endswith("— tp 2, 4, 8") and "…" in title, title


@pytest.mark.parametrize("argv", [
    ("kv-cache", "llama-3.1-8b", "--chip", "h100-sxm", "--batch", "1,8"),
    ("roofline", "llama-3.1-8b", "--batch", "1,8"),
    ("serve", "llama-3.1-8b", "--concurrency", "4"),
    ("train-mem", "llama-3.1-8b", "--batch", "1,2"),
    ("train-time", "llama-3.1-8b", "--chips", "8"),
])
def test_json_inputs_echo_sweep_axes_as_lists_of_numbers(cli, argv):
    """kv-cache echoed "batch": [1.0], roofline "batch": "1", train-time "tp": "1": one shape for scripts."""
    from aicalc.result import AXES

    inputs = cli(*argv, "--json").json["inputs"]
    axes = {k: v for k, v in inputs.items() if k in AXES and v is not None}
    assert axes and all(isinstance(v, list) and v and all(type(x) is int for x in v) for v in axes.values()), axes


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
@pytest.mark.parametrize("shell, code, err", [
    ("kv-cache llama-3.1-8b >/dev/full", 2, "cannot write the output"),  # stdout on a full device
    ("--help >/dev/full", 2, "cannot write the output"),
    ("kv-cache llama-3.1-8b --format csv >/dev/full", 2, "cannot write the output"),
    ("kv-cache no-such-model 2>/dev/full", 2, None),  # the error line is lost, the code still says bad input
    ("kv-cache llama-3.1-8b >&-", 0, None),  # a closed stdout: nothing to write to, nothing went wrong
    ("kv-cache llama-3.1-8b 2>&- >/dev/null", 0, None),  # a closed stderr does not turn success into failure
])
def test_streams_that_cannot_take_the_output(shell, code, err):
    r = subprocess.run(["bash", "-c", f"{sys.executable} -m aicalc {shell}"], capture_output=True, text=True)
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    if err:
        assert err in r.stderr and r.stderr.count("\n") == 1


def test_an_encoding_that_cannot_spell_the_symbols_writes_question_marks():
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "PYTHONUTF8": "0", "LC_ALL": "C"}
    r = subprocess.run([sys.executable, "-m", "aicalc", "serve", "llama-3.1-8b", "--concurrency", "1"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0 and "1 ? NVIDIA H100" in r.stdout and "Traceback" not in r.stderr


def test_empty_or_repeated_names_in_options(cli):
    assert cli("kv-cache", "llama-3.1-8b", "--columns", "").code == 2  # was ignored silently
    assert cli("--presets-dir", "", "kv-cache", "llama-3.1-8b").code == 2  # "" made "." a preset root
    out = cli("kv-cache", "llama-3.1-8b", "--batch", "1,2", "--columns", "batch,batch,context", width=200).out
    header = next(line for line in out.splitlines() if "batch" in line)
    assert header.count("batch") == 1
    assert cli("kv-cache", "llama-3.1-8b", "--batch", "1:100000:+1", "--json").code == 0  # exactly the cap
    r = cli("kv-cache", "llama-3.1-8b", "--batch", "1:100001:+1")
    assert r.code == 2 and "100,001 points" in r.err


@pytest.fixture
def gc_threshold():
    """The console script's entry point sets the collector's thresholds; the test process gets its own back."""
    import gc

    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_the_console_script_collects_young_objects_every_100000_allocations(monkeypatch, gc_threshold):
    """A query allocates ~100,000 container objects, none of them garbage: at CPython's 700 the collector
    traversed them ~70 times (5 % of a query's instructions). The entry point raises the young generation's
    threshold and keeps the older generations' ratios."""
    import gc

    import aicalc.cli
    from aicalc import __main__ as entry

    seen = []
    older = gc.get_threshold()[1:]
    monkeypatch.setattr(aicalc.cli, "main", lambda: seen.append(gc.get_threshold()))
    entry.run()
    assert seen == [(100_000, *older)]


_THREADS_AFTER_NUMPY = """
import os, sys
if sys.argv[1] == "entry":
    from aicalc.__main__ import one_blas_thread
    one_blas_thread()
import numpy
print(len(os.listdir("/proc/self/task")))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="threads counted through Linux's /proc")
def test_the_console_script_has_numpy_start_no_blas_threads():
    """numpy's OpenBLAS starts a spinning worker per core on import (numpy #29193); the entry point asks for none
    where the environment names no thread count, and keeps a count it names."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                                              "OMP_NUM_THREADS")}

    def threads(how: str, **extra) -> int:
        out = subprocess.run([sys.executable, "-c", _THREADS_AFTER_NUMPY, how], env={**env, **extra},
                             capture_output=True, text=True, check=True)
        return int(out.stdout)

    if threads("plain") == 1:
        pytest.skip("this numpy starts no BLAS threads here (one core, or a BLAS without a thread pool)")
    assert threads("entry") == 1
    assert threads("entry", OMP_NUM_THREADS="2") == threads("plain", OMP_NUM_THREADS="2") > 1


_STACK_EDGES = """
import resource, sys
from aicalc.__main__ import on_a_wide_stack

def leaf():
    return 1

def at_depth(n):
    if n:
        return at_depth(n - 1)
    for _ in range(200):  # a loop of calls: across a chunk's edge each maps and unmaps a chunk
        leaf()

def scan():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for depth in range(400):  # 400 frames of ~100 bytes: past the edge of the first 16 KiB chunk
        at_depth(depth)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

print(scan() if sys.argv[1] == "plain" else on_a_wide_stack(scan))
"""


@pytest.mark.skipif(sys.implementation.name != "cpython" or sys.platform != "linux",
                    reason="CPython's frame chunks, page faults counted by Linux")
def test_the_console_script_runs_on_one_wide_frame_chunk():
    """A loop of calls across the edge of CPython's 16 KiB frame chunks maps a new chunk at each call (a page
    fault each); called from the entry point's wide frame, a scan of call depths up to 400 pages in nothing new."""

    def faults(how: str) -> int:
        out = subprocess.run([sys.executable, "-c", _STACK_EDGES, how], capture_output=True, text=True, check=True)
        return int(out.stdout)

    plain = faults("plain")
    if plain < 200:
        pytest.skip(f"this interpreter keeps its frame chunks ({plain} page faults on the plain scan)")
    assert faults("wide") < 50


def test_the_entry_point_returns_what_its_function_returns():
    from aicalc.__main__ import on_a_wide_stack

    assert on_a_wide_stack(lambda: 42) == 42
    with pytest.raises(ZeroDivisionError):
        on_a_wide_stack(lambda: 1 / 0)


def test_ctrl_c_while_importing_exits_130_without_a_traceback(monkeypatch, gc_threshold):
    import builtins

    from aicalc import __main__ as entry

    real = builtins.__import__

    def interrupted(name, *args, **kwargs):
        if name == "aicalc.cli":
            raise KeyboardInterrupt
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", interrupted)
    with pytest.raises(SystemExit) as e:
        entry.run()
    assert e.value.code == 130


@pytest.mark.parametrize("columns", ["0", "1", "7"])
def test_a_tiny_columns_still_draws_the_table(monkeypatch, columns):
    """COLUMNS=0 printed only the warning line, COLUMNS=1 one character a line: a table is drawn at least
    render.MIN_WIDTH wide, the columns that do not fit left out (they stay in --json)."""
    from aicalc.cli import main
    from aicalc.env import Env
    from aicalc.render import MIN_WIDTH

    monkeypatch.setenv("COLUMNS", columns)
    out = io.StringIO()
    code = main(["kv-cache", "llama-3.1-8b", "--batch", "1,8"], env=Env(stdout=out, stderr=io.StringIO(),
                                                                      stdout_isatty=True, no_color=True))
    lines = out.getvalue().splitlines()
    assert code == 0
    assert any(line.startswith("┏") for line in lines) and len([x for x in lines if x.startswith("│")]) == 2
    assert max(len(x) for x in lines) <= MIN_WIDTH


def test_unicode_format_characters_are_escaped_like_controls(tmp_path):
    """A right-to-left override (U+202E) in a file name makes "cfg\u202enosj.json" read as "cfgjson.son":
    error lines show format characters as "?", as they show control characters."""
    from aicalc.cli import main
    from aicalc.env import Env
    from aicalc.render import _printable

    err = io.StringIO()
    name = str(tmp_path / "cfg\u202enosj\u200b\x9b.json")
    code = main(["kv-cache", name], env=Env(stdout=io.StringIO(), stderr=err, stdout_isatty=False))
    assert code == 2 and "\u202e" not in err.getvalue() and "\u200b" not in err.getvalue()
    assert "cfg?nosj??.json" in err.getvalue()
    assert _printable("naïve 中文 e\u0301") == "naïve 中文 e\u0301"  # letters and combining marks stay


def test_declared_params_read_as_typer_reads_them():
    """cli._declared_params reads a command's option declarations without typer's signature and type-hint pass;
    for every command function (and the root callback) it must give what typer's own reader gives: the same
    names in order, annotations and declarations field by field (None, typer's reader, on another typer)."""
    import typer
    from typer.utils import get_params_from_function

    from aicalc import cli

    functions = [c.callback for c in cli.app.registered_commands] + [cli.app.registered_callback.callback]
    functions += [c.callback for g in cli.app.registered_groups for c in g.typer_instance.registered_commands]
    assert len(functions) >= 9
    for f in functions:
        ours, theirs = cli._declared_params(f), get_params_from_function(f)
        if not typer.__version__.startswith("0.28."):
            assert ours is None
            continue
        assert list(ours) == list(theirs), f.__name__
        for name, meta in theirs.items():
            mine = ours[name]
            assert (mine.name, mine.annotation, type(mine.default)) == (meta.name, meta.annotation, type(meta.default))
            assert vars(mine.default) == vars(meta.default), (f.__name__, name)
