"""The efficiency model: how much of a chip's datasheet peak real kernels reach.

A bare roofline (time = max(FLOPs / peak, bytes / bandwidth)) is 1.2–2× optimistic against published
measurements (validation-cases §4–§5: LLM-Viewer's pure roofline gives 6.98 ms where TensorRT-LLM
measured 16.1 ms, PF-09). This module holds one general correction, the same for every chip and model:

1. **Matmul efficiency by size** — a GEMM of shape M×N×K reaches
   ``flop_max · Π_{x∈(M,N,K)} x / (x + gemm_half_dim)`` of peak dense FLOP/s: small dimensions leave tensor
   cores idle (tile quantization, short main loops). Shape of the curve from the LLMCompass A100 GEMM
   measurements (OP-01/OP-02: M=128 reaches 62 % of peak, M ≥ 1024 reaches 83–93 %).
2. **8-bit tensor math** (fp8/int8 compute) reaches ``low_precision_flop_factor`` of the efficiency a 16-bit
   GEMM reaches against its own (doubled) peak: fp8 GEMMs run ~1.2–1.5× faster than bf16, not 2×
   (PF-03/PF-04 vs PF-01/PF-02). FP4 tensor math (NVFP4, MXFP4 x MXFP4) reaches ``fp4_flop_factor`` of that
   again: its block scales and the activations' quantization leave a smaller share of the doubled peak.
3. **Bandwidth efficiency** — streaming kernels reach ``bandwidth`` of the datasheet bandwidth; weight-only
   quantized formats (int8, int4, GGUF; dequantized in the kernel) reach ``quant_bandwidth`` of it
   (gpt-fast: bf16 1397 GB/s vs int8 1069 and int4 863 GB/s effective on the same A100, DE-01…DE-03).
4. **Overlap** of compute and memory inside one kernel: ``t = (t_c^p + t_m^p)^(1/p)`` with
   ``overlap_p`` in [1, 64] (p → ∞ is the ideal max(), which IDEAL uses; p = 1 is no overlap). Matters only near
   the ridge point. Computed without forming t^p (:func:`combine`), so no time overflows or vanishes.
5. **Per-kernel launch overhead** ``kernel_overhead_s`` for every kernel of the step, and a **per-step
   overhead** ``step_overhead_s`` (host work, sampling, synchronisation of one forward pass).
6. **Collectives**: a latency floor ``collective_latency_s`` per all-reduce plus the ring volume at
   ``link`` of the interconnect's per-direction bandwidth.

The defaults were calibrated once, by a grid search that minimised the geometric-mean error over all scored
DE/PF/SV/TT rows (``validation/perf_cases.py``, ``docs/validation-perf.md``), and are applied unchanged to
every case. Every factor can be overridden per call (``efficiency={"bandwidth": 0.8}``), within its range in
:data:`FACTOR_RANGES` (the same table holds the profile files and ``--eff KEY=VALUE``).
"""

from aicalc.errors import ParameterError
from aicalc.tuples import Named


class Efficiency(Named):
    """The fractions of datasheet peaks kernels reach, per regime (presets/profiles give the values). A named tuple
    (``_replace`` for a copy with other factors): a frozen dataclass compiles its generated methods at import,
    docs/robustness.md."""

    flop_max: float = 0.85  # large-GEMM fraction of dense peak (OP-01: 0.93 on a bare A100 GEMM)
    gemm_half_dim: float = 48.0  # a GEMM dimension of this size halves the efficiency (OP-01/OP-02)
    low_precision_flop_factor: float = 0.60  # 8-bit compute efficiency relative to 16-bit (PF-03/04, SV-05…12)
    fp4_flop_factor: float = 1.0  # FP4 tensor math beyond low_precision_flop_factor (item 2 of the module doc)
    bandwidth: float = 0.90  # fraction of datasheet memory bandwidth (gpt-fast "practical peak ~1700 GB/s", DE-01)
    quant_bandwidth: float = 0.75  # weight-only quantized kernels (DE-02/03/05)
    overlap_p: float = 2.0  # compute/memory overlap exponent inside a kernel
    kernel_overhead_s: float = 4e-6  # launch + tail per kernel
    step_overhead_s: float = 0.0  # per forward pass (host, sampling, sync)
    collective_latency_s: float = 20e-6  # latency floor per all-reduce (NCCL small-message latency)
    link: float = 0.50  # fraction of per-direction interconnect bandwidth a ring collective reaches
    # small-M GEMMs on vector units (GEMV kernels: llama.cpp mul_mv/mmvq, exllama, TensorRT-LLM's GEMV plugin):
    # a GEMM runs at the better of the tile curve and gemv_efficiency × the chip's vector rate (its fp32
    # figure, or vector_fraction × peak where none is listed); 0 disables the GEMV path
    gemv_efficiency: float = 0.0
    vector_fraction: float = 1.0
    dequant_ops_per_weight: float = 0.0  # ALU ops to dequantize one weight-only quantized weight, at the vector rate
    # dataflow chips (weights in on-chip SRAM, one token crosses a pipeline of chips): fixed latency per layer and
    # per chip-to-chip hop of every forward pass
    layer_latency_s: float = 0.0
    hop_latency_s: float = 0.0
    # MoE grouped GEMMs (aicalc.core.moe): rows of each expert padded to this row tile (CUTLASS/DeepGEMM grouped
    # kernels tile M by 64-128; 0: no padding), and their efficiency relative to a dense GEMM of the padded
    # per-expert shape (scheduling over groups, scattered rows); fitted on the MoE calibration cases
    grouped_gemm_tile: float = 64.0
    # the smallest row tile a kernel picks for few tokens per expert (0: the tile is fixed at grouped_gemm_tile)
    grouped_gemm_tile_min: float = 0.0
    grouped_gemm_efficiency: float = 1.0
    # fine-grained experts: a grouped GEMM's efficiency falls with the expert's FFN width w
    # (Qwen3-30B-A3B's 768, gpt-oss's 2880, DeepSeek-V3's 2048 against Mixtral's 14336) as w / (w + this); 0: off
    grouped_gemm_half_dim: float = 0.0
    # training only
    train_elementwise_bytes: float = 120.0  # bytes of non-matmul traffic per token per layer, in units of H
    dp_overlap: float = 0.0  # share of the compute beside a data-parallel collective that hides it (frameworks)
    ep_overlap: float = 0.0  # share of the expert compute that hides the MoE all-to-alls
    # training only (aicalc.core.train_time.step_time): the large-GEMM plateau of the chip's generation, as a
    # fraction of its dense peak in 16-bit and in 8-bit math, set per generation from
    # aicalc.core.train_time.GEMM_PLATEAU (0: none known, flop_max and low_precision_flop_factor apply), and the
    # share of it a training step's GEMMs sustain (fitted on validation/cases/calibration-training.yaml)
    train_gemm_plateau: float = 0.0
    train_gemm_plateau_8bit: float = 0.0
    train_gemm_sustained: float = 0.78
    # fused (flash) attention in training, fwd + bwd (the bwd priced as 2.5 forwards), fraction of the 16-bit
    # peak; fitted on validation/cases/calibration-training.yaml (FlashAttention-2 reaches 35 % of an H100,
    # Shah et al. 2024); 0: flop_max
    train_attention_efficiency: float = 0.40
    tp_overlap: float = 0.0  # share of the tensor-parallel collectives the layer GEMMs hide (TP comm overlap)
    # fraction of the link bandwidth a training step's large collectives reach (NCCL bus bandwidth of large
    # messages; fitted on validation/cases/calibration-training.yaml); 0: link
    train_link: float = 0.825
    # fraction of datasheet bandwidth the attention core's KV-cache reads reach (paged-attention kernels that gather
    # the cache page by page; presets/classes give it where a chip's kernels fall short of streaming); 0: bandwidth
    attention_bandwidth: float = 0.0
    # the vector lane width the attention core's per-head widths are padded to (0: none): TPU Pallas kernels lay a
    # head's q·k width and its value width along the 128 lanes of a vector register, so a head of width d computes
    # as ceil(d / lanes) · lanes wide (presets/classes/tpu.yaml; aicalc.core.pricing.lane_padding)
    attention_lanes: float = 0.0

    def with_overrides(self, overrides: dict[str, float]) -> "Efficiency":
        """These factors replaced, each checked against its range (:data:`FACTOR_RANGES`)."""
        for k, v in overrides.items():
            if k not in FACTOR_RANGES:
                raise ParameterError("efficiency", k, f"is not a known factor (known: {', '.join(sorted(FACTOR_RANGES))})")
            problem = factor_problem(k, v)
            if problem:
                raise ParameterError("efficiency", f"{k}={v}", problem)
        return self._replace(**{k: float(v) for k, v in overrides.items()})

    def as_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in self._fields}


class Range(Named):
    """The values an efficiency factor may take: ``lo`` to ``hi``, ``lo`` itself only where ``lo_open`` is False."""

    lo: float
    hi: float
    lo_open: bool
    what: str  # what the factor is, as an error message says it

    def describe(self) -> str:
        return f"{'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}]"


_SHARE = "a share of a peak"
MIN_SHARE = 1e-6  # a share of a peak below a millionth is a typo: bandwidth=1e-320 made every time infinite
_OFF = "a share (0: not modelled)"
_SECONDS = "a time in seconds"
# The one table of the range of every factor, for profile files (aicalc.catalog.profiles), chip presets'
# ``efficiency:`` blocks and ``--eff KEY=VALUE`` / ``efficiency={...}`` (Efficiency.with_overrides) alike. A share
# of a peak is in [1e-6, 1] (0 would make a time infinite, a subnormal one overflow it); a share where 0 means "not modelled" is in [0, 1];
# latencies and overheads are in [0, 1 s] (the built-in profiles use 0 to 3.5 ms; one second per kernel or
# forward pass is no engine); sizes and op counts are bounded ~100x beyond the fitted values. ``overlap_p`` is in
# [1, 64]: 1 is no overlap (t_c + t_m), 2 the calibrated default (every built-in profile keeps it); at 64 the
# p-norm is within 2^(1/64) - 1 = 1.1 % of the ideal max(), so a larger exponent adds nothing (the ideal roofline,
# p = inf, is IDEAL's own). :func:`combine` is overflow-safe for any p >= 1 all the same.
FACTOR_RANGES: dict[str, Range] = {
    "flop_max": Range(MIN_SHARE, 1.0, False, _SHARE),
    "gemm_half_dim": Range(0.0, 16384.0, False, "a GEMM dimension (0: no size curve)"),
    "low_precision_flop_factor": Range(MIN_SHARE, 1.0, False, _SHARE),
    "fp4_flop_factor": Range(MIN_SHARE, 1.0, False, _SHARE),
    "bandwidth": Range(MIN_SHARE, 1.0, False, _SHARE),
    "quant_bandwidth": Range(MIN_SHARE, 1.0, False, _SHARE),
    "overlap_p": Range(1.0, 64.0, False, "the overlap exponent (1: no overlap; 64: within 1.1 % of max())"),
    "kernel_overhead_s": Range(0.0, 1.0, False, _SECONDS),
    "step_overhead_s": Range(0.0, 1.0, False, _SECONDS),
    "collective_latency_s": Range(0.0, 1.0, False, _SECONDS),
    "link": Range(MIN_SHARE, 1.0, False, _SHARE),
    "gemv_efficiency": Range(0.0, 1.0, False, _OFF),
    "vector_fraction": Range(MIN_SHARE, 1.0, False, _SHARE),
    "dequant_ops_per_weight": Range(0.0, 1024.0, False, "ALU operations per weight"),
    "layer_latency_s": Range(0.0, 1.0, False, _SECONDS),
    "hop_latency_s": Range(0.0, 1.0, False, _SECONDS),
    "grouped_gemm_tile": Range(0.0, 1024.0, False, "rows per tile (0: no padding)"),
    "grouped_gemm_tile_min": Range(0.0, 1024.0, False, "rows per tile (0: a fixed tile)"),
    "grouped_gemm_efficiency": Range(0.0, 1.0, True, _SHARE),
    "grouped_gemm_half_dim": Range(0.0, 65536.0, False, "an expert matrix width (0: no size curve)"),
    "train_elementwise_bytes": Range(0.0, 16384.0, False, "bytes per token per layer, in units of the hidden size"),
    "dp_overlap": Range(0.0, 1.0, False, _OFF),
    "ep_overlap": Range(0.0, 1.0, False, _OFF),
    "train_gemm_plateau": Range(0.0, 1.0, False, _OFF),
    "train_gemm_plateau_8bit": Range(0.0, 1.0, False, _OFF),
    "train_gemm_sustained": Range(MIN_SHARE, 1.0, False, _SHARE),
    "train_attention_efficiency": Range(0.0, 1.0, False, _OFF),
    "tp_overlap": Range(0.0, 1.0, False, _OFF),
    "train_link": Range(0.0, 1.0, False, _OFF),
    "attention_bandwidth": Range(0.0, 1.0, False, _OFF),
    "attention_lanes": Range(0.0, 1024.0, False, "a vector lane width (0: no padding)"),
}


def factor_problem(name: str, value) -> str | None:
    """Why ``value`` cannot be efficiency factor ``name`` (None when it can): not a number, not finite, or outside
    its range in :data:`FACTOR_RANGES`."""
    import math

    r = FACTOR_RANGES.get(name)
    if r is None:
        return f"is not a known factor (known: {', '.join(sorted(FACTOR_RANGES))})"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number ({r.what}, in {r.describe()})"
    v = float(value)
    if not math.isfinite(v) or v < r.lo or v > r.hi or (r.lo_open and v == r.lo):
        return f"is {r.what}: it must lie in {r.describe()}"
    return None


IDEAL = Efficiency(flop_max=1.0, gemm_half_dim=0.0, low_precision_flop_factor=1.0, fp4_flop_factor=1.0, bandwidth=1.0,
                   quant_bandwidth=1.0, overlap_p=float("inf"), kernel_overhead_s=0.0, step_overhead_s=0.0,
                   collective_latency_s=0.0, link=1.0, train_elementwise_bytes=0.0, dp_overlap=1.0, ep_overlap=1.0,
                   gemv_efficiency=0.0, dequant_ops_per_weight=0.0, layer_latency_s=0.0, hop_latency_s=0.0,
                   grouped_gemm_tile=0.0, grouped_gemm_tile_min=0.0, grouped_gemm_efficiency=1.0, grouped_gemm_half_dim=0.0,
                   train_gemm_plateau=0.0, train_gemm_plateau_8bit=0.0, train_gemm_sustained=1.0,
                   train_attention_efficiency=0.0, tp_overlap=1.0,
                   train_link=0.0)


def math_share(eff: Efficiency, low_precision=False, fp4=False) -> float:
    """The large-GEMM share of peak of a tensor-math format (items 1 and 2 of the module doc)."""
    return eff.flop_max * (eff.low_precision_flop_factor if low_precision else 1.0) * (eff.fp4_flop_factor if fp4
                                                                                       else 1.0)


def expert_half_dim(eff: Efficiency, fp4=False) -> float:
    """The fine-grained-expert curve's c (``grouped_gemm_half_dim``; a grouped GEMM runs at w/(w + c) of its
    shape's efficiency, w the expert's FFN width): the curve's extra time, flop·c/(peak·g·w), is work around the
    experts per token copy (docs/roofline.md), not the GEMM's, so under FP4 math c scales with
    ``fp4_flop_factor``: FP4 slows the GEMM only."""
    return eff.grouped_gemm_half_dim * (eff.fp4_flop_factor if fp4 else 1.0)


def gemm_efficiency(eff: Efficiency, m, n, k, low_precision=False, fp4=False):
    """Fraction of peak dense FLOP/s a GEMM of shape m×n×k reaches (item 1 and 2 of the module doc)."""
    import numpy as np

    h = eff.gemm_half_dim
    scale = math_share(eff, low_precision, fp4)
    if not h > 0:
        return scale * np.ones_like(np.asarray(m, dtype=np.float64))
    e = None
    for x in (m, n, k):
        x = np.asarray(x, dtype=np.float64)
        f = x / (x + h)
        e = f if e is None else e * f
    return e * scale


_NORMAL_MIN = 2.2250738585072014e-308  # smallest normal float64
_FINITE_MAX = 1.7976931348623157e308


def _hypot(a, b):
    """np.hypot(a, b) as sqrt(a² + b²) — libm's hypot is several times slower — and hypot itself wherever a² + b²
    leaves the normal range (underflow, overflow, zeros, NaN), so the result is hypot's to an ulp or two."""
    import numpy as np

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    with np.errstate(over="ignore", under="ignore"):  # those points are hypot's below
        s = a * a + b * b
    r = np.sqrt(s)
    if np.ndim(r) == 0:
        return r[()] if _NORMAL_MIN <= s <= _FINITE_MAX else np.hypot(a, b)
    if r.size and not (_NORMAL_MIN <= s.min() and s.max() <= _FINITE_MAX):
        bad = ~((s >= _NORMAL_MIN) & (s <= _FINITE_MAX))
        ab, bb = np.broadcast_arrays(a, b)
        r[bad] = np.hypot(ab[bad], bb[bad])
    return r


def combine(t_compute, t_memory, p: float):
    """Kernel time from its compute and memory times: the p-norm (p = inf is the ideal roofline max).

    Computed as ``hi · (1 + (lo/hi)^p)^(1/p)`` with hi, lo the larger and smaller time: (lo/hi)^p lies in [0, 1]
    (at worst it underflows to 0, which is what it is worth), so the result lies between max() and 2^(1/p)·max()
    and never overflows or vanishes, whatever p >= 1 and however large or small the times (t^p itself would
    overflow for t = 1e3 s and p = 103, and underflow to a zero time for t = 1 µs and p = 60)."""
    import numpy as np

    if not np.isfinite(p):
        return np.maximum(t_compute, t_memory)
    if p == 2.0:
        return _hypot(t_compute, t_memory)
    if p == 1.0:
        return t_compute + t_memory
    a = np.asarray(t_compute, dtype=np.float64)
    b = np.asarray(t_memory, dtype=np.float64)
    hi, lo = np.maximum(a, b), np.minimum(a, b)
    with np.errstate(under="ignore"):
        ratio = np.divide(lo, hi, out=np.zeros(np.broadcast(lo, hi).shape), where=hi > 0)
        out = hi * (1.0 + ratio**p) ** (1.0 / p)
    return out[()] if np.ndim(out) == 0 else out
