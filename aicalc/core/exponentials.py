"""The softmax's exponentials: a fused attention kernel computes one exponential per score element on the GPU's
special-function units (MUFU.EX2) while its tensor cores compute the score and value products, the two
overlapped (FlashAttention-3/-4's ping-pong schedules), so its compute time is the longer of the two. The one
home of the exponential rate, for inference (:func:`aicalc.core.pricing.op_times`) and training
(:func:`aicalc.core.train_time.exp_bound`) alike.

Per score element the tensor cores do ``2·(d_qk + d_v)`` FLOPs (the score and the value products), so the
exponentials outlast the matmuls by ``r = peak / (exp_per_s · 2·(d_qk + d_v))`` (:func:`exp_ratio`). A head_dim
128 forward on a B200 sits at r = 0.94 (FlashAttention-4's "feeds and speeds": a 128 x 128 tile's MMA and its
exponentials take the same 1,024 cycles), gpt-oss's head_dim 64 at 1.9; Hopper at 0.46 (head_dim 128) to 0.92
(64); Blackwell Ultra, with twice the SFU rate, at half of Blackwell's.
"""

# Exponentials per second of a GPU's special-function units (MUFU.EX2, the softmax's exp) as a share of its
# listed fp32 FLOP/s, per generation (the chip preset's ``generation``): 16 per SM and clock (CUDA C++
# Programming Guide, "Arithmetic Instructions" throughput table: exp2f 16 results per clock per SM on every listed
# compute capability) against the fp32 FMA lanes' 2 FLOP each. A generation without an entry has no exponential
# bound (its attention is priced by its tensor rate alone).
SFU_SHARE = {
    "Ampere": {"share": 1.0 / 8.0, "source": "A100 (sm_80): 64 fp32 lanes per SM (128 FLOP per clock) and 16 MUFU "
                                             "exponentials per clock per SM (CUDA C++ Programming Guide throughput table)"},
    "Hopper": {"share": 1.0 / 16.0, "source": "H100/H200 (sm_90): 128 fp32 lanes per SM (256 FLOP per clock) and 16 MUFU "
                                              "exponentials per clock per SM (CUDA C++ Programming Guide throughput table)"},
    "Blackwell": {"share": 1.0 / 16.0,
                  "source": "B200/GB200 (sm_100): the SFU count and its 16 exponentials per clock per SM unchanged from "
                            "H100 while the BF16 tensor rate grew 2.25x (FlashAttention-4, Zadouri et al. 2026; "
                            "https://www.together.ai/blog/flashattention-4: 'both the SFU count and shared memory "
                            "bandwidth remains unchanged'), 128 fp32 lanes per SM"},
    "Blackwell Ultra": {"share": 1.0 / 8.0,
                        "source": "B300/GB300 (sm_103): 'Blackwell Ultra alleviates this bottleneck by doubling SFU "
                                  "throughput over the standard NVIDIA Blackwell architecture' (MUFU.EX2; NVIDIA "
                                  "technical blog 'Making Softmax More Efficient with NVIDIA Blackwell Ultra', "
                                  "https://developer.nvidia.com/blog/making-softmax-more-efficient-with-nvidia-blackwell-ultra/)"},
}


def exp_per_s(kind: str, generation: str | None, fp32_flop_per_s: float | None) -> float:
    """Exponentials per second of a chip's special-function units: its fp32 FLOP/s times its generation's
    :data:`SFU_SHARE`; 0 where it is not known (no GPU, a generation without an entry, no fp32 figure)."""
    sfu = SFU_SHARE.get(generation or "") if kind == "gpu" else None
    return (fp32_flop_per_s or 0.0) * sfu["share"] if sfu else 0.0


def flop_per_exp(qk_dim: float, v_dim: float) -> float:
    """Tensor FLOPs of a fused attention's forward per exponential: one score element's products, 2·d_qk for its
    score and 2·d_v for its share of the value product (Korthikanti et al. 2022's 2·B·A·d·keys each)."""
    return 2.0 * (qk_dim + v_dim)


def exp_ratio(peak_flop_per_s: float, exps_per_s: float, flops_per_exp: float) -> float:
    """r: the time of a fused attention's exponentials over the time of its matmuls, both at the same share of
    their peaks, ``peak / (exps_per_s · flops_per_exp)``; 0 where the exponential rate is not known (no bound)."""
    if not exps_per_s > 0 or not flops_per_exp > 0:
        return 0.0
    return peak_flop_per_s / (exps_per_s * flops_per_exp)
