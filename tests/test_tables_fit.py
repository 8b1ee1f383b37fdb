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


@pytest.mark.parametrize("usd, text", [(0.0123, "$0.0123"), (0.189, "$0.19"), (0.6, "$0.60"), (2.311, "$2.31"),
                                       (3999.5, "$3,999.50"), (24193.07, "$24,193"), (1006767.46, "$1.01 M"),
                                       (2.4e9, "$2.4 B")])
def test_money_reads_as_people_write_it(usd, text):
    from aicalc.render import human

    assert human("cost_usd", usd) == text and human("usd_per_million_output_tokens", usd) == text


def test_long_times_in_years_and_rates_without_false_precision():
    from aicalc.render import human

    assert human("total_time_s", 6050 * 86400) == "16.6 y"
    assert human("total_time_s", 999 * 86400) == "999 d"
    assert human("output_tokens_per_s", 636768.6) == "636,769" and human("output_tokens_per_s", 16.94) == "16.9"


@pytest.mark.parametrize("width", [80, 100, 120])
def test_a_narrow_table_keeps_its_verdict_and_its_caption_keeps_values_whole(cli, width):
    """The fits column is what says a row's numbers hold: it stays when other columns give way; a caption line
    breaks between its "key value" parts, never inside one."""
    import re

    def plain(r):
        return re.sub(r"\x1b\[[0-9;]*m", "", r.out)  # the terminal's colour codes take no columns

    out = plain(cli("kv-cache", "llama-3.1-70b", "--chip", "l4", "--chip", "h100-sxm", "--tp", "1,2,4", "--dtype",
                    "bf16,fp8,int4", "--batch", "1,8", tty=True, width=width))
    header = next(line for line in out.splitlines() if "chip" in line and "tp" in line)
    assert "fits" in header
    assert all(len(line) <= width for line in out.splitlines())
    out = plain(cli("kv-cache", "llama-3.1-8b", "--chip", "h200", "--batch", "1,8,64", tty=True, width=width))
    assert any("weights/dev 14.96 GiB" in line for line in out.splitlines()), out
