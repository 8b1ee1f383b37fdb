"""The budget file of ``aicalc check``: a pydantic model, its JSON Schema, and a loader that reports every
problem with file, line and field."""

from pathlib import Path
from typing import Any

from aicalc.errors import AicalcError
from aicalc.tuples import Named

COMMANDS = ("kv-cache", "train-mem", "roofline", "serve", "compare", "train-time")
MAX_CHECKS = 200  # checks in one file: each runs a command (docs/robustness.md)

# limit → (row keys it reads, in order of preference; "max" or "min"; unit kind for parsing)
LIMITS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "max_memory_per_device": (("total_bytes_per_device", "peak_bytes", "memory_bytes_per_device"), "max", "bytes"),
    "max_peak_bytes": (("peak_bytes", "total_bytes_per_device"), "max", "bytes"),
    "max_kv_cache_bytes_per_device": (("kv_cache_bytes_per_device",), "max", "bytes"),
    "min_max_batch": (("max_batch",), "min", "count"),
    "max_ttft": (("ttft_s",), "max", "duration"),
    "max_tpot": (("tpot_s",), "max", "duration"),
    "min_output_tokens_per_s": (("output_tokens_per_s",), "min", "count"),
    "max_usd_per_million_tokens": (("usd_per_million_output_tokens", "usd_per_million_tokens"), "max", "number"),
    "max_chips_needed": (("chips_needed",), "max", "count"),
    "max_total_time": (("total_time_s",), "max", "duration"),
    "max_training_cost_usd": (("training_cost_usd", "cost_usd"), "max", "number"),
    "max_p99_ttft": (("p99_ttft_s",), "max", "duration"),
    "max_p99_tpot": (("p99_tpot_s",), "max", "duration"),
    "min_goodput": (("goodput_requests_per_s",), "min", "count"),
}


_MEMBERS = {"str": "a text", "int": "an integer", "float": "a number", "bool": "true or false", "list": "a list"}


class LimitError(ValueError):
    pass


def parse_limit(name: str, value: Any) -> float:
    from aicalc.units import parse_bytes, parse_count, parse_duration

    kind = LIMITS[name][2]
    if isinstance(value, bool):
        raise LimitError(f"{name} must be a number or a quantity, got {value!r}")
    try:
        if kind == "bytes":
            return float(parse_bytes(str(value), name))
        if kind == "duration":
            return parse_duration(str(value), name)
        if kind == "count":
            return parse_count(str(value), name)
        x = float(value)
    except (AicalcError, ValueError) as e:
        raise LimitError(str(e)) from None
    if not x > 0 or x == float("inf"):
        raise LimitError(f"{name} must be a positive finite number, got {value!r}")
    return x


def models():
    from typing import Literal

    from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, field_validator

    class Check(BaseModel):
        model_config = ConfigDict(extra="forbid")
        name: str = Field(min_length=1, description="unique; shown in reports")
        command: Literal[COMMANDS] = Field(description="any aicalc command with rows")
        model: str = Field(description="preset id, or a config.json path relative to the budget file")
        args: dict[str, str | int | float | bool | list[str | int | float]] = Field(
            default_factory=dict, description="the command's long options without dashes, values as on the command line")
        limits: dict[str, StrictStr | StrictInt | StrictFloat] = Field(  # strict: `true` is no limit of 1
            min_length=1, description="limits on every row of the command's output, named "
                                      + ", ".join(LIMITS) + "; sizes accept 80GB/80GiB, times 200ms")
        severity: Literal["error", "warn"] = "error"

        @field_validator("limits")
        @classmethod
        def _limits(cls, v):
            problems = []
            for name, value in v.items():
                if name not in LIMITS:
                    from aicalc.errors import suggestions

                    close = suggestions(str(name), list(LIMITS))
                    problems.append(f"unknown limit '{name}'" + (f"; did you mean {', '.join(close)}?" if close else
                                                                 f" (known: {', '.join(LIMITS)})"))
                    continue
                try:
                    parse_limit(name, value)
                except LimitError as e:
                    problems.append(str(e))
            if problems:
                raise ValueError("; ".join(problems))
            return v

    class BudgetFile(BaseModel):
        model_config = ConfigDict(extra="forbid", title="aicalc budget file")
        version: Literal[1]
        checks: list[Check] = Field(min_length=1)

        @field_validator("checks")
        @classmethod
        def _unique(cls, v):
            seen = set()
            for c in v:
                if c.name in seen:
                    raise ValueError(f"check name '{c.name}' is used twice")
                seen.add(c.name)
            return v

    return BudgetFile, Check


def json_schema() -> dict:
    BudgetFile, _ = models()
    schema = BudgetFile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def load(path: Path):
    """Validated BudgetFile, or BudgetInvalid listing every problem as ``file:line: field: message``.

    Problems include schema violations and references the catalog cannot resolve (unknown model or
    chip ids, missing config files), so nothing is evaluated from a file with any problem.
    """
    from aicalc.catalog.store import load_yaml_lines

    data, lines = load_yaml_lines(path)  # bounded: size, depth, aliases; a duplicate key is an error
    checks = data.get("checks") if isinstance(data, dict) else None
    if isinstance(checks, list) and len(checks) > MAX_CHECKS:
        raise BudgetInvalid([f"{path}:{lines.get(('checks',), 1)}: checks: {len(checks):,} checks; a budget file "
                             f"holds at most {MAX_CHECKS} (split it into several files)"])
    budget = _plain_valid(data)  # a well-formed file needs no pydantic; any doubt, and pydantic says why
    if budget is not None:
        problems = [f"{path}:{_line(lines, loc)}: {'.'.join(map(str, loc))}: {message}"
                    for loc, message in _references(data, path.parent)]
        if problems:
            raise BudgetInvalid(problems)
        return budget
    from pydantic import ValidationError

    BudgetFile, _ = models()

    def where(loc: tuple) -> int:
        return next((lines[loc[:n]] for n in range(len(loc), -1, -1) if loc[:n] in lines), 1)

    problems = []
    budget = None
    try:
        budget = BudgetFile.model_validate(data)
    except ValidationError as e:
        errors = e.errors()
        union = {}  # a value no member of a union takes: one problem, naming the members
        for err in errors:
            loc = tuple(err["loc"])
            if err["type"].endswith("_type") and loc and str(loc[-1]).split("[")[0] in _MEMBERS:
                union.setdefault(loc[:-1], []).append(_MEMBERS[str(loc[-1]).split("[")[0]])
        for err in errors:
            loc = tuple(err["loc"])
            if len(union.get(loc[:-1], ())) > 1:
                if loc[-1] != next(e["loc"][-1] for e in errors if tuple(e["loc"])[:-1] == loc[:-1]):
                    continue
                loc, msg = loc[:-1], f"must be {' or '.join(dict.fromkeys(union[loc[:-1]]))}"
            else:
                msg = err["msg"].removeprefix("Value error, ")
            field = ".".join(str(p) for p in loc) or "(top level)"
            problems.append(f"{path}:{where(loc)}: {field}: {msg}")
    for loc, message in _references(data, path.parent):
        problems.append(f"{path}:{where(loc)}: {'.'.join(map(str, loc))}: {message}")
    if problems:
        raise BudgetInvalid(problems)
    return budget


class PlainCheck(Named):
    """One check as :func:`models`' ``Check`` holds it."""

    name: str
    command: str
    model: str
    args: dict
    limits: dict
    severity: str


class PlainBudget(Named):
    version: int
    checks: list[PlainCheck]


_CHECK_KEYS = frozenset(PlainCheck._fields)
_ARG_TYPES, _ITEM_TYPES, _LIMIT_TYPES = (str, int, float, bool), (str, int, float), (str, int, float)


def _plain_valid(data: Any) -> PlainBudget | None:
    """The budget file, when it is plainly valid: every value of the exact type :func:`models` asks for (no
    coercion to consider), every limit known and readable, names unique. None otherwise, and pydantic decides
    and words the problems. Accepting only what the schema accepts, and holding the same values, is what
    ``tests/test_check_options.py`` checks; pydantic is imported only for a file with a problem (and for
    ``--schema``)."""
    if type(data) is not dict or data.keys() != {"version", "checks"}:
        return None
    checks = data["checks"]
    if type(data["version"]) is not int or data["version"] != 1 or type(checks) is not list or not checks:
        return None
    out, names = [], set()
    for c in checks:
        if type(c) is not dict or not c.keys() <= _CHECK_KEYS or not {"name", "command", "model", "limits"} <= c.keys():
            return None
        name, command, model = c["name"], c["command"], c["model"]
        args, limits, severity = c.get("args", {}), c["limits"], c.get("severity", "error")
        if (type(name) is not str or not name or name in names or type(command) is not str or command not in COMMANDS
                or type(model) is not str or type(severity) is not str or severity not in ("error", "warn")
                or type(args) is not dict or type(limits) is not dict or not limits):
            return None
        for key, value in args.items():
            if type(key) is not str:
                return None
            if type(value) is list:
                if any(type(v) not in _ITEM_TYPES for v in value):
                    return None
            elif type(value) not in _ARG_TYPES:
                return None
        for key, value in limits.items():
            if type(key) is not str or key not in LIMITS or type(value) not in _LIMIT_TYPES:
                return None
            try:
                parse_limit(key, value)
            except LimitError:
                return None
        names.add(name)
        out.append(PlainCheck(name, command, model, {k: list(v) if type(v) is list else v for k, v in args.items()},
                              dict(limits), severity))
    return PlainBudget(1, out)


def _line(lines: dict, loc: tuple) -> int:
    return next((lines[loc[:n]] for n in range(len(loc), -1, -1) if loc[:n] in lines), 1)


def _references(data: Any, base: Path):
    """(location, message) for every model/chip a check names that the catalog cannot resolve, every ``args``
    key its command has no option for, and every check name used twice."""
    from aicalc.catalog import store
    from aicalc.errors import UnknownPreset

    checks = data.get("checks") if isinstance(data, dict) else None
    seen: dict[str, int] = {}
    for i, c in enumerate(checks if isinstance(checks, list) else []):
        if not isinstance(c, dict):
            continue
        name = c.get("name")
        if isinstance(name, str):
            if name in seen:
                yield ("checks", i, "name"), f"'{store._short(name)}' names check {seen[name]} too: names must differ"
            seen.setdefault(name, i)
        model = c.get("model")
        if isinstance(model, str):
            if store.looks_like_path(model):
                if not _inside(base, base / model):
                    yield ("checks", i, "model"), (f"'{store._short(model)}' is outside the budget file's folder (a "
                                                   "budget names model files under its own folder)")
                elif not _exists(base / model):
                    yield ("checks", i, "model"), f"no such file '{store._short(model)}'"
            elif store.canonical("model", model) is None:
                yield ("checks", i, "model"), str(UnknownPreset("model", store._short(model), store.ids("model")))
        args = c.get("args")
        for key in args if isinstance(args, dict) else ():
            if str(key).replace("-", "_") in WRITES_FILES:
                yield ("checks", i, "args", key), (f"--{key} writes a file; a budget file cannot ask for one (run "
                                                   f"aicalc {c.get('command')} --{key} yourself)")
        for key in _unknown_args(c.get("command"), args):
            yield ("checks", i, "args", key), f"{c.get('command')} has no option --{str(key).replace('_', '-')}"
        chip = args.get("chip") if isinstance(args, dict) else None
        for one in chip if isinstance(chip, list) else [chip] if chip else []:
            for part in str(one).split(","):
                if part.strip() and store.canonical("chip", part) is None and store.canonical("node", part) is None:
                    yield ("checks", i, "args", "chip"), str(UnknownPreset(
                        "chip", store._short(part.strip()), [*store.ids("chip"), *store.ids("node")]))


def _unknown_args(command, args) -> list:
    """The keys of a check's ``args`` that its command takes no option for (``tpp`` for ``tp``)."""
    import inspect

    from aicalc.commands import command as registry

    if not isinstance(args, dict) or not isinstance(command, str):
        return []
    try:
        params = inspect.signature(registry(command)).parameters
    except Exception:  # noqa: BLE001 - an unknown command is reported by the schema
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    return [k for k in args if str(k).replace("-", "_") not in params or str(k) in ("model", "progress")]


WRITES_FILES = ("plot",)  # options that write a file where they are told: never from a budget file


def _inside(base: Path, path: Path) -> bool:
    """Whether ``path`` (symlinks followed) lies under the folder ``base``."""
    try:
        return path.resolve().is_relative_to(base.resolve())
    except (OSError, ValueError, RuntimeError):  # a symlink loop, a name the OS cannot hold
        return False


def _exists(path: Path) -> bool:
    from aicalc.catalog.store import path_is

    return path_is(path)


class BudgetInvalid(AicalcError):
    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(f"{len(problems)} problem(s) in the budget file: " + "; ".join(problems))
