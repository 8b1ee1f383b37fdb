"""``train-mem --trace``: the user's model traced by PyTorch's memory tracker beside the estimate (issue 23).

The traced peak comes from torch (``MemTracker`` under ``FakeTensorMode``, :mod:`aicalc.trace`), not from aicalc's
formulas, so agreeing with the estimate is a real check; the records of ``validation/record_step_peak.py`` hold
the same comparison for 64 configurations. Without torch the option is one line on stderr and exit 2.
"""

from __future__ import annotations

import json

import pytest

from aicalc import trace

TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 4096, "max_position_embeddings": 2048,
        "tie_word_embeddings": False, "hidden_act": "silu"}
needs_torch = pytest.mark.skipif(not trace.available(), reason="the trace extra (torch, transformers) is not installed")


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    return path


def test_without_torch_one_line_hint(cli, tiny, monkeypatch):
    monkeypatch.setattr(trace, "available", lambda: False)
    r = cli("train-mem", tiny, "--trace")
    assert r.code == 2 and r.err.strip().count("\n") == 0 and "pip install 'aicalc[trace]'" in r.err


@pytest.mark.parametrize("argv, words", [
    (("--search", "--chip", "h100-sxm", "--chips", "8"), "--search"),
    (("--dp", "2"), "one device"),
    (("--batch", "1,2,3,4,5"), "at most 4 rows"),
    (("--quant", "nf4", "--lora-rank", "8"), "--quant"),
    (("--lora-rank", "8"), "--precision bf16 or fp32"),
    (("--batch", "64", "--seq", "4096"), "tokens per micro-batch"),
])
def test_refused_before_work(cli, tiny, argv, words):
    r = cli("train-mem", tiny, "--trace", *argv)
    assert r.code == 2 and words in r.err, r.err


def test_refuses_a_model_without_a_config(cli):
    from aicalc.api.catalog import load_model
    from aicalc.commands.train_mem import _trace_rows

    spec = load_model("llama-3.2-3b")
    assert spec.config is not None and spec.config["model_type"] == "llama"
    with pytest.raises(Exception, match="Hugging Face config"):
        _trace_rows(spec._replace(config=None), None, [])


@needs_torch
@pytest.mark.parametrize("argv", [("--precision", "fp32"), ("--precision", "bf16", "--recompute", "full"),
                                  ("--precision", "bf16", "--lora-rank", "8", "--lora-targets", "all")])
def test_traced_peak_beside_the_estimate(cli, tiny, argv):
    r = cli("train-mem", tiny, "--batch", "2", "--seq", "128", "--trace", *argv, "--json")
    assert r.code == 0, r.err
    row = r.json["rows"][0]
    parts = row["traced_breakdown"]
    assert row["traced_peak_bytes"] == sum(parts.values()) > 0
    assert row["traced_phase"].split()[-1] in ("forward", "backward", "optimizer")
    assert row["peak_allocated_bytes"] == pytest.approx(row["traced_peak_bytes"], rel=0.05)


@needs_torch
def test_an_untraceable_step_is_one_line(cli, tmp_path):
    # torch 2.13's meta kernel of _grouped_mm takes bf16 only: fp32 MoE experts cannot be traced on fake tensors
    moe = {**TINY, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(moe))
    r = cli("train-mem", path, "--trace", "--batch", "1", "--seq", "16", "--precision", "fp32")
    assert r.code == 2 and r.err.strip().count("\n") == 0 and "could not trace" in r.err, r.err


@needs_torch
def test_the_notes_say_where_the_cpu_trace_differs_from_a_gpu(cli, tiny, tmp_path):
    """Measured on an H200 (tests/data/measured/h200-step-peak.json): CUDA's SDPA takes its math path for fp32
    with GQA, where the CPU's flash kernel takes it; the CPU's SDPA falls back to its math path under attention
    dropout (GPT-2), where CUDA runs a fused kernel; CPU autocast keeps softmax and pow in bf16."""
    r = cli("train-mem", tiny, "--batch", "1", "--seq", "64", "--trace", "--precision", "fp32")
    assert r.code == 0, r.err
    assert "flash kernel takes fp32 with GQA" in r.out + r.err
    r = cli("train-mem", tiny, "--batch", "1", "--seq", "64", "--trace", "--precision", "bf16")
    assert "trace: " not in r.out + r.err
    gpt2 = {"model_type": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 4, "vocab_size": 1024, "n_positions": 256}
    path = tmp_path / "gpt2.json"
    path.write_text(json.dumps(gpt2))
    r = cli("train-mem", path, "--batch", "1", "--seq", "64", "--trace", "--precision", "bf16-mixed")
    assert r.code == 0, r.err
    text = " ".join((r.out + r.err).split())
    assert "SDPA took its math path" in text and "CPU's autocast" in text, text


@needs_torch
@pytest.mark.parametrize("argv", [(), ("--keep-grads", "--adamw", "loop", "--microbatches", "2"),
                                  ("--lora-rank", "8", "--lora-targets", "all"),
                                  ("--lora-rank", "8", "--lora-targets", "up,down", "--recompute", "full")])
def test_an_encoder_is_traced_as_the_classifier_it_is_sized_as(cli, tmp_path, argv):
    # a small BERT, built by the trace as AutoModelForSequenceClassification and trained on one label per sequence
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "bert", "hidden_size": 256, "intermediate_size": 1024,
                                "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 4096,
                                "max_position_embeddings": 512}))
    precision = "bf16" if "--lora-rank" in argv else "fp32"  # PEFT's fp32 adapters on a bf16 base
    r = cli("train-mem", path, "--batch", "2", "--seq", "256", "--precision", precision, "--attention", "eager",
            "--trace", *argv, "--json")
    assert r.code == 0, r.err
    row = r.json["rows"][0]
    assert row["peak_allocated_bytes"] == pytest.approx(row["traced_peak_bytes"], rel=0.05)
    if "--lora-rank" in argv:  # the adapters on BERT's modules: r·(in + out) each, 2 layers, H 256, F 1024
        per_layer = 8 * (4 * 2 * 256 + 2 * (256 + 1024)) if "all" in argv else 8 * 2 * (256 + 1024)
        assert row["trainable_params"] == 2 * per_layer
        # and the trace trained those modules: AdamW's two fp32 states per adapter parameter, plus its step counter
        # (one 512-byte block) for each of the A and B matrices of 6 or 2 modules in each of the 2 layers
        tensors = 2 * (6 if "all" in argv else 2) * 2
        assert row["traced_breakdown"]["optimizer"] == 8 * 2 * per_layer + 512 * tensors
