"""Record what a torch.compile'd decoder layer saves for backward against the same layer in eager mode.

Small Llama- and Qwen3-style transformers models (random weights, CPU, real tensors) run one forward with the
loss under ``torch.autograd.graph.saved_tensors_hooks``; every tensor saved while the second decoder layer runs
is counted once by its storage (parameters left out), per token. The compiled run compiles each decoder layer on
its own (``nn.Module.compile``, as torchtitan compiles each TransformerBlock), so AOTAutograd's partitioner decides
what the layer saves. Shapes vary one dimension at a time (hidden, FFN, heads, head size) in bf16, torch AMP
(fp32 weights under ``torch.autocast``) and fp32, so the difference per token is a linear function of them that
``tests/test_compiled_saving.py`` holds ``aicalc.core.activations.compiled_saving`` to, exactly. The ``lora``
records do the same over PEFT models (``get_peft_model``, lora_dropout 0; adapters autocast to fp32 as PEFT does
by default, or kept in the model's dtype as torchtune keeps them) for several target sets: there the saving is
``compiled_saving(frozen=True)`` plus ``train_peak.lora_compiled_merge``.

The ``selective-op`` records run torchtitan's op-level selective activation checkpointing
(``record_activations._sac_context_fn``: ``MUST_SAVE`` every other ``aten.mm`` and SDPA's outputs) in
torchtitan's order (``torchtitan/models/llama3/infra/parallelize.py``: ``apply_ac`` wraps each block in
``checkpoint_wrapper(block, context_fn=...)``, then ``apply_compile`` compiles the wrapped block with
``torch.compile``), against the same wrapper run eagerly. The eager layer keeps what the hooks see (its
positional input) plus the outputs in its SAC cache (walked after the forward, as record_activations does); the
compiled one what AOTAutograd saves. The layer's keyword-argument tensors (RoPE cos/sin and the int64 position ids,
one storage each for every layer, counted outside the layers by ``activations.hf_outside``) are left out of the
layer's bytes and recorded on their own: the eager checkpoint's closure holds them all until backward, the
compiled graph saves those its backward reads. Every number comes from torch's own saved tensors; nothing here is
computed by formula.

    python validation/record_compiled.py            # regenerate tests/data/validation/compiled_saving.json
    python validation/record_compiled.py --check    # recompute and compare with the committed file
    python validation/record_compiled.py --only selective-op   # recompute the records whose names contain
                                                               # "selective-op" and replace them in the file
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record_params as rp  # noqa: E402

GENERATED_BY = "validation/record_compiled.py"
B, S = 2, 64  # tokens per layer: 128
BASE = {"hidden_size": 256, "intermediate_size": 704, "num_attention_heads": 8, "num_key_value_heads": 4,
        "head_dim": 32}
VARIED = [{}, {"hidden_size": 384}, {"intermediate_size": 1024}, {"num_attention_heads": 16}, {"head_dim": 64}]
CASES = [("llama", p) for p in ("bf16", "bf16-mixed", "fp32")] + [("qwen3", "bf16")]
# selective-op: the same cases, and Qwen2 (biased q/k/v are ``aten.addmm``, so the every-other-mm count starts at o)
# over the varied shapes; Phi-3 (fused qkv_proj and gate_up_proj: four mm) on the base shape
SAC_CASES = [(family, precision, change) for family, precision in CASES + [("qwen2", "bf16")] for change in VARIED]
SAC_CASES += [("phi3", "bf16", {})]
ALL = ("q", "k", "v", "o", "gate", "up", "down")
# (family, precision, adapter dtype, rank, targets, shape change): every target set on the base shape, all targets
# over the varied shapes, 16-bit adapters, an fp32 model and Qwen3's head norms
LORA = ([("llama", "bf16", "fp32", 8, tg, {}) for tg in (("q",), ("q", "v"), ("q", "k", "v", "o"),
                                                          ("q", "k", "v", "o", "gate"), ALL, ("down",),
                                                          ("gate", "up"))]
        + [("llama", "bf16", "fp32", 8, ALL, ch) for ch in VARIED[1:]]
        + [("llama", "bf16", "bf16", 16, tg, {}) for tg in (("q", "v"), ALL)]
        + [("llama", "fp32", "fp32", 8, ALL, {}), ("qwen3", "bf16", "fp32", 8, ALL, {}),
           ("qwen3", "bf16", "fp32", 8, ("q", "v"), {}), ("qwen3", "bf16", "bf16", 8, ALL, {}),
           ("qwen3", "fp32", "fp32", 8, ALL, {})])


def _config(family: str, dims: dict[str, int]) -> dict[str, Any]:
    # Phi-3's config defaults its pad and eos ids to 32000, past this vocabulary
    ids = {"pad_token_id": 0, "eos_token_id": 1} if family == "phi3" else {}
    return {"model_type": family, **dims, "num_hidden_layers": 3, "vocab_size": 512, "tie_word_embeddings": False,
            "max_position_embeddings": 512, **ids}


def layer_bytes_per_token(config: dict[str, Any], precision: str, compiled: bool,
                          lora: dict[str, Any] | None = None, selective: bool = False):
    """Bytes the second decoder layer saves for backward, per token (each storage once, parameters left out);
    ``lora``: rank, targets and adapter dtype of PEFT adapters over the frozen model. ``selective``: torchtitan's
    op-level SAC around each layer (compiled after wrapping); then a pair, the layer's bytes and those of its
    keyword-argument tensors that are held (module docstring)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.modeling_layers import GradientCheckpointingLayer

    torch.manual_seed(0)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    m = AutoModelForCausalLM.from_config(rp.build_config(config), attn_implementation="sdpa", dtype=dtype)
    if lora:
        from peft import LoraConfig, get_peft_model

        m = get_peft_model(m, LoraConfig(r=lora["rank"], lora_dropout=0.0,
                                         target_modules=[f"{t}_proj" for t in lora["targets"]]),
                           autocast_adapter_dtype=lora["adapter_dtype"] == "fp32")
    layers = [mod for mod in m.modules() if isinstance(mod, GradientCheckpointingLayer)]
    if compiled:
        torch._dynamo.reset()
    if selective:
        layers = _wrap_selective(m, layers, compiled)
    elif compiled:
        for mod in layers:
            mod.compile()
    params = {p.untyped_storage().data_ptr() for p in m.parameters()}
    seen: dict[int, int] = {}
    inside = [False]
    kwargs: dict[int, int] = {}  # the layer's keyword-argument tensors, by storage

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if inside[0] and ptr not in params:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    def enter(_mod, _args, kw):
        inside[0] = True
        ra._held["sac"].clear()  # the earlier layers' caches
        for t in torch.utils._pytree.tree_leaves(kw):
            if isinstance(t, torch.Tensor):
                kwargs[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()

    def leave(*_):
        if selective and not compiled:  # the SAC cache's outputs (MUST_SAVE), held outside autograd's view
            for storage in ra._held["sac"]:
                for entries in storage.values():
                    for entry in entries.values():
                        for w in torch.utils._pytree.tree_leaves(entry):
                            if isinstance(getattr(w, "val", None), torch.Tensor):
                                pack(w.val)
        inside[0] = False

    import record_activations as ra

    layers[1].register_forward_pre_hook(enter, with_kwargs=True)
    layers[1].register_forward_hook(leave)
    ids = torch.randint(0, config["vocab_size"], (B, S))
    ra._held["sac"].clear()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = m(input_ids=ids, labels=ids, use_cache=False).loss
    if selective and not compiled:
        assert ra._held["sac"], "the selective checkpoints did not run"
    ra._held["sac"].clear()
    if not selective:
        return sum(seen.values()) / (B * S)
    # eager: the checkpoint's closure holds every keyword argument; compiled: the graph saves those it reads
    held = kwargs if not compiled else {p: n for p, n in kwargs.items() if p in seen}
    layer = sum(n for p, n in seen.items() if p not in kwargs)
    del out
    return layer / (B * S), sum(held.values()) / (B * S)


def _wrap_selective(m, layers, compiled: bool) -> list:
    """torchtitan's ``apply_ac`` then ``apply_compile``: each decoder layer wrapped in ``checkpoint_wrapper`` with
    the op-level SAC context (record_activations' policy), the wrapper compiled with ``torch.compile`` and put back
    in the model's layer list; returns the outer modules."""
    import record_activations as ra
    import torch
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    outer = []
    for mod in layers:
        wrapped = checkpoint_wrapper(mod, context_fn=ra._sac_context_fn)
        if compiled:
            wrapped = torch.compile(wrapped)
        parent = m.get_submodule(next(n.rsplit(".", 1)[0] for n, x in m.named_modules() if x is mod))
        index = next(i for i, x in enumerate(parent) if x is mod)
        parent[index] = wrapped
        outer.append(wrapped)
    return outer


def _record(name: str, config: dict[str, Any], precision: str, lora: dict[str, Any] | None = None,
            selective: bool = False) -> dict:
    """One record: what the second layer saves per token, eager and compiled (``lora`` in it where given;
    ``selective``: under torchtitan's op-level SAC, with the held keyword-argument tensors on their own)."""
    if selective:
        eager, eager_kw = layer_bytes_per_token(config, precision, False, selective=True)
        comp, comp_kw = layer_bytes_per_token(config, precision, True, selective=True)
        rec = {"name": name, "precision": precision, "config": config, "recompute": "selective-op", "batch": B,
               "seq": S, "eager_bytes_per_token": eager, "compiled_bytes_per_token": comp,
               "eager_kwargs_bytes_per_token": eager_kw, "compiled_kwargs_bytes_per_token": comp_kw}
        print(f"  {name}: eager {eager:.0f} B/token (+{eager_kw:.0f} kwargs), compiled {comp:.0f} "
              f"(+{comp_kw:.0f})", flush=True)
        return rec
    rec = {"name": name, "precision": precision, "config": config, **({"lora": lora} if lora else {}),
           "eager_bytes_per_token": layer_bytes_per_token(config, precision, False, lora),
           "compiled_bytes_per_token": layer_bytes_per_token(config, precision, True, lora)}
    print(f"  {name}: eager {rec['eager_bytes_per_token']:.0f} B/token, compiled "
          f"{rec['compiled_bytes_per_token']:.0f}", flush=True)
    return rec


def _shape(change: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in change.items()) or "base"


def _todo() -> list[tuple]:
    """(name, family, precision, shape change, lora, selective) of every record, in the file's order."""
    todo: list[tuple] = [(f"{family}/{precision}/{_shape(change)}", family, precision, change, None, False)
                         for family, precision in CASES for change in VARIED]
    for family, precision, adapters, rank, targets, change in LORA:
        lora = {"rank": rank, "targets": list(targets), "adapter_dtype": adapters}
        todo.append((f"{family}/{precision}/lora-{','.join(targets)}/{adapters}-r{rank}/{_shape(change)}", family,
                     precision, change, lora, False))
    todo += [(f"{family}/{precision}/selective-op/{_shape(change)}", family, precision, change, None, True)
             for family, precision, change in SAC_CASES]
    return todo


def compute_records(only: list[str] | None = None) -> list[dict[str, Any]]:
    """Every record, or (``only``) those whose names contain one of these strings."""
    return [_record(name, _config(family, {**BASE, **change}), precision, lora, selective)
            for name, family, precision, change, lora, selective in _todo()
            if not only or any(o in name for o in only)]


def main(argv: list[str] | None = None) -> int:
    args = rp.arg_parser(__doc__).parse_args(argv)
    rp.set_root(args.root)
    rp.quiet()
    t0 = time.perf_counter()
    if args.check and args.only:
        print("--only is not for --check (every record is compared)")
        return 2
    records = compute_records(args.only)
    path = rp.out_path("compiled_saving.json")
    if args.check:
        rc = rp.check_envelope(path, records, key=("name",))
    elif args.only:  # replace (or add) these records, keep the others as committed
        import json

        doc = json.loads(path.read_text(encoding="utf-8"))
        fresh = {r["name"]: r for r in records}
        kept = [r for r in doc["records"] if r["name"] not in fresh]
        order = [t[0] for t in _todo()]
        merged = sorted(kept + records, key=lambda r: order.index(r["name"]))
        rp.write_envelope(path, GENERATED_BY, merged, tokens_per_layer=B * S)
        print(f"wrote {len(records)} of {len(merged)} records to {path.relative_to(rp.ROOT)}")
        rc = 0
    else:
        rp.write_envelope(path, GENERATED_BY, records, tokens_per_layer=B * S)
        print(f"wrote {path.relative_to(rp.ROOT)} ({len(records)} records)")
        rc = 0
    print(f"record_compiled: {time.perf_counter() - t0:.1f}s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
