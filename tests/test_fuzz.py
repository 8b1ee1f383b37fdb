"""Fuzzing with a fixed seed (hypothesis, derandomized, no example database): command lines over every
command and option, and the fields of config.json files, chip/node/model presets and budget files. Every run
ends with exit 0, 1 or 2 and no traceback, promptly; every accepted input prints only finite, non-negative
numbers and the contract's keys (tests/test_robustness.py ``assert_sane``); a check whose error-severity
budget breaks never passes."""

from __future__ import annotations

import json
import os

import pytest
import typer
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_robustness import assert_sane, run

from aicalc.cli import app

from conftest import DATA

SCALE = int(os.environ.get("AICALC_FUZZ_SCALE", "1"))  # more examples for a deeper local run (still seeded)
# The fixed seed: derandomize=True (and no example database), so every run tries the same inputs.
FUZZ = settings(derandomize=True, database=None, deadline=None, print_blob=False,
                suppress_health_check=list(HealthCheck))

MODELS = ["gpt2", "llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "deepseek-v3", "gemma-2-9b", "falcon-40b",
          "bloom-176b", "phi-3-mini", "qwen2.5-7b", str(DATA / "configs" / "qwen1.5-moe-a2.7b"),
          str(DATA / "configs" / "gemma-2-2b" / "config.json"), "nope", "llama-3.1-8", "a" * 300, "x/" * 200,
          "", ".", "/"]  # (no Hub id: resolving one goes to the network)
CHIPS = ["h100-sxm", "dgx-h100", "tpu-v5e", "groq-lpu", "cerebras-wse3", "apple-neural-engine", "l4", "mi300x",
         "H100-SXM", "nope", "z" * 300]
NUMBERS = ["0", "-1", "1", "2", "3", "4", "7", "8", "16", "64", "1024", "1e30", "1e308", "nan", "inf", "-inf", "1e-30",
           "0.5", "1.5", "99999999999999999999999", "9" * 400, "4k", "128k", "1M", "4Ki", "1T", "80GB", "80GiB",
           "1e-400GB", "200ms", "90%", "1,8,64", "1:64:x2", "1:1e7:+1", "1:2:x1.0000001", "0:3:+1", "1:8:+0",
           "8:1:x2", "1::", ",,", "", " ", "abc", "1e", "١", "1_000", "0x10", "-0", "1" * 5000 + "x"]
CHOICES = {
    "kv_dtype": ["bf16", "fp16", "fp8", "int8", "int4", "none", "fp4"],
    "dtype": ["bf16", "fp16", "fp8", "int8", "int4", "nf4", "q4_k_m", "fp32", "none"],
    "compute_dtype": ["bf16", "fp8", "int4", "fp64"],
    "precision": ["fp32", "bf16", "bf16-mixed", "fp16-mixed", "fp16", "fp8", "x"],
    "optimizer": ["adamw", "adam", "adam8bit", "sgd", "sgd-momentum", "adafactor", "lion", "x"],
    "grad_dtype": ["fp32", "bf16", "x"], "optimizer_dtype": ["fp32", "bf16", "x"],
    "recompute": ["none", "selective", "full", "x"], "framework": ["hf", "megatron", "x"],
    "attention": ["eager", "sdpa", "flash", "materialized", "x"], "lora_targets": ["q,v", "all", "q,x", ""],
    "lora_dtype": ["fp32", "bf16", "x"], "loss": ["full", "chunked", "x"], "quant": ["none", "nf4", "int8", "x"],
    "offload": ["none", "optimizer", "params", "x"], "engine": ["vllm", "hf", "generic", "x"],
    "solve": ["max-context", "max-batch", "x"], "mfu": ["auto", "0.4", "40%", "2", "0", "nan"],
    # (a factor of 0 where the model divides by it, e.g. flop_max=0: test_robustness.py, an expected failure)
    "eff": ["bandwidth=0.7", "bandwidth=nan", "bandwidth=-1", "bandwidth=1e308", "kernel_overhead_s=0", "x=1", "=",
            "a"],
    "kind": ["chip", "node", "model", "x"], "fmt": ["json", "table", "csv", "markdown", "x"],
    "chip": CHIPS, "achieved": ["144TFLOPS", "1e30TFLOPS", "0", "x"], "dp_bandwidth": ["25GB/s", "0", "1e30TB/s"],
    "budget": ["80GB", "80GiB", "0", "1e30", "1e-400GB", "x"], "overhead": ["1GiB", "0", "1e30", "x"],
    "utilization": ["0.9", "90%", "0", "1.5", "nan"],
}
# Values an option may well be given: most runs are then accepted, and their numbers are checked.
PLAUSIBLE = ["1", "2", "4", "8", "16", "64", "512", "4k", "32k", "128k", "1,8", "1:64:x2", "1:9:+4", "1M", "1Ki", "1T",
             "1048576", "16777216", "1073741824", "80GB", "200ms", "0.5"]
INTS = st.one_of(st.integers(-3, 70), st.sampled_from([2**20, 2**20 + 1, 2**31, 10**30, -(10**30)]))
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.5, 1e308, 1e-308]))


def _options(path: list[str]) -> list:
    group = typer.main.get_command(app)
    cmd = group
    for name in path:
        cmd = cmd.commands[name]
    return [p for p in cmd.params if getattr(p, "opts", None) and p.opts[0].startswith("--")]


def _value(p, draw, plausible: bool) -> list[str]:
    """The tokens of one option: a flag alone, or the flag and a value fit to its type and name."""
    kind = getattr(p.type, "name", "")
    if getattr(p, "is_flag", False):
        return [draw(st.sampled_from(p.opts + list(getattr(p, "secondary_opts", []))))]
    choices = CHOICES.get(p.name, [])
    if plausible:
        pool = [c for c in choices if c not in ("x", "none", "nan")] or PLAUSIBLE
        if kind in ("int", "integer", "float"):
            pool = ["1", "2", "4", "8", "16", "64"] if p.name != "price" else ["0.5", "2", "100"]
        return [p.opts[0], draw(st.sampled_from(pool))]
    if kind in ("int", "integer"):
        value = str(draw(INTS))
    elif kind == "float":
        value = str(draw(FLOATS))
    else:
        value = draw(st.one_of(st.sampled_from(choices or NUMBERS), st.sampled_from(NUMBERS), st.text(max_size=12)))
    if p.name == "chip" and not value.replace(",", "").strip():
        value = "nope"  # --chip with no id at all: test_robustness.py, an expected failure (cli.py per_chip)
    return [p.opts[0], value]


def _argv(path: list[str], draw, positional: list[str]) -> list[str]:
    options = _options(path)
    argv = [*path, *positional]
    plausible = draw(st.booleans())
    for p in draw(st.lists(st.sampled_from(options), max_size=6, unique_by=lambda p: p.name)):
        argv += _value(p, draw, plausible)
    return argv + draw(st.sampled_from([["--json"], ["--json"], ["--json"], ["--format", "csv"], []]))


COMMANDS = ["kv-cache", "train-mem", "roofline", "train-time", "serve", "compare"]


@pytest.mark.parametrize("command", COMMANDS)
def test_command_lines(command):
    @settings(FUZZ, max_examples=60 * SCALE)
    @given(st.data())
    def fuzz(data):
        model = data.draw(st.sampled_from(MODELS[:10]) if data.draw(st.booleans()) else st.sampled_from(MODELS))
        argv = _argv([command], data.draw, [model])
        assert_sane(run(*argv, width=data.draw(st.sampled_from([None, None, 80, 120]))))  # a pipe or a terminal

    fuzz()


def test_presets_command_lines():
    @settings(FUZZ, max_examples=30 * SCALE)
    @given(st.data())
    def fuzz(data):
        if data.draw(st.booleans()):
            argv = _argv(["presets", "show"], data.draw, [data.draw(st.sampled_from(MODELS + CHIPS))])
        else:
            argv = _argv(["presets", "list"], data.draw, [])
        assert_sane(run(*argv))

    fuzz()


# --- files ---------------------------------------------------------------------------------------------------

HOSTILE_VALUES = st.one_of(
    st.integers(-2, 300), st.sampled_from([0, -1, 2**31, 10**9, 10**30, 10**400, 4096.0, 1e308, 0.5]),
    st.sampled_from([float("nan"), float("inf"), True, False, None, "", "4096", "x" * 300, [4096], [[1]],
                     [1, "a"], {"a": 1}, {}, []]),
    st.text(max_size=8), st.lists(st.integers(-1, 40), max_size=4),
)
LLAMA = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 4,
         "num_hidden_layers": 4, "intermediate_size": 1376, "vocab_size": 32000, "max_position_embeddings": 4096}
CONFIG_KEYS = sorted(set(LLAMA) | {
    "head_dim", "tie_word_embeddings", "sliding_window", "layer_types", "num_local_experts", "num_experts",
    "num_experts_per_tok", "mlp_only_layers", "decoder_sparse_step", "shared_expert_intermediate_size",
    "moe_intermediate_size", "use_sliding_window", "max_window_layers", "n_embd", "n_layer", "n_head", "n_inner",
    "n_positions", "new_decoder_architecture", "num_kv_heads", "multi_query", "q_lora_rank", "kv_lora_rank",
    "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_routed_experts", "n_shared_experts",
    "first_k_dense_replace", "hidden_act", "activation_function", "_name_or_path", "attention_bias"})
MODEL_TYPES = ["llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "gemma2", "phi3", "gpt2", "falcon",
               "bloom", "deepseek_v3", "bert", 7, None, ["llama"]]


def test_config_json_fields(tmp_path):
    @settings(FUZZ, max_examples=120 * SCALE)
    @given(st.sampled_from(MODEL_TYPES), st.dictionaries(st.sampled_from(CONFIG_KEYS), HOSTILE_VALUES, max_size=4),
           st.lists(st.sampled_from(CONFIG_KEYS), max_size=2), st.sampled_from(["kv-cache", "train-mem", "roofline"]))
    def fuzz(model_type, changes, dropped, command):
        cfg = {**LLAMA, "model_type": model_type, **changes}
        for k in dropped:
            cfg.pop(k, None)
        path = tmp_path / "config.json"
        try:
            path.write_text(json.dumps(cfg))
        except ValueError:  # an integer Python itself will not print: the file cannot exist either
            return
        assert_sane(run("presets", "show", path, "--json"))
        extra = ["--chip", "h100-sxm"] if command != "train-mem" else []
        assert_sane(run(command, path, *extra, "--json"))

    fuzz()


CHIP = {"id": "fz", "name": "Fuzz", "vendor": "x", "kind": "gpu", "memory": "80GiB", "memory_type": "HBM3",
        "memory_bandwidth_gbs": 3350, "dense_tflops": {"bf16": 989.4, "fp8": 1978.9}, "source": "test",
        "interconnect": {"name": "link", "bandwidth_gbs": 900}, "tdp_w": 700, "price_per_hour_usd": 3.0}
NODE = {"id": "fzn", "name": "Fuzz node", "chip": "fz", "count": 8, "source": "test"}


def test_preset_fields(tmp_path):
    for sub in ("chips", "nodes", "models"):
        (tmp_path / sub).mkdir()

    @settings(FUZZ, max_examples=80 * SCALE)
    @given(st.dictionaries(st.sampled_from(sorted(CHIP) + ["sram", "efficiency_class", "year"]), HOSTILE_VALUES,
                           max_size=3),
           st.dictionaries(st.sampled_from(sorted(NODE)), HOSTILE_VALUES, max_size=2),
           st.sampled_from(["chip", "node"]))
    def fuzz(chip_changes, node_changes, which):
        chip = {**CHIP, **chip_changes, "id": "fz"}
        node = {**NODE, **node_changes, "id": "fzn"}
        (tmp_path / "chips" / "fz.yaml").write_text(yaml.safe_dump(chip))
        (tmp_path / "nodes" / "fzn.yaml").write_text(yaml.safe_dump(node))
        from aicalc.catalog import store

        store._validated.cache_clear()
        store._record.cache_clear()
        target = "fz" if which == "chip" else "fzn"
        assert_sane(run("--presets-dir", tmp_path, "presets", "show", target, "--json"))
        tp = ["--tp", "8"] if which == "node" else []
        assert_sane(run("--presets-dir", tmp_path, "kv-cache", "gpt2", "--chip", target, *tp, "--json"))
        assert_sane(run("--presets-dir", tmp_path, "serve", "gpt2", "--chip", "fz", "--json"))

    fuzz()


LIMIT_VALUES = st.one_of(st.sampled_from(["80GB", "80GiB", "1ms", "200ms", "1", "1e30", "0", "-1", ".nan", "1e-400GB",
                                          "x", "", 1, 0, -1, 1e308, True, None, [1], {"a": 1}]), HOSTILE_VALUES)
LIMITS = ["max_memory_per_device", "max_peak_bytes", "max_kv_cache_bytes_per_device", "min_max_batch", "max_ttft",
          "max_tpot", "min_output_tokens_per_s", "max_usd_per_million_tokens", "max_chips_needed", "unknown"]
ARGS = {"kv-cache": ["chip", "tp", "batch", "context", "kv-dtype", "budget", "solve"],
        "serve": ["chip", "chips", "tp", "prompt", "gen", "concurrency", "price"],
        "roofline": ["chip", "batch", "tp", "eff"], "train-mem": ["chip", "batch", "zero", "dp", "lora-rank"],
        "train-time": ["chip", "chips", "tokens", "tp"], "compare": ["chip", "seq"]}
ARG_VALUES = st.one_of(st.sampled_from(["h100-sxm", "tpu-v5e", "1", "2", "8", "1,8", "1:8:x2", "4k", "fp8", "nope",
                                        "1e30", "max-context"]), HOSTILE_VALUES)


def test_budget_fields(tmp_path):
    @settings(FUZZ, max_examples=80 * SCALE)
    @given(st.sampled_from(list(ARGS) + ["nope", 3]), st.sampled_from(MODELS[:4] + ["nope", "./missing.json", 7]),
           st.dictionaries(st.sampled_from(LIMITS), LIMIT_VALUES, max_size=3), st.data())
    def fuzz(command, model, limits, data):
        names = ARGS.get(command, ["chip"])
        args = data.draw(st.dictionaries(st.sampled_from(names), ARG_VALUES, max_size=3))
        check = {"name": "c", "command": command, "model": model, "args": args, "limits": limits,
                 "severity": data.draw(st.sampled_from(["error", "warn", "fatal"]))}
        doc = data.draw(st.sampled_from([{"version": 1, "checks": [check]}, {"version": 1, "checks": [check, check]},
                                         {"version": 2, "checks": [check]}, {"checks": check}]))
        path = tmp_path / "budget.yaml"
        path.write_text(yaml.safe_dump(doc))
        r = run("check", path, "--json")
        assert_sane(r)
        if r.code == 0:  # soundness: nothing error-severity failed
            assert all(row["status"] != "fail" for row in json.loads(r.out)["rows"]), r

    fuzz()
