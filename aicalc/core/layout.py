"""Checks that a parallel layout can split the model, and what each device then holds."""

from __future__ import annotations

from aicalc.catalog.arch import Arch
from aicalc.errors import AicalcError


def check_tp(arch: Arch, tp: int) -> None:
    """Megatron-style tensor parallelism splits attention heads and FFN columns over ``tp`` devices.

    Query heads must divide evenly; kv heads either divide (each device holds K/tp) or, when
    tp > K, each kv head is replicated on tp/K devices (vLLM, IM-08), which needs tp % K == 0.
    """
    if tp < 1:
        raise AicalcError(f"--tp must be at least 1, got {tp}")
    if arch.heads % tp:
        raise AicalcError(f"--tp {tp} does not divide the {arch.heads} attention heads")
    if arch.mla is None and arch.kv_heads % tp and tp % arch.kv_heads:
        raise AicalcError(f"--tp {tp} neither divides the {arch.kv_heads} kv heads nor is a multiple of them")


def kv_heads_per_device(arch: Arch, tp):
    """K/tp, or 1 when heads are replicated (tp > K); MLA keeps one latent, replicated per device.

    ``tp`` may be an int or a numpy array of TP degrees (the result then is an array too)."""
    if arch.mla is not None:
        return 1
    if isinstance(tp, int):
        return max(1, arch.kv_heads // tp)
    import numpy as np

    return np.maximum(1, arch.kv_heads // np.asarray(tp))
