"""Predictive accuracy: estimates vs the measured DE/PF/SV/TT rows, one default efficiency model for all.

The cases are data (``tests/data/validation/perf_cases.json``: the public-API call, the metric it reads, the
published measurement); this test evaluates each through ``aicalc`` itself. Goals: geometric-mean error
≤ 15 %, no scored case worse than 35 %. ``validation/perf_cases.py --check`` confirms the data and
docs/validation-perf.md are what the script generates.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

import aicalc

from conftest import DATA, ROOT

CASES = json.loads((DATA / "validation" / "perf_cases.json").read_text())["cases"]
IDEAL = {"output_tokens_per_s": "ideal_output_tokens_per_s", "ttft_s": "ideal_ttft_s", "tpot_s": "ideal_tpot_s",
         "mfu": "ideal_mfu"}


def geomean(errors):
    return math.exp(sum(math.log1p(e) for e in errors) / len(errors)) - 1.0


def read(c, x):
    """The published figure's quantity from the estimate's column (per sequence, per chip, prompt tokens/s)."""
    a = c["args"]
    x = {"inverse": lambda: 1.0 / x, "per_tp": lambda: x / a["tp"],
         "prompt_rate": lambda: a["batch"] * a["prompt"] / x}.get(c["transform"], lambda: x)()
    return x * c.get("scale", 1.0)  # whole system: replicas of the TP group


def evaluate(c):
    try:
        r = getattr(aicalc, c["api"])(**c["args"])
    except aicalc.AicalcError:
        if c["scored"]:
            raise
        return math.nan, math.nan, math.nan  # an unscored case aicalc refuses (its why_not says so)
    est = read(c, float(r[c["metric"]][0]))
    ideal = IDEAL.get(c["metric"])
    if ideal is None:  # tokens/s per chip or step time: the ideal bound through the ideal total time
        ratio = float(r["ideal_total_time_s"][0]) / float(r["total_time_s"][0])
        ideal_v = est * ratio if c["metric"] in ("step_s", "chip_hours") else est / ratio
    elif "ideal_args" in c:  # a simulated benchmark run (trtllm-bench's requests at once): the steady state's bound
        ideal_v = read(c, float(aicalc.serve(**c["ideal_args"])[ideal][0]))
    else:
        ideal_v = read(c, float(r[ideal][0]))
    return est, ideal_v, abs(est / c["measured"] - 1.0)


@pytest.fixture(scope="module")
def results():
    return [(c, *evaluate(c)) for c in CASES]


REFERENCE = "shared/reference/validation-cases.md"


def test_error_goals_on_the_reference_rows(results):
    scored = [e for c, _, _, e in results if c["scored"] and c["source"] == REFERENCE]
    assert len(scored) >= 50
    assert geomean(scored) <= 0.15
    worst = max((e, c["id"]) for c, _, _, e in results if c["scored"] and c["source"] == REFERENCE)
    assert worst[0] <= 0.35, worst


def test_held_out_published_inference(results):
    """Published inference measurements the profiles never saw (docs/validation-perf.md): at least 40 in at least
    6 regimes, geometric-mean error within the 15 % goal (9.5 % now: held at 10 %), and no case worse than the 50 %
    goal (36 % now: held at 40 %). The TPU rows are a known gap with their own bound (test_tpu_serving_rows)."""
    held = [(c, e) for c, _, _, e in results if c["scored"] and c.get("collection") == "inference"
            and not c["calibration"] and c["regime"] != "tpu"]
    assert len(held) >= 40 and len({c["regime"] for c, _ in held}) >= 6
    assert geomean([e for _, e in held]) <= 0.10
    worst = max((e, c["id"]) for c, e in held)
    assert worst[0] <= 0.40, worst


def test_tpu_serving_rows(results):
    """Published TPU serving rows with a fixed concurrency and lengths (validation/cases/inference.yaml TI-*: vLLM TPU
    on v6e-8, SGLang-JAX on v6e-4 and TPU7x). The tpu class's attention_bandwidth was fitted on TI-03/04/07/08,
    TPU7x's step_overhead_s on TI-13/14; the held-out rows' geometric-mean error is 15.2 % now (the v6e rows
    1-17 %, TPU7x's Llama-3.3-70B and Qwen3-30B-A3B rows 10-20 %, Llama-3.1-8B at 16 requests 1.7-1.9x fast), held
    at 20 %; the goal is the 15 % of the GPU rows (docs/validation-perf.md says what is left). The rows aicalc
    cannot price say why."""
    rows = [(c, e) for c, _, _, e in results if c.get("collection") == "inference" and c["id"].startswith("TI-")]
    held = [e for c, e in rows if c["scored"] and not c["calibration"]]
    assert len(held) >= 16 and geomean(held) <= 0.20
    assert all(c["why_not"] for c, _ in rows if not c["scored"])


def test_tpu_training_rows(results):
    """Published MaxText training rows on TPU (validation/cases/training.yaml group tpu, the TPU rows of group moe and
    of moe-training.yaml: v4, v5e, v5p, v6e and TPU7x), all held out but the six calibration rows: 44 scored now,
    geometric-mean error 13.5 %, held at 15 % (the 15 % goal). aicalc is faster than 11 of the 16 TPU7x rows, which
    have no GEMM plateau of their own (docs/validation-train.md says what is left). The int8 (AQT) rows, which
    train_time does not price, say why they are not scored."""
    rows = [(c, e) for c, _, _, e in results if c["api"] == "train_time" and c["args"]["chip"].startswith("tpu")]
    held = [e for c, e in rows if c["scored"] and not c["calibration"]]
    assert len(held) >= 40 and geomean(held) <= 0.15
    assert all(c["why_not"] for c, _ in rows if not c["scored"])


def test_ideal_is_optimistic(results):
    """The bare roofline is a bound: faster than the measurement for every throughput/latency row, except where
    the case assumes per-query-head K/V reads at long generation (an assumption about the kernel, not a bound)."""
    for c, _est, ideal, _ in results:
        if c["source"] != REFERENCE:
            continue
        if c["kind"] == "serving" and c["args"].get("kv_shared") is False and c["args"]["gen"] > 1000:
            continue
        if c["unit"] in ("s", "s/iteration"):
            assert ideal < c["measured"], c["id"]
        else:
            assert ideal > c["measured"], c["id"]


@pytest.mark.parametrize("kind", ["decode", "prefill", "serving", "training"])
def test_each_kind_covered(results, kind):
    errs = [e for c, _, _, e in results if c["kind"] == kind and c["scored"] and c["source"] == REFERENCE]
    assert errs and geomean(errs) <= 0.2


def test_committed_table_and_data_are_current():
    done = subprocess.run([sys.executable, str(ROOT / "validation" / "perf_cases.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("collection, kind, bound", [("moe-serving", "inference", 0.25), ("moe-training", "training", 0.35),
                                                     ("trtllm-1x", "inference", 0.16)])
def test_moe_era_measurements(results, collection, kind, bound):
    """Published MoE serving (TensorRT-LLM 1.x, SGLang, llama.cpp, MLX, Cerebras) and MoE pre-training
    (Megatron-Bridge, MaxText) rows of validation/cases/moe-*.yaml, with their dense companions, and the rest of
    TensorRT-LLM 1.x's overview (trtllm-1x.yaml, all held out): the held-out rows' geometric-mean error as of the
    grouped-GEMM model (moe-serving 22 %, moe-training 32 %; trtllm-1x 16 % priced as a steady state, 13.5 % as
    the benchmark ran: its stated number of requests queued at once, simulated; the goal is 15 %,
    docs/validation-perf.md and docs/validation-train.md say what is left). Refused layouts are reported, never
    silently dropped: they are the rows that are not scored."""
    rows = [(c, e) for c, _, _, e in results if c.get("collection") == collection]
    held = [e for c, e in rows if c["scored"] and not c["calibration"]]
    assert len(held) >= 8 and geomean(held) <= bound
    assert all(c["why_not"] for c, _ in rows if not c["scored"])
