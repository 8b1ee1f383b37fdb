"""check reads a check's ``args`` through the commands' table of options (aicalc.commands.options.OPTIONS), the
options the command line declares, without building the command line's click objects (issue 25)."""

from __future__ import annotations

import pytest
import typer
import yaml

from aicalc.commands import COMMANDS
from aicalc.commands.options import OPTIONS, parse_option

KINDS = {"str": "text", "int": "int", "integer": "int", "float": "float", "boolean": "flag"}
RENDERING = ("fmt", "json_", "columns")  # how a command prints, not what it computes: no check's business


def _cli_options(name: str) -> dict[str, tuple[str, str]]:
    """The command line's options of ``name``, read from the Typer app: {key: (kind, parameter)}."""
    from aicalc.cli import app

    out = {}
    for p in typer.main.get_command(app).commands[name].params:
        if p.name in RENDERING:
            continue
        kind = "texts" if getattr(p, "multiple", False) else KINDS[p.type.name]
        for opt in getattr(p, "opts", []):
            if opt.startswith("--"):
                out[opt[2:].replace("-", "_")] = (kind, p.name)
    return out


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_table_is_the_command_lines_options(name):
    assert OPTIONS[name] == _cli_options(name)


@pytest.mark.parametrize(("kind", "value", "parsed"), [
    ("int", "12", 12), ("int", 7, 7), ("int", " 3 ", 3), ("float", "0.5", 0.5), ("float", 2, 2.0),
    ("flag", True, True), ("flag", "yes", True), ("flag", " Off", False), ("flag", "", False), ("flag", "1", True),
    ("text", 8, "8"), ("text", "8k", "8k"), ("texts", "h100-sxm", "h100-sxm"),
])
def test_values_parse_as_click_parses_them(kind, value, parsed):
    """The results the command line's types (click's INT, FLOAT, BOOL and STRING, as typer vendors them) give for
    the same values."""
    from typer._click import types

    click_type = {"int": types.INT, "float": types.FLOAT, "flag": types.BOOL, "text": types.STRING,
                  "texts": types.STRING}[kind]
    assert click_type.convert(value, None, None) == parsed
    got = parse_option(kind, value)
    assert got == parsed and type(got) is type(parsed)


@pytest.mark.parametrize(("kind", "value"), [("int", "3.5"), ("int", "x"), ("int", None), ("float", "abc"),
                                             ("flag", "maybe"), ("flag", 2), ("flag", 0)])
def test_values_an_option_cannot_take(kind, value):
    with pytest.raises(ValueError, match="is not a valid"):
        parse_option(kind, value)


def _budget(tmp_path, args, command="kv-cache", model="llama-3.1-8b", limits=None):
    path = tmp_path / "budget.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "checks": [
        {"name": "c", "command": command, "model": model, "args": args,
         "limits": limits or {"max_memory_per_device": "80GB"}}]}, sort_keys=False))
    return path


@pytest.mark.parametrize(("args", "message"), [
    ({"chip": "h100-sxm", "block_size": "x"}, "check 'c': args.block_size: 'x' is not a valid integer"),
    ({"chip": "h100-sxm", "block_size": [16, 32]}, "args.block_size takes one value, not a list"),
    ({"chip": "h100-sxm", "block_size": 1.5}, "args.block_size must be a whole number, got 1.5"),
    ({"chip": "h100-sxm", "block_size": True}, "args.block_size takes a value, not true"),
    ({"chip": "h100-sxm", "block_size": 2**50}, "check 'c': --block-size"),
])
def test_bad_args_are_one_line_naming_the_check(cli, tmp_path, args, message):
    r = cli("check", _budget(tmp_path, args))
    assert r.code == 2 and message in r.err and "Traceback" not in r.err


def test_args_spelled_as_on_the_command_line_give_the_same_rows(cli, tmp_path):
    """A list is a sweep, a number a value, a repeatable option a list, another name of an option its option's
    value: the check's rows are the command line's."""
    args = {"chip": ["h100-sxm"], "batch": [1, 8], "context": "4k", "block_size": 16.0,
            "gpu_memory_utilization": "0.8"}
    r = cli("check", _budget(tmp_path, args), "--json")
    assert r.code == 0, r.err
    direct = cli("kv-cache", "llama-3.1-8b", "--chip", "h100-sxm", "--batch", "1,8", "--context", "4k",
                 "--block-size", "16", "--gpu-memory-utilization", "0.8", "--json").json["rows"]
    assert r.json["rows"][0]["value"] == max(row["total_bytes_per_device"] for row in direct)
    args = {"chip": "h100-sxm", "batch": 2, "seq": 2048, "dp": 8, "zero": 3, "sp": "yes",
            "framework": "megatron", "tp": 2}
    r = cli("check", _budget(tmp_path, args, "train-mem", "llama-3.1-8b", {"max_peak_bytes": "80GB"}), "--json")
    assert r.code == 0, r.err
    direct = cli("train-mem", "llama-3.1-8b", "--chip", "h100-sxm", "--micro-batch", "2", "--seq", "2048", "--dp",
                 "8", "--zero", "3", "--sp", "--framework", "megatron", "--tp", "2", "--json").json["rows"]
    assert r.json["rows"][0]["value"] == direct[0]["peak_bytes"]


def test_check_builds_no_click_command_of_its_own(cli, tmp_path, monkeypatch):
    """The command line builds the click command being run (``check``) once; reading the args builds none (it
    built every command of the app, once per arg, before)."""
    calls = []
    real = typer.main.get_command
    monkeypatch.setattr(typer.main, "get_command", lambda app: calls.append(app) or real(app))
    r = cli("check", _budget(tmp_path, {"chip": "h100-sxm", "batch": 8, "context": "4k", "tp": 1}))
    assert r.code == 0, r.err
    assert len(calls) == 1


# --- a plainly valid budget file is read without pydantic --------------------------------------------------------

BASE = {"version": 1, "checks": [
    {"name": "a", "command": "kv-cache", "model": "llama-3.1-8b",
     "args": {"chip": ["h100-sxm", "h200"], "batch": [1, 8.0, "64"], "context": "8k", "tp": 2, "sp": True,
              "acceptance": 0.7},
     "limits": {"max_memory_per_device": "80GB", "min_max_batch": 32, "max_ttft": 0.5}, "severity": "warn"},
    {"name": "b", "command": "serve", "model": "configs/x.json", "limits": {"max_tpot": "50ms"}},
]}


def _mutations():
    import copy

    def change(path, value, delete=False):
        d = copy.deepcopy(BASE)
        *head, last = path
        target = d
        for p in head:
            target = target[p]
        if delete:
            del target[last]
        else:
            target[last] = value
        return d

    c0 = ("checks", 0)
    yield BASE
    yield change(("version",), True)
    yield change(("version",), 1.0)
    yield change(("version",), "1")
    yield change(("version",), 2)
    yield change(("extra",), 1)
    yield change(("checks",), [])
    yield change(("checks",), {"a": 1})
    yield change(("checks", 1, "name"), "a")  # twice
    for key, bad in [("name", ""), ("name", 1), ("name", None), ("command", "nope"), ("command", 1), ("model", 1),
                     ("model", None), ("severity", "fatal"), ("severity", 1), ("args", []), ("args", None),
                     ("limits", {}), ("limits", []), ("other", 1)]:
        yield change((*c0, key), bad)
    for key in ("name", "command", "model", "limits", "args", "severity"):
        yield change((*c0, key), None, delete=True)
    for bad in [None, {"x": 1}, [True], [1, [2]], [None], b"x", float("nan"), 10**40, [], ["a", 1.5]]:
        yield change((*c0, "args", "batch"), bad)
    yield change((*c0, "args", 1), 2)
    for bad in [True, None, "abc", -1, 0, float("inf"), float("nan"), [1], {"a": 1}, "1e-400GB", 10**40, "80 GB"]:
        yield change((*c0, "limits", "max_memory_per_device"), bad)
    yield change((*c0, "limits", "bogus"), 1)
    yield change((*c0, "limits", 1), 1)


@pytest.mark.parametrize("data", list(_mutations()), ids=lambda d: str(hash(repr(d)) % 10**6))
def test_the_plain_reader_accepts_only_what_the_schema_accepts_and_reads_it_alike(data):
    from pydantic import ValidationError

    from aicalc.budget import _plain_valid, models

    BudgetFile, _ = models()
    plain = _plain_valid(data)
    try:
        full = BudgetFile.model_validate(data)
    except ValidationError:
        assert plain is None
        return
    if plain is None:
        return  # pydantic reads it (a coercion the plain reader leaves to it)
    assert plain.version == full.version and len(plain.checks) == len(full.checks)
    for p, f in zip(plain.checks, full.checks, strict=True):
        for field in ("name", "command", "model", "args", "limits", "severity"):
            a, b = getattr(p, field), getattr(f, field)
            assert a == b and repr(a) == repr(b), field  # repr: 1 and 1.0, True and 1 differ


def test_the_plain_reader_reads_the_documented_budgets():
    from aicalc.budget import _plain_valid
    from aicalc.catalog.store import load_yaml_lines

    from conftest import ROOT

    assert _plain_valid(BASE) is not None
    for path in (ROOT / "docs" / "examples" / "ci").glob("*.yaml"):
        if "budget" in path.name:
            assert _plain_valid(load_yaml_lines(path)[0]) is not None, path


def test_a_valid_budget_does_not_import_pydantic(tmp_path):
    import subprocess
    import sys

    from conftest import ROOT

    probe = ("import io, sys\nfrom aicalc.cli import main\nfrom aicalc.env import Env\n"
             "code = main(sys.argv[1:], env=Env(stdout=io.StringIO(), stderr=io.StringIO(), stdout_isatty=False))\n"
             "print(code, 'pydantic' in sys.modules)")
    good = subprocess.run([sys.executable, "-c", probe, "check", "docs/examples/ci/budgets.yaml"], capture_output=True,
                          text=True, cwd=ROOT)
    assert good.stdout.split() == ["0", "False"], good.stderr
    bad = _budget(tmp_path, {"chip": "h100-sxm"}, limits={"max_memory_per_device": "lots"})
    out = subprocess.run([sys.executable, "-c", probe, "check", str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.split() == ["2", "True"]  # a problem: pydantic words it
