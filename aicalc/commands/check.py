"""``aicalc check BUDGET_FILE``: run each named check's command and hold every row to its limits."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

from aicalc.budget import LIMITS, load, parse_limit
from aicalc.catalog.store import looks_like_path
from aicalc.errors import AicalcError, ExitCode
from aicalc.result import Result


def _argv(check, base: Path) -> list[str]:
    model = check.model
    if looks_like_path(model) and (base / model).exists():
        model = str(base / model)
    argv = [check.command, model]
    for key, value in check.args.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                argv.append(flag)
            continue
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        argv += [flag, str(value)]
    return [*argv, "--format", "json"]



def _run_command(argv: list[str]) -> tuple[int, dict | None, str]:
    from aicalc.cli import main
    from aicalc.env import Env

    out, err = io.StringIO(), io.StringIO()
    code = main(argv, env=Env(stdout=out, stderr=err, stdout_isatty=False))
    try:
        envelope = json.loads(out.getvalue()) if out.getvalue() else None
    except json.JSONDecodeError:
        envelope = None
    return code, envelope, err.getvalue().strip()


def run(path: str, fail_on_warn: bool = False) -> Result:
    file = Path(path)
    if not file.is_file():
        raise AicalcError(f"no budget file at '{path}'")
    budget = load(file)
    base = file.parent
    rows, warnings = [], []
    exit_code = ExitCode.OK
    for c in budget.checks:
        code, env, err = _run_command(_argv(c, base))
        if code in (2, 3) or env is None:
            raise AicalcError(f"check '{c.name}': {err or 'the command produced no output'}")
        for limit, raw in c.limits.items():
            keys, direction, _ = LIMITS[limit]
            key = next((k for k in keys if env["rows"] and k in env["rows"][0]), None)
            if key is None:
                raise AicalcError(f"check '{c.name}': limit {limit} does not apply to {c.command} "
                                  f"(its rows have none of {', '.join(keys)})")
            bound = parse_limit(limit, raw)
            values = [r.get(key) for r in env["rows"]]
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
                         "actual": _show(key, worst), "allowed": _show(key, bound),
                         "margin_pct": None if worst is None else 100.0 * margin / bound, "severity": c.severity})
            if status == "fail" or (status == "warn" and fail_on_warn):
                exit_code = ExitCode.BUDGET
            if status != "pass":
                warnings.append(f"{c.name}: {key} {_show(key, worst)} breaks {limit} {raw}")
    return Result("check", {"file": str(file), "fail_on_warn": fail_on_warn}, rows, warnings=warnings,
                  exit_code=exit_code, title=f"aicalc check {file.name}",
                  columns=["name", "status", "limit_name", "actual", "allowed", "margin_pct"])


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


def github_annotations(result: Result) -> list[str]:
    """GitHub Actions workflow commands for every check that did not pass (only inside Actions)."""
    if os.environ.get("GITHUB_ACTIONS") != "true":
        return []
    file = result.inputs["file"]
    out = []
    for r in result.rows:
        if r["status"] != "pass":
            level = "error" if r["status"] == "fail" else "warning"
            out.append(f"::{level} file={file},title=aicalc {r['name']}::{r['key']} {_show(r['key'], r['value'])} "
                       f"breaks {r['limit_name']} (limit {_show(r['key'], r['limit'])})")
    return out
