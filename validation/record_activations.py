"""Record the bytes that PyTorch autograd saves for backward in one training forward pass (loss included).

For a few small-but-real transformers configurations (Llama-2-style MHA, Llama-3-style GQA with a large
vocabulary, GPT-2 with its dropouts, Qwen2 with q/k/v biases, Mistral, a four-layer DeepSeek-V4 with its sliding,
CSA and HCA layers, mHC streams and hash-routed and top-k MoE layers) and several batch × sequence points,
this builds ``AutoModelForCausalLM.from_config(cfg)`` on the CPU with real tensors, puts it in ``train()``
mode, and runs ``model(input_ids, labels=input_ids)`` (so the fp32 logits upcast and the cross-entropy are
part of the graph) inside ``torch.autograd.graph.saved_tensors_hooks``. The pack hook sees every tensor
autograd saves; the harness counts those still held when the forward returns (a weak reference to the alias the
hook hands autograd: a node that no path from the loss reaches is freed with what it saved, as DeepSeek-V4's
indexer scoring, which only feeds a top-k), each distinct storage once (``untyped_storage().data_ptr()`` →
``nbytes()``, so views and tensors saved by several nodes count once), and excludes storages that belong to model
parameters (weights saved by matmuls are not activations).
Backward is not run: what is saved is fully known when the forward returns.

Variants per point: ``attn_implementation`` ``eager`` and ``sdpa``; parameters in bf16 and in fp32;
without and with gradient checkpointing (``use_reentrant=True``, so the checkpoint's saved layer inputs go
through ``ctx.save_for_backward`` and are seen by the hooks).

Selective activation checkpointing (``SAC_CASES``), as torchtitan applies it to each transformer block
(``torchtitan/parallelisms/parallelize_llama.py``, later ``torchtitan/distributed/activation_checkpoint.py``):

* ``selective-op`` (``ac_mode = "selective"``, ``selective_ac_option = "op"``): every decoder layer runs under
  ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False, context_fn=...)`` whose context is
  ``create_selective_checkpoint_contexts(policy)``; the policy is torchtitan's: ``MUST_SAVE`` the outputs of
  the ops in its ``_save_list`` (``aten.mm``, SDPA's flash/efficient kernels, ``reduce_scatter``) except every
  second ``aten.mm`` of the layer (a counter per checkpoint call), ``PREFER_RECOMPUTE`` everything else. On the
  CPU, ``F.scaled_dot_product_attention`` runs ``aten._scaled_dot_product_flash_attention_for_cpu`` (out + fp32
  log-sum-exp, like CUDA's flash kernel), so that op joins the list as the CPU stand-in.
* ``every-N`` (``selective_ac_option = "N"``): torchtitan wraps every N-th block in a full checkpoint (its
  ``count % N == 0`` with the count starting at 1: layers N-1, 2N-1, ... from 0); the others keep everything.
  (transformers' ``activation_checkpointing_enable(every_n_layers=N)`` checkpoints layers 0, N, 2N, ...
  instead: the same number of layers when N divides L.)

How those are counted: with ``use_reentrant=False`` the checkpoint's positional inputs are saved as
``SavedTensor``s and do go through the outer ``saved_tensors_hooks`` (the hooks see them), but what autograd
saves inside the checkpointed region goes to the checkpoint's own inner hook (a placeholder, recomputed in
backward) and is correctly not seen; two things the checkpoint keeps are invisible to the hooks and are
counted here directly: (1) the outputs SAC caches (``MUST_SAVE``), held in the storage dictionary of the
``_CachingTorchDispatchMode`` that ``create_selective_checkpoint_contexts`` returns (the harness keeps a
reference to each one and walks it after the forward); (2) the tensors passed to the layer as keyword
arguments (transformers calls ``checkpoint(partial(forward, self, **kwargs), *args)``: RoPE cos/sin,
position ids, the eager causal mask), held by the recompute closure until backward. Both are deduplicated
with the hook-seen storages by ``data_ptr``, parameters excluded. Not counted: the RNG states the checkpoint
keeps (``preserve_rng_state``; a few KiB).

Every number in the output comes from torch; nothing here is computed by formula, and aicalc is not
imported. ``tests/test_train_mem_hf.py`` compares aicalc's ``--framework hf`` estimate with the records.

    python validation/record_activations.py            # regenerate tests/data/validation/activations.json
    python validation/record_activations.py --check    # recompute and compare with the committed file
    python validation/record_activations.py --explain NAME  # print the saved tensors of one case
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import weakref
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record_params as rp  # noqa: E402  (shared helpers: versions, dumps, envelopes, quiet)

FILENAME = "activations.json"
GENERATED_BY = "validation/record_activations.py"

# Small but real shapes: hidden 256-512, 2-3 layers. The Llama-3-style and the SDPA GPT-2 configs keep their
# families' full vocabularies (128,256 and 50,257: the fp32 loss term); the others use small ones for speed.
MODELS: dict[str, dict[str, Any]] = {
    "llama2-style": {
        "model_type": "llama", "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 16000, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu", "rope_theta": 10000.0,
    },
    "llama3-style": {
        "model_type": "llama", "hidden_size": 512, "intermediate_size": 1792, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 128256, "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu", "rope_theta": 500000.0,
    },
    "gpt2-style": {
        "model_type": "gpt2", "n_embd": 384, "n_layer": 2, "n_head": 6, "vocab_size": 8192, "n_positions": 1024,
        "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1, "activation_function": "gelu_new",
    },
    # attention dropout off: on the CPU, SDPA with dropout falls back to the fp32 math kernel, which is not
    # what a GPU runs (flash/efficient kernels support dropout); eager keeps its dropout in "gpt2-style".
    "gpt2-sdpa-style": {
        "model_type": "gpt2", "n_embd": 256, "n_layer": 3, "n_head": 4, "vocab_size": 50257, "n_positions": 1024,
        "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.0, "activation_function": "gelu_pytorch_tanh",
    },
    "qwen2-style": {
        "model_type": "qwen2", "hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 8192, "max_position_embeddings": 4096,
        "tie_word_embeddings": True, "hidden_act": "silu", "rope_theta": 1000000.0,
    },
    "mistral-style": {
        "model_type": "mistral", "hidden_size": 384, "intermediate_size": 1024, "num_hidden_layers": 2,
        "num_attention_heads": 6, "num_key_value_heads": 2, "vocab_size": 8000, "max_position_embeddings": 4096,
        "tie_word_embeddings": False, "hidden_act": "silu", "head_dim": 64,
    },
    # DeepSeek-V4 (the keys of DeepSeek-V4-Flash's config.json, shrunk): one sliding, two CSA and one HCA layer
    # (``compress_ratios`` 0/4/128, one more entry for the MTP layer as released), a hash-routed MoE layer then
    # top-k ones, 4 mHC residual streams with 20 Sinkhorn iterations, a q LoRA, a grouped output projection
    # (2 groups) and attention sinks; eager only (transformers 5.23 gives V4 no SDPA path). A window of 32 and
    # a top-8 indexer so that windows and top-k selections are partial at every point.
    "deepseek-v4-style": {
        "model_type": "deepseek_v4", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 1, "head_dim": 64, "qk_rope_head_dim": 16, "q_lora_rank": 96, "o_groups": 2,
        "o_lora_rank": 48, "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "index_n_heads": 4,
        "index_head_dim": 32, "index_topk": 8, "sliding_window": 32, "compress_ratios": [0, 4, 128, 4, 0],
        "num_hash_layers": 1, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
        "moe_intermediate_size": 128, "vocab_size": 8000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
        "hidden_act": "silu", "swiglu_limit": 10.0, "scoring_func": "sqrtsoftplus", "routed_scaling_factor": 1.5,
        "norm_topk_prob": True, "topk_method": "noaux_tc", "tie_word_embeddings": False, "rope_theta": 10000,
        "compress_rope_theta": 160000, "attention_bias": False, "attention_dropout": 0.0,
    },
    # gpt-oss (gpt-oss-20b's config.json keys, shrunk): a sliding and a full layer, attention sinks and biases, 4
    # experts of 128 with clamped SwiGLU (swiglu_limit 7), top 2, router bias; eager only (transformers 5.23 gives
    # gpt-oss no SDPA path)
    "gpt-oss-style": {
        "model_type": "gpt_oss", "hidden_size": 256, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32, "num_local_experts": 4,
        "num_experts_per_tok": 2, "sliding_window": 32, "layer_types": ["sliding_attention", "full_attention"],
        "attention_bias": True, "swiglu_limit": 7.0, "vocab_size": 8000, "pad_token_id": 0, "eos_token_id": 1,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 150000.0, "rope_scaling": None,
        "tie_word_embeddings": False, "hidden_act": "silu", "router_aux_loss_coef": 0.0, "output_router_logits": False,
        "attention_dropout": 0.0,
    },
}
# Points per dtype: bf16 matmuls are slow on CPUs without native bf16, so bf16 gets the shorter points
# and fp32 the longer ones (the eager S² terms dominate from S = 512 at these widths).
POINTS = {"bf16": [(1, 128), (2, 256), (1, 512)], "fp32": [(1, 128), (2, 256), (2, 512), (1, 1024)]}
GC_POINTS = [(2, 256), (1, 512)]
# DeepSeek-V4 also off the compressors' windows: 200 tokens (50 CSA entries, one HCA window of 128 and 72 left
# over) and 96 (no HCA window yet)
EXTRA_POINTS = {"deepseek-v4-style": {"bf16": [(1, 200), (2, 96)]}}
ATTENTION = ("eager", "sdpa")
ONLY_ATTENTION = {"gpt2-style": ("eager",), "deepseek-v4-style": ("eager",), "gpt-oss-style": ("eager",)}
DTYPES = ("bf16", "fp32")
CHECKPOINTING = (False, True)


# Selective activation checkpointing (torchtitan's op policy and every-N-th-layer AC): a few points per mode,
# bf16 and fp32, sdpa and eager, on models with bias-free linears (Llama/Mistral: q, k, v, o, gate, up, down all
# ``aten.mm``), with q/k/v biases (Qwen2: those are ``aten.addmm``, not in the list) and GPT-2 (Conv1D: all addmm).
SAC_CASES = [
    ("llama2-style", "sdpa", "bf16", "selective-op", [(1, 128), (2, 256)]),
    ("llama2-style", "sdpa", "fp32", "selective-op", [(1, 512)]),
    ("llama2-style", "eager", "fp32", "selective-op", [(2, 256)]),
    ("llama3-style", "sdpa", "fp32", "selective-op", [(2, 256)]),
    ("mistral-style", "eager", "bf16", "selective-op", [(1, 256)]),
    ("qwen2-style", "sdpa", "bf16", "selective-op", [(2, 256)]),
    ("qwen2-style", "eager", "fp32", "selective-op", [(1, 512)]),
    ("gpt2-sdpa-style", "sdpa", "fp32", "selective-op", [(2, 256)]),
    ("llama2-style", "sdpa", "bf16", "every-2", [(2, 256)]),
    ("llama3-style", "eager", "fp32", "every-2", [(1, 512)]),
    ("qwen2-style", "sdpa", "fp32", "every-2", [(2, 256)]),
    ("gpt2-style", "eager", "fp32", "every-2", [(2, 256)]),
]


# LoRA (PEFT ``get_peft_model``, r 16, alpha 32, lora_dropout 0, adapters autocast to fp32 as PEFT does by
# default): the base weights are frozen, so their linears keep no inputs, and the adapters keep theirs.
LORA_TARGETS = {"q,v": ["q_proj", "v_proj"],
                "all": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
LORA_MODELS = ("llama3-style", "qwen2-style", "mistral-style")
LORA_POINTS = {"bf16": [(1, 128), (2, 256)], "fp32": [(2, 256)]}


def cases() -> list[dict[str, Any]]:
    """Ordered so that each model variant is built once."""
    out = []
    for model in LORA_MODELS:
        for attn in ATTENTION:
            for dtype in DTYPES:
                for targets in LORA_TARGETS:
                    for batch, seq in LORA_POINTS[dtype]:
                        out.append({"model": model, "batch": batch, "seq": seq, "attention": attn, "dtype": dtype,
                                    "gradient_checkpointing": False, "lora": {"rank": 16, "targets": targets}})
    for model in MODELS:
        for attn in ONLY_ATTENTION.get(model, ATTENTION):
            for dtype in DTYPES:
                for ckpt in CHECKPOINTING:
                    points = GC_POINTS if ckpt else POINTS[dtype] + EXTRA_POINTS.get(model, {}).get(dtype, [])
                    if dtype == "bf16" and MODELS[model]["vocab_size"] > 32768:
                        points = [pt for pt in points if pt[1] <= 256]  # large-vocab bf16: short ones only (CPU bf16 is slow)
                    for batch, seq in points:
                        out.append({"model": model, "batch": batch, "seq": seq, "attention": attn,
                                    "dtype": dtype, "gradient_checkpointing": ckpt})
    for model, attn, dtype, recompute, points in SAC_CASES:
        for batch, seq in points:
            out.append({"model": model, "batch": batch, "seq": seq, "attention": attn, "dtype": dtype,
                        "gradient_checkpointing": True, "recompute": recompute})
    return out


def case_name(c: dict[str, Any]) -> str:
    gc = "+gc" if c["gradient_checkpointing"] else ""
    if c.get("recompute"):
        gc = f"+{c['recompute']}"
    lora = f"+lora[{c['lora']['targets']}]" if c.get("lora") else ""
    return f"{c['model']}/{c['attention']}/{c['dtype']}{gc}{lora}/b{c['batch']}s{c['seq']}"


_models: dict[tuple, Any] = {}
# What the selective checkpoints hold outside autograd's saved tensors, filled during one forward (see the
# module docstring): the SAC caches' storage dictionaries and the layers' keyword-argument tensors.
_held: dict[str, list] = {"sac": [], "kwargs": []}


def _sac_context_fn():
    """torchtitan's op-level SAC context: ``_save_list`` outputs are MUST_SAVE except every second ``aten.mm``
    of the block (``meta`` counts per checkpoint call), everything else PREFER_RECOMPUTE. The CPU's SDPA kernel
    stands in for CUDA's flash/efficient ones."""
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

    caching, cached = create_selective_checkpoint_contexts(policy)
    _held["sac"].append(caching.storage)
    return caching, cached


def _enable_selective(m, recompute: str) -> None:
    """Non-reentrant checkpoints on the decoder layers through transformers' own hook
    (``GradientCheckpointingLayer`` calls ``_gradient_checkpointing_func(partial(forward, self, **kwargs), *args)``),
    with torchtitan's op policy (``selective-op``) or on every N-th layer (``every-N``)."""
    import torch
    from torch.utils.checkpoint import checkpoint
    from transformers.modeling_layers import GradientCheckpointingLayer

    op = recompute == "selective-op"

    def ckpt(function, *args, **kwargs):
        kw = getattr(function, "keywords", None) or {}
        _held["kwargs"].extend(t for t in torch.utils._pytree.tree_leaves(kw) if isinstance(t, torch.Tensor))
        extra = {"context_fn": _sac_context_fn} if op else {}
        return checkpoint(function, *args, use_reentrant=False, **extra, **kwargs)

    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    every = 1 if op else int(recompute.split("-")[1])
    layers = [mod for mod in m.modules() if isinstance(mod, GradientCheckpointingLayer)]
    for i, mod in enumerate(layers):
        mod._gradient_checkpointing_func = ckpt
        mod.gradient_checkpointing = (i + 1) % every == 0  # torchtitan: count % N == 0, count from 1


def build(model: str, attn: str, dtype: str, gc: bool, lora: str | None = None, recompute: str | None = None):
    import torch
    from transformers import AutoModelForCausalLM

    key = (model, attn, dtype, gc, lora, recompute)
    if key not in _models:
        torch.manual_seed(0)
        cfg = rp.build_config(MODELS[model])
        m = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn,
                                             dtype=torch.bfloat16 if dtype == "bf16" else torch.float32)
        if lora:
            from peft import LoraConfig, get_peft_model

            m = get_peft_model(m, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
                                             target_modules=LORA_TARGETS[lora]))
        if recompute:
            _enable_selective(m, recompute)
        elif gc:
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        m.train()
        _models.clear()  # keep one model alive at a time
        _models[key] = m
    return _models[key]


def measure(c: dict[str, Any], explain: bool = False) -> dict[str, Any]:
    import torch

    m = build(c["model"], c["attention"], c["dtype"], c["gradient_checkpointing"],
              c["lora"]["targets"] if c.get("lora") else None, c.get("recompute"))
    param_ptrs = {p.untyped_storage().data_ptr() for p in m.parameters()}
    # Every packed tensor with a weak reference to the alias autograd holds: a saved tensor counts only if that alias
    # is still alive when the forward returns. Nodes that no path from the loss reaches (DeepSeek-V4's indexer scores
    # only feed a top-k: integer indices) are freed as soon as their outputs are, with what they saved; their storages
    # are then reused by later tensors, so a pointer seen during the forward is not yet a storage that is kept.
    packed: list[tuple] = []
    source = ["saved"]  # what holds the tensor, for --explain: autograd, a SAC cache, a checkpoint's kwargs

    def pack(t):
        # Return a detached alias: same storage, no grad_fn. Returning ``t`` itself would make a reference
        # cycle (output tensor → its node → saved ``t``) that Python's gc cannot see, and leak every graph.
        st = t.untyped_storage()
        alias = t.detach()
        if st.data_ptr() not in param_ptrs:
            packed.append((weakref.ref(alias), st.data_ptr(), st.nbytes(), tuple(t.shape),
                           str(t.dtype).replace("torch.", ""), t.grad_fn.name() if t.grad_fn is not None else "-",
                           source[0], alias if source[0] != "saved" else None))
        return alias

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, m.config.vocab_size, (c["batch"], c["seq"]), generator=g)
    torch.manual_seed(2)
    _held["sac"].clear()
    _held["kwargs"].clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = m(input_ids=ids, labels=ids)
    assert out.loss.requires_grad
    # held by the selective checkpoints outside the hooks' view: SAC-cached op outputs, keyword-argument tensors
    for storage in _held["sac"]:
        for op, entries in storage.items():
            source[0] = f"sac-cache {op}"
            for entry in entries.values():
                for w in torch.utils._pytree.tree_leaves(entry):
                    if isinstance(getattr(w, "val", None), torch.Tensor):
                        pack(w.val)
    source[0] = "checkpoint kwargs"
    for t in _held["kwargs"]:
        pack(t)
    if c.get("recompute") == "selective-op":
        assert _held["sac"], "the selective checkpoints did not run"
    _held["sac"].clear()
    _held["kwargs"].clear()
    gc.collect()
    seen: dict[int, int] = {}  # the kept storages, each once (views and tensors saved by several nodes)
    for ref, ptr, nbytes, *row in packed:
        if ref() is not None and ptr not in seen:
            seen[ptr] = nbytes
            if explain:
                print(*row[:4], nbytes, sep="\t")
    del out
    packed.clear()
    gc.collect()
    return {"saved_bytes": sum(seen.values()), "saved_tensors": len(seen)}


def record_all(only: str | None = None, verbose: bool = False) -> list[dict[str, Any]]:
    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
    records = []
    t0 = time.time()
    for c in cases():
        if only and only not in case_name(c):
            continue
        t1 = time.time()
        r = measure(c)
        if verbose:
            print(f"{case_name(c)}: {r['saved_bytes']:,} B in {time.time() - t1:.2f} s", file=sys.stderr)
        records.append({"name": case_name(c), **c, "config": MODELS[c["model"]], **r})
    print(f"{len(records)} cases in {time.time() - t0:.1f} s", file=sys.stderr)
    return records


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="recompute and compare with the committed file")
    ap.add_argument("--explain", metavar="NAME", help="list the saved tensors of the case named NAME")
    ap.add_argument("--only", help="only the cases whose name contains this text (not with --check)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each case and its time")
    ap.add_argument("--root", help="repository root (default: this file's parent folder)")
    args = ap.parse_args(argv)
    rp.set_root(args.root)
    rp.quiet()
    if args.explain:
        for c in cases():
            if case_name(c) == args.explain:
                print(measure(c, explain=True))
                return 0
        print(f"no case named {args.explain}; known: {', '.join(case_name(c) for c in cases())}")
        return 2
    records = record_all(args.only, args.verbose)
    path = rp.out_path(FILENAME)
    if args.check:
        return rp.check_envelope(path, records, ("name",))
    rp.write_envelope(path, GENERATED_BY, records,
                      method="autograd saved_tensors_hooks, distinct storages held when the forward returns, parameters "
                             "excluded, forward+loss; "
                             "selective checkpoints: + SAC-cached outputs and layers' keyword tensors")
    print(f"wrote {path.relative_to(rp.ROOT)} ({len(records)} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
