"""Hostile efficiency profiles (presets/classes, presets/engines, presets/frameworks in a user --presets-dir) and
hostile efficiency factors (--eff): each is refused with one line naming the file and the key (exit 2), never an
internal error (exit 3) or an absurd accepted number (docs/robustness.md)."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from test_robustness import assert_sane, run

from aicalc.catalog import profiles
from aicalc.core.efficiency import FACTOR_RANGES, IDEAL, Efficiency, combine, factor_problem
from aicalc.errors import ParameterError

H100 = Path(__file__).resolve().parents[1] / "presets" / "chips" / "h100-sxm.yaml"


def write(root: Path, kind: str, pid: str, body: str) -> Path:
    """A profile file ``root/<kind folder>/<pid>.yaml`` holding ``id``, ``name`` and ``body``."""
    folder = root / profiles.KINDS[kind]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{pid}.yaml"
    path.write_text(f"id: {pid}\nname: {pid}\n{body}\n")
    return path


def chip_of_class(root: Path, cls: str) -> str:
    """A user chip preset (the H100's figures) whose efficiency_class is ``cls``."""
    (root / "chips").mkdir(parents=True, exist_ok=True)
    text = H100.read_text().replace("id: h100-sxm", "id: my-chip", 1)
    assert "id: my-chip" in text
    (root / "chips" / "my-chip.yaml").write_text(text + f"\nefficiency_class: {cls}\n")
    return "my-chip"


def refused(r, *words: str) -> str:
    """Exit 2 with exactly one ``aicalc: error:`` line that names each of ``words``; nothing on stdout."""
    assert_sane(r)
    assert r.code == 2, r
    assert r.out == "", r
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aicalc: error: "), r
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# --- extends: loops and chains ----------------------------------------------------------------------------------

def test_class_loop_through_chip_efficiency_class(tmp_path):
    write(tmp_path, "class", "loop-a", "extends: loop-b\nfactors: {}")
    write(tmp_path, "class", "loop-b", "extends: loop-a\nfactors: {}")
    chip = chip_of_class(tmp_path, "loop-a")
    for argv in (["roofline", "llama-3.1-8b", "--chip", chip], ["serve", "llama-3.1-8b", "--chip", chip],
                 ["train-time", "llama-3.1-8b", "--chip", chip, "--chips", "8"]):
        line = refused(run("--presets-dir", tmp_path, *argv), "loop-b.yaml", "'extends'", "loop")
        assert "loop-a → loop-b → loop-a" in line


@pytest.mark.parametrize("kind,argv", [
    ("class", None),
    ("engine", ["roofline", "llama-3.1-8b", "--engine", "me"]),
    ("framework", ["train-time", "llama-3.1-8b", "--framework", "me", "--chips", "8"]),
])
def test_profile_that_extends_itself(tmp_path, kind, argv):
    write(tmp_path, kind, "me", "extends: me\nfactors: {}")
    if argv is None:
        argv = ["roofline", "llama-3.1-8b", "--chip", chip_of_class(tmp_path, "me")]
    refused(run("--presets-dir", tmp_path, *argv), "me.yaml", "'extends'", "me → me")


def test_loop_behind_a_valid_profile(tmp_path):
    """The loop is two steps away from the profile asked for (x → a → b → a)."""
    write(tmp_path, "engine", "x", "extends: a\nfactors: {}")
    write(tmp_path, "engine", "a", "extends: b\nfactors: {}")
    write(tmp_path, "engine", "b", "extends: a\nfactors: {}")
    refused(run("--presets-dir", tmp_path, "serve", "llama-3.1-8b", "--engine", "x"), "b.yaml", "a → b → a")


def test_long_extends_chain_is_bounded(tmp_path):
    n = profiles.MAX_EXTENDS + 4
    for i in range(n):
        write(tmp_path, "engine", f"e{i}", f"extends: e{i + 1}\nfactors: {{}}" if i + 1 < n else "factors: {}")
    refused(run("--presets-dir", tmp_path, "roofline", "llama-3.1-8b", "--engine", "e0"), "'extends'",
            str(profiles.MAX_EXTENDS))
    # a chain within the bound composes: the base's option reaches the top
    m = profiles.MAX_EXTENDS
    for i in range(m):
        write(tmp_path, "engine", f"ok{i}", f"extends: ok{i + 1}\nfactors: {{}}" if i + 1 < m else
              "max_num_seqs: 3\nfactors: {}")
    r = run("--presets-dir", tmp_path, "serve", "llama-3.1-8b", "--engine", "ok0", "--concurrency", "max", "--json")
    assert_sane(r)
    assert r.code == 0, r
    assert all(row["concurrency"] <= 3 for row in json.loads(r.out)["rows"])


@pytest.mark.parametrize("value", ["nope-nope", "'Bad Id!'", "[datacenter-gpu]", "5"])
def test_extends_a_missing_or_malformed_profile(tmp_path, value):
    write(tmp_path, "class", "c", f"extends: {value}\nfactors: {{}}")
    chip = chip_of_class(tmp_path, "c")
    refused(run("--presets-dir", tmp_path, "roofline", "llama-3.1-8b", "--chip", chip), "c.yaml", "'extends'")


# --- engine options -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["abc", ".inf", ".nan", "[1]", "-5", "0", "true", "1.5", "{a: 1}", "1000000000",
                                   "''"])
def test_engine_max_num_seqs_of_the_wrong_type_or_range(tmp_path, value):
    write(tmp_path, "engine", "x", f"factors: {{}}\nmax_num_seqs: {value}")
    r = run("--presets-dir", tmp_path, "serve", "llama-3.1-8b", "--engine", "x", "--concurrency", "max")
    refused(r, "x.yaml", "max_num_seqs")


@pytest.mark.parametrize("body,key", [
    ("factors: [1, 2]", "factors"),
    ("factors: 5", "factors"),
    ("factors: {bandwidth: 0.5}", "bandwidth"),
    ("factors: {bandwidth: {value: 0.5}}", "bandwidth"),
    ("factors: {bandwidth: {value: 0.5, source: [x]}}", "bandwidth"),
    ("factors: {bandwidth: {value: 0.5, source: x, note: y}}", "note"),
    ("factors: {not_a_factor: {value: 0.5, source: x}}", "not_a_factor"),
    ("factors: {}\nby_class: [1]", "by_class"),
    ("factors: {}\nby_class: 5", "by_class"),
    ("factors: {}\nby_class: {datacenter-gpu: 5}", "by_class.datacenter-gpu"),
    ("factors: {}\nby_class: {datacenter-gpu: [1]}", "by_class.datacenter-gpu"),
    ("factors: {}\nby_class: {datacenter-gpu: {factors: [1]}}", "by_class.datacenter-gpu.factors"),
    ("factors: {}\nby_class: {datacenter-gpu: {bandwidth: 0.5}}", "bandwidth"),
    ("factors: {}\nby_class: {datacentre-gpu: {factors: {}}}", "datacentre-gpu"),
    ("factors: {}\nby_class: {datacenter-gpu: {factors: {bandwidth: {value: 5, source: x}}}}", "bandwidth"),
    ("factors: {}\ngguf_compute: int8\ngguf_compute_vendors: 5", "gguf_compute_vendors"),
    ("factors: {}\ngguf_compute: int8\ngguf_compute_vendors: NVIDIA", "gguf_compute_vendors"),
    ("factors: {}\ngguf_compute: int8\ngguf_compute_vendors: [5]", "gguf_compute_vendors"),
    ("factors: {}\ngguf_compute: int8\ngguf_compute_vendors: [{a: 1}]", "gguf_compute_vendors"),
    ("factors: {}\ngguf_compute: [int8]\ngguf_compute_vendors: [NVIDIA]", "gguf_compute"),
    ("factors: {}\ngguf_compute: int9\ngguf_compute_vendors: [NVIDIA]", "gguf_compute"),
    ("factors: {}\ngguf_compute: 8\ngguf_compute_vendors: [NVIDIA]", "gguf_compute"),
    ("factors: {}\nkv_shared: 'yes please'", "kv_shared"),
    ("factors: {}\nkv_shared: 1", "kv_shared"),
    ("factors: {}\nmax_num_seqs: 8\nmax_num_seqs_source: [x]", "max_num_seqs_source"),
    ("factors: {}\nmax_num_seq: 8", "max_num_seq"),  # a typo is refused, not ignored
    ("factors: {}\nmax_num_seqs_by_chip: [{min_memory_gib: 70, value: 8, kind_excludes: tpu}]", "kind_excludes"),
    ("factors: {}\nmax_num_seqs_by_chip: [{min_memory_gib: 70, value: 8, kind_excludes: [gpus]}]", "kind_excludes"),
    ("factors: {}\nmax_num_seqs_by_chip: [{min_memory_gib: 70, value: 8, kind_excludes: []}]", "kind_excludes"),
    ("factors: {}\nmax_num_seqs_by_chip: [{min_memory_gib: 70, value: 8, kind_excludes: [.nan]}]", "kind_excludes"),
    ("factors: {}\nmax_num_batched_tokens_by_chip: [{min_memory_gib: 0, value: 8, kind_excludes: [{a: 1}]}]",
     "kind_excludes"),
    ("factors: {}\nmax_num_seqs_by_chip: [{min_memory_gib: 70, value: 8, kinds: [tpu]}]", "max_num_seqs_by_chip"),
    ("factors: {}\ndefault_zero: 1", "default_zero"),  # a framework's option
    ("factors: {}\npipeline_over_chips: true", "pipeline_over_chips"),  # a class's option
    ("factors: {}\nname: [x]", "name"),
    ("factors: {}\ndescription: {a: 1}", "description"),
])
def test_engine_profile_of_the_wrong_shape(tmp_path, body, key):
    text = f"id: x\n{body}\n" if "name:" in body else f"id: x\nname: x\n{body}\n"
    (tmp_path / "engines").mkdir()
    (tmp_path / "engines" / "x.yaml").write_text(text)
    for argv in (["roofline", "llama-3.1-8b", "--engine", "x", "--dtype", "q4_0"],
                 ["serve", "llama-3.1-8b", "--engine", "x", "--concurrency", "max"]):
        refused(run("--presets-dir", tmp_path, *argv), "x.yaml", key)


@pytest.mark.parametrize("value", ["abc", "4", "-1", "1.0", "true", "[1]", ".nan", ".inf"])
def test_framework_default_zero_of_the_wrong_type_or_range(tmp_path, value):
    write(tmp_path, "framework", "f", f"factors: {{}}\ndefault_zero: {value}")
    r = run("--presets-dir", tmp_path, "train-time", "llama-3.1-8b", "--framework", "f", "--chips", "8")
    refused(r, "f.yaml", "default_zero")


@pytest.mark.parametrize("value", ["selective-ops", "Full", "1", "true", "[full]"])
def test_framework_default_recompute_of_the_wrong_value(tmp_path, value):
    write(tmp_path, "framework", "f", f"factors: {{}}\ndefault_recompute: {value}")
    r = run("--presets-dir", tmp_path, "train-time", "llama-3.1-8b", "--framework", "f", "--chips", "8")
    refused(r, "f.yaml", "default_recompute")


@pytest.mark.parametrize("body,key", [
    ("factors: {}\npipeline_over_chips: 'no'", "pipeline_over_chips"),
    ("factors: {}\nmax_num_seqs: 8", "max_num_seqs"),  # an engine's option
    ("factors: {}\nby_class: {}", "by_class"),
])
def test_class_profile_options(tmp_path, body, key):
    write(tmp_path, "class", "c", body)
    chip = chip_of_class(tmp_path, "c")
    refused(run("--presets-dir", tmp_path, "roofline", "llama-3.1-8b", "--chip", chip), "c.yaml", key)


def test_valid_user_profiles_are_used(tmp_path):
    """Every option in its range: accepted, and it takes effect."""
    write(tmp_path, "class", "c", "extends: datacenter-gpu\npipeline_over_chips: false\n"
          "factors: {bandwidth: {value: 0.5, source: mine}}")
    write(tmp_path, "engine", "x", "extends: vllm\nkv_shared: true\nmax_num_seqs: 4\nmax_num_seqs_source: mine\n"
          "gguf_compute: int8\ngguf_compute_vendors: [NVIDIA]\n"
          "by_class: {c: {factors: {quant_bandwidth: {value: 0.5, source: mine}}}}\n"
          "factors: {kernel_overhead_s: {value: 1.0e-5, source: mine}}")
    write(tmp_path, "framework", "f", "extends: fsdp\ndefault_zero: 2\nfactors: {}")
    chip = chip_of_class(tmp_path, "c")
    r = run("--presets-dir", tmp_path, "serve", "llama-3.1-8b", "--chip", chip, "--engine", "x", "--concurrency",
            "max", "--json")
    assert_sane(r)
    assert r.code == 0, r
    rows = json.loads(r.out)["rows"]
    assert rows and all(row["concurrency"] <= 4 for row in rows)
    r = run("--presets-dir", tmp_path, "roofline", "llama-3.1-8b", "--chip", chip, "--engine", "x", "--dtype",
            "q4_0", "--json")
    assert_sane(r)
    assert r.code == 0, r
    sources = " ".join(json.loads(r.out)["inputs"]["efficiency_sources"])
    assert "bandwidth = 0.5" in sources and "quant_bandwidth = 0.5" in sources and "kernel_overhead_s = 1e-05" in sources
    r = run("--presets-dir", tmp_path, "train-time", "llama-3.1-8b", "--chip", chip, "--framework", "f", "--chips",
            "8", "--json")
    assert_sane(r)
    assert r.code == 0, r


def test_profiles_are_read_per_presets_dir(tmp_path):
    """In one process, a second --presets-dir with a profile of the same id reads its own file (no stale cache)."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    write(good, "engine", "x", "factors: {}\nmax_num_seqs: 4")
    write(bad, "engine", "x", "factors: {}\nmax_num_seqs: abc")
    argv = ["serve", "llama-3.1-8b", "--engine", "x", "--concurrency", "max"]
    assert run("--presets-dir", good, *argv).code == 0
    refused(run("--presets-dir", bad, *argv), "max_num_seqs")
    assert run("--presets-dir", good, *argv).code == 0


# --- factor ranges: one table for profile files and --eff --------------------------------------------------------

def test_every_factor_has_a_range_and_the_defaults_lie_in_it():
    assert set(FACTOR_RANGES) == set(Efficiency._fields)
    for name, value in Efficiency().as_dict().items():
        assert factor_problem(name, value) is None, (name, value)
    for name, r in FACTOR_RANGES.items():
        assert math.isfinite(r.lo) and math.isfinite(r.hi) and 0 <= r.lo < r.hi, name
    assert FACTOR_RANGES["overlap_p"].hi <= 64  # combine() stays exact to max() within 2^(1/p)


def _outside(name: str) -> list[float]:
    r = FACTOR_RANGES[name]
    out = [r.hi * 2 + 1, 1e300, float("nan"), float("inf"), -1.0]
    if r.lo_open:
        out.append(r.lo)
    elif r.lo > 0:
        out.append(r.lo / 2)
    return out


@pytest.mark.parametrize("name", sorted(FACTOR_RANGES))
def test_factor_ranges_hold_for_overrides(name):
    r = FACTOR_RANGES[name]
    inside = [r.hi, (r.lo + r.hi) / 2] + ([] if r.lo_open else [r.lo])
    for v in inside:
        assert getattr(Efficiency().with_overrides({name: v}), name) == v
    for v in _outside(name):
        with pytest.raises(ParameterError):
            Efficiency().with_overrides({name: v})
    for v in ("0.5", None, True, [0.5]):
        with pytest.raises(ParameterError):
            Efficiency().with_overrides({name: v})


@pytest.mark.parametrize("name", sorted(FACTOR_RANGES))
def test_factor_ranges_hold_for_profile_files_and_eff(tmp_path, name):
    r = FACTOR_RANGES[name]
    write(tmp_path, "engine", "x", f"factors: {{{name}: {{value: {r.hi * 2 + 1!r}, source: x}}}}")
    refused(run("--presets-dir", tmp_path, "roofline", "llama-3.1-8b", "--engine", "x"), "x.yaml", name)
    refused(run("roofline", "llama-3.1-8b", "--eff", f"{name}={r.hi * 2 + 1!r}"), "--eff", name)


@pytest.mark.parametrize("value", ["1.0e+300", ".nan", ".inf", "-1.0", "abc", "[1]", "true"])
def test_absurd_kernel_overhead_in_a_profile(tmp_path, value):
    """kernel_overhead_s: 1e300 once gave a TPOT of a 300-digit number of years."""
    write(tmp_path, "engine", "x", f"factors: {{kernel_overhead_s: {{value: {value}, source: x}}}}")
    refused(run("--presets-dir", tmp_path, "roofline", "llama-3.1-8b", "--engine", "x"), "x.yaml",
            "kernel_overhead_s")


def test_absurd_factor_in_a_class_profile(tmp_path):
    write(tmp_path, "class", "c", "extends: datacenter-gpu\nfactors: {step_overhead_s: {value: 1.0e+300, source: x}}")
    chip = chip_of_class(tmp_path, "c")
    refused(run("--presets-dir", tmp_path, "serve", "llama-3.1-8b", "--chip", chip), "c.yaml", "step_overhead_s")


# --- overlap_p: bounded, and the overlap formula overflow-safe ------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["roofline", "llama-3.1-8b", "--eff", "overlap_p=1000", "--eff", "kernel_overhead_s=0", "--eff",
     "step_overhead_s=0"],
    ["roofline", "llama-3.1-8b", "--chip", "b200", "--eff", "overlap_p=1000", "--prompt", "1000000", "--json"],
    ["roofline", "llama-3.1-8b", "--eff", "overlap_p=0.5"],
    ["train-time", "llama-3.1-8b", "--chips", "8", "--eff", "overlap_p=65"],
])
def test_overlap_p_out_of_range_is_refused(argv):
    refused(run(*argv), "--eff", "overlap_p")


@pytest.mark.parametrize("p", ["1", "1.5", "2", "3", "17", "64"])
@pytest.mark.parametrize("extra", [
    ["--eff", "kernel_overhead_s=0", "--eff", "step_overhead_s=0"],
    ["--chip", "b200", "--prompt", "1000000"],
    ["--batch", "1,256", "--prompt", "1,8192", "--gen", "1"],
])
def test_overlap_p_in_range_gives_finite_times(p, extra):
    r = run("roofline", "llama-3.1-8b", "--eff", f"overlap_p={p}", *extra, "--json")
    assert_sane(r)
    assert r.code in (0, 1), r  # 1: some points need more than one chip (a warning), every time still printed
    for row in json.loads(r.out)["rows"]:
        for k in ("ttft_s", "tpot_s", "output_tokens_per_s"):
            assert row[k] is not None and math.isfinite(row[k]) and row[k] > 0, (k, row)


def test_combine_never_overflows_or_vanishes():
    tc = np.array([0.0, 0.0, 1e-9, 1e-7, 1.0, 1e3, 1e6, 1e-300, 1e300, 2.0])
    tm = np.array([0.0, 1e-6, 2e-9, 1e-7, 3.0, 1e3, 2e6, 1e-300, 1e300, 2.0])
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        for p in (1.0, 1.5, 2.0, 3.0, 17.0, 64.0, 1000.0, 1e6, float("inf")):
            t = np.asarray(combine(tc, tm, p))
            hi = np.maximum(tc, tm)
            assert np.all(np.isfinite(t)), p
            assert np.all(t >= hi * (1 - 1e-12)), p
            assert np.all(t <= (tc + tm) * (1 + 1e-12)), p
            assert np.all((t > 0) == (hi > 0)), p
            s = combine(1e-6, 2e-6, p)  # a scalar in, a scalar out
            assert np.ndim(s) == 0 and 2e-6 <= float(s) <= 3e-6 + 1e-18, p


@pytest.mark.parametrize("p", [1.0, 1.5, 2.0, 3.0, 8.0])
def test_combine_is_the_p_norm(p):
    rng = np.random.default_rng(0)
    tc, tm = rng.uniform(1e-6, 1e-2, 100), rng.uniform(1e-6, 1e-2, 100)
    assert np.allclose(combine(tc, tm, p), (tc**p + tm**p) ** (1 / p), rtol=1e-12, atol=0)
    assert np.allclose(combine(tc, tm, IDEAL.overlap_p), np.maximum(tc, tm))


# --- the built-in profiles --------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(profiles.KINDS))
def test_builtin_profiles_all_load(kind):
    found = profiles.ids(kind)
    assert found
    for pid in found:
        p = profiles.load(kind, pid)
        assert p.id == pid and isinstance(p.name, str)
        assert set(p.factors) == set(p.sources)
        for name, value in p.factors.items():
            assert factor_problem(name, value) is None, (pid, name, value)
        Efficiency().with_overrides(p.factors)
        for cls, (factors, sources) in p.options["by_class"].items():
            assert cls in profiles.ids("class") and set(factors) == set(sources)
            Efficiency().with_overrides(factors)
        for key, value in p.options.items():
            if key != "by_class" and not key.endswith("_source"):
                assert key in profiles.OPTIONS[kind], (pid, key)
                check = profiles.OPTIONS[kind][key]
                assert check is None or check(value) is None, (pid, key, value)


def test_builtin_options_as_the_code_reads_them():
    assert profiles.load("engine", "vllm").options["max_num_seqs"] == 256
    assert profiles.load("engine", "llama.cpp").options["gguf_compute"] == "int8"
    assert profiles.load("engine", "llama.cpp").options["gguf_compute_vendors"] == ["NVIDIA"]
    assert profiles.load("engine", "gpt-fast").options["kv_shared"] is False
    assert profiles.load("class", "sram-dataflow").options["pipeline_over_chips"] is True
    assert {f: profiles.load("framework", f).options["default_zero"] for f in profiles.ids("framework")} == \
        {"deepspeed": 1, "fsdp": 3, "megatron": 1, "megatron-26.04": 1, "torchtitan": 3}
    # torchtitan's FSDP2 MixedPrecisionPolicy reduces in fp32; a value other than fp32 / bf16 is refused
    assert profiles.load("framework", "torchtitan").options["reduce_dtype"] == "fp32"
    assert profiles.load("framework", "torchtitan").factors == profiles.load("framework", "fsdp").factors
    assert profiles.OPTIONS["framework"]["reduce_dtype"]("fp16")
    # extends: amd-gpu takes datacenter-gpu's factors and overrides two
    amd, dc = profiles.load("class", "amd-gpu"), profiles.load("class", "datacenter-gpu")
    assert amd.factors["bandwidth"] == dc.factors["bandwidth"]
    assert amd.factors["low_precision_flop_factor"] == 0.34


def test_compute_dtypes_match_the_chip_schema():
    from aicalc.catalog.schema import DTYPES

    assert profiles.COMPUTE_DTYPES == DTYPES


@pytest.mark.parametrize("argv", [
    ["roofline", "llama-3.1-8b", "--engine", "llama.cpp", "--dtype", "q4_0", "--json"],
    ["serve", "llama-3.1-8b", "--engine", "vllm", "--concurrency", "max", "--json"],
    ["roofline", "llama-3.1-8b", "--chip", "mi300x", "--engine", "vllm", "--json"],
    ["train-time", "llama-3.1-8b", "--framework", "deepspeed", "--chips", "8", "--json"],
])
def test_builtin_profiles_still_run(argv):
    r = run(*argv)
    assert_sane(r)
    assert r.code == 0, r


def test_release_date_reader_is_the_pattern():
    """profiles.is_release_date answers as the pattern it replaced, on fixed and generated texts."""
    import random
    import re

    pattern = re.compile(r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])(-[0-3][0-9])?")
    texts = ["2024-05", "2024-05-31", "1999-12-01", "2100-01", "2024-00", "2024-13", "2024-1", "2024-05-4",
             "2024-05-41", "2024/05", "2024-05-", "2024-05-31\n", " 2024-05", "２０２４-05", "2024-0５", "", "2024"]
    rng = random.Random(0)
    alphabet = "0123456789-12 x٣"
    for _ in range(20_000):
        base = list(rng.choice(["2024-05-31", "1987-11", "2009-10-09"]))
        for _ in range(rng.randint(0, 3)):
            op, i = rng.randint(0, 2), rng.randrange(len(base) + 1)
            if op == 0:
                base.insert(i, rng.choice(alphabet))
            elif base and i < len(base):
                if op == 1:
                    del base[i]
                else:
                    base[i] = rng.choice(alphabet)
        texts.append("".join(base))
    for text in texts:
        assert profiles.is_release_date(text) == bool(pattern.fullmatch(text)), text
