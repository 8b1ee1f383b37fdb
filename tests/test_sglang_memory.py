"""SGLang's default --mem-fraction-static and --chunked-prefill-size, and the KV pool they leave.

Every expected figure is worked by hand from SGLang's rule (sgl-project/sglang @ 031ed82d,
python/sglang/srt/arg_groups/memory_hook.py, handle_gpu_memory_settings and reserve_for_graph_mb; the prefill graph's
capture sizes from cuda_graph_hook.py generate_prefill_cuda_graph_batch_sizes):

    chunked_prefill_size C by gpu_mem: < 20 GiB 2048, < 60 GiB 4096, < 160 GiB 8192, else 16384
    decode graph max_bs b: < 20 GiB 8; < 35 GiB 48 (tp < 4) / 160; < 60 GiB 32 / 160; < 160 GiB 256 / 512; else 512
    reserved = 512 + max(C, 2048) * 1.5 + tp * pp / 8 * 1024 + b * 2
               [+ b * dp * 3, + b * dp * 1.5 if b > 300]            (--enable-dp-attention, dp ranks)
               + len(prefill capture sizes <= C) * 8                 (1536 for an MLA model)
    reserved = max(reserved, 10 * 1024) if gpu_mem > 60 * 1024
    mem_fraction_static = round((gpu_mem - reserved) / gpu_mem, 3)

gpu_mem is the device's memory in MiB. aicalc reads it as the chip preset's measured usable memory (torch's
cudaMemGetInfo total) where the preset has one, else its label, in whole MiB (SGLang reads nvidia-smi's
memory.total on CUDA, a few hundred MiB above torch's; torch's total on ROCm). The prefill capture sizes up to C:
8 (4..32 by 4) + 14 (48..256 by 16) + 8 (288..512 by 32) + 8 (576..1024 by 64) + 12 (1280..4096 by 256) = 50 to
4096, + 8 (4608..8192 by 512) = 58 to 8192, + 24 (4608..16384 by 512) = 74 to 16384."""

from types import SimpleNamespace

import numpy as np
import pytest

from aicalc.api.catalog import load_model, load_node_or_chip
from aicalc.catalog import profiles

GIB = 2**30
MIB = 2**20


def _opts():
    return profiles.load("engine", "sglang").options


def _fraction(gpu_mem, reserved):
    return round((gpu_mem - reserved) / gpu_mem, 3)


# (chip, model, tp, attention_dp, gpu_mem in MiB worked from the preset's figure, expected reserve in MiB)
CASES = [
    # H100 SXM: usable_memory 85,017,493,504 B / 2^20 = 81,079 MiB (< 90 GiB): C 8192, b 256 (tp 1 < 4);
    # 512 + 8192 * 1.5 + 1 * 1 / 8 * 1024 + 256 * 2 + 58 * 8 = 512 + 12288 + 128 + 512 + 464 = 13,904 (> 10,240)
    ("h100-sxm", "llama-3.1-8b", 1, 1, 81079, 512 + 12288 + 128 + 512 + 464),
    # H200: 150,109,880,320 B / 2^20 = 143,155.9 -> 143,155 MiB (< 160 GiB): C 8192, b 512 (tp 8 >= 4);
    # 512 + 12288 + 8 / 8 * 1024 + 512 * 2 + 58 * 8 = 512 + 12288 + 1024 + 1024 + 464 = 15,312
    ("h200", "llama-3.1-70b", 8, 1, 143155, 512 + 12288 + 1024 + 1024 + 464),
    # H200, DeepSeek-V3 (MLA: the prefill graph reserves 1.5 GiB), TP 8 with DP attention 8: b 512 > 300;
    # 512 + 12288 + 1024 + 1024 + 512 * 8 * 3 + 512 * 8 * 1.5 + 1536 = 512 + 12288 + 1024 + 1024 + 12288 + 6144
    # + 1536 = 34,816
    ("h200", "deepseek-v3", 8, 8, 143155, 512 + 12288 + 1024 + 1024 + 12288 + 6144 + 1536),
    # B200: usable 178.35 GiB = 182,630.4 -> 182,630 MiB (>= 160 GiB): C 16384, b 512; Qwen3-235B-A22B (GQA, no MLA)
    # with DP attention 8: 512 + 16384 * 1.5 + 1024 + 512 * 2 + 512 * 8 * 3 + 512 * 8 * 1.5 + 74 * 8
    # = 512 + 24576 + 1024 + 1024 + 12288 + 6144 + 592 = 46,160
    ("b200", "qwen3-235b-a22b", 8, 8, 182630, 512 + 24576 + 1024 + 1024 + 12288 + 6144 + 592),
    # L4: no measured figure, the label 24 GiB = 24,576 MiB (< 35 GiB): C 4096, b 48 (tp 1 < 4);
    # 512 + 4096 * 1.5 + 128 + 48 * 2 + 50 * 8 = 512 + 6144 + 128 + 96 + 400 = 7,280 (no floor: not above 60 GiB)
    ("l4", "llama-3.1-8b", 1, 1, 24576, 512 + 6144 + 128 + 96 + 400),
    # A100 40GB: usable 39.50 GiB = 40,448 MiB (< 60 GiB): C 4096, b 160 (tp 4 >= 4);
    # 512 + 6144 + 4 / 8 * 1024 + 160 * 2 + 50 * 8 = 512 + 6144 + 512 + 320 + 400 = 7,888
    ("a100-40gb", "llama-3.1-70b", 4, 1, 40448, 512 + 6144 + 512 + 320 + 400),
]


@pytest.mark.parametrize(("chip", "model", "tp", "dp", "gpu_mem", "reserved"), CASES)
def test_default_mem_fraction_static(chip, model, tp, dp, gpu_mem, reserved):
    c = load_node_or_chip(chip)[0]
    assert profiles.device_mib(c) == gpu_mem
    r = profiles.static_reserve(_opts(), c, load_model(model).arch, tp, 1, dp)
    assert r.reserved_mib == reserved
    assert r.fraction == _fraction(gpu_mem, reserved)


def test_the_worked_fractions():
    """The shares of the cases above, written out: (81079 - 13904) / 81079 = 0.8285 -> 0.829;
    (143155 - 15312) / 143155 = 0.8930; (143155 - 34816) / 143155 = 0.7568; (182630 - 46160) / 182630 = 0.7473;
    (24576 - 7280) / 24576 = 0.7038; (40448 - 7888) / 40448 = 0.8050."""
    got = [profiles.static_reserve(_opts(), load_node_or_chip(c)[0], load_model(m).arch, tp, 1, dp).fraction
           for c, m, tp, dp, _, _ in CASES]
    assert got == [0.829, 0.893, 0.757, 0.747, 0.704, 0.805]


def test_the_floor_and_the_pipeline():
    """Above 60 GiB the reserve is at least 10 GiB; a pipeline (pp > 1) turns the prefill graph off (breakable
    prefill graphs are opt-in under PP) and adds 128 MiB per rank; an AMD chip runs no prefill graph (tc_piecewise
    is off on HIP). An 8B model on an H100, TP 1, PP 2: 512 + 12288 + 1 * 2 / 8 * 1024 + 512 = 13,568."""
    c = load_node_or_chip("h100-sxm")[0]
    arch = load_model("llama-3.1-8b").arch
    assert profiles.static_reserve(_opts(), c, arch, 1, 2).reserved_mib == 512 + 12288 + 256 + 512
    # a 64 GiB device (65,536 MiB > 61,440), C 8192, b 256: 512 + 12288 + 128 + 512 + 464 = 13,904 > 10,240; with
    # every term small the floor binds: a 64 GiB device with a 2048-token chunk would keep 10,240
    small = {**_opts()["mem_fraction_static_reserve"]}
    from aicalc.core.capacity import static_reserve_mib

    assert static_reserve_mib(65536, 2048, 8, 1, 1, 1, 0.0, small) == 10240
    assert static_reserve_mib(61440, 2048, 8, 1, 1, 1, 0.0, small) == 512 + 3072 + 128 + 16  # not above 60 GiB
    mi300x = load_node_or_chip("mi300x")[0]  # 192 GiB label = 196,608 MiB: C 16384, b 512
    assert profiles.static_reserve(_opts(), mi300x, arch, 8).reserved_mib == 512 + 24576 + 1024 + 1024


@pytest.mark.parametrize(("gib", "tokens", "graph_tp1", "graph_tp4"), [
    (16, 2048, 8, 8), (19.99, 2048, 8, 8), (20, 4096, 48, 160), (34.99, 4096, 48, 160), (35, 4096, 32, 160),
    (59.99, 4096, 32, 160), (60, 8192, 256, 512), (159.99, 8192, 256, 512), (160, 16384, 512, 512),
    (288, 16384, 512, 512)])
def test_chunk_and_graph_batch_by_memory(gib, tokens, graph_tp1, graph_tp4):
    """The bands of handle_gpu_memory_settings, at their edges ('if gpu_mem < 20 * 1024', ...)."""
    chip = SimpleNamespace(memory_bytes=gib * GIB, name="gpu", kind="gpu")
    assert profiles.token_budget(_opts(), chip) == tokens
    assert profiles._chip_rule(_opts(), "cuda_graph_max_bs", chip, 1) == graph_tp1
    assert profiles._chip_rule(_opts(), "cuda_graph_max_bs", chip, 4) == graph_tp4


@pytest.mark.parametrize(("chip", "tokens"), [("l4", 4096), ("rtx-4090", 4096), ("a100-40gb", 4096), ("l40s", 4096),
                                              ("a100-80gb", 8192), ("h100-sxm", 8192), ("h200", 8192),
                                              ("b200", 16384), ("mi300x", 16384)])
def test_token_budget_by_chip(chip, tokens):
    """The simulator's step budget under SGLang is its --chunked-prefill-size on the chip."""
    assert profiles.token_budget(_opts(), load_node_or_chip(chip)[0]) == tokens


def test_the_pool_is_the_share_less_the_weights():
    """profile_available_bytes: rest = available - total * (1 - mem_fraction_static): the pool is the share of the
    memory less the weights, with no generic runtime overhead taken off too; a given share wins."""
    from aicalc.api.serving import kv_memory
    from aicalc.core import capacity

    chip = load_node_or_chip("h100-sxm")[0]
    arch = load_model("llama-3.1-8b").arch
    w = 16_060_522_496.0  # 8,030,261,248 bf16 parameters
    m = kv_memory(chip, _opts(), arch, w, 1)
    assert (m.utilization, m.given) == (0.829, False)
    assert m.budget == np.ceil(85_017_493_504 * 0.829) - w
    assert m.overhead == pytest.approx(85_017_493_504 * (1 - 0.829))
    g = kv_memory(chip, _opts(), arch, w, 1, utilization=0.835)
    assert (g.utilization, g.given, g.budget) == (0.835, True, np.ceil(85_017_493_504 * 0.835) - w)
    v = kv_memory(chip, profiles.load("engine", "vllm").options, arch, w, 1)  # vLLM: 0.9, less the overhead
    assert v.reserve is None and v.budget == np.ceil(85_017_493_504 * 0.9) - w - capacity.runtime_overhead_bytes(arch)


def test_max_concurrency_at_the_default_share():
    """Llama 3.1 8B on an H100 under SGLang, 1024 + 256 tokens: pool = ceil(85,017,493,504 * 0.829) -
    16,060,522,496 = 54,418,979,619 B; blocks of 16 tokens at 131,072 B a token (2 * 8 heads * 128 * 32 layers *
    2 B): floor(54,418,979,619 / 2,097,152) = 25,949; a request holds 1024 + 128 = 1152 tokens = 72 blocks:
    25,949 // 72 = 360. At --mem-fraction-static 0.9: ceil(76,515,744,153.6) - 16,060,522,496 = 60,455,221,658 B,
    28,827 blocks, 400 requests. The pool-derived cap, min(T // 2, min(max(T / 131,072 * 512, 2048), 4096)), is
    2048 at either (T = 415,184 or 461,239 tokens)."""
    import aicalc

    assert aicalc.max_concurrency("llama-3.1-8b", "h100-sxm", engine="sglang") == 360
    assert aicalc.max_concurrency("llama-3.1-8b", "h100-sxm", engine="sglang", utilization=0.9) == 400


def test_roofline_fits_within_the_share():
    """roofline's fits under SGLang: weights + KV within the share. 50 sequences of 8000 + 1000 tokens: 9000 *
    131,072 * 50 = 58,982,400,000 B + 16,060,522,496 of weights = 75,042,922,496 B, above ceil(85,017,493,504 *
    0.829) = 70,479,502,115 but within ceil(85,017,493,504 * 0.95) = 80,766,618,829."""
    import aicalc

    kw = dict(batch=[1, 50], prompt=8000, gen=1000, engine="sglang")
    assert aicalc.roofline("llama-3.1-8b", "h100-sxm", **kw)["fits"].tolist() == [True, False]
    assert aicalc.roofline("llama-3.1-8b", "h100-sxm", utilization=0.95, **kw)["fits"].tolist() == [True, True]
    assert aicalc.roofline("llama-3.1-8b", "h100-sxm", batch=50, prompt=8000, gen=1000)["fits"].tolist() == [True]


def test_roofline_fits_the_swa_pools():
    """gpt-oss-20b (12 full + 12 sliding layers, window 128, 2 * 8 * 64 * 2 = 2048 B a token and layer) under SGLang
    on an H100: the pools share ceil(85,017,493,504 * 0.829) - W bytes (W the row's weights); at ratio r a full token
    costs 2048 * (12 + 12 r); full = floor(pool / that), swa = floor(full * r); requests of 5000 tokens:
    min(full // 5000, swa // 128)."""
    import aicalc

    batch = 200
    for r in (0.05, 0.01):
        row = aicalc.roofline("gpt-oss-20b", "h100-sxm", batch=batch, prompt=4000, gen=1000, engine="sglang",
                              swa_full_tokens_ratio=r)
        pool = np.ceil(85_017_493_504 * 0.829) - float(row["weights_bytes_per_device"][0])
        full = np.floor(pool / (2048 * (12 + 12 * r)))
        held = min(full // 5000, np.floor(full * r) // 128)
        assert bool(row["fits"][0]) == (held >= batch)
    # r = 0.05: the full pool binds (about 439 requests); r = 0.01: the SWA pool holds about 171 windows
    assert aicalc.roofline("gpt-oss-20b", "h100-sxm", batch=batch, prompt=4000, gen=1000, engine="sglang",
                           swa_full_tokens_ratio=0.05)["fits"][0]
    assert not aicalc.roofline("gpt-oss-20b", "h100-sxm", batch=batch, prompt=4000, gen=1000, engine="sglang",
                               swa_full_tokens_ratio=0.01)["fits"][0]


def test_cli_mem_fraction_static(cli):
    base = ("serve", "llama-3.1-8b", "--chip", "h100-sxm", "--engine", "sglang", "--concurrency", "max", "--json")
    r = cli(*base)
    assert r.code == 0
    inp = r.json["inputs"]
    assert (inp["mem_fraction_static"], inp["mem_fraction_static_given"], inp["chunked_prefill_size"]) == \
        (0.829, False, 8192)
    assert r.json["rows"][0]["concurrency"] == 360  # test_max_concurrency_at_the_default_share
    r = cli(*base, "--mem-fraction-static", "90%")
    assert r.code == 0 and r.json["inputs"]["mem_fraction_static"] == 0.9 and r.json["rows"][0]["concurrency"] == 400
    table = cli(*base[:-1], width=300).out
    assert "memory: weights and KV pool take 0.829 of each device's 81,079 MiB" in table
    assert "13,904 MiB for activations and CUDA graphs (chunked prefill 8,192 tokens" in table
    roof = cli("roofline", "llama-3.1-8b", "--chip", "h100-sxm", "--engine", "sglang", "--batch", "50", "--prompt",
               "8000", "--gen", "1000", "--mem-fraction-static", "0.95", "--json")
    assert roof.code == 0 and all(x["fits"] for x in roof.json["rows"])
    assert cli("roofline", "llama-3.1-8b", "--chip", "h100-sxm", "--engine", "sglang", "--batch", "50", "--prompt",
               "8000", "--gen", "1000", "--json").code == 1  # exceeds 0.829 of the memory


def test_cli_swa_full_tokens_ratio(cli):
    args = ("serve", "gpt-oss-20b", "--chip", "h100-sxm", "--engine", "sglang", "--concurrency", "max", "--prompt",
            "4000", "--gen", "2000", "--json")
    wide, narrow = cli(*args, "--swa-full-tokens-ratio", "0.8"), cli(*args, "--swa-full-tokens-ratio", "0.01")
    assert wide.code == 0 and narrow.code == 0
    assert narrow.json["inputs"]["swa_full_tokens_ratio"] == 0.01
    # 0.01: a pool of 0.01 SWA tokens per full token holds few 128-token windows, so fewer requests
    assert narrow.json["rows"][0]["concurrency"] < wide.json["rows"][0]["concurrency"]


@pytest.mark.parametrize(("args", "message"), [
    (("serve", "--engine", "sglang", "--mem-fraction-static", "1.5"), "--mem-fraction-static 1.5 is not a fraction"),
    (("serve", "--engine", "sglang", "--mem-fraction-static", "0"), "--mem-fraction-static 0 is not a fraction"),
    (("serve", "--engine", "sglang", "--mem-fraction-static", "abc"), "--mem-fraction-static abc is not a fraction"),
    (("serve", "--engine", "vllm", "--mem-fraction-static", "0.8"), "give it with --engine sglang"),
    (("serve", "--mem-fraction-static", "0.8"), "the estimate's engine is generic"),
    (("roofline", "--mem-fraction-static", "0.8"), "give it with --engine sglang"),
    (("roofline", "--engine", "trtllm", "--mem-fraction-static", "0.8"), "the estimate's engine is trtllm"),
    (("serve", "--engine", "sglang", "--mem-fraction-static", "0.8", "--search", "--chips", "8"),
     "--search sizes each deployment"),
    (("serve", "--engine", "sglang", "--swa-full-tokens-ratio", "0"), "--swa-full-tokens-ratio 0 must be a number "
                                                                      "above 0 and at most 16"),
    (("serve", "--engine", "sglang", "--swa-full-tokens-ratio", "17"), "at most 16"),
    (("serve", "--engine", "sglang", "--swa-full-tokens-ratio", "x"), "--swa-full-tokens-ratio x is not a number"),
    (("serve", "--engine", "vllm", "--swa-full-tokens-ratio", "0.5"), "applies to an engine that sizes a "
                                                                      "sliding-window pool apart (sglang), not vllm"),
    (("roofline", "--engine", "vllm", "--swa-full-tokens-ratio", "0.5"), "(sglang), not vllm"),
    (("serve", "--engine", "sglang", "--swa-full-tokens-ratio", "0.5", "--rate", "2"), "runs one KV pool"),
])
def test_bad_values_are_one_line(cli, args, message):
    command, *rest = args
    r = cli(command, "gpt-oss-20b", "--chip", "h100-sxm", *rest)
    assert r.code == 2, r.err
    assert message in r.err and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err


def test_rules_are_checked():
    """A malformed rule or reserve is refused naming what is wrong."""
    assert profiles._seq_rules([{"min_memory_gib": 60, "min_tp": 4, "value": 512}]) is None
    assert "min_tp" in profiles._seq_rules([{"min_memory_gib": 60, "min_tp": 0, "value": 512}])
    good = dict(_opts()["mem_fraction_static_reserve"])
    assert profiles._reserve(good) is None
    assert "must be a mapping" in profiles._reserve({k: v for k, v in good.items() if k != "floor_mib"})
    assert "floor_mib" in profiles._reserve({**good, "floor_mib": -1})
    assert "prefill_graph_sizes" in profiles._reserve({**good, "prefill_graph_sizes": [[4, 2, 1]]})
    assert "prefill_graph_vendors" in profiles._reserve({**good, "prefill_graph_vendors": "NVIDIA"})


def test_cli_gpu_memory_utilization(cli):
    """serve --gpu-memory-utilization: vLLM's share of the whole memory (its KV budget u·M − weights − overhead), so
    a tenth less memory holds 0.1·M / (bytes a request holds) fewer requests. Llama-3.1-8B: 2 × 32 layers × 8 KV
    heads × 128 × 2 B = 131,072 B a token; ``--concurrency max`` holds prompt + gen/2 = 1,024 + 128 tokens a
    request (vLLM's 16-token blocks divide it)."""
    import aicalc

    base = ("serve", "llama-3.1-8b", "--chip", "h100-sxm", "--engine", "vllm", "--concurrency", "max", "--json")
    at_09, at_08 = cli(*base), cli(*base, "--gpu-memory-utilization", "80%")
    assert at_09.code == 0 and at_08.code == 0, at_08.err
    assert (at_09.json["inputs"]["gpu_memory_utilization"], at_08.json["inputs"]["gpu_memory_utilization"]) == \
        (0.9, 0.8)
    per_request = 2 * 32 * 8 * 128 * 2 * (1024 + 128)
    fewer = 0.1 * aicalc.load_chip("h100-sxm").usable_memory_bytes / per_request
    dropped = at_09.json["rows"][0]["concurrency"] - at_08.json["rows"][0]["concurrency"]
    assert abs(dropped - fewer) <= 1
    emitted = cli(*base[:-1], "--gpu-memory-utilization", "0.85", "--emit", "vllm").out
    assert "--gpu-memory-utilization 0.85" in emitted


@pytest.mark.parametrize(("args", "message"), [
    (("--engine", "sglang", "--gpu-memory-utilization", "0.8"), "sglang's is --mem-fraction-static"),
    (("--engine", "sglang", "--gpu-memory-utilization", "0.8", "--mem-fraction-static", "0.8"), "give the one"),
    (("--gpu-memory-utilization", "1.5"), "--gpu-memory-utilization 1.5 is not a fraction"),
    (("--gpu-memory-utilization", "0.8", "--search", "--chips", "8"), "--search sizes each deployment"),
])
def test_gpu_memory_utilization_refusals(cli, args, message):
    r = cli("serve", "llama-3.1-8b", "--chip", "h100-sxm", *args)
    assert r.code == 2, r.err
    assert message in r.err and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err
