"""The command line: parse options, call the library, render the result, map it to an exit code.

Nothing here computes; every command lives in ``aicalc.commands.<name>`` and returns a Result.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from aicalc import __version__
from aicalc.env import Env
from aicalc.errors import AicalcError, ExitCode

ISSUES_URL = "https://github.com/aicalc/aicalc/issues"

app = typer.Typer(
    name="aicalc",
    help="Sizing calculator for AI hardware: memory, chips, time and cost to train or serve a model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
presets_app = typer.Typer(help="Browse the chip and model catalog.", no_args_is_help=True)
app.add_typer(presets_app, name="presets")

_env: Env | None = None

Format = Annotated[str, typer.Option("--format", help="table | json | csv | markdown")]
Json = Annotated[bool, typer.Option("--json", help="Alias for --format json.")]


def emit(result, fmt: str, json_flag: bool) -> int:
    from aicalc.render import FORMATS, render

    fmt = "json" if json_flag else fmt
    if fmt not in FORMATS:
        raise AicalcError(f"--format must be one of {', '.join(FORMATS)}, got '{fmt}'")
    render(result, fmt, _env or Env.from_system())
    return int(result.exit_code)


def _version(value: bool):
    if value:
        (_env or Env.from_system()).stdout.write(f"aicalc {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
    presets_dir: Annotated[list[str] | None, typer.Option("--presets-dir", metavar="DIR",
                           help="Extra preset folder (chips/, nodes/, models/); overrides built-ins by id. "
                                "Also AICALC_PRESETS.")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of internal errors.")] = False,
):
    from pathlib import Path

    from aicalc.catalog import store

    store.set_user_dirs([Path(p) for p in presets_dir or []])


@presets_app.command("list")
def presets_list(
    kind: Annotated[str | None, typer.Option("--kind", help="chip | node | model (default: all)")] = None,
    fmt: Format = "table",
    json_: Json = False,
):
    """List catalog entries."""
    from aicalc.commands import presets

    return emit(presets.list_(kind), fmt, json_)


@presets_app.command("show")
def presets_show(
    name: Annotated[str, typer.Argument(metavar="ID_OR_PATH", help="chip, node or model id, or a config.json path")],
    fmt: Format = "table",
    json_: Json = False,
):
    """Show one chip, node or model (architecture and exact parameter count)."""
    from aicalc.commands import presets

    return emit(presets.show(name), fmt, json_)


@app.command("kv-cache")
def kv_cache(
    model: Annotated[str, typer.Argument(metavar="MODEL", help="preset id, config.json, or a folder holding one")],
    batch: Annotated[str, typer.Option("--batch", help="concurrent sequences; list 1,8,64 or range 1:64:x2")] = "1",
    context: Annotated[str, typer.Option("--context", help="tokens per sequence (4k, 32k, 1k:128k:x2)")] = "4k",
    kv_dtype: Annotated[str, typer.Option("--kv-dtype", help="bf16 | fp16 | fp8 | int8 | int4")] = "bf16",
    dtype: Annotated[str, typer.Option("--dtype", help="weight format: bf16, fp8, int8, int4, nf4, q4_k_m …")] = "bf16",
    tp: Annotated[int, typer.Option("--tp", help="tensor-parallel devices")] = 1,
    chip: Annotated[str | None, typer.Option("--chip", help="chip or node id: adds capacity and max_batch")] = None,
    budget: Annotated[str | None, typer.Option("--budget", help="fail (exit 1) when a row needs more per device")] = None,
    block_size: Annotated[int, typer.Option("--block-size", help="paged-cache block in tokens (vLLM 16); 1 = exact")] = 16,
    utilization: Annotated[str, typer.Option("--gpu-memory-utilization", help="fraction of memory the engine may use")] = "0.9",
    overhead: Annotated[str | None, typer.Option("--overhead", help="runtime overhead per device (default: modelled)")] = None,
    solve: Annotated[str | None, typer.Option("--solve", help="max-context: longest context that fits at --batch")] = None,
    fmt: Format = "table",
    json_: Json = False,
):
    """KV-cache and serving memory per device; with --chip, how many sequences fit."""
    from aicalc.commands.kv_cache import KVRequest, run
    from aicalc.sweep import parse_sweep
    from aicalc.units import parse_bytes, parse_count, parse_fraction

    if block_size < 1:
        raise AicalcError(f"--block-size must be at least 1, got {block_size}")
    req = KVRequest(
        model=model, batch=parse_sweep(batch, lambda t: parse_count(t, "--batch"), "--batch"),
        context=parse_sweep(context, lambda t: parse_count(t, "--context"), "--context"),
        kv_dtype=kv_dtype, dtype=dtype, tp=tp, chip=chip, budget=parse_bytes(budget, "--budget") if budget else None,
        block_size=block_size, utilization=parse_fraction(utilization, "--gpu-memory-utilization"),
        overhead=parse_bytes(overhead, "--overhead") if overhead else None, solve=solve,
    )
    return emit(run(req), fmt, json_)


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def main(argv: list[str] | None = None, env: Env | None = None) -> int:
    """Entry point; returns the exit code (and exits with it when run as the console script)."""
    global _env
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    _env = env or Env.from_system()
    command = typer.main.get_command(app)
    try:
        code = command.main(args=args, prog_name="aicalc", standalone_mode=False)
        code = int(code or 0) if isinstance(code, int) else 0
    except AicalcError as e:
        _env.stderr.write(f"aicalc: error: {_one_line(e)}\n")
        code = int(e.exit_code)
    except (KeyboardInterrupt, BrokenPipeError):
        code = 130 if not isinstance(sys.exc_info()[1], BrokenPipeError) else 0
    except Exception as e:  # noqa: BLE001 - click's usage errors, then genuine bugs
        code = _click_error(e)
        if code is None:
            if debug:
                import traceback

                traceback.print_exc(file=_env.stderr)
            _env.stderr.write(f"aicalc: internal error: {type(e).__name__}: {_one_line(e)}; this is a bug, "
                              f"please report it with the command line at {ISSUES_URL} (rerun with --debug "
                              "for a traceback)\n")
            code = int(ExitCode.INTERNAL)
    if argv is None:
        sys.exit(code)
    return code


def _click_error(e: Exception) -> int | None:
    """Usage errors from click (vendored by typer): one line, exit 2. None when it is not one."""
    name = type(e).__name__
    if name == "Exit":
        return int(getattr(e, "exit_code", 0))
    if name == "Abort":
        return 130
    if hasattr(e, "format_message") and hasattr(e, "exit_code"):
        _env.stderr.write(f"aicalc: error: {_one_line(e.format_message())} (see --help)\n")
        return int(ExitCode.BAD_INPUT)
    return None
