"""Pydantic schemas of the preset catalog: one YAML file per chip, node or model.

The YAML files live in the top-level ``presets/`` folder (``presets/chips``, ``presets/nodes``,
``presets/models``) and ship inside the wheel. Every entry names its ``source``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ByteSize, ConfigDict, Field, PositiveFloat, PositiveInt

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp6", "fp4", "int4")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)  # built on first validation


class Interconnect(_Strict):
    """Chip-to-chip link. ``bandwidth_gbs`` is decimal GB/s (1e9 B/s) as the vendor prints it."""

    name: str
    bandwidth_gbs: PositiveFloat | None = None
    direction: Literal["bidirectional", "per-direction"] = "bidirectional"
    domain: PositiveInt | None = Field(None, description="chips this scale-up link joins (NVLink 8 in a DGX/HGX, 72 "
                                       "in GB200 NVL72, a TPU pod); beyond it traffic crosses the scale-out network")

    @property
    def per_direction_bytes_per_s(self) -> float | None:
        """Bytes/s one way: vendors' NVLink/ICI totals count both directions (specs.md pitfall 7)."""
        if self.bandwidth_gbs is None:
            return None
        one_way = self.bandwidth_gbs / 2 if self.direction == "bidirectional" else self.bandwidth_gbs
        return one_way * 1e9


class Factor(_Strict):
    """One efficiency factor and where it was measured or fitted."""

    value: float = Field(ge=0, allow_inf_nan=False)
    source: str = Field(min_length=1)


class Chip(_Strict):
    """One accelerator as a single device (per GPU, not per package or board pair).

    ``dense_tflops`` holds peak dense (no 2:4 sparsity) throughput per dtype, TFLOP/s for float
    types and TOP/s for integer types. ``sparse_tflops`` keeps the vendor's sparse headline only
    for reference; no estimate uses it.
    """

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    name: str
    vendor: str
    kind: Literal["gpu", "tpu", "npu", "lpu", "wafer", "soc", "accelerator"]
    generation: str | None = None
    year: PositiveInt | None = None
    memory: ByteSize = Field(gt=0, description="capacity usable by the model: HBM/GDDR/unified, or on-chip SRAM when that is all there is")
    usable_memory: ByteSize | None = Field(None, gt=0, description="what the runtime reports as the device's total "
                                           "(CUDA's cudaMemGetInfo), less than the label by what the driver keeps; "
                                           "measured, with usable_memory_source. Every estimate uses it where given")
    usable_memory_source: str | None = None
    memory_type: str
    memory_bandwidth_gbs: PositiveFloat
    sram: ByteSize | None = Field(None, gt=0)
    sram_bandwidth_gbs: PositiveFloat | None = None
    dense_tflops: dict[Literal[DTYPES], PositiveFloat]
    sparse_tflops: dict[Literal[DTYPES], PositiveFloat] = {}
    interconnect: Interconnect | None = None
    scale_out_gbs: PositiveFloat | None = Field(None, description="network bandwidth per chip and direction across "
                                                "scale-up domains (InfiniBand/RoCE NICs, TPU DCN), decimal GB/s")
    efficiency: dict[str, Factor] = Field({}, description="measured efficiency factors of this chip (e.g. its GEMM "
                                          "ceiling), applied over its class's profile")
    default_engine: str | None = Field(None, description="presets/engines/ID.yaml: the serving stack this chip runs "
                                       "(groq on a Groq LPU, cerebras on a WSE); the engine every estimate uses when "
                                       "none is given (default: generic, the class profile as it was fitted)")
    efficiency_class: str | None = Field(None, description="presets/classes/ID.yaml: the efficiency profile of its "
                                         "class (default: from kind and vendor)")
    tdp_w: PositiveFloat | None = None
    price_per_hour_usd: PositiveFloat | None = None
    price_source: str | None = None
    source: str
    notes: list[str] = []

    def model_post_init(self, _context) -> None:
        if self.usable_memory is not None and (self.usable_memory > self.memory or not self.usable_memory_source):
            raise ValueError("usable_memory must be at most memory and come with usable_memory_source")

    @property
    def memory_bytes(self) -> int:
        return int(self.memory)

    @property
    def usable_memory_bytes(self) -> int:
        """The memory estimates budget and judge ``fits`` against: the measured usable total where the preset has
        one (``usable_memory``), else the label."""
        return int(self.usable_memory or self.memory)

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gbs * 1e9

    def peak_flop_per_s(self, dtype: str) -> float | None:
        tf = self.dense_tflops.get(dtype)
        return None if tf is None else float(round(tf * 1e12))

    @property
    def exp_per_s(self) -> float:
        """Exponentials per second of its special-function units (the softmax's exp in a fused attention kernel):
        its fp32 FLOP/s times its generation's share (:data:`aicalc.core.exponentials.SFU_SHARE`); 0 where it is
        not known."""
        from aicalc.core.exponentials import exp_per_s

        return exp_per_s(self.kind, self.generation, self.peak_flop_per_s("fp32"))


class Node(_Strict):
    """A system of several identical chips (DGX, HGX): resolves to ``count`` × ``chip``."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    name: str
    chip: str
    count: PositiveInt
    interconnect: Interconnect | None = None
    system_power_w: PositiveFloat | None = None
    price_per_hour_usd: PositiveFloat | None = None
    price_source: str | None = None
    source: str
    notes: list[str] = []


class Release(_Strict):
    """The weight precision of a model's official checkpoint, per tensor group, read from the release's
    ``quantization_config`` (and checked against its published file sizes in tests/test_release.py)."""

    dtype: str = Field(description="block linears not named below (attention, dense FFNs, shared experts)")
    experts: str | None = Field(None, description="routed experts, where the release stores them differently")
    source: str
    checkpoint_bytes: PositiveInt | None = Field(None, description="the release's published weight bytes")

    def model_post_init(self, _context) -> None:
        from aicalc.core.dtypes import WEIGHT_BITS

        for name in (self.dtype, self.experts):
            if name is not None and name not in WEIGHT_BITS:
                raise ValueError(f"release format '{name}' is not one of {', '.join(WEIGHT_BITS)}")


class ModelPreset(_Strict):
    """A model: catalogue metadata plus its Hugging Face ``config.json`` fields under ``config``.

    The architecture is always derived from ``config`` by the same importer that reads a user's
    ``config.json``, so a preset and the real file cannot disagree.
    """

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    name: str
    hf_repo: str | None = None
    official_params: str | None = Field(None, description="the vendor's nominal figure, e.g. '70B'; for display only")
    source: str
    notes: list[str] = []
    release: Release | None = Field(None, description="the official checkpoint's precision; bf16 when absent")
    config: dict[str, Any]
