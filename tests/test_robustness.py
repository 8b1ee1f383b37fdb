"""Never crash, never hang, never print a wrong number (docs/robustness.md).

One regression test per class of failure measured on aicalc (internal errors, hangs, bad numbers), and the
corpus of hostile files in tests/data/hostile/: every run ends with exit 0, 1 or 2 (never 3, never a
traceback or a crash), within a few seconds and well under 1 GiB. tests/test_fuzz.py generates the rest.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from aicalc.catalog.store import MAX_FILE_BYTES
from aicalc.cli import main
from aicalc.env import Env

from conftest import DATA, ROOT

HOSTILE = DATA / "hostile"
MEMORY_BYTES = 2**30  # peak resident memory bound on any one run

# Row keys of ../shared/CONTRACT.md that must hold a value in every row the command prints.
CONTRACT_KEYS = {
    "kv-cache": ("batch", "context", "kv_cache_bytes", "kv_cache_bytes_per_device"),
    "train-mem": ("params", "trainable_params", "weights_bytes", "gradients_bytes", "optimizer_bytes",
                  "activations_bytes", "peak_bytes"),
    "roofline": ("phase", "batch", "bound", "arithmetic_intensity", "ridge_point", "ttft_s", "tpot_s",
                 "output_tokens_per_s"),
    "train-time": ("mfu", "model_flop_per_s_per_chip", "tokens_per_s", "total_time_s", "chip_hours"),
    "serve": ("concurrency", "ttft_s", "tpot_s", "output_tokens_per_s"),
    "compare": ("chip", "phase"),  # memory_bytes and chips_needed: null only in a row that says fits: false
    "check": ("name", "status", "limit"),  # value: null only in a row whose status is not pass
}
SIGNED = ("margin",)  # keys whose sign is the point: check's margin is negative when a limit is broken
KNOWN_NEGATIVE = ()  # keys allowed below zero besides SIGNED: none


class Run:
    def __init__(self, args, code, out, err, seconds, read_bytes=None):
        self.args, self.code, self.out, self.err, self.seconds = args, code, out, err, seconds
        self.read_bytes = read_bytes  # bytes the run read through system calls (Linux, in-process batches)

    def __repr__(self):
        return f"exit {self.code}: {self.err[:300]!r} ← aicalc {' '.join(map(str, self.args))[:200]}"


def run(*args, width: int | None = None) -> Run:
    """aicalc in-process, numpy and Python warnings turned into errors (so that one shows as exit 3); ``width``:
    into a terminal of that many columns (tables fitted to it) instead of a pipe."""
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    env = Env(stdout=out, stderr=err, stdout_isatty=width is not None, no_color=True, width=width)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code = main([str(a) for a in args], env=env)
    return Run(args, code, out.getvalue(), err.getvalue(), time.perf_counter() - start)


def assert_sane(r: Run) -> None:
    """Exit 0, 1 or 2, promptly; bad input is one ``aicalc: error:`` line per problem, no traceback; an
    accepted input printed as JSON holds only finite, non-negative numbers and the contract's keys."""
    assert r.code in (0, 1, 2), r
    assert "Traceback" not in r.err and "internal error" not in r.err, r
    if r.code == 2:
        lines = r.err.splitlines()
        assert lines and all(line.startswith("aicalc: error: ") for line in lines), r
        return
    assert "Warning:" not in r.err, r  # a Python or numpy warning, as opposed to aicalc's own "warning: …" lines
    if "--json" in r.args and r.out:
        check_rows(json.loads(r.out), r)


def check_rows(envelope: dict, r=None) -> None:
    command = envelope["command"]
    for row in envelope["rows"]:
        for key, value in row.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            assert math.isfinite(value), (key, value, r)
            assert value >= 0 or any(s in key for s in SIGNED) or key in KNOWN_NEGATIVE, (key, value, r)
        per_op = row.get("op", "total") != "total"  # roofline --ops: one row per operation beside the totals
        for key in () if per_op else CONTRACT_KEYS.get(command, ()):
            assert row.get(key) is not None, (key, row, r)
        if command == "compare" and row.get("fits"):
            assert row.get("memory_bytes") is not None and row.get("chips_needed") is not None, (row, r)
        if command == "check" and row["status"] == "pass":
            assert row.get("value") is not None, (row, r)


def run_isolated(*args, cwd=None, timeout=60) -> Run:
    """aicalc in a fresh process (a crash or a runaway allocation cannot take the test run with it), with its
    wall time and peak resident memory, under a 4 GiB address-space limit as a backstop."""
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))\n"
        "from aicalc.cli import main\n"
        "try:\n"
        "    code = main(sys.argv[1:])\n"
        "finally:\n"
        "    print(f'\\nmaxrss_kb={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}', file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONWARNINGS": "error::RuntimeWarning"}
    start = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                           timeout=timeout, cwd=cwd or ROOT, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"aicalc {' '.join(map(str, args))[:300]} ran past {timeout} s")
    seconds = time.perf_counter() - start
    err, _, rss = p.stderr.rpartition("\nmaxrss_kb=")
    assert p.returncode >= 0, f"killed by signal {-p.returncode}: aicalc {' '.join(map(str, args))[:300]}"
    assert rss.strip().isdigit(), p.stderr[-2000:]
    assert int(rss) * 1024 < MEMORY_BYTES, f"{int(rss) // 1024} MiB: aicalc {' '.join(map(str, args))[:300]}"
    return Run(args, p.returncode, p.stdout, err.strip("\n") + ("\n" if err.strip() else ""), seconds)


DRIVER = """
import json, resource, sys, time, warnings
resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))
from io import StringIO
from aicalc.cli import main
from aicalc.env import Env
def read_bytes():  # bytes this process has read through system calls (Linux), or None
    try:
        with open("/proc/self/io") as f:
            return int(next(line for line in f if line.startswith("rchar:")).split()[1])
    except (OSError, StopIteration, ValueError):
        return None
results = []
for args in json.load(open(sys.argv[1])):
    out, err = StringIO(), StringIO()
    start, before = time.perf_counter(), read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            code = main(args, env=Env(stdout=out, stderr=err, stdout_isatty=False))
        except BaseException as e:  # a crash of main() itself
            code, err = -1, StringIO(f"Traceback: {type(e).__name__}: {e}")
    after = read_bytes()
    results.append([args, code, out.getvalue()[:200000], err.getvalue()[:5000], time.perf_counter() - start,
                    None if before is None or after is None else after - before])
json.dump({"runs": results, "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}, sys.stdout)
"""


def run_batch(argvs: list[list[str]], tmp_path: Path, timeout: float = 300) -> list[Run]:
    """Many aicalc runs in one fresh process (isolated from pytest, bounded in memory): its peak resident
    memory, which bounds every run's, must stay under MEMORY_BYTES."""
    cases = tmp_path / "argvs.json"
    cases.write_text(json.dumps([[str(a) for a in argv] for argv in argvs]))
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-c", DRIVER, str(cases)], capture_output=True, text=True, timeout=timeout,
                       cwd=ROOT, env=env)
    assert p.returncode == 0, f"the batch died (exit {p.returncode}): {p.stderr[-3000:]}"
    report = json.loads(p.stdout)
    assert report["maxrss_kb"] * 1024 < MEMORY_BYTES, f"peak {report['maxrss_kb'] // 1024} MiB"
    return [Run(args, code, out, err, seconds, read) for args, code, out, err, seconds, read in report["runs"]]


def assert_all_sane(runs: list[Run]) -> None:
    problems = []
    for r in runs:
        try:
            assert_sane(r)
        except AssertionError as e:
            problems.append(str(e)[:600])
    assert not problems, f"{len(problems)} of {len(runs)} runs:\n" + "\n".join(problems)


# --- the corpus of hostile files ------------------------------------------------------------------------------

CONFIGS = sorted((HOSTILE / "configs").glob("*.json"))
BUDGETS = sorted((HOSTILE / "budgets").glob("*.yaml"))
PRESET_CASES = sorted(p for p in (HOSTILE / "presets").iterdir() if p.is_dir())


def test_the_corpus_is_there():
    assert len(CONFIGS) >= 40 and len(BUDGETS) >= 50 and len(PRESET_CASES) >= 3


def test_hostile_configs(tmp_path):
    argvs = []
    for f in CONFIGS:
        argvs += [["presets", "show", f, "--json"], ["kv-cache", f, "--chip", "h100-sxm", "--json"],
                  ["train-mem", f, "--json"], ["roofline", f, "--json"], ["presets", "show", f]]
    runs = run_batch(argvs, tmp_path)
    assert_all_sane(runs)
    refused = {Path(r.args[2]).name for r in runs if r.code == 2}
    accepted = {f.name for f in CONFIGS} - refused
    assert accepted == {"nan-literal.json", "name-is-list.json"}, \
        accepted  # NaN in a field aicalc does not read, and a list for the display name, are harmless


def test_hostile_budgets(tmp_path):
    marker = Path("/tmp/aicalc-hostile-pwned")
    marker.unlink(missing_ok=True)
    runs = run_batch([["check", f, "--json"] for f in BUDGETS] + [["check", f] for f in BUDGETS], tmp_path)
    assert_all_sane(runs)
    assert not marker.exists()  # no file ran code
    code = {Path(r.args[1]).name: r.code for r in runs}
    assert code["violated-error-budget.yaml"] == 1 and code["merge-keys.yaml"] == 0
    assert all(c == 2 for name, c in code.items() if name not in ("violated-error-budget.yaml", "merge-keys.yaml")), \
        {n: c for n, c in code.items() if c != 2}


def test_hostile_presets(tmp_path):
    marker = Path("/tmp/aicalc-hostile-pwned")
    marker.unlink(missing_ok=True)
    argvs = []
    for case in PRESET_CASES:
        for f in sorted(case.glob("*/*.yaml")):
            kind = f.parent.name
            argvs.append(["--presets-dir", case, "presets", "show", f.stem, "--json"])
            if kind == "chips":
                argvs.append(["--presets-dir", case, "kv-cache", "gpt2", "--chip", f.stem, "--json"])
                argvs.append(["--presets-dir", case, "serve", "gpt2", "--chip", f.stem, "--json"])
                argvs.append(["--presets-dir", case, "roofline", "gpt2", "--chip", f.stem, "--json"])
            elif kind == "nodes":
                argvs.append(["--presets-dir", case, "kv-cache", "gpt2", "--chip", f.stem, "--tp", "4", "--json"])
            else:
                argvs.append(["--presets-dir", case, "kv-cache", f.stem, "--json"])
        argvs.append(["--presets-dir", case, "presets", "list", "--json"])
    runs = run_batch(argvs, tmp_path)
    assert_all_sane(runs)
    assert not marker.exists()


# --- files too large for the repository, written here -----------------------------------------------------------

LLAMA = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4,
         "intermediate_size": 1376, "vocab_size": 32000}


def _large(tmp_path: Path) -> dict[str, list[str]]:
    """name → command line, over files written into tmp_path."""
    cases = {}
    deep_json = tmp_path / "deep.json"
    deep_json.write_text("[" * 100_000 + "]" * 100_000)
    cases["json nested 10^5 deep"] = ["presets", "show", deep_json]
    deep_field = tmp_path / "deep-field" / "config.json"
    deep_field.parent.mkdir()
    deep_field.write_text(json.dumps(LLAMA)[:-1] + ', "x": ' + '{"a":' * 100_000 + "1" + "}" * 100_001)
    cases["config.json field nested 10^5 deep"] = ["kv-cache", deep_field.parent]
    deep_yaml = tmp_path / "deep.yaml"
    deep_yaml.write_text("version: 1\nchecks: " + "[" * 100_000 + "]" * 100_000 + "\n")
    cases["yaml nested 10^5 deep (flow)"] = ["check", deep_yaml]
    block_yaml = tmp_path / "block.yaml"
    block_yaml.write_text("version: 1\nchecks:\n  " + "- " * 100_000 + "x\n")
    cases["yaml nested 10^5 deep (block)"] = ["check", block_yaml]
    comment = tmp_path / "comment.yaml"
    with comment.open("w") as f:
        f.write("# " + "x" * 50_000_000 + "\nversion: 1\nchecks: []\n")
    cases["a 50 MB comment"] = ["check", comment]
    big = tmp_path / "big.json"
    big.write_text(json.dumps({**LLAMA, "padding": ["x" * 100] * 50_000}))
    cases["a 5 MB config.json"] = ["presets", "show", big]
    many = tmp_path / "many.yaml"
    check = ("  - {{name: c{i}, command: kv-cache, model: gpt2, args: {{context: 1k}}, "
             "limits: {{max_memory_per_device: 80GB}}}}\n")
    many.write_text("version: 1\nchecks:\n" + "".join(check.format(i=i) for i in range(5000)))
    cases["a budget of 5000 checks"] = ["check", many]
    laughs = tmp_path / "laughs.yaml"
    laughs.write_text('a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
                      + "".join(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 12))
                      + "version: 1\nchecks: *a11\n")
    cases["an alias bomb of 10^12 nodes"] = ["check", laughs]
    layers = tmp_path / "layers.json"
    layers.write_text(json.dumps({**LLAMA, "num_hidden_layers": 10**9}))
    cases["a config of 10^9 layers"] = ["kv-cache", layers, "--chip", "h100-sxm"]
    return cases


def test_large_hostile_files_are_refused_fast_and_small(tmp_path):
    """Bounded by work, not by wall time: each file is refused having read at most the 4 MiB a file may hold
    (the 50 MB comment is refused by its size, unread), within the batch's memory bound. The cases run twice in
    one process and the second pass is measured, so the modules the first one imports are not counted."""
    cases = _large(tmp_path)
    runs = run_batch(list(cases.values()) * 2, tmp_path)[len(cases):]
    for (name, _), r in zip(cases.items(), runs, strict=True):
        assert r.code == 2, (name, r)
        assert_sane(r)
        if r.read_bytes is not None:
            assert r.read_bytes <= MAX_FILE_BYTES + 2**20, (name, r.read_bytes)


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, "version: 1\nchecks:\n  " + "- " * 100_000 + "x\n"])
def test_deep_nesting_cannot_crash_the_process(tmp_path, text):
    """A recursive parser dies of a C stack overflow (a segmentation fault, not an exception) at this depth:
    a fresh process shows it, where the in-process batch would only die."""
    f = tmp_path / ("deep.json" if text.startswith("[") else "deep.yaml")
    f.write_text(text)
    r = run_isolated("presets" if f.suffix == ".json" else "check", *(["show"] if f.suffix == ".json" else []), f)
    assert r.code == 2 and "nested more than 64 levels" in r.err, r


# --- one regression test per class measured in the issue --------------------------------------------------------


def one_error(r: Run) -> str:
    assert r.code == 2, r
    assert_sane(r)
    lines = r.err.splitlines()
    assert len(lines) == 1, r
    return lines[0]


@pytest.mark.parametrize("where", ["folder", "missing/report.xml"])
def test_junit_into_a_folder_or_a_missing_folder(tmp_path, where):
    budget = tmp_path / "b.yaml"
    budget.write_text("version: 1\nchecks:\n  - {name: c, command: kv-cache, model: gpt2, "
                      "limits: {max_memory_per_device: 80GB}}\n")
    (tmp_path / "folder").mkdir()
    line = one_error(run("check", budget, "--junit", tmp_path / where))
    assert "--junit" in line and ("Is a directory" in line or "No such file" in line), line


@pytest.mark.parametrize("name", ["a" * 5000, "a/" * 3000, "x" * 300 + ".json"])
def test_an_over_long_model_name(name):
    line = one_error(run("kv-cache", name))
    assert len(line) < 400, line


@pytest.mark.parametrize("file, says", [
    ("deep-nesting.json", "nested more than 64 levels"),
    ("list-for-number.json", "'hidden_size' must be a positive integer"),
    ("dict-for-number.json", "'num_hidden_layers' must be a positive integer"),
    ("mixed-layer-types.json", "layer_types"),
    ("unhashable-layer-types.json", "layer_types"),
    ("int-for-list.json", "mlp_only_layers"),
    ("unhashable-list.json", "mlp_only_layers"),
    ("5000-digit-int.json", "an integer of 5,000 digits"),
    ("nan-for-int.json", "'num_hidden_layers' must be a positive integer, got nan"),
    ("zero-divisor-heads.json", "'num_attention_heads' must be a positive integer"),
    ("zero-head-dim.json", "head_dim would be 0"),
    ("billion-layers.json", "above aicalc's cap of 4,096"),
    ("duplicate-keys.json", "duplicate key 'hidden_size'"),
])
def test_config_json_problems_are_named(file, says):
    line = one_error(run("kv-cache", HOSTILE / "configs" / file, "--chip", "h100-sxm"))
    assert says in line and file in line, line


@pytest.mark.parametrize("argv, says", [
    (["kv-cache", "gpt2", "--overhead", "1e30B"], "--overhead 1e+30 is above aicalc's cap"),
    (["kv-cache", "gpt2", "--overhead", "1e30GB"], "--overhead 1e+39 is above aicalc's cap"),
    (["serve", "gpt2", "--chips", str(10**30)], "--chips 1e+30 is above aicalc's cap of 1,048,576 chips"),
    (["train-mem", "gpt2", "--search", "--chip", "h100-sxm", "--chips", str(10**30)], "--chips 1e+30 is above"),
    (["train-time", "gpt2", "--chips", str(10**30)], "--chips 1e+30 is above"),
    (["serve", "gpt2", "--price", "1e308"], "--price"),
    (["serve", "gpt2", "--price", "nan"], "--price"),
    (["serve", "gpt2", "--tp", "0"], "--tp must be a positive finite number, got '0'"),
    (["train-mem", "gpt2", "--microbatches", "-1"], "--microbatches -1 must be at least 1"),
    (["train-mem", "gpt2", "--lora-rank", "-4"], "--lora-rank -4 must be at least 1"),
    (["train-mem", "gpt2", "--batch", "1e30"], "--batch 1e+30 is above aicalc's cap of 16,777,216"),
    (["kv-cache", "gpt2", "--context", "1e12"], "--context 1,000,000,000,000 is above aicalc's cap"),
    (["roofline", "gpt2", "--eff", "bandwidth=nan"], "--eff bandwidth=nan must set a finite"),
    (["kv-cache", "gpt2", "--budget", "1e-400GB"], "--budget 1e-400GB must be a positive finite number"),
    # issue 26: E was no prefix (1EFLOPS read as 1 FLOP/s), an achieved rate above the peak gave MFU 970, one of
    # 1e-300 and a bandwidth share of 1e-320 overflowed numpy (warnings on stderr, null times at exit 0)
    (["train-time", "llama-3.1-8b", "--achieved", "1EFLOPS"], "--achieved 1EFLOPS is above h100-sxm's peak of 989.4"),
    (["train-time", "llama-3.1-8b", "--achieved", "1000PFLOPS"], "is above h100-sxm's peak"),
    (["train-time", "llama-3.1-8b", "--achieved", "1e-300FLOPS"], "is below 1e-06 of h100-sxm's peak"),
    (["train-time", "llama-3.1-8b", "--mfu", "1e-300"], "--mfu 1e-300 is below 1e-06 of the peak"),
    (["roofline", "gpt2", "--eff", "bandwidth=1e-320"], "--eff bandwidth=1e-320 is a share of a peak: it must lie in"),
])
def test_out_of_range_numbers_are_refused_with_the_cap(argv, says):
    line = one_error(run(*argv))
    assert says in line, line


@pytest.mark.parametrize("option, sweep", [("--pp", "1:1e7:+1"), ("--seq", "1:1e7:+1"), ("--seq", "1:1e9:x1.0000001"),
                                           ("--global-batch", "1:1e9:+1"), ("--seq", ",".join(["1"] * 100_001))])
def test_a_sweep_of_ten_million_points_is_refused_at_once(option, sweep):
    r = run("train-time", "gpt2", option, sweep)
    if option == "--pp":  # a pipeline of 10^7 stages is refused by its cap before its points are counted
        assert "--pp 10,000,000 is above aicalc's cap of 1,048,576 devices" in one_error(r)
        return
    line = one_error(r)
    assert "limited to 100,000 points" in line, line  # counted, not built: run() bounds the memory


def test_a_grid_over_the_cap_names_it():
    line = one_error(run("kv-cache", "gpt2", "--batch", "1:1000:+1", "--context", "1:1000:+1"))
    assert "1,000,000 points (batch 1,000 × context 1,000)" in line and "100,000" in line, line


def test_a_quantity_text_cannot_stall_the_parser():
    r = run("kv-cache", "gpt2", "--context", "1" * 100_000 + "x")
    assert "cannot read" in one_error(r)


def test_huge_accepted_inputs_give_finite_numbers():
    for argv in (["kv-cache", "gpt2", "--batch", "16777216", "--context", "1073741824", "--chip", "h100-sxm"],
                 ["train-mem", "llama-3.1-405b", "--batch", "16777216", "--seq", "1073741824"],
                 ["serve", "gpt2", "--chips", "1048576", "--price", "1000000"],
                 ["train-time", "llama-3.1-405b", "--tokens", "1e18", "--chips", "1048576"],
                 ["roofline", "gpt2", "--batch", "16777216", "--prompt", "1073741824", "--gen", "1073741824"]):
        assert_sane(run(*argv, "--json"))


def test_compare_refuses_an_unknown_kv_dtype():
    one_error(run("compare", "gpt2", "--kv-dtype", "none"))


@pytest.mark.parametrize("factor", ["flop_max=0", "bandwidth=0", "link=0"])
def test_an_efficiency_factor_of_zero_is_refused(factor):
    one_error(run("roofline", "gpt2", "--tp", "2", "--eff", factor, "--json"))


@pytest.mark.parametrize("chip", ["", ",,"])
def test_a_chip_option_with_no_id_is_refused(chip):
    one_error(run("kv-cache", "gpt2", "--chip", chip))


def test_no_negative_kv_budget_when_the_weights_do_not_fit():
    r = run("kv-cache", "llama-3.1-405b", "--chip", "l4", "--json")
    assert r.code == 1
    assert json.loads(r.out)["rows"][0]["kv_budget_bytes_per_device"] >= 0


def test_an_over_long_engine_id_is_refused():
    one_error(run("serve", "gpt2", "--engine", "x" * 300))


def test_a_budget_limit_below_one_byte_is_refused(tmp_path):
    budget = tmp_path / "b.yaml"
    budget.write_text("version: 1\nchecks:\n  - {name: c, command: kv-cache, model: gpt2, "
                      "limits: {max_memory_per_device: 0.5}}\n")
    assert "at least one byte" in one_error(run("check", budget))


def test_duplicate_keys_in_a_budget_name_file_and_line():
    line = one_error(run("check", HOSTILE / "budgets" / "duplicate-limit-keys.yaml"))
    assert "duplicate-limit-keys.yaml:9: duplicate key 'max_memory_per_device' (first at line 8)" in line, line


def test_yaml_is_loaded_safely(tmp_path):
    marker = tmp_path / "pwned"
    budget = tmp_path / "b.yaml"
    budget.write_text(f"version: 1\nchecks: !!python/object/apply:os.system ['touch {marker}']\n")
    assert "could not determine a constructor" in one_error(run("check", budget))
    assert not marker.exists()


def test_a_violated_error_budget_never_passes():
    r = run("check", HOSTILE / "budgets" / "violated-error-budget.yaml", "--json")
    assert r.code == 1 and [row["status"] for row in json.loads(r.out)["rows"]] == ["fail"], r


# --- start-up: a table into a pipe is drawn without rich, exactly as rich draws it ------------------------------

TABLES = [["presets", "list"], ["presets", "show", "llama-3.1-8b"], ["presets", "show", "dgx-h100"],
          ["kv-cache", "llama-3.1-8b", "--chip", "h100-sxm", "--batch", "1,8,64", "--context", "1k:32k:x2"],
          ["kv-cache", "gpt2", "--chip", "h100-sxm"], ["train-mem", "llama-3.1-8b", "--zero", "0,3", "--dp", "8"],
          ["roofline", "llama-2-7b", "--chip", "l4", "--batch", "1,16", "--ops"], ["serve", "llama-3.1-8b"],
          ["train-time", "llama-3.1-8b", "--chips", "64"], ["compare", "gpt2", "--chip", "h100-sxm", "--chip", "l4"],
          ["check", ROOT / "docs" / "examples" / "ci" / "budgets.yaml"], ["kv-cache", "gpt2", "--context", "1M"]]


@pytest.mark.parametrize("argv", TABLES, ids=[" ".join(map(str, a[:2])) for a in TABLES])
def test_plain_tables_match_rich(monkeypatch, argv):
    from rich.console import Console

    from aicalc import render

    monkeypatch.chdir(ROOT)
    plain = run(*argv)
    monkeypatch.setattr(render, "console", lambda env, stream=None: Console(
        file=stream or env.stdout, force_terminal=False, no_color=True, color_system=None, width=100_000,
        soft_wrap=True, highlight=False, markup=False))
    rich = run(*argv)
    assert plain.code == rich.code and plain.out == rich.out and plain.err == rich.err


def test_a_one_off_query_imports_neither_yaml_nor_pydantic_nor_rich():
    code = ("import sys\nfrom aicalc.cli import main\n"
            "main(['kv-cache', 'llama-3.1-8b', '--chip', 'h100-sxm'])\n"
            "main(['roofline', 'llama-3.1-8b', '--json'])\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'yaml', 'pydantic', 'rich'}), file=sys.stderr)\n")
    subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, cwd=ROOT)  # compiles the index
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert p.stderr.strip().splitlines()[-1] == "[]", p.stderr


# --- the compiled catalog index ---------------------------------------------------------------------------------


@pytest.fixture
def fresh_catalog(monkeypatch, tmp_path):
    """A copy of the built-in presets as the built-in root, with its own index file."""
    import shutil

    from aicalc.catalog import store

    root = tmp_path / "presets"
    shutil.copytree(ROOT / "presets", root)
    monkeypatch.setenv("AICALC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(store, "builtin_root", lambda: root)
    for f in (store._catalog, store._index, store._record, store._validated):
        f.cache_clear()
    yield root
    for f in (store._catalog, store._index, store._record, store._validated):
        f.cache_clear()


def test_the_index_follows_an_edited_preset(fresh_catalog, tmp_path):
    from aicalc.catalog import store

    assert store.load("chip", "h100-sxm").memory_bytes == 80 * 2**30
    assert len(list((tmp_path / "cache").glob("catalog-*.json"))) == 1
    f = fresh_catalog / "chips" / "h100-sxm.yaml"
    f.write_text(f.read_text().replace("memory: 80GiB", "memory: 96GiB"))
    os.utime(f, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    for fn in (store._catalog, store._record):
        fn.cache_clear()
    assert store.load("chip", "h100-sxm").memory_bytes == 96 * 2**30


def test_a_corrupt_or_unwritable_index_is_rebuilt_in_memory(fresh_catalog, tmp_path, monkeypatch):
    from aicalc.catalog import store

    store.load("chip", "h100-sxm")
    index = next((tmp_path / "cache").glob("catalog-*.json"))
    index.write_text('{"format": 1, "stamp": [')
    store._catalog.cache_clear()
    store._record.cache_clear()
    assert store.load("chip", "l4").memory_bytes > 0
    monkeypatch.setenv("AICALC_CACHE_DIR", "/proc/no-such-folder")
    store._catalog.cache_clear()
    store._record.cache_clear()
    assert store.load("chip", "l4").memory_bytes > 0


def _hostile_index(tmp_path, make) -> None:
    from aicalc.catalog import store

    store.load("chip", "h100-sxm")
    index = next((tmp_path / "cache").glob("catalog-*.json"))
    index.unlink()
    make(index)
    for fn in (store._catalog, store._record):
        fn.cache_clear()


@pytest.mark.parametrize("make", [
    lambda p: os.mkfifo(p),  # reading it would block forever
    lambda p: p.symlink_to("/dev/zero"),  # reading it would never end
    lambda p: p.write_text('{"format": 2, "stamp": []}'),  # no checksum line
], ids=["fifo", "dev-zero", "no-checksum"])
def test_an_index_that_is_not_a_file_aicalc_wrote_is_never_read(fresh_catalog, tmp_path, make, monkeypatch):
    """Bounded by work, not time: a FIFO or a device in the index's place is never opened (opening or reading it
    would block or never end); a regular file without a checksum is opened and refused."""
    import builtins

    from aicalc.catalog import store

    _hostile_index(tmp_path, make)
    index = next((tmp_path / "cache").glob("catalog-*.json"))
    regular = index.is_file()  # before the load, which writes a fresh index in its place
    opened = []
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: (opened.append(str(f)), real_open(f, *a, **k))[1])
    assert store.load("chip", "l4").memory_bytes == 24 * 2**30  # the L4 preset: 24 GiB
    monkeypatch.undo()
    assert (str(index) in opened) == regular, opened


def test_an_edited_index_is_rebuilt_not_trusted(fresh_catalog, tmp_path):
    """Valid JSON, the right stamp, hostile contents (a chip with 0 TFLOP/s, files as a list): the checksum no
    longer matches, so the presets are compiled again instead of used."""
    import json as js

    from aicalc.catalog import store

    def edit(path):
        store._catalog.cache_clear()
        index = js.loads(js.dumps(store.plain(store._catalog())))
        index["chip"]["h100-sxm"]["data"]["dense_tflops"]["bf16"] = 0
        index["files"] = {"models/llama-3.1-8b.yaml": {"data": []}}
        path.write_bytes(b"00000000\n" + store._index_bytes(index).partition(b"\n")[2])

    _hostile_index(tmp_path, edit)
    assert store.load("chip", "h100-sxm").peak_flop_per_s("bf16") == 989.4e12
    r = run("roofline", "llama-3.1-8b", "--chip", "h100-sxm", "--json")
    assert_sane(r)
    assert r.code == 0


@pytest.mark.parametrize("field, value", [("memory_bandwidth_gbs", 0), ("memory_bandwidth_gbs", float("nan")),
                                          ("memory_bandwidth_gbs", -1), ("memory_bandwidth_gbs", "3350"),
                                          ("memory", 1), ("dense_tflops", {"bf16": 1e300}), ("injected", 1)])
def test_a_forged_index_with_a_recomputed_checksum_is_rebuilt(fresh_catalog, tmp_path, field, value):
    """A cache anyone can write (a CI cache restored from another branch, a shared folder) with its checksum
    recomputed: the records are checked against the preset files' types and ranges when read, so the numbers
    come from the preset (H100 SXM: 3,350 GB/s, its datasheet) and never from the forged record."""
    import json as js

    from aicalc.catalog import store

    def forge(path):
        store._catalog.cache_clear()
        index = js.loads(js.dumps(store.plain(store._catalog())))
        index["chip"]["h100-sxm"]["data"][field] = value
        path.write_bytes(store._index_bytes(index))

    _hostile_index(tmp_path, forge)
    assert store.load("chip", "h100-sxm").memory_bandwidth_bytes_per_s == 3350e9
    r = run("roofline", "llama-3.1-8b", "--chip", "h100-sxm", "--json")
    assert_sane(r)
    assert r.code == 0


def test_the_cache_check_knows_every_schema_field():
    from aicalc.catalog import schema, store

    assert set(store._RECORD_FIELDS["chip"]) == set(schema.Chip.model_fields)
    assert set(store._RECORD_FIELDS["node"]) == set(schema.Node.model_fields)
    assert store._DTYPES == schema.DTYPES


def test_a_broken_builtin_preset_fails_alone(fresh_catalog):
    from aicalc.catalog import store

    (fresh_catalog / "chips" / "l4.yaml").write_text("id: l4\nname: [unclosed\n")
    with pytest.raises(Exception, match="l4.yaml: invalid YAML"):
        store.load("chip", "l4")
    assert store.load("chip", "h100-sxm").memory_bytes == 80 * 2**30


def test_chip_records_answer_as_the_schema_does():
    from aicalc.catalog import schema, store

    for chip_id in store.ids("chip"):
        record, model = store.load("chip", chip_id), schema.Chip.model_validate(store.load_yaml(
            store._index("chip")[chip_id]))
        assert record.memory_bytes == model.memory_bytes
        assert record.memory_bandwidth_bytes_per_s == model.memory_bandwidth_bytes_per_s
        assert record.exp_per_s == model.exp_per_s
        for dtype in schema.DTYPES:
            assert record.peak_flop_per_s(dtype) == model.peak_flop_per_s(dtype)
        ic, mic = record.interconnect, model.interconnect
        assert (ic is None) == (mic is None)
        assert ic is None or ic.per_direction_bytes_per_s == mic.per_direction_bytes_per_s
        assert record.model_dump() == model.model_dump(mode="json")


def test_a_table_with_no_rows_draws_in_a_terminal():
    """train-mem --search where no layout fits has no rows; fitting its columns to a terminal crashed (exit 3)."""
    for width in (80, 120):
        r = run("train-mem", "llama-3.1-8b", "--chip", "l4", "--chips", "1", "--search", width=width)
        assert_sane(r)
        assert r.code == 1 and "internal error" not in r.err


def test_escape_sequences_in_names_never_reach_a_terminal(tmp_path):
    """A config.json name or a command-line id with ESC/BEL sequences (set the window title, colour the
    screen) is shown with "?" in their place, on a terminal as in a pipe, in tables and in error lines."""
    import json as js

    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 4, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64,
           "_name_or_path": "\x1b]0;PWNED\x07\x1b[31mRED"}
    (tmp_path / "config.json").write_text(js.dumps(cfg))
    for width in (None, 120):
        r = run("presets", "show", str(tmp_path / "config.json"), width=width)
        assert r.code == 0 and "PWNED" in r.out and "\x1b]" not in r.out and "\x07" not in r.out
    r = run("kv-cache", "\x1b]0;PWNED\x07\x1b[31mX")
    assert r.code == 2 and "\x1b" not in r.err and "\x07" not in r.err
