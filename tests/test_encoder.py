"""Encoders (BERT, RoBERTa) as transformers builds and HF Trainer trains them: exact parameters, the measured peak of
TM-32 (``shared/reference/validation-cases.md``), the settings that set it (gradients kept between steps, a
per-parameter AdamW loop), and a clear refusal wherever a command prices serving."""

from __future__ import annotations

from pathlib import Path

import pytest

import aicalc
from aicalc.errors import AicalcError

from conftest import model_preset

BERT = "bert-large-uncased"
MIB = 2**20
# TM-32: HF Trainer, bert-large-uncased as AutoModelForSequenceClassification, one V100, fp32, AdamW, seq 512;
# nvidia-smi "used" in MiB, the CUDA context measured on its own (1343 MiB)
CONTEXT = 1343 * MIB
TM32 = [({"batch": 4}, 14949), ({"batch": 1, "microbatches": 4}, 8681),
        ({"batch": 1, "microbatches": 4, "recompute": "full"}, 6775)]


def _tm32(kw):
    # transformers 4.27's Trainer: eager attention, model.zero_grad() on PyTorch < 2.0 (set_to_none=False), and its
    # own AdamW, a loop over the parameters
    return aicalc.train_memory(BERT, seq=512, precision="fp32", attention="eager", grads_kept=True, adamw="loop",
                               overhead=CONTEXT, **kw)


@pytest.mark.parametrize("kw, used_mib", TM32, ids=["batch4", "batch1-accum4", "batch1-accum4-checkpointing"])
def test_tm32_bert_large_within_10_percent(kw, used_mib):
    est = float(_tm32(kw).peak_reserved_bytes[0])
    assert est / (used_mib * MIB) - 1 == pytest.approx(0.0, abs=0.10)


def test_bert_large_parameters_are_transformers_count():
    # BertForSequenceClassification over bert-large-uncased's config, two labels: the embeddings (30522 + 512 + 2
    # rows of 1024, a LayerNorm), 24 layers of 4 biased 1024² projections, 1024→4096→1024 with biases and two
    # LayerNorms, the pooler (1024² + 1024) and the classifier (1024·2 + 2), counted by hand
    H, F = 1024, 4096
    layer = 4 * (H * H + H) + (H * F + F) + (F * H + H) + 2 * 2 * H
    expected = (30522 + 512 + 2) * H + 2 * H + 24 * layer + H * H + H + 2 * H + 2
    assert int(aicalc.train_memory(BERT).params[0]) == expected == 335_143_938


def test_no_token_wide_logits():
    # an encoder's loss is over B × labels: nothing in the step scales with the vocabulary beyond the embedding
    # table, so doubling the vocabulary adds its rows' weights and two AdamW states (12 B a parameter in fp32; the
    # peak is at the start of the backward, before the gradients are made) and nothing else
    cfg = model_preset(BERT)["config"]
    one = aicalc.train_memory(cfg, batch=4, seq=512, precision="fp32")
    two = aicalc.train_memory({**cfg, "vocab_size": 2 * cfg["vocab_size"]}, batch=4, seq=512, precision="fp32")
    rows = cfg["vocab_size"] * cfg["hidden_size"]
    assert one.peak_phase[0] == two.peak_phase[0] == "backward"
    assert float(two.peak_allocated_bytes[0] - one.peak_allocated_bytes[0]) == pytest.approx(12 * rows, rel=1e-6)
    assert float(one.loss_transient_bytes[0]) == 0.0


def test_adamw_loop_holds_two_temporaries_of_the_largest_parameter():
    # torch's single-tensor AdamW: (exp_avg_sq.sqrt() / bias_correction2_sqrt) lives with its quotient; the largest
    # parameter is the word embedding, 30522 × 1024 fp32
    step = float(_tm32({"batch": 1}).optimizer_step_bytes[0])
    assert step == 2 * 30522 * 1024 * 4


def test_kept_gradients_are_held_at_the_loss():
    free = aicalc.train_memory(BERT, batch=4, seq=512, precision="fp32", attention="eager")
    kept = aicalc.train_memory(BERT, batch=4, seq=512, precision="fp32", attention="eager", grads_kept=True)
    grads = float(free.gradients_bytes[0])
    assert grads == 4 * 335_143_938
    assert float(kept.peak_allocated_bytes[0] - free.peak_allocated_bytes[0]) == pytest.approx(grads, rel=0.02)


@pytest.mark.parametrize("args", [
    ["kv-cache", BERT],
    ["roofline", BERT, "--chip", "h100-sxm"],
    ["serve", BERT, "--chip", "h100-sxm"],
    ["compare", BERT, "--chip", "h100-sxm"],
])
def test_serving_commands_refuse_an_encoder(cli, args):
    r = cli(*args)
    assert r.code == 2
    assert "is an encoder" in r.err and len(r.err.strip().splitlines()) == 1


@pytest.mark.parametrize("kw, name", [({"framework": "megatron"}, "framework"), ({"tp": 2}, "tp"),
                                      ({"compile": True}, "compile"),
                                      ({"lora_rank": 8, "quant": "nf4", "seq": 512}, "quant")])
def test_encoder_layouts_not_modelled_are_refused(kw, name):
    with pytest.raises(AicalcError, match=name):
        aicalc.train_memory(BERT, **kw)


@pytest.mark.parametrize("model, params", [("roberta-base", 124_647_170), ("bert-base-uncased", 109_483_778)])
def test_encoder_presets_count_the_classifier(model, params):
    # RobertaForSequenceClassification / BertForSequenceClassification on the meta device (transformers 5.23):
    # RoBERTa's head (dense + out_proj) has the pooler's shape
    assert int(aicalc.train_memory(model).params[0]) == params


def test_presets_show_an_encoder_without_a_kv_cache(cli):
    row = cli("presets", "show", BERT, "--json").json["rows"][0]
    assert row["kv_bytes_per_token"] is None and row["classifier_labels"] == 2


def test_training_flops_attend_both_ways_and_have_no_lm_head():
    # against the same shape read as a causal LM: the causal count halves the 2·L·s·A·(d_qk + d_v) attention FLOPs
    # of a token's forward (×3 with the backward), and the LM head adds 6·V·H; an encoder has neither
    from aicalc.api.catalog import load_model
    from aicalc.core import train_time as tt
    from aicalc.core.forward import shape_of

    arch = load_model(BERT).arch
    enc = tt.flops_per_token(shape_of(arch), 512.0, attention_flops="causal")[0]
    dec = tt.flops_per_token(shape_of(arch._replace(encoder=False)), 512.0, attention_flops="causal")[0]
    attention = 3 * 2 * 24 * 512 * 16 * (64 + 64)
    assert enc - dec == attention / 2 - 6 * 30522 * 1024


def test_train_time_prices_an_encoder_as_the_trainer_runs_it(cli):
    r = cli("train-time", BERT, "--chip", "h100-sxm", "--chips", "8", "--tokens", "1B", "--seq", "512", "--json")
    assert r.code == 0, r.err
    # without --framework: the FSDP profile (ZeRO-3) and no recompute, not Megatron's selective recompute
    assert r.json["inputs"]["recompute"] == "none" and r.json["inputs"]["zero"] == [3]
    assert r.json["rows"][0]["fits"] is True
    table = cli("train-time", BERT, "--chip", "h100-sxm", "--chips", "8", "--tokens", "1B", "--seq", "512")
    assert "attends both ways" in table.out and "6·V·H" not in table.out


@pytest.mark.parametrize("model, rows", [("bert-base-uncased", 512), ("roberta-base", 512), ("gpt2", 1024)])
def test_a_sequence_past_the_learned_positions_is_warned(model, rows):
    # transformers indexes a learned position table by position: a longer sequence cannot run
    assert not aicalc.train_memory(model, seq=rows).warnings
    assert any(f"{rows:,} learned positions" in w for w in aicalc.train_memory(model, seq=rows + 1).warnings)


def test_searches_lay_an_encoder_out_data_parallel(cli):
    mem = cli("train-mem", BERT, "--search", "--chips", "8", "--chip", "h100-sxm", "--seq", "512", "--json").json
    assert mem["rows"] and {(r["tp"], r["pp"], r["cp"], r["dp"]) for r in mem["rows"]} == {(1, 1, 1, 8)}
    t = cli("train-time", BERT, "--chip", "h100-sxm", "--chips", "8", "--tokens", "1B", "--seq", "512", "--search",
            "--json")
    assert t.code == 0 and {(r["tp"], r["pp"]) for r in t.json["rows"]} == {(1, 1)}


def test_what_an_encoder_gives_up_to_fit_names_adapters_but_no_4bit_base(cli):
    # LoRA on an encoder is modelled (the bert-style lora records), its 4-bit base is not offered
    r = cli("train-mem", BERT, "--chip", "l4", "--batch", "1024", "--seq", "512")
    assert "fits with none of recompute, ZeRO-3, offload or LoRA" in r.err and "QLoRA" not in r.err
    r = cli("train-mem", BERT, "--chip", "l4", "--batch", "256", "--seq", "512")
    assert "fine-tuning adapters instead, with --lora-rank 16 --recompute full" in r.err


def test_encoder_lora_adapters_are_the_traced_ones():
    """PEFT's adapters on BERT's six linears per layer (query, key, value, attention.output.dense,
    intermediate.dense, output.dense) are r·(in + out) each: the bert-style records' trainable counts, by hand."""
    import json

    from aicalc.catalog.hf_config import arch_from_config
    from aicalc.core import train_memory as tm

    recs = json.loads((Path(__file__).parent / "data" / "validation" / "step_peak.json").read_text())["records"]
    lora = [r for r in recs if r["model"].startswith(("bert", "roberta")) and r.get("lora")]
    assert {r["lora"]["targets"] for r in lora} == {"q,v", "all"}
    for r in lora:
        c = r["config"]
        h, f, n = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
        rank = r["lora"]["rank"]
        by_hand = n * rank * (2 * 2 * h if r["lora"]["targets"] == "q,v" else 4 * 2 * h + 2 * (h + f))
        assert r["trainable_params"] == by_hand
        assert tm.lora_params(arch_from_config(c), rank, tm.lora_targets(r["lora"]["targets"])) == by_hand
