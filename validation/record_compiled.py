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
``compiled_saving(frozen=True)`` plus ``train_peak.lora_compiled_merge``. Every number comes from torch's own saved
tensors; nothing here is computed by formula.

    python validation/record_compiled.py            # regenerate tests/data/validation/compiled_saving.json
    python validation/record_compiled.py --check    # recompute and compare with the committed file
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
    return {"model_type": family, **dims, "num_hidden_layers": 3, "vocab_size": 512, "tie_word_embeddings": False,
            "max_position_embeddings": 512}


def layer_bytes_per_token(config: dict[str, Any], precision: str, compiled: bool,
                          lora: dict[str, Any] | None = None) -> float:
    """Bytes the second decoder layer saves for backward, per token (each storage once, parameters left out);
    ``lora``: rank, targets and adapter dtype of PEFT adapters over the frozen model."""
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
        for mod in layers:
            mod.compile()
    params = {p.untyped_storage().data_ptr() for p in m.parameters()}
    seen: dict[int, int] = {}
    inside = [False]

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if inside[0] and ptr not in params:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    layers[1].register_forward_pre_hook(lambda *_: inside.__setitem__(0, True))
    layers[1].register_forward_hook(lambda *_: inside.__setitem__(0, False))
    ids = torch.randint(0, config["vocab_size"], (B, S))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            m(input_ids=ids, labels=ids, use_cache=False).loss  # noqa: B018 (the forward is what is measured)
    return sum(seen.values()) / (B * S)


def _record(name: str, config: dict[str, Any], precision: str, lora: dict[str, Any] | None = None) -> dict:
    """One record: what the second layer saves per token, eager and compiled (``lora`` in it where given)."""
    rec = {"name": name, "precision": precision, "config": config, **({"lora": lora} if lora else {}),
           "eager_bytes_per_token": layer_bytes_per_token(config, precision, False, lora),
           "compiled_bytes_per_token": layer_bytes_per_token(config, precision, True, lora)}
    print(f"  {name}: eager {rec['eager_bytes_per_token']:.0f} B/token, compiled "
          f"{rec['compiled_bytes_per_token']:.0f}", flush=True)
    return rec


def _shape(change: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in change.items()) or "base"


def compute_records() -> list[dict[str, Any]]:
    records = [_record(f"{family}/{precision}/{_shape(change)}", _config(family, {**BASE, **change}), precision)
               for family, precision in CASES for change in VARIED]
    for family, precision, adapters, rank, targets, change in LORA:
        lora = {"rank": rank, "targets": list(targets), "adapter_dtype": adapters}
        records.append(_record(f"{family}/{precision}/lora-{','.join(targets)}/{adapters}-r{rank}/{_shape(change)}",
                               _config(family, {**BASE, **change}), precision, lora))
    return records


def main(argv: list[str] | None = None) -> int:
    args = rp.arg_parser(__doc__).parse_args(argv)
    rp.set_root(args.root)
    rp.quiet()
    t0 = time.perf_counter()
    records = compute_records()
    path = rp.out_path("compiled_saving.json")
    if args.check:
        rc = rp.check_envelope(path, records, key=("name",))
    else:
        rp.write_envelope(path, GENERATED_BY, records, tokens_per_layer=B * S)
        print(f"wrote {path.relative_to(rp.ROOT)} ({len(records)} records)")
        rc = 0
    print(f"record_compiled: {time.perf_counter() - t0:.1f}s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
