"""Roofline pictures: the terminal chart on a terminal, and --plot's behaviour with and without matplotlib."""

import importlib.util

import pytest


def test_terminal_chart_only_on_a_terminal(cli):
    tty = cli("roofline", "llama-2-7b", "--chip", "a100-80gb", "--batch", "1,64", tty=True, width=120).out
    pipe = cli("roofline", "llama-2-7b", "--chip", "a100-80gb", "--batch", "1,64").out
    assert len(tty.splitlines()) > len(pipe.splitlines())  # the chart is drawn under the table


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is not None, reason="matplotlib is installed")
def test_plot_without_matplotlib_is_a_clear_error(cli, tmp_path):
    r = cli("roofline", "llama-2-7b", "--chip", "a100-80gb", "--plot", tmp_path / "r.png")
    assert r.code == 2 and "pip install 'aicalc[plot]'" in r.err and not (tmp_path / "r.png").exists()


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs the plot extra")
@pytest.mark.parametrize("name", ["r.png", "r.svg"])
def test_plot_writes_a_file(cli, tmp_path, name):
    r = cli("roofline", "llama-2-7b", "--chip", "a100-80gb", "--batch", "1,64", "--plot", tmp_path / name)
    assert r.code == 0 and (tmp_path / name).stat().st_size > 1000
