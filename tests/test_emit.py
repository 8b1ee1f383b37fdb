"""serve --emit: every emitted flag and value exists in the engine's own argument definitions at the pinned
release (tests/data/engine_args.json, extracted from the released wheels by validation/record_engine_args.py),
and the values are the deployment's (TP, replicas, concurrency per replica, max length) as the estimate gave them."""

import importlib.util
import json
import math
import shlex
import sys

import pytest

from conftest import DATA, ROOT

RECORD = json.loads((DATA / "engine_args.json").read_text())
HEAD = {"vllm": ["vllm", "serve"], "sglang": ["python3", "-m", "sglang.launch_server"]}


def _load_recorder():
    spec = importlib.util.spec_from_file_location("record_engine_args", ROOT / "validation" / "record_engine_args.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["record_engine_args"] = mod
    spec.loader.exec_module(mod)
    return mod


def parse(engine: str, command: str) -> dict[str, str | None]:
    """``{flag: value}`` of one emitted command, each flag and value checked against the record: the flag (or the
    alias it is) exists, takes a value exactly when the record says so, and the value is one of its declared
    choices; JSON values of config flags name fields of the config class, with their Literal choices."""
    rec = RECORD["engines"][engine]
    argv = shlex.split(command)
    assert argv[:len(HEAD[engine])] == HEAD[engine]
    rest = argv[len(HEAD[engine]):]
    if engine == "vllm":
        rest = rest[1:]  # the model, positional
    out: dict[str, str | None] = {}
    i = 0
    while i < len(rest):
        flag = rest[i]
        assert flag.startswith("--"), f"{flag!r} is not a flag"
        assert flag in rec["flags"], f"{engine} {rec['version']} has no {flag}"
        entry = rec["flags"][flag]
        entry = rec["flags"][entry["alias_of"]] if "alias_of" in entry else entry
        value = None
        if entry["value"]:
            value = rest[i + 1]
            assert not value.startswith("--")
            if entry["choices"] is not None:
                assert value in entry["choices"], f"{flag} {value}: not among {entry['choices']}"
            i += 2
        else:
            i += 1
        assert flag not in out, f"{flag} given twice"
        out[flag] = value
    for flag, cls in (("--speculative-config", "SpeculativeConfig"), ("--kv-transfer-config", "KVTransferConfig")):
        if flag in out:
            fields = rec["configs"][cls]
            for key, value in json.loads(out[flag]).items():
                assert key in fields, f"{cls} has no field {key}"
                if fields[key]["choices"] is not None:
                    assert value in fields[key]["choices"], f"{cls}.{key} = {value!r}"
    if "--kv-transfer-config" in out:
        assert json.loads(out["--kv-transfer-config"])["kv_connector"] in rec["registries"]["kv_connector"]
    if "--speculative-algorithm" in out:
        assert out["--speculative-algorithm"] in rec["registries"]["speculative_algorithm"]
    return out


def commands(engine, model="llama-3.1-70b", chip="h100-sxm", max_model_len=5000, **row):
    from aicalc.api.emit import launch_commands

    deployment = {"tp": 4, "replicas": 2, "dtype": "bf16", "kv_dtype": "bf16", "max_num_seqs": 64}
    deployment.update(row)
    draft = deployment.pop("draft", None)
    return launch_commands(engine, model, chip, deployment, max_model_len=max_model_len, draft=draft,
                           draft_tokens=deployment.pop("draft_tokens", 4))


def test_record_is_the_pinned_releases_and_intact():
    from aicalc.api.emit import RELEASES

    rec = _load_recorder()
    assert RECORD["checksum"] == rec.checksum(RECORD["engines"])
    for engine, entry in RECORD["engines"].items():
        assert RELEASES[{"tensorrt_llm": "trtllm"}.get(engine, engine)] == entry["version"]
        assert entry["archive"]["sha256"] and entry["files"]


# deployments as serve and serve --search rows carry them, and as the fleet search will (ep, attention_dp,
# prefill_tp/decode_tp); each is emitted for both engines and every flag checked
CASES = [
    {},
    {"dtype": "fp8", "kv_dtype": "fp8"},
    {"dtype": "fp16", "kv_dtype": "fp16", "engines": ("vllm",)},
    {"kv_dtype": "int8", "engines": ("vllm",)},
    {"kv_dtype": "auto"},
    {"tp": 8, "replicas": 1, "ep": 8, "attention_dp": 8, "model": "deepseek-v3", "chip": "h200", "dtype": "fp8"},
    {"tp": 8, "replicas": 1, "ep": 8, "attention_dp": 2, "model": "qwen3-235b-a22b"},
    {"tp": 4, "ep": 2, "model": "mixtral-8x7b", "engines": ("sglang",)},
    {"pp": 2, "tp": 8, "replicas": 1},
    {"draft": "mtp", "draft_tokens": 2, "model": "deepseek-v3", "chip": "h200", "tp": 8, "replicas": 1,
     "dtype": "fp8"},
    {"draft": "llama-3.2-3b", "draft_tokens": 4},
    {"mode": "disaggregated", "tp": 2, "decode_tp": 2, "prefill_tp": 1, "replicas": 1, "prefill_replicas": 6},
    {"mode": "disaggregated", "tp": 4, "replicas": 1, "prefill_replicas": 1, "kv_dtype": "fp8", "chip": "mi300x"},
    {"mode": "disaggregated", "tp": 2, "replicas": 2, "prefill_replicas": 3, "prefill_tp": 1, "prefill_chip": "l40s"},
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "plain")
def test_every_emitted_flag_and_value_is_in_the_release(case):
    case = dict(case)
    for engine in case.pop("engines", ("vllm", "sglang")):
        cmds = commands(engine, **case)
        disagg = case.get("mode") == "disaggregated"
        assert [c.pool for c in cmds] == (["prefill", "decode"] if disagg else ["aggregated"])
        for c in cmds:
            flags = parse(engine, c.command)
            pp = case.get("pp", 1)
            tp = c.chips_per_replica // pp  # a replica is tp × pp chips
            adp = case.get("attention_dp", 1)
            if engine == "vllm":  # attention DP: D ranks of TP tp/D
                assert int(flags["--tensor-parallel-size"]) * int(flags.get("--data-parallel-size") or 1) == tp
                assert ("--data-parallel-size" in flags) == (adp > 1)
                assert ("--enable-expert-parallel" in flags) == (case.get("ep", 1) > 1)
                assert flags["--max-model-len"] == "5000"
                assert flags["--gpu-memory-utilization"] == "0.9"
            else:
                assert int(flags["--tp-size"]) == tp
                assert flags.get("--attn-dp-size") == (str(adp) if adp > 1 else None)
                assert flags.get("--ep-size") == (str(case["ep"]) if case.get("ep", 1) > 1 else None)
                assert flags["--context-length"] == "5000"
                assert flags["--mem-fraction-static"] == "0.9"
                if disagg:
                    assert flags["--disaggregation-mode"] == c.pool
            seqs = flags.get("--max-num-seqs", flags.get("--max-running-requests"))
            # vLLM's cap is per data-parallel rank (its SchedulerConfig docstring), SGLang's per server
            per = math.ceil(64 / adp) if engine == "vllm" else 64
            assert seqs == (None if c.pool == "prefill" else str(per))
            assert c.chip == case.get(f"{c.pool}_chip", case.get("chip", "h100-sxm"))
            if disagg:
                assert c.chips_per_replica == case.get(f"{c.pool}_tp", case["tp"])
                assert c.replicas == case["prefill_replicas" if c.pool == "prefill" else "replicas"]
            else:
                assert (c.replicas, c.chips_per_replica) == (case.get("replicas", 2), case.get("tp", 4) * pp)
            if pp > 1:
                assert flags.get("--pipeline-parallel-size", flags.get("--pp-size")) == str(pp)


def test_model_is_the_presets_hub_repo_and_draft_config_named():
    c = commands("vllm", draft="llama-3.2-3b", draft_tokens=3)[0]
    argv = shlex.split(c.command)
    assert argv[2] == "meta-llama/Llama-3.1-70B"  # presets/models/llama-3.1-70b.yaml hf_repo
    spec = json.loads(parse("vllm", c.command)["--speculative-config"])
    assert spec == {"method": "draft_model", "model": "meta-llama/Llama-3.2-3B", "num_speculative_tokens": 3}
    s = parse("sglang", commands("sglang", draft="mtp", draft_tokens=3)[0].command)
    assert (s["--speculative-num-steps"], s["--speculative-num-draft-tokens"]) == ("3", "4")


def test_a_config_path_is_emitted_as_the_path():
    path = str(DATA / "configs" / "llama-3.2-1b")
    c = commands("vllm", model=path, tp=1, replicas=1)[0]
    assert shlex.split(c.command)[2] == path


@pytest.mark.parametrize("engine,chip,row,why", [
    ("sglang", "groq-lpu", {}, "runs on NVIDIA and AMD chips, not on groq-lpu"),
    ("vllm", "apple-m2-ultra", {}, "not on apple-m2-ultra"),
    ("vllm", "h100-sxm", {"dtype": "int4"}, "not to int4"),
    ("sglang", "h100-sxm", {"kv_dtype": "int8"}, "has no int8 KV cache"),
    ("vllm", "h100-sxm", {"ep": 2}, "not over 2"),
    ("vllm", "h100-sxm", {"attention_dp": 3}, "does not divide"),
    ("vllm", "h100-sxm", {"draft": "eagle"}, "EAGLE head"),
    ("trtllm", "h100-sxm", {}, "not recorded"),
    ("trtllm", "mi300x", {}, "runs on NVIDIA chips, not on mi300x"),
    ("sglang", "h100-sxm", {"mode": "disaggregated", "prefill_replicas": 1, "prefill_chip": "tpu-v5e"},
     "not on tpu-v5e"),
])
def test_an_engine_that_cannot_run_the_deployment_says_why(engine, chip, row, why):
    from aicalc.errors import AicalcError

    with pytest.raises(AicalcError, match=why):
        commands(engine, chip=chip, **row)


def test_cli_emits_the_deployment_the_estimate_used(cli):
    args = ["serve", "llama-3.1-70b", "--chip", "h100-sxm", "--chips", "8", "--tp", "4", "--max-tpot", "50ms"]
    est = cli(*args, "--json").json
    ok = [r for r in est["rows"] if r["meets_slo"]]
    best = max(ok, key=lambda r: r["output_tokens_per_s"])
    r = cli(*args, "--emit", "vllm", "--json")
    assert r.code == 0, r.err
    (row,) = r.json["rows"]
    flags = parse("vllm", row["command"])
    assert flags["--max-num-seqs"] == str(best["batch_per_replica"])
    assert flags["--max-num-seqs"] == str(math.ceil(best["concurrency"] / 2))
    assert flags["--tensor-parallel-size"] == "4" and row["replicas"] == 2
    assert flags["--max-model-len"] == str(1024 + 256)
    text = cli(*args, "--emit", "sglang").out  # a shell script: comments, then the command
    assert text.startswith("# ") and text.rstrip().splitlines()[-1].startswith("python3 -m sglang.launch_server")


def test_cli_search_emits_the_best_row_per_pool(cli):
    args = ["serve", "llama-3.1-70b", "--chip", "h200", "--chips", "8", "--dtype", "fp8", "--prompt", "4000",
            "--gen", "500", "--max-ttft", "1s", "--max-tpot", "50ms", "--search"]
    best = cli(*args, "--json").json["rows"][0]
    r = cli(*args, "--emit", "vllm", "--json")
    assert r.code == 0, r.err
    rows = r.json["rows"]
    if best["mode"] == "disaggregated":
        assert [x["pool"] for x in rows] == ["prefill", "decode"]
        assert rows[1]["replicas"] == best["replicas"] and rows[0]["replicas"] == best["prefill_replicas"]
    else:
        assert [x["pool"] for x in rows] == ["aggregated"]
    decode = parse("vllm", rows[-1]["command"])
    assert decode["--max-num-seqs"] == str(math.ceil(best["concurrency"] / best["replicas"]))
    assert decode["--quantization"] == "fp8" and decode["--max-model-len"] == "4500"


@pytest.mark.parametrize("args,why", [
    (["--chip", "groq-lpu", "--emit", "sglang"], "not on groq-lpu"),
    (["--tp", "1,2", "--emit", "vllm"], "one value of --tp"),
    (["--chip", "h100-sxm", "--chip", "h200", "--emit", "vllm"], "one value of --chip"),
    (["--emit", "tgi"], "--emit must be one of vllm, sglang, trtllm"),
])
def test_cli_refuses_with_exit_2(cli, args, why):
    r = cli("serve", "llama-3.1-8b", *args)
    assert r.code == 2 and why in r.err and r.out == ""


def test_record_check_offline_verifies_the_checksum(tmp_path, monkeypatch, capsys):
    rec = _load_recorder()

    def no_network(package, version, into):
        raise RuntimeError("no network")

    monkeypatch.setattr(rec, "download", no_network)
    copy = tmp_path / "engine_args.json"
    copy.write_text((DATA / "engine_args.json").read_text())
    assert rec.main(["--check", "--out", str(copy)]) == 0
    assert "checked by the checksum only" in capsys.readouterr().out
    data = json.loads(copy.read_text())
    data["engines"]["vllm"]["flags"]["--no-such-flag"] = {"value": False, "choices": None, "aliases": []}
    copy.write_text(json.dumps(data))
    assert rec.main(["--check", "--out", str(copy)]) == 1


def test_extractors_read_flags_choices_and_literal_aliases():
    """On a small source written like vLLM's and SGLang's: flags from add_argument and from annotated fields,
    choices from ``choices=``, ``Literal`` aliases (nested) and module constants, booleans as value-less."""
    rec = _load_recorder()
    config = (b"from typing import Literal\n"
              b"Inner = Literal['b', 'c']\nKind = Literal['a', Inner]\n"
              b"class CacheConfig:\n    dtype: Kind | str = 'a'\n    on: bool = False\n    n: int = 1\n")
    args = (b"def add(parser):\n    kw = get_kwargs(CacheConfig)\n"
            b"    parser.add_argument('--dtype', **kw['dtype'])\n    parser.add_argument('--on', **kw['on'])\n"
            b"    parser.add_argument('--n', '-n', choices=CH + ['z'], **kw['n'])\nCH = ['x', 'y']\n")
    trees = {"c.py": rec.ast.parse(config), "arg_utils.py": rec.ast.parse(args)}
    env = rec.Env(trees)
    flags = rec.argparse_flags({"arg_utils.py": trees["arg_utils.py"]}, env, rec.class_fields(trees, env))
    assert flags["--dtype"] == {"value": True, "choices": ["a", "b", "c"], "open": True, "aliases": []}
    assert flags["--on"]["value"] is False and flags["--on"]["negation"] == "--no-on"
    assert flags["--n"]["choices"] == ["x", "y", "z"] and flags["-n"] == {"alias_of": "--n"}
    fields = (b"from typing import Literal, Optional\n"
              b"class P:\n    tp_size: A[int, Arg(help='t', aliases=['--tensor-parallel-size'])] = 1\n"
              b"    mode: A[Literal['null', 'prefill'], 'm'] = 'null'\n"
              b"    hidden: A[int, Arg(no_cli=True)] = 0\n    flag: A[bool, 'f'] = False\n")
    spec = b"class SpeculativeAlgorithm(Enum):\n    EAGLE = auto()\n    NONE = auto()\n"
    out = rec.extract_sglang({"sglang/srt/arg_groups/fields/p.py": fields, "sglang/srt/server_args.py": b"",
                              "sglang/srt/speculative/spec_info.py": spec})
    assert out["flags"]["--tensor-parallel-size"] == {"alias_of": "--tp-size"}
    assert out["flags"]["--mode"]["choices"] == ["null", "prefill"]
    assert "--hidden" not in out["flags"] and out["flags"]["--flag"]["value"] is False
    assert out["registries"]["speculative_algorithm"] == ["EAGLE", "NONE"]


def test_trtllm_extractor_reads_click_options_and_llm_args_fields():
    """On a small source written like TensorRT-LLM's (click options of trtllm-serve, pydantic LlmArgs classes):
    ready for a record made with --source tensorrt_llm=WHEEL."""
    rec = _load_recorder()
    serve = (b"import click\n@click.command('serve')\n@click.argument('model')\n"
             b"@click.option('--tensor_parallel_size', '--tp_size', type=int, default=1)\n"
             b"@click.option('--backend', type=ChoiceWithAlias(['pytorch', 'tensorrt'], {'trt': 'tensorrt'}))\n"
             b"@click.option('--trust_remote_code', is_flag=True, default=False)\n"
             b"@click.option('--config', '--extra_llm_api_options', 'extra_llm_api_options', type=str)\n"
             b"def serve(model, tensor_parallel_size, backend, trust_remote_code, extra_llm_api_options):\n"
             b"    pass\n"
             b"@click.command('disaggregated')\n@click.option('-c', '--config_file', type=str, default=None)\n"
             b"def disaggregated(config_file):\n    pass\n")
    disagg = (b"class ServerRole(IntEnum):\n    CONTEXT = 0\n    GENERATION = 1\n"
              b"@dataclass\nclass CtxGenServerConfig:\n    type: Literal['ctx', 'gen']\n    hostname: str = None\n"
              b"def extract_disagg_cfg(hostname='localhost', port=8000, context_servers=None, **kwargs):\n"
              b"    pass\n")
    llm_args = (b"from typing import Literal, Optional\n"
                b"class KvCacheConfig(StrictBaseModel):\n    dtype: str = 'auto'\n"
                b"class CacheTransceiverConfig(StrictBaseModel):\n"
                b"    backend: Optional[Literal['DEFAULT', 'UCX', 'NIXL']] = None\n"
                b"class BaseLlmArgs(StrictBaseModel):\n    enable_attention_dp: bool = False\n"
                b"class TorchLlmArgs(BaseLlmArgs):\n    kv_cache_config: KvCacheConfig = None\n")
    out = rec.extract_trtllm({"tensorrt_llm/commands/serve.py": serve, "tensorrt_llm/llmapi/llm_args.py": llm_args,
                              "tensorrt_llm/llmapi/disagg_utils.py": disagg})
    assert out["flags"]["--tensor_parallel_size"] == {"value": True, "choices": None, "aliases": ["--tp_size"]}
    assert out["flags"]["--tp_size"] == {"alias_of": "--tensor_parallel_size"}
    assert out["flags"]["--extra_llm_api_options"] == {"alias_of": "--config"}  # the bare name is the parameter
    assert set(out["commands"]) == {"serve", "disaggregated"}
    assert out["commands"]["disaggregated"]["-c"] == {"alias_of": "--config_file"} or \
        out["commands"]["disaggregated"]["--config_file"] == {"alias_of": "-c"}
    assert out["registries"]["server_role"] == ["CONTEXT", "GENERATION"]
    assert out["configs"]["disagg_utils.CtxGenServerConfig"]["type"]["choices"] == ["ctx", "gen"]
    assert out["functions"]["disagg_utils.extract_disagg_cfg"] == ["hostname", "port", "context_servers"]
    assert out["flags"]["--backend"]["choices"] == ["pytorch", "tensorrt"]
    assert out["flags"]["--trust_remote_code"]["value"] is False
    torch_args = out["configs"]["TorchLlmArgs"]
    assert set(torch_args) == {"enable_attention_dp", "kv_cache_config"} and torch_args["enable_attention_dp"]["bool"]
    assert out["configs"]["CacheTransceiverConfig"]["backend"]["choices"] == ["DEFAULT", "UCX", "NIXL"]


def test_cli_emits_traffic_and_fixed_concurrency_deployments(cli):
    r = cli("serve", "llama-3.1-8b", "--chip", "h100-sxm", "--rate", "5", "--num-requests", "200", "--emit", "vllm",
            "--json")
    assert r.code == 0, r.err
    # the simulator's scheduler runs 256 sequences per replica (docs/serve.md, vLLM's default max_num_seqs)
    assert parse("vllm", r.json["rows"][0]["command"])["--max-num-seqs"] == "256"
    r = cli("serve", "llama-3.1-70b", "--chip", "h100-sxm", "--chips", "8", "--tp", "4", "--concurrency", "48",
            "--emit", "sglang", "--json")
    assert r.code == 0, r.err
    flags = parse("sglang", r.json["rows"][0]["command"])
    assert flags["--max-running-requests"] == "24" and flags["--tp-size"] == "4"  # 48 requests over 2 replicas


def test_cli_fleet_search_emits_its_cheapest_fleet_per_pool(cli):
    """serve --search with a traffic and no --chips (the fleet search) emits its cheapest row: a disaggregated
    fleet's row counts both pools' replicas, each pool's command runs on that pool's own replicas and TP."""
    args = ["serve", "llama-2-70b", "--chip", "h100-sxm", "--requests-per-day", "10e6", "--max-ttft", "2s",
            "--max-tpot", "100ms", "--search"]
    best = cli(*args, "--json").json["rows"][0]
    r = cli(*args, "--emit", "sglang", "--json")
    assert r.code == 0, r.err
    rows = r.json["rows"]
    if best["mode"] == "disaggregated":
        assert [x["pool"] for x in rows] == ["prefill", "decode"]
        assert [x["replicas"] for x in rows] == [best["prefill_replicas"], best["decode_replicas"]]
        assert [x["chips_per_replica"] for x in rows] == [best["prefill_tp"], best["decode_tp"]]
        assert sum(x["replicas"] * x["chips_per_replica"] for x in rows) == best["chips"]
        for x in rows:
            assert parse("sglang", x["command"])["--disaggregation-mode"] == x["pool"]
    else:
        assert [x["pool"] for x in rows] == ["aggregated"] and rows[0]["replicas"] == best["replicas"]
    # the simulator's scheduler runs 256 sequences per replica (docs/serve.md, vLLM's default max_num_seqs)
    assert parse("sglang", rows[-1]["command"])["--max-running-requests"] == "256"


_TRT_SERVE = (b"import click\n@click.command('serve')\n@click.argument('model')\n"
              b"@click.option('--tp_size', type=int, default=1)\n"
              b"@click.option('--extra_llm_api_options', type=str, default=None)\n"
              b"def serve(model, tp_size, extra_llm_api_options):\n    pass\n")
_TRT_ARGS = (b"from typing import Literal, Optional\n"
             b"class KvCacheConfig(StrictBaseModel):\n    dtype: str = 'auto'\n"
             b"class TorchLlmArgs(StrictBaseModel):\n    enable_attention_dp: bool = False\n")


def _git_release(repo, versions):
    """A git repository holding TensorRT-LLM's two source files and version.py, one commit and tag per version."""
    import subprocess

    def git(*args):
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                       capture_output=True)

    git("init", "-q")
    for v in versions:
        for rel, body in (("tensorrt_llm/commands/serve.py", _TRT_SERVE + f"# {v}\n".encode()),
                          ("tensorrt_llm/llmapi/llm_args.py", _TRT_ARGS),
                          ("tensorrt_llm/llmapi/disagg_utils.py", b"class ServerRole(IntEnum):\n    CONTEXT = 0\n"),
                          ("tensorrt_llm/version.py", f'__version__ = "{v}"\n'.encode())):
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_bytes(body)
        git("add", "-A")
        git("commit", "-qm", v)
        git("tag", f"v{v}")


def test_record_reads_a_release_from_a_git_tag(tmp_path, monkeypatch, capsys):
    """--source tensorrt_llm=GIT_DIR@TAG: the files at the tag, the tag and its commit in the record, each file's
    SHA-256; --check re-reads them; a tag of another release, or no such tag, is refused (exit 2)."""
    import hashlib
    import shutil
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    rec = _load_recorder()
    monkeypatch.setattr(rec, "download", lambda package, version, into: (_ for _ in ()).throw(
        RuntimeError("no network")))
    repo = tmp_path / "TensorRT-LLM"
    repo.mkdir()
    _git_release(repo, ["1.2.0", "1.2.1", "1.3.0"])
    pinned = rec.ENGINES["tensorrt_llm"]["version"]
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", f"v{pinned}^{{commit}}"], capture_output=True,
                            text=True, check=True).stdout.strip()
    copy = tmp_path / "engine_args.json"
    copy.write_text((DATA / "engine_args.json").read_text())
    assert rec.main(["--source", f"tensorrt_llm={repo}@v{pinned}", "--out", str(copy)]) == 0
    data = json.loads(copy.read_text())
    trt = data["engines"]["tensorrt_llm"]
    assert trt["git"] == {"tag": f"v{pinned}", "commit": commit} and "archive" not in trt
    assert trt["files"]["tensorrt_llm/commands/serve.py"] == hashlib.sha256(
        _TRT_SERVE + f"# {pinned}\n".encode()).hexdigest()
    assert set(trt["flags"]) == {"--tp_size", "--extra_llm_api_options"}
    assert trt["configs"]["TorchLlmArgs"]["enable_attention_dp"]["bool"]
    for name in ("vllm", "sglang"):  # kept as recorded: they could not be downloaded
        assert data["engines"][name] == RECORD["engines"][name]
    assert data["checksum"] == rec.checksum(data["engines"])
    capsys.readouterr()
    assert rec.main(["--check", "--source", f"tensorrt_llm={repo}@v{pinned}", "--out", str(copy)]) == 0
    assert "tensorrt_llm re-extracted and identical" in capsys.readouterr().out
    assert rec.main(["--check", "--source", f"tensorrt_llm={repo}@v1.3.0", "--out", str(copy)]) == 2
    assert f"says 1.3.0, not the pinned {pinned}" in capsys.readouterr().err
    assert rec.main(["--source", f"tensorrt_llm={repo}@v9", "--out", str(copy)]) == 2
    assert "has no tag v9" in capsys.readouterr().err
