"""Every `$ aicalc …` line in README.md and docs/*.md runs, with the exit code it states (default 0)."""

import re
import shlex

import pytest

from conftest import ROOT

FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def examples():
    for path in FILES:
        in_console = False
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("```"):
                in_console = line.strip() == "```console"
                continue
            if in_console and line.startswith("$ aicalc "):
                command, _, comment = line[2:].partition("#")
                m = re.search(r"exit (\d)", comment)
                yield pytest.param(command, int(m[1]) if m else 0, id=f"{path.name}:{n}")


@pytest.mark.parametrize("command, code", list(examples()))
def test_doc_example_runs(cli, monkeypatch, command, code):
    monkeypatch.chdir(ROOT)
    r = cli(*shlex.split(command)[1:])
    assert r.code == code, r.err
    assert r.out if code != 2 else r.err


def test_there_are_examples():
    assert len(list(examples())) >= 10
