"""Measure on one CUDA GPU what the CPU harness and the cost model stand in for.

Run on a machine with an NVIDIA GPU (it is not part of CI; its outputs are committed as data and the tests
compare against them without a GPU):

1. **Training-step peaks** (``step_peak_cuda.json``): every configuration of ``record_step_peak.cases()`` (and
   three at real model sizes), built with real tensors on the GPU and run through the same three training steps
   (forward and loss, backward, AdamW step, ``zero_grad(set_to_none=True)``); the peak is
   ``torch.cuda.max_memory_allocated()`` minus what was allocated before the model was made (each configuration is
   run twice and the second run kept, so the cuBLAS/cuBLASLt workspaces are in the baseline, not in the peak).
   ``max_memory_reserved`` is kept beside it (what the caching allocator took from the driver), and the CUDA
   context's own size (``mem_get_info`` before and after the first allocation).
2. **Grouped GEMMs of MoE experts** (``grouped_gemm.json``): ``torch._grouped_mm`` (bf16) and
   ``torch._scaled_grouped_mm`` (fp8 e4m3, row-wise scales) over the routed experts of real MoE models, with ``m``
   tokens per expert from 1 to 4,096, balanced and routed uniformly at random (multinomial counts), for the
   gate-and-up projection (``[T, H] x [E, H, 2F]``) and the down projection (``[T, F] x [E, F, H]``), with a dense
   ``[T, K] x [K, N]`` GEMM of the same FLOPs beside each; median time of ``triton.testing.do_bench`` (L2 flushed
   before each run).
   **A whole MoE layer** (``moe_layer.json``, ``--part moe``): router, top-k, sort, gather, the two grouped GEMMs,
   SwiGLU, routing weights and ``index_add`` of the same models at 4,096 and 16,384 tokens, forward and
   forward+backward, against the two grouped GEMMs alone.
3. **Dense GEMMs and bandwidth** (``dense.json``): a 4 GiB device-to-device copy and a read-only reduction, and
   ``X[M, K] @ W[K, N]`` for transformer shapes, bf16 and fp8.

   ``--part full2`` and ``--part full3`` are later runs of full-size steps, held out (``step_peak_cuda_full2.json``,
   ``step_peak_cuda_full3.json``): every recompute mode; then the families the CPU harness does not trace at their
   released widths on a few layers (:data:`FULL3`, cut from ``presets/models`` by :func:`preset_config`; Qwen3-Next
   needs flash-linear-attention and fla-core 0.6.0 beside transformers 5.23).

    python validation/measure_gpu.py --out DIR [--part steps|full|full2|full3|grouped|moe|dense]...
"""

# ruff: noqa: B023  (every benchmarked lambda runs before its loop variables change)

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parents[1]

import record_params as rp  # noqa: E402
import record_step_peak as rsp  # noqa: E402

STEPS = rsp.STEPS
DEVICE = "cuda"  # "cpu" only to smoke-test this script without a GPU

# Released models' shapes (their config.json; random weights), for real sizes on one GPU
REAL = {
    **{k: rsp.FSDP_MODELS[k] for k in ("llama3.2-1b-style", "llama3.1-8b-style", "qwen3-1.7b-style")},
    "gemma-2-2b": {
        "model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 256000,
        "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "query_pre_attn_scalar": 256,
        "sliding_window": 4096, "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 8192,
        "tie_word_embeddings": True,
    },
    "phi-3-mini": {
        "model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu", "rope_theta": 10000.0,
        "sliding_window": 2047,
    },
    # Qwen1.5-MoE-A2.7B's widths (60 experts of 1408, top 4, a 5632 shared expert) on 12 of its 24 layers
    "qwen2moe-a2.7b-12l": {**rsp.FSDP_MODELS["qwen2moe-a2.7b-style"], "num_hidden_layers": 12},
    # GPT-2 medium (the fp32 eager case; dropout 0.1 as released)
    "gpt2-medium": {
        "model_type": "gpt2", "n_embd": 1024, "n_layer": 24, "n_head": 16, "vocab_size": 50257, "n_positions": 1024,
        "n_ctx": 1024, "activation_function": "gelu_new", "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
        "layer_norm_epsilon": 1e-5,
    },
    # Qwen3-30B-A3B's widths (128 experts of 768, top 8) on 4 of its 48 layers
    "qwen3-30b-a3b-4l": {
        "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
        "num_hidden_layers": 4, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
        "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "tie_word_embeddings": False, "hidden_act": "silu", "router_aux_loss_coef": 0.0,
    },
    # DeepSeek-V2-Lite's MLA and experts (64 of 1408, top 6, 2 shared) on 6 of its 27 layers
    "deepseek-v2-lite-6l": {
        "model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
        "num_hidden_layers": 6, "first_k_dense_replace": 1, "num_attention_heads": 16, "num_key_value_heads": 16,
        "q_lora_rank": None, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "n_routed_experts": 64, "num_experts_per_tok": 6, "n_shared_experts": 2, "n_group": 1, "topk_group": 1,
        "topk_method": "greedy", "norm_topk_prob": False, "routed_scaling_factor": 1.0, "vocab_size": 102400,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000, "rope_scaling": None,
        "tie_word_embeddings": False, "hidden_act": "silu",
    },
    # Mixtral-8x7B's widths (8 experts of 14336, top 2) on 2 of its 32 layers
    "mixtral-8x7b-2l": {
        "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 2,
        "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
        "vocab_size": 32000, "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
        "tie_word_embeddings": False, "hidden_act": "silu", "router_aux_loss_coef": 0.0,
    },
}

# (model, attention, precision, recompute, batch, seq, lora targets)
FULL = [
    ("llama3.2-1b-style", "sdpa", "bf16-mixed", "none", 2, 2048, None),
    ("llama3.2-1b-style", "sdpa", "bf16-mixed", "full", 4, 2048, None),
    ("qwen3-1.7b-style", "sdpa", "bf16-mixed", "none", 2, 2048, None),
    ("qwen3-1.7b-style", "sdpa", "bf16-mixed", "none", 4, 2048, None),
    ("qwen3-1.7b-style", "eager", "bf16-mixed", "none", 2, 2048, None),
    ("gemma-2-2b", "sdpa", "bf16-mixed", "none", 4, 1024, None),
    ("gemma-2-2b", "sdpa", "bf16-mixed", "none", 4, 2048, None),
    ("gemma-2-2b", "eager", "bf16-mixed", "none", 4, 1024, None),
    ("gemma-2-2b", "sdpa", "bf16", "none", 4, 2048, None),
    ("gemma-2-2b", "eager", "bf16", "none", 2, 2048, None),
    ("phi-3-mini", "sdpa", "bf16-mixed", "full", 4, 2048, None),
    ("phi-3-mini", "sdpa", "bf16", "full", 8, 2048, None),
    ("llama3.1-8b-style", "sdpa", "bf16", "full", 4, 2048, "all"),
    ("llama3.1-8b-style", "sdpa", "bf16", "none", 2, 2048, "q,v"),
    ("qwen2moe-a2.7b-12l", "sdpa", "bf16", "none", 2, 2048, None),
    ("qwen2moe-a2.7b-12l", "sdpa", "bf16", "full", 4, 2048, None),
    ("gpt2-medium", "eager", "fp32", "none", 4, 1024, None),
    ("gpt2-medium", "eager", "fp32", "full", 8, 1024, None),
    ("gpt2-medium", "sdpa", "bf16-mixed", "none", 8, 1024, None),
    ("gpt2-medium", "eager", "bf16-mixed", "none", 4, 1024, None),
    ("qwen3-30b-a3b-4l", "sdpa", "bf16", "none", 2, 2048, None),
    ("qwen3-30b-a3b-4l", "sdpa", "bf16", "full", 4, 2048, None),
    ("deepseek-v2-lite-6l", "sdpa", "bf16", "none", 2, 2048, None),
    ("deepseek-v2-lite-6l", "eager", "bf16", "none", 1, 2048, None),
    ("mixtral-8x7b-2l", "sdpa", "bf16", "none", 2, 2048, None),
]
# A second run (``--part full2``), measured after ALLOCATOR_RESERVE and the peak terms were set from the first:
# every recompute mode at full size, LoRA on all linear layers, and the MoE widths with recompute (held out)
FULL2 = [
    ("llama3.2-1b-style", "sdpa", "bf16-mixed", "selective-op", 4, 2048, None),
    ("llama3.2-1b-style", "sdpa", "bf16", "full", 8, 2048, None),
    ("llama3.2-1b-style", "sdpa", "bf16-mixed", "every-2", 4, 2048, None),
    ("qwen3-1.7b-style", "sdpa", "bf16-mixed", "full", 8, 2048, None),
    ("qwen3-1.7b-style", "sdpa", "bf16", "selective-op", 4, 2048, None),
    ("gemma-2-2b", "sdpa", "bf16", "full", 8, 2048, None),
    ("gemma-2-2b", "eager", "bf16-mixed", "full", 4, 2048, None),
    ("phi-3-mini", "sdpa", "bf16", "none", 2, 2048, None),
    ("phi-3-mini", "sdpa", "bf16", "selective-op", 4, 2048, None),
    ("llama3.1-8b-style", "sdpa", "bf16", "full", 8, 2048, "all"),
    ("llama3.1-8b-style", "sdpa", "bf16", "none", 2, 2048, "all"),
    ("qwen2moe-a2.7b-12l", "sdpa", "bf16", "every-2", 4, 2048, None),
    ("qwen3-30b-a3b-4l", "sdpa", "bf16", "none", 4, 2048, None),
    ("qwen3-30b-a3b-4l", "sdpa", "bf16", "full", 8, 2048, None),
    ("deepseek-v2-lite-6l", "sdpa", "bf16", "full", 4, 2048, None),
    ("mixtral-8x7b-2l", "sdpa", "bf16", "full", 4, 2048, None),
    ("gpt2-medium", "sdpa", "bf16-mixed", "full", 16, 1024, None),
    ("gpt2-medium", "eager", "fp32", "selective-op", 4, 1024, None),
]

# A third run (``--part full3``), held out: the model families the CPU harness does not trace, at their released
# widths (the preset's config.json) on a few layers, built from presets/models by :func:`preset_config`; and one
# step each side of the card's memory (gemma-3 eager at batch 4 and 6, 4,096 tokens) for "does it fit"
FULL3_MODELS = {
    "gpt-oss-20b-4l": ("gpt-oss-20b", 4, {}),
    "gemma-3-4b-8l": ("gemma-3-4b", 8, {}),
    "olmo-2-13b-4l": ("olmo-2-13b", 4, {}),
    "granite-3.3-8b-8l": ("granite-3.3-8b", 8, {}),
    "phi-4-4l": ("phi-4", 4, {}),
    "command-r7b-4l": ("command-r7b", 4, {}),
    "mistral-nemo-12b-4l": ("mistral-nemo-12b", 4, {}),
    "llama-4-scout-2l": ("llama-4-scout", 2, {}),
    "glm-4.7-flash-4l": ("glm-4.7-flash", 4, {}),
    "minimax-m2.7-2l": ("minimax-m2.7", 2, {}),
    "qwen3-235b-a22b-2l": ("qwen3-235b-a22b", 2, {}),
    # sliding, CSA, HCA, CSA layers (the MTP layer's entry last), one hash-routed layer, 32 of the 256 experts
    "deepseek-v4-flash-4l": ("deepseek-v4-flash", 4, {"compress_ratios": [0, 4, 128, 4, 0], "num_hash_layers": 1,
                                                     "n_routed_experts": 32}),
    "qwen3-next-80b-a3b-4l": ("qwen3-next-80b-a3b", 4, {}),
}
FULL3 = [
    ("gpt-oss-20b-4l", "eager", "bf16", "none", 2, 2048, None),
    ("gpt-oss-20b-4l", "eager", "bf16", "full", 4, 2048, None),
    ("gemma-3-4b-8l", "sdpa", "bf16-mixed", "none", 2, 2048, None),
    ("gemma-3-4b-8l", "eager", "bf16", "none", 2, 2048, None),
    ("gemma-3-4b-8l", "eager", "bf16", "none", 4, 4096, None),
    ("gemma-3-4b-8l", "eager", "bf16", "none", 6, 4096, None),
    ("olmo-2-13b-4l", "sdpa", "bf16", "none", 2, 2048, None),
    ("granite-3.3-8b-8l", "sdpa", "bf16-mixed", "full", 4, 2048, None),
    ("phi-4-4l", "sdpa", "bf16", "none", 2, 2048, None),
    ("command-r7b-4l", "sdpa", "bf16", "none", 2, 2048, None),
    ("mistral-nemo-12b-4l", "sdpa", "bf16", "none", 2, 2048, "all"),
    ("llama-4-scout-2l", "sdpa", "bf16", "none", 2, 2048, None),
    ("glm-4.7-flash-4l", "sdpa", "bf16", "none", 2, 2048, None),
    ("minimax-m2.7-2l", "sdpa", "bf16", "none", 1, 2048, None),
    ("qwen3-235b-a22b-2l", "sdpa", "bf16", "full", 4, 4096, None),
    ("deepseek-v4-flash-4l", "eager", "bf16", "none", 1, 2048, None),
    ("qwen3-next-80b-a3b-4l", "sdpa", "bf16", "none", 2, 2048, None),  # last: fla compiles its kernels first
]
# A fourth run (``--part full4``), held out: the same families under AMP, recompute modes and LoRA
FULL4 = [
    ("command-r7b-4l", "sdpa", "bf16", "none", 2, 2048, "all"),
    ("gemma-3-4b-8l", "sdpa", "bf16", "selective-op", 4, 2048, None),
    ("granite-3.3-8b-8l", "eager", "bf16", "none", 2, 2048, None),
    ("phi-4-4l", "sdpa", "bf16-mixed", "none", 2, 2048, None),
    ("olmo-2-13b-4l", "sdpa", "bf16-mixed", "full", 4, 4096, None),
    ("glm-4.7-flash-4l", "sdpa", "bf16", "full", 4, 4096, None),
    ("deepseek-v4-flash-4l", "eager", "bf16", "full", 2, 2048, None),
    ("minimax-m2.7-2l", "sdpa", "bf16", "full", 2, 4096, None),
    ("gpt-oss-20b-4l", "eager", "bf16-mixed", "none", 1, 2048, None),
    ("qwen3-next-80b-a3b-4l", "sdpa", "bf16", "full", 4, 4096, None),
    ("llama-4-scout-2l", "sdpa", "bf16-mixed", "none", 1, 2048, None),  # last: 129.5 GB estimated, near the card
]
_TEXT = {"gemma3": "gemma3_text", "llama4": "llama4_text"}
_PER_LAYER = ("layer_types", "mlp_only_layers", "no_rope_layers", "moe_layers", "compress_ratios")


def preset_config(preset: str, layers: int, **over: Any) -> dict[str, Any]:
    """A model preset's config.json (presets/models/PRESET.yaml ``config``; an image-text wrapper's text config)
    on its first ``layers`` layers, per-layer lists cut to match, ``over`` applied last."""
    import copy

    import yaml

    cfg = yaml.safe_load((ROOT / "presets" / "models" / f"{preset}.yaml").read_text(encoding="utf-8"))["config"]
    if cfg.get("model_type") in _TEXT:
        cfg = {"model_type": _TEXT[cfg["model_type"]], **copy.deepcopy(cfg["text_config"])}
    cfg = copy.deepcopy(cfg)
    cfg["num_hidden_layers"] = layers
    for k in _PER_LAYER:
        if isinstance(cfg.get(k), list):
            cfg[k] = cfg[k][:layers]
    for k in ("architectures", "torch_dtype", "dtype"):
        cfg.pop(k, None)
    return {**cfg, **over}


def models(name: str) -> dict[str, Any]:
    """The config of a full-size step's model: :data:`REAL`, else a :data:`FULL3_MODELS` preset cut."""
    if name in REAL:
        return REAL[name]
    preset, layers, over = FULL3_MODELS[name]
    return preset_config(preset, layers, **over)


# Routed experts (E, H, F) of released MoE models (their config.json)
MOE_SHAPES = {
    "qwen3-30b-a3b": (128, 2048, 768),
    "qwen1.5-moe-a2.7b": (60, 2048, 1408),
    "qwen3-235b-a22b": (128, 4096, 1536),
    "deepseek-v3": (256, 7168, 2048),
    "gpt-oss-120b": (128, 2880, 2880),
    "llama4-maverick": (128, 5120, 8192),
    "mixtral-8x7b": (8, 4096, 14336),
}
TOKENS_PER_EXPERT = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
MAX_FLOP = 1.6e13  # one GEMM at most (about 20 ms at Hopper's dense bf16 rate)

DENSE_SHAPES = [(4096, 4096), (4096, 14336), (14336, 4096), (8192, 28672)]
DENSE_M = [1, 8, 32, 128, 512, 2048, 8192, 16384]


def _bench(fn) -> float:
    try:
        import triton.testing
    except ImportError:  # a smoke test without a GPU
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t
    return float(triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")) / 1e3


def _write(out: Path, name: str, records: list, **meta: Any) -> None:
    import torch

    doc = {"what": __doc__.splitlines()[0], "meta": {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
                                                     "versions": rp.versions(), **meta}, "records": records}
    (out / name).write_text(json.dumps(doc, indent=1) + "\n")


# 1. training-step peaks -----------------------------------------------------------------------------------------

def _step(c: dict[str, Any], cfg, steady: bool = False, compile_layers: bool = False) -> dict[str, int]:
    """Three training steps of ``c`` on the GPU, the peak from the model's making on. ``steady``: the peak over
    the second and third steps only (after the first step's compilation and the optimizer's lazily made states),
    without a KV cache; ``compile_layers``: each decoder layer compiled on its own as torchtitan compiles each
    TransformerBlock (``nn.Module.compile``)."""
    import torch
    from transformers import AutoModelForCausalLM

    mixed = c["precision"] == "bf16-mixed"
    dtype = torch.bfloat16 if c["precision"] == "bf16" else torch.float32
    torch.manual_seed(0)
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.device(DEVICE):
        m = AutoModelForCausalLM.from_config(cfg, attn_implementation=c["attention"], dtype=dtype)
    if c.get("lora"):
        from peft import LoraConfig, get_peft_model

        m = get_peft_model(m, LoraConfig(r=c["lora"]["rank"], lora_alpha=32, lora_dropout=0.0,
                                         target_modules=rsp.LORA_TARGETS[c["lora"]["targets"]]))
    if c["recompute"] != "none":
        rsp._enable_recompute(m, c["recompute"])
    if compile_layers:
        from transformers.modeling_layers import GradientCheckpointingLayer

        for mod in m.modules():
            if isinstance(mod, GradientCheckpointingLayer):
                mod.compile()
    m.train()
    trainable = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-4, foreach=c["adamw"] == "foreach", fused=c["adamw"] == "fused")
    ids = torch.randint(0, cfg.vocab_size, (c["batch"], c["seq"]), device=DEVICE)
    cache = {"use_cache": False} if steady else {}  # no KV cache in training
    for step in range(STEPS):
        if steady and step == 1:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        for _ in range(c["microbatches"]):
            with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=mixed):
                loss = m(input_ids=ids, labels=ids, **cache).loss / c["microbatches"]
            loss.backward()
            del loss
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    r = {"peak_bytes": int(torch.cuda.max_memory_allocated() - base),
         "reserved_peak_bytes": int(torch.cuda.max_memory_reserved()),
         "after_step_bytes": int(torch.cuda.memory_allocated() - base), "baseline_bytes": int(base),
         "params": int(sum(p.numel() for p in m.parameters()))}
    if steady:
        import torch._dynamo.utils as du

        r["compiled_graphs"] = int(du.counters["stats"]["unique_graphs"]) if compile_layers else 0
    del m, opt, ids, trainable
    gc.collect()
    torch.cuda.empty_cache()
    return r


def steps(out: Path, small: bool = True, only: str | None = None, full: list | None = None,
          file_name: str = "") -> None:
    import torch

    free0, total = torch.cuda.mem_get_info()
    torch.empty(1, device=DEVICE)
    free1, _ = torch.cuda.mem_get_info()
    context = {"total_bytes": int(total), "free_before_first_allocation": int(free0),
               "free_after_first_allocation": int(free1), "reserved_after": int(torch.cuda.memory_reserved())}
    records = []
    cases = [(c, rsp.MODELS[c["model"]], rsp.case_name(c)) for c in (rsp.cases() if small else [])]
    for model, attention, precision, recompute, batch, seq, lora in (FULL if full is None else full):
        c = rsp._case(model, batch, seq, attention, precision, recompute, lora=lora)
        cases.append((c, models(model), "full-size/" + rsp.case_name(c)))
    t0 = time.time()
    warm = False
    file = file_name or ("step_peak_cuda.json" if small else "step_peak_cuda_full.json")
    method = (f"real tensors on the GPU, {STEPS} steps; peak = max_memory_allocated - allocated before the model; "
              "each small case run twice, the second kept; full-size cases once, after a first warm-up")
    for c, config, name in cases:
        if only and only not in name:
            continue
        cfg = rp.build_config(config)
        try:
            if not warm or not name.startswith("full-size/"):  # warm-up: workspaces, lazy allocations
                _step(c, cfg)
                warm = True
            r = _step(c, cfg)
        except Exception as e:  # noqa: BLE001 (recorded, the rest goes on)
            r = {"error": f"{type(e).__name__}: {e}"[:300]}
            gc.collect()
            torch.cuda.empty_cache()
        records.append({"name": name, **c, "config": config, **r})
        print(f"{name}: {r}", flush=True)
        _write(out, file, records, context=context, seconds=round(time.time() - t0, 1), method=method)  # each step


# torch.compile'd steps beside eager ones: what inductor's partitioner saves (docs/train-mem.md, "Residuals")
COMPILED = [
    ("llama3.2-1b-style", "sdpa", "bf16", "none", 2, 2048, None),
    ("llama3.2-1b-style", "sdpa", "bf16-mixed", "none", 2, 2048, None),
    ("llama3.2-1b-style", "sdpa", "bf16", "full", 4, 2048, None),
    ("qwen3-1.7b-style", "sdpa", "bf16", "none", 2, 2048, None),
    ("phi-3-mini", "sdpa", "bf16", "none", 2, 2048, None),
    ("llama3.1-8b-style", "sdpa", "bf16", "none", 2, 2048, "all"),
]


def compiled(out: Path) -> None:
    import torch

    torch._dynamo.config.cache_size_limit = 64
    torch.ones(64, 64, device=DEVICE) @ torch.ones(64, 64, device=DEVICE)  # the cuBLAS workspaces in the baseline
    records = []
    t0 = time.time()
    for model, attention, precision, recompute, batch, seq, lora in COMPILED:
        c = rsp._case(model, batch, seq, attention, precision, recompute, lora=lora)
        cfg = rp.build_config(REAL[model])
        rec = {"name": "full-size/" + rsp.case_name(c), **c, "config": REAL[model]}
        for mode in ("eager", "compiled"):
            t = time.time()
            try:
                rec[mode] = _step(c, cfg, steady=True, compile_layers=mode == "compiled")
            except Exception as e:  # noqa: BLE001 (recorded, the rest goes on)
                rec[mode] = {"error": f"{type(e).__name__}: {e}"[:300]}
                gc.collect()
                torch.cuda.empty_cache()
            rec[mode]["seconds"] = round(time.time() - t, 1)
            print(f"{rec['name']} {mode}: {rec[mode]}", flush=True)
        records.append(rec)
        _write(out, "step_peak_compiled.json", records, seconds=round(time.time() - t0, 1),
               method=f"real tensors on the GPU, {STEPS} steps, the peak over steps 2-3 (reset after the first: "
                      "compilation, the optimizer's states made) less what was allocated before the model; "
                      "compiled: each decoder layer torch.compile'd on its own (nn.Module.compile, default mode, "
                      "as torchtitan compiles each TransformerBlock); foreach AdamW")


# 2. grouped GEMMs ------------------------------------------------------------------------------------------------

def _counts(T: int, E: int, mode: str, gen):
    import torch

    if mode == "balanced":
        return torch.full((E,), T // E, dtype=torch.int64)
    idx = torch.randint(0, E, (T,), generator=gen)
    return torch.bincount(idx, minlength=E)


def grouped(out: Path) -> None:
    import torch

    gen = torch.Generator().manual_seed(0)
    records = []
    for model, (E, H, F) in MOE_SHAPES.items():
        for proj, K, N in (("gate_up", H, 2 * F), ("down", F, H)):
            w = torch.randn(E, N, K, device=DEVICE, dtype=torch.bfloat16)  # [E, N, K] as checkpoints store it
            w8 = w.to(torch.float8_e4m3fn)
            sb = torch.ones(E, N, device=DEVICE, dtype=torch.float32)
            for m in TOKENS_PER_EXPERT:
                T = m * E
                flop = 2.0 * T * K * N
                if flop > MAX_FLOP and m > 64:
                    break
                x = torch.randn(T, K, device=DEVICE, dtype=torch.bfloat16)
                x8 = x.to(torch.float8_e4m3fn)
                sa = torch.ones(T, device=DEVICE, dtype=torch.float32)
                for mode in ("balanced", "random"):
                    counts = _counts(T, E, mode, gen)
                    offs = torch.cumsum(counts, 0).to(device=DEVICE, dtype=torch.int32)
                    rec = {"model": model, "proj": proj, "E": E, "K": K, "N": N, "m": m, "tokens": T, "routing": mode,
                           "max_count": int(counts.max()), "experts_reached": int((counts > 0).sum()),
                           "flop": flop, "weight_bytes_bf16": 2 * E * K * N}
                    try:
                        rec["bf16_s"] = _bench(lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs))
                    except Exception as e:  # noqa: BLE001
                        rec["bf16_error"] = f"{type(e).__name__}: {e}"[:200]
                    try:
                        rec["fp8_s"] = _bench(lambda: torch._scaled_grouped_mm(
                            x8, w8.transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=True))
                    except Exception as e:  # noqa: BLE001
                        rec["fp8_error"] = f"{type(e).__name__}: {e}"[:200]
                    if mode == "balanced":
                        wd = w[0].t().contiguous()
                        rec["dense_one_expert_s"] = _bench(lambda: x[:m] @ wd)
                        wT = torch.randn(K, N, device=DEVICE, dtype=torch.bfloat16)
                        rec["dense_same_flop_s"] = _bench(lambda: x @ wT)
                        wT = None
                    records.append(rec)
                    print(json.dumps(rec), flush=True)
                x = x8 = sa = None  # freed before the next size
            w = w8 = sb = None
            torch.cuda.empty_cache()
        _write(out, "grouped_gemm.json", records,
               method="torch._grouped_mm (bf16) and torch._scaled_grouped_mm (fp8 e4m3, row-wise scales, bf16 out, use_fast_accum); "
                      "do_bench median, warmup 5 ms, rep 25 ms, L2 flushed")


# 2b. a whole MoE layer around the grouped GEMMs ----------------------------------------------------------------------

# (E, H, F, k) of released MoE models (their config.json)
MOE_LAYERS = {
    "qwen3-30b-a3b": (128, 2048, 768, 8), "qwen1.5-moe-a2.7b": (60, 2048, 1408, 4),
    "qwen3-235b-a22b": (128, 4096, 1536, 8), "deepseek-v3": (256, 7168, 2048, 8), "gpt-oss-120b": (128, 2880, 2880, 4),
    "llama4-maverick": (128, 5120, 8192, 1), "mixtral-8x7b": (8, 4096, 14336, 2),
}


def _moe_layer(x, router, w_up, w_down, k):
    """A dropless MoE layer as torchtitan and transformers' grouped_mm path run it: router GEMM, softmax top-k,
    the token copies sorted into expert order (gather), the up projection, SwiGLU, the down projection, the
    routing weights, and the copies summed back into their tokens (index_add)."""
    import torch
    import torch.nn.functional as F

    E = w_up.shape[0]
    probs = torch.softmax((x @ router.t()).float(), dim=-1)
    top_w, top_i = probs.topk(k, dim=-1)
    flat = top_i.flatten()
    order = flat.argsort(stable=True)
    offs = torch.cumsum(torch.bincount(flat, minlength=E), 0).to(torch.int32)
    tok = order // k
    h = torch._grouped_mm(x[tok], w_up.transpose(-2, -1), offs=offs)
    g, u = h.chunk(2, dim=-1)
    y = torch._grouped_mm(F.silu(g) * u, w_down.transpose(-2, -1), offs=offs)
    y = y * top_w.flatten()[order, None].to(y.dtype)
    return torch.zeros_like(x).index_add_(0, tok, y)


def moe_layers(out: Path) -> None:
    import torch

    records = []
    for model, (E, H, F, k) in MOE_LAYERS.items():
        router = torch.randn(E, H, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
        w_up = (torch.randn(E, 2 * F, H, device=DEVICE, dtype=torch.bfloat16) * 0.02).requires_grad_()
        w_down = (torch.randn(E, H, F, device=DEVICE, dtype=torch.bfloat16) * 0.02).requires_grad_()
        for T in (4096, 16384):
            x = torch.randn(T, H, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
            # the two grouped GEMMs alone on balanced copies (the work the cost model's GEMM terms price)
            m = T * k // E
            xs = torch.randn(m * E, H, device=DEVICE, dtype=torch.bfloat16)
            a = torch.randn(m * E, F, device=DEVICE, dtype=torch.bfloat16)
            offs = torch.arange(1, E + 1, device=DEVICE, dtype=torch.int32) * m
            rec = {"model": model, "E": E, "H": H, "F": F, "k": k, "tokens": T, "copies": T * k,
                   "gemm_flop_fwd": 2.0 * T * k * H * 3 * F}
            rec["gemms_fwd_s"] = _bench(lambda: (torch._grouped_mm(xs, w_up.detach().transpose(-2, -1), offs=offs),
                                                 torch._grouped_mm(a, w_down.detach().transpose(-2, -1), offs=offs)))
            with torch.no_grad():
                rec["layer_fwd_s"] = _bench(lambda: _moe_layer(x, router, w_up, w_down, k))
            grad = torch.randn(T, H, device=DEVICE, dtype=torch.bfloat16)

            def step():
                _moe_layer(x, router, w_up, w_down, k).backward(grad)

            rec["layer_fwd_bwd_s"] = _bench(step)
            records.append(rec)
            print(json.dumps(rec), flush=True)
            x = xs = a = None
        router = w_up = w_down = None
        torch.cuda.empty_cache()
    _write(out, "moe_layer.json", records,
           method="a dropless MoE layer (router, softmax top-k, sort, gather, grouped_mm up, SwiGLU, grouped_mm down, "
                  "weights, index_add) in bf16, forward (no_grad) and forward+backward, against its two grouped "
                  "GEMMs alone on balanced copies; do_bench median, warmup 5 ms, rep 25 ms, L2 flushed")


# 4. the CUDA context ---------------------------------------------------------------------------------------------

def context(out: Path) -> None:
    """Device memory the process holds outside PyTorch's caching allocator (CUDA context, loaded kernel modules,
    library handles), read by NVML for this process, less ``memory_reserved()``: after the first allocation, after
    a bf16 matmul (cuBLAS), and after three training steps of a small Llama (SDPA flash kernels, fused and foreach
    AdamW, cross-entropy). Run it in a fresh process (``--part context`` alone)."""
    import os

    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)  # before torch touches CUDA
    import torch

    def used() -> int:
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if p.pid == os.getpid():
                return int(p.usedGpuMemory)
        return -1

    records = []
    before = int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)  # the device before this process made a context

    def read(stage: str) -> None:
        torch.cuda.synchronize()
        u, r = used(), int(torch.cuda.memory_reserved())
        dev = int(pynvml.nvmlDeviceGetMemoryInfo(handle).used) - before
        records.append({"stage": stage, "process_used_bytes": u, "device_used_since_start_bytes": dev,
                        "reserved_bytes": r, "outside_bytes": (u if u >= 0 else dev) - r})
        print(json.dumps(records[-1]), flush=True)

    torch.empty(1, device=DEVICE)
    read("first allocation")
    a = torch.randn(4096, 4096, device=DEVICE, dtype=torch.bfloat16)
    (a @ a).sum().item()
    read("bf16 matmul")
    c = rsp._case("llama3-style", 2, 1024, "sdpa", "bf16-mixed", "none")
    _step(c, rp.build_config(rsp.MODELS["llama3-style"]))
    c = rsp._case("llama3-style", 2, 1024, "sdpa", "bf16", "none", adamw="fused")
    _step(c, rp.build_config(rsp.MODELS["llama3-style"]))
    read("training steps")
    _write(out, "context.json", records, method="NVML's per-process used memory less torch.cuda.memory_reserved(), "
                                                  "one fresh process")


# 3. dense GEMMs and bandwidth ---------------------------------------------------------------------------------------

def dense(out: Path) -> None:
    import torch

    records = []
    n = 2**31  # 4 GiB of bf16
    a = torch.empty(n, dtype=torch.bfloat16, device=DEVICE)
    b = torch.empty_like(a)
    s = _bench(lambda: b.copy_(a))
    records.append({"what": "copy", "bytes": 4 * n, "s": s, "bytes_per_s": 4 * n / s})
    s = _bench(lambda: a.sum())
    records.append({"what": "read", "bytes": 2 * n, "s": s, "bytes_per_s": 2 * n / s})
    a = b = None
    for K, N in DENSE_SHAPES:
        w = torch.randn(K, N, device=DEVICE, dtype=torch.bfloat16)
        w8 = w.t().contiguous().to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=DEVICE)
        for M in DENSE_M:
            x = torch.randn(M, K, device=DEVICE, dtype=torch.bfloat16)
            x8 = x.to(torch.float8_e4m3fn)
            r = {"what": "gemm", "M": M, "K": K, "N": N, "bf16_s": _bench(lambda: x @ w)}
            try:
                r["fp8_s"] = _bench(lambda: torch._scaled_mm(x8, w8, one, one, out_dtype=torch.bfloat16, use_fast_accum=True))
            except Exception as e:  # noqa: BLE001
                r["fp8_error"] = f"{type(e).__name__}: {e}"[:200]
            records.append(r)
            print(json.dumps(r), flush=True)
        w = w8 = None
    _write(out, "dense.json", records, method="do_bench median, warmup 5 ms, rep 25 ms, L2 flushed; fp8 per-tensor scales, use_fast_accum")


def _lift_fla_guard() -> None:
    """flash-linear-attention 0.6 refuses the gated backward on Hopper under Triton 3.4-3.7.0 (wrong values, the
    same allocations): lifted, since only the allocations are read (as in measure_gdn.py). Without fla installed
    transformers runs Qwen3-Next's torch fallback, which the estimate does not model: the step is then skipped."""
    try:
        import fla.ops.common.chunk_o as chunk_o
    except ImportError:
        FULL3[:] = [c for c in FULL3 if not c[0].startswith("qwen3-next")]
        FULL4[:] = [c for c in FULL4 if not c[0].startswith("qwen3-next")]
        return
    chunk_o.TRITON_ABOVE_3_7_1 = True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the JSON files")
    ap.add_argument("--only", help="only the training steps whose name contains this text")
    ap.add_argument("--part", action="append", choices=("steps", "full", "full2", "full3", "full4", "compiled", "grouped", "moe",
                                                                 "dense", "context"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rp.quiet()
    if {"full3", "full4"} & set(args.part or ()):
        _lift_fla_guard()
    for part in args.part or ("dense", "grouped", "steps"):
        t = time.time()
        {"steps": lambda o: steps(o, only=args.only), "full": lambda o: steps(o, small=False, only=args.only), "grouped": grouped, "moe": moe_layers,
         "full2": lambda o: steps(o, small=False, only=args.only, full=FULL2, file_name="step_peak_cuda_full2.json"),
         "full3": lambda o: steps(o, small=False, only=args.only, full=FULL3, file_name="step_peak_cuda_full3.json"),
         "full4": lambda o: steps(o, small=False, only=args.only, full=FULL4, file_name="step_peak_cuda_full4.json"),
         "compiled": compiled, "dense": dense, "context": context}[part](out)
        print(f"== {part} {time.time() - t:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
