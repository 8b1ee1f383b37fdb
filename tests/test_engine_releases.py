"""Engine releases and their default caps on running sequences: vLLM V1 (the latest release, what ``--engine vllm``
means) against V0, and SGLang's cap derived from its KV pool. Every expected number is read from the engines'
source, not from aicalc."""

import pytest


def test_vllm_names_the_v1_release(cli):
    """``--engine vllm`` is the family's latest release: V1, the default engine since vLLM v0.8.0 (PR #13726)."""
    from aicalc.catalog import profiles

    assert profiles.latest("vllm") == "vllm-v1"
    assert profiles.load("engine", "vllm").id == "vllm-v1"
    assert profiles.load("engine", "vllm").options["scheduler"] == "chunked"  # V1 always chunks its prefills
    out = cli("roofline", "llama-3.1-8b", "--chip", "h100-sxm", "--engine", "vllm", "--json")
    assert out.code == 0 and out.json["inputs"]["engine"] == "vllm-v1"


@pytest.mark.parametrize("chip, seqs", [
    # vllm/engine/arg_utils.py @ 99d7eb5d, EngineArgs._set_default_args: 'if device_memory >= 70 * GiB_bytes and
    # "a100" not in device_name: ... default_max_num_seqs = {...: 1024, ...}' else 256
    ("h100-sxm", 1024), ("h200", 1024), ("mi300x", 1024),  # 80 / 141 / 192 GiB, no A100
    ("a100-80gb", 256),  # 80 GiB, but an A100 (PR #17885)
    ("a100-40gb", 256), ("l4", 256), ("l40s", 256),  # under 70 GiB
])
def test_vllm_v1_caps_running_sequences_by_chip(chip, seqs):
    import aicalc

    # a 3B model with 128 + 128 tokens: every chip's KV budget holds more than either cap, so the cap is what binds
    assert aicalc.max_concurrency("llama-3.2-3b", chip, prompt=128, gen=128) > seqs
    assert aicalc.max_concurrency("llama-3.2-3b", chip, prompt=128, gen=128, engine="vllm") == seqs


def test_the_v0_release_keeps_its_256_on_every_chip():
    """V0: '# Set max_num_seqs to 256 for VLLM_V0' (vllm/engine/arg_utils.py, _set_default_args_v0)."""
    import aicalc
    from aicalc.catalog import profiles

    for chip in ("h100-sxm", "a100-80gb", "l4"):
        assert aicalc.max_concurrency("llama-3.2-3b", chip, prompt=128, gen=128, engine="vllm-v0") == 256
    assert profiles.load("engine", "vllm-v0").options["scheduler"] == "prefill-first"


def test_sglang_cap_follows_its_formula_on_the_kv_pool():
    """SGLang: req_to_token_pool size = min(max(int(T / context_len * 512), 2048), 4096)
    (model_runner_kv_cache_mixin.py @ 226149ac) and max_running_requests = min(T // 2, that size) (tp_worker.py @
    4f34e24a), per scheduler with a KV pool of T tokens. Worked by hand for a 128k-context model:"""
    from types import SimpleNamespace

    from aicalc.catalog import profiles

    opts = profiles.load("engine", "sglang").options
    chip = SimpleNamespace(memory_bytes=80 * 2**30, name="test GPU")
    # T = 700,000: 700,000 / 131,072 × 512 = 2734.4 → 2734, inside [2048, 4096]; T // 2 = 350,000
    assert profiles.max_running(opts, chip, pool_tokens=700_000, context=131_072) == 2734
    # T = 200,000: 781 → raised to 2048
    assert profiles.max_running(opts, chip, pool_tokens=200_000, context=131_072) == 2048
    # T = 2,000,000: 7812 → lowered to 4096
    assert profiles.max_running(opts, chip, pool_tokens=2_000_000, context=131_072) == 4096
    # T = 3,000 on a 4k-context model: 375 → 2048, but T // 2 = 1500 binds
    assert profiles.max_running(opts, chip, pool_tokens=3_000, context=4_096) == 1500
    # a 1M-context model (DeepSeek-V4): any pool short of 8M tokens gives the floor, 2048
    assert profiles.max_running(opts, chip, pool_tokens=3_500_000, context=1_048_576) == 2048


def test_sglang_cap_is_per_attention_dp_rank():
    """Under --enable-dp-attention each DP rank runs its own scheduler over its own GPU's KV pool, so the whole
    deployment holds the per-rank cap times the ranks. DeepSeek-V3 (163,840-token context) on 8 H200 as DP8/EP8
    at --mem-fraction-static 0.9: a rank's pool holds 0.9 × 139.8 GiB less 93.8 GiB of weights, about 32 GiB of MLA
    cache at 70,272 B a token (576 × 61 layers × 2 B), some 490k tokens, under the 655,360 (= 2048 × 163,840 / 512)
    at which the formula leaves its floor: 2048 per rank, fewer than the ~5,000 short requests a rank's KV holds;
    the deployment runs 8 × 2048."""
    import aicalc
    from aicalc.api.serving import scheduler_limits

    kw = dict(tp=8, chips=8, ep=8, attention_dp=8, prompt=64, gen=64, utilization=0.9)
    fit, cap, schedulers = scheduler_limits("deepseek-v3", "h200", engine="sglang", **kw)
    assert schedulers == 8 and cap == 2048 and fit > cap
    assert aicalc.max_concurrency("deepseek-v3", "h200", engine="sglang", **kw) == 8 * 2048


def test_profile_rules_are_checked(tmp_path, monkeypatch):
    """A malformed rule is refused naming the file and the key (exit 2 at the command line)."""
    from aicalc.catalog import profiles

    assert profiles._seq_rules([{"min_memory_gib": 70, "value": 1024, "name_excludes": ["a100"]}]) is None
    assert profiles._seq_rules([{"min_memory_gib": 70}]) is not None
    assert profiles._seq_rules([{"min_memory_gib": -1, "value": 4}]) is not None
    assert profiles._seq_rules([{"min_memory_gib": 70, "value": 8, "kind_excludes": ["tpu", "npu"]}]) is None
    for bad in ("tpu", [], ["tpus"], [5], [None], ["TPU"], [["tpu"]], {"tpu": 1}, ["tpu"] * 65):
        assert "kind_excludes" in profiles._seq_rules([{"min_memory_gib": 70, "value": 8, "kind_excludes": bad}])
    assert profiles._pool_rule({"per_context_length": 512, "at_least": 4096, "at_most": 2048,
                                "tokens_per_request": 2}) is not None
    assert profiles._pool_rule({"per_context_length": 512, "at_least": 2048}) is not None


@pytest.mark.parametrize("chip, tokens", [
    # vllm/engine/arg_utils.py @ 99d7eb5d, _set_default_args (V1), the API server's (vllm serve):
    # 'default_max_num_batched_tokens = {..., UsageContext.OPENAI_API_SERVER: 8192}' on >= 70 GiB chips that are no
    # A100, '{..., UsageContext.OPENAI_API_SERVER: 2048}' on the others
    ("h100-sxm", 8192), ("b200", 8192), ("mi300x", 8192), ("a100-80gb", 2048), ("l4", 2048),
])
def test_vllm_v1_token_budget_by_chip_drives_the_simulator_and_its_launch_command(cli, chip, tokens):
    from aicalc.api.catalog import load_chip
    from aicalc.catalog import profiles

    assert profiles.token_budget(profiles.load("engine", "vllm").options, load_chip(chip)) == tokens
    out = cli("serve", "llama-3.1-8b", "--chip", chip, "--engine", "vllm", "--rate", "2", "--num-requests", "40",
              "--emit", "vllm")
    assert out.code == 0, out.err
    assert f"--max-num-batched-tokens {tokens} " in out.out


@pytest.mark.parametrize("chip", ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu7x"])
def test_vllm_tpu_runs_256_sequences_and_2048_tokens_on_every_tpu(cli, chip):
    """Hand-read from vllm/engine/arg_utils.py @ 99d7eb5d, _set_default_args: 'try: device_memory =
    current_platform.get_device_total_memory() ... except Exception: device_memory = 0', and vLLM TPU's platform
    (vllm-project/tpu-inference tpu_inference/platforms/tpu_platform.py @ b8692ff0) has get_device_total_memory
    'raise NotImplementedError': so a TPU takes the 'else' branch, OPENAI_API_SERVER 2048 tokens and 256 sequences,
    even the 95 GiB v5p and the 192 GiB TPU7x that the >= 70 GiB GPU rule would give 8192 / 1024. The TPU table
    ('V6E': 1024, 'V5E': 512, 'V5P': 256) is looked up with get_device_name(), which returns 'TPU V6E'
    (f"TPU {chip_type.name}") and so matches no key: 2048 on every generation."""
    from aicalc.api.catalog import load_chip
    from aicalc.catalog import profiles

    opts = profiles.load("engine", "vllm").options
    assert profiles.token_budget(opts, load_chip(chip)) == 2048
    assert profiles.max_running(opts, load_chip(chip)) == 256
    out = cli("serve", "llama-3.2-3b", "--chip", chip, "--engine", "vllm", "--rate", "1", "--num-requests", "20",
              "--emit", "vllm")
    assert out.code == 0, out.err
    assert "--max-num-batched-tokens 2048 " in out.out


def test_chip_kinds_of_the_rules_are_the_schemas():
    """kind_excludes names the kinds a chip preset may have (aicalc.catalog.schema.Chip.kind)."""
    import typing

    from aicalc.catalog import profiles
    from aicalc.catalog.schema import Chip

    assert set(profiles.CHIP_KINDS) == set(typing.get_args(Chip.model_fields["kind"].annotation))


def test_an_engine_without_a_budget_steps_8192_tokens():
    """The default step budget (aicalc.core.serving.TOKEN_BUDGET) where the profile names none: TensorRT-LLM's
    max_num_tokens 8192 (its LLM API default), and vLLM V0 as the simulator always ran it."""
    from aicalc.api.catalog import load_chip
    from aicalc.catalog import profiles

    for engine in ("vllm-v0", "trtllm", "sglang", "generic"):
        assert profiles.token_budget(profiles.load("engine", engine).options, load_chip("a100-80gb")) == 8192
