"""Check record_compiled.py's re-implemented 4-bit linears against the libraries themselves (a one-off check, not
run by CI, which has neither library installed).

    pip install --target /tmp/bnb bitsandbytes==0.49.2      # 0.50.2: the fused forward, the "bnb-gemm" records
    PYTHONPATH=/tmp/bnb python validation/crosscheck_qlora_libs.py bnb
    pip install --target /tmp/torchao torchao==0.18.0
    PYTHONPATH=/tmp/torchao python validation/crosscheck_qlora_libs.py torchao

Each committed ``qlora`` record of tests/data/validation/compiled_saving.json in the library's style is recomputed
by ``record_compiled.layer_bytes_per_token`` (the same model, hooks and counting) with the library in place of the
re-implementation: bitsandbytes' ``Linear4bit`` (NF4, double-quantized scales, the model's dtype as compute dtype)
for every decoder-layer ``nn.Linear`` before ``get_peft_model``, the model flagged ``is_loaded_in_4bit`` as
transformers flags a quantized model, so that PEFT wraps them in its own ``lora.bnb.Linear4bit``; or a torchao
``to_nf4`` weight called through ``linear_nf4``, as torchtune's ``FrozenNF4Linear`` does, under PEFT's
``lora.Linear``. torchao's NF4 needs each weight's size to be a multiple of 64 × 256: records with other shapes
are skipped. Exit 1 on any difference.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record_compiled as rc  # noqa: E402
import record_params as rp  # noqa: E402


def _swap_linears(layer, make) -> None:
    """Every plain ``nn.Linear`` of a decoder layer but PEFT's adapters replaced by ``make(linear)``."""
    import torch

    for name, mod in list(layer.named_modules()):
        if type(mod) is torch.nn.Linear and "lora_" not in name:
            parent_name, _, attr = name.rpartition(".")
            setattr(layer.get_submodule(parent_name) if parent_name else layer, attr, make(mod))


def _bnb_linear(lin):
    import bitsandbytes as bnb
    import torch

    q = bnb.nn.Linear4bit(lin.in_features, lin.out_features, bias=False, compute_dtype=lin.weight.dtype,
                          compress_statistics=True, quant_type="nf4", quant_storage=torch.uint8)
    q.weight = bnb.nn.Params4bit(lin.weight.detach().clone(), requires_grad=False, compress_statistics=True,
                                 quant_type="nf4")
    return q.to("cpu")  # Params4bit quantizes when moved to a device


def _torchao_linear(lin):
    import torch
    from torchao.quantization.quantize_.workflows.nf4.nf4_tensor import linear_nf4, to_nf4

    class FrozenNF4Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(to_nf4(lin.weight.detach()), requires_grad=False)

        def forward(self, x):
            return linear_nf4(input=x, weight=self.weight)

    return FrozenNF4Linear()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] not in ("bnb", "torchao"):
        print("usage: crosscheck_qlora_libs.py bnb|torchao", file=sys.stderr)
        return 2
    lib = argv[0]
    rp.quiet()
    from transformers import AutoModelForCausalLM
    from transformers.modeling_layers import GradientCheckpointingLayer

    if lib == "bnb":
        import bitsandbytes

        major, minor = (int(x) for x in bitsandbytes.__version__.split(".")[:2])
        style, version = ("bnb-gemm" if (major, minor) >= (0, 50) else "bnb"), bitsandbytes.__version__
        from_config = AutoModelForCausalLM.from_config

        def quantized(*args, **kwargs):
            m = from_config(*args, **kwargs)
            for layer in (x for x in m.modules() if isinstance(x, GradientCheckpointingLayer)):
                _swap_linears(layer, _bnb_linear)
            m.is_loaded_in_4bit = True  # PEFT then dispatches its lora.bnb.Linear4bit
            return m

        AutoModelForCausalLM.from_config = quantized
        rc._quantize_base = lambda *args: None
    else:
        import torchao

        style, version = "torchao", torchao.__version__
        rc._quantize_base = lambda m, layers, _style, _dtype: [_swap_linears(x, _torchao_linear) for x in layers]

    doc = json.loads((rp.ROOT / "tests" / "data" / "validation" / "compiled_saving.json").read_text())
    bad = checked = 0
    for rec in (r for r in doc["records"] if r.get("lora", {}).get("quant") == style):
        c = rec["config"]
        sizes = [c["hidden_size"] * w for w in (c["num_attention_heads"] * c["head_dim"],
                                                 c["num_key_value_heads"] * c["head_dim"], c["intermediate_size"])]
        if style == "torchao" and any(n % (rc.NF4_BLOCK * rc.SCALE_BLOCK) for n in sizes):
            print(f"  skipped {rec['name']}: a weight is not a multiple of 64 x 256 elements")
            continue
        got = [rc.layer_bytes_per_token(c, rec["precision"], compiled, rec["lora"], seq=rec["seq"],
                                        layer=rec["layer"]) for compiled in (False, True)]
        want = [rec["eager_bytes_per_token"], rec["compiled_bytes_per_token"]]
        checked += 1
        bad += got != want
        print(f"  {'OK ' if got == want else 'DIFF'} {rec['name']}: {lib} {version} eager {got[0]:.0f}, compiled "
              f"{got[1]:.0f} B/token; re-implementation {want[0]:.0f}, {want[1]:.0f}", flush=True)
    print(f"{checked - bad} of {checked} {style} records reproduced by {lib} {version}")
    return 1 if bad or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
