"""Record the peak memory of whole training steps, as PyTorch's own memory tracker counts it.

For small-but-real transformers configurations (Llama-2/3-, Mistral-, Qwen2-, Gemma-2-, GPT-2-style dense models and
Mixtral-, Qwen2-MoE- and DeepSeek-V3-style MoE models), this builds ``AutoModelForCausalLM.from_config(cfg)``
inside ``torch._subclasses.fake_tensor.FakeTensorMode`` (shapes and dtypes exact, nothing allocated), makes a
``torch.optim.AdamW`` over the trainable parameters, and runs **three full training steps** under
``torch.distributed._tools.mem_tracker.MemTracker``: per step ``microbatches`` times
``model(input_ids, labels=input_ids)`` (forward and the cross-entropy loss), ``(loss / microbatches).backward()``,
then ``optimizer.step()`` and ``optimizer.zero_grad(set_to_none=True)``. The tracker sees every storage that
is created (a ``TorchDispatchMode``) and every one that is freed (weak references), attributes each to a
category (parameter, buffer, gradient, activation, temporary, optimizer state) and keeps the peak of their
sum. The records hold that peak, its breakdown by category, and the peak of each phase (forward, backward,
optimizer step) of the last step, plus what stays allocated between steps.

What the harness does to make the CPU trace stand for a CUDA run (each documented in docs/validation-train.md):

* **512-byte blocks**: every storage counts ``ceil(bytes / 512) · 512``, the CUDA caching allocator's smallest
  block and rounding (``kMinBlockSize``; ``MemTracker`` applies it only to ``cuda`` devices, and a CPU-only torch
  cannot make fake ``cuda`` tensors).
* **dropout**: ``F.dropout`` runs ``torch.native_dropout`` (1-byte bool mask, CUDA's fused kernel) instead of
  the CPU's composite ``input * bernoulli_mask`` (a mask in the activation dtype); see ``_cuda_dropout``.
* **mixed precision**: ``torch.autocast("cpu", torch.bfloat16)``. Its op lists differ from CUDA's; the
  matmuls (``linear``, ``matmul``, ``bmm``, SDPA) are cast in both.

FSDP2 (``measure_fsdp``, ``tests/data/validation/step_peak_fsdp.json``): one rank of ``fully_shard`` per decoder
layer and on the root (torchtitan's ``apply_fsdp``: bf16 parameters, fp32 reduce-scatter, resharded after forward)
on PyTorch's ``fake`` process group, at dp 2, 4 and 8 on Llama-3.2-1B, Llama-3.1-8B, Qwen3-1.7B and Qwen1.5-MoE-A2.7B
shapes, with gradient accumulation (torchtitan's: a reduce-scatter every micro-batch) and with LoRA (torchtune's
``lora_finetune_distributed``: bf16 model and adapters, no mixed-precision policy), counted by ``FSDPMemTracker``
(sharded/unsharded parameters and gradients, all-gather and reduce-scatter buffers). With ``CPUOffloadPolicy``
(``tests/data/validation/step_peak_fsdp_offload.json``) the compute runs on a fake accelerator
(``fake_accelerator.py``: a CPU-only torch cannot run autograd on fake ``cuda`` tensors) so that the device's
peak is counted apart from the host's.

Every number comes from torch; nothing here is computed by formula, and aicalc is not imported.
``tests/test_train_peak.py`` compares aicalc's ``peak_allocated_bytes`` with the records.

    python validation/record_step_peak.py            # regenerate tests/data/validation/step_peak.json
    python validation/record_step_peak.py --check    # recompute and compare with the committed file
    python validation/record_step_peak.py --only NAME -v
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record_activations as ra  # noqa: E402  (its model configs)
import record_params as rp  # noqa: E402  (shared helpers: versions, dumps, envelopes, quiet)

FILENAME = "step_peak.json"
GENERATED_BY = "validation/record_step_peak.py"
STEPS = 3
ENCODERS = ("bert", "roberta")  # built as AutoModelForSequenceClassification, trained on one label per sequence
BLOCK = 512  # the CUDA caching allocator's smallest block (c10/cuda/CUDACachingAllocator.cpp, kMinBlockSize)

# Small but real shapes (hidden 256-512, 2-3 layers): a step is traced in about a second on two CPU cores.
MODELS: dict[str, dict[str, Any]] = {
    # the configs record_activations traces too, the same dicts
    **{k: ra.MODELS[k] for k in ("llama2-style", "llama3-style", "mistral-style", "qwen2-style", "gpt2-style")},
    "gemma2-style": {
        "model_type": "gemma2", "hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 8192,
        "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "query_pre_attn_scalar": 64,
        "sliding_window": 4096, "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 8192,
    },
    # Qwen3: RMSNorm on each query and key head (q_norm, k_norm); attention width A·d = 512 ≠ H
    "qwen3-style": {
        "model_type": "qwen3", "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 8000,
        "max_position_embeddings": 4096, "tie_word_embeddings": True, "hidden_act": "silu", "rope_theta": 1000000.0,
    },
    "mixtral-style": {
        "model_type": "mixtral", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 8000, "max_position_embeddings": 4096,
        "num_local_experts": 8, "num_experts_per_tok": 2, "tie_word_embeddings": False, "hidden_act": "silu",
        "router_aux_loss_coef": 0.0,
    },
    "qwen2moe-style": {
        "model_type": "qwen2_moe", "hidden_size": 256, "intermediate_size": 1024, "moe_intermediate_size": 256,
        "shared_expert_intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 4, "vocab_size": 8000, "max_position_embeddings": 4096, "num_experts": 8,
        "num_experts_per_tok": 2, "decoder_sparse_step": 1, "norm_topk_prob": False, "tie_word_embeddings": False,
        "hidden_act": "silu", "router_aux_loss_coef": 0.0,
    },
    # BertForSequenceClassification (TM-32's model, small): post-LN, token types, dropout 0.1, two labels
    "bert-style": {
        "model_type": "bert", "hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 3,
        "num_attention_heads": 4, "vocab_size": 8192, "max_position_embeddings": 512, "type_vocab_size": 2,
    },
    # RobertaForSequenceClassification: one token type, positions offset past the padding index, a dense + out_proj
    # head on the first token in place of BERT's pooler and classifier
    "roberta-style": {
        "model_type": "roberta", "hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 3,
        "num_attention_heads": 4, "vocab_size": 8192, "max_position_embeddings": 514, "type_vocab_size": 1,
        "pad_token_id": 1,
    },
    # attention dropout off: on the CPU, SDPA with dropout takes the math path, where CUDA runs a fused kernel
    "bert-sdpa-style": {
        "model_type": "bert", "hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 3,
        "num_attention_heads": 4, "vocab_size": 8192, "max_position_embeddings": 512, "type_vocab_size": 2,
        "attention_probs_dropout_prob": 0.0,
    },
    "deepseekv3-style": {
        "model_type": "deepseek_v3", "hidden_size": 256, "intermediate_size": 768, "moe_intermediate_size": 128,
        "num_hidden_layers": 3, "first_k_dense_replace": 1, "num_attention_heads": 4, "num_key_value_heads": 4,
        "q_lora_rank": 96, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
        "n_routed_experts": 16, "num_experts_per_tok": 4, "n_shared_experts": 1, "n_group": 4, "topk_group": 2,
        "routed_scaling_factor": 2.5, "norm_topk_prob": True, "vocab_size": 8000, "max_position_embeddings": 4096,
        "tie_word_embeddings": False, "hidden_act": "silu", "rope_scaling": None,
    },
}

LORA_TARGETS = {"q,v": ["q_proj", "v_proj"],
                "all": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
# the same targets in BERT and RoBERTa (q, k, v, o, up, down): PEFT matches a module whose name ends with ".key"
ENCODER_LORA_TARGETS = {"q,v": ["query", "value"],
                        "all": ["query", "key", "value", "attention.output.dense", "intermediate.dense",
                                "output.dense"]}


def _case(model, batch, seq, attention="sdpa", precision="bf16", recompute="none", adamw="foreach",
          microbatches=1, lora=None, grads_kept=False) -> dict[str, Any]:
    c = {"model": model, "batch": batch, "seq": seq, "attention": attention, "precision": precision,
         "recompute": recompute, "adamw": adamw, "microbatches": microbatches}
    if lora:
        c["lora"] = {"rank": 16, "targets": lora}
    if grads_kept:  # zero_grad(set_to_none=False): the gradients stay allocated between steps
        c["grads_kept"] = True
    return c


def cases() -> list[dict[str, Any]]:
    """The matrix: attention × precision × recompute on the dense families, fused vs foreach AdamW, gradient
    accumulation, LoRA, and the three MoE styles."""
    out = []
    for model in ("llama2-style", "llama3-style", "mistral-style", "qwen2-style"):
        for attention in ("eager", "sdpa"):
            for precision in ("bf16", "fp32", "bf16-mixed"):
                out.append(_case(model, 2, 256, attention, precision))
    for model, seq in (("llama2-style", 512), ("qwen2-style", 512), ("llama3-style", 256)):
        for recompute in ("full", "selective-op", "every-2"):
            out.append(_case(model, 2, seq, "sdpa", "bf16", recompute))
    out.append(_case("llama2-style", 1, 512, "eager", "fp32", "full"))
    out.append(_case("mistral-style", 2, 256, "eager", "bf16-mixed", "full"))
    for model in ("llama2-style", "llama3-style", "qwen2-style"):
        out.append(_case(model, 2, 256, "sdpa", "bf16", adamw="fused"))
        out.append(_case(model, 2, 256, "sdpa", "bf16-mixed", adamw="fused"))
        out.append(_case(model, 2, 256, "sdpa", "bf16", microbatches=2))
    out.append(_case("llama2-style", 2, 256, "sdpa", "bf16-mixed", "full", microbatches=2))
    out.append(_case("gemma2-style", 2, 256, "eager", "bf16"))
    out.append(_case("gemma2-style", 2, 256, "eager", "fp32"))
    out.append(_case("gemma2-style", 1, 512, "eager", "bf16", "full"))
    # torch AMP where the activations set the peak (long sequences): autocast's per-op casts of the fp32 norm outputs
    out.append(_case("llama2-style", 4, 2048, "sdpa", "bf16-mixed"))
    out.append(_case("gemma2-style", 2, 1024, "eager", "bf16-mixed"))
    out.append(_case("qwen3-style", 2, 512, "sdpa", "bf16"))
    out.append(_case("qwen3-style", 4, 2048, "sdpa", "bf16-mixed"))
    out.append(_case("gpt2-style", 2, 256, "eager", "fp32"))
    out.append(_case("gpt2-style", 2, 256, "eager", "bf16"))
    out.append(_case("gpt2-style", 2, 256, "eager", "fp32", "full"))
    for model in ("llama3-style", "qwen2-style"):
        for targets in ("q,v", "all"):
            out.append(_case(model, 2, 256, "sdpa", "bf16", lora=targets))
    out.append(_case("mistral-style", 2, 256, "eager", "bf16", "full", lora="all"))
    out.append(_case("llama2-style", 2, 256, "sdpa", "fp32", lora="all"))
    for model in ("mixtral-style", "qwen2moe-style", "deepseekv3-style"):
        out.append(_case(model, 2, 256, "sdpa", "bf16"))
        out.append(_case(model, 2, 256, "eager", "bf16"))
        out.append(_case(model, 2, 256, "sdpa", "bf16", "full"))
    # an encoder (BertForSequenceClassification) as HF Trainer ran it in 2023 (TM-32): fp32, eager, the gradients
    # kept between steps (zero_grad(set_to_none=False)), a per-parameter AdamW loop, accumulation, checkpointing
    out.append(_case("bert-style", 2, 256, "eager", "fp32"))
    out.append(_case("bert-style", 2, 256, "eager", "fp32", adamw="loop", grads_kept=True))
    out.append(_case("bert-style", 1, 512, "eager", "fp32", microbatches=2, adamw="loop", grads_kept=True))
    out.append(_case("bert-style", 1, 512, "eager", "fp32", "full", microbatches=2, adamw="loop", grads_kept=True))
    out.append(_case("bert-sdpa-style", 4, 512, "sdpa", "bf16"))
    out.append(_case("bert-style", 4, 512, "eager", "bf16", "full"))
    out.append(_case("roberta-style", 2, 256, "eager", "fp32"))
    # LoRA on an encoder (PEFT's fp32 adapters; the classifier head frozen as PEFT leaves it without a task type)
    out.append(_case("bert-style", 4, 256, "eager", "bf16", lora="q,v"))
    out.append(_case("bert-style", 4, 256, "eager", "bf16", lora="all"))
    out.append(_case("bert-style", 4, 256, "eager", "fp32", lora="q,v"))
    out.append(_case("bert-style", 4, 256, "eager", "bf16", "full", lora="all"))
    out.append(_case("bert-sdpa-style", 4, 512, "sdpa", "bf16", lora="all"))
    out.append(_case("roberta-style", 2, 256, "eager", "bf16", "full", lora="all"))
    return out


# Configurations the harness does not trace, with the reason (kept in the record file).
EXCLUDED = [
    {"what": "QLoRA (bitsandbytes NF4 base weights)",
     "reason": "bitsandbytes is not in the validate extra and its Linear4bit keeps packed uint8 weights with a "
               "QuantState that fake tensors do not trace; QLoRA is held to the published QLoRA peaks in "
               "tests/test_train_mem_measured.py (TM-21, TM-28, TM-29) and tests/test_train_qlora.py instead, and "
               "LitGPT's QLoRA loop is traced with bitsandbytes' MatMul4Bit re-implemented for its memory by "
               "validation/record_litgpt_qlora.py"},
    {"what": "Mixtral/Qwen2-MoE/DeepSeek-V3 styles in fp32 or bf16-mixed (fp32 expert weights)",
     "reason": "transformers' grouped_mm experts cast their input to the expert weights' dtype (torch._grouped_mm "
               "is not autocast-enabled) and torch 2.13's meta kernel for _grouped_mm accepts bf16 only "
               "('Expected inputs of BF16 type'), so fake tensors cannot trace fp32 experts; CUDA's kernel "
               "is bf16-only too"},
    {"what": "FSDP2 with expert parallelism, QLoRA or requires_gradient_sync off between micro-batches",
     "reason": "the FSDP2 records (step_peak_fsdp.json, and step_peak_fsdp_offload.json with CPUOffloadPolicy) "
               "cover full training, LoRA and gradient accumulation of dense models and full training of one MoE "
               "model with its experts sharded with their layers"},
]


def case_name(c: dict[str, Any]) -> str:
    rc = "" if c["recompute"] == "none" else f"+{c['recompute']}"
    lora = f"+lora[{c['lora']['targets']}]" if c.get("lora") else ""
    acc = f"+accum{c['microbatches']}" if c["microbatches"] > 1 else ""
    kept = "+kept" if c.get("grads_kept") else ""
    return (f"{c['model']}/{c['attention']}/{c['precision']}{rc}{lora}/{c['adamw']}{acc}{kept}/"
            f"b{c['batch']}s{c['seq']}")


def _cuda_dropout():
    """``F.dropout`` as CUDA runs it: ``aten::dropout`` takes the fused ``native_dropout`` kernel on CUDA (it
    keeps a 1-byte bool mask for backward) and, on the CPU, ``input * bernoulli_mask / (1 - p)`` with the mask
    in the input's dtype (``aten/src/ATen/native/Dropout.cpp``: ``is_fused_kernel_acceptable``)."""
    import torch
    import torch.nn.functional as F

    orig = F.dropout

    def dropout(input, p=0.5, training=True, inplace=False):
        if training and 0.0 < p < 1.0 and input.numel() > 0:
            return torch.native_dropout(input, p, True)[0]
        return orig(input, p, training, inplace)

    return orig, dropout


def _block_rounding():
    """MemTracker rounds to 512-byte blocks for ``cuda`` devices only; count every device that way."""
    from torch.distributed._tools import mem_tracker

    def consumed(self) -> int:
        return math.ceil(self.size * self.element_size / BLOCK) * BLOCK

    mem_tracker._WeakRefInfo._calculate_mem_consumed = consumed


def _sac_context_fn():
    """torchtitan's op-level SAC (as in record_activations.py): the ``_save_list`` outputs are MUST_SAVE except
    every second ``aten.mm`` of the block, everything else PREFER_RECOMPUTE; the CPU's SDPA kernel stands in for
    CUDA's flash/efficient ones."""
    from collections import defaultdict

    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    save_list = {aten.mm.default, aten._scaled_dot_product_efficient_attention.default,
                 aten._scaled_dot_product_flash_attention.default,
                 aten._scaled_dot_product_flash_attention_for_cpu.default}
    meta: dict[str, int] = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == aten.mm.default:
            meta[f"{mode}_mm_count"] += 1
        to_save = func in save_list and not (func == aten.mm.default and meta[f"{mode}_mm_count"] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def _enable_recompute(m, recompute: str) -> None:
    """Non-reentrant checkpoints on the decoder layers through transformers' own hook: every layer (``full``),
    torchtitan's op policy on every layer (``selective-op``) or every N-th layer (``every-N``, torchtitan's
    ``count % N == 0`` from 1)."""
    from torch.utils.checkpoint import checkpoint
    from transformers.modeling_layers import GradientCheckpointingLayer

    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if recompute == "full":
        return
    op = recompute == "selective-op"

    def ckpt(function, *args, **kwargs):
        extra = {"context_fn": _sac_context_fn} if op else {}
        return checkpoint(function, *args, use_reentrant=False, **extra, **kwargs)

    every = 1 if op else int(recompute.split("-")[1])
    layers = [mod for mod in m.modules() if isinstance(mod, GradientCheckpointingLayer)]
    for i, mod in enumerate(layers):
        mod._gradient_checkpointing_func = ckpt
        mod.gradient_checkpointing = (i + 1) % every == 0


def _tracker():
    """``MemTracker`` that also works with frozen parameters (LoRA's base): torch 2.13's tracker registers a
    gradient hook on every parameter, which raises for one that does not require grad; the frozen ones get none
    (they never have a gradient). Otherwise the method is torch's own. The peak is kept for the whole step only
    (torch's also keeps one per module, which costs a walk over all modules at every op)."""
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

    class Tracker(MemTracker):
        def _track_module_params_and_buffers(self, module, install_grad_hooks=True):
            param_memory = 0
            for param in module.parameters():
                winfos = self._update_and_maybe_create_winfos(param, _MemRefType.PARAM)
                param_memory += sum(w.mem_consumed for w in winfos)
                if param.grad is not None:
                    self._update_and_maybe_create_winfos(param.grad, _MemRefType.GRAD)
                if (install_grad_hooks and param.requires_grad
                        and self._param_to_grad_hook_handles.get(param, None) is None):
                    def hook(grad):
                        self._update_and_maybe_create_winfos(grad, _MemRefType.GRAD)

                    self._param_to_grad_hook_handles[param] = (
                        param.register_hook(hook),
                        param.register_post_accumulate_grad_hook(lambda p: hook(p.grad)))
            buffer_memory = 0
            for buffer in module.buffers():
                winfos = self._update_and_maybe_create_winfos(buffer, _MemRefType.BUFFER)
                buffer_memory += sum(w.mem_consumed for w in winfos)
            return param_memory, buffer_memory

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "scaled_dot_product" in func.__name__:
                self.attention_ops.add(func.__name__)
            return super().__torch_dispatch__(func, types, args, kwargs)

        def _update_peak_stats(self, peak_state):
            # the global peak only: the per-module peaks (not recorded) walk every module at every op
            for dev, dev_snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < dev_snap["Total"]:
                    self._peak_mem[dev] = dev_snap["Total"]
                    self._peak_mem_snap[dev] = dict(dev_snap)

    t = Tracker()
    t.attention_ops = set()  # the fused attention kernels that ran (none: SDPA fell back to its math path)
    return t


def _peft(m, lora: dict[str, Any], adapter_dtype=None):
    """PEFT's LoRA adapters (``lora_alpha`` 32, no dropout) on ``lora["targets"]`` of the fake model ``m``.

    ``Module._apply`` swaps fake parameters in place and fails (the fake mode holds a reference), so PEFT's moves
    of each new adapter to its base layer's device and dtype are skipped: the adapters are made on the same (CPU)
    device in torch's default dtype. ``adapter_dtype`` None: fp32, the dtype PEFT gives them in the end anyway
    (``autocast_adapter_dtype=True`` casts bf16/fp16 adapters back to fp32); a dtype: made in it and kept
    (``autocast_adapter_dtype=False``), as torchtune makes its ``LoRALinear`` in the model's dtype."""
    import torch
    from peft import LoraConfig, get_peft_model
    from peft.tuners import tuners_utils

    move = tuners_utils.BaseTunerLayer._move_adapter_to_device_of_base_layer
    to = torch.nn.Module.to
    default = torch.get_default_dtype()
    tuners_utils.BaseTunerLayer._move_adapter_to_device_of_base_layer = lambda *a, **k: None
    torch.nn.Module.to = lambda self, *a, **k: self
    try:
        if adapter_dtype is not None:
            torch.set_default_dtype(adapter_dtype)
        names = ENCODER_LORA_TARGETS if m.config.model_type in ("bert", "roberta") else LORA_TARGETS
        return get_peft_model(m, LoraConfig(r=lora["rank"], lora_alpha=32, lora_dropout=0.0,
                                            target_modules=names[lora["targets"]]),
                              autocast_adapter_dtype=adapter_dtype is None)
    finally:
        tuners_utils.BaseTunerLayer._move_adapter_to_device_of_base_layer = move
        torch.nn.Module.to = to
        torch.set_default_dtype(default)


def _snap(d: dict) -> dict[str, int]:
    """One device's tracker snapshot as plain ``{category: bytes}``."""
    (dev_snap,) = d.values() if d else ({},)
    names = {"Parameter": "parameters", "Buffer": "buffers", "Gradient": "gradients", "Activation": "activations",
             "Temp": "temporaries", "Optstate": "optimizer", "Other": "inputs", "Total": "total"}
    out = {v: 0 for v in names.values()}
    for k, v in dev_snap.items():
        out[names[getattr(k, "value", k)]] = int(v)
    return out


def _run_steps(mt, m, opt, ids, microbatches: int, snap, first: int = 0, autocast=None, labels=None,
               grads_kept=False):
    """``STEPS`` training steps of ``m`` under the tracker ``mt`` (entered by the caller): each ``microbatches``
    forwards (``model(input_ids, labels=input_ids)``, the loss over ``microbatches``) and backwards, then
    ``opt.step()`` and ``opt.zero_grad(set_to_none=True)`` (``grads_kept``: False). ``labels``: what the model is
    given as labels (None: ``input_ids``; an encoder's classifier: one class per sequence). Each phase's own peak is read with ``snap`` (the
    tracker's peak snapshot as ``{category: bytes}``); returns (the highest phase peak of the steps from ``first``
    on, where it was, the last step's phase peaks). ``autocast``: a context the forward runs in (torch AMP)."""
    import contextlib
    import copy

    phases: dict[str, dict[str, int]] = {}
    state = {}

    def phase(name, fn):
        cur = mt.get_tracker_snapshot("current")
        mt._peak_mem = {d: s["Total"] for d, s in cur.items()}  # peak of this phase only
        mt._peak_mem_snap = copy.deepcopy(cur)
        fn()
        peak = snap(mt.get_tracker_snapshot("peak"))
        if peak["total"] > phases.get(name, {}).get("total", -1):
            phases[name] = peak

    def forward():
        mt.reset_mod_stats()  # module snapshots per call; the step's totals are kept
        with autocast() if autocast else contextlib.nullcontext():
            out = m(input_ids=ids, labels=ids if labels is None else labels)
        state["loss"] = out.loss / microbatches

    def backward():
        state.pop("loss").backward()

    def step():
        opt.step()
        opt.zero_grad(set_to_none=not grads_kept)

    best, where = {"total": -1}, ""
    for s in range(STEPS):
        phases.clear()
        for _ in range(microbatches):
            phase("forward", forward)
            phase("backward", backward)
        phase("optimizer", step)
        for name, peak in phases.items():
            if s >= first and peak["total"] > best["total"]:
                best, where = peak, f"step {s + 1} {name}"
    return best, where, phases


def measure(c: dict[str, Any], verbose: bool = False) -> dict[str, Any]:

    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    mixed = c["precision"] == "bf16-mixed"
    encoder = MODELS[c["model"]]["model_type"] in ENCODERS
    dtype = torch.bfloat16 if c["precision"] == "bf16" else torch.float32
    cfg = rp.build_config(MODELS[c["model"]])
    orig, cuda_dropout = _cuda_dropout()
    F.dropout = cuda_dropout
    try:
        with FakeTensorMode():
            torch.manual_seed(0)
            auto = AutoModelForSequenceClassification if encoder else AutoModelForCausalLM
            m = auto.from_config(cfg, attn_implementation=c["attention"], dtype=dtype)
            if c.get("lora"):
                m = _peft(m, c["lora"])
                assert all(p.dtype == torch.float32 for p in m.parameters() if p.requires_grad)
            if c["recompute"] != "none":
                _enable_recompute(m, c["recompute"])
            m.train()
            trainable = [p for p in m.parameters() if p.requires_grad]
            opt = torch.optim.AdamW(trainable, lr=1e-4, foreach=c["adamw"] == "foreach", fused=c["adamw"] == "fused")
            ids = torch.randint(0, cfg.vocab_size, (c["batch"], c["seq"]))
            mt = _tracker()
            mt.track_external(m, opt, ids)
            with mt:
                best, where, phases = _run_steps(
                    mt, m, opt, ids, c["microbatches"], _snap,
                    autocast=lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed),
                    labels=torch.zeros(c["batch"], dtype=torch.long) if encoder else None,
                    grads_kept=c.get("grads_kept", False))
                after = _snap(mt.get_tracker_snapshot("current"))
            n_params = sum(p.numel() for p in m.parameters())
            n_trainable = sum(p.numel() for p in trainable)
    finally:
        F.dropout = orig
    if verbose:
        print(f"  peak at {where}: {best}", file=sys.stderr)
    sdpa = sorted(mt.attention_ops)
    return {"params": int(n_params), "trainable_params": int(n_trainable), "peak_bytes": best["total"],
            "sdpa_kernels": sdpa, "sdpa_math_fallback": c["attention"] == "sdpa" and not sdpa,
            "peak_phase": where, "peak_breakdown": best, "phases_last_step": phases, "after_step": after}


# FSDP2 (``fully_shard``) on a fake process group: real model sizes, one rank of ``dp`` traced.
FSDP_FILENAME = "step_peak_fsdp.json"
FSDP_OFFLOAD_FILENAME = "step_peak_fsdp_offload.json"
OFFLOAD_METHOD = (f"as {FSDP_FILENAME} with CPUOffloadPolicy(pin_memory=False) on every fully_shard; the compute on a "
                  f"fake accelerator (a Python PrivateUse1 backend, fake_accelerator.py), the sharded states on the "
                  f"CPU; peak_bytes is the accelerator's, host_after_step the CPU's held bytes")
FSDP_MODELS: dict[str, dict[str, Any]] = {
    # Llama-3.2-1B's shapes (tied embeddings)
    "llama3.2-1b-style": {
        "model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "hidden_act": "silu",
        "rope_theta": 500000.0,
    },
    # Llama-3.1-8B's shapes
    "llama3.1-8b-style": {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu",
        "rope_theta": 500000.0,
    },
    # Qwen3-1.7B's shapes (q/k norms, tied embeddings)
    "qwen3-1.7b-style": {
        "model_type": "qwen3", "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "hidden_act": "silu",
        "rope_theta": 1000000.0,
    },
    # Qwen1.5-MoE-A2.7B's shapes: 60 routed experts (top 4) and a gated shared expert in every layer
    "qwen2moe-a2.7b-style": {
        "model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632, "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632, "num_hidden_layers": 24, "num_attention_heads": 16,
        "num_key_value_heads": 16, "vocab_size": 151936, "max_position_embeddings": 8192, "num_experts": 60,
        "num_experts_per_tok": 4, "decoder_sparse_step": 1, "norm_topk_prob": False, "tie_word_embeddings": False,
        "hidden_act": "silu", "rope_theta": 1000000.0, "router_aux_loss_coef": 0.0,
    },
}


def fsdp_cases() -> list[dict[str, Any]]:
    """One rank of FSDP2 at dp 2, 4 and 8, with and without full recompute (torchtitan's setup: bf16 compute); the
    batch 1 × 512 runs with full recompute leave the peak to the root's reduce-scatter at the end of the backward
    (tied and untied embeddings); then gradient accumulation, LoRA, a MoE model and pure-bf16 full training."""
    out = []
    for model, batch, seq, recompute, dp in (
            ("llama3.2-1b-style", 2, 2048, "none", 2), ("llama3.2-1b-style", 2, 2048, "none", 8),
            ("llama3.2-1b-style", 4, 2048, "full", 8), ("llama3.2-1b-style", 1, 512, "full", 8),
            ("llama3.1-8b-style", 1, 2048, "none", 8), ("llama3.1-8b-style", 1, 2048, "none", 2),
            ("llama3.1-8b-style", 2, 4096, "full", 8), ("llama3.1-8b-style", 1, 2048, "full", 2),
            ("llama3.1-8b-style", 1, 512, "full", 8),
            ("qwen3-1.7b-style", 2, 2048, "none", 8), ("qwen3-1.7b-style", 4, 2048, "full", 2),
            ("qwen3-1.7b-style", 1, 512, "full", 8)):
        out.append({**_case(model, batch, seq, "sdpa", "bf16-mixed", recompute), "dp": dp})
    # gradient accumulation as torchtitan runs it: requires_gradient_sync left on, so every micro-batch's backward
    # reduce-scatters into the sharded fp32 gradients, which live through the next micro-batches
    for model, batch, seq, recompute, dp, mb in (
            ("llama3.2-1b-style", 2, 2048, "none", 8, 2), ("llama3.2-1b-style", 1, 512, "full", 8, 2),
            ("llama3.1-8b-style", 1, 2048, "full", 8, 4), ("qwen3-1.7b-style", 2, 2048, "none", 2, 2)):
        out.append({**_case(model, batch, seq, "sdpa", "bf16-mixed", recompute, microbatches=mb), "dp": dp})
    # LoRA as torchtune's lora_finetune_distributed runs it: the model and its adapters in bf16 (no mixed-precision
    # policy), the base frozen, fully_shard per decoder layer and the root, AdamW over the adapters
    for model, batch, seq, recompute, dp, targets, mb in (
            ("llama3.1-8b-style", 2, 2048, "none", 8, "all", 1), ("llama3.1-8b-style", 1, 2048, "full", 2, "q,v", 1),
            ("llama3.2-1b-style", 2, 2048, "none", 2, "all", 1), ("qwen3-1.7b-style", 4, 2048, "full", 8, "all", 2)):
        c = _case(model, batch, seq, "sdpa", "bf16", recompute, microbatches=mb, lora=targets)
        c["lora"]["dtype"] = "bf16"
        out.append({**c, "dp": dp})
    # MoE (torchtitan's setup; bf16 compute, as torch's _grouped_mm needs): the routed experts' stacked weights
    # sharded on the expert dimension with the rest of their layer, no expert parallelism
    for model, batch, seq, recompute, dp in (("qwen2moe-a2.7b-style", 2, 2048, "none", 4),
                                             ("qwen2moe-a2.7b-style", 2, 2048, "none", 8),
                                             ("qwen2moe-a2.7b-style", 2, 2048, "full", 8)):
        out.append({**_case(model, batch, seq, "sdpa", "bf16-mixed", recompute), "dp": dp})
    # full training of a bf16 model without a mixed-precision policy (torchtune's full_finetune_distributed):
    # gradients reduce-scattered in bf16, with tied and untied embeddings, at the end of the backward (batch 1 × 512,
    # full recompute) and at the loss
    for model, batch, seq, recompute, dp in (("llama3.2-1b-style", 1, 512, "full", 8),
                                             ("llama3.1-8b-style", 1, 512, "full", 8),
                                             ("llama3.1-8b-style", 2, 2048, "full", 4)):
        out.append({**_case(model, batch, seq, "sdpa", "bf16", recompute), "dp": dp})
    return out + fsdp_units_cases()


def fsdp_units_cases(offload: bool = False) -> list[dict[str, Any]]:
    """The embedding and the output layer as FSDP2 units of their own (untied models): ``split``, torchtune's
    ``custom_sharded_layers: ['tok_embeddings', 'output']`` (each resharded after use; the final norm in the root),
    and ``torchtitan``, its ``apply_fsdp`` (the embedding resharded after its forward, ``[norm, output]`` one unit
    kept unsharded from the forward into the backward): pure bf16 as torchtune runs it (full training and LoRA),
    torchtitan's bf16-mixed, at the loss, in a layer's backward and at the end of the backward (batch 1 × 512)."""
    out = []
    rows = (("split", "llama3.1-8b-style", 2, 2048, "full", 8, "bf16", 1, None),
            ("split", "llama3.1-8b-style", 1, 512, "full", 8, "bf16", 1, None),
            ("split", "llama3.1-8b-style", 2, 4096, "full", 8, "bf16-mixed", 1, None),
            ("split", "llama3.1-8b-style", 2, 2048, "none", 8, "bf16", 1, "all"),
            ("split", "llama3.1-8b-style", 1, 2048, "full", 2, "bf16", 1, "q,v"),
            ("torchtitan", "llama3.1-8b-style", 2, 4096, "full", 8, "bf16-mixed", 1, None),
            ("torchtitan", "llama3.1-8b-style", 1, 2048, "none", 8, "bf16-mixed", 1, None),
            ("torchtitan", "llama3.1-8b-style", 1, 512, "full", 8, "bf16-mixed", 1, None),
            ("torchtitan", "llama3.1-8b-style", 1, 2048, "full", 8, "bf16-mixed", 4, None),
            ("torchtitan", "qwen2moe-a2.7b-style", 2, 2048, "none", 8, "bf16-mixed", 1, None))
    if offload:
        rows = (("split", "llama3.1-8b-style", 2, 2048, "full", 8, "bf16", 1, None),
                ("split", "llama3.1-8b-style", 1, 512, "full", 8, "bf16", 1, None),
                ("torchtitan", "llama3.1-8b-style", 2, 2048, "full", 8, "bf16-mixed", 1, None))
    for units, model, batch, seq, recompute, dp, precision, mb, lora in rows:
        c = _case(model, batch, seq, "sdpa", precision, recompute, microbatches=mb, lora=lora)
        if lora:
            c["lora"]["dtype"] = "bf16"
        out.append({**c, "dp": dp, "units": units, **({"offload": "cpu"} if offload else {})})
    return out


def fsdp_offload_cases() -> list[dict[str, Any]]:
    """FSDP2 with ``CPUOffloadPolicy`` (torchtitan's ``training.enable_cpu_offload``, torchtune's
    ``fsdp_cpu_offload``) at dp 2, 4 and 8: the shapes of :func:`fsdp_cases` with and without full recompute,
    gradient accumulation (the sharded gradients added on the host), torchtune's bf16 LoRA and the MoE model."""
    out = []
    for model, batch, seq, recompute, dp in (
            ("llama3.2-1b-style", 2, 2048, "none", 2), ("llama3.2-1b-style", 2, 2048, "none", 8),
            ("llama3.2-1b-style", 4, 2048, "full", 8), ("llama3.2-1b-style", 1, 512, "full", 8),
            ("llama3.1-8b-style", 1, 2048, "none", 8), ("llama3.1-8b-style", 1, 2048, "full", 2),
            ("llama3.1-8b-style", 2, 4096, "full", 8), ("llama3.1-8b-style", 1, 512, "full", 8),
            ("qwen3-1.7b-style", 2, 2048, "none", 4), ("qwen3-1.7b-style", 1, 512, "full", 8),
            ("qwen2moe-a2.7b-style", 2, 2048, "none", 8)):
        out.append({**_case(model, batch, seq, "sdpa", "bf16-mixed", recompute), "dp": dp, "offload": "cpu"})
    for model, batch, seq, recompute, dp, mb in (("llama3.2-1b-style", 2, 2048, "none", 8, 2),
                                                 ("llama3.1-8b-style", 1, 2048, "full", 4, 2)):
        out.append({**_case(model, batch, seq, "sdpa", "bf16-mixed", recompute, microbatches=mb), "dp": dp,
                    "offload": "cpu"})
    for model, batch, seq, recompute, dp, targets in (("llama3.1-8b-style", 2, 2048, "none", 8, "all"),
                                                      ("qwen3-1.7b-style", 1, 2048, "full", 2, "q,v")):
        c = _case(model, batch, seq, "sdpa", "bf16", recompute, lora=targets)
        c["lora"]["dtype"] = "bf16"
        out.append({**c, "dp": dp, "offload": "cpu"})
    return out + fsdp_units_cases(offload=True)


def fsdp_case_name(c: dict[str, Any]) -> str:
    off = "+offload" if c.get("offload") else ""
    units = f"+units-{c['units']}" if c.get("units", "root") != "root" else ""
    return f"fsdp2-dp{c['dp']}{off}{units}/" + case_name(c)


def _fsdp_snap(d: dict, device=None) -> dict[str, int]:
    """One device's ``FSDPMemTracker`` snapshot as plain ``{category: bytes}``: the only device, or ``device``'s
    (an offloading run's accelerator or host)."""
    if device is None:
        (dev_snap,) = d.values() if d else ({},)
    else:
        dev_snap = d.get(device, {})
    out: dict[str, int] = {}
    for k, v in dev_snap.items():
        name = getattr(k, "value", k)
        out["total" if name == "Total" else name.lower().replace(" ", "_")] = int(v)
    return out


def measure_fsdp(c: dict[str, Any], verbose: bool = False) -> dict[str, Any]:
    """One rank's training step under FSDP2 as torchtitan applies it (``apply_fsdp``): ``fully_shard`` on every
    decoder layer and then on the whole model, ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``,
    ``reshard_after_forward=True``; fp32 parameters (the sharded copy is the master), foreach AdamW over the
    sharded ``DTensor`` parameters. The process group is PyTorch's ``fake`` backend (``FakeStore``: collectives
    return at once, their outputs allocated as on a real rank); the device mesh is made before the fake mode (its
    constructor reads a tensor's values). ``torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker`` counts
    the memory (it sorts FSDP's own buffers: sharded and unsharded parameters and gradients, all-gather and
    reduce-scatter buffers). The first step is not recorded: its optimizer step counts 13.5× the sharded
    parameters' bytes (tensors of the unsharded shapes on the first call of each foreach op on DTensors, cached
    afterwards; a real rank allocates nothing of the kind), so the peak is taken over steps 2 and 3.

    ``precision`` "bf16" is torchtune's setup instead (``lora_finetune_distributed`` with ``training.shard_model``:
    the model made in bf16, ``fully_shard`` on every ``layers.N`` and the root without a mixed-precision policy, so
    gradients are reduce-scattered in bf16), used with its LoRA adapters in bf16 (``lora``: PEFT's, made in the
    model's dtype, see ``_peft``), the base frozen and AdamW over the adapters. ``microbatches`` > 1: each step
    runs that many forwards and backwards of ``loss / microbatches`` before the optimizer step, with
    ``requires_gradient_sync`` on (torchtitan's default): every backward reduce-scatters and adds into the sharded
    gradients.

    ``offload`` "cpu": ``fully_shard(..., offload_policy=CPUOffloadPolicy(pin_memory=False))`` on every module
    (torchtitan's ``training.enable_cpu_offload``, torchtune's ``fsdp_cpu_offload``): the compute runs on the fake
    accelerator of ``fake_accelerator.py`` (model, buffers and inputs there, the mesh of its type) and the sharded
    parameters, gradients and optimizer states on the CPU; the peak is the accelerator's, the host's held bytes
    are recorded beside it (``host_after_step``). Pinned host memory (torch's default, ``pin_memory=True``) is not
    traced (fake tensors do not implement ``aten._pin_memory``: "NYI"); it changes the host's allocator, not what
    the device holds."""

    import fake_accelerator as fa
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from transformers import AutoModelForCausalLM

    offload = c.get("offload") == "cpu"
    dev = fa.device() if offload else torch.device("cpu")
    sdpa = F.scaled_dot_product_attention

    class Tracker(FSDPMemTracker):
        def _update_peak_stats(self, peak_state):
            # the global peak only (as _tracker)
            for dev, dev_snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < dev_snap["Total"]:
                    self._peak_mem[dev] = dev_snap["Total"]
                    self._peak_mem_snap[dev] = dict(dev_snap)

    cfg = rp.build_config(FSDP_MODELS[c["model"]])
    mixed = c["precision"] == "bf16-mixed"
    orig, cuda_dropout = _cuda_dropout()
    F.dropout = cuda_dropout
    if offload:
        F.scaled_dot_product_attention = fa.flash_sdpa(sdpa)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=c["dp"])
    try:
        mesh = init_device_mesh(dev.type, (c["dp"],))
        with FakeTensorMode():
            torch.manual_seed(0)
            m = AutoModelForCausalLM.from_config(cfg, attn_implementation=c["attention"],
                                                 dtype=torch.float32 if mixed else torch.bfloat16)
            if c["recompute"] != "none":
                _enable_recompute(m, c["recompute"])
            base = m
            if c.get("lora"):
                m = _peft(m, c["lora"], torch.bfloat16)
                assert all(p.dtype == torch.bfloat16 for p in m.parameters())
            mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed
                  else MixedPrecisionPolicy())
            if offload:  # the adapters too
                fa.move(m, dev)
            kw = dict(mesh=mesh, mp_policy=mp, reshard_after_forward=True,
                      offload_policy=CPUOffloadPolicy(pin_memory=False) if offload else OffloadPolicy())
            units = c.get("units", "root")
            if units != "root":  # the input embedding its own unit, resharded after its forward
                fully_shard(base.model.embed_tokens, **kw)
            for layer in base.model.layers:
                fully_shard(layer, **kw)
            if units == "split":  # torchtune's custom_sharded_layers ['tok_embeddings', 'output']
                fully_shard(base.lm_head, **kw)
            elif units == "torchtitan":  # apply_fsdp: [norm, output] one unit, not resharded after the forward
                fully_shard([base.model.norm, base.lm_head], **{**kw, "reshard_after_forward": False})
            fully_shard(m, **kw)
            m.train()
            trainable = [p for p in m.parameters() if p.requires_grad]
            opt = torch.optim.AdamW(trainable, lr=1e-4, foreach=c["adamw"] == "foreach",
                                    fused=c["adamw"] == "fused")
            ids = torch.randint(0, cfg.vocab_size, (c["batch"], c["seq"]), device=dev)
            mt = Tracker(m, opt)
            mt.track_inputs((ids,))
            with mt:
                best, where, phases = _run_steps(mt, m, opt, ids, c["microbatches"],
                                                 lambda d: _fsdp_snap(d, dev if offload else None), first=1)
                now = mt.get_tracker_snapshot("current")
                after = _fsdp_snap(now, dev if offload else None)
                host = _fsdp_snap(now, torch.device("cpu")) if offload else None
            n_params = sum(p.numel() for p in m.parameters())
            n_trainable = sum(p.numel() for p in trainable)
    finally:
        F.dropout = orig
        F.scaled_dot_product_attention = sdpa
        dist.destroy_process_group()
    if verbose:
        print(f"  peak at {where}: {best}", file=sys.stderr)
    out = {"params": int(n_params), "trainable_params": int(n_trainable), "peak_bytes": best["total"],
           "peak_phase": where, "peak_breakdown": best, "phases_last_step": phases, "after_step": after}
    return out if host is None else {**out, "host_after_step": host}


# FSDP1 (``FullyShardedDataParallel``) on the same fake process group: one rank traced, the FSDP2 cases' setups
FSDP1_FILENAME = "step_peak_fsdp1.json"
FSDP1_METHOD = ("MemTracker under FakeTensorMode on the fake accelerator (fake_accelerator.py; FSDP1 refuses a CPU "
                "device), one rank of a fake process group; FullyShardedDataParallel(FULL_SHARD, use_orig_params=False, "
                "the default BACKWARD_PRE prefetch and limit_all_gathers) with a ModuleWrapPolicy of the decoder layer "
                "class (LoRA: also every leaf module with a trainable weight, torchtune's lora_fsdp_wrap_policy); "
                "bf16-mixed: fp32 params, MixedPrecision(param_dtype=bf16, reduce_dtype=fp32, buffer_dtype=bf16), bf16: "
                f"a bf16 model without a policy; {STEPS} steps, the first not recorded; {BLOCK}-byte blocks; CUDA's "
                "native_dropout; record_stream a no-op (it delays a block's reuse in the caching allocator, not what "
                "is allocated)")


def fsdp1_cases() -> list[dict[str, Any]]:
    """The setups of :func:`fsdp_cases` (full training, gradient accumulation with a reduce-scatter every
    micro-batch, LoRA, the MoE model) under FSDP1, as HF Trainer (accelerate's ``fsdp_version`` 1, its default)
    and torchtune's 2024 recipes ran it."""
    return [{**c, "fsdp": 1} for c in fsdp_cases() if "units" not in c]


def fsdp1_case_name(c: dict[str, Any]) -> str:
    return f"fsdp1-dp{c['dp']}/" + case_name(c)


def measure_fsdp1(c: dict[str, Any], verbose: bool = False) -> dict[str, Any]:
    """One rank's training step under FSDP1: ``FullyShardedDataParallel`` with ``ShardingStrategy.FULL_SHARD`` and
    ``use_orig_params=False`` (every wrapped module's parameters flattened into one ``FlatParameter``, padded to a
    multiple of ``dp`` and split evenly), a ``ModuleWrapPolicy`` of the decoder layer class (transformers'
    ``transformer_layer_cls_to_wrap``, accelerate's ``TRANSFORMER_BASED_WRAP``) so that the root holds the
    embedding, final norm and output layer, the defaults otherwise (``BackwardPrefetch.BACKWARD_PRE``,
    ``limit_all_gathers=True``, the root not resharded after the forward). ``precision`` "bf16-mixed": fp32
    parameters and ``MixedPrecision(param_dtype=bf16, reduce_dtype=fp32, buffer_dtype=bf16)``; "bf16": a bf16
    model without a policy (torchtune's 2024 ``lora_finetune_distributed``), with LoRA's adapters wrapped apart
    (its ``lora_fsdp_wrap_policy``: every leaf module with a trainable weight), so that the frozen base and the
    adapters are different flat parameters. ``microbatches`` > 1: a reduce-scatter every micro-batch (no
    ``no_sync``), the sharded gradients accumulated in ``_saved_grad_shard``.

    FSDP1 runs on an accelerator only ("FSDP needs a non-CPU accelerator device"): the model, buffers and inputs
    are on the fake accelerator of ``fake_accelerator.py``, whose memory ``MemTracker`` counts; FSDP1 frees an
    unsharded flat parameter by resizing its storage to 0 (``_free_storage``), which ``MemTracker`` follows
    (``torch.UntypedStorage.resize_``). ``record_stream`` (which the fake device does not implement) is made a
    no-op: on CUDA it delays the reuse of a freed block by the caching allocator, not what is allocated. As for
    FSDP2, the first step is not recorded."""
    import functools

    import fake_accelerator as fa
    import torch
    import torch.distributed as dist
    import torch.distributed.fsdp._common_utils as fsdp_common
    import torch.distributed.fsdp._flat_param as fsdp_flat
    import torch.distributed.fsdp._runtime_utils as fsdp_runtime
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy, _or_policy, lambda_auto_wrap_policy
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from transformers import AutoModelForCausalLM

    dev = fa.device()
    record_stream = {mod: mod._no_dispatch_record_stream for mod in (fsdp_common, fsdp_flat, fsdp_runtime)
                     if hasattr(mod, "_no_dispatch_record_stream")}
    for mod in record_stream:
        mod._no_dispatch_record_stream = lambda tensor, stream: None
    sdpa = F.scaled_dot_product_attention
    orig, cuda_dropout = _cuda_dropout()
    F.dropout = cuda_dropout
    F.scaled_dot_product_attention = fa.flash_sdpa(sdpa)
    cfg = rp.build_config(FSDP_MODELS[c["model"]])
    mixed = c["precision"] == "bf16-mixed"
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=c["dp"])
    try:
        with FakeTensorMode():
            torch.manual_seed(0)
            m = AutoModelForCausalLM.from_config(cfg, attn_implementation=c["attention"],
                                                 dtype=torch.float32 if mixed else torch.bfloat16)
            if c["recompute"] != "none":
                _enable_recompute(m, c["recompute"])
            policy = ModuleWrapPolicy({type(layer) for layer in m.model.layers})
            if c.get("lora"):
                m = _peft(m, c["lora"], torch.bfloat16)
                adapters = functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda mod: (
                    not list(mod.children()) and getattr(mod, "weight", None) is not None
                    and mod.weight.requires_grad))
                policy = functools.partial(_or_policy, policies=[adapters, policy])
            fa.move(m, dev)
            mp = (MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.bfloat16)
                  if mixed else None)
            m = FullyShardedDataParallel(m, auto_wrap_policy=policy, sharding_strategy=ShardingStrategy.FULL_SHARD,
                                         device_id=dev, mixed_precision=mp, use_orig_params=False)
            m.train()
            trainable = [p for p in m.parameters() if p.requires_grad]
            opt = torch.optim.AdamW(trainable, lr=1e-4, foreach=c["adamw"] == "foreach", fused=c["adamw"] == "fused")
            ids = torch.randint(0, cfg.vocab_size, (c["batch"], c["seq"]), device=dev)
            mt = _tracker()
            mt.track_external(m, opt)
            with mt:
                best, where, phases = _run_steps(mt, m, opt, ids, c["microbatches"], lambda d: _fsdp_snap(d, dev),
                                                 first=1)
                after = _fsdp_snap(mt.get_tracker_snapshot("current"), dev)
            n_params = sum(p.numel() for p in m.parameters())
            n_trainable = sum(p.numel() for p in trainable)
    finally:
        F.dropout = orig
        F.scaled_dot_product_attention = sdpa
        for mod, fn in record_stream.items():
            mod._no_dispatch_record_stream = fn
        dist.destroy_process_group()
    if verbose:
        print(f"  peak at {where}: {best}", file=sys.stderr)
    return {"params": int(n_params), "trainable_params": int(n_trainable), "peak_bytes": best["total"],
            "peak_phase": where, "peak_breakdown": best, "phases_last_step": phases, "after_step": after}


def _record(cases_, name_of, measure_one, models, label, only, verbose) -> list[dict[str, Any]]:
    """Trace every case of ``cases_`` (those whose name contains ``only``), each with its model's config."""
    records = []
    t0 = time.time()
    for c in cases_:
        name = name_of(c)
        if only and only not in name:
            continue
        t1 = time.time()
        r = measure_one(c, verbose)
        if verbose:
            print(f"{name}: peak {r['peak_bytes']:,} B ({r['peak_phase']}) in {time.time() - t1:.2f} s",
                  file=sys.stderr)
        records.append({"name": name, **c, "config": models[c["model"]], **r})
    print(f"{len(records)} {label} in {time.time() - t0:.1f} s", file=sys.stderr)
    return records


def record_fsdp(only: str | None = None, verbose: bool = False) -> list[dict[str, Any]]:
    return _record(fsdp_cases(), fsdp_case_name, measure_fsdp, FSDP_MODELS, "FSDP2 cases", only, verbose)


def record_fsdp_offload(only: str | None = None, verbose: bool = False) -> list[dict[str, Any]]:
    return _record(fsdp_offload_cases(), fsdp_case_name, measure_fsdp, FSDP_MODELS, "FSDP2 CPU-offload cases",
                   only, verbose)


def record_fsdp1(only: str | None = None, verbose: bool = False) -> list[dict[str, Any]]:
    return _record(fsdp1_cases(), fsdp1_case_name, measure_fsdp1, FSDP_MODELS, "FSDP1 cases", only, verbose)


def record_all(only: str | None = None, verbose: bool = False) -> list[dict[str, Any]]:
    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
    _block_rounding()
    return _record(cases(), case_name, measure, MODELS, "cases", only, verbose)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="recompute and compare with the committed file")
    ap.add_argument("--only", help="only the cases whose name contains this text (not with --check; nothing written)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each case, its peak and its time")
    ap.add_argument("--root", help="repository root (default: this file's parent folder)")
    args = ap.parse_args(argv)
    rp.set_root(args.root)
    rp.quiet()
    import fake_accelerator

    # before any backward: autograd sizes its per-device queues on its first backward, from the devices then known
    fake_accelerator.device()
    records = record_all(args.only, args.verbose)
    fsdp = record_fsdp(args.only, args.verbose)
    offload = record_fsdp_offload(args.only, args.verbose)
    fsdp1 = record_fsdp1(args.only, args.verbose)
    path, fsdp_path = rp.out_path(FILENAME), rp.out_path(FSDP_FILENAME)
    offload_path = rp.out_path(FSDP_OFFLOAD_FILENAME)
    fsdp1_path = rp.out_path(FSDP1_FILENAME)
    extra = {"method": f"MemTracker under FakeTensorMode, {STEPS} steps (forward+loss, backward, AdamW step, "
                       f"zero_grad(set_to_none=True), or False where a record says grads_kept); {BLOCK}-byte blocks; "
                       "CUDA's native_dropout; encoders as AutoModelForSequenceClassification",
             "excluded": EXCLUDED}
    fsdp_extra = {"method": f"FSDPMemTracker under FakeTensorMode, one rank of a fake process group; fully_shard "
                            f"per decoder layer and the root (a record with units: the embedding and output layer "
                            f"their own units too, fsdp_units_cases), reshard_after_forward; bf16-mixed: bf16 params / "
                            f"fp32 reduce (torchtitan), bf16: a bf16 model without a policy (torchtune's LoRA and full fine-tune); "
                            f"{STEPS} steps, the first not recorded; {BLOCK}-byte blocks; CUDA's native_dropout"}
    offload_extra = {"method": OFFLOAD_METHOD}
    if args.check:
        return (rp.check_envelope(path, records, ("name",), **extra)
                | rp.check_envelope(fsdp_path, fsdp, ("name",), **fsdp_extra)
                | rp.check_envelope(offload_path, offload, ("name",), **offload_extra)
                | rp.check_envelope(fsdp1_path, fsdp1, ("name",), method=FSDP1_METHOD))
    if args.only:
        return 0
    rp.write_envelope(path, GENERATED_BY, records, **extra)
    rp.write_envelope(fsdp_path, GENERATED_BY, fsdp, **fsdp_extra)
    rp.write_envelope(offload_path, GENERATED_BY, offload, **offload_extra)
    rp.write_envelope(fsdp1_path, GENERATED_BY, fsdp1, method=FSDP1_METHOD)
    print(f"wrote {path.relative_to(rp.ROOT)} ({len(records)} records), {fsdp_path.relative_to(rp.ROOT)} "
          f"({len(fsdp)} records), {offload_path.relative_to(rp.ROOT)} ({len(offload)} records), "
          f"{fsdp1_path.relative_to(rp.ROOT)} ({len(fsdp1)} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
