"""Result → table (rich), JSON (versioned envelope), CSV or markdown.

JSON and CSV carry plain numbers in base units (the key names the unit); tables and markdown show
human units (binary GiB for memory, decimal for rates).
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

from aicalc.env import Env
from aicalc.result import Result, Rows
from aicalc.sweep import Counts
from aicalc.units import fmt_bytes, fmt_count, fmt_rate, fmt_seconds

FORMATS = ("table", "json", "csv", "markdown")
_COUNTS = ("params", "active_params", "trainable_params", "tokens")
_QUALIFIERS = ("_per_device", "_per_chip", "_per_sequence", "_per_gpu", "_per_token")
_SUFFIXES = (
    ("_bytes_per_s", lambda x: fmt_rate(x, "B/s")),
    ("_flop_per_s_per_chip", lambda x: fmt_rate(x, "FLOP/s")),
    ("_flop_per_s", lambda x: fmt_rate(x, "FLOP/s")),
    ("_tokens_per_s", lambda x: f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"),
    ("_requests_per_s", lambda x: f"{x:,.3g}/s"),
    ("_bytes", fmt_bytes),
    ("_flop", lambda x: fmt_rate(x, "FLOP")),
    ("_usd", lambda x: money(x)),
    ("_kwh", lambda x: f"{x:,.4g} kWh"),
    ("_j", lambda x: f"{x:.4g} J"),
    ("_w", lambda x: f"{x:,.0f} W"),
    ("_s", fmt_seconds),
)


# Short headers with their unit, for the keys people read most; the rest are spelled from the key.
SHORT = {
    "ttft_s": "TTFT", "tpot_s": "TPOT", "ideal_ttft_s": "ideal TTFT", "ideal_tpot_s": "ideal TPOT",
    "output_tokens_per_s": "tok/s", "ideal_output_tokens_per_s": "ideal tok/s",
    "output_tokens_per_s_per_chip": "tok/s/chip", "tokens_per_s_per_user": "tok/s/user",
    "tokens_per_s_per_sequence": "tok/s/seq", "tokens_per_s": "tok/s", "tokens_per_s_per_chip": "tok/s/chip",
    "usd_per_million_output_tokens": "$/M tok", "usd_per_request": "$/req", "cost_usd": "cost",
    "training_cost_usd": "train cost", "annual_inference_cost_usd": "$/year",
    "total_bytes_per_device": "mem/dev", "kv_cache_bytes_per_device": "KV/dev", "indexer_cache_bytes_per_device": "of it indexer/dev", "weights_bytes_per_device": "weights/dev",
    "kv_per_sequence_bytes": "KV/seq/dev", "memory_bytes": "memory", "peak_bytes": "peak", "headroom_bytes": "headroom", "shortfall_bytes": "short",
    "weights_bytes": "weights", "gradients_bytes": "grads", "optimizer_bytes": "optimizer", "peak_reserved_bytes": "reserved",
    "activations_bytes": "activations", "transient_bytes": "transient",
    "batch_per_replica": "batch/rep", "concurrency": "conc", "arithmetic_intensity": "FLOP/B", "time_s": "time",
    "ideal_time_s": "ideal", "chips_needed": "min chips", "meets_slo": "SLO", "speculative_speedup": "spec ×",
    "goodput_requests_per_s": "goodput", "requests_per_s": "req/s", "prefill_replicas": "prefill rep",
    "model_flop_per_s_per_chip": "FLOP/s/chip", "total_time_s": "time", "chip_hours": "chip-h",
    "mfu": "MFU", "ideal_mfu": "ideal MFU", "hfu": "HFU", "max_batch": "max batch", "kv_budget_bytes_per_device": "KV budget",
    "trainable_params": "trainable", "p50_ttft_s": "p50 TTFT", "p90_ttft_s": "p90 TTFT", "p99_ttft_s": "p99 TTFT",
    "p50_tpot_s": "p50 TPOT", "p90_tpot_s": "p90 TPOT", "p99_tpot_s": "p99 TPOT", "preemptions": "preempt",
    "step_s": "step", "global_batch": "global batch", "micro_batch": "micro", "kv_dtype": "KV dtype",
    "output_tokens_per_s_per_gpu": "tok/s/GPU", "joules_per_output_token": "J/tok",
}
# shares shown as percentages
PERCENT = ("mfu", "ideal_mfu", "hfu", "efficiency", "inference_share_of_lifetime_cost", "acceptance", "prefix_hit",
           "goodput")


def _split(key: str) -> tuple[str, str]:
    """``kv_cache_bytes_per_device`` → (``kv_cache_bytes``, ``_per_device``)."""
    for q in _QUALIFIERS:
        if key.endswith(q):
            return key[: -len(q)], q
    return key, ""


def header(key: str) -> str:
    if key in SHORT:
        return SHORT[key]
    key, qualifier = _split(key)
    if qualifier:
        return header(key) + " " + qualifier.lstrip("_").replace("_", " ")
    for suffix, _ in _SUFFIXES:
        if key == suffix[1:]:
            break
        if key.endswith(suffix):
            key = key[: -len(suffix)] + (" tok/s" if suffix == "_tokens_per_s" else "")
            break
    return key.replace("_", " ")


def money(x: float) -> str:
    """USD as people write it: $0.0123, $0.19, $2.31, $3,999.50, $24,193, $1.01 M, $2.4 B."""
    a = abs(x)
    if a >= 1e9:
        return f"${x / 1e9:.3g} B"
    if a >= 1e6:
        return f"${x / 1e6:.3g} M"
    if a >= 1e4:
        return f"${x:,.0f}"
    if a >= 0.1 or a == 0:
        return f"${x:,.2f}"
    return f"${x:.3g}"


def human(key: str, value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if not isinstance(value, (int, float)):
        return _printable(str(value))  # a name from a user's file may carry terminal escape sequences
    if isinstance(value, float) and not math.isfinite(value):
        return "—"
    fmt = _number_format(key)
    if fmt is not None:
        return fmt(value)
    if isinstance(value, float):
        return f"{value:,.0f}" if value == int(value) and abs(value) < 1e15 else f"{value:.4g}"
    return f"{value:,}"


@cache
def _number_format(key: str):
    """How :func:`human` writes a number of column ``key`` (None: as a plain number), chosen once per key (a
    table asks for every cell)."""
    if key in PERCENT:
        return _percent
    if key == "chip_hours":
        return _chip_hours
    if key.endswith("_usd") or key.startswith("usd_per"):
        return money
    key = _split(key)[0]
    for suffix, fmt in _SUFFIXES:
        if key.endswith(suffix) or key == suffix[1:]:
            return fmt
    if key in _COUNTS or key.endswith("_params"):
        return fmt_count
    return None


def _percent(value) -> str:
    return f"{value * 100:.3g} %"


def _chip_hours(value) -> str:
    return fmt_count(value).replace("k", " k").replace("M", " M").replace("B", " B") + " chip-h"


def _plain(value: Any) -> Any:
    """JSON-safe: numpy scalars to Python, non-finite floats to null."""
    if hasattr(value, "item") and not isinstance(value, (list, dict)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if type(value) is Counts:  # a range of counts echoed in inputs: ints
            return value
        kinds = set(map(type, value))
        if kinds <= {int, str} or kinds == {float} and math.isfinite(sum(value)):  # a sweep echoed in inputs
            return value
        return [_plain(v) for v in value]
    return value


def render(result: Result, fmt: str, env: Env) -> None:
    if fmt in ("table", "markdown") and isinstance(result.rows, Rows):  # a table is laid out from all its rows
        import copy

        result = copy.copy(result)
        result.rows = list(result.rows)
    {"table": _table, "json": _json, "csv": _csv, "markdown": _markdown}[fmt](result, env)


# JSON and CSV stream the rows a chunk at a time: a run of rows with the same keys is encoded column by column
# (one type check per column, not per value) and written through one template per row. The document is the one
# ``json.dumps(_plain(envelope), indent=2, ensure_ascii=False)`` wrote, character for character
# (tests/test_output_stream.py checks it against that encoder).
_CHUNK = 8192


def _json(result: Result, env: Env) -> None:
    out = env.stdout.write
    out("{")
    for n, (key, value) in enumerate(result.envelope(lazy=True).items()):
        out(("," if n else "") + "\n  " + _json_key(key) + ": ")
        if key == "rows":
            _json_rows(value, out, env.stdout)
        else:
            out(_dump(_plain(value), "  "))
    out("\n}\n")


def _json_rows(rows, out, stream) -> None:
    if not len(rows):
        out("[]")
        return
    out("[\n")
    first = True
    for keys, cols, n in _row_runs(rows):
        fast = _fast_rows(keys, cols, n, _JSON_WORDS, "    {", [("," if i else "") + f"\n      {_json_key(k)}: "
                                                               for i, k in enumerate(keys)], "\n    },\n")
        if fast is not None:
            write = _byte_writer(stream, n)
            for data in fast:
                del data[-2:]  # the last row's ",\n"
                if not first:
                    write(b",\n")
                write(data)
                first = False
            continue
        if keys:
            parts = [(("," if i else "") + f"\n      {_json_key(k)}: ", *_json_column(col))
                     for i, (k, col) in enumerate(zip(keys, cols, strict=True))]
            text = _fill("    {", parts, "\n    }", n, ",\n")
        else:
            text = ",\n".join(["    {}"] * n)
        if not first:
            out(",\n")
        out(text)
        first = False
    out("\n  ]")


def _fill(head: str, parts: list[tuple[str, str, list]], tail: str, n: int, sep: str = "") -> str:
    """``n`` rows of text joined by ``sep``: each ``head``, then each part's text and its value by its ``%`` conversion (``%d``, ``%d.0``,
    ``%r``, ``%s``), then ``tail``. A value that is the same in every row (a sweep's other axes, the chip's memory)
    is written into the literal text once rather than formatted in every row; the rest are converted a column at
    a time and joined with the literal text between them."""
    literals, columns = [head], []
    done: list[tuple[list, list]] = []  # integer columns formatted so far: a column equal to one is not redone
    for text, fmt, vals in parts:
        literals[-1] += text
        if n > 1 and vals[-1] == vals[0] and vals.count(vals[0]) == n and (fmt != "%r" or vals[0] != 0):  # ±0.0
            literals[-1] += fmt % (vals[0],)
            continue
        if fmt in ("%d", "%d.0"):  # ints (kv_cache_bytes and its per-device share at TP 1 are one column)
            text_of = next((t for v, t in done if v == vals), None)
            if text_of is None:
                text_of = list(map(repr, vals))
                done.append((vals, text_of))
            columns.append(text_of)
        else:
            columns.append(vals if fmt == "%s" else list(map(repr, vals)))
        literals.append(".0" if fmt == "%d.0" else "")
    literals[-1] += tail + sep
    if not columns:
        return (literals[0] * n)[:len(literals[0]) * n - len(sep)]
    step = 2 * len(columns) + 1
    pieces: list = [None] * (step * n)
    for j, lit in enumerate(literals):
        pieces[2 * j::step] = [lit] * n
    for j, col in enumerate(columns):
        pieces[2 * j + 1::step] = col
    pieces[-1] = pieces[-1][:len(pieces[-1]) - len(sep)]
    return "".join(pieces)


def _row_runs(rows):
    """(keys, one list of values per key, number of rows) for each run of consecutive rows with the same keys,
    at most ``_CHUNK`` rows a run."""
    from itertools import groupby

    if isinstance(rows, Rows):
        keys = tuple(rows.keys())
        for cols in rows.arrays(_CHUNK):
            yield keys, cols, len(cols[0]) if cols else 0
        return
    for i in range(0, len(rows), _CHUNK):
        for keys, run in groupby(rows[i:i + _CHUNK], key=tuple):
            run = list(run)
            yield keys, [list(c) for c in zip(*(r.values() for r in run), strict=True)], len(run)


_JSON_WORDS = ("null", "true", "false")
_CSV_WORDS = ("", "True", "False")
_FAST_MIN = 64  # rows from which numbers are formatted a column at a time (fewer: a value at a time, no numpy)
_FAST_ROWS = 4096  # rows laid out at once: numpy's temporaries stay small (cache-sized) while its calls are few
#                    (serve's 80,000 rows of JSON: 2,048 a piece 186 ms of CPU time to format, 4,096 169, 8,192 174)


def _fast_rows(keys, cols, n: int, words: tuple[str, str, str], head: str, before: list[str], tail: str):
    """The text of ``n`` rows of numpy number columns (int, bool, float up to 64 bits) as UTF-8 bytes,
    ``_FAST_ROWS`` rows a piece, each row ``head``, then each key's text in ``before`` and its value, then
    ``tail``: numbers as ``repr`` writes them, non-finite floats as ``words[0]``, booleans as ``words[1]`` or
    ``words[2]``, formatted a column at a time by :mod:`aicalc.numtext`. None (nothing written) for fewer than
    ``_FAST_MIN`` rows, or where a column is anything else."""
    if n < _FAST_MIN or not keys or not all(getattr(c, "ndim", 0) == 1 and c.dtype.kind in "biuf"
                                            and c.dtype.itemsize <= 8 for c in cols):
        return None
    kinds = _fast_kinds(cols, words)
    return (_fast_piece(kinds, words, head, before, tail, [c[i:i + _FAST_ROWS] for c in cols])
            for i in range(0, n, _FAST_ROWS))


def _fast_kinds(cols, words) -> list:
    """How each column is written: its text where it is the same in every row, an earlier column's index where
    the two hold the same numbers (kv_cache_bytes and its per-device share at TP 1, output_tokens_per_s and its
    per-chip share on one chip), or "bool", "int", "whole" (a
    float column of whole numbers below 10¹⁶, -0.0 not among them: an integer and ".0"), "float"."""
    import numpy as np

    null, true, false = words
    kinds: list = []
    by_ends: dict = {}  # the columns written so far as numbers, by their first and last values (most differ there)
    for a in cols:
        kind = a.dtype.kind
        first, last = a[:1].tolist()[0], a[-1:].tolist()[0]
        if first == last and bool((a == a[0]).all()) and (kind != "f" or first != 0 or _one_sign(a)):  # ±0.0
            kinds.append((true if first else false) if kind == "b" else repr(first) if first - first == 0 else null)
            continue
        if kind == "b":
            kinds.append("bool")
            continue
        ends = (a.dtype if kind == "f" else "int", first, last)
        same = next((j for j in by_ends.get(ends, ()) if _same_bits(cols[j], a)), None)
        if same is not None:  # output_tokens_per_s and its per-chip share on one chip
            kinds.append(same)
            continue
        by_ends.setdefault(ends, []).append(len(kinds))
        if kind in "iu":
            kinds.append("int")
            continue
        whole = float(first).is_integer() and float(last).is_integer()  # (most float columns end otherwise)
        if whole:
            with np.errstate(invalid="ignore"):
                whole = bool(((np.abs(a) < 1e16) & (a == np.trunc(a)) & ~((a == 0) & np.signbit(a))).all())
        kinds.append("whole" if whole else "float")
    return kinds


def _one_sign(a) -> bool:
    """Whether zeros ``a`` are all 0.0 or all -0.0 (the same text)."""
    import numpy as np

    sign = np.signbit(a)
    return bool((sign == sign[0]).all())


def _same_bits(a, b) -> bool:
    """Whether two columns hold the same values bit for bit (so the same text: -0.0 is not 0.0), the ends compared
    first (most columns differ there)."""
    import numpy as np

    if a[0] != b[0] or a[-1] != b[-1] or a.dtype.kind == "f" and a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":
        a, b = a.view(f"i{a.dtype.itemsize}"), b.view(f"i{b.dtype.itemsize}")
    return np.array_equal(a, b)


def _fast_piece(kinds, words, head, before, tail, cols) -> bytearray:
    import numpy as np

    from aicalc import numtext

    null, true, false = words
    n = len(cols[0])
    values: list = [None] * len(cols)
    for i, (kind, a) in enumerate(zip(kinds, cols, strict=True)):
        if isinstance(kind, int):
            continue
        if kind == "bool":
            values[i] = numtext.text_block(a, true, false)
        elif kind == "int":
            block = numtext.int_block(a)
            values[i] = numtext.patch_rows(a.tolist(), n) if block is None else block  # 10^17 or more: repr
        elif kind == "whole":
            values[i] = [numtext.int_block(a.astype(np.int64)), ".0"]
        elif kind != "float":
            values[i] = kind
    floats = [i for i, kind in enumerate(kinds) if kind == "float"]
    if floats:
        for i, parts in zip(floats, numtext.float_blocks([cols[i] for i in floats], null), strict=True):
            values[i] = parts
    for i, kind in enumerate(kinds):
        if isinstance(kind, int):  # a column equal to an earlier one: its text
            values[i] = values[kind]
    items: list = [head]
    for text, value in zip(before, values, strict=True):
        items.append(text)
        items += value if isinstance(value, list) else [value]
    items.append(tail)
    return numtext.layout(n, items)


def _byte_writer(stream, rows: int = 0):
    """A function that writes UTF-8 bytes to ``stream``: to its binary buffer where it has one and writes UTF-8
    (its text so far flushed first), else decoded. ``rows`` of ``PIPE_ROWS`` or more (megabytes of text) into a
    pipe: the pipe's buffer is first made as large as the system lets a user make it (:func:`_widen_pipe`)."""
    buffer = getattr(stream, "buffer", None)
    if buffer is not None and (getattr(stream, "encoding", "") or "").lower().replace("-", "") == "utf8":
        stream.flush()
        if rows >= PIPE_ROWS:
            _widen_pipe(stream)
        return buffer.write
    return lambda data: stream.write(data.decode())


PIPE_ROWS = 2048  # rows from which a pipe is widened: a few megabytes of JSON, ~1 of CSV
PIPE_BYTES = 1 << 20  # Linux's default /proc/sys/fs/pipe-max-size, the most an unprivileged process may ask for


def _widen_pipe(stream) -> None:
    """Grow a pipe that ``stream`` writes into from its 64 KiB to ``PIPE_BYTES`` (Linux's ``F_SETPIPE_SZ``): the
    writer then waits for the reader once a megabyte rather than once every 64 KiB (80,000 rows of ``serve``'s
    JSON, 84 MB, into a pipe: ~10 % less CPU time and ~20 % less wall time, docs/robustness.md). Where the system
    refuses (a lower limit, a full per-user pipe quota) or the stream is no pipe, nothing changes."""
    import fcntl
    import os
    import stat

    if not hasattr(fcntl, "F_SETPIPE_SZ"):  # (Linux only)
        return
    try:
        fd = stream.fileno()
        if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) < PIPE_BYTES:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (OSError, ValueError, AttributeError):  # refused, or a stream without a file descriptor
        pass


def _json_column(col) -> tuple[str, list]:
    """(``%`` conversion, values) that write ``col``'s values (a list, or a numpy column) as JSON in a row
    template."""
    if not isinstance(col, list):
        fast = _numeric(col)
        if fast:
            return fast
        col = col.tolist()
    kinds = set(map(type, col))
    if kinds == {float}:
        if math.isfinite(sum(col)):  # a NaN or an infinity makes the sum one (an overflow only slows this down)
            return "%r", col
        return "%s", [float.__repr__(x) if math.isfinite(x) else "null" for x in col]
    if kinds == {int}:
        return "%r", col
    if kinds == {str}:
        return "%s", list(map(_json_str, col))
    if kinds == {bool}:
        return "%s", ["true" if x else "false" for x in col]
    return "%s", [_dump(_plain(x), "      ") for x in col]


def _numeric(a) -> tuple[str, list] | None:
    """A numpy column of numbers as a ``%`` conversion and values, or None where the list path must see each
    value. A float64 column of whole numbers below 10¹⁶ (byte counts) is written as integers followed by ".0":
    the text ``repr`` gives them, at the cost of formatting an integer. A column with one value throughout is
    that value repeated (one object, so that :func:`_fill` finds it the same at once)."""
    import numpy as np

    n = len(a)
    same = n > 1 and a[0] == a[-1] and bool((a == a[0]).all())
    if a.dtype.kind in "iub":
        values = a[:1].tolist() * n if same else a.tolist()
        return ("%s", ["true" if x else "false" for x in values]) if a.dtype.kind == "b" else ("%d", values)
    if a.dtype != np.float64:
        return None
    with np.errstate(invalid="ignore"):
        whole = (np.abs(a) < 1e16) & (a == np.trunc(a)) & ~((a == 0) & np.signbit(a))
    if whole.all():
        return "%d.0", a[:1].astype(np.int64).tolist() * n if same else a.astype(np.int64).tolist()
    if not np.isfinite(a).all():
        return None
    return "%r", a[:1].tolist() * n if same and a[0] != 0 else a.tolist()  # 0.0 == -0.0


def _json_str(text: str) -> str:
    from json.encoder import encode_basestring

    return encode_basestring(text)


def _json_key(key) -> str:
    """A key as ``json.dumps`` writes it (it turns numbers, booleans and None into strings)."""
    if isinstance(key, str):
        return _json_str(key)
    if key is True or key is False or key is None:
        return '"' + {True: "true", False: "false", None: "null"}[key] + '"'
    if isinstance(key, (int, float)):
        return '"' + _number(key) + '"'
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _number(x) -> str:
    if isinstance(x, int):
        return int.__repr__(x)
    if math.isfinite(x):
        return float.__repr__(x)
    return "NaN" if x != x else "Infinity" if x > 0 else "-Infinity"


def _dump(value: Any, indent: str) -> str:
    """``value`` (already :func:`_plain`) as ``json.dumps(value, indent=2, ensure_ascii=False)`` writes it at
    ``indent``."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _json_str(value)
    if isinstance(value, (int, float)):
        return _number(value)
    inner = indent + "  "
    if isinstance(value, dict):
        if not value:
            return "{}"
        return ("{\n" + ",\n".join(f"{inner}{_json_key(k)}: {_dump(v, inner)}" for k, v in value.items())
                + "\n" + indent + "}")
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        kinds = {int} if type(value) is Counts else set(map(type, value))
        if kinds == {int} and len(value) >= _FAST_MIN:  # a long sweep of counts echoed in inputs
            text = _int_lines(value, inner)
            if text is not None:
                return "[\n" + text + "\n" + indent + "]"
        if kinds == {int} or kinds == {float} and math.isfinite(sum(value)):  # a long sweep echoed in inputs
            return "[\n" + inner + (",\n" + inner).join(map(repr, value)) + "\n" + indent + "]"
        return "[\n" + ",\n".join(inner + _dump(v, inner) for v in value) + "\n" + indent + "]"
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _int_lines(values: list[int], inner: str) -> str | None:
    """``values`` one a line after ``inner``, as ``repr`` writes them, formatted at once (:mod:`aicalc.numtext`);
    None where one does not fit 64 bits."""
    import numpy as np

    from aicalc import numtext

    try:
        a = values.array(np.int64) if type(values) is Counts else np.array(values, dtype=np.int64)
    except OverflowError:
        return None
    block = numtext.int_block(a)
    if block is None:
        return None
    return numtext.layout(len(a), [inner, block, ",\n"]).decode()[:-2]


def _all_keys(rows) -> list[str]:
    if isinstance(rows, Rows):
        return rows.keys()
    keys: dict[str, None] = {}
    for row in rows:
        keys.update(dict.fromkeys(row))
    return list(keys)


def _columns(result: Result) -> list[str]:
    return result.columns or _all_keys(result.rows)


def _csv(result: Result, env: Env) -> None:
    import csv

    names = _all_keys(result.rows)
    writer = csv.writer(env.stdout, lineterminator="\n")
    writer.writerow(names)
    for keys, cols, n in _row_runs(result.rows):
        at = dict(zip(keys, cols, strict=True))
        if len(names) < 2:  # one field: the csv module's own rules for an empty one ('""')
            writer.writerows([[_csv_cell(_plain(v))] for v in (at[names[0]] if at else [""] * n)] if names
                             else [[]] * n)
            continue
        fast = _fast_rows(keys, cols, n, _CSV_WORDS, "", ["," if i else "" for i in range(len(keys))], "\n") \
            if list(keys) == names else None
        if fast is not None:
            write = _byte_writer(env.stdout, n)
            for data in fast:
                write(data)
            continue
        parts = [("," if i else "", *(_csv_column(at[k]) if k in at else ("%s", [""] * n)))  # missing: restval ""
                 for i, k in enumerate(names)]
        env.stdout.write(_fill("", parts, "\n", n))


def _csv_column(col) -> tuple[str, list]:
    """(``%`` conversion, values) that write ``col``'s cells as ``csv.DictWriter`` wrote ``_csv_cell(_plain(v))``:
    numbers as the writer formats them (``repr`` of a float), non-finite floats and None empty, texts guarded and
    quoted by the csv module's rules."""
    if not isinstance(col, list):
        fast = _numeric(col)
        if fast:
            fmt, vals = fast
            return (fmt, vals) if fmt != "%s" else ("%s", ["True" if v == "true" else "False" for v in vals])
        col = col.tolist()
    kinds = set(map(type, col))
    if kinds == {float}:
        if math.isfinite(sum(col)):
            return "%r", col
        return "%s", [float.__repr__(x) if math.isfinite(x) else "" for x in col]
    if kinds == {int}:
        return "%d", col
    if kinds == {bool}:
        return "%s", [str(x) for x in col]
    memo: dict = {}
    return "%s", [_csv_text(_csv_cell(_plain(x)), memo) for x in col]


def _csv_text(cell, memo: dict) -> str:
    """A cell as the csv module writes it (quoted where it must be), through the module itself."""
    import csv
    import io

    key = (type(cell), cell) if isinstance(cell, (str, int, float)) else None  # None and texts come again
    if key is None or key not in memo:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow([cell, ""])
        if key is None:
            return buf.getvalue()[:-2]
        memo[key] = buf.getvalue()[:-2]
    return memo[key]


def _csv_cell(v: Any) -> Any:
    if isinstance(v, list):
        v = ";".join(map(str, v))
    if isinstance(v, str) and v[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + v  # a spreadsheet would run "=cmd|…" as a formula (OWASP's CSV injection guard)
    return "" if v is None else v


def _md(text: str) -> str:
    """A markdown table cell: a "|" would end the cell, a newline the row."""
    return " ".join(str(text).replace("|", "\\|").split())


def _markdown(result: Result, env: Env) -> None:
    cols = _columns(result)
    out = []
    if result.title:
        out.append(f"**{_md(result.title)}**\n")
    if len(result.rows) == 1 and len(cols) > 6:
        out += ["| field | value |", "|---|---|"]
        out += [f"| {header(k)} | {_md(human(k, result.rows[0].get(k)))} |" for k in cols]
    else:
        out.append("| " + " | ".join(header(k) for k in cols) + " |")
        out.append("|" + "---|" * len(cols))
        out += ["| " + " | ".join(_md(human(k, row.get(k))) for k in cols) + " |" for row in result.rows]
    out += [f"\n> {_md(w)}" for w in result.warnings]
    env.stdout.write("\n".join(out) + "\n")


def console(env: Env, stream=None):
    """A rich Console on a terminal (or at a fixed width); a :class:`PlainConsole` into a pipe or a file, so
    that rich is imported only to draw on a terminal."""
    tty = env.stdout_isatty and stream is None
    if not tty and not env.width:
        return PlainConsole(stream or env.stdout)
    from rich.console import Console

    con = Console(
        file=stream or env.stdout,
        force_terminal=tty,
        no_color=env.no_color or not tty,
        color_system="auto" if tty and not env.no_color else None,
        width=env.width or (None if tty else 100_000),
        soft_wrap=not tty,
        highlight=False,
        markup=False,  # names and notes are printed as they are: a "[x]" is text, not a style
    )
    if con.width < MIN_WIDTH:  # COLUMNS=0 printed no table, COLUMNS=1 a character a line
        con.width = MIN_WIDTH
    return con


MIN_WIDTH = 40  # the narrowest width a table is drawn at, whatever COLUMNS or the terminal says


def fit_columns(rows: list[dict], cols: list[str], width: int | None,
                keep=()) -> tuple[list[str], list[str], list[str]]:
    """(columns shown, constant columns moved to the caption, columns left out to fit ``width``).

    A column whose value is the same in every row of a multi-row table says nothing per row: it goes to the
    caption. Then, if the table is wider than the terminal, the columns at the right give way (they stay in
    JSON/CSV), so no value is ever cut or wrapped; the verdict columns (``fits``, ``meets_slo``, ``status``) and
    the columns in ``keep`` (the one the rows are ranked by, the answers the command exists for) stay, since a row
    without them reads as an answer it is not (rows ranked by a column that is not shown look unsorted)."""
    shown, constant = list(cols), []
    if len(rows) > 1:
        for k in cols:
            if len(shown) > 2 and _same(k, rows):
                constant.append(k)
                shown.remove(k)
    dropped: list[str] = []
    if width:
        def need(ks):  # rich's heavy box: one border per column plus one, one space of padding each side
            return 1 + sum(3 + max([_cell_len(header(k)), *(_cell_len(human(k, r.get(k))) for r in rows)])
                           for k in ks)

        while need(shown) > width:
            give = [k for k in shown[2:] if k not in VERDICTS and k not in keep]
            if not give:
                break
            shown.remove(give[-1])
            dropped.insert(0, give[-1])
    return shown, constant, dropped


def _same(key: str, rows: list[dict]) -> bool:
    """Whether every row shows the same text for ``key``: up to the first that differs (a column that varies
    costs two cells, not all)."""
    first = human(key, rows[0].get(key))
    return all(human(key, r.get(key)) == first for r in rows[1:])


FAIL = "fail: "  # a warning line that reports a failure (check), printed as it is rather than as "warning: …"
VERDICTS = ("fits", "meets_slo", "status")  # kept in a narrow table: they say whether a row's numbers hold


def wrap_segments(parts: list[str], width: int | None, sep: str = " · ") -> list[str]:
    """``parts`` joined by ``sep`` into lines of at most ``width`` characters, broken only between parts, so a
    value never parts from its unit (``weights/dev 14.96 GiB`` stays on one line)."""
    lines: list[str] = []
    for part in parts:
        if lines and (not width or len(lines[-1]) + len(sep) + len(part) <= width):
            lines[-1] += sep + part
        else:
            lines.append(part)
    return lines


def _table(result: Result, env: Env) -> None:
    con = console(env)
    if isinstance(con, PlainConsole):
        Table = PlainTable
    else:
        from rich.table import Table
    cols = _columns(result)
    if env.columns:
        known = set(_all_keys(result.rows))
        cols = [c for c in env.columns if c in known]
    vertical = len(result.rows) == 1 and len(cols) > 3
    # the title and the caption span the terminal, not the table's width (a narrow table split its title's
    # values across lines), and the caption breaks only between its "key value" parts
    table = Table(header_style="bold")
    dropped: list[str] = []
    caption: list[str] = []
    if vertical:
        table.add_column("field", no_wrap=True)
        table.add_column("value", overflow="fold")
        for k in cols:
            table.add_row(header(k), human(k, result.rows[0].get(k)))
    else:
        width = con.width if env.stdout_isatty or env.width else None
        shown, constant, dropped = fit_columns(result.rows, cols, width, result.keep or ())
        caption = [f"{header(k)} {human(k, result.rows[0].get(k))}" for k in constant]
        first = result.rows[0] if result.rows else {}
        for k in shown:
            justify = "left" if isinstance(first.get(k), str) else "right"
            table.add_column(header(k), justify=justify, no_wrap=True)
        for row in result.rows:
            table.add_row(*(human(k, row.get(k)) for k in shown))
    if result.title:
        con.print(_printable(result.title), style="italic")
    con.print(table)
    for line in wrap_segments(caption, con.width if env.stdout_isatty or env.width else None):
        con.print(line, style="dim italic")
    if dropped:
        con.print(f"{len(dropped)} column(s) left out to fit {con.width} columns: {', '.join(dropped)} "
                  "(--columns chooses; --format json has all)", style="dim")
    if result.chart is not None and env.stdout_isatty:
        result.chart(con)
    for note in result.notes:
        con.print(_printable(note), style="dim")
    err = console(env, env.stderr)
    for w in result.warnings:
        if w.startswith(FAIL):  # check's broken error-severity budgets
            err.print(_printable(w), style="red")
        else:
            err.print(f"warning: {_printable(w)}", style="yellow")


class PlainConsole:
    """The part of rich's Console a table uses, for output that is not a terminal: plain text, no colour,
    no width limit, no markup (a ``[x]`` in a name is printed as it is)."""

    width = 100_000

    def __init__(self, file):
        self.file = file

    def print(self, what="", style=None) -> None:
        text = what.render() if isinstance(what, PlainTable) else _printable(str(what))
        self.file.write(text + "\n")


class PlainTable:
    """rich's Table as :class:`PlainConsole` draws it: the same heavy-head box, cell padding, justification,
    title and caption, character for character (tests/test_robustness.py compares the two)."""

    def __init__(self, title=None, title_justify="left", header_style=None):
        self.title, self.caption, self.caption_justify = title, None, "left"
        self.columns: list[tuple[str, str]] = []
        self.rows: list[list[str]] = []

    def add_column(self, header="", justify="left", no_wrap=False, overflow=None) -> None:
        self.columns.append((str(header), justify))

    def add_row(self, *cells) -> None:
        self.rows.append(["" if c is None else str(c) for c in cells])

    def render(self) -> str:
        def lines(text: str) -> list[str]:
            return _printable(text).split("\n")

        head = [lines(h) for h, _ in self.columns]
        body = [[lines(c) for c in row] + [[""]] * (len(self.columns) - len(row)) for row in self.rows]
        widths = [max(_cell_len(x) for cell in [head[i], *(r[i] for r in body)] for x in cell)
                  for i in range(len(self.columns))]

        def draw(cells: list[list[str]], bar: str) -> list[str]:
            out = []
            for n in range(max(len(c) for c in cells)):
                parts = []
                for (_, justify), w, cell in zip(self.columns, widths, cells, strict=True):
                    text = cell[n] if n < len(cell) else ""
                    pad = " " * (w - _cell_len(text))
                    parts.append(f" {pad + text if justify == 'right' else text + pad} ")
                out.append(bar + bar.join(parts) + bar)
            return out

        def rule(left: str, mid: str, right: str, line: str) -> str:
            return left + mid.join(line * (w + 2) for w in widths) + right

        out = [_printable(self.title)] if self.title else []
        out.append(rule("┏", "┳", "┓", "━"))
        out += draw(head, "┃")
        out.append(rule("┡", "╇", "┩", "━"))
        for row in body:
            out += draw(row, "│")
        out.append(rule("└", "┴", "┘", "─"))
        if self.caption:
            out.append(_printable(self.caption))
        return "\n".join(out)


def _printable(text: str) -> str:
    """Control characters (escape sequences a terminal would act on, C1 controls too) and Unicode format
    characters (U+202E right-to-left override, zero-width and bidi marks: text that reads other than it is) shown
    as ``?``; newlines and tabs kept."""
    text = str(text)
    if text.isprintable():  # no control, format or separator character (most text): nothing to replace
        return text
    if text.isascii():
        return "".join(c if c == "\n" or c == "\t" or c >= " " and c != "\x7f" else "?" for c in text)
    import unicodedata

    return "".join(c if c == "\n" or c == "\t" or (c >= " " and c != "\x7f" and (
        c.isascii() or unicodedata.category(c) not in _HIDDEN)) else "?" for c in text)


_HIDDEN = ("Cc", "Cf", "Zl", "Zp", "Cs")  # controls, format characters, line/paragraph separators, surrogates


def _cell_len(text: str) -> int:
    """Terminal cells of ``text``: wide (East Asian wide/full-width, emoji) characters take two."""
    if text.isascii():
        return len(text)
    import unicodedata

    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)

