"""Record the parameter counts that PyTorch/transformers report for every model preset and fixture.

For each ``presets/models/*.yaml`` (its ``config:`` mapping) and each ``tests/data/configs/*/config.json``,
this builds the transformers config with ``AutoConfig.for_model(model_type, **rest)``, instantiates
``AutoModelForCausalLM.from_config(cfg)`` on the meta device (no memory is allocated) and records
``sum(p.numel() for p in model.parameters())``: parameters only, a tied/shared tensor counted once.
A breakdown by role (embeddings, untied lm_head, decoder layers, final norm, anything else) is recorded
too, so that a mismatch with aicalc's own formulas can be traced to one part of the model. Every number
comes from torch (``numel()``); nothing here is computed by formula.

This harness deliberately does not import aicalc: it reads the YAML/JSON files as plain data.

    python validation/record_params.py            # regenerate tests/data/validation/params.json
    python validation/record_params.py --check    # recompute and compare with the committed file
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GENERATED_BY_PARAMS = "validation/record_params.py"


def out_path(filename: str) -> Path:
    """Where the records live: ``tests/data/validation/<filename>`` under ``ROOT`` (``--root`` moves it)."""
    return ROOT / "tests" / "data" / "validation" / filename


def set_root(root: str | None) -> None:
    global ROOT
    if root:
        ROOT = Path(root).resolve()


# --------------------------------------------------------------------------------------------------
# helpers shared with record_kv.py (which imports this module)
# --------------------------------------------------------------------------------------------------


def quiet() -> None:
    """Silence transformers' and torch's advisory chatter; errors still raise."""
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    try:
        transformers.utils.logging.disable_progress_bar()
    except AttributeError:  # pragma: no cover - older transformers
        pass


def load_sources() -> list[dict[str, Any]]:
    """Every model config the harness covers, as ``{"name", "kind", "path", "config"}``, sorted."""
    import yaml

    root = ROOT
    sources: list[dict[str, Any]] = []
    for path in sorted((root / "presets" / "models").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
            raise SystemExit(f"{path}: no 'config:' mapping")
        sources.append(
            {
                "name": str(doc.get("id") or path.stem),
                "kind": "preset",
                "path": str(path.relative_to(root)),
                "config": doc["config"],
            }
        )
    for path in sorted((root / "tests" / "data" / "configs").glob("*/config.json")):
        sources.append(
            {
                "name": path.parent.name,
                "kind": "config",
                "path": str(path.relative_to(root)),
                "config": json.loads(path.read_text(encoding="utf-8")),
            }
        )
    sources.sort(key=lambda s: (s["kind"] != "preset", s["name"]))
    return sources


# Image-text wrappers: the record is of the language model, ``cfg.get_text_config(decoder=True)`` of the wrapper's
# config, which ``AutoModelForCausalLM`` builds as the text-only causal LM (Gemma3ForCausalLM, Llama4ForCausalLM).
# The vision tower and projector are not counted (aicalc sizes the text model of these wrappers).
TEXT_ONLY_WRAPPERS = ("gemma3", "llama4", "qwen3_5", "qwen3_5_moe")

# model_types a published file names that transformers has no config class for and reads as another: Kimi K2's
# files say ``kimi_k2`` (their own copy of the DeepSeek-V3 code, ``architectures: DeepseekV3ForCausalLM``), and
# transformers maps a ``kimi_k2`` text config to ``deepseek_v3`` itself (``Kimi_K25Config.__post_init__``).
MODEL_TYPE_ALIASES = {"kimi_k2": "deepseek_v3"}
# encoders, built as the sequence classifier aicalc sizes them as (``AutoModelForSequenceClassification``)
ENCODERS = ("bert", "roberta")


def _strict_fixups(model_type: str, rest: dict[str, Any]) -> None:
    """Values published files carry that transformers 5's strict config classes refuse, coerced the way the model
    code reads them. Llama-4's ``attn_temperature_tuning`` is 4 in the published files but typed ``bool`` now; the
    modeling code only tests its truth (``if self.attn_temperature_tuning and not self.use_rope``), so 4 -> True. No
    shape depends on it."""
    if model_type in ("llama4", "llama4_text"):
        text = rest.get("text_config", rest) if model_type == "llama4" else rest
        value = text.get("attn_temperature_tuning") if isinstance(text, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            text["attn_temperature_tuning"] = bool(value)


def build_config(config: dict[str, Any]):
    """``AutoConfig.for_model(model_type, **rest)`` on a deep copy of ``config`` (never mutated); for the image-text
    wrappers of ``TEXT_ONLY_WRAPPERS``, that config's text config (the language model)."""
    from transformers import AutoConfig

    rest = copy.deepcopy(config)
    model_type = rest.pop("model_type", None)
    if not model_type:
        raise ValueError("config has no model_type")
    _strict_fixups(model_type, rest)
    cfg = AutoConfig.for_model(MODEL_TYPE_ALIASES.get(model_type, model_type), **rest)
    if model_type in TEXT_ONLY_WRAPPERS:
        cfg = cfg.get_text_config(decoder=True)
    return cfg


def versions() -> dict[str, str]:
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def _is_scalar(x: Any) -> bool:
    return x is None or isinstance(x, (bool, int, float, str))


def dumps(obj: Any, indent: int = 1, _level: int = 0) -> str:
    """Stable JSON: sorted keys, ``indent`` spaces per level, lists of scalars kept on one line."""
    pad = " " * (indent * (_level + 1))
    end = " " * (indent * _level)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        keys = list(obj) if _level == 0 else sorted(obj)  # the envelope keeps its own order
        items = [f"{pad}{json.dumps(str(k))}: {dumps(obj[k], indent, _level + 1)}" for k in keys]
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    if isinstance(obj, (list, tuple)):
        if not obj:
            return "[]"
        if all(_is_scalar(x) for x in obj):
            return "[" + ", ".join(json.dumps(x) for x in obj) + "]"
        items = [f"{pad}{dumps(v, indent, _level + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + end + "]"
    return json.dumps(obj)


def write_envelope(path: Path, generated_by: str, records: list[dict[str, Any]], **extra: Any) -> None:
    doc = {"generated_by": generated_by, "versions": versions(), "records": records, **extra}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(doc) + "\n", encoding="utf-8")


def _diff(old: Any, new: Any, where: str, out: list[str], limit: int = 40) -> None:
    if len(out) >= limit:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new)):
            if k not in old:
                out.append(f"  {where}.{k}: missing in committed file, recomputed {_short(new[k])}")
            elif k not in new:
                out.append(f"  {where}.{k}: committed {_short(old[k])}, not produced any more")
            else:
                _diff(old[k], new[k], f"{where}.{k}", out, limit)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            _diff(a, b, f"{where}[{i}]", out, limit)
    elif old != new or type(old) is not type(new):
        out.append(f"  {where}: committed {_short(old)} != recomputed {_short(new)}")


def _short(x: Any, n: int = 160) -> str:
    s = json.dumps(x, sort_keys=True)
    return s if len(s) <= n else s[: n - 3] + "..."


def check_envelope(path: Path, records: list[dict[str, Any]], key: tuple[str, ...], **extra: Any) -> int:
    """Compare freshly computed ``records`` (and extra top-level sections) with the committed file."""
    if not path.exists():
        print(f"FAIL: {path.relative_to(ROOT)} does not exist; run without --check to create it")
        return 1
    committed = json.loads(path.read_text(encoding="utf-8"))
    # Round-trip the fresh records through JSON so tuples/ints compare like the committed file.
    fresh = json.loads(dumps({"records": records, **extra}))
    now = versions()
    if committed.get("versions") != now:
        print(f"warning: committed versions {committed.get('versions')} differ from this environment {now}")

    def keyed(recs: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
        return {tuple(r.get(k) for k in key): r for r in recs}

    old, new = keyed(committed.get("records", [])), keyed(fresh["records"])
    problems: list[str] = []
    for k in sorted(set(old) | set(new), key=str):
        label = "/".join(str(x) for x in k)
        if k not in old:
            problems.append(f"record {label}: not in the committed file (new preset or case? regenerate)")
            continue
        if k not in new:
            problems.append(f"record {label}: in the committed file but no longer produced")
            continue
        lines: list[str] = []
        _diff(old[k], new[k], "", lines)
        if lines:
            problems.append(f"record {label} differs:\n" + "\n".join(lines))
    for section in extra:
        lines = []
        _diff(committed.get(section), fresh[section], section, lines)
        if lines:
            problems.append(f"section {section} differs:\n" + "\n".join(lines))
    if problems:
        print(f"FAIL: {path.relative_to(ROOT)} does not match what torch/transformers report now:")
        for p in problems:
            print(" - " + p)
        return 1
    print(f"OK: {len(new)} records in {path.relative_to(ROOT)} reproduced exactly")
    return 0


# --------------------------------------------------------------------------------------------------
# parameter counting
# --------------------------------------------------------------------------------------------------

_FINAL_NORM_NAMES = ("norm", "ln_f", "norm_f", "final_layernorm", "final_layer_norm", "final_norm")


def _numel(params) -> int:
    return int(sum(p.numel() for p in params))


def find_layer_list(model, num_layers: int | None):
    """The ``nn.ModuleList`` of decoder blocks: (qualified name, module list)."""
    import torch.nn as nn

    candidates = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m) > 0]
    if num_layers is not None:
        exact = [(n, m) for n, m in candidates if len(m) == num_layers]
        if exact:
            return min(exact, key=lambda nm: nm[0].count("."))
    if not candidates:
        raise RuntimeError("no nn.ModuleList of decoder layers found")
    return max(candidates, key=lambda nm: len(nm[1]))


def _group_parts(module) -> dict[str, int]:
    """Params of one decoder block grouped by module path, truncated to two levels (``self_attn.q_proj``)."""
    parts: dict[str, int] = {}
    for name, p in module.named_parameters():
        path = name.split(".")[:-1] or [name]
        key = ".".join(path[:2])
        parts[key] = parts.get(key, 0) + int(p.numel())
    return parts


def _rle(values: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for v in values:
        if out and out[-1][1] == v:
            out[-1][0] += 1
        else:
            out.append([1, v])
    return out


def count_params(config: dict[str, Any]) -> dict[str, Any]:
    """Instantiate the model on the meta device and return ``{"params", "breakdown", ...}``."""
    import torch
    import torch.nn as nn
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    cfg = build_config(config)
    auto = AutoModelForSequenceClassification if config.get("model_type") in ENCODERS else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(cfg)

    named = list(model.named_parameters())  # remove_duplicate=True: a shared tensor appears once
    params = _numel(p for _, p in named)
    assert params == _numel(model.parameters())

    # embeddings (token, position, ...): every nn.Embedding module
    emb_modules: dict[str, int] = {}
    emb_ids: set[int] = set()
    for mname, mod in model.named_modules():
        if isinstance(mod, nn.Embedding):
            new = [p for p in mod.parameters(recurse=False) if id(p) not in emb_ids]
            emb_ids.update(id(p) for p in new)
            emb_modules[mname] = _numel(new)

    # lm_head: output projection params not shared with an embedding
    out_emb = model.get_output_embeddings()
    in_emb = model.get_input_embeddings()
    tied = bool(out_emb is not None and in_emb is not None and out_emb.weight is in_emb.weight)
    head_ids = {id(p) for p in out_emb.parameters()} - emb_ids if out_emb is not None else set()

    # decoder blocks
    text_cfg = cfg.get_text_config(decoder=True)
    lname, layers = find_layer_list(model, getattr(text_cfg, "num_hidden_layers", None))
    per_layer = [_numel(blk.parameters()) for blk in layers]
    layer_ids = {id(p) for blk in layers for p in blk.parameters()}

    # everything else, grouped by module path
    rest: dict[str, int] = {}
    for name, p in named:
        if id(p) in emb_ids or id(p) in head_ids or id(p) in layer_ids:
            continue
        mpath = name.rsplit(".", 1)[0] if "." in name else name
        rest[mpath] = rest.get(mpath, 0) + int(p.numel())
    final_norm = {k: v for k, v in rest.items() if k.rsplit(".", 1)[-1] in _FINAL_NORM_NAMES}
    other = {k: v for k, v in rest.items() if k not in final_norm}

    # persistent buffers (in the state dict, not parameters): e.g. router bias terms
    param_names = {n for n, _ in named}
    buffers: dict[str, int] = {}
    persistent = set(model.state_dict().keys())
    for bname, buf in model.named_buffers():
        if bname in persistent and bname not in param_names:
            key = re.sub(r"\.\d+\.", ".*.", bname)
            buffers[key] = buffers.get(key, 0) + int(buf.numel())

    breakdown = {
        "embedding": sum(emb_modules.values()),
        "embedding_modules": emb_modules,
        "tied_word_embeddings": tied,
        "lm_head": _numel(p for p in model.parameters() if id(p) in head_ids),
        "layers_module": lname,
        "num_layers": len(layers),
        "layers_total": sum(per_layer),
        "layer_0": per_layer[0],
        "layer_last": per_layer[-1],
        "layers_rle": _rle(per_layer),
        "layer_0_parts": _group_parts(layers[0]),
        "layer_last_parts": _group_parts(layers[-1]),
        "final_norm": sum(final_norm.values()),
        "final_norm_modules": final_norm,
        "other": other,
        "persistent_buffers_not_counted": buffers,
    }
    total = (
        breakdown["embedding"]
        + breakdown["lm_head"]
        + breakdown["layers_total"]
        + breakdown["final_norm"]
        + sum(other.values())
    )
    if total != params:
        raise AssertionError(f"breakdown sums to {total}, model.parameters() to {params}")
    return {
        "params": params,
        "breakdown": breakdown,
        "model_class": type(model).__name__,
        "config_class": type(cfg).__name__,
    }


def compute_records(only: list[str] | None = None) -> list[dict[str, Any]]:
    records = []
    for src in load_sources():
        if only and src["name"] not in only:
            continue
        t0 = time.perf_counter()
        try:
            res = count_params(src["config"])
        except Exception as e:  # a config transformers cannot build is reported, not hidden
            raise SystemExit(
                f"{src['path']}: transformers could not build this model: {type(e).__name__}: {e}"
            ) from e
        rec = {
            "name": src["name"],
            "kind": src["kind"],
            "source": src["path"],
            "config": src["config"],
            **res,
        }
        records.append(rec)
        print(
            f"  {src['kind']:6} {src['name']:28} params={res['params']:>16,}  ({time.perf_counter() - t0:.1f}s)"
        )
    return records


def arg_parser(doc: str) -> argparse.ArgumentParser:
    """The options of the record_params and record_kv scripts: --check, --only, --root."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="recompute and compare with the committed JSON")
    ap.add_argument("--only", nargs="*", help="restrict to these names (debugging; never with --check)")
    ap.add_argument(
        "--root", help="repository root to read presets from and write records to (default: this checkout)"
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = arg_parser(__doc__).parse_args(argv)
    set_root(args.root)
    quiet()
    t0 = time.perf_counter()
    records = compute_records(args.only if not args.check else None)
    if args.check:
        rc = check_envelope(out_path("params.json"), records, key=("kind", "name"))
    else:
        if args.only:
            print("--only given: not writing the file")
            rc = 0
        else:
            write_envelope(out_path("params.json"), GENERATED_BY_PARAMS, records)
            print(f"wrote {out_path('params.json').relative_to(ROOT)} ({len(records)} records)")
            rc = 0
    print(f"record_params: {time.perf_counter() - t0:.1f}s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
