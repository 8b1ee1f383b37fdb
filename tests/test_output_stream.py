"""The JSON and CSV writers stream rows a chunk at a time; the parsed document is the one the previous writers gave:
``json.dumps(plain(envelope), indent=2, ensure_ascii=False)`` and ``csv.DictWriter`` (issue 25). The reference
encoders below are those writers, copied here, so that the writers under test are compared with something they
do not share code with."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
import tracemalloc

import numpy as np
import pytest

from aicalc import render
from aicalc.env import Env
from aicalc.result import Result, Rows


def _reference_plain(value):
    """The old ``render._plain``: numpy scalars to Python, non-finite floats to null."""
    if hasattr(value, "item") and not isinstance(value, (list, dict)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _reference_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_reference_plain(v) for v in value]
    return value


def _reference_json(result: Result) -> str:
    doc = result.envelope()
    doc["rows"] = list(doc["rows"])
    return json.dumps(_reference_plain(doc), indent=2, ensure_ascii=False) + "\n"


def _reference_csv(result: Result) -> str:
    def cell(v):
        if isinstance(v, list):
            v = ";".join(map(str, v))
        if isinstance(v, str) and v[:1] in ("=", "+", "-", "@", "\t", "\r"):
            return "'" + v
        return "" if v is None else v

    rows = list(result.rows)
    keys = list(dict.fromkeys(k for row in rows for k in row))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: cell(v) for k, v in _reference_plain(row).items()})
    return out.getvalue()


def _written(result: Result, fmt: str) -> str:
    out = io.StringIO()
    render.render(result, fmt, Env(stdout=out, stderr=io.StringIO(), stdout_isatty=False))
    return out.getvalue()


def _same(a, b) -> bool:
    """Equal, and of the same type everywhere (1 and 1.0, True and 1, 0.0 and -0.0 differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b


TEXTS = ["plain", 'quote " and \\ backslash', "new\nline\ttab\r", "ünïcødé — ≤ 2×", "\x1b[31mred\x00", "%d %s %%",
         "=cmd|' /C calc'!A0", "-1", "+x", "@sum", "", " lead", "a,b", "emoji 🚀"]


def _columns(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    whole = np.round(rng.random(n) * 10.0 ** rng.integers(0, 20, n))
    frac = rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)
    special = rng.choice(np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e16, 1e16 - 2, 2.0**53 + 2, 5e-324,
                                   1.7976931348623157e308, 1e-5, 123456.5]), n)
    return {
        "batch": rng.integers(1, 1 << 40, n),
        "bytes": whole,
        "fraction": frac,
        "special": special,
        "constant_bytes": np.full(n, 80e9),
        "constant_int": np.full(n, 7, dtype=np.int64),
        "negative_zero": np.full(n, -0.0),
        "fits": rng.random(n) < 0.5,
        "always": np.ones(n, dtype=bool),
        "name": np.array(rng.choice(TEXTS, n)),
        "mixed": np.array([None, [1.0, float("nan"), 2], "x", 3, 2.5, True, {"k": np.float64(1.5)}] * n,
                          dtype=object)[:n],
        "small_float": rng.random(n).astype(np.float32),
    }


def _results(n: int, seed: int) -> list[Result]:
    cols = _columns(n, seed)
    inputs = {"model": "m", "batch": [1.0, 8.0, 2.5], "context": "1k:4k:x2", "tp": np.int64(2), "eff": {"a": 0.5},
              "nan": float("nan"), "text": TEXTS, "none": None}
    as_rows = Rows(cols)
    as_dicts = list(as_rows)
    ragged = [dict(r) for r in as_dicts]
    for i, r in enumerate(ragged):
        if i % 3 == 1:
            del r["fraction"]
        if i % 5 == 2:
            r["extra"] = i
    return [Result("kv-cache", inputs, as_rows, warnings=["w \"1\""]),
            Result("kv-cache", inputs, as_dicts),
            Result("kv-cache", inputs, ragged),
            Result("x", {}, []),
            Result("x", {}, [{}, {}, {"a": 1}, {}]),
            Result("x", {}, Rows({}))]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n", [1, 2, 7, 3000, 9000])  # one row, a few, more than one chunk of 8,192
def test_json_parses_to_the_reference_document(n, seed):
    for result in _results(n, seed):
        new, ref = json.loads(_written(result, "json")), json.loads(_reference_json(result))
        assert _same(new, ref)


@pytest.mark.parametrize("n", [1, 7, 9000])
def test_json_is_the_reference_text(n):
    """Not only the same document: the same text, indentation included (a diff of two runs stays a diff of
    values)."""
    for result in _results(n, 3):
        assert _written(result, "json") == _reference_json(result)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("n", [1, 2, 7, 9000])
def test_csv_parses_to_the_reference_cells(n, seed):
    for result in _results(n, seed):
        new = list(csv.reader(io.StringIO(_written(result, "csv"))))
        ref = list(csv.reader(io.StringIO(_reference_csv(result))))
        assert new == ref


def _command(name: str) -> Result:
    """A few thousand rows of a command's sweep: numbers of every kind, texts, empty cells (roofline's ops without a
    compute-bound batch), a long count range echoed in the inputs."""
    if name == "serve":
        from aicalc.commands.serve import run

        return run("llama-3.1-8b", chip="h100-sxm", concurrency="1:3000:+1", max_tpot="30ms")
    if name == "serve-pp":
        from aicalc.commands.serve import run

        return run("llama-3.1-8b", chip="a100-80gb", tp=2, pp=2, chips=8, concurrency="1:2000:+1",
                   prefix_hit="0.5")
    if name == "kv-cache":
        from aicalc.commands.kv_cache import run

        return run("llama-3.1-70b", chip="h100-sxm", batch="1:1500:+1", context="1k,128k")
    if name == "roofline":
        from aicalc.commands.roofline import run

        return run("llama-3.1-8b", chip="h100-sxm", batch="1:1000:+1")
    from aicalc.commands.train_mem import run

    return run("llama-3.1-8b", chip="h100-sxm", batch="1:64:+1", seq="1Ki:64Ki:x2", zero="0,1,2,3")


@pytest.mark.parametrize("name", ["serve", "serve-pp", "kv-cache", "roofline", "train-mem"])
def test_command_sweeps_are_the_reference_text(name):
    """The JSON and CSV of real sweeps, character for character the reference encoders' (json.dumps, the csv
    module), whichever way each column is written (numbers a column at a time, texts and empty cells a value at a
    time)."""
    result = _command(name)
    assert len(result.rows) >= 1000
    assert _written(result, "json") == _reference_json(result)
    assert _written(result, "csv") == _reference_csv(result)


def test_one_column_csv_with_empty_cells():
    result = Result("x", {}, [{"a": ""}, {"a": None}, {"a": "x,y"}])
    assert _written(result, "csv") == _reference_csv(result)


def test_whole_floats_keep_their_type_and_sign():
    """Byte counts are whole floats: written through integers, they must still parse as floats (1.0, not 1),
    with -0.0, 10¹⁶ and 2⁵³ + 2 as repr writes them."""
    values = [0.0, -0.0, 1.0, 9007199254740994.0, 9999999999999998.0, 1e16, 1e17, -5.0, 3.0]
    doc = json.loads(_written(Result("x", {}, Rows({"v": np.array(values)})), "json"))
    got = [r["v"] for r in doc["rows"]]
    assert _same(got, values)


def test_rows_read_like_the_table_rows():
    """A Rows sequence gives what ``Table.rows()`` gives: plain Python values, by index, slice and iteration."""
    from aicalc.api.results import Table

    cols = {"a": np.arange(5), "b": np.linspace(0, 1, 5), "c": np.array(list("vwxyz"))}
    rows, table = Rows(cols), Table(cols).rows()
    assert list(rows) == table and rows == table and len(rows) == 5
    assert rows[-1] == table[-1] and rows[1:3] == table[1:3]
    assert all(_same(x, y) for x, y in zip(rows, table, strict=True))
    with pytest.raises(IndexError):
        rows[5]


def _peak(n: int, fmt: str) -> tuple[int, int]:
    """(peak traced bytes, characters written) writing ``n`` rows of 13 columns."""
    cols = {f"c{i}_bytes": np.arange(n, dtype=np.float64) * (i + 1) for i in range(12)}
    cols["batch"] = np.arange(n)
    result = Result("kv-cache", {"model": "m"}, Rows(cols))
    size = [0]

    class Sink:
        def write(self, text):
            size[0] += len(text)

    tracemalloc.start()
    render.render(result, fmt, Env(stdout=Sink(), stderr=io.StringIO(), stdout_isatty=False))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, size[0]


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_streaming_memory_does_not_grow_with_the_rows(fmt):
    """Five times the rows (120,000: about 45 MB of JSON) take no more memory while writing: the writer holds one
    chunk at a time, never the rows as dicts or the document as one string (the old writers' peak grew with the
    rows, about 5 KB a row)."""
    small, small_size = _peak(24_000, fmt)
    big, big_size = _peak(120_000, fmt)
    assert big_size > 4.5 * small_size
    assert big < 1.25 * small, (small, big)


def test_kv_cache_json_and_csv_from_the_command_line(tmp_path):
    """A sweep through the command: the same document and cells as the reference writers give for its rows."""
    from aicalc.commands import kv_cache

    result = kv_cache.run("llama-3.1-8b", batch="1:300:+1", context="1k,1M", chip="h100-sxm")
    assert isinstance(result.rows, Rows)
    assert _same(json.loads(_written(result, "json")), json.loads(_reference_json(result)))
    assert _written(result, "csv") == _reference_csv(result)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe buffers are sized through Linux's F_SETPIPE_SZ")
@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_a_long_output_into_a_pipe_widens_the_pipe(fmt):
    """Megabytes of rows into a pipe: the pipe's buffer grows from 64 KiB to render.PIPE_BYTES (the writer waits on
    its reader a sixteenth as often) where the system allows it, and everything written arrives, the document the
    same as into a file; a short output leaves the pipe as it was."""
    import fcntl
    import os
    import subprocess

    def through_pipe(concurrency: str) -> tuple[bytes, int]:
        p = subprocess.Popen([sys.executable, "-m", "aicalc", "serve", "llama-3.1-8b", "--chip", "h100-sxm",
                              "--concurrency", concurrency, "--format", fmt], stdout=subprocess.PIPE)
        fd = p.stdout.fileno()
        before = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        size = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
        p.stdout.close()
        assert p.wait() in (0, 1)  # (1: its longest rows do not fit the chip: every row written still)
        assert before < render.PIPE_BYTES
        return b"".join(chunks), size

    with open("/proc/sys/fs/pipe-max-size") as f:
        allowed = int(f.read()) >= render.PIPE_BYTES
    text, size = through_pipe("1:3000:+1")
    assert size == (render.PIPE_BYTES if allowed else size) and (size > 65536) == allowed
    rows = json.loads(text)["rows"] if fmt == "json" else list(csv.DictReader(io.StringIO(text.decode())))
    assert [int(r["concurrency"]) for r in rows] == list(range(1, 3001))
    _, small = through_pipe("1:10:+1")
    assert small == 65536
