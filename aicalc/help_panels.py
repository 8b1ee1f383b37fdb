"""How ``--help`` groups and labels options: one table for every command, so an option has the same panel and
the same unit in its metavar wherever it appears."""

from __future__ import annotations

_PANELS = {
    "Model and hardware": "chip chips engine framework",
    "Workload": "batch context prompt gen seq global_batch micro_batch tokens concurrency rate requests "
                "num_requests seed requests_per_day peak_factor years prefix_hit draft draft_tokens acceptance solve block_size",
    "Parallelism": "tp pp dp cp ep attention_dp redundant_experts zero fsdp_version fsdp_units sp sequence_parallel virtual_stages interleave microbatches search top",
    "Precision and memory": "dtype kv_dtype compute_dtype group_size precision optimizer grad_dtype optimizer_dtype "
                            "lora_rank lora_targets lora_dtype lora_dropout loss optimizer_in_backward quant bnb_keeps_inputs "
                            "bnb_fused_matmul offload dropout "
                            "recompute compile_ attention fp8_attention overhead utilization kv_per_query_head "
                            "mem_fraction_static swa_full_tokens_ratio gpu_memory_utilization",
    "Performance model": "eff mfu achieved attention_flops dp_bandwidth ops policy",
    "Limits and cost": "budget max_ttft max_tpot price fail_on_warn",
    "Output": "fmt json_ columns plot emit_engine junit schema help",
}
PANEL = {name: panel for panel, names in _PANELS.items() for name in names.split()}

# The unit a value is read in (sizes and counts take suffixes: 8k, 80GB, 2ms; see docs/interface.md).
METAVAR = {
    "batch": "SEQS", "global_batch": "SEQS", "micro_batch": "SEQS", "concurrency": "REQS", "microbatches": "N",
    "context": "TOKENS", "prompt": "TOKENS", "gen": "TOKENS", "seq": "TOKENS", "tokens": "TOKENS",
    "block_size": "TOKENS", "draft_tokens": "TOKENS",
    "tp": "N", "pp": "N", "dp": "N", "cp": "N", "ep": "N", "attention_dp": "N", "redundant_experts": "N", "chips": "N", "top": "N", "seed": "N",
    "num_requests": "N", "virtual_stages": "N", "interleave": "N", "zero": "0-3", "fsdp_version": "1|2", "fsdp_units": "NAME", "lora_rank": "RANK",
    "group_size": "WEIGHTS",
    "budget": "BYTES", "overhead": "BYTES", "dp_bandwidth": "BYTES/s", "achieved": "FLOP/s",
    "max_ttft": "SECONDS", "max_tpot": "SECONDS", "rate": "REQ/s", "requests_per_day": "REQ/day", "years": "YEARS",
    "utilization": "FRACTION", "mem_fraction_static": "FRACTION", "gpu_memory_utilization": "FRACTION", "swa_full_tokens_ratio": "RATIO",
    "prefix_hit": "FRACTION", "acceptance": "FRACTION", "mfu": "FRACTION|auto",
    "dropout": "FRACTION", "price": "USD/h", "peak_factor": "FACTOR",
    "chip": "ID", "engine": "ID", "draft": "ID", "dtype": "DTYPE", "kv_dtype": "DTYPE", "compute_dtype": "DTYPE",
    "eff": "KEY=VALUE", "plot": "FILE", "fmt": "FORMAT",
}


def apply(command) -> None:
    """Give every option of a built click command tree its unit metavar, and group the options of each
    command under the panels above in its plain (click) help."""
    import types

    for sub in getattr(command, "commands", {}).values():
        apply(sub)
    for p in getattr(command, "params", []):
        if hasattr(p, "is_flag") and not p.is_flag and p.metavar is None:
            p.metavar = METAVAR.get(p.name, "NAME")  # a choice or a name (the help lists the values)
        if "{ENGINES}" in (getattr(p, "help", None) or ""):
            p.help = p.help.replace("{ENGINES}", ", ".join(engine_ids()))
    if not hasattr(command, "commands"):
        command.format_options = types.MethodType(_format_options, command)


def engine_ids() -> list[str]:
    """Every built-in engine profile, for --engine's help: a listing of presets/engines/ (no file is read, so help
    stays fast; a family's name, such as cerebras, is explained in the help text)."""
    from aicalc.catalog.store import builtin_root

    return sorted(f.name[:-5] for f in (builtin_root() / "engines").iterdir() if f.name.endswith(".yaml"))


def _format_options(self, ctx, formatter) -> None:
    """Arguments, then one section per panel in the order of the table, then anything unlisted."""
    args, sections = [], {}
    for p in self.get_params(ctx):
        record = p.get_help_record(ctx)
        if record is None:
            continue
        if p.param_type_name == "argument":
            args.append(record)
        else:
            sections.setdefault(PANEL.get(p.name, "Other options"), []).append(record)
    if args:
        with formatter.section("Arguments"):
            formatter.write_dl(args)
    for title in [*_PANELS, "Other options"]:
        if title in sections:
            with formatter.section(title):
                formatter.write_dl(sections[title])
