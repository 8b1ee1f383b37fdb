"""Every ```python block of docs/api.md runs, and its assertions hold."""

import re

import pytest

from conftest import ROOT

DOC = ROOT / "docs" / "api.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_there_are_examples():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_api_doc_example_runs(code, capsys):
    exec(compile(code, str(DOC), "exec"), {})  # noqa: S102 - our own documentation
