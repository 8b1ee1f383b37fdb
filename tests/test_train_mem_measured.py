"""Measured training/fine-tuning memory rows (validation-cases.md §2.5) within stated tolerances.

Each test names the setting it uses and the metric it compares with. Bands follow the file's suggestion:
about ±10 % where model states dominate, wider where activations and transients dominate.
"""

from __future__ import annotations

import json

import pytest

from aicalc.cli import main


def _row(capsys, *argv):
    code = main(["train-mem", *argv, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    return out["rows"][0]


def _states(r):
    return r["weights_bytes"] + r["gradients_bytes"] + r["optimizer_bytes"]


# TM-26: Llama-3.2-3B full fine-tuning, dtype bfloat16 without AMP (aicalc: --precision bf16, torch AdamW
# states in bf16), batch 4, seq 768, one L40S. "mem allocated avg" is sampled after the optimizer step
# (activations freed): weights + grads + AdamW states = 26.07e9 B.
TM26_ARGS = ("llama-3.2-3b", "--precision", "bf16", "--optimizer", "adamw", "--batch", "4", "--seq", "768",
             "--attention", "sdpa")


def test_tm26_states_after_step(capsys):
    r = _row(capsys, *TM26_ARGS)
    assert _states(r) == pytest.approx(26.07e9, rel=0.10)
    assert _states(r) / r["params"] == pytest.approx(8.11, rel=0.02)  # TM-05 vs measured 8.11 B/param


def test_tm26_peak_vs_max_reserved(capsys):
    # cuda_memory_max is the peak *reserved* (≥ allocated) and includes evaluation generation, so it bounds
    # the training peak from above; the estimate must not exceed it by more than 5 % nor fall 15 % below.
    r = _row(capsys, *TM26_ARGS)
    assert 0.85 * 37_241_225_216 <= r["peak_allocated_bytes"] <= 1.05 * 37_241_225_216


# TM-27: same model and setup, LoRA r 32 on q_proj + v_proj (PEFT, fp32 adapters), AdamW.
TM27_ARGS = (*TM26_ARGS, "--lora-rank", "32", "--lora-targets", "q_proj,v_proj")


def test_tm27_states_after_step(capsys):
    r = _row(capsys, *TM27_ARGS)
    assert r["trainable_params"] == 9_175_040
    assert _states(r) == pytest.approx(6.92e9, rel=0.10)


def test_tm27_peak_vs_max_reserved(capsys):
    # activations + loss dominate here: ±15 % of the reserved peak (22.27e9 B).
    r = _row(capsys, *TM27_ARGS)
    assert r["peak_allocated_bytes"] == pytest.approx(22_273_851_392, rel=0.15)


# TM-21: LLaMA-65B QLoRA (NF4 + double quantization + paged optimizers, LoRA r 64 on all linear layers)
# fits one 48 GB GPU; 16-bit full fine-tuning needs more than 780 GB. Setting: the paged optimizer's states
# are modelled as offloaded (--offload optimizer), batch 1 × 512 with gradient checkpointing.
LLAMA_65B = {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 22016, "num_hidden_layers": 80,
             "num_attention_heads": 64, "num_key_value_heads": 64, "vocab_size": 32000,
             "max_position_embeddings": 2048, "tie_word_embeddings": False}


def test_tm21_inequalities(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_65B))
    q = _row(capsys, str(path), "--precision", "bf16", "--lora-rank", "64", "--lora-targets", "all",
             "--quant", "nf4-dq", "--batch", "1", "--seq", "512", "--recompute", "full", "--offload", "optimizer")
    assert q["peak_bytes"] < 48e9
    full = _row(capsys, str(path), "--precision", "bf16-mixed", "--batch", "1", "--seq", "512")
    assert _states(full) > 780e9


# TM-33: GPT-2 1.5B-shaped model (48 layers, h 1600), Adam: 12 B/param of optimizer states = 18 GB; ZeRO-1 over
# 8 ranks leaves 2.25 GB per device.
def test_tm33_zero1_optimizer(tmp_path, capsys):
    cfg = {"model_type": "gpt2", "n_embd": 1600, "n_layer": 48, "n_head": 16, "vocab_size": 50257, "n_positions": 1024}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r0 = _row(capsys, str(path), "--precision", "fp16-mixed")
    r1 = _row(capsys, str(path), "--precision", "fp16-mixed", "--zero", "1", "--dp", "8")
    assert r0["optimizer_bytes"] == pytest.approx(18e9, rel=0.05)
    assert r1["optimizer_bytes"] == pytest.approx(2.25e9, rel=0.05)


# ---------------------------------------------------------------- torchtune (TM-28…TM-31)
#
# torchtune reports torch.cuda memory statistics, which never include the CUDA context, so these compare
# ``peak_allocated_bytes`` (no overhead term). Settings common to the single-device recipes: ``dtype: bf16``
# (pure bf16, no AMP → --precision bf16), ``enable_activation_checkpointing: True`` (→ --recompute full),
# LoRA adapters in the model dtype (→ --lora-dtype bf16), sdpa attention. bitsandbytes *paged* optimizers
# keep their states in CUDA unified memory allocated outside PyTorch's caching allocator, so torch's peak
# does not see them (→ --offload optimizer: the states are reported as host memory). Bands: ±20 % where
# the recipe's settings are known (activations and transients are a large share); rows that general
# assumptions cannot match are asserted as the inequality that holds, and docs/train-mem.md explains them.
GiB = 2**30
TT_COMMON = ("--precision", "bf16", "--recompute", "full", "--attention", "sdpa")

# TM-28 (README @ 30b8519e, Sept 2024): Llama 3.1 8B, batch 2, packed to 2048 tokens, no gradient
# accumulation, compile on. llama3_1/8B_full_single_device: bnb PagedAdamW8bit, optimizer_in_bwd,
# CEWithChunkedOutputLoss (→ --loss chunked). 8B_lora_single_device: r 8 on q, v, output_proj + MLP, AdamW.
# 8B_qlora_single_device: r 8 on q, k, v, output_proj + MLP, NF4 base (torchao, double-quantized scales).
TM28_FULL = ("llama-3.1-8b", *TT_COMMON, "--batch", "2", "--seq", "2048", "--loss", "chunked",
             "--optimizer", "adam8bit", "--offload", "optimizer", "--optimizer-in-backward")
TM28_LORA = ("llama-3.1-8b", *TT_COMMON, "--batch", "2", "--seq", "2048", "--loss", "chunked",
             "--lora-rank", "8", "--lora-targets", "q,v,o,gate,up,down", "--lora-dtype", "bf16")
TM28_QLORA = ("llama-3.1-8b", *TT_COMMON, "--batch", "2", "--seq", "2048", "--loss", "chunked",
              "--lora-rank", "8", "--lora-targets", "all", "--lora-dtype", "bf16", "--quant", "nf4-dq")


def test_tm28_8b_full_4090(capsys):
    r = _row(capsys, *TM28_FULL)
    assert r["peak_allocated_bytes"] == pytest.approx(18.9 * GiB, rel=0.20)


def test_tm28_8b_lora_4090(capsys):
    # +18 %: the estimate's recomputed-layer workspace is the eager saved set; torch.compile saves less
    r = _row(capsys, *TM28_LORA)
    assert r["peak_allocated_bytes"] == pytest.approx(16.2 * GiB, rel=0.25)
    assert r["peak_allocated_bytes"] >= 16.2 * GiB


def test_tm28_8b_qlora_4090_inequality(capsys):
    # not matched (+35 %, see docs): the model states alone stay below the measured peak, the full estimate above
    r = _row(capsys, *TM28_QLORA)
    assert _states(r) < 7.4 * GiB < r["peak_allocated_bytes"]


@pytest.mark.parametrize("args, measured", [(TM28_FULL, 37.4), (TM28_LORA, 30.3)])
def test_tm28_a6000_rows_bracketed(capsys, args, measured):
    # the A6000 (48 GB) rows use more memory than the 4090 configs; their activation-checkpointing setting is
    # not published with the table, so the measurement is bracketed by the estimates with and without it
    ac = _row(capsys, *args)
    no_ac = _row(capsys, *[a if a != "full" else "none" for a in args])
    assert ac["peak_allocated_bytes"] < measured * GiB < no_ac["peak_allocated_bytes"]


# TM-28's 70B rows (8× A100 80GB, FSDP2 over 8 ranks, batch 2 × 2048 packed, compile on, --compile).
# llama3_1/70B_full: fused torch AdamW, fsdp_cpu_offload (CPUOffloadPolicy: parameters, gradients and optimizer states
# on the host → --offload params) and custom_sharded_layers ['tok_embeddings', 'output'] (→ --fsdp-units split),
# CEWithChunkedOutputLoss. llama3_1/70B_lora: r 16 on q, k, v, no MLP, fused AdamW, the default units (the embedding,
# final norm and output layer in the root), CEWithChunkedOutputLoss. Both recipes checkpoint every layer.
TM28_70B = ("llama-3.1-70b", *TT_COMMON, "--batch", "2", "--seq", "2048", "--loss", "chunked", "--zero", "3",
            "--dp", "8", "--adamw", "fused", "--compile", "--chip", "a100-80gb")


@pytest.mark.parametrize("row, extra, measured_gib", [
    ("70B full", ("--offload", "params", "--fsdp-units", "split"), 13.9),
    ("70B LoRA", ("--lora-rank", "16", "--lora-targets", "q,k,v", "--lora-dtype", "bf16"), 27.6),
])
def test_tm28_70b_8xa100(capsys, row, extra, measured_gib):
    # the full row -5.9 %, the LoRA row +8.7 % (docs/train-mem.md, "Measured rows")
    r = _row(capsys, *TM28_70B, *extra)
    assert r["peak_allocated_bytes"] == pytest.approx(measured_gib * GiB, rel=0.10), row


def test_tm28_70b_full_needs_its_own_units(capsys):
    # with the embedding and output layer in the root (2·V·H bf16 parameters unsharded through the backward, and
    # the output layer's unsharded gradient) the full row is a third over: the recipe's custom_sharded_layers matter
    r = _row(capsys, *TM28_70B, "--offload", "params")
    assert r["peak_allocated_bytes"] > 1.3 * 13.9 * GiB


def test_tm28_405b_qlora_8xa100_bounded(capsys):
    # llama3_1/405B_qlora: r 16 on q, k, v, output_proj + MLP, NF4 base (torchao) sharded with fully_shard per layer
    # and on the root (the bf16 embedding and output layer, 2·V·H, unsharded through the step), batch 1, Alpaca
    # unpacked (its sequence lengths are not published). The sequence-independent part (the sharded states and the
    # unsharded root) lies below the measured 44.8 GB, the estimate at the README's packed 2048 tokens above it.
    args = ("llama-3.1-405b", *TT_COMMON, "--zero", "3", "--dp", "8", "--lora-rank", "16", "--lora-targets", "all",
            "--lora-dtype", "bf16", "--quant", "nf4", "--batch", "1", "--chip", "a100-80gb")
    r = _row(capsys, *args, "--seq", "2048")
    root = 2 * 2 * 128256 * 16384
    assert _states(r) + root < 44.8e9 < r["peak_allocated_bytes"]


def test_peft_fsdp_qlora_70b_2gpu(capsys):
    """PEFT's "Use PEFT QLoRA and FSDP" (docs/source/accelerate/fsdp.md, peft v0.21.2): Llama-2-70B, bnb NF4 with
    double quantization and bf16 quant_storage (the 4-bit data sharded and all-gathered as stored), LoRA r 8 on every
    linear layer (PEFT's fp32 adapters), pure bf16, flash attention, gradient checkpointing, batch 2 × 2048 packed,
    2 gradient-accumulation steps, 2 GPUs, FULL_SHARD: "When disabling CPU offloading, the GPU memory usage is 35.6
    GB/GPU" (a whole-GPU reading: aicalc's reserved peak with the CUDA context). The run is FSDP1 through
    accelerate, priced as fully_shard (FSDP1 holds FSDP2's bytes at the loss on the traced setups, docs)."""
    r = _row(capsys, "llama-2-70b", "--precision", "bf16", "--recompute", "full", "--attention", "flash", "--batch",
             "2", "--seq", "2048", "--zero", "3", "--dp", "2", "--lora-rank", "8", "--lora-targets", "all", "--quant",
             "nf4-dq", "--microbatches", "2", "--chip", "a100-80gb")
    assert r["peak_reserved_bytes"] == pytest.approx(35.6e9, rel=0.10)


# TM-29 (README @ 0217d44c, May 2024): Llama-2-7B batch 4 × 2048; full-sequence CrossEntropyLoss (→ --loss full).
# 7B_full_low_memory: bnb PagedAdamW + optimizer_in_bwd; 7B_lora(_single_device): r 8 on q, v;
# 7B_qlora_single_device: r 8 on q, k, v, output_proj + MLP, NF4; distributed recipes shard with FSDP
# (→ --zero 3 --dp N); 7B_full (4 GPUs): torch AdamW, states in bf16. "GB" is taken as 10^9 B (the README does
# not say; GiB would move the figures by 7 %, inside the band). Which statistic the table shows is not said
# either: the recipes log all three of torchtune/utils/memory.py's ``get_memory_stats`` (``peak_memory_active``
# = ``active_bytes.all.peak``, ``peak_memory_alloc`` = ``max_memory_allocated``, ``peak_memory_reserved`` =
# ``max_memory_reserved``, each / 1e9) when ``log_peak_memory_stats`` is on. The two full-finetune rows are not
# reproduced by torchtune's own developers: the day after, rohan-varma re-ran the 1× 4090 config at batch 4 × 2048
# (pytorch/torchtune PR #961, "Can't reproduce 24.1GB on a single device full finetune and instead seeing 20.2
# peak memory allocated (and similar for reserved)"; kartikayk: "On my A100, I'm getting 22.3"), so reserved
# memory does not explain the gap; both rows print 24.1 GB, 94 % of the card.
# The recipes of that README kept the decoder's fp32 logits (``self.output(h).float()``) referenced through
# ``loss.backward()`` (→ --loss fp32-kept).
TM29_7B = ("llama-2-7b", *TT_COMMON, "--loss", "fp32-kept", "--batch", "4", "--seq", "2048")


@pytest.mark.parametrize(
    "row, extra, measured_gb",
    [
        ("7B LoRA 1x4090", ("--lora-rank", "8", "--lora-targets", "q,v", "--lora-dtype", "bf16"), 21.3),
        ("7B LoRA 2x4090", ("--lora-rank", "8", "--lora-targets", "q,v", "--lora-dtype", "bf16",
                            "--zero", "3", "--dp", "2"), 16.2),
        ("7B QLoRA 1x4090", ("--lora-rank", "8", "--lora-targets", "all", "--lora-dtype", "bf16",
                             "--quant", "nf4-dq"), 12.3),
    ],
)
def test_tm29_llama2_7b(capsys, row, extra, measured_gb):
    # With the recipes' fp32 logits kept through the backward (--loss fp32-kept) these rows are low by 6-14 %
    # (10-22 % without). Band ±25 % (docs/train-mem.md, "Measured rows").
    r = _row(capsys, *TM29_7B, *extra)
    assert r["peak_allocated_bytes"] == pytest.approx(measured_gb * 1e9, rel=0.25), row


def test_tm29_llama2_7b_full_1x4090_remeasured(capsys):
    # the README's 24.1 GB was not reproduced (PR #961 above); the re-measurement, 20.2 GB allocated at batch
    # 4 × 2048 with the same config, is the row's figure; the README's stays an upper bound
    r = _row(capsys, *TM29_7B, "--offload", "optimizer", "--optimizer-in-backward")
    assert r["peak_allocated_bytes"] == pytest.approx(20.2e9, rel=0.10)
    assert r["peak_allocated_bytes"] < 24.1e9


def test_tm29_llama2_7b_full_4x4090_bounded(capsys):
    # FSDP1 FULL_SHARD, pure bf16, torch AdamW: the same 24.1 GB as the unreproduced single-device row, so only
    # bounded: the sharded states stay below the estimate and the estimate below the printed figure
    r = _row(capsys, *TM29_7B, "--zero", "3", "--dp", "4")
    assert _states(r) < r["peak_allocated_bytes"] < 24.1e9


def test_tm29_llama2_70b_full_8xa100(capsys):
    # 70B_full: FSDP over 8, bnb PagedAdamW (states outside torch's allocator), batch 4 × 4096
    r = _row(capsys, "llama-2-70b", *TT_COMMON, "--loss", "fp32-kept", "--batch", "4", "--seq", "4096", "--zero",
             "3", "--dp", "8", "--offload", "optimizer")
    assert r["peak_allocated_bytes"] == pytest.approx(70.4e9, rel=0.20)


@pytest.mark.parametrize("row, chip, extra, measured_gb", [
    ("7B LoRA 2x4090", "rtx-4090", ("llama-2-7b", "--batch", "4", "--seq", "2048", "--lora-rank", "8",
                                    "--lora-targets", "q,v", "--lora-dtype", "bf16", "--zero", "3", "--dp", "2"), 16.2),
    ("70B full 8xA100", "a100-80gb", ("llama-2-70b", "--batch", "4", "--seq", "4096", "--zero", "3", "--dp", "8",
                                      "--offload", "optimizer"), 70.4),
])
def test_tm29_distributed_rows_read_as_reserved(capsys, row, chip, extra, measured_gb):
    # The table names no statistic (the recipes log allocated, active and reserved); the same README's first
    # table (TM-30, @ e59f93c5) printed torch.cuda.max_memory_reserved(). Read so, the two distributed rows,
    # 12-17 % above the allocated estimate, are within 10 % of the reserved one (the estimate's
    # peak_reserved_bytes less the CUDA context and workspaces torch does not count, as for the H200 rows):
    # +6.7 % and +0.6 %. No one reading fits every TM-29 row (the 1x 4090 LoRA row: allocated -5.6 %, reserved
    # +14 %), so each row keeps its own assertion above; docs/train-mem.md, "Measured rows" (1c).
    r = _row(capsys, *extra, *TT_COMMON, "--loss", "fp32-kept", "--chip", chip)
    reserved = r["peak_reserved_bytes"] - r["overhead_bytes"]
    assert reserved == pytest.approx(measured_gb * 1e9, rel=0.10), row
    assert r["peak_allocated_bytes"] < 0.9 * measured_gb * 1e9  # the allocated reading misses by more than 10 %


def test_tm29_llama2_70b_lora_8xa100_inequality(capsys):
    # 26.4 GB is below the checkpointed layer inputs alone at batch 4 × 4096 (80 × 2·16384·8192 B = 21.5 GB) plus
    # the sharded states; the table's batch/sequence cannot both apply to this row (see docs): inequality only
    r = _row(capsys, "llama-2-70b", *TT_COMMON, "--loss", "fp32-kept", "--batch", "4", "--seq", "4096", "--zero",
             "3", "--dp", "8", "--lora-rank", "8", "--lora-targets", "q,k,v,o", "--lora-dtype", "bf16")
    assert _states(r) < 26.4e9 < r["peak_allocated_bytes"]


# TM-30 (README @ e59f93c5, Apr 2024): Llama-2-7B default configs on Alpaca without packing, so the sequence
# length varies per batch and is not published: only the sequence-independent part is checked, the model
# states after init (bf16 base weights, NF4 for QLoRA, one gradient with optimizer-in-backward) stay below
# each measured peak, and the QLoRA < LoRA < full-low-memory ordering of the states holds.
def test_tm30_states_below_measured(capsys):
    base = ("llama-2-7b", "--precision", "bf16", "--batch", "1", "--seq", "256")
    qlora = _row(capsys, *base, "--lora-rank", "8", "--lora-targets", "all", "--quant", "nf4-dq", "--lora-dtype", "bf16")
    lora = _row(capsys, *base, "--lora-rank", "8", "--lora-targets", "q,v", "--lora-dtype", "bf16")
    full = _row(capsys, *base, "--offload", "optimizer", "--optimizer-in-backward")
    assert _states(qlora) < 9.29e9 and _states(lora) < 17.18e9 and _states(full) < 15.97e9
    assert _states(qlora) < _states(lora) < _states(full)


# TM-31 (pytorch/torchtune#1398): llama3_1/8B_qlora_single_device, memory logged right after model init
# (before any batch): peak allocated 6.19 GiB, for the NF4 base (q, k, v, output_proj, MLP quantized; embedding
# and output projection bf16) + bf16 adapters. A *peak* during loading also holds load-time transients (a bf16
# tensor on its way to being quantized or assigned; the largest, the 128256 × 4096 embedding, is 1.05 GB), so
# the resident weights must lie below it and within 15 % of it (the estimate is 13.6 % below).
def test_tm31_qlora_after_init(capsys):
    r = _row(capsys, "llama-3.1-8b", "--precision", "bf16", "--lora-rank", "8", "--lora-targets", "all",
             "--quant", "nf4-dq", "--lora-dtype", "bf16")
    assert 0.85 * 6.19 * GiB < r["weights_bytes"] < 6.19 * GiB


def test_fp32_kept_logits_add_one_fp32_logits_tensor(capsys):
    """--loss fp32-kept holds one more fp32 [B, S, V] tensor than transformers' loss through the loss phase:
    Llama-2-7B at batch 4 × 2048, V 32,000: 4 · 8,192 · 32,000 B = 1.048576 GB more at the peak."""
    base = ("llama-2-7b", *TT_COMMON, "--batch", "4", "--seq", "2048", "--lora-rank", "8", "--lora-targets", "q,v",
            "--lora-dtype", "bf16")
    full, kept = _row(capsys, *base), _row(capsys, *base, "--loss", "fp32-kept")
    assert kept["peak_allocated_bytes"] - full["peak_allocated_bytes"] == pytest.approx(4 * 8192 * 32000, rel=1e-9)
