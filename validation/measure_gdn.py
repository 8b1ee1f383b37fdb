"""Measure on one CUDA GPU what one Gated DeltaNet layer (Qwen3-Next, Qwen3.5) keeps for backward.

The fused kernels a training run uses (flash-linear-attention's Triton ``chunk_gated_delta_rule``, ``l2norm`` and
``causal_conv1d``, ``FusedRMSNormGated``) do not run on a CPU or under fake tensors, so the CPU harness cannot trace
them. Each variant below is one layer in bf16 on the GPU; a ``[B, S, H]`` input (the input norm's output, a leaf that
requires grad) goes through it; what the forward pass leaves allocated, less its output, is what the layer keeps for
backward (``saved``); ``fwd_peak`` is the forward's high-water mark above the input and weights, ``bwd_peak`` the
backward's above what the forward left. Each case runs twice and the second is kept (Triton autotuning allocates on a
shape's first call).

Variants:

* ``fla``: the op chain of transformers' ``Qwen3NextGatedDeltaNet`` with the fused kernels everywhere: fused
  ``in_proj_qkvz``/``in_proj_ba``, fla's causal conv with SiLU on ``[q|k|v]``, ``chunk_gated_delta_rule`` with q and k
  at their own ``h_k`` heads (grouped-value) and ``use_qk_l2norm_in_kernel``, ``FusedRMSNormGated``, ``out_proj``.
* ``megatron``: Megatron-LM's ``GatedDeltaNet`` order (``megatron/core/ssm/gated_delta_net.py``): the causal conv, a
  separate L2 norm of q and k, q and k repeated to the ``h_v`` value heads (``repeat_interleave``), then the chunked
  rule without in-kernel normalization, ``FusedRMSNormGated``.
* ``hf``: transformers' own ``Qwen3NextGatedDeltaNet`` module with flash-linear-attention installed (its delta rule
  from fla; the causal conv and gated RMSNorm in PyTorch, as when ``causal-conv1d`` and hub kernels are absent).
* ``hf-torch``: the same module with flash-linear-attention hidden (``torch_chunk_gated_delta_rule``), run in a
  subprocess.

    python validation/measure_gdn.py --out DIR
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
from pathlib import Path

# Linear-attention widths of released configs (config.json in tests/data/configs/), and one with 64 value heads
SHAPES = {
    "qwen3-next-80b-a3b": {"hidden": 2048, "hk": 16, "dk": 128, "hv": 32, "dv": 128, "w": 4},
    "qwen3.5-4b": {"hidden": 2560, "hk": 16, "dk": 128, "hv": 32, "dv": 128, "w": 4},
    "hv64-h4096": {"hidden": 4096, "hk": 16, "dk": 128, "hv": 64, "dv": 128, "w": 4},
}
CASES = ((1, 4096), (1, 16384), (4, 4096))


def _fused(shape: dict, variant: str):
    import torch
    import torch.nn.functional as F
    from fla.modules import FusedRMSNormGated
    from fla.modules.causal_conv1d import causal_conv1d
    from fla.modules.l2norm import l2norm
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    H, hk, dk, hv, dv, w = (shape[k] for k in ("hidden", "hk", "dk", "hv", "dv", "w"))
    Kw, Vw = hk * dk, hv * dv

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.in_proj_qkvz = torch.nn.Linear(H, 2 * Kw + 2 * Vw, bias=False)
            self.in_proj_ba = torch.nn.Linear(H, 2 * hv, bias=False)
            self.conv_w = torch.nn.Parameter(torch.randn(2 * Kw + Vw, w) * 0.1)
            self.A_log = torch.nn.Parameter(torch.log(torch.rand(hv) * 15 + 1))
            self.dt_bias = torch.nn.Parameter(torch.rand(hv))
            self.norm = FusedRMSNormGated(dv, eps=1e-6, activation="swish")
            self.out_proj = torch.nn.Linear(Vw, H, bias=False)

        def forward(self, x):
            B, S, _ = x.shape
            q, k, v, z = self.in_proj_qkvz(x).split([Kw, Kw, Vw, Vw], dim=-1)
            b, a = self.in_proj_ba(x).split([hv, hv], dim=-1)
            qkv = causal_conv1d(torch.cat([q, k, v], dim=-1), weight=self.conv_w, activation="silu")[0]
            q, k, v = qkv.split([Kw, Kw, Vw], dim=-1)
            q, k, v = q.reshape(B, S, hk, dk), k.reshape(B, S, hk, dk), v.reshape(B, S, hv, dv)
            beta = b.sigmoid()
            g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)
            if variant == "megatron":
                q, k = l2norm(q.contiguous()), l2norm(k.contiguous())
                q, k = q.repeat_interleave(hv // hk, dim=2), k.repeat_interleave(hv // hk, dim=2)
                o = chunk_gated_delta_rule(q, k, v.contiguous(), g=g, beta=beta)[0]
            else:
                o = chunk_gated_delta_rule(q, k, v.contiguous(), g=g, beta=beta, use_qk_l2norm_in_kernel=True)[0]
            o = self.norm(o.reshape(-1, dv), z.reshape(-1, dv)).reshape(B, S, Vw)
            return self.out_proj(o)

    return Layer()


def _hf(shape: dict):
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

    cfg = Qwen3NextConfig(hidden_size=shape["hidden"], linear_num_key_heads=shape["hk"],
                          linear_key_head_dim=shape["dk"], linear_num_value_heads=shape["hv"],
                          linear_value_head_dim=shape["dv"], linear_conv_kernel_dim=shape["w"], hidden_act="silu")
    return Qwen3NextGatedDeltaNet(cfg, layer_idx=0)


def measure(variant: str) -> list[dict]:
    import torch

    records = []
    for name, shape in SHAPES.items():
        layer = (_hf(shape) if variant.startswith("hf") else _fused(shape, variant)).to("cuda", torch.bfloat16)
        for B, S in CASES:
            for _ in range(2):
                layer.zero_grad(set_to_none=True)
                gc.collect()
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                x = torch.randn(B, S, shape["hidden"], device="cuda", dtype=torch.bfloat16, requires_grad=True)
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                y = layer(x)
                torch.cuda.synchronize()
                fwd_peak = torch.cuda.max_memory_allocated() - base
                out_bytes = y.numel() * y.element_size()
                saved = torch.cuda.memory_allocated() - base - out_bytes
                after = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                y.backward(torch.ones_like(y))
                torch.cuda.synchronize()
                bwd_peak = torch.cuda.max_memory_allocated() - after
                del x, y
            rec = {"variant": variant, "shape": name, **shape, "B": B, "S": S, "saved": saved, "fwd_peak": fwd_peak,
                   "bwd_peak": bwd_peak, "saved_per_token": saved / (B * S)}
            print("REC " + json.dumps(rec), flush=True)  # as it goes: a run cut short keeps what it measured
            records.append(rec)
        del layer
    return records


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for gdn_saved.json")
    ap.add_argument("--variants", default="fla,megatron,hf,hf-torch", help="comma-separated, in subprocesses")
    ap.add_argument("--variant", choices=("fla", "megatron", "hf", "hf-torch"), help="one variant, printed only")
    args = ap.parse_args(argv)
    if args.variant:
        if args.variant == "hf-torch":
            sys.modules["fla"] = None  # transformers falls back to torch_chunk_gated_delta_rule
        else:  # fla refuses the gated backward on Hopper under Triton 3.4-3.7.0 (wrong values, same allocations)
            import fla.ops.common.chunk_o as chunk_o

            chunk_o.TRITON_ABOVE_3_7_1 = True
        measure(args.variant)
        return 0
    import fla
    import torch
    import transformers

    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "fla": fla.__version__,
           "transformers": transformers.__version__, "dtype": "bfloat16",
           "method": "memory_allocated after forward less input, weights and output; second of two runs",
           "records": []}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for variant in args.variants.split(","):  # the file is rewritten after each, so a cut-off run keeps the rest
        proc = subprocess.run([sys.executable, __file__, "--out", args.out, "--variant", variant],
                              capture_output=True, text=True, check=False)
        print(proc.stderr[-3000:], file=sys.stderr)
        got = [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith("REC ")]
        print(f"== {variant}: {len(got)} records, rc {proc.returncode}", flush=True)
        doc["records"] += got
        (out / "gdn_saved.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
