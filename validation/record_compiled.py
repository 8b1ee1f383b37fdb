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

The ``qlora`` records run the same PEFT models with every decoder-layer linear quantized to 4 bits (NF4 with
double-quantized scales, stored as ``--quant nf4-dq`` counts it), in three styles re-implemented here for their
memory (bitsandbytes and torchao are not installed in CI; :func:`_linear_4bit` cites each): ``torchao``, torchtune's
QLoRA (torchao's ``linear_nf4``, an autograd.Function that dequantizes by plain tensor ops in its forward and again
in its backward, adapters in the model's dtype); ``bnb``, PEFT over bitsandbytes 0.46-0.49 (``MatMul4Bit`` with the
dequantization a ``torch.library`` custom op, then ``F.linear``; PEFT's bitsandbytes forward; fp32 adapters);
``bnb-gemm``, bitsandbytes 0.50's fused ``gemm_4bit`` op in the forward. Under compile AOTAutograd traces the
forward and backward into one joint graph, whose common-subexpression pass makes the forward's and the backward's
identical dequantizations one node; the min-cut partitioner does not recompute a node the backward's matmul must
materialize, so the compiled layer saves that node, a 16-bit copy of each frozen weight (``torchao``, ``bnb``); with
the fused forward op there is no such node (``bnb-gemm``). Each style is checked against the real libraries by
validation/crosscheck_qlora_libs.py (bitsandbytes 0.49.2 and 0.50.2 with PEFT 0.21.2's own ``lora.bnb.Linear4bit``,
torchao 0.18.0's ``NF4Tensor`` and ``linear_nf4``; not in CI): the same bytes, eager and compiled. A record at twice the
sequence length separates the copies (a fixed size a layer) from the per-token terms, and two records count the
first layer, whose q, k, v inputs need no gradient.

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
# QLoRA: the same PEFT adapters over a 4-bit base (every decoder-layer linear quantized, module docstring), in three
# styles (``QLORA_STYLES``): (family, precision, adapter dtype, rank, targets, shape change, style, sequence length)
QLORA_STYLES = ("torchao", "bnb", "bnb-gemm")
QLORA = ([("llama", "bf16", "bf16", 8, tg, {}, "torchao", S) for tg in (ALL, ("q", "v"))]
         + [("llama", "bf16", "bf16", 8, ALL, ch, "torchao", S) for ch in VARIED[1:]]
         + [("llama", "bf16", "bf16", 8, ALL, {}, "torchao", 2 * S),
            ("llama", "fp32", "fp32", 8, ALL, {}, "torchao", S), ("qwen3", "bf16", "bf16", 8, ALL, {}, "torchao", S)]
         + [("llama", "bf16", "fp32", 8, tg, {}, "bnb", S) for tg in (ALL, ("q", "v"))]
         + [("llama", "bf16", "fp32", 8, ALL, ch, "bnb", S) for ch in VARIED[1:]]
         + [("llama", "bf16", "fp32", 8, ALL, {}, "bnb", 2 * S), ("llama", "bf16", "bf16", 8, ALL, {}, "bnb", S),
            ("qwen3", "bf16", "fp32", 8, ALL, {}, "bnb", S)]
         + [("llama", "bf16", "fp32", 8, tg, {}, "bnb-gemm", S) for tg in (ALL, ("q", "v"))]
         + [("qwen3", "bf16", "fp32", 8, ALL, {}, "bnb-gemm", S)])
# and the first decoder layer, whose q, k, v read the frozen embedding's normalized output (no gradient needed)
QLORA_FIRST = [("llama", "bf16", "bf16", 8, ALL, {}, "torchao", S), ("llama", "bf16", "fp32", 8, ALL, {}, "bnb", S)]


NF4_BLOCK, SCALE_BLOCK = 64, 256  # weights per 4-bit scale; scales per second-level (double-quantization) factor


def _nf4_params(out_f: int, in_f: int, dtype) -> dict[str, Any]:
    """A frozen NF4 weight's storage, as ``--quant nf4-dq`` counts it (aicalc.core.dtypes.WEIGHT_BITS): the codes
    packed two a byte (uint8, n/2), one 8-bit scale per 64 weights, one fp32 factor per 256 scales (the last group
    padded, as bitsandbytes' blockwise quantization pads) and an fp32 offset; and the 16 NF4 levels in the weight's
    dtype (torchao keeps its lookup table so). Values are arbitrary: only shapes and dtypes matter here."""
    import torch

    n = out_f * in_f
    blocks = n // NF4_BLOCK
    groups = -(-blocks // SCALE_BLOCK)
    frozen = {
        "codes": torch.randint(0, 256, (n // 2,), dtype=torch.uint8),
        "scales": torch.randint(0, 256, (blocks,), dtype=torch.uint8),
        "factors": torch.rand(groups, dtype=torch.float32) / 64 + 1 / 128,
        "offset": torch.tensor(0.01, dtype=torch.float32),
        "levels": torch.linspace(-1.0, 1.0, 16).to(dtype),
    }
    return {k: torch.nn.Parameter(v, requires_grad=False) for k, v in frozen.items()}


def _nf4_weight(p: dict[str, Any], shape: tuple[int, int], dtype):
    """The 16-bit weight from :func:`_nf4_params` by plain tensor ops (what torchao's ``NF4Tensor.to(dtype)`` does in
    ``get_original_weight``, written here for its shapes: each byte's two 4-bit codes looked up in the level table,
    each block of 64 scaled by its scale, itself its 8-bit code times its group's factor plus the offset)."""
    import torch

    blocks = p["scales"].numel()
    factor = p["factors"].repeat_interleave(SCALE_BLOCK)[:blocks]
    scale = ((p["scales"].to(torch.float32) - 128.0) * factor + p["offset"]).to(dtype)
    codes = p["codes"]
    idx = torch.stack((codes >> 4, codes & 15), dim=-1).reshape(blocks, NF4_BLOCK).to(torch.long)
    return (p["levels"][idx] * scale.unsqueeze(-1)).reshape(shape)


_OPS: dict[str, Any] = {}


def _bnb_ops() -> dict[str, Any]:
    """bitsandbytes' 4-bit ops as it registers them for torch.compile (``bitsandbytes/_ops.py``, 0.46 on:
    ``torch.library`` custom ops with fake kernels, opaque to inductor), here under this harness's own namespace with
    CPU kernels made of :func:`_nf4_weight`'s arithmetic: ``dequantize_blockwise`` (the 8-bit scales to fp32),
    ``dequantize_4bit`` (the codes to a weight of ``shape`` in ``dtype``) and 0.50's ``gemm_4bit`` (the forward
    matmul in one op)."""
    if _OPS:
        return _OPS
    import torch

    # schemas written out as bitsandbytes' torch.library.define calls do (this module's annotations are strings)
    @torch.library.custom_op("aicalc_record::dequantize_blockwise", mutates_args=(),
                             schema="(Tensor scales, Tensor factors) -> Tensor")
    def dequantize_blockwise(scales, factors):
        return (scales.to(torch.float32) - 128.0) * factors.repeat_interleave(SCALE_BLOCK)[:scales.numel()]

    @dequantize_blockwise.register_fake
    def _(scales, factors):
        return scales.new_empty(scales.shape, dtype=torch.float32)

    @torch.library.custom_op("aicalc_record::dequantize_4bit", mutates_args=(),
                             schema="(Tensor codes, Tensor absmax, Tensor levels, int[] shape, ScalarType dtype) "
                                    "-> Tensor")
    def dequantize_4bit(codes, absmax, levels, shape, dtype):
        idx = torch.stack((codes >> 4, codes & 15), dim=-1).reshape(absmax.numel(), NF4_BLOCK).to(torch.long)
        return (levels.to(torch.float32)[idx] * absmax.unsqueeze(-1)).reshape(shape).to(dtype)

    @dequantize_4bit.register_fake
    def _(codes, absmax, levels, shape, dtype):
        return codes.new_empty(shape, dtype=dtype)

    @torch.library.custom_op("aicalc_record::gemm_4bit", mutates_args=(),
                             schema="(Tensor A, Tensor codes, Tensor scales, Tensor factors, Tensor offset, "
                                    "Tensor levels, int[] shape) -> Tensor")
    def gemm_4bit(A, codes, scales, factors, offset, levels, shape):
        absmax = dequantize_blockwise(scales, factors) + offset
        return torch.nn.functional.linear(A, dequantize_4bit(codes, absmax, levels, shape, A.dtype))

    @gemm_4bit.register_fake
    def _(A, codes, scales, factors, offset, levels, shape):
        return A.new_empty((*A.shape[:-1], shape[0]))

    _OPS.update(dequantize_blockwise=dequantize_blockwise, dequantize_4bit=dequantize_4bit, gemm_4bit=gemm_4bit)
    return _OPS


def _bnb_dequantize(p: dict[str, Any], shape, dtype):
    """``bitsandbytes.functional.dequantize_4bit`` with a nested (double-quantized) state: the scales through
    ``dequantize_blockwise``, ``absmax += offset``, then ``dequantize_4bit`` to the state's dtype."""
    ops = _bnb_ops()
    absmax = ops["dequantize_blockwise"](p["scales"], p["factors"])
    absmax += p["offset"]
    return ops["dequantize_4bit"](p["codes"], absmax, p["levels"], list(shape), dtype)


def _linear_4bit(style: str, in_f: int, out_f: int, dtype):
    """A frozen 4-bit linear (no bias) in ``style`` (``QLORA_STYLES``), re-implemented for its memory:

    * ``torchao``: torchtune's ``FrozenNF4Linear`` and quantized ``LoRALinear`` call torchao's ``linear_nf4``
      (meta-pytorch/torchtune @ 3c1872a, ``torchtune/modules/low_precision/nf4_linear.py``; pytorch/ao @ 0598012,
      ``torchao/dtypes/nf4tensor.py``, in torchao 0.18 ``torchao/quantization/quantize_/workflows/nf4/
      nf4_tensor.py``: ``LinearNF4`` saves the NF4 weight with ``ctx.save_for_backward``, its forward is
      ``F.linear(input, weight.to(input.dtype))`` and its backward ``grad_output @ weight.to(grad_output.dtype)``;
      ``.to`` dequantizes by tensor ops, ``get_original_weight``);
    * ``bnb``: bitsandbytes 0.46-0.49's ``Linear4bit`` and ``MatMul4Bit`` (bitsandbytes-foundation/bitsandbytes
      @ 0.49.2, f0e6ca3, ``bitsandbytes/autograd/_functions.py``): the forward
      ``F.linear(A, F.dequantize_4bit(B, quant_state).to(A.dtype).t(), bias)``,
      ``ctx.tensors = (None, B)`` when A or B needs a gradient (the packed weight on ctx, not saved), the backward
      ``torch.matmul(grad_output, F.dequantize_4bit(B, ctx.state).to(grad_output.dtype).t())``; the dequantization
      is a ``torch.library`` custom op (``bitsandbytes/_ops.py``), :func:`_bnb_ops`;
    * ``bnb-gemm``: bitsandbytes 0.50's ``MatMul4Bit.forward`` (@ 0.50.1, 37d2a93): one
      ``torch.ops.bitsandbytes.gemm_4bit`` op for the forward (nested state: the 8-bit scales, their code and
      offset passed in), the same ``ctx.tensors`` and backward."""
    import torch
    import torch.nn.functional as F

    shape = (out_f, in_f)

    class LinearNF4(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, codes, scales, factors, offset, levels):
            ctx.save_for_backward(codes, scales, factors, offset, levels)
            p = dict(codes=codes, scales=scales, factors=factors, offset=offset, levels=levels)
            return F.linear(x, _nf4_weight(p, shape, dtype).to(x.dtype))

        @staticmethod
        def backward(ctx, grad):
            p = dict(zip(("codes", "scales", "factors", "offset", "levels"), ctx.saved_tensors, strict=True))
            return (grad @ _nf4_weight(p, shape, dtype).to(grad.dtype),) + (None,) * 5

    class MatMul4Bit(torch.autograd.Function):
        @staticmethod
        def forward(ctx, A, codes, scales, factors, offset, levels):
            p = dict(codes=codes, scales=scales, factors=factors, offset=offset, levels=levels)
            if style == "bnb-gemm":
                out = _bnb_ops()["gemm_4bit"](A, codes, scales, factors, offset, levels, list(shape))
            else:
                out = F.linear(A, _bnb_dequantize(p, shape, dtype).to(A.dtype))
            ctx.tensors = (None, p) if any(ctx.needs_input_grad[:2]) else (None, None)
            return out

        @staticmethod
        def backward(ctx, grad):
            _, p = ctx.tensors
            return (torch.matmul(grad, _bnb_dequantize(p, shape, dtype).to(grad.dtype)),) + (None,) * 5

    class Linear4bit(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.in_features, self.out_features = in_f, out_f
            for k, v in _nf4_params(out_f, in_f, dtype).items():
                self.register_parameter(k, v)

        def forward(self, x):
            args = (self.codes, self.scales, self.factors, self.offset, self.levels)
            if style == "torchao":
                return LinearNF4.apply(x, *args)
            # Linear4bit.forward: x.to(compute_dtype) and the result .to(x's dtype), no-ops at compute dtype = dtype
            return MatMul4Bit.apply(x.to(dtype), *args).to(x.dtype)

    return Linear4bit()


def _peft_bnb_forward(self, x, *args, **kwargs):
    """PEFT's ``lora.bnb.Linear4bit.forward`` (peft 0.21.2, ``peft/tuners/lora/bnb.py``), the path a bitsandbytes
    base takes: the base output cloned ("defensively", per its comment), each adapter run on the input cast to its
    own dtype and its output cast back to the result's dtype before the add (``lora.Linear`` adds first and casts
    the sum)."""
    import torch

    result = self.base_layer(x, *args, **kwargs).clone()
    for name in self.active_adapters:
        if name not in self.lora_A:
            continue
        lora_A, lora_B = self.lora_A[name], self.lora_B[name]
        convert = not torch.is_autocast_enabled()
        expected = result.dtype
        xa = self._cast_input_dtype(x, lora_A.weight.dtype) if convert else x
        out = lora_B(lora_A(self.lora_dropout[name](xa))) * self.scaling[name]
        result = result + (out.to(expected) if convert else out)
    return result


def _quantize_base(m, layers, style: str, dtype) -> None:
    """Every decoder layer's frozen linear as a 4-bit one in ``style``: PEFT adapters' ``base_layer`` and the
    untargeted linears alike (transformers' bitsandbytes integration replaces every ``nn.Linear`` but the
    ``lm_head``; torchtune's QLoRA builders make the untargeted ones ``FrozenNF4Linear``); with a bitsandbytes
    style the adapters take PEFT's bitsandbytes path (:func:`_peft_bnb_forward`)."""
    import types

    import torch
    from peft.tuners.lora import Linear as LoraLinear

    for layer in layers:
        for name, mod in list(layer.named_modules()):
            parent_name, _, attr = name.rpartition(".")
            parent = layer.get_submodule(parent_name) if parent_name else layer
            if type(mod) is torch.nn.Linear and not any(k in name for k in ("lora_A", "lora_B")):
                assert mod.bias is None, "the traced models have no linear biases"
                setattr(parent, attr, _linear_4bit(style, mod.in_features, mod.out_features, dtype))
            elif isinstance(mod, LoraLinear) and style != "torchao":
                mod.forward = types.MethodType(_peft_bnb_forward, mod)


def _config(family: str, dims: dict[str, int]) -> dict[str, Any]:
    # Phi-3's config defaults its pad and eos ids to 32000, past this vocabulary
    ids = {"pad_token_id": 0, "eos_token_id": 1} if family == "phi3" else {}
    return {"model_type": family, **dims, "num_hidden_layers": 3, "vocab_size": 512, "tie_word_embeddings": False,
            "max_position_embeddings": 512, **ids}


def _storages(t) -> dict[int, int]:
    """The storages behind a tensor, by data pointer, with their bytes: its own, or for a wrapper tensor subclass
    (torchao's ``NF4Tensor``, as validation/crosscheck_qlora_libs.py passes it) those of its inner tensors."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if is_traceable_wrapper_subclass(t):
        return {k: v for name in t.__tensor_flatten__()[0] for k, v in _storages(getattr(t, name)).items()}
    st = t.untyped_storage()
    return {st.data_ptr(): st.nbytes()}


def layer_bytes_per_token(config: dict[str, Any], precision: str, compiled: bool,
                          lora: dict[str, Any] | None = None, selective: bool = False, seq: int = S,
                          layer: int = 1):
    """Bytes the second decoder layer saves for backward, per token (each storage once, parameters left out);
    ``lora``: rank, targets and adapter dtype of PEFT adapters over the frozen model, and with ``quant`` in it the
    4-bit style of the frozen linears (:func:`_quantize_base`). ``selective``: torchtitan's op-level SAC around
    each layer (compiled after wrapping); then a pair, the layer's bytes and those of its keyword-argument tensors
    that are held (module docstring). ``seq``: the sequence length (batch ``B``); ``layer``: the decoder layer
    counted (the second unless said)."""
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
    if lora and lora.get("quant"):
        _quantize_base(m, layers, lora["quant"], dtype)
    if compiled:
        torch._dynamo.reset()
    if selective:
        layers = _wrap_selective(m, layers, compiled)
    elif compiled:
        for mod in layers:
            mod.compile()
    params = {ptr for p in m.parameters() for ptr in _storages(p)}
    seen: dict[int, int] = {}
    inside = [False]
    kwargs: dict[int, int] = {}  # the layer's keyword-argument tensors, by storage

    def pack(t):
        for ptr, nbytes in _storages(t).items():
            if inside[0] and ptr not in params:
                seen[ptr] = nbytes
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

    layers[layer].register_forward_pre_hook(enter, with_kwargs=True)
    layers[layer].register_forward_hook(leave)
    ids = torch.randint(0, config["vocab_size"], (B, seq))
    ra._held["sac"].clear()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = m(input_ids=ids, labels=ids, use_cache=False).loss
    if selective and not compiled:
        assert ra._held["sac"], "the selective checkpoints did not run"
    ra._held["sac"].clear()
    if not selective:
        return sum(seen.values()) / (B * seq)
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
            selective: bool = False, seq: int = S, layer: int = 1) -> dict:
    """One record: what the second layer saves per token, eager and compiled (``lora`` in it where given;
    ``selective``: under torchtitan's op-level SAC, with the held keyword-argument tensors on their own; a 4-bit
    base, ``quant`` in ``lora``: with its batch and sequence length, as ``seq`` varies, and the layer counted)."""
    if selective:
        eager, eager_kw = layer_bytes_per_token(config, precision, False, selective=True)
        comp, comp_kw = layer_bytes_per_token(config, precision, True, selective=True)
        rec = {"name": name, "precision": precision, "config": config, "recompute": "selective-op", "batch": B,
               "seq": S, "eager_bytes_per_token": eager, "compiled_bytes_per_token": comp,
               "eager_kwargs_bytes_per_token": eager_kw, "compiled_kwargs_bytes_per_token": comp_kw}
        print(f"  {name}: eager {eager:.0f} B/token (+{eager_kw:.0f} kwargs), compiled {comp:.0f} "
              f"(+{comp_kw:.0f})", flush=True)
        return rec
    if lora and lora.get("quant"):
        rec = {"name": name, "precision": precision, "config": config, "lora": lora, "batch": B, "seq": seq,
               "layer": layer,
               "eager_bytes_per_token": layer_bytes_per_token(config, precision, False, lora, seq=seq, layer=layer),
               "compiled_bytes_per_token": layer_bytes_per_token(config, precision, True, lora, seq=seq,
                                                                 layer=layer)}
        print(f"  {name}: eager {rec['eager_bytes_per_token']:.0f} B/token, compiled "
              f"{rec['compiled_bytes_per_token']:.0f}", flush=True)
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
    """(name, family, precision, shape change, lora, selective[, sequence length, layer]) of every record, in the
    file's order."""
    todo: list[tuple] = [(f"{family}/{precision}/{_shape(change)}", family, precision, change, None, False)
                         for family, precision in CASES for change in VARIED]
    for family, precision, adapters, rank, targets, change in LORA:
        lora = {"rank": rank, "targets": list(targets), "adapter_dtype": adapters}
        todo.append((f"{family}/{precision}/lora-{','.join(targets)}/{adapters}-r{rank}/{_shape(change)}", family,
                     precision, change, lora, False))
    todo += [(f"{family}/{precision}/selective-op/{_shape(change)}", family, precision, change, None, True)
             for family, precision, change in SAC_CASES]
    for family, precision, adapters, rank, targets, change, style, seq in QLORA:
        lora = {"rank": rank, "targets": list(targets), "adapter_dtype": adapters, "quant": style}
        name = f"{family}/{precision}/qlora-{style}-{','.join(targets)}/{adapters}-r{rank}/{_shape(change)}"
        todo.append((name + ("" if seq == S else f"/seq={seq}"), family, precision, change, lora, False, seq, 1))
    for family, precision, adapters, rank, targets, change, style, seq in QLORA_FIRST:
        lora = {"rank": rank, "targets": list(targets), "adapter_dtype": adapters, "quant": style}
        name = f"{family}/{precision}/qlora-{style}-{','.join(targets)}/{adapters}-r{rank}/{_shape(change)}/layer0"
        todo.append((name, family, precision, change, lora, False, seq, 0))
    return todo


def compute_records(only: list[str] | None = None) -> list[dict[str, Any]]:
    """Every record, or (``only``) those whose names contain one of these strings."""
    return [_record(name, _config(family, {**BASE, **change}), precision, lora, selective, *rest)
            for name, family, precision, change, lora, selective, *rest in _todo()
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
