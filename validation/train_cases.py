"""Training-throughput cases (validation-cases §3) for ``validation/perf_cases.py``.

TT-02…TT-16 are predictive (``mfu = auto``): the throughput comes from aicalc's own step-time model. The
Megatron-LM/Korthikanti runs used materialized (non-flash) attention on Selene (DGX A100: NVLink 3 inside a
node, 8× HDR 200 Gb/s InfiniBand = 25 GB/s per GPU per direction across nodes); those are facts of the runs,
passed as options, not tuned factors.
"""

from __future__ import annotations

from validation.perf_cases import Case

SELENE_IB = 25e9  # bytes/s per GPU per direction: 8× HDR 200 Gb/s per DGX A100


def gpt(layers: int, hidden: int, heads: int, vocab: int = 51200):
    """A Megatron GPT (LayerNorm, GeLU 4H FFN, biases, learned positions, tied embeddings)."""
    from aicalc.catalog.arch import Arch

    return Arch(family="gpt", hidden=hidden, layers=layers, heads=heads, kv_heads=heads, head_dim=hidden // heads,
                ffn=4 * hidden, gated_ffn=False, vocab=vocab, tied_embeddings=True, max_context=2048, norm="layer",
                qkv_bias=True, o_bias=True, mlp_bias=True, learned_positions=2048, activation="gelu",
                moe_layers=(False,) * layers)


WEAK = [  # id, heads, hidden, layers, tp, pp, gpus, global batch, tok/s/GPU
    ("TT-02", 24, 2304, 24, 1, 1, 32, 512, 9290), ("TT-03", 32, 3072, 30, 2, 1, 64, 512, 4430),
    ("TT-04", 32, 4096, 36, 4, 1, 128, 512, 2216), ("TT-05", 48, 6144, 40, 8, 1, 256, 1024, 872),
    ("TT-06", 64, 8192, 48, 8, 2, 512, 1536, 425), ("TT-07", 80, 10240, 60, 8, 4, 1024, 1792, 223),
    ("TT-08", 96, 12288, 80, 8, 8, 1536, 2304, 124), ("TT-09", 128, 16384, 96, 8, 16, 1920, 2160, 61.3),
    ("TT-10", 128, 20480, 105, 8, 35, 2520, 2520, 37.9), ("TT-11", 160, 25600, 128, 8, 64, 3072, 3072, 20.0),
]
SELECTIVE = [  # id, heads, hidden, layers, tp, pp, dp, global batch, micro, interleave, iteration s
    ("TT-12", 64, 6144, 48, 8, 1, 1, 4, 4, 1, 1.10), ("TT-13", 96, 12288, 96, 8, 8, 1, 64, 1, 3, 13.75),
    ("TT-14", 128, 20480, 105, 8, 35, 1, 280, 1, 3, 37.83), ("TT-15", 160, 25600, 128, 8, 64, 1, 512, 1, 1, 71.49),
]


def training_cases() -> list[Case]:
    out = []
    for id_, a, h, L, tp, pp, n, gb, tok in WEAK:
        out.append(Case(id_, "training", f"Megatron-LM weak scaling h{h} L{L} TP{tp} PP{pp} {n} A100, full recompute",
                        tok, "tok/s/GPU", dict(arch=(L, h, a), tp=tp, pp=pp, dp=n // (tp * pp), global_batch=gb,
                                               micro_batch=1, recompute="full", sp=False, interleave=1)))
    for id_, a, h, L, tp, pp, dp, gb, mb, v, it in SELECTIVE:
        out.append(Case(id_, "training", f"Korthikanti h{h} L{L} TP{tp} PP{pp}, selective recompute + SP",
                        it, "s/iteration", dict(arch=(L, h, a), tp=tp, pp=pp, dp=dp, global_batch=gb, micro_batch=mb,
                                                recompute="selective", sp=True, interleave=v)))
    out.append(Case("TT-16", "training", "Korthikanti 530B TP8 PP35 DP8 (2240 GPUs), selective + SP; MFU", 0.542,
                    "MFU", dict(arch=(105, 20480, 128), tp=8, pp=35, dp=8, global_batch=2240, micro_batch=1,
                                recompute="selective", sp=True, interleave=3)))
    return out


def estimate_training(case: Case, eff=None) -> tuple[float, float]:
    from aicalc.catalog.store import resolve_chip
    from aicalc.core.efficiency import IDEAL, Efficiency
    from aicalc.core.roofline import shape_of
    from aicalc.core.train_time import TrainChip, training

    a = case.args
    chip, _ = resolve_chip("a100-80gb")
    tc = TrainChip(chip.peak_flop_per_s("bf16"), chip.memory_bandwidth_bytes_per_s,
                   chip.interconnect.per_direction_bytes_per_s, SELENE_IB)
    s = shape_of(gpt(*a["arch"]))
    res = []
    for e in (eff or Efficiency(), IDEAL):
        r = training(s, tc, e, tokens=1e9, seq=2048, global_batch=a["global_batch"], micro_batch=a["micro_batch"],
                     tp=a["tp"], pp=a["pp"], dp=a["dp"], recompute=a["recompute"], flash=False,
                     sequence_parallel=a["sp"], interleave=a["interleave"])
        if case.unit == "tok/s/GPU":
            res.append(float(r["tokens_per_s_per_chip"]))
        elif case.unit == "MFU":
            res.append(float(r["mfu"]))
        else:
            res.append(float(r["step_s"]))
    return res[0], res[1]
