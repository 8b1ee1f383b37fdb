"""Tables fit the terminal: at 80, 100 and 120 columns no line is wider than the terminal and no value is cut
(rich marks a cut with '…'); constant inputs go to the caption; numbers read as people write them."""

import pytest

COMMANDS = [
    ("serve", "llama-3.1-70b", "--chip", "h100-sxm", "--chips", "8", "--tp", "4"),
    ("roofline", "llama-3.1-8b", "--chip", "h100-sxm", "--batch", "1,16,256"),
    ("kv-cache", "llama-3.1-70b", "--chip", "h200", "--tp", "4", "--batch", "1,8,64", "--context", "8k,32k"),
    ("train-mem", "llama-3.1-8b", "--batch", "1,2,4", "--seq", "4096", "--chip", "h100-sxm"),
    ("train-time", "llama-3.1-8b", "--chip", "h100-sxm", "--chips", "64", "--tp", "1,2,4,8"),
    ("compare", "llama-3.1-8b", "--chip", "h100-sxm", "--chip", "a100-80gb"),
    ("serve", "llama-3.1-8b", "--chip", "h100-sxm", "--chips", "4", "--search"),
]


@pytest.mark.parametrize("width", [80, 100, 120])
@pytest.mark.parametrize("argv", COMMANDS, ids=[c[0] + ("-search" if "--search" in c else "") for c in COMMANDS])
def test_no_value_cut_at_width(cli, argv, width):
    import io

    from aicalc.cli import main
    from aicalc.env import Env

    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), env=Env(out, err, stdout_isatty=True, no_color=True, width=width))
    assert code in (0, 1), err.getvalue()
    text = out.getvalue()
    table = [line for line in text.splitlines() if line[:1] in "┏┃┡│└"]
    assert table, text
    assert all(len(line) <= width for line in table), max(table, key=len)
    assert "…" not in "\n".join(table)


def test_constant_inputs_go_to_the_caption(cli):
    from io import StringIO

    from aicalc.cli import main
    from aicalc.env import Env

    out = StringIO()
    main(["serve", "llama-3.1-8b", "--chip", "h100-sxm", "--concurrency", "1,8"],
         env=Env(out, StringIO(), stdout_isatty=True, no_color=True, width=120))
    text = out.getvalue()
    assert "prompt 1,024 · gen 256" in text
    header = next(line for line in text.splitlines() if line.startswith("┃"))
    assert "prompt" not in header and "TTFT" in header


def test_human_numbers():
    from aicalc.render import human

    assert human("usd_per_million_output_tokens", 2.3099) == "$2.31"
    assert human("mfu", 0.4512) == "45.1 %"
    assert human("tpot_s", 0.0188) == "18.8 ms"
    assert human("chip_hours", 1.23e6) == "1.23 M chip-h"


def test_one_row_prints_as_field_value(cli):
    from io import StringIO

    from aicalc.cli import main
    from aicalc.env import Env

    out = StringIO()
    main(["kv-cache", "llama-3.1-8b", "--chip", "h100-sxm"], env=Env(out, StringIO(), stdout_isatty=True,
                                                                    no_color=True, width=80))
    assert "field" in out.getvalue() and "value" in out.getvalue()
