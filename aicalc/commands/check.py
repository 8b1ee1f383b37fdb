"""``aicalc check BUDGET_FILE``: run each named check's command and hold every row to its limits."""

from __future__ import annotations

import os
from pathlib import Path

from aicalc.budget import LIMITS, WRITES_FILES, load, parse_limit
from aicalc.catalog.store import looks_like_path, path_is
from aicalc.errors import AicalcError, ExitCode, ParameterError
from aicalc.result import Result


def _prepare(check, base: Path):
    """(model, command function, keyword options) of one check, its ``args`` converted as the command line
    would; nothing is run."""
    import inspect

    from aicalc.commands import command

    model = check.model
    if looks_like_path(model):  # inside the budget's folder (budget.load checked it): never the working folder's
        model = str(base / model)
    run = command(check.command)
    kwargs = {k.replace("-", "_"): v for k, v in check.args.items()}
    params = inspect.signature(run).parameters
    has_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for k in kwargs:
        if k not in params and not has_var_kw or k in ("model", "progress"):
            raise AicalcError(f"check '{check.name}': {check.command} has no option --{k.replace('_', '-')}")
        if k in WRITES_FILES:
            raise AicalcError(f"check '{check.name}': args.{k} writes a file; a budget file cannot ask for one "
                              f"(run aicalc {check.command} --{k} yourself)")
    return model, run, {k: _convert(check, k, v) for k, v in kwargs.items()}


def _work(check, kwargs: dict) -> tuple[int, int, int]:
    """(requests simulated, search configurations, search splits) a check will do at most, from its options
    alone: a budget file is held to what one command may do (docs/robustness.md)."""
    if check.command != "serve":
        return 0, 0, 0
    from aicalc.sweep import int_sweep, sweep
    from aicalc.units import parse_int

    if kwargs.get("search"):
        from aicalc.api.catalog import load_node_or_chip
        from aicalc.api.deployment import search_size

        chip = kwargs.get("chip", "h100-sxm")
        chip_ids = [c for c in (chip if isinstance(chip, list) else str(chip).split(",")) if c]
        n = parse_int(str(kwargs["chips"]), "--chips") if kwargs.get("chips") else None
        n = n or max(load_node_or_chip(chip_ids[0])[1], 8)
        tp = str(kwargs.get("tp"))
        tps = None if tp in ("1", "None") else int_sweep(tp, "--tp")
        configs, splits = search_size(chip_ids, n, tps, str(kwargs.get("dtype", "bf16")).split(","),
                                      str(kwargs.get("kv_dtype", "bf16")).split(","))
        return 0, configs, splits
    rate, requests = kwargs.get("rate"), kwargs.get("requests")
    if rate is None and requests is None:
        return 0, 0, 0
    rates = len(sweep(rate, "--rate")) if rate is not None else 1
    if requests is not None:
        from aicalc.api.traffic import MAX_REQUESTS

        return rates * min(_lines(requests), MAX_REQUESTS), 0, 0
    return rates * parse_int(str(kwargs.get("num_requests", "1000")), "--num-requests"), 0, 0


def _lines(path) -> int:
    """Lines of a trace file, counted in bounded blocks (0 for a file that cannot be read: the command reports
    it); at most the traffic reader's file cap is read."""
    from aicalc.api.traffic import MAX_FILE_BYTES

    n = read = 0
    try:
        with open(path, "rb") as f:
            while read <= MAX_FILE_BYTES and (block := f.read(1 << 20)):
                n, read = n + block.count(b"\n"), read + len(block)
    except (OSError, ValueError):
        return 0
    return n + 1


def _check_work(file: Path, prepared) -> None:
    """Refuse a budget file whose checks together would do more than one command may: simulate more than
    traffic.MAX_SIMULATED requests, or search more deployments than one search (counted before any check runs)."""
    from aicalc.catalog.store import _short

    total = [0, 0, 0]
    for check, (_, _, kwargs) in prepared:
        try:
            work = _work(check, kwargs)
        except AicalcError as e:
            raise AicalcError(f"check '{check.name}': {e}") from None
        total = [a + b for a, b in zip(total, work, strict=True)]
    if not any(total):  # no simulation, no search (memory and latency checks): no caps to import
        return
    from aicalc.api.deployment import MAX_SEARCH_CONFIGS, MAX_SEARCH_SPLITS
    from aicalc.api.traffic import MAX_SIMULATED
    for amount, cap, what in zip(total, (MAX_SIMULATED, MAX_SEARCH_CONFIGS, MAX_SEARCH_SPLITS),
                                 ("simulated requests", "deployment configurations searched",
                                  "prefill/decode splits searched"), strict=True):
        if amount > cap:
            raise AicalcError(f"{_short(file)}: its checks together make {amount:,} {what}; a budget file does at most "
                              f"what one command may, {cap:,} (split it into several files; see docs/robustness.md)")


def _call(check, prepared) -> Result:
    """Run one check's command through the registry with its ``args`` as keyword options."""
    from aicalc.flags import cli_message

    model, run, kwargs = prepared
    chips = kwargs.get("chip")
    try:
        if check.command != "compare" and isinstance(chips, (list, str)) and \
                (isinstance(chips, list) or "," in chips):  # several chips: one table, as the command line does
            from aicalc.commands.merge import over_chips

            return over_chips(chips, lambda chip: run(model, **{**kwargs, "chip": chip}))
        return run(model, **kwargs)
    except ParameterError as e:
        raise AicalcError(f"check '{check.name}': {cli_message(e)}") from None
    except AicalcError as e:
        raise AicalcError(f"check '{check.name}': {e}") from None


def _convert(check, key: str, value):
    """A check's ``args`` value as the command line would have parsed it: by the option's kind in the commands'
    table (:data:`aicalc.commands.options.OPTIONS`), a list as a sweep (``1,8,64``), numbers held to the
    documented caps; a value the option cannot take is bad input naming the check and the key."""
    from aicalc.commands.options import OPTIONS, parse_option

    spec = OPTIONS.get(check.command, {}).get(key)
    if spec is None:
        return value
    kind, param = spec
    numeric = kind in ("int", "float")
    where = f"check '{check.name}': args.{key}"
    try:
        if kind == "texts":  # repeatable: a list stays a list (compare --chip A --chip B)
            if isinstance(value, list):
                return [parse_option(kind, v) for v in value]
            return parse_option(kind, value)
        if isinstance(value, list):
            if numeric or kind == "flag":
                raise AicalcError(f"{where} takes one value, not a list")
            value = ",".join(str(v) for v in value)  # a sweep, as on the command line
        if kind == "int" and isinstance(value, float):
            if not value.is_integer():
                raise AicalcError(f"{where} must be a whole number, got {value!r}")
            value = int(value)
        if isinstance(value, bool) and kind != "flag":
            raise AicalcError(f"{where} takes a value, not {str(value).lower()}")
        value = parse_option(kind, value)
    except ValueError as e:
        raise AicalcError(f"{where}: {e}") from None
    if numeric and value is not None:
        from aicalc.api.inputs import check_number

        try:
            check_number(param, value)
        except ParameterError as e:
            from aicalc.flags import cli_message

            raise AicalcError(f"check '{check.name}': {cli_message(e)}") from None
    return value


def run(path: str, fail_on_warn: bool = False) -> Result:
    from aicalc.catalog.store import _short

    file = Path(path)
    if not path_is(file, "file"):
        raise AicalcError(f"no budget file at '{_short(path)}'")
    budget = load(file)
    base = file.parent
    rows, warnings = [], []
    exit_code = ExitCode.OK
    prepared = [(c, _prepare(c, base)) for c in budget.checks]
    _check_work(file, prepared)
    for c, prep in prepared:
        res = _call(c, prep)
        out_rows = [_plain(r) for r in res.rows]
        unfit = sum(r.get("fits") is False for r in out_rows)  # a row that does not fit meets no limit
        if unfit:
            warnings.append(f"{'fail: ' if c.severity == 'error' else ''}{_one_line(c.name)}: {unfit} of "
                            f"{len(out_rows)} row(s) do not fit the chips' memory, so no limit holds")
        for limit, raw in c.limits.items():
            keys, direction, _ = LIMITS[limit]
            key = next((k for k in keys if out_rows and k in out_rows[0]), None)
            if key is None:
                raise AicalcError(f"check '{c.name}': limit {limit} does not apply to {c.command} "
                                  f"(its rows have none of {', '.join(keys)})")
            bound = parse_limit(limit, raw)
            values = [r.get(key) for r in out_rows]
            if any(v is None for v in values):
                broken = True
                worst = None
            elif unfit:  # its numbers describe a deployment that cannot run
                worst = max(values) if direction == "max" else min(values)
                broken = True
            elif direction == "max":
                worst = max(values)
                broken = worst > bound
            else:
                worst = min(values)
                broken = worst < bound
            status = "pass" if not broken else ("fail" if c.severity == "error" else "warn")
            margin = None if worst is None else (bound - worst if direction == "max" else worst - bound)
            rows.append({"name": c.name, "command": c.command, "model": c.model, "limit_name": limit, "key": key,
                         "status": status, "value": worst, "limit": bound, "margin": margin,
                         "actual": _show(key, worst),
                         "allowed": ("≤ " if direction == "max" else "≥ ") + _show(key, bound),
                         "margin_pct": None if worst is None else 100.0 * margin / bound, "severity": c.severity})
            if status == "fail" or (status == "warn" and fail_on_warn):
                exit_code = ExitCode.BUDGET
            if status != "pass" and not unfit:  # a broken error-severity budget is a failure (render.FAIL)
                warnings.append(f"{'fail: ' if status == 'fail' else ''}{_one_line(c.name)}: {key} {_show(key, worst)} breaks "
                                f"{limit} {raw}")
    return Result("check", {"file": str(file), "fail_on_warn": fail_on_warn}, rows, warnings=warnings,
                  exit_code=exit_code, title=f"aicalc check {file.name}",
                  columns=["name", "status", "actual", "allowed", "limit_name", "margin_pct"])


def _one_line(name: str) -> str:
    """A check's name as a stderr line shows it: a newline or tab in it is ``?`` (a name cannot forge a line)."""
    return name.replace("\n", "?").replace("\t", "?")


def _plain(row: dict) -> dict:
    """Numbers as the JSON envelope carries them: non-finite floats are null."""
    import math

    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def _show(key: str, value) -> str:
    from aicalc.render import human

    return human(key, value)


def junit_xml(result: Result) -> str:
    """One testsuite, one testcase per (check, limit); failures for fail, skipped-with-message never."""
    from xml.sax.saxutils import quoteattr

    cases = []
    fails = 0
    for r in result.rows:
        name = quoteattr(f"{r['name']}: {r['limit_name']}")
        body = ""
        if r["status"] != "pass":
            fails += r["status"] == "fail"
            kind = "failure" if r["status"] == "fail" else "system-out"
            msg = quoteattr(f"{r['key']} = {r['value']} vs {r['limit_name']} {r['limit']}")
            body = f"<failure message={msg}/>" if kind == "failure" else f"<system-out>warning: {msg[1:-1]}</system-out>"
        cases.append(f'  <testcase classname="aicalc.check" name={name}>{body}</testcase>')
    head = f'<testsuite name="aicalc check" tests="{len(result.rows)}" failures="{fails}" errors="0">'
    return "\n".join(['<?xml version="1.0" encoding="UTF-8"?>', head, *cases, "</testsuite>", ""])


def write_junit(result: Result, path: str) -> None:
    """The JUnit report written to ``path``; a path that cannot be written is bad input (exit 2)."""
    from aicalc.catalog.store import _short

    try:
        Path(path).write_text(junit_xml(result), encoding="utf-8")
    except (OSError, ValueError) as e:
        why = getattr(e, "strerror", None) or str(e)
        raise AicalcError(f"--junit: cannot write '{_short(path)}' ({why})") from None


def github_annotations(result: Result) -> list[str]:
    """GitHub Actions workflow commands for every check that did not pass (only inside Actions)."""
    if os.environ.get("GITHUB_ACTIONS") != "true":
        return []
    file = result.inputs["file"]
    out = []
    for r in result.rows:
        if r["status"] != "pass":
            level = "error" if r["status"] == "fail" else "warning"
            title, message = f"aicalc {r['name']}", (f"{r['key']} {_show(r['key'], r['value'])} breaks "
                                                     f"{r['limit_name']} (limit {_show(r['key'], r['limit'])})")
            out.append(f"::{level} file={_gh(file, True)},title={_gh(title, True)}::{_gh(message)}")
    return out


def _gh(text, prop: bool = False) -> str:
    """GitHub Actions' workflow-command escaping (actions/toolkit command.ts): a check name holding a newline
    and "::error …" would otherwise print a command of its own."""
    out = str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return out.replace(":", "%3A").replace(",", "%2C") if prop else out
