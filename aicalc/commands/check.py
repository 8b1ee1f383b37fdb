"""``aicalc check BUDGET_FILE``: run each named check's command and hold every row to its limits."""

from __future__ import annotations

import os
from pathlib import Path

from aicalc.budget import LIMITS, load, parse_limit
from aicalc.catalog.store import looks_like_path, path_is
from aicalc.errors import AicalcError, ExitCode, ParameterError
from aicalc.result import Result


def _call(check, base: Path) -> Result:
    """Run one check's command through the registry with its ``args`` as keyword options."""
    import inspect

    from aicalc.commands import command
    from aicalc.flags import cli_message

    model = check.model
    if looks_like_path(model) and path_is(base / model):  # else the command reports the name
        model = str(base / model)
    run = command(check.command)
    kwargs = {k.replace("-", "_"): v for k, v in check.args.items()}
    params = inspect.signature(run).parameters
    has_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for k in kwargs:
        if k not in params and not has_var_kw or k in ("model", "progress"):
            raise AicalcError(f"check '{check.name}': {check.command} has no option --{k.replace('_', '-')}")
    kwargs = {k: _convert(check, k, v) for k, v in kwargs.items()}
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
    from aicalc.catalog.store import _short, path_is

    file = Path(path)
    if not path_is(file, "file"):
        raise AicalcError(f"no budget file at '{_short(path)}'")
    budget = load(file)
    base = file.parent
    rows, warnings = [], []
    exit_code = ExitCode.OK
    for c in budget.checks:
        res = _call(c, base)
        out_rows = [_plain(r) for r in res.rows]
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
            if status != "pass":  # a broken error-severity budget is a failure, not a warning (render.FAIL)
                warnings.append(f"{'fail: ' if status == 'fail' else ''}{c.name}: {key} {_show(key, worst)} breaks "
                                f"{limit} {raw}")
    return Result("check", {"file": str(file), "fail_on_warn": fail_on_warn}, rows, warnings=warnings,
                  exit_code=exit_code, title=f"aicalc check {file.name}",
                  columns=["name", "status", "actual", "allowed", "limit_name", "margin_pct"])


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
