"""Option values only the command line spells: ``--eff KEY=VALUE``; the table of every command's options by kind
(``OPTIONS``), through which ``aicalc check`` reads a check's ``args`` as the command line reads its flags."""

from __future__ import annotations

from aicalc.errors import AicalcError


def efficiency_overrides(items) -> dict[str, float]:
    """``["bandwidth=0.7", "kernel_overhead_s=5e-6"]`` (or one string) → dict; one clear error per bad item."""
    if isinstance(items, str):
        items = [items]
    out: dict[str, float] = {}
    for item in items or []:
        for part in str(item).split(","):
            if not part.strip():
                continue
            key, sep, value = part.partition("=")
            if not sep:
                raise AicalcError(f"--eff takes KEY=VALUE, got '{part}'")
            try:
                out[key.strip()] = float(value)
            except ValueError:
                raise AicalcError(f"--eff {key.strip()}: '{value}' is not a number") from None
    return out


def stage_notes(arch, pps, st) -> list[str]:
    """What the pipeline split and the expert layout were (docs/train-mem.md#pipeline-stages), for
    train-mem and train-time alike."""
    from aicalc.core.stages import describe

    notes = []
    split = [f"pp {p}: {describe(arch.layers, p, st.virtual_stages, st.first_stage_layers, st.last_stage_layers)}"
             for p in pps if p > 1]
    if split:
        notes.append("decoder layers per pipeline rank, " + "; ".join(split) + " (Megatron/torchtitan split; "
                     "stage = the rank whose peak is shown, 0 = first)")
    if st.ep > 1:
        etp = st.etp if st.etp is not None else "1 (the default with ep > 1, as MoE recipes run)"
        notes.append(f"experts over ep {st.ep} × expert tp {etp} "
                     "(MoE parallel folding); expert states shard over the remaining tp·cp·dp/(ep·etp) ranks")
    return notes


ATTENTION = {"eager": "materialized", "sdpa": "flash"}  # one vocabulary: how the time estimators name a kernel


def time_attention(name: str) -> str:
    """``eager``/``sdpa``/``flash``/``materialized`` as the time estimators price them: a materialized score
    matrix (eager) or a fused kernel (sdpa, flash)."""
    return ATTENTION.get(name, name)


def memory_attention(name: str) -> str:
    """The same names as train-mem's activation model reads them (``materialized`` is eager)."""
    return "eager" if name == "materialized" else name


def price_per_hour(text) -> float | None:
    """``2.5``, ``$2.50``, ``$2.50/h``, ``2.5/hr`` → USD per chip-hour (None passes through)."""
    import math
    import re

    if text is None:
        return None
    m = re.fullmatch(r"\s*\$?\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(?:/\s*(?:h|hr|hour))?\s*", str(text).lower())
    if not m:
        raise AicalcError(f"--price: cannot read '{text}' (examples: 2.5, $2.50/h)")
    v = float(m[1])
    if not (math.isfinite(v) and 0 < v < 1e6):
        raise AicalcError(f"--price must be a positive USD per chip-hour below a million, got '{text}'")
    return v


def links_note(cs, tp: int, pp: int, ep: int, attention_dp: int = 1) -> list[str]:
    """A line on what crosses the scale-out network when a replica spans more than one scale-up domain (the TP
    all-reduces run over an attention group's tp / attention_dp chips)."""
    r = cs.roofs
    domain = int(r.domain or 0)
    if not domain or tp * pp <= domain:
        return []
    nic = f"{r.out_bytes_per_s / 1e9:g} GB/s per chip"
    parts = []
    group = tp // max(int(attention_dp or 1), 1)
    if group > domain:
        parts.append(f"TP {group}'s all-reduces run inside each {domain}-chip domain, then across domains over the NICs "
                     f"({nic})")
    if ep > domain:
        hidden = cs.efficiency.ep_overlap
        parts.append(f"EP {ep}'s all-to-alls send a token across once per domain it reaches ({nic})"
                     + (f", {hidden:.0%} of them hidden beside compute (the engine's ep_overlap)" if hidden else ""))
    if pp > 1:
        parts.append(f"the {pp} pipeline stages pass their hidden states over the NICs ({nic})")
    return ["across nodes: " + "; ".join(parts) + " (docs/serve.md)"] if parts else []


def cost_note(chip, price: float | None, given: bool) -> str:
    """Where a table's cost column takes its price from, or why it has none."""
    if not price:
        return (f"cost: no on-demand price for {chip.id} in its preset (presets/chips/{chip.id}.yaml); "
                "give --price, USD per chip-hour")
    where = "--price" if given else f"{chip.id}'s preset, {getattr(chip, 'price_source', None) or 'no source'}"
    return f"cost: ${price:,.2f} per chip-hour ({where})"


def _kinds(text: str = "", int: str = "", float: str = "", flag: str = "", texts: str = "",  # noqa: A002
           params: dict[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """Option keys by the kind of value each takes → {key: (kind, parameter it fills)}; ``params`` names the
    parameter of a key that is another name for it (``--micro-batch`` fills ``batch``)."""
    groups = {"text": text, "int": int, "float": float, "flag": flag, "texts": texts}
    return {key: (kind, (params or {}).get(key, key)) for kind, keys in groups.items() for key in keys.split()}


# The options of each command that ``check`` runs, by key (the flag without its dashes, "-" as "_"): "text" is
# read by the command itself (sweeps, units), "int" and "float" are numbers held to aicalc.api.inputs.CAPS, "flag"
# a yes/no, "texts" a repeatable option (``--chip A --chip B``). The command line declares the same options
# (aicalc/cli.py); tests/test_check_options.py holds the two to each other.
OPTIONS: dict[str, dict[str, tuple[str, str]]] = {
    "kv-cache": _kinds(text="batch context kv_dtype dtype tp budget engine gpu_memory_utilization overhead solve",
                       int="block_size", texts="chip", params={"gpu_memory_utilization": "utilization"}),
    "train-mem": _kinds(text="micro_batch batch seq precision optimizer grad_dtype optimizer_dtype zero dp tp pp cp "
                             "ep recompute framework attention lora_targets lora_dtype loss quant offload budget "
                             "overhead adamw fsdp_units",
                        int="etp first_stage_layers last_stage_layers virtual_stages interleave microbatches "
                            "lora_rank chips top fsdp_version", float="dropout lora_dropout",
                        flag="sequence_parallel sp optimizer_in_backward bnb_keeps_inputs bnb_fused_matmul compile "
                             "search trace keep_grads",
                        texts="chip",
                        params={"micro_batch": "batch", "sequence_parallel": "sp", "interleave": "virtual_stages",
                                "compile": "compile_"}),
    "roofline": _kinds(text="batch prompt gen dtype kv_dtype tp compute_dtype attention engine draft acceptance plot "
                            "mem_fraction_static swa_full_tokens_ratio",
                       int="group_size draft_tokens ep attention_dp redundant_experts", flag="kv_per_query_head ops", texts="chip eff"),
    "serve": _kinds(text="chips tp prompt gen concurrency max_ttft max_tpot dtype kv_dtype price engine draft "
                         "acceptance prefix_hit rate requests num_requests plot emit requests_per_day peak_factor policy "
                         "mem_fraction_static swa_full_tokens_ratio gpu_memory_utilization",
                    int="draft_tokens seed ep attention_dp redundant_experts pp", flag="search", texts="chip",
                    params={"emit": "emit_engine"}),
    "train-time": _kinds(text="chips tokens seq global_batch micro_batch tp pp dp mfu achieved recompute attention "
                              "zero precision dp_bandwidth framework goodput price attention_flops",
                         int="virtual_stages interleave cp ep etp first_stage_layers last_stage_layers top",
                         flag="sequence_parallel sp search fp8_attention",
                         texts="chip eff", params={"sp": "sequence_parallel", "virtual_stages": "interleave"}),
    "compare": _kinds(text="tokens seq prompt gen dtype kv_dtype requests_per_day max_ttft max_tpot price peak_factor "
                           "engine", float="years", flag="training", texts="chip"),
}

_BOOLS = {"1": True, "true": True, "t": True, "yes": True, "y": True, "on": True,
          "0": False, "false": False, "f": False, "no": False, "n": False, "off": False, "": False}


def parse_option(kind: str, value):
    """``value`` as the command line parses an option of ``kind`` (click's rules for int, float and boolean
    options); ValueError with the reason when it cannot be."""
    if kind in ("text", "texts"):
        return value.decode() if isinstance(value, bytes) else str(value)
    if kind == "flag":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _BOOLS:
            return _BOOLS[value.strip().lower()]
        raise ValueError(f"{value!r} is not a valid boolean")
    number = {"int": (int, "integer"), "float": (float, "float")}[kind]
    try:
        return number[0](value)
    except (TypeError, ValueError):
        raise ValueError(f"{value!r} is not a valid {number[1]}") from None


def engine_default(given, chip) -> str:
    """", the chip's own stack (--engine chooses another)" where the engine was not given: the table says that
    the estimate assumed the chip's serving stack, and how to ask for another."""
    if given:
        return ""
    from aicalc.catalog.profiles import default_engine

    own = default_engine(chip)
    return f"; {chip.id}'s default engine ({own}; --engine chooses another)"


def engines_note(chip_ids, engine) -> str:
    """"engine: groq (…) on groq-lpu; generic (…) on h100-sxm": the profile and release each chip's estimate
    used, for a table across chips."""
    from aicalc.api.catalog import load_node_or_chip
    from aicalc.catalog.profiles import default_engine, load, release_note

    by: dict[str, list[str]] = {}
    for c in chip_ids:
        chip = load_node_or_chip(c)[0]
        by.setdefault(load("engine", engine or default_engine(chip)).id, []).append(chip.id)
    how = "--engine" if engine else "each chip's default engine; --engine chooses another"
    return "engine: " + "; ".join(f"{release_note(e)} on {', '.join(cs)}" for e, cs in by.items()) + f" ({how})"


def engine_release(engine_id: str) -> dict | None:
    """The release an engine profile describes (``{version, date, source}``), for a result's inputs."""
    from aicalc.catalog.profiles import load

    return load("engine", engine_id).options.get("release")


def memory_inputs(memory, ratio) -> dict:
    """A result's inputs on an engine's memory share (:func:`aicalc.api.serving.kv_memory`): SGLang's
    ``mem_fraction_static`` and, where the engine derived it, ``chunked_prefill_size`` and the reserve; the
    ``swa_full_tokens_ratio`` given. Nothing for an engine without that share."""
    if memory.reserve is None:
        return {}
    r = memory.reserve
    return {"mem_fraction_static": memory.utilization, "mem_fraction_static_given": memory.given,
            "mem_fraction_static_default": r.fraction, "static_reserve_bytes": r.reserved_mib * 2**20,
            "chunked_prefill_size": r.chunk, "cuda_graph_max_bs": r.graph_bs,
            **({"swa_full_tokens_ratio": ratio} if ratio is not None else {})}


def memory_notes(memory, tp: int, pp: int = 1, attention_dp: int = 1,
                 head: str = "memory: weights and KV pool take") -> list[str]:
    """The line a table prints on an engine's memory share where the engine has one of its own (SGLang's
    --mem-fraction-static, given or its default on the chip and layout, with the chunked-prefill size and the
    decode CUDA graph's batch it derived it from), beginning with ``head``; none for other engines."""
    if memory.reserve is None:
        return []
    r = memory.reserve
    layout = f"TP {tp}" + (f", PP {pp}" if pp > 1 else "") + (f", DP attention {attention_dp}" if attention_dp > 1
                                                              else "")
    head = f"{head} {memory.utilization:g} of each device's {r.gpu_mem_mib:,} MiB"
    if memory.given:
        return [f"{head} (--mem-fraction-static, given; the engine's default here is {r.fraction:g}); chunked prefill "
                f"{r.chunk:,} tokens (docs/serve.md#memory)"]
    return [f"{head}, the engine's default --mem-fraction-static at {layout}: it keeps {r.reserved_mib:,.0f} MiB for "
            f"activations and CUDA graphs (chunked prefill {r.chunk:,} tokens, decode graphs to batch {r.graph_bs}) "
            "in place of the generic runtime overhead; --mem-fraction-static sets the share (docs/serve.md#memory)"]
