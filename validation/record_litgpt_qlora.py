"""Record the peak memory of LitGPT's QLoRA fine-tuning loop, traced on fake tensors.

The LitGPT QLoRA rows in ``validation/cases/training-memory.yaml`` are published ``torch.cuda.max_memory_allocated``
peaks. This harness runs LitGPT's own model code (``litgpt/model.py``, ``litgpt/lora.py`` and ``litgpt/config.py``
of a LitGPT checkout, by default the commit that published the rows) at full size under
``torch._subclasses.fake_tensor.FakeTensorMode`` (shapes and dtypes exact, nothing allocated) through the loop of
``litgpt/finetune/lora.py``: ``logits = model(input_ids, lm_head_chunk_size=128)``,
``logits[-1] = logits[-1][..., :-1, :]``, ``chunked_cross_entropy``, ``backward`` of the loss over the
gradient-accumulation steps, ``loss`` rebound to a float at each log (``log_interval: 1``), the optimizer step
after each accumulation, ``logits`` rebound only when the next forward returns.

bitsandbytes cannot run on fake tensors, so its 4-bit linear is re-implemented for its memory, from the versions
the rows were made with (LitGPT pinned ``bitsandbytes==0.42.0`` and a Lightning 2.3/2.4 dev build):

* Lightning's ``BitsandbytesPrecision.module_init_context`` makes every ``torch.nn.Linear`` an ``_NF4Linear``,
  the ``lm_head`` included: a packed uint8 weight (half a byte per element) and one fp32 absmax per 64 elements
  (``quantize_4bit`` without ``compress_statistics``);
* ``MatMul4Bit.forward``: ``F.linear(A, dequantize_4bit(B, quant_state).to(A.dtype).t())``, where
  ``dequantize_4bit`` returns ``quant_state.dtype``, fp16, because Lightning's ``_Linear4bit.quantize`` quantizes
  ``weight.to(torch.half)``; then ``ctx.tensors = (A, B)`` when A or B needs a gradient (bitsandbytes 0.42.0;
  0.43.2 stores ``(None, B)``; ``--bnb-frees-inputs`` traces that);
* ``MatMul4Bit.backward``: ``grad_A = grad_output @ dequantize_4bit(B).to(grad_output.dtype).t()``.

The optimizer is ``torch.optim.AdamW`` over the LoRA parameters (LitGPT makes it bitsandbytes' ``PagedAdamW``,
whose states of 1e5 elements or more live in CUDA unified memory, outside PyTorch's allocator; the adapters are
small either way). CUDA's fused dropout is used (``record_step_peak._cuda_dropout``).

The peak is counted as live storages in 512-byte blocks by a ``TorchDispatchMode`` that sees every op's outputs
and frees each storage by a weak reference, not with ``MemTracker``: the tracker's module hooks hold the autograd
graphs of earlier micro-batches, which with bitsandbytes 0.42's ``ctx.tensors`` would keep every earlier
micro-batch's inputs (each traced micro-batch would add ~1.7 GB on Llama-3.1-8B).

    git clone https://github.com/Lightning-AI/litgpt && git -C litgpt checkout 03ffc5515b251fb7e3a461efd0e3c163e45b6b3b
    python validation/record_litgpt_qlora.py --litgpt-src litgpt            # tests/data/validation/litgpt_qlora.json
    python validation/record_litgpt_qlora.py --litgpt-src litgpt --check
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
import types
import weakref
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record_params as rp  # noqa: E402
import record_step_peak as rsp  # noqa: E402

FILENAME = "litgpt_qlora.json"
GENERATED_BY = "validation/record_litgpt_qlora.py"
LITGPT_COMMIT = "03ffc5515b251fb7e3a461efd0e3c163e45b6b3b"
BLOCK = 512

# The rows of validation/cases/training-memory.yaml with their configs' settings (config_hub/finetune/*/qlora.yaml):
# LitGPT model name, micro-batch, padded length (Alpaca2k at max_seq_length 512), LoRA r and the modules it targets,
# gradient accumulation (global batch / micro-batch), LoRA dropout 0.05 unless stated.
CASES = [
    {"id": "QL-01", "litgpt": "Meta-Llama-3.1-8B", "batch": 2, "seq": 512, "r": 32, "lora": "q,v", "accum": 4},
    {"id": "QL-02", "litgpt": "Mistral-7B-v0.1", "batch": 2, "seq": 512, "r": 32, "lora": "q,v", "accum": 4},
    {"id": "QL-03", "litgpt": "Llama-2-7b-hf", "batch": 2, "seq": 512, "r": 32, "lora": "q,v", "accum": 4},
    {"id": "QL-04", "litgpt": "gemma-2-9b", "batch": 1, "seq": 512, "r": 16, "lora": "all+head", "accum": 6,
     "lora_dropout": 0.1},
]
MICROBATCHES = 5  # the second micro-batch on sees its predecessor's graph; the fifth follows an optimizer step


def load_litgpt(src: Path):
    """LitGPT's ``model``, ``config`` and ``lora`` modules from a checkout, under a bare ``litgpt`` package whose
    ``utils`` holds the two helpers they import (``find_multiple``, ``map_old_state_dict_weights``, as in
    ``litgpt/utils.py``) instead of the full module (which imports Lightning)."""
    pkg = types.ModuleType("litgpt")
    pkg.__path__ = [str(src / "litgpt")]
    utils = types.ModuleType("litgpt.utils")

    def find_multiple(n: int, k: int) -> int:
        return n if n % k == 0 else n + k - (n % k)

    def map_old_state_dict_weights(state_dict, mapping, prefix):
        for old, new in mapping.items():
            if prefix + old in state_dict:
                state_dict[prefix + new] = state_dict.pop(prefix + old)
        return state_dict

    utils.find_multiple = find_multiple
    utils.map_old_state_dict_weights = map_old_state_dict_weights
    sys.modules["litgpt"] = pkg
    sys.modules["litgpt.utils"] = utils
    pkg.utils = utils
    importlib.import_module("litgpt.model")  # as litgpt/__init__.py: the model before the config
    return importlib.import_module("litgpt.lora")


def nf4_linear(keep_inputs: bool):
    """``_NF4Linear`` and ``MatMul4Bit`` as bitsandbytes 0.42 and Lightning run them, for their memory."""
    import torch
    import torch.nn.functional as F

    class MatMul4Bit(torch.autograd.Function):
        @staticmethod
        def forward(ctx, A, B, absmax, shape):
            W = torch.empty(shape, dtype=torch.float16).to(A.dtype)  # dequantize_4bit(B, state).to(A.dtype)
            out = F.linear(A, W)
            del W
            ctx.shape = shape
            needs = any(ctx.needs_input_grad[:2])
            ctx.tensors = ((A if keep_inputs else None), B) if needs else (None, None)
            return out

        @staticmethod
        def backward(ctx, grad):
            W = torch.empty(ctx.shape, dtype=torch.float16).to(grad.dtype)
            return torch.matmul(grad, W), None, None, None

    class NF4Linear(torch.nn.Module):
        def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
            super().__init__()
            if bias:
                raise ValueError("the traced LitGPT models have no linear biases")
            n = in_features * out_features
            self.in_features, self.out_features, self.shape = in_features, out_features, (out_features, in_features)
            self.weight = torch.nn.Parameter(torch.empty(n // 2, 1, dtype=torch.uint8), requires_grad=False)
            self.absmax = torch.nn.Parameter(torch.empty(n // 64, dtype=torch.float32), requires_grad=False)
            self.bias = None

        def forward(self, x):
            return MatMul4Bit.apply(x, self.weight, self.absmax, self.shape)

    return NF4Linear


def live_counter():
    """Bytes of live storages in 512-byte blocks, and their peak: every op output is counted once per storage
    and dropped when the storage is freed (a weak reference)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Live(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live: dict[int, int] = {}
            self.cur = 0
            self.peak = 0

        def add(self, t):
            if not isinstance(t, torch.Tensor):
                return
            st = t.untyped_storage()
            key = st._cdata
            if key in self.live:
                return
            n = math.ceil(st.nbytes() / BLOCK) * BLOCK
            self.live[key] = n
            self.cur += n
            self.peak = max(self.peak, self.cur)
            weakref.finalize(st, self._free, key)

        def _free(self, key):
            self.cur -= self.live.pop(key, 0)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                self.add(t)
            return out

    return Live()


def chunked_cross_entropy(logits, targets, ignore_index=-100):
    """``litgpt.utils.chunked_cross_entropy`` for a list of logits chunks (the finetune scripts' path)."""
    import torch
    import torch.nn.functional as F

    logit_chunks = [c.reshape(-1, c.size(-1)) for c in logits]
    target_chunks = [t.reshape(-1) for t in targets.split(logits[0].size(1), dim=1)]
    losses = [F.cross_entropy(x, y, ignore_index=ignore_index, reduction="none")
              for x, y in zip(logit_chunks, target_chunks, strict=True)]
    n = (targets != ignore_index).sum()
    return torch.cat(losses).sum() / n.maximum(torch.ones_like(n))


def measure(lora_mod, c: dict[str, Any], keep_inputs: bool) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode

    targets = c["lora"]
    everything = targets.startswith("all")
    cfg = lora_mod.Config.from_name(
        c["litgpt"], lora_r=c["r"], lora_alpha=16, lora_dropout=c.get("lora_dropout", 0.05), lora_query=True, lora_key=everything,
        lora_value=True, lora_projection=everything, lora_mlp=everything, lora_head=targets.endswith("+head"))
    linear, dropout = torch.nn.Linear, F.dropout
    _, F.dropout = rsp._cuda_dropout()
    try:
        with FakeTensorMode():
            torch.manual_seed(0)
            torch.set_default_dtype(torch.bfloat16)  # bf16-true: Fabric's init_module dtype context
            torch.nn.Linear = nf4_linear(keep_inputs)  # BitsandbytesPrecision's class replacement
            try:
                model = lora_mod.GPT(cfg)
            finally:
                torch.nn.Linear = linear
                torch.set_default_dtype(torch.float32)
            lora_mod.mark_only_lora_as_trainable(model)
            model.max_seq_length = c["seq"]  # fit(): min(longest sequence, train.max_seq_length)
            model.train()
            trainable = [p for p in model.parameters() if p.requires_grad]
            opt = torch.optim.AdamW(trainable, lr=2e-4, weight_decay=0.0, betas=(0.9, 0.95))
            ids = torch.randint(0, cfg.vocab_size, (c["batch"], c["seq"]))
            live = live_counter()
            for t in [*model.parameters(), *model.buffers(), ids]:
                live.add(t)
            weights = live.cur
            phases: list[tuple[str, int]] = []
            state: dict[str, Any] = {}

            def phase(name, fn):
                live.peak = live.cur
                fn()
                phases.append((name, live.peak))

            def forward():
                state["logits"] = model(ids, lm_head_chunk_size=128)  # the loop's `logits`, rebound here

            def loss():
                logits = state["logits"]
                logits[-1] = logits[-1][..., :-1, :]
                state["loss"] = chunked_cross_entropy(logits, ids[..., 1:])

            def step():
                opt.step()
                opt.zero_grad()

            with live:
                for i in range(1, MICROBATCHES + 1):
                    phase(f"micro-batch {i} forward", forward)
                    phase(f"micro-batch {i} loss", loss)
                    phase(f"micro-batch {i} backward", lambda: (state["loss"] / c["accum"]).backward())
                    state["loss"] = 0.0  # log_interval 1: loss = running_loss.compute().item()
                    if i % c["accum"] == 0:
                        phase(f"micro-batch {i} optimizer step", step)
            n_params = sum(p.numel() for p in model.parameters())
            n_trainable = sum(p.numel() for p in trainable)
    finally:
        F.dropout = dropout
    where, peak = max(phases, key=lambda p: p[1])
    return {"weights_bytes": weights, "peak_bytes": peak, "peak_phase": where,
            "phases": {name: v for name, v in phases}, "trainable_params": int(n_trainable),
            "stored_params": int(n_params)}


def record_all(src: Path, verbose: bool = False) -> list[dict[str, Any]]:
    lora_mod = load_litgpt(src)
    rsp._block_rounding()
    out = []
    for c in CASES:
        rec = dict(c)
        for keep, key in ((True, "bnb_0_42"), (False, "bnb_frees_inputs")):
            rec[key] = measure(lora_mod, c, keep)
            if verbose:
                print(f"{c['id']} {key}: peak {rec[key]['peak_bytes'] / 1e9:.2f} GB at {rec[key]['peak_phase']}",
                      file=sys.stderr)
        out.append(rec)
    return out


def check_offline(path: Path) -> int:
    """Without a LitGPT checkout (CI has none): the committed file holds every case, with this script's settings,
    at the pinned commit, each with both traced peaks. The peaks themselves are re-traced only with --litgpt-src."""
    import json

    if not path.exists():
        print(f"FAIL: {path.relative_to(rp.ROOT)} does not exist; run with --litgpt-src to create it")
        return 1
    doc = json.loads(path.read_text(encoding="utf-8"))
    problems = []
    if doc.get("litgpt_commit") != LITGPT_COMMIT:
        problems.append(f"litgpt_commit {doc.get('litgpt_commit')} is not {LITGPT_COMMIT}")
    recs = {r.get("id"): r for r in doc.get("records", [])}
    for c in CASES:
        r = recs.get(c["id"])
        if r is None:
            problems.append(f"{c['id']}: no record")
            continue
        problems += [f"{c['id']}: {k} is {r.get(k)!r}, the script says {v!r}" for k, v in c.items() if r.get(k) != v]
        problems += [f"{c['id']}: no {k} peak" for k in ("bnb_0_42", "bnb_frees_inputs")
                     if not (isinstance(r.get(k), dict) and r[k].get("peak_bytes", 0) > 0)]
    problems += [f"{i}: not a case of this script" for i in set(recs) - {c["id"] for c in CASES}]
    for p in problems:
        print(f"FAIL: {p}")
    if not problems:
        print(f"{path.relative_to(rp.ROOT)}: {len(CASES)} cases at LitGPT {LITGPT_COMMIT[:8]} (no --litgpt-src: "
              "the peaks were not re-traced)")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--litgpt-src", help=f"a LitGPT checkout (the rows: commit {LITGPT_COMMIT}); without it "
                    "--check verifies the committed file's cases and commit only")
    ap.add_argument("--check", action="store_true", help="recompute and compare with the committed file")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--root", help="repository root (default: this file's parent folder)")
    args = ap.parse_args(argv)
    rp.set_root(args.root)
    rp.quiet()
    if args.litgpt_src is None:
        if not args.check:
            print("error: --litgpt-src is required to record (a LitGPT checkout at commit "
                  f"{LITGPT_COMMIT})", file=sys.stderr)
            return 2
        return check_offline(rp.out_path(FILENAME))
    src = Path(args.litgpt_src)
    if not (src / "litgpt" / "lora.py").is_file():
        print(f"error: --litgpt-src {src} has no litgpt/lora.py", file=sys.stderr)
        return 2
    records = record_all(src, args.verbose)
    path = rp.out_path(FILENAME)
    extra = {"method": "LitGPT's model code on fake tensors through finetune/lora.py's loop, bitsandbytes 0.42's "
                       "MatMul4Bit re-implemented for its memory; live storages in 512-byte blocks",
             "litgpt_commit": LITGPT_COMMIT}
    if args.check:
        return rp.check_envelope(path, records, ("id",), **extra)
    rp.write_envelope(path, GENERATED_BY, records, **extra)
    print(f"wrote {path.relative_to(rp.ROOT)} ({len(records)} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
