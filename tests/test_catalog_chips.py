"""Chip and node preset catalog: schema validity, contract ids, and agreement with the reference data.

The reference comparison reads ``../shared/reference/chips.yaml`` (next to the repository) and is skipped
when that file is absent. Its ids differ from the public preset ids, hence the explicit mapping below.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from aicalc.catalog.schema import Chip, Node

REPO_ROOT = Path(__file__).resolve().parents[1]
CHIPS_DIR = REPO_ROOT / "presets" / "chips"
NODES_DIR = REPO_ROOT / "presets" / "nodes"
REFERENCE_CHIPS = Path(__file__).resolve().parents[2] / "shared" / "reference" / "chips.yaml"

CONTRACT_CHIP_IDS = (
    "h100-sxm",
    "h100-pcie",
    "h200",
    "b200",
    "a100-40gb",
    "a100-80gb",
    "l40s",
    "l4",
    "rtx-4090",
    "v100",
    "mi300x",
    "tpu-v4",
    "tpu-v5e",
    "tpu-v5p",
    "tpu-v6e",
    "gaudi3",
    "groq-lpu",
    "cerebras-wse3",
    "apple-m2-ultra",
    "apple-m4-max",
    "apple-neural-engine",
    "qualcomm-hexagon",
)
CONTRACT_NODE_IDS = ("dgx-h100", "dgx-b200")

# preset id -> id in reference/chips.yaml (None: the chip is not in the reference).
REFERENCE_IDS: dict[str, str | None] = {
    "h100-sxm": "h100-sxm5",
    "h100-pcie": "h100-pcie",
    "h100-nvl": "h100-nvl",
    "h200": "h200-sxm",
    "b200": "b200",
    "gb200": "gb200",
    "a100-40gb": "a100-sxm4-40gb",
    "a100-80gb": "a100-sxm4-80gb",
    "l4": "l4",
    "l40s": "l40s",
    "rtx-4090": "rtx-4090",
    "v100": "v100-sxm2",
    "mi300x": "mi300x",
    "mi325x": "mi325x",
    "tpu-v4": "tpu-v4",
    "tpu-v5e": "tpu-v5e",
    "tpu-v5p": "tpu-v5p",
    "tpu-v6e": "tpu-v6e",
    "gaudi3": "gaudi-3",
    "groq-lpu": "groq-lpu",
    "cerebras-wse3": "cerebras-wse-3",
    "trainium2": "trainium2",
    "inferentia2": "inferentia2",
    "apple-m3-max": "apple-m3-max",
    "apple-m4-max": "apple-m4-max",
    "qualcomm-hexagon": "snapdragon-x-elite-npu",
    "apple-m2-ultra": None,
    "apple-m3-ultra": None,
    "apple-neural-engine": None,
    "h100-hbm2e": None,
    "b300": None,
    "gb300": None,
    "mi350x": None,
    "mi355x": None,
    "tpu7x": None,
    "h800": None,
    "h20": None,
    "rtx-pro-6000": None,
    "rtx-5090": None,
    "a10g": None,
}
# Where the reference stores a dtype under another key: preset id -> {preset dtype: reference key}.
REFERENCE_DTYPE_KEYS: dict[str, dict[str, str]] = {
    "qualcomm-hexagon": {"int8": "npu_int8_tops"},
}
COMPARED_DTYPES = ("bf16", "fp16", "fp8", "int8")
# Chips whose memory is on-chip SRAM, sized in decimal units as the vendor prints it. All others hold
# HBM/GDDR/LPDDR labelled "GB" by the vendor but binary-sized in practice (specs.md pitfall 6).
SRAM_ONLY = {"groq-lpu", "cerebras-wse3"}


def _files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.yaml"))


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _chips() -> dict[str, Chip]:
    return {p.stem: Chip.model_validate(_load(p)) for p in _files(CHIPS_DIR)}


CHIP_FILES = _files(CHIPS_DIR)
NODE_FILES = _files(NODES_DIR)


def _header_lines(path: Path) -> int:
    n = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        n += 1
    return n


@pytest.mark.parametrize("path", CHIP_FILES + NODE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_file_has_header_comment(path: Path) -> None:
    assert 3 <= _header_lines(path) <= 8, "each preset starts with a 3-8 line comment block"


@pytest.mark.parametrize("path", CHIP_FILES, ids=lambda p: p.name)
def test_chip_file_validates(path: Path) -> None:
    raw = _load(path)
    chip = Chip.model_validate(raw)
    assert chip.id == path.stem, "file name must equal the id"
    assert chip.source.startswith("https://")
    assert chip.notes, "every chip carries notes"
    assert chip.dense_tflops, "at least one dense throughput figure"
    assert chip.memory_bytes > 0 and chip.memory_bandwidth_gbs > 0
    assert (chip.price_per_hour_usd is None) == (chip.price_source is None), "a price needs its price_source"
    for dtype, sparse in chip.sparse_tflops.items():
        if dtype in chip.dense_tflops:
            assert sparse > chip.dense_tflops[dtype], f"sparse {dtype} should exceed dense"
    if chip.interconnect is not None and chip.interconnect.bandwidth_gbs is not None:
        assert "direction" in raw["interconnect"], "state the direction explicitly when a bandwidth is given"
    if chip.id in SRAM_ONLY:
        assert chip.sram is not None and int(chip.sram) == chip.memory_bytes
        assert chip.sram_bandwidth_gbs == chip.memory_bandwidth_gbs


@pytest.mark.parametrize("path", NODE_FILES, ids=lambda p: p.name)
def test_node_file_validates(path: Path) -> None:
    raw = _load(path)
    node = Node.model_validate(raw)
    assert node.id == path.stem, "file name must equal the id"
    assert node.source.startswith("https://")
    assert node.chip in _chips(), f"node {node.id} names unknown chip {node.chip}"
    assert (node.price_per_hour_usd is None) == (node.price_source is None)
    if node.interconnect is not None and node.interconnect.bandwidth_gbs is not None:
        assert "direction" in raw["interconnect"]


def test_contract_ids_exist() -> None:
    chips = {p.stem for p in CHIP_FILES}
    nodes = {p.stem for p in NODE_FILES}
    assert not set(CONTRACT_CHIP_IDS) - chips, "missing contract chip presets"
    assert not set(CONTRACT_NODE_IDS) - nodes, "missing contract node presets"


def test_contract_nodes() -> None:
    nodes = {p.stem: Node.model_validate(_load(p)) for p in NODE_FILES}
    assert (nodes["dgx-h100"].chip, nodes["dgx-h100"].count) == ("h100-sxm", 8)
    assert (nodes["dgx-b200"].chip, nodes["dgx-b200"].count) == ("b200", 8)


def test_every_preset_has_a_reference_mapping() -> None:
    assert not {p.stem for p in CHIP_FILES} - set(REFERENCE_IDS), "add new chips to REFERENCE_IDS"


@pytest.fixture(scope="module")
def reference() -> dict[str, dict]:
    if not REFERENCE_CHIPS.is_file():
        pytest.skip(f"reference data not found: {REFERENCE_CHIPS}")
    data = yaml.safe_load(REFERENCE_CHIPS.read_text(encoding="utf-8"))
    return {entry["id"]: entry for entry in data["chips"]}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9)


@pytest.mark.parametrize("chip_id", sorted(k for k, v in REFERENCE_IDS.items() if v is not None))
def test_matches_reference(chip_id: str, reference: dict[str, dict]) -> None:
    path = CHIPS_DIR / f"{chip_id}.yaml"
    assert path.is_file(), f"mapped preset {chip_id} has no file"
    chip = Chip.model_validate(_load(path))
    ref_id = REFERENCE_IDS[chip_id]
    assert ref_id in reference, f"reference id {ref_id} not in chips.yaml"
    ref = reference[ref_id]

    ref_dense = ref.get("dense_tflops") or {}
    aliases = REFERENCE_DTYPE_KEYS.get(chip_id, {})
    for dtype in COMPARED_DTYPES:
        key = aliases.get(dtype, dtype)
        if key not in ref_dense:
            continue  # the reference says nothing about this dtype
        expected = ref_dense[key]
        got = chip.dense_tflops.get(dtype)
        if expected is None:
            assert got is None, f"{chip_id}: reference has no {dtype}, preset says {got}"
        else:
            assert got is not None and _close(got, expected), f"{chip_id} dense {dtype}: {got} != {expected}"

    mem = ref["memory"]
    assert _close(chip.memory_bandwidth_gbs, mem["bandwidth_gbs"]), (
        f"{chip_id} bandwidth: {chip.memory_bandwidth_gbs} != {mem['bandwidth_gbs']}"
    )
    unit = 10**9 if chip_id in SRAM_ONLY else 2**30
    expected_bytes = mem["capacity_gb"] * unit
    assert _close(int(chip.memory), expected_bytes), (
        f"{chip_id} memory: {chip.memory_bytes} B != {mem['capacity_gb']} x {unit} B"
    )


def test_usable_memory_is_what_estimates_budget():
    """The H100's and H200's measured totals (torch.cuda.mem_get_info on the lent machines) are below their labels,
    and fits is judged against them: a step reserving 79.5 GiB fits the 80 GiB label but not the 79.18 GiB CUDA
    reports (Gemma-2-2B, batch 4 × 1024, eager, AMP: measured to reserve 82.1 GiB on an H200, an OOM on 80 GB)."""
    import aicalc
    from aicalc.api.catalog import load_chip

    h100, h200 = load_chip("h100-sxm"), load_chip("h200")
    assert h100.usable_memory_bytes == 85_017_493_504 < h100.memory_bytes == 80 * 2**30
    assert h200.usable_memory_bytes == 150_109_880_320 < h200.memory_bytes
    gemma = {"model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
             "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 256000,
             "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "query_pre_attn_scalar": 256,
             "sliding_window": 4096, "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 8192,
             "tie_word_embeddings": True}
    r = aicalc.train_memory(gemma, batch=4, seq=1024, attention="eager", precision="bf16-mixed", chip="h100-sxm")
    reserved = float(r["peak_reserved_bytes"][0])
    assert h100.usable_memory_bytes < reserved < h100.memory_bytes
    assert not bool(r["fits"][0])
