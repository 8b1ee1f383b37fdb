"""aicalc.catalog.plain_yaml reads plain YAML as PyYAML's safe loader does (values and lines), and leaves to
PyYAML whatever it is not sure of: PyYAML (through ``store.yaml_lines``) is the reference for every case."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aicalc.catalog import plain_yaml, store
from aicalc.errors import AicalcError

from conftest import ROOT


def reference(text: str):
    """PyYAML's (data, lines), or None where it refuses the text."""
    try:
        return store.yaml_lines(text, "t.yaml")
    except AicalcError:
        return None


def agrees(text: str) -> bool:
    """plain_yaml reads the text as PyYAML does, or leaves it to PyYAML."""
    mine = plain_yaml.parse(text)
    return mine is None or mine == reference(text)


def test_the_example_budget_file_is_read_without_pyyaml():
    text = (ROOT / "docs" / "examples" / "ci" / "budgets.yaml").read_text()
    assert plain_yaml.parse(text) is not None
    assert plain_yaml.parse(text) == reference(text)


PLAIN = [
    "version: 1\nchecks:\n- name: a\n  command: kv-cache\n  limits: {max_memory_per_device: 80GB}\n",
    "a: 'quoted # not a comment'\nb: \"double: quoted\"  # a comment\n",
    "# ünïcode in a comment\na: [1, -2, 0.5, 3., x, 8k, 'q', \"r\"]\nb: {c: [d, {e: f}], g: 1}\n",
    "a:\n  b:\n    - 1\n    -\n      c: 2\n    - - 3\n      - 4\nd: {}\ne: []\n",
    "- a\n- b: 1\n  c: 2\n-   d: 3\n    e: 4\n",
    "a: yes\nb: Off\nc: ~\nd: null\ne: +7\nf: -0\ng: 0\nh: TRUE\ni: 2s\nj: 1,8,64\nk: a  b\n",
    "checks:\n  - name: x\n    args: {chip: h100-sxm, tp: 4, batch: 32, context: 8k}\n",
]
DOUBTFUL = [  # PyYAML reads these otherwise than plainly (dates, octal, base 60, keys that are not texts), or
    # refuses them: plain_yaml must leave them to it
    "a: 2001-12-14\n", "a: 010\n", "a: 1:30\n", "a: .5\n", "a: 1e5\n", "a: 1.0e+5\n", "on: 1\n", "1: a\n",
    "a: 0x1F\n", "a: .inf\n", "a: -.nan\n", "a: 0b101\n", "a: 1_000\n", "a: <<\n", "a: =\n",
    "a: 1\na: 2\n", "a: &x 1\nb: *x\n", "a: !!str 1\n", "a: |\n  text\n", "a: >\n  text\n",
    "a: b\n  c\n", "a:\tb\n", "a: b\r\n", "---\na: 1\n", "a: 1\n---\nb: 2\n", "a: 'it''s'\n",
    "a: \"x\\ty\"\n", "a: {b: 1,}\n", "a: [1,,2]\n", "a: {b}\n", "a:\n", "- \n", "a: b: c\n", "a: [1, 2\n",
    "a: - b\n", "a: 'x\n", "a: x#y\n", "a b: 1\n", "\ufeffa: 1\n", "a: \u00a0x\n", "a: x\u2028b: y\n",
    "a: 1\n  b: 2\n", " a: 1\nb: 2\n", "a: 123456789012345678901234567890123\n", "a: %x\n", "a: ,x\n",
    "a: {b: 1:2}\n", "a: [b: 1]\n", "", "# only a comment\n", "just text\n", "[1, 2]\n" * 2,
]


@pytest.mark.parametrize("text", PLAIN)
def test_plain_yaml_is_read_as_pyyaml_reads_it(text):
    assert plain_yaml.parse(text) is not None
    assert plain_yaml.parse(text) == reference(text)


@pytest.mark.parametrize("text", DOUBTFUL)
def test_what_is_not_plain_is_left_to_pyyaml(text):
    assert plain_yaml.parse(text) is None


def test_nesting_deeper_than_the_loaders_limit_is_left_to_pyyaml():
    deep = "".join(f"{' ' * 2 * d}k{d}:\n" for d in range(store.MAX_DEPTH + 1)) + " " * 2 * (store.MAX_DEPTH + 1) + "x: 1\n"
    assert reference(deep) is None
    assert plain_yaml.parse(deep) is None


TOKENS = ["1", "-2", "+3", "0", "007", "0.5", "3.", ".5", "1e5", "8k", "80GB", "32Ki", "2s", "200ms", "1:30",
          "1:64:x2", "2001-12-14", "2001-12-14 21:59:43", "yes", "No", "on", "OFF", "true", "null", "~", "x", "a b",
          "h100-sxm", "llama-3.1-70b", "'q # r'", '"d: q"', "'it''s'", "-", "-x", "=", "<<", "0x1F", ".inf", "1,8,64",
          "&a x", "*a", "!!str 5", "x#y", "x #y", "[1, 2]", "{a: 1}", "[]", "{}", "[a, [b, c]]", "{a: [1, x]}"]
KEYS = ["a", "b", "name", "limits", "on", "1", "x-y", "k.v", "null", "a b", "'q'", "yes", "1.5", "~"]


@st.composite
def block(draw, indent: int = 0, depth: int = 0) -> list[str]:
    """The lines of a block mapping or sequence at ``indent``, of tokens YAML reads in many ways."""
    pad, lines = " " * indent, []
    seq = draw(st.booleans())
    for _ in range(draw(st.integers(1, 3))):
        head = f"{pad}- " if seq else f"{pad}{draw(st.sampled_from(KEYS))}: "
        how = draw(st.sampled_from(["token", "token", "nested", "compact", "inline"] if depth < 3 else ["token"]))
        if how == "token":
            lines.append(head + draw(st.sampled_from(TOKENS)) + draw(st.sampled_from(["", "", "  # c", "#c"])))
        elif how == "nested" or (how == "compact" and seq):
            lines.append(head.rstrip())
            lines += draw(block(indent + draw(st.integers(1, 3)), depth + 1))
        elif how == "compact":  # a sequence at its key's indent
            lines.append(head.rstrip())
            lines += draw(block(indent, depth + 1))
        else:  # a collection begun on the item's or key's line
            inner = draw(block(len(head), depth + 1))
            lines.append(head + inner[0][len(head):])
            lines += inner[1:]
        if draw(st.integers(0, 5)) == 0:
            lines.append(draw(st.sampled_from(["", "# a comment", pad + "  # indented comment"])))
    return lines


@settings(max_examples=400, deadline=None)
@given(block(), st.sampled_from(["", "", "tab", "space", "colon"]), st.integers(0, 10_000))
def test_generated_yaml_is_read_as_pyyaml_reads_it_or_left_to_it(lines, damage, at):
    text = "\n".join(lines) + "\n"
    if damage:  # a tab, a stray space or a missing one somewhere
        at %= len(text)
        text = text[:at] + {"tab": "\t", "space": " ", "colon": ":"}[damage] + text[at:]
    assert agrees(text), text


def test_check_of_a_plain_budget_file_imports_no_yaml():
    import subprocess
    import sys

    probe = ("import io, sys\nfrom aicalc.cli import main\nfrom aicalc.env import Env\n"
             "code = main(['check', 'docs/examples/ci/budgets.yaml'], env=Env(stdout=io.StringIO(), "
             "stderr=io.StringIO(), stdout_isatty=False))\nprint(code, 'yaml' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.split() == ["0", "False"], out.stderr
