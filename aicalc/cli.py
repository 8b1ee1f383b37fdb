"""The command line: parse options, call the library, render the result, map it to an exit code.

Nothing here computes; every command lives in ``aicalc.commands.<name>`` and returns a Result.
"""

import sys
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Annotated

import typer
from typer.models import CommandInfo

from aicalc import __version__
from aicalc.env import Env
from aicalc.errors import AicalcError, ExitCode, ParameterError

ISSUES_URL = "https://github.com/aicalc/aicalc/issues"

app = typer.Typer(
    name="aicalc",
    help="Sizing calculator for AI hardware: memory, chips, time and cost to train or serve a model.",
    epilog="\b\nExample: aicalc serve llama-3.1-70b --chip h100-sxm --chips 8 --tp 4\n"
           "Each command's --help has its own; docs/interface.md lists the shared options.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: --help stays fast (no rich import)
    context_settings={"help_option_names": ["-h", "--help"]},
)
presets_app = typer.Typer(help="Browse the chip and model catalog.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(presets_app, name="presets")


class _Deferred(CommandInfo):
    """A command whose function, and with it its option declarations (~150 ``Annotated`` options, most of what
    importing this module cost), is defined the first time typer asks for it: a query builds only its own
    command (``_main``), ``--help`` and the tests every one."""

    @property
    def callback(self):
        made = vars(self)
        if "function" not in made:
            factory = made["factory"]
            shared = factory.__code__.co_varnames[:factory.__code__.co_argcount]
            made["function"] = factory(*(_SHARED[name]() for name in shared))
        return made["function"]

    @callback.setter
    def callback(self, factory) -> None:
        vars(self)["factory"] = factory


def command(group: typer.Typer, name: str, short_help: str):
    """``@command(app, "kv-cache", short_help=…)`` over a function that defines and returns the command's
    function, given the shared option declarations its parameters name (:data:`_SHARED`): registered as
    ``@group.command`` would, defined only when built."""

    def register(factory):
        group.command(name, short_help=short_help)(factory)
        info = group.registered_commands[-1]
        group.registered_commands[-1] = _Deferred(**vars(info))
        return factory

    return register


_ENV: ContextVar[Env | None] = ContextVar("aicalc_env", default=None)  # the Env of the running main()


def _env_now() -> Env:
    return _ENV.get() or Env.from_system()


def _complete(kinds: tuple[str, ...]):
    """Shell completion of preset ids (evaluated only while completing, never on a normal run)."""

    def complete(incomplete: str) -> list[str]:
        from aicalc.catalog import store

        return [i for k in kinds for i in store.ids(k) if i.startswith(incomplete.lower())]

    return complete


def per_chip(chips, run):
    """``run(chip)`` for every chip given (repeated ``--chip`` or a comma list), stacked into one table."""
    from aicalc.commands.merge import over_chips

    return over_chips(chips, run)


def per_value(key: str, text, run):
    """``run(n)`` for each whole number of a sweep (``--tp 1,2,4``, ``--chips 8:64:x2``), stacked into one
    table; None passes through."""
    if text is None:
        return run(None)
    from aicalc.commands.merge import over
    from aicalc.sweep import int_sweep

    flag = "--" + key.replace("_", "-")
    if key == "zero":  # a stage, not a count: 0 is a value
        from aicalc.commands.merge import choices

        values = choices(text)
        bad = [v for v in values if v not in ("0", "1", "2", "3")]
        if bad:
            raise AicalcError(f"{flag} {bad[0]} is not a ZeRO stage (0, 1, 2 or 3)")
    else:
        values = int_sweep(str(text), flag)
    return over(key, [int(v) for v in values], run)


def emit(result, fmt: str, json_flag: bool, columns: str | None = None) -> int:

    from aicalc.render import FORMATS, render

    fmt = "json" if json_flag else fmt
    if fmt not in FORMATS:
        raise AicalcError(f"--format must be one of {', '.join(FORMATS)}, got '{fmt}'")
    env = _env_now()
    if columns is not None:
        keys = list(dict.fromkeys(c.strip() for c in columns.split(",") if c.strip()))  # each column once
        if not keys:
            raise AicalcError("--columns names no column (give row keys, comma-separated)")
        known = {k for row in result.rows for k in row}
        unknown = [k for k in keys if k not in known]
        if unknown:
            raise AicalcError(f"--columns: no column {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        env = env._replace(columns=keys)
    try:
        render(result, fmt, env)
    except BrokenPipeError:
        raise
    except OSError as e:  # the output cannot be written (/dev/full): the user's stream, not a bug
        raise AicalcError(f"cannot write the output: {e.strerror or e}") from None
    return int(result.exit_code)


@contextmanager
def progress_bar(label: str, min_total: int = 1_000_000, env: Env | None = None):
    """A ``progress(done, total)`` callback drawing a bar on stderr, only on a terminal and only for work
    big enough to take more than a moment (``total`` ≥ ``min_total`` items)."""
    env = env or _env_now()
    state: dict = {}

    def progress(done: int, total: int) -> None:
        if not env.stderr_isatty or total < min_total:
            return
        if "bar" not in state:
            from rich.console import Console
            from rich.progress import Progress

            state["bar"] = Progress(console=Console(file=env.stderr), transient=True)
            state["bar"].start()
            state["task"] = state["bar"].add_task(label, total=total)
        state["bar"].update(state["task"], completed=done)

    try:
        yield progress
    finally:
        if "bar" in state:
            state["bar"].stop()


def _version(value: bool):
    if value:
        _env_now().stdout.write(f"aicalc {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("-V", "--version", callback=_version, is_eager=True,
                                          help="Print the version.")] = False,
    presets_dir: Annotated[list[str] | None, typer.Option("--presets-dir", metavar="DIR",
                           help="Extra preset folder (chips/, nodes/, models/); overrides built-ins by id. "
                                "Also AICALC_PRESETS.")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of internal errors.")] = False,
):
    from pathlib import Path

    from aicalc.catalog import store

    if any(not str(p).strip() for p in presets_dir or []):  # "" would make the current folder a preset root
        raise AicalcError("--presets-dir names no folder")
    store.set_user_dirs([Path(p) for p in presets_dir or []])


# The option declarations several commands share, each made only when a command asking for it is built (a
# command's factory names the ones it uses as its parameters; ~0.3 M instructions each, docs/robustness.md).
_SHARED = {
    "Format": lambda: Annotated[str, typer.Option("--format", help="table | json | csv | markdown")],
    "Json": lambda: Annotated[bool, typer.Option("--json", help="Alias for --format json.")],
    "Columns": lambda: Annotated[str | None, typer.Option("--columns", metavar="KEYS",
                                                          help="table columns to show, comma-separated row keys (tables only)")],
    "Model": lambda: Annotated[str, typer.Argument(metavar="MODEL", help="preset id, a config.json, or a folder holding one",
                                                   autocompletion=_complete(("model",)))],
    "Chip": lambda: Annotated[list[str] | None, typer.Option("--chip", help="chip or node preset id; repeat it (or a comma list) "
                                                                               "for one table across chips",
                                                                autocompletion=_complete(("chip", "node")))],
    "Price": lambda: Annotated[str | None, typer.Option("--price", metavar="USD/h", help="USD per chip-hour, e.g. 2.5 or '$2.50/h' "
                                                                                   "(default: the chip preset's)")],
    "Ep": lambda: Annotated[int, typer.Option("--ep", help="expert parallelism (MoE): the experts split over N of a replica's tp "
                                                             "chips, each expert over tp/N (vLLM --enable-expert-parallel, SGLang "
                                                             "--ep, TensorRT-LLM moe_expert_parallel_size)")],
    "AttentionDp": lambda: Annotated[int, typer.Option("--attention-dp", help="attention data parallelism: a replica's tp chips "
                                                                             "run attention as N groups of tp/N, each on its own "
                                                                             "sequences (SGLang --enable-dp-attention, "
                                                                             "TensorRT-LLM enable_attention_dp)")],
    "RedundantExperts": lambda: Annotated[int, typer.Option("--redundant-experts", help="extra expert replicas over the --ep "
                                                                                      "ranks, as expert-parallel load balancers "
                                                                                      "place them (DeepSeek's EPLB; SGLang "
                                                                                      "--ep-num-redundant-experts): ep divides "
                                                                                      "experts + N")],
    "WeightDtype": lambda: Annotated[str, typer.Option("--dtype", help="weights: release (default: the official checkpoint's "
                                                                       "precision, e.g. gpt-oss's MXFP4 experts, DeepSeek-V3's "
                                                                       "fp8), bf16, fp16, fp8, fp4, mxfp4, int8, int4, nf4, q8_0, "
                                                                       "q4_0, q4_k_m, …, mxfp4-experts, or checkpoint (the model "
                                                                       "files' own bytes); a comma list sweeps")],
    "KvDtype": lambda: Annotated[str, typer.Option("--kv-dtype", help="KV cache: bf16, fp16, fp8, int8, int4, or auto (the "
                                                                      "checkpoint's quantization_config); a comma list sweeps")],
    "Engine": lambda: Annotated[str | None, typer.Option("--engine", help="engine profile: {ENGINES}; a family names its latest "
                                                         "release (cerebras = the newest cerebras-*). Default: the chip's own "
                                                         "stack (groq on groq-lpu, cerebras on cerebras-wse3, vllm on TPUs, "
                                                         "llama.cpp on Apple GPUs), else generic")],
    "Draft": lambda: Annotated[str | None, typer.Option("--draft", help="speculative decoding: a draft model (id, config) or "
                                                                        "head: mtp, eagle")],
    "DraftTokens": lambda: Annotated[int, typer.Option("--draft-tokens", help="tokens drafted per round (K)")],
    "Acceptance": lambda: Annotated[str, typer.Option("--acceptance", help="per-token acceptance rate of drafted tokens (0.7, 70%)")],
    "MemFractionStatic": lambda: Annotated[str | None, typer.Option(
        "--mem-fraction-static", help="SGLang's share of each device's memory for weights and KV pool (0.85, 85%; "
                                      "--engine sglang; default: SGLang's own by the chip and layout)")],
    "GpuMemoryUtilization": lambda: Annotated[str | None, typer.Option(
        "--gpu-memory-utilization", help="the engine's share of each device's memory (0.9, 90%): vLLM's "
                                         "gpu_memory_utilization, TensorRT-LLM's free_gpu_memory_fraction (of what "
                                         "the weights leave); default 0.9; with --engine sglang use "
                                         "--mem-fraction-static")],
    "SwaFullTokensRatio": lambda: Annotated[str | None, typer.Option(
        "--swa-full-tokens-ratio", help="SGLang's SWA-pool tokens per full-pool token for a hybrid sliding-window "
                                        "model (--engine sglang; default 0.8, DeepSeek-V4 0.1)")],
}


@command(presets_app, "list", short_help="List chips, nodes and models (--fits-on CHIP).")
def _presets_list(Format, Json, Columns, WeightDtype):
    def presets_list(
        kind: Annotated[str | None, typer.Option("--kind", help="chip | node | model (default: all)")] = None,
        fits_on: Annotated[str | None, typer.Option("--fits-on", metavar="CHIP", help="the models that fit this chip "
                                                    "or node (serving one sequence of --context tokens)")] = None,
        context: Annotated[str, typer.Option("--context", help="with --fits-on: tokens of the one sequence")] = "4k",
        dtype: WeightDtype = "release",
        lora: Annotated[bool, typer.Option("--lora", help="with --fits-on: also whether a LoRA fine-tune fits")] = False,
        fmt: Format = "table",
        json_: Json = False,
        columns: Columns = None,
    ):
        """List catalog entries; --fits-on CHIP lists the models that fit it.

        \b
        Example: aicalc presets list --fits-on h100-sxm --context 32k --lora
        """
        from aicalc.commands import presets

        if fits_on:
            return emit(presets.fits_on(fits_on, context, dtype, lora), fmt, json_, columns)
        return emit(presets.list_(kind), fmt, json_, columns)
    return presets_list


@command(presets_app, "show", short_help="One chip, node or model in full.")
def _presets_show(Format, Json, Columns):
    def presets_show(
        name: Annotated[str, typer.Argument(metavar="ID_OR_PATH", help="chip, node or model id, or a config.json path")],
        fmt: Format = "table",
        json_: Json = False,
        columns: Columns = None,
    ):
        """Show one chip, node or model (architecture and exact parameter count).

        \b
        Example: aicalc presets show llama-3.1-70b
        """
        from aicalc.commands import presets

        return emit(presets.show(name), fmt, json_, columns)
    return presets_show


@command(app, "kv-cache", short_help="KV cache and memory per device; max batch on a chip.")
def _kv_cache(Format, Json, Columns, Model, WeightDtype, KvDtype):
    def kv_cache(
        model: Model,
        batch: Annotated[str, typer.Option("--batch", help="concurrent sequences; list 1,8,64 or range 1:64:x2")] = "1",
        context: Annotated[str, typer.Option("--context", help="tokens per sequence (4k, 32k, 1k:128k:x2)")] = "4k",
        kv_dtype: KvDtype = "bf16",
        dtype: WeightDtype = "release",
        tp: Annotated[str | None, typer.Option("--tp", help="tensor-parallel devices (sweepable; default: a node's chips, "
                                                             "else 1)")] = None,
        chip: Annotated[list[str] | None, typer.Option("--chip", help="chip or node id: adds capacity and max_batch "
                                                       "(repeatable)", autocompletion=_complete(("chip", "node")))] = None,
        budget: Annotated[str | None, typer.Option("--budget", help="fail (exit 1) when a row needs more per device")] = None,
        block_size: Annotated[int | None, typer.Option("--block-size", help="paged-cache block in tokens (vLLM 16); 1 = exact")] = None,
        engine: Annotated[str, typer.Option("--engine", help="vllm: paged blocks, rolling windows; hf: transformers' "
                                                             "DynamicCache (unpaged, windows keep W-1)")] = "vllm",
        utilization: Annotated[str, typer.Option("--gpu-memory-utilization", help="fraction of memory the engine may use")] = "0.9",
        overhead: Annotated[str | None, typer.Option("--overhead", help="runtime overhead per device (default: modelled)")] = None,
        solve: Annotated[str | None, typer.Option("--solve", help="max-context: longest context that fits at --batch")] = None,
        fmt: Format = "table",
        json_: Json = False,
        columns: Columns = None,
    ):
        """KV-cache and inference memory per device; with --chip, how many sequences fit.

        \b
        Example: aicalc kv-cache llama-3.1-8b --chip h200 --context 32k --batch 1,8,64
        """
        from aicalc.commands.kv_cache import run

        def one(c):
            return per_value("tp", tp, lambda t: run(
                model, batch=batch, context=context, kv_dtype=kv_dtype, dtype=dtype, tp=t, chip=c, budget=budget,
                block_size=block_size, engine=engine, gpu_memory_utilization=utilization, overhead=overhead, solve=solve))

        return emit(per_chip(chip, one) if chip else one(None), fmt, json_, columns)
    return kv_cache


@command(app, "check", short_help="Hold deployments to budgets in CI (exit 1 on a fail).")
def _check(Format, Json, Columns):
    def check(
        budget_file: Annotated[str, typer.Argument(metavar="BUDGET_FILE", help="YAML file of named checks (version: 1)")],
        junit: Annotated[str | None, typer.Option("--junit", metavar="FILE", help="also write a JUnit XML report")] = None,
        fail_on_warn: Annotated[bool, typer.Option("--fail-on-warn", help="exit 1 on warnings too")] = False,
        schema: Annotated[bool, typer.Option("--schema", help="print the budget file's JSON Schema and exit")] = False,
        fmt: Format = "table",
        json_: Json = False,
        columns: Columns = None,
    ):
        """Hold deployments to budgets in CI: exit 0 all pass, 1 a check failed, 2 the file is invalid.

        \b
        Example: aicalc check budgets.yaml --junit report.xml
        """
        import json as _json

        from aicalc.commands import check as chk

        env = _env_now()
        if schema:
            from aicalc.budget import json_schema

            env.stdout.write(_json.dumps(json_schema(), indent=2) + "\n")
            return 0
        result = chk.run(budget_file, fail_on_warn)
        if junit:
            chk.write_junit(result, junit)
        for line in chk.github_annotations(result):
            env.stdout.write(line + "\n") if fmt == "table" and not json_ else env.stderr.write(line + "\n")
        return emit(result, fmt, json_, columns)
    return check


@command(app, "roofline", short_help="Prefill and decode: bound, TTFT, TPOT, tokens/s.")
def _roofline(Format, Json, Columns, Model, Chip, Ep, AttentionDp, RedundantExperts, WeightDtype, KvDtype, Engine, Draft, DraftTokens, Acceptance,
              MemFractionStatic, SwaFullTokensRatio):
    def roofline(
        model: Model,
        chip: Chip = None,
        batch: Annotated[str, typer.Option("--batch", help="sequences; sweeps: 1,8,64 or 1:256:x2")] = "1",
        prompt: Annotated[str, typer.Option("--prompt", help="prompt tokens (sweepable)")] = "512",
        gen: Annotated[str, typer.Option("--gen", help="generated tokens (sweepable)")] = "256",
        dtype: WeightDtype = "release",
        kv_dtype: KvDtype = "bf16",
        tp: Annotated[str | None, typer.Option("--tp", help="tensor-parallel degree (sweepable; default: a node's chips, "
                                                             "else 1)")] = None,
        compute_dtype: Annotated[str | None, typer.Option("--compute-dtype", help="override the math dtype (default: follows weights and chip)")] = None,
        group_size: Annotated[int | None, typer.Option("--group-size", help="int4 group size (default 128: 4.25 bits)")] = None,
        attention: Annotated[str, typer.Option("--attention", help="eager | sdpa | flash | materialized (eager = materialized "
                                                                      "scores; sdpa = a fused kernel, as flash)")] = "flash",
        kv_per_query_head: Annotated[bool, typer.Option("--kv-per-query-head", help="decode attention reads K/V once per query head (no GQA sharing)")] = False,
        engine: Engine = None,
        ep: Ep = 1,
        attention_dp: AttentionDp = 1,
        redundant_experts: RedundantExperts = 0,
        draft: Draft = None,
        draft_tokens: DraftTokens = 4,
        acceptance: Acceptance = "0.7",
        mem_fraction_static: MemFractionStatic = None,
        swa_full_tokens_ratio: SwaFullTokensRatio = None,
        ops: Annotated[bool, typer.Option("--ops", help="one row per operation as well")] = False,
        eff: Annotated[list[str] | None, typer.Option("--eff", help="efficiency override KEY=VALUE (repeatable)")] = None,
        plot: Annotated[str | None, typer.Option("--plot", help="write the roofline chart to FILE (.png/.svg; needs matplotlib)")] = None,
        fmt: Format = "table",
        json_: Json = False,
        columns: Columns = None,
    ):
        """Per-operation roofline of prefill and decode: bound, ridge point, TTFT, TPOT, tokens/s (ideal and estimate).

        \b
        Example: aicalc roofline llama-3.1-8b --chip l4 --batch 1,16 --dtype bf16,int4
        """
        from aicalc.commands import roofline as cmd

        roofs = []  # each chip's roof, for --plot

        def one(c):
            r = cmd.run(model, c, batch=batch, prompt=prompt, gen=gen, dtype=dtype, kv_dtype=kv_dtype, tp=tp,
                        compute_dtype=compute_dtype, group_size=group_size, attention=attention, ops=ops, eff=eff,
                        kv_per_query_head=kv_per_query_head, engine=engine, draft=draft, draft_tokens=draft_tokens,
                        acceptance=acceptance, ep=ep, attention_dp=attention_dp, redundant_experts=redundant_experts,
                        mem_fraction_static=mem_fraction_static, swa_full_tokens_ratio=swa_full_tokens_ratio)
            if "peak_flop_per_s" in r.inputs:
                roofs.append((c, r.rows[0]["ridge_point"], r.inputs["peak_flop_per_s"],
                              r.inputs["memory_bandwidth_bytes_per_s"]))
            return r

        result = per_chip(chip or ["h100-sxm"], one)
        if plot:
            from aicalc.plot import write_plot

            if not roofs:
                raise AicalcError("--plot draws one roof per chip: give one --dtype and --kv-dtype (a format sweep has "
                                  "a roof per format)")
            write_plot(plot, result.rows, *roofs[0][1:], result.title or "", roofs=roofs if len(roofs) > 1 else None)
        return emit(result, fmt, json_, columns)
    return roofline


@command(app, "train-time", short_help="Training time, MFU, chip-hours and cost.")
def _train_time(Format, Json, Columns, Model, Chip, Price):
    def train_time(
        model: Model,
        chip: Chip = None,
        chips: Annotated[str | None, typer.Option("--chips", help="total chips (dp = chips / (tp·pp) unless --dp; "
                                                                  "sweepable)")] = None,
        tokens: Annotated[str, typer.Option("--tokens", help="training tokens, e.g. 300B, 1.4T")] = "1T",
        seq: Annotated[str, typer.Option("--seq", help="sequence length (sweepable)")] = "4096",
        global_batch: Annotated[str, typer.Option("--global-batch", help="sequences per optimizer step (sweepable)")] = "1024",
        micro_batch: Annotated[str | None, typer.Option("--micro-batch", help="sequences per micro-batch per device "
                                                                            "(sweepable; default 1)")] = None,
        tp: Annotated[str | None, typer.Option("--tp", help="tensor parallel (sweepable; default 1, or with --chips "
                                                             "and no layout option, --search's fastest layout where "
                                                             "TP 1 does not fit)")] = None,
        pp: Annotated[str | None, typer.Option("--pp", help="pipeline parallel (sweepable; default 1)")] = None,
        dp: Annotated[str | None, typer.Option("--dp", help="data parallel (sweepable)")] = None,
        mfu: Annotated[str, typer.Option("--mfu", help="model FLOPs utilisation (0.4, 40%) or auto")] = "auto",
        achieved: Annotated[str | None, typer.Option("--achieved", help="achieved FLOP/s per chip as counted with recompute, e.g. 144TFLOPS")] = None,
        recompute: Annotated[str | None, typer.Option("--recompute", help="none | selective | full | selective-op "
                                                      "(torchtitan's op-level SAC); default the framework's: "
                                                      "megatron selective, torchtitan selective-op, fsdp and "
                                                      "deepspeed none")] = None,
        attention: Annotated[str, typer.Option("--attention", help="eager | sdpa | flash | materialized (eager = materialized "
                                                                      "scores; sdpa = a fused kernel, as flash)")] = "flash",
        sequence_parallel: Annotated[bool, typer.Option("--sequence-parallel/--no-sequence-parallel", "--sp/--no-sp",
                                                        help="Megatron sequence parallelism")] = True,
        interleave: Annotated[int | None, typer.Option("--virtual-stages", "--interleave",
                                                       help="virtual pipeline stages per device (interleaved 1F1B; "
                                                            "default 1)")] = None,
        zero: Annotated[str | None, typer.Option("--zero", help="ZeRO stage 0-3 (sweepable: 0,3; default: the "
                                                                "framework's, megatron 1, fsdp 3, deepspeed 1)")] = None,
        precision: Annotated[str, typer.Option("--precision", help="bf16 | fp16 | fp8 | fp4 | int8 (math dtype of the "
                                                                   "linear layers; fp4: NVFP4, Blackwell; int8: AQT, "
                                                                   "weight gradients in bf16; train-mem's "
                                                                   "bf16-mixed, fp16-mixed, fp8-mixed name the same)")] = "bf16",
        dp_bandwidth: Annotated[str | None, typer.Option("--dp-bandwidth", help="inter-node bandwidth per chip per direction (default: the chip preset's scale-out figure, else 25GB/s)")] = None,
        eff: Annotated[list[str] | None, typer.Option("--eff", help="efficiency override KEY=VALUE (repeatable)")] = None,
        framework: Annotated[str | None, typer.Option("--framework", help="megatron | fsdp | deepspeed | torchtitan: "
                                                                          "overlap profile (presets/frameworks/; "
                                                                          "megatron, the default, is the 26.06+ "
                                                                          "release, megatron-26.04 the earlier)")] = None,
        cp: Annotated[int | None, typer.Option("--cp", help="context parallel: the sequence split over N ranks "
                                                            "(chips = tp·pp·cp·dp; default 1)")] = None,
        ep: Annotated[int | None, typer.Option("--ep", help="expert parallel (MoE): experts split over N ranks folded "
                                                            "over tp·cp·dp (with --etp; default 1)")] = None,
        etp: Annotated[int | None, typer.Option("--etp", help="expert tensor parallel (MoE parallel folding; default: "
                                                              "1 with --ep > 1, as MoE recipes run, else --tp); ep·etp "
                                                              "divides tp·cp·dp")] = None,
        first_stage_layers: Annotated[int | None, typer.Option("--first-stage-layers", help="decoder layers on the first "
                                                               "pipeline stage (default: Megatron's / torchtitan's split)")] = None,
        last_stage_layers: Annotated[int | None, typer.Option("--last-stage-layers", help="decoder layers on the last "
                                                              "pipeline stage")] = None,
        goodput: Annotated[str, typer.Option("--goodput", metavar="FRACTION", help="share of wall-clock time spent on "
                                             "useful steps (restarts, evaluation); stretches time and chip-hours")] = "1",
        attention_flops: Annotated[str, typer.Option("--attention-flops", help="how model FLOPs (MFU, --mfu, "
                                                     "--achieved) count attention: causal (Megatron-Bridge's and "
                                                     "MaxText's current count) or full (Megatron-LM's paper formula, "
                                                     "PaLM)")] = "causal",
        fp8_attention: Annotated[bool, typer.Option("--fp8-attention", help="the fused attention core in FP8 too "
                                                    "(Transformer Engine's fp8_dot_product_attention; --precision "
                                                    "fp8 or fp4), still bounded by the softmax's exponentials")] = False,
        search: Annotated[bool, typer.Option("--search", help="rank the layouts of --chips that fit by time")] = False,
        top: Annotated[int, typer.Option("--top", help="layouts shown by --search")] = 10,
        price: Price = None,
        fmt: Format = "table",
        json_: Json = False,
        columns: Columns = None,
    ):
        """Training time: FLOPs per token, MFU (given or auto), tokens/s, total time and chip-hours.

        \b
        Example: aicalc train-time llama-3.1-8b --chip h100-sxm --chips 64 --tokens 1T
        """
        from aicalc.commands import train_time as cmd

        return emit(per_chip(chip or ["h100-sxm"], lambda c: per_value("chips", chips, lambda n: per_value(
            "zero", zero, lambda z: cmd.run(
                model, c, tokens=tokens, seq=seq, global_batch=global_batch, micro_batch=micro_batch, tp=tp, pp=pp,
                dp=dp, chips=n, mfu=mfu, achieved=achieved, recompute=recompute, attention=attention,
                sequence_parallel=sequence_parallel, interleave=interleave, zero=z, precision=precision,
                dp_bandwidth=dp_bandwidth, eff=eff, framework=framework, search=search, top=top, cp=cp, ep=ep,
                goodput=goodput, price=price, etp=etp, first_stage_layers=first_stage_layers,
                last_stage_layers=last_stage_layers, attention_flops=attention_flops,
                fp8_attention=fp8_attention)))), fmt, json_,
                    columns)
    return train_time


@command(app, "train-mem", short_help="Training memory per device; layouts that fit.")
def _train_mem(Format, Json, Columns, Model):
    def train_mem(
        model: Model,
        batch: Annotated[str, typer.Option("--micro-batch", "--batch", help="sequences per micro-batch per device; "
                                                                            "list 1,2,4 or range 1:8:x2")] = "1",
        seq: Annotated[str, typer.Option("--seq", help="sequence length in tokens (2048, 4Ki, 1Ki:8Ki:x2)")] = "2048",
        precision: Annotated[str, typer.Option("--precision", help="fp32 | bf16 | bf16-mixed | fp16-mixed | fp8-mixed "
                                               "(TransformerEngine FP8 GEMMs with --framework megatron)")] = "bf16-mixed",
        optimizer: Annotated[str, typer.Option("--optimizer", help="adamw | adam | adam8bit | sgd | sgd-momentum | adafactor | lion")] = "adamw",
        grad_dtype: Annotated[str | None, typer.Option("--grad-dtype", help="gradient dtype (fp32 for Megatron/DeepSpeed's 18 B/param)")] = None,
        optimizer_dtype: Annotated[str | None, typer.Option("--optimizer-dtype", help="optimizer state dtype (pure bf16: bf16 or fp32)")] = None,
        zero: Annotated[str, typer.Option("--zero", help="ZeRO stage 0-3 (FSDP full shard = 3); list allowed")] = "0",
        dp: Annotated[str | None, typer.Option("--dp", help="data-parallel size (default: a node's chips over tp·pp·cp, "
                                                             "else 1)")] = None,
        tp: Annotated[str, typer.Option("--tp", help="tensor-parallel size")] = "1",
        pp: Annotated[str, typer.Option("--pp", help="pipeline-parallel size")] = "1",
        cp: Annotated[str, typer.Option("--cp", help="context-parallel size (ring attention: sequence split over N ranks)")] = "1",
        ep: Annotated[str, typer.Option("--ep", help="expert-parallel size (MoE), folded over tp·cp·dp; with --search "
                                                     "a list (1,8,64) searches each")] = "1",
        etp: Annotated[int | None, typer.Option("--etp", help="expert tensor-parallel size (MoE parallel folding; "
                                                              "default: 1 with --ep > 1, else --tp)")] = None,
        first_stage_layers: Annotated[int | None, typer.Option("--first-stage-layers", help="decoder layers on the first "
                                                               "pipeline stage (default: Megatron's / torchtitan's split)")] = None,
        last_stage_layers: Annotated[int | None, typer.Option("--last-stage-layers", help="decoder layers on the last "
                                                              "pipeline stage")] = None,
        sp: Annotated[bool, typer.Option("--sequence-parallel/--no-sequence-parallel", "--sp/--no-sp",
                                         help="Megatron sequence parallelism (with --tp)")] = False,
        virtual_stages: Annotated[int, typer.Option("--virtual-stages", "--interleave",
                                                    help="virtual pipeline stages per device (interleaved 1F1B)")] = 1,
        microbatches: Annotated[int | None, typer.Option("--microbatches", help="micro-batches per step (pipeline in flight)")] = None,
        recompute: Annotated[str, typer.Option("--recompute", help="none | full | selective (megatron: the attention "
                                               "core) | selective-op (hf: torchtitan op-level SAC) | every-N (hf: "
                                               "checkpoint every N-th layer)")] = "none",
        framework: Annotated[str, typer.Option("--framework", help="hf | megatron | litgpt (activation model; litgpt: LitGPT's finetune scripts)")] = "hf",
        attention: Annotated[str, typer.Option("--attention", help="eager | sdpa | flash (materialized = eager)")] = "sdpa",
        lora_rank: Annotated[int | None, typer.Option("--lora-rank", help="LoRA rank (fine-tune adapters only)")] = None,
        lora_targets: Annotated[str, typer.Option("--lora-targets", help="q,k,v,o,gate,up,down or all")] = "q,v",
        lora_dtype: Annotated[str, typer.Option("--lora-dtype", help="adapter dtype: fp32 (PEFT) | bf16 | fp16 (torchtune: the model's)")] = "fp32",
        loss: Annotated[str, typer.Option("--loss", help="full (fp32 log-softmax, transformers) | chunked (torchtune's compiled chunked CE) | fp32-kept (torchtune's 2024 recipes: full, with the fp32 logits kept through the backward)")] = "full",
        optimizer_in_backward: Annotated[bool, typer.Option("--optimizer-in-backward", help="step each parameter in backward and free its gradient (torchtune optimizer_in_bwd)")] = False,
        adamw: Annotated[str, typer.Option("--adamw", help="torch AdamW kernel: foreach (default; a temporary state-sized buffer in the step) | fused | loop (foreach=False: one parameter at a time)")] = "foreach",
        keep_grads: Annotated[bool, typer.Option("--keep-grads", help="gradients stay allocated between steps (zero_grad(set_to_none=False): PyTorch < 2.0's default, HF Trainer until 2023)")] = False,
        trace: Annotated[bool, typer.Option("--trace", help="also trace the step with PyTorch's memory tracker on fake tensors (needs the trace extra)")] = False,
        quant: Annotated[str, typer.Option("--quant", help="base weights with LoRA: none | nf4 | nf4-dq | int8")] = "none",
        lora_dropout: Annotated[float, typer.Option("--lora-dropout", help="LoRA dropout on the adapters' input (modelled with --framework litgpt)")] = 0.0,
        bnb_keeps_inputs: Annotated[bool, typer.Option("--bnb-keeps-inputs", help="bitsandbytes < 0.43.2: MatMul4Bit keeps its input until the graph is freed")] = False,
        bnb_fused_matmul: Annotated[bool, typer.Option("--bnb-fused-matmul", help="bitsandbytes >= 0.50 (one fused gemm_4bit op in MatMul4Bit's forward): with --compile and --quant nf4/nf4-dq no dequantized weight is saved (default: torchao's linear_nf4 as torchtune runs it, or bitsandbytes 0.46-0.49, which save a 16-bit copy of each frozen weight)")] = False,
        compile_: Annotated[bool, typer.Option("--compile", help="each decoder layer torch.compile'd (torchtitan, torchtune): inductor recomputes the norms' and SwiGLU's pointwise ops instead of saving them (full training, LoRA, QLoRA with nf4/nf4-dq)")] = False,
        offload: Annotated[str, typer.Option("--offload", help="none | optimizer | params (to host memory)")] = "none",
        fsdp_version: Annotated[int, typer.Option("--fsdp-version", help="the PyTorch FSDP behind --zero 3: 2 (fully_shard: torchtitan, torchtune) or 1 (FullyShardedDataParallel: HF Trainer / accelerate's default)")] = 2,
        fsdp_units: Annotated[str, typer.Option("--fsdp-units", help="FSDP2's units besides the decoder layers: root (the embedding, final norm and output layer in the root: accelerate, torchtune's default) | split (the embedding and output layer their own: torchtune's custom_sharded_layers) | torchtitan (apply_fsdp: [norm, output] not resharded after the forward)")] = "root",
        dropout: Annotated[float | None, typer.Option("--dropout", help="hidden dropout (default: the family's)")] = None,
        chip: Annotated[list[str] | None, typer.Option("--chip", help="chip id: fits per device (repeatable)",
                                                       autocompletion=_complete(("chip", "node")))] = None,
        budget: Annotated[str | None, typer.Option("--budget", help="fail (exit 1) when a row needs more per device")] = None,
        overhead: Annotated[str | None, typer.Option("--overhead", help="CUDA context + allocator overhead (default 1GiB)")] = None,
        search: Annotated[bool, typer.Option("--search", help="search TP×PP×DP×ZeRO×micro-batch×recompute that fit")] = False,
        chips: Annotated[int | None, typer.Option("--chips", help="devices: dp = chips / (tp·pp·cp) unless --dp; the "
                                                                 "devices to lay out with --search")] = None,
        top: Annotated[int, typer.Option("--top", help="layouts shown by --search")] = 10,
        fmt: Format = "table",
        json_: Json = False,
        columns: Columns = None,
    ):
        """Training and fine-tuning memory per device: states, activations, peak; --search for layouts.

        \b
        Example: aicalc train-mem llama-3.1-70b --chip h100-sxm --dp 8 --zero 3 --recompute full --lora-rank 16
        """
        from aicalc.commands.train_mem import run

        with progress_bar("searching layouts") as progress:
            def one(c):
                return run(model, batch=batch, seq=seq, zero=zero, dp=dp, tp=tp, pp=pp, cp=cp, chip=c, budget=budget,
                           overhead=overhead, search=search, chips=chips, top=top, progress=progress, trace=trace,
                           precision=precision, optimizer=optimizer, grad_dtype=grad_dtype,
                           optimizer_dtype=optimizer_dtype, ep=ep, etp=etp, first_stage_layers=first_stage_layers,
                           last_stage_layers=last_stage_layers, sp=sp, virtual_stages=virtual_stages,
                           microbatches=microbatches, recompute=recompute, framework=framework, attention=attention,
                           lora_rank=lora_rank, lora_targets=lora_targets, lora_dtype=lora_dtype, loss=loss,
                           optimizer_in_backward=optimizer_in_backward, quant=quant, offload=offload, dropout=dropout,
                           adamw=adamw, lora_dropout=lora_dropout, bnb_keeps_inputs=bnb_keeps_inputs,
                           bnb_fused_matmul=bnb_fused_matmul, compile=compile_, fsdp_version=fsdp_version,
                           fsdp_units=fsdp_units, grads_kept=keep_grads)

            result = per_chip(chip, one) if chip else one(None)
        return emit(result, fmt, json_, columns)
    return train_mem


@command(app, "serve", short_help="A deployment under load: latency, throughput, cost.")
def _serve(Format, Json, Columns, Model, Chip, Price, Ep, AttentionDp, RedundantExperts, WeightDtype, KvDtype, Engine, Draft, DraftTokens, Acceptance,
           MemFractionStatic, SwaFullTokensRatio, GpuMemoryUtilization):
    def serve(
        model: Model,
        chip: Chip = None,
        chips: Annotated[str | None, typer.Option("--chips", help="chips in the deployment (default: --tp); replicas = "
                                                                  "chips / tp (sweepable)")] = None,
        tp: Annotated[str | None, typer.Option("--tp", help="tensor-parallel degree of one replica (sweepable; default: "
                                                             "a node's chips; with --chips of a chip, the smallest "
                                                             "whose replicas hold the load; else one replica, the "
                                                             "smallest of up to 8 chips that holds one request)")] = None,
        pp: Annotated[int, typer.Option("--pp", help="pipeline stages per replica of tp × pp chips (vLLM "
                                                     "--pipeline-parallel-size, SGLang --pp-size), pp micro-batches "
                                                     "in flight; with or without traffic")] = 1,
        prompt: Annotated[str, typer.Option("--prompt", help="prompt tokens per request (sweepable)")] = "1024",
        gen: Annotated[str, typer.Option("--gen", help="output tokens per request (sweepable)")] = "256",
        concurrency: Annotated[str | None, typer.Option("--concurrency", help="concurrent requests in the deployment "
                                                       "(sweepable; default 1, 2, 4, … up to what fits)")] = None,
        max_ttft: Annotated[str | None, typer.Option("--max-ttft", help="latency target for time to first token, e.g. 500ms")] = None,
        max_tpot: Annotated[str | None, typer.Option("--max-tpot", help="latency target per output token, e.g. 50ms")] = None,
        dtype: WeightDtype = "release",
        kv_dtype: KvDtype = "bf16",
        price: Price = None,
        engine: Engine = None,
        ep: Ep = 1,
        attention_dp: AttentionDp = 1,
        redundant_experts: RedundantExperts = 0,
        draft: Draft = None,
        draft_tokens: DraftTokens = 4,
        acceptance: Acceptance = "0.7",
        prefix_hit: Annotated[str, typer.Option("--prefix-hit", help="share of each prompt found in the prefix cache "
                                                                     "(0.5, 50%)")] = "0",
        mem_fraction_static: MemFractionStatic = None,
        gpu_memory_utilization: GpuMemoryUtilization = None,
        swa_full_tokens_ratio: SwaFullTokensRatio = None,
        rate: Annotated[str | None, typer.Option("--rate", help="traffic: requests/s arriving (Poisson; sweepable); "
                                                                "simulates the scheduler of each replica (of tp × "
                                                                "pp chips)")] = None,
        requests: Annotated[str | None, typer.Option("--requests", metavar="FILE", help="traffic: a CSV/JSONL trace of "
                                                     "prompt, gen and optional arrival_s")] = None,
        num_requests: Annotated[str, typer.Option("--num-requests", help="requests simulated at each --rate")] = "1000",
        seed: Annotated[int, typer.Option("--seed", help="random seed of the arrival process")] = 0,
        search: Annotated[bool, typer.Option("--search", help="rank deployments of --chips chips over every --chip "
                                                              "(comma list), TP, --dtype/--kv-dtype lists, aggregated "
                                                              "and disaggregated, by cost within the targets; with "
                                                              "traffic and no --chips: the fewest chips that serve it")] = False,
        requests_per_day: Annotated[str | None, typer.Option("--requests-per-day", help="with --search: traffic as "
                                                             "requests a day (10M), sized at its average rate × "
                                                             "--peak-factor")] = None,
        peak_factor: Annotated[str, typer.Option("--peak-factor", help="peak-hour rate over the day's average, for "
                                                                       "--requests-per-day")] = "1",
        policy: Annotated[str | None, typer.Option("--policy", help="scheduler of the traffic simulation: chunked or "
                                                                    "prefill-first (default: the engine's)")] = None,
        plot: Annotated[str | None, typer.Option("--plot", help="with --search: write the Pareto chart to FILE "
                                                                "(.png/.svg; needs matplotlib)")] = None,
        emit_engine: Annotated[str | None, typer.Option("--emit", metavar="ENGINE", help="print the launch command of "
                                                        "the deployment (with --search: the best) for vllm, sglang or "
                                                        "trtllm")] = None,
        fmt: Format = "table",
        json_: Json = False,
        columns: Columns = None,
    ):
        """A serving deployment under continuous batching: TTFT, TPOT, tokens/s, fit, latency targets, cost.

        \b
        Example: aicalc serve llama-3.1-70b --chip h100-sxm --chips 8 --tp 4 --max-tpot 50ms
        """
        from aicalc.commands.serve import run

        def one(c, t=tp, n=chips):
            return run(model, c, chips=n, tp=t, prompt=prompt, gen=gen, concurrency=concurrency, max_ttft=max_ttft,
                       max_tpot=max_tpot, dtype=dtype, kv_dtype=kv_dtype, price=price, engine=engine, draft=draft,
                       draft_tokens=draft_tokens, acceptance=acceptance, prefix_hit=prefix_hit, rate=rate,
                       requests=requests, num_requests=num_requests, seed=seed, search=search, plot=plot,
                       requests_per_day=requests_per_day, peak_factor=peak_factor, policy=policy, ep=ep,
                       attention_dp=attention_dp, redundant_experts=redundant_experts, pp=pp,
                       mem_fraction_static=mem_fraction_static, swa_full_tokens_ratio=swa_full_tokens_ratio,
                        gpu_memory_utilization=gpu_memory_utilization)

        chip = chip or ["h100-sxm"]
        if emit_engine is not None:
            from aicalc.commands.serve import launch_emit

            return launch_emit(one, chip, tp, chips, dtype, kv_dtype, search, emit_engine, draft, draft_tokens,
                               lambda r: emit(r, fmt, json_, columns),
                               _env_now().stdout.write if fmt == "table" and not json_ else None)
        if search:  # the search ranks every chip, TP degree and format in one table itself
            return emit(one(",".join(chip)), fmt, json_, columns)
        return emit(per_chip(chip, lambda c: per_value("tp", tp, lambda t: per_value("chips", chips, lambda n: one(
            c, t, n)))), fmt, json_, columns)
    return serve


@command(app, "compare", short_help="Training vs inference, chip by chip.")
def _compare(Format, Json, Columns, Model, Chip, Price, WeightDtype, KvDtype, Engine):
    def compare(
        model: Model,
        chip: Chip = None,
        tokens: Annotated[str | None, typer.Option("--tokens", help="training tokens (default: 20 per parameter)")] = None,
        seq: Annotated[str, typer.Option("--seq", help="training sequence length")] = "4096",
        prompt: Annotated[str, typer.Option("--prompt", help="prompt tokens per inference request")] = "1024",
        gen: Annotated[str, typer.Option("--gen", help="output tokens per inference request")] = "256",
        dtype: WeightDtype = "release",
        kv_dtype: KvDtype = "bf16",
        requests_per_day: Annotated[str, typer.Option("--requests-per-day", help="for the annual inference cost")] = "1M",
        years: Annotated[float, typer.Option("--years", help="inference lifetime for the cost split")] = 1.0,
        max_ttft: Annotated[str, typer.Option("--max-ttft", help="inference latency target (MLPerf llama2-70b: 2s)")] = "2s",
        max_tpot: Annotated[str, typer.Option("--max-tpot", help="inference latency target (MLPerf llama2-70b: 200ms)")] = "200ms",
        price: Price = None,
        peak_factor: Annotated[str, typer.Option("--peak-factor", help="peak-hour rate over the day's average: the "
                                                                       "fleet is sized for it")] = "1",
        engine: Engine = None,
        training: Annotated[bool | None, typer.Option("--training/--no-training", help="estimate training too (default: "
                                                      "yes, except on on-device chips: apple-neural-engine, "
                                                      "qualcomm-hexagon)")] = None,
        fmt: Format = "table",
        json_: Json = False,
        columns: Columns = None,
    ):
        """Training vs inference side by side, chip by chip: memory, chips needed, speed, cost, energy.

        \b
        Example: aicalc compare llama-3.1-8b --chip h100-sxm --chip a100-80gb
        """
        from aicalc.commands.compare import run

        return emit(run(model, chip, tokens=tokens, seq=seq, prompt=prompt, gen=gen, dtype=dtype, kv_dtype=kv_dtype,
                        requests_per_day=requests_per_day, years=years, max_ttft=max_ttft, max_tpot=max_tpot,
                        price=price, peak_factor=peak_factor, engine=engine, training=training), fmt, json_, columns)
    return compare


def _one_line(message: str) -> str:
    """A message on one line, control characters (a name's escape sequences) shown as ``?``."""
    from aicalc.render import _printable

    return _printable(" ".join(str(message).split()))


def main(argv: list[str] | None = None, env: Env | None = None) -> int:
    """Entry point; returns the exit code (and exits with it when run as the console script)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    if debug:  # accepted anywhere on the line, not only before the command
        args = [a for a in args if a != "--debug"]
    env = env or Env.from_system()
    token = _ENV.set(env)
    try:
        code = _main(args, debug, env)
    finally:
        _ENV.reset(token)
    if argv is None:
        _leave(code)
    return code


def _leave(code: int) -> None:
    """Exit the console script with ``code``: flush the output, run the atexit handlers, and leave without the
    interpreter's teardown (freeing every module and stopping numpy's BLAS threads costs 10-20 ms of a ~110 ms
    one-off query, docs/robustness.md; nothing aicalc holds needs it). A library caller never comes here."""
    import atexit
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BrokenPipeError:  # `aicalc … | head`: the reader has what it wanted
            pass
        except (OSError, ValueError) as e:  # the output did not arrive (/dev/full, a closed stream)
            if stream is sys.stdout and code in (0, 1):
                _say(f"aicalc: error: cannot write the output: {getattr(e, 'strerror', None) or e}\n")
                code = int(ExitCode.BAD_INPUT)
    atexit._run_exitfuncs()
    os._exit(code)


def _say(line: str) -> None:
    """A line on stderr, when there is one to write to."""
    try:
        if sys.stderr is not None:
            sys.stderr.write(line)
            sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _no_repeats(command, args: list[str]) -> None:
    """A single-valued option given twice (``--tp 2 … --tp 4``, or ``--batch 2 --micro-batch 4``) is bad
    input: click would keep the last one silently. Repeatable options (``--chip``, ``--eff``) may repeat."""
    sub, rest = command, list(args)
    while hasattr(sub, "commands") and rest:  # walk down to the command being run (typer vendors click)
        i = next((k for k, a in enumerate(rest) if not a.startswith("-")), None)
        if i is None or rest[i] not in sub.commands:
            return
        sub, rest = sub.commands[rest[i]], rest[i + 1:]
    by_flag = {o: p for p in sub.params if hasattr(p, "is_flag") for o in (*p.opts, *p.secondary_opts)}
    seen: dict[str, str] = {}
    k = 0
    while k < len(rest):
        token = rest[k]
        if token == "--":
            return
        flag = token.split("=", 1)[0]
        p = by_flag.get(flag) if token.startswith("-") else None
        if p is not None:
            if not p.multiple and not p.count:
                if p.name in seen and not (p.is_flag and seen[p.name] == flag):
                    also = "" if seen[p.name] == flag else f" (also as {seen[p.name]})"
                    raise AicalcError(f"{flag} given twice{also}: give it once")
                seen[p.name] = flag
            if not p.is_flag and "=" not in token:
                k += 1  # its value
        k += 1


# Options whose value is a latency target or a memory budget: on the command line the value takes its unit
# (CONTRACT.md), and a bare number is refused with the likely unit, never read silently as seconds or bytes.
UNIT_OPTIONS = {"--max-ttft": ("latency target", ("ms", "s")), "--max-tpot": ("latency target", ("ms", "s")),
                "--budget": ("memory budget", ("GB", "GiB")), "--overhead": ("memory", ("GiB", "MiB"))}


def _bare_number(value: str) -> bool:
    r"""Whether ``value`` is a number with no unit: ``re.fullmatch(r"\s*[0-9]*\.?[0-9]+(e[+-]?[0-9]+)?\s*", value,
    flags=re.I)``, read without compiling the pattern."""
    mantissa, e, exponent = value.strip().lower().partition("e")
    digits = exponent[1:] if exponent[:1] in ("+", "-") else exponent
    return (mantissa[-1:] in _DIGITS and mantissa.count(".") <= 1 and set(mantissa) <= _DIGITS_DOT
            and (not e or (digits != "" and set(digits) <= _DIGITS)))


_DIGITS, _DIGITS_DOT = frozenset("0123456789"), frozenset("0123456789.")


def _needs_units(args: list[str]) -> None:
    """``--max-tpot 50`` → bad input, 'did you mean 50ms?' (a bare number would be 50 seconds)."""
    k = 0
    while k < len(args):
        token = args[k]
        if token == "--":
            return
        flag, eq, value = token.partition("=")
        if flag in UNIT_OPTIONS:
            if not eq:
                k += 1
                value = args[k] if k < len(args) else ""
            if _bare_number(value):
                what, units = UNIT_OPTIONS[flag]
                v = value.strip()
                guess = (f"{v}{units[0]}" if float(v) >= 1 else f"{v}{units[1]}") if what == "latency target" \
                    else f"{v}{units[0]}"
                raise AicalcError(f"{flag} {v} needs a unit: did you mean {guess}? (a {what}: "
                                  f"{', '.join(f'{v}{u}' for u in units)}; a bare number is not read as seconds or "
                                  "bytes)")
        k += 1


def _build(group: typer.Typer):
    """``typer.main.get_command(group)``, each function's parameters read once: typer reads them twice per
    command (its click parameters, then only their names for the callback, ``get_callback``), a quarter of
    building a command of 50 options (~5 M instructions)."""
    from typer import main as typer_main

    read = getattr(typer_main, "get_params_from_function", None)
    if read is None:  # another typer
        return typer_main.get_command(group)
    seen: dict = {}

    def once(func):
        if func not in seen:
            seen[func] = _declared_params(func) or read(func)
        return seen[func]

    typer_main.get_params_from_function = once
    try:
        return typer_main.get_command(group)
    finally:
        typer_main.get_params_from_function = read


def _declared_params(func) -> dict | None:
    """What typer 0.28's ``get_params_from_function`` makes of a function whose every parameter is declared
    ``name: Annotated[T, typer.Option(…) or typer.Argument(…)] = default`` (every command of this module): per
    parameter a ``ParamMeta`` of T and a copy of the declaration holding the default, read from the function's
    own annotations and defaults instead of through ``inspect.signature`` and ``typing.get_type_hints`` (which
    rebuild every annotation); None for any other function or typer, which typer reads itself."""
    import typing

    import typer.models as tm

    if not typer.__version__.startswith("0.28."):
        return None
    code = func.__code__
    if code.co_kwonlyargcount or code.co_posonlyargcount or code.co_flags & 0x0C:  # *args, **kwargs
        return None
    names = code.co_varnames[:code.co_argcount]
    defaults = func.__defaults__ or ()
    first = len(names) - len(defaults)
    notes = getattr(func, "__annotations__", {})
    params = {}
    for i, name in enumerate(names):
        a = notes.get(name)
        if typing.get_origin(a) is not typing.Annotated or isinstance(a, str):
            return None
        base, *extras = typing.get_args(a)
        infos = [x for x in extras if isinstance(x, tm.ParameterInfo)]
        default = defaults[i - first] if i >= first else ...  # ...: none given (a required argument)
        if len(infos) != 1 or isinstance(default, tm.ParameterInfo) or infos[0].default_factory:
            return None
        info = infos[0]
        copied = info.__class__.__new__(info.__class__)
        copied.__dict__.update(info.__dict__)
        if isinstance(copied, tm.OptionInfo) and copied.default is not ...:
            copied.param_decls = (copied.default, *(copied.param_decls or ()))
            copied.default = ...
        if copied.default is not ...:
            return None  # typer's error to raise
        if i >= first:
            copied.default = default
        params[name] = tm.ParamMeta(name=name, default=copied, annotation=base)
    return params


def _main(args: list[str], debug: bool, env: Env) -> int:
    import copy
    import os

    from aicalc.api.inputs import bound_options

    # Start-up: click objects are built (every annotation evaluated) only for the command being run; --help,
    # an unknown command and shell completion get the whole tree.
    name, i = None, 0
    while i < len(args) and name is None:
        name = None if args[i].startswith("-") else args[i]
        i += 2 if args[i] == "--presets-dir" else 1
    lean = app
    if name and "_AICALC_COMPLETE" not in os.environ:
        commands = [c for c in app.registered_commands if c.name == name]
        groups = [g for g in app.registered_groups if g.name == name]
        if commands or groups:
            lean = copy.copy(app)
            lean.registered_commands, lean.registered_groups = commands, groups
    command = _build(lean)
    bound_options(command)  # integer and float options held to the documented caps as they are parsed
    if "--help" in args or "-h" in args:
        from aicalc import help_panels

        help_panels.apply(command)
    try:
        _no_repeats(command, args)
        _needs_units(args)
        code = command.main(args=args, prog_name="aicalc", standalone_mode=False)
        code = int(code or 0) if isinstance(code, int) else 0
    except ParameterError as e:  # the library names its parameter; the command line names the flag
        from aicalc.flags import cli_message

        _write(env.stderr, f"aicalc: error: {_one_line(cli_message(e))[:2000]}\n")
        code = int(e.exit_code)
    except AicalcError as e:
        for line in getattr(e, "problems", None) or [str(e)]:
            _write(env.stderr, f"aicalc: error: {_one_line(line)[:2000]}\n")
        code = int(e.exit_code)
    except (KeyboardInterrupt, BrokenPipeError):
        code = 130 if not isinstance(sys.exc_info()[1], BrokenPipeError) else 0
    except SystemExit as e:  # click answers a closed pipe (EPIPE) with sys.exit(1): the reader left, no failure
        if not isinstance(e.__context__, BrokenPipeError):
            raise
        code = 0
    except Exception as e:  # noqa: BLE001 - click's usage errors, then genuine bugs
        code = _click_error(e, env)
        if code is None and isinstance(e, OSError) and e.errno in _OUTPUT_ERRNOS:  # --help into /dev/full
            _write(env.stderr, f"aicalc: error: cannot write the output: {e.strerror}\n")
            code = int(ExitCode.BAD_INPUT)
        if code is None:
            if debug:
                import traceback

                _write(env.stderr, traceback.format_exc())
            _write(env.stderr, f"aicalc: internal error: {type(e).__name__}: {_one_line(e)}; this is a bug, "
                              f"please report it with the command line at {ISSUES_URL} (rerun with --debug "
                              "for a traceback)\n")
            code = int(ExitCode.INTERNAL)
    return code


_OUTPUT_ERRNOS = (28, 27, 122, 5)  # ENOSPC, EFBIG, EDQUOT, EIO: the output stream's device, not aicalc


def _write(stream, text: str) -> None:
    """Write an error line; a stream that cannot take it (``2>/dev/full``, closed) loses it, the exit code
    still says what happened."""
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):
        pass


def _click_error(e: Exception, env: Env) -> int | None:
    """Usage errors from click (vendored by typer): one line, exit 2. None when it is not one."""
    name = type(e).__name__
    if name == "Exit":
        return int(getattr(e, "exit_code", 0))
    if name == "Abort":
        return 130
    if name == "NoArgsIsHelpError":  # `aicalc` or `aicalc presets` alone: show the help, as --help would
        _write(env.stdout, e.format_message() + "\n")
        return int(ExitCode.OK)
    if name == "NoSuchOption" and getattr(e, "ctx", None) is not None:
        known = {o for p in e.ctx.command.params for o in getattr(p, "opts", ())}
        same = [o for o in SYNONYMS.get(e.option_name, ()) if o in known]
        if same:  # another command's name for what this one calls differently
            _write(env.stderr, f"aicalc: error: no option {e.option_name} in {e.ctx.command.name}: it is "
                             f"{' or '.join(same)} here (see --help)\n")
            return int(ExitCode.BAD_INPUT)
    if hasattr(e, "format_message") and hasattr(e, "exit_code"):
        _write(env.stderr, f"aicalc: error: {_one_line(e.format_message())} (see --help)\n")
        return int(ExitCode.BAD_INPUT)
    return None


# What one command calls an option that another command names differently (docs/interface.md's table): an unknown
# option gets this command's name for the same concept instead of click's spelling guess.
SYNONYMS = {
    "--seq": ("--context", "--prompt"), "--context": ("--seq", "--prompt"), "--prompt": ("--seq", "--context"),
    "--sequence-length": ("--seq", "--context", "--prompt"),
    "--batch": ("--concurrency", "--micro-batch"), "--concurrency": ("--batch",),
    "--micro-batch": ("--batch",), "--batch-size": ("--batch", "--micro-batch", "--concurrency"),
    "--dtype": ("--precision",), "--precision": ("--dtype",), "--quant": ("--dtype",),
    "--chips": ("--tp", "--dp"), "--gpus": ("--chips", "--tp"), "--gpu": ("--chip",), "--device": ("--chip",),
    "--schedule": ("--virtual-stages",), "--interleave": ("--virtual-stages",),
    "--tensor-parallel": ("--tp",), "--pipeline-parallel": ("--pp",), "--data-parallel": ("--dp",),
}
