"""Numbers formatted a column at a time (aicalc.numtext, issue 25): the text of every value is the one Python's
``repr`` gives it, so a sweep's JSON and CSV parse to the API's own numbers, exactly; and the writers stream, one
piece of rows at a time."""

from __future__ import annotations

import csv
import io
import json
import math

import numpy as np
import pytest

from aicalc import numtext, render
from aicalc.env import Env
from aicalc.result import Result, Rows


def _texts(columns: list) -> list[list[str]]:
    """Each value's text as float_blocks writes it, one list per column."""
    out = []
    for col, parts in zip(columns, numtext.float_blocks(columns, "null"), strict=True):
        out.append(numtext.layout(len(col), [*parts, "\n"]).decode().split("\n")[:-1])
    return out


def _samples(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**63, n, dtype=np.int64) | (rng.integers(0, 2, n, dtype=np.int64) << 63)
    return {
        "uniform": rng.random(n) * 1000,
        "wide": rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n),
        "bit patterns": bits.view(np.float64),  # every exponent, NaNs, infinities and subnormals among them
        "short": np.array([round(v, d) for v, d in zip((rng.random(n) * 10.0 ** rng.integers(0, 6, n)).tolist(),
                                                       rng.integers(0, 8, n).tolist(), strict=True)]),
        "around powers of ten": np.resize([float(f"{m}e{e}") for m in (1, 2, 5, 9.99, 1.25, 3.14159, 9.999999999999999)
                                           for e in range(-320, 309)], n),
        "one point": rng.random(n) + 1,  # every value's point at one place
        "after zeros": rng.random(n) * 0.009 + 0.001,  # 0.00ddd
        "exponent form": rng.random(n) * 1e-7 + 1e-8,
        "signed zeros and wholes": rng.choice(np.array([0.0, -0.0, 3.0, 1e15, -7.0, 0.5]), n),
        "edges": np.resize(np.array([0.0, -0.0, 1e16, 1e16 - 2, 1e-5, 1e-4, 9.9999e-5, 0.0001234, 123456.5, 1e23,
                                     9.999999999999999e22, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
                                     0.1, 0.3, 2 / 3, 1e15 + 0.3, 2**50 + 0.25, 2**50 + 0.75, 0.5, 2.0**-30,
                                     math.nan, math.inf, -math.inf, 1e-300, 1e300, 1.5, 9.5, 0.95, 1e17, 123e18]), n),
    }


@pytest.mark.parametrize("seed", [0, 1])
def test_each_float_reads_as_repr_writes_it(seed):
    """Shortest round-trip digits, the nearest where several are as short, and Python's layout (0.0001 but 1e-05,
    1e+16, 123.0, -0.0), for every kind of double: the text of CPython's own conversion (David Gay's dtoa)."""
    samples = _samples(3000, seed)
    columns = list(samples.values())
    for name, col, got in zip(samples, columns, _texts(columns), strict=True):
        want = [float.__repr__(v) if math.isfinite(v) else "null" for v in col.tolist()]
        assert got == want, name
        assert all(float(g) == v for g, v in zip(got, col.tolist(), strict=True) if g != "null")


def test_powers_of_two_and_their_neighbours():
    """A power of two has a float below it half as far as the one above, so the nearest shorter decimal can fall
    outside its interval below while the one above lies inside: repr writes that one (2^-695 is
    6.083493012144512e-210, not the 17 digits 6.0834930121445114e-210), and so does float_blocks."""
    powers = np.ldexp(1.0, np.arange(-1074, 1024))
    below, above = np.nextafter(powers, 0), np.nextafter(powers, np.inf)
    columns = [powers, -powers, below, above[np.isfinite(above)]]
    for col, got in zip(columns, _texts(columns), strict=True):
        assert got == [float.__repr__(v) for v in col.tolist()]
    assert _texts([np.array([2.0**-695] * 70)]) == [["6.083493012144512e-210"] * 70]


def test_columns_of_one_kind_and_single_values():
    """A column whose every value is written in exponent form, a column of one value, a single column."""
    rng = np.random.default_rng(5)
    for columns in ([rng.random(500) * 1e-6], [np.full(7, 0.1), rng.random(7) * -1e20], [np.array([2.5])]):
        assert _texts(columns) == [[repr(v) for v in c.tolist()] for c in columns]


def _reference_json(result: Result) -> str:
    doc = result.envelope()
    doc["rows"] = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
                   for row in doc["rows"]]
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _written(result: Result, fmt: str, stream=None) -> str:
    out = stream or io.StringIO()
    render.render(result, fmt, Env(stdout=out, stderr=io.StringIO(), stdout_isatty=False))
    if stream is not None:
        out.flush()
        return out.buffer.getvalue().decode()
    return out.getvalue()


def _numeric_rows(n: int, seed: int) -> Rows:
    """Number columns only (the writers' column-at-a-time path), each kind it takes."""
    rng = np.random.default_rng(seed)
    samples = _samples(n, seed)
    rates = rng.random(n) * 1000
    rates[n // 2] = 0.0
    signed = rates.copy()
    signed[n // 2] = -0.0  # equal to rates as numbers, not as text
    counts = np.round(rng.random(n) * 10.0 ** rng.integers(0, 16, n))
    return Rows({
        "batch": np.arange(1, n + 1),
        "same_batch": np.arange(1, n + 1),
        "negative": rng.integers(-(10**12), 10**12, n),
        "huge_int": rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64),
        "unsigned": rng.integers(0, 2**64 - 1, n, dtype=np.uint64),
        "bytes": counts,
        "constant_bytes": np.full(n, 80e9),
        "constant_int": np.full(n, 7),
        "negative_zero": np.full(n, -0.0),
        "zeros": rng.choice(np.array([0.0, -0.0]), n),
        "fits": rng.random(n) < 0.5,
        "always": np.ones(n, dtype=bool),
        "small_float": (rng.random(n) * 100).astype(np.float32),
        "nan": np.full(n, math.nan),
        "rate": rates,
        "same_rate": rates.copy(),  # output_tokens_per_s and its per-chip share on one chip: written once
        "signed_rate": signed,
        "half_rate": (rates / 2).astype(np.float32),
        "same_half_rate": (rates / 2).astype(np.float32),
        "same_bytes": counts.copy(),
        **{name.replace(" ", "_"): col for name, col in samples.items()},
    })


@pytest.mark.parametrize("n", [64, 1000, 9000])  # from the fewest rows the column path takes, past one chunk
def test_numeric_sweep_json_is_the_json_module_text(n):
    result = Result("kv-cache", {"model": "m", "batch": "1:300:+1", "tp": [1, 2, 4], "context": [*range(-99, 99), 2**63]},
                    _numeric_rows(n, n), warnings=["w"])  # a long sweep echoed in inputs, numbers past 64 bits
    text = _written(result, "json")
    assert text == _reference_json(result)
    wrapped = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # a process's stdout: the bytes go to its buffer
    assert _written(result, "json", wrapped) == text


@pytest.mark.parametrize("n", [64, 9000])
def test_numeric_sweep_csv_is_the_csv_module_text(n):
    rows = _numeric_rows(n, n + 1)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(rows.keys())
    for row in rows:
        writer.writerow(["" if isinstance(v, float) and not math.isfinite(v) else v for v in row.values()])
    assert _written(Result("x", {}, rows), "csv") == out.getvalue()


def _same(a, b) -> bool:
    """Equal, and of the same type (1 and 1.0, True and 1, 0.0 and -0.0 differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b


@pytest.mark.parametrize("command", ["serve", "kv-cache"])
def test_a_sweep_parses_to_the_apis_own_numbers(command):
    """A 3,000-point sweep through the command: every JSON value and every CSV cell reads back as the number in
    the API's own arrays (the columns the command computed), exactly, and of its type."""
    if command == "serve":
        from aicalc.commands import serve

        result = serve.run("llama-3.1-8b", chip="h100-sxm", concurrency="1:3000:+1")
    else:
        from aicalc.commands import kv_cache

        result = kv_cache.run("llama-3.1-8b", batch="1:1500:+1", context="1k,32k", chip="h100-sxm")
    assert isinstance(result.rows, Rows) and len(result.rows) == 3000
    columns = {k: v.tolist() for k, v in result.rows.columns.items()}
    doc = json.loads(_written(result, "json"))
    assert len(doc["rows"]) == 3000
    for key, values in columns.items():
        got = [row[key] for row in doc["rows"]]
        assert all(_same(g, v) for g, v in zip(got, values, strict=True)), key
    table = list(csv.reader(io.StringIO(_written(result, "csv"))))
    assert table[0] == list(columns)
    for j, (key, values) in enumerate(columns.items()):
        cells = [row[j] for row in table[1:]]
        if isinstance(values[0], bool):
            assert cells == [str(v) for v in values], key
        elif isinstance(values[0], float):
            assert all(_same(float(c), v) for c, v in zip(cells, values, strict=True)), key
        else:
            assert cells == [str(v) for v in values], key


class _Counting(Rows):
    """Rows that count how many rows the writer has taken from them."""

    taken = 0

    def arrays(self, size: int = 2048):
        for chunk in super().arrays(size):
            _Counting.taken += len(chunk[0])
            yield chunk


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_the_writer_streams_piece_by_piece(fmt):
    """50,000 rows: the document arrives in many writes, none of them more than one piece of rows, and at each
    write the writer has taken at most one chunk of rows more than it has written (a writer that built every
    row's text first would take all 50,000 before its first write)."""
    n = 50_000
    rows = _Counting({"batch": np.arange(n), "ttft_s": np.linspace(0.01, 3.0, n), "fits": np.arange(n) % 3 == 0})
    _Counting.taken = 0
    seen: list[tuple[int, int]] = []  # (rows taken, newlines written so far) at each write
    lines = [0]
    size = [0, 0]

    class Sink:
        def write(self, text):
            lines[0] += text.count("\n")
            size[0] += len(text)
            size[1] = max(size[1], len(text))
            seen.append((_Counting.taken, lines[0]))

    render.render(Result("kv-cache", {"model": "m"}, rows), fmt, Env(stdout=Sink(), stderr=io.StringIO(),
                                                                       stdout_isatty=False))
    per_row = 5 if fmt == "json" else 1  # lines a row takes
    assert len(seen) > n // render._FAST_ROWS
    assert size[1] <= size[0] * 2 * render._FAST_ROWS / n  # no write holds more than about one piece
    assert all(taken <= written // per_row + render._CHUNK + render._FAST_ROWS for taken, written in seen)
    assert _Counting.taken == n



@pytest.mark.parametrize("literal", [",", "," + " " * 2000])  # NULs many per byte of a row, or few
def test_layout_drops_the_nuls(literal):
    """Each row is its items' bytes in turn, the NULs padding the blocks dropped, whichever way they are deleted."""
    rng = np.random.default_rng(len(literal))
    values = rng.integers(0, 10 ** rng.integers(1, 13, 3000))
    block = numtext.int_block(values)
    nuls = np.count_nonzero(block == 0) * 2 / (len(values) * (2 * block.shape[1] + len(literal) + 3))
    assert (nuls < numtext._SPARSE) == (len(literal) > 1)  # both ways of deleting them
    text = numtext.layout(len(values), ["{", block, literal, block, "}\n"]).decode()
    assert text == "".join(f"{{{v}{literal}{v}}}\n" for v in values.tolist())
