"""Record the command-line flags (and their declared choices) of the serving engines that ``serve --emit`` writes
launch commands for, read from the released packages' own source.

Each engine is pinned to one release (``ENGINES``). The script downloads that release's wheel with
``pip download --no-deps --only-binary :all:`` (or takes a wheel, sdist or unpacked folder given with
``--source NAME=PATH``), opens only the source files named below, parses them with :mod:`ast` (nothing is
imported or executed) and records:

- ``flags``: every flag of the launch command, with its aliases, whether it takes a value, and its choices
  where the source declares them (an argparse/click ``choices``, or the ``Literal[...]`` type of the config field
  the flag is derived from);
- ``configs``: the fields of the configuration objects that a flag takes as JSON or the engine reads from a
  YAML file (vLLM's ``--speculative-config`` and ``--kv-transfer-config``, TensorRT-LLM's LLM API options), with
  their ``Literal`` choices;
- ``registries``: names registered in the source (vLLM's KV connectors);
- where the files came from: the archive's file name and SHA-256, or the git tag and commit; and each source
  file's SHA-256.

How each engine defines its flags, at the pinned releases:

- vLLM: ``EngineArgs.add_cli_args`` (``vllm/engine/arg_utils.py``) calls ``add_argument("--flag", ...,
  **X_kwargs["field"])`` where ``X_kwargs = get_kwargs(SomeConfig)`` derives type, choices (``Literal``) and
  booleans (``BooleanOptionalAction``) from the dataclass field ``SomeConfig.field`` in ``vllm/config/*.py``.
- SGLang: ``ServerArgs`` collects dataclass fields declared as ``A[type, "help" | Arg(...)]`` in
  ``sglang/srt/arg_groups/fields/*.py``; the flag is ``Arg.cli_name`` or ``--`` + the field name with ``_`` → ``-``,
  plus ``Arg.aliases``; ``Arg(no_cli=True)`` fields have no flag; choices are ``Arg.choices`` or the ``Literal``
  type; ``bool`` fields are ``store_true`` (``sglang/srt/arg_groups/arg_utils.py``). ``--speculative-algorithm``
  declares no choices; its values are the member names of ``SpeculativeAlgorithm``
  (``sglang/srt/speculative/spec_info.py``, ``from_string``), recorded as a registry.
- TensorRT-LLM: ``trtllm-serve`` is a click command (``tensorrt_llm/commands/serve.py``, ``@click.option``); the
  ``--extra_llm_api_options`` YAML holds fields of the pydantic ``LlmArgs`` classes
  (``tensorrt_llm/llmapi/llm_args.py``). Its wheels are published on NVIDIA's own package index, not on PyPI:
  PyPI holds, for every 1.x release, only a 10 kB sdist built by ``wheel-stub`` that downloads the wheel from
  that index when installed, and no wheel (``pip download --only-binary :all:`` finds none). So the release
  comes from one of: the wheel (``--source tensorrt_llm=WHEEL``, where pip can reach NVIDIA's index), or a
  clone of the GitHub repository NVIDIA/TensorRT-LLM read at the release's tag
  (``--source tensorrt_llm=GIT_DIR@v1.2.1``: a bare repository or a work tree's ``.git``; the files are read
  with ``git cat-file`` at the tag, whose ``tensorrt_llm/version.py`` must say the pinned version, and the
  record keeps the tag and its commit). Without either, TensorRT-LLM is left out of the record and
  ``serve --emit trtllm`` says so.

The record ends with ``checksum``: the SHA-256 of its canonical JSON without that key.

    python validation/record_engine_args.py           # download, extract, write tests/data/engine_args.json
    python validation/record_engine_args.py --check   # re-extract and compare; offline: verify the checksum

``--check`` re-extracts every engine it can download and compares with the committed record (exit 1 on any
difference); an engine that cannot be downloaded (no network, no index) is checked by the record's checksum
only, and the script says so.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "tests" / "data" / "engine_args.json"
MAX_ARCHIVE_BYTES = 4 << 30  # TensorRT-LLM's wheels are 1-3 GB; vLLM's 0.3 GB
MAX_SOURCE_BYTES = 4 << 20  # one source file
DOWNLOAD_TIMEOUT_S = 900

ENGINES = {
    "vllm": {
        "package": "vllm", "version": "0.33.0", "command": "vllm serve MODEL",
        "files": ["vllm/engine/arg_utils.py", "vllm/config/*.py",
                  "vllm/model_executor/layers/quantization/__init__.py",
                  "vllm/distributed/kv_transfer/kv_connector/factory.py"],
    },
    "sglang": {
        "package": "sglang", "version": "0.5.23", "command": "python3 -m sglang.launch_server --model-path MODEL",
        "files": ["sglang/srt/server_args.py", "sglang/srt/arg_groups/fields/*.py",
                  "sglang/srt/arg_groups/choices.py", "sglang/srt/arg_groups/arg_utils.py",
                  "sglang/srt/speculative/spec_info.py"],
    },
    "tensorrt_llm": {
        "package": "tensorrt_llm", "version": "1.2.1", "command": "trtllm-serve MODEL",
        "files": ["tensorrt_llm/commands/serve.py", "tensorrt_llm/llmapi/llm_args.py",
                  "tensorrt_llm/llmapi/disagg_utils.py", "tensorrt_llm/version.py"],
        "version_file": "tensorrt_llm/version.py",  # a git tag's files must be this release's
    },
}
GIT_TIMEOUT_S = 120


# ---------------------------------------------------------------------------------------------------------
# reading the released files

def _match(name: str, pattern: str) -> bool:
    if pattern.endswith("/*.py"):
        folder = pattern[:-4]
        return name.startswith(folder) and name.endswith(".py") and "/" not in name[len(folder):]
    return name == pattern


def read_sources(path: Path, patterns: list[str]) -> dict[str, bytes]:
    """The files of ``patterns`` (paths inside the package, ``dir/*.py`` for one folder level) from a wheel, an
    sdist (``.tar.gz``, whose members sit under ``name-version/``, possibly below ``src/`` or ``python/``) or an
    unpacked folder; each at most MAX_SOURCE_BYTES."""
    out: dict[str, bytes] = {}

    def take(name: str, size: int, read) -> None:
        for prefix in ("", "src/", "python/"):
            inner = name[len(prefix):] if name.startswith(prefix) else None
            if inner and any(_match(inner, p) for p in patterns):
                if size > MAX_SOURCE_BYTES:
                    raise ValueError(f"{name}: {size:,} bytes, more than a source file should hold")
                out[inner] = read()
                return

    if path.is_dir():
        for f in sorted(path.rglob("*.py")):
            if f.is_file():
                take(f.relative_to(path).as_posix(), f.stat().st_size, f.read_bytes)
    elif path.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                take(info.filename, info.file_size, lambda i=info: z.read(i))
    elif path.name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(path, "r:gz") as t:
            for m in t.getmembers():
                if m.isfile():
                    name = m.name.split("/", 1)[1] if "/" in m.name else m.name
                    take(name, m.size, lambda m=m: t.extractfile(m).read())
    else:
        raise ValueError(f"{path}: not a wheel, an sdist or a folder")
    for p in patterns:
        if not any(_match(n, p) for n in out):
            raise ValueError(f"{path.name} holds no {p}")
    return dict(sorted(out.items()))


def split_git_source(text: str) -> tuple[Path, str] | None:
    """``GIT_DIR@TAG`` → (GIT_DIR, TAG) where GIT_DIR is a git directory (a bare repository, or a work tree's
    ``.git``, or the work tree itself); None for any other path."""
    path, at, tag = text.rpartition("@")
    if not at or not path or not tag:
        return None
    folder = Path(path)
    if (folder / ".git").is_dir():
        folder = folder / ".git"
    if not ((folder / "HEAD").is_file() and (folder / "objects").is_dir()):
        return None
    return folder, tag


def _git(git_dir: Path, *args: str, text: bool = True):
    r = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, text=text,
                       timeout=GIT_TIMEOUT_S, check=False)
    if r.returncode != 0:
        err = r.stderr if text else r.stderr.decode(errors="replace")
        raise ValueError(f"git {' '.join(args[:2])}: {(err.strip().splitlines() or ['failed'])[-1][:300]}")
    return r.stdout


def read_git(git_dir: Path, tag: str, patterns: list[str]) -> tuple[dict[str, bytes], str]:
    """(files of ``patterns`` at ``tag``, the commit the tag names) of a git repository; ``tag`` must be a tag
    (a branch would move), each file at most MAX_SOURCE_BYTES."""
    refs = _git(git_dir, "tag", "--list", tag).split()
    if tag not in refs:
        raise ValueError(f"{git_dir} has no tag {tag} (a release is read at its tag, not at a branch or commit)")
    commit = _git(git_dir, "rev-parse", f"{tag}^{{commit}}").strip()
    folders = sorted({p.rsplit("/", 1)[0] if "/" in p else "." for p in patterns})
    listing = _git(git_dir, "ls-tree", "-r", "-l", commit, "--", *folders)
    out: dict[str, bytes] = {}
    for line in listing.splitlines():
        meta, _, name = line.partition("\t")
        kind, size = meta.split()[1], meta.split()[3]
        if kind != "blob" or not any(_match(name, p) for p in patterns):
            continue
        if int(size) > MAX_SOURCE_BYTES:
            raise ValueError(f"{name}: {int(size):,} bytes, more than a source file should hold")
        out[name] = _git(git_dir, "cat-file", "blob", f"{commit}:{name}", text=False)
    for p in patterns:
        if not any(_match(n, p) for n in out):
            raise ValueError(f"{tag} holds no {p}")
    return dict(sorted(out.items())), commit


def source_version(source: bytes) -> str | None:
    """``__version__ = "X"`` of a version file."""
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__version__" for t in node.targets)
                and isinstance(node.value, ast.Constant)):
            return str(node.value.value)
    return None


def download(package: str, version: str, into: Path) -> Path:
    """``pip download`` of the release's wheel; raises RuntimeError when pip cannot get it."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet",
           "--disable-pip-version-check", f"{package}=={version}", "-d", str(into)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"pip download {package}=={version} took more than {DOWNLOAD_TIMEOUT_S} s") from None
    files = [f for f in into.iterdir() if f.is_file()]
    if r.returncode != 0 or len(files) != 1:
        last = (r.stderr.strip().splitlines() or ["no file"])[-1]
        raise RuntimeError(f"pip download {package}=={version}: {last[:300]}")
    if files[0].stat().st_size > MAX_ARCHIVE_BYTES:
        raise RuntimeError(f"{files[0].name}: larger than {MAX_ARCHIVE_BYTES >> 30} GiB")
    return files[0]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------------------
# evaluating the constant parts of the source

class Env:
    """Module-level assignments (``NAME = value``) of every parsed file, for resolving choices and Literal
    aliases written as names; a name defined in several files resolves to the one in the same file first."""

    def __init__(self, trees: dict[str, ast.Module]):
        self.by_file: dict[str, dict[str, ast.AST]] = {}
        for fname, tree in trees.items():
            names: dict[str, ast.AST] = {}
            for node in tree.body:
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    names[node.targets[0].id] = node.value
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
                    names[node.target.id] = node.value
            self.by_file[fname] = names

    def lookup(self, name: str, fname: str):
        if name in self.by_file.get(fname, {}):
            return self.by_file[fname][name]
        for names in self.by_file.values():
            if name in names:
                return names[name]
        return None


def constants(node, env: Env, fname: str, depth: int = 0):
    """The list of constants an expression of lists, tuples, sets, names, ``+``, ``list()``/``sorted()``/
    ``set()``/``frozenset()`` and ``dict.keys()`` evaluates to; None when it is anything else."""
    if depth > 20 or node is None:
        return None
    if isinstance(node, ast.Constant):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        out = []
        for e in node.elts:
            if isinstance(e, ast.Starred):
                e = e.value
            v = constants(e, env, fname, depth + 1)
            if v is None:
                return None
            out += v
        return out
    if isinstance(node, ast.Name):
        return constants(env.lookup(node.id, fname), env, fname, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.BitOr)):
        a, b = constants(node.left, env, fname, depth + 1), constants(node.right, env, fname, depth + 1)
        return None if a is None or b is None else a + b
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
            "list", "sorted", "set", "frozenset", "tuple") and len(node.args) == 1:
        return constants(node.args[0], env, fname, depth + 1)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "keys":
        target = node.func.value
        if isinstance(target, ast.Name):
            target = env.lookup(target.id, fname)
        if isinstance(target, ast.Dict):
            return constants(ast.List(elts=list(target.keys)), env, fname, depth + 1)
    return None


def literal_values(node, env: Env, fname: str, depth: int = 0):
    """(values, open): the values of every ``Literal[...]`` inside a type annotation (through ``X | Y``,
    ``Optional``, ``Union``, ``Annotated`` and names of Literal aliases), and whether the type also admits any
    string (``| str``). values is None when the type has no Literal."""
    if depth > 20 or node is None:
        return None, False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
        try:
            return literal_values(ast.parse(node.value, mode="eval").body, env, fname, depth + 1)
        except SyntaxError:
            return None, False
    if isinstance(node, ast.Name):
        if node.id == "str":
            return None, True
        return literal_values(env.lookup(node.id, fname), env, fname, depth + 1)
    if isinstance(node, ast.Attribute):  # module.Alias
        return literal_values(ast.Name(id=node.attr), env, fname, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        parts = [node.left, node.right]
    elif isinstance(node, ast.Subscript):
        head = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", "")
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head == "Literal":
            values, is_open = [], False
            for a in args:
                if isinstance(a, ast.Constant):
                    values.append(a.value)
                else:  # a nested alias of another Literal
                    v, o = literal_values(a, env, fname, depth + 1)
                    values += v or []
                    is_open |= o
            return values, is_open
        if head in ("Optional", "Union"):
            parts = args
        elif head in ("Annotated", "A"):
            parts = args[:1]
        else:
            return None, False
    else:
        return None, False
    values, is_open, found = [], False, False
    for p in parts:
        v, o = literal_values(p, env, fname, depth + 1)
        is_open |= o
        if v is not None:
            values += v
            found = True
    return (values if found else None), is_open


def _is_bool(annotation) -> bool:
    """bool, Optional[bool] or bool | None."""
    if isinstance(annotation, ast.Name):
        return annotation.id == "bool"
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        sides = [annotation.left, annotation.right]
        return any(_is_bool(s) for s in sides) and all(
            _is_bool(s) or (isinstance(s, ast.Constant) and s.value is None) for s in sides)
    if isinstance(annotation, ast.Subscript) and getattr(annotation.value, "id", "") == "Optional":
        return _is_bool(annotation.slice)
    return False


def class_fields(trees: dict[str, ast.Module], env: Env, names=None) -> dict[str, dict]:
    """``{class: {field: {"choices": [...], "open": bool, "bool": bool}}}`` of the annotated class-level fields
    (dataclasses, pydantic models) of every class (or of ``names``), bases' fields included where the base is
    among the parsed classes."""
    raw: dict[str, tuple[list[str], dict[str, dict]]] = {}
    for fname, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            fields: dict[str, dict] = {}
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    name = stmt.target.id
                    ann = ast.unparse(stmt.annotation)
                    if name.startswith("_") or ann.startswith(("ClassVar", "typing.ClassVar")):
                        continue
                    values, is_open = literal_values(stmt.annotation, env, fname)
                    fields[name] = {"choices": _jsonable(values), "open": bool(is_open),
                                    "bool": _is_bool(stmt.annotation)}
            bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
            raw.setdefault(node.name, (bases, fields))

    def merged(cls: str, seen: tuple = ()) -> dict[str, dict]:
        bases, fields = raw[cls]
        out: dict[str, dict] = {}
        for b in bases:
            if b in raw and b not in seen:
                out.update(merged(b, seen + (cls,)))
        out.update(fields)
        return out

    return {c: dict(sorted(merged(c).items())) for c in sorted(raw) if names is None or c in names}


def _jsonable(values):
    if values is None:
        return None
    out = []
    for v in values:
        if isinstance(v, (str, int, float, bool)) or v is None:
            if v not in out:
                out.append(v)
    return out


def _keyword(call: ast.Call, name: str):
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def _add_flag(flags: dict, names: list[str], entry: dict) -> None:
    main = names[0]
    flags[main] = dict(entry, aliases=names[1:])
    for alias in names[1:]:
        flags[alias] = {"alias_of": main}


# ---------------------------------------------------------------------------------------------------------
# per engine

def argparse_flags(trees: dict[str, ast.Module], env: Env, fields: dict[str, dict]) -> dict[str, dict]:
    """Flags of ``add_argument("--a", "-b", ..., **kw["field"])`` calls, choices from ``choices=`` or from the
    field of ``get_kwargs(Config)`` that ``kw`` holds; a flag takes no value when its action is store_true/
    store_false/BooleanOptionalAction or its field is a bool (vLLM's get_kwargs)."""
    flags: dict[str, dict] = {}
    for fname, tree in trees.items():
        holders: dict[str, str] = {}  # X_kwargs -> config class
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "get_kwargs"
                    and node.value.args and isinstance(node.value.args[0], ast.Name)):
                holders[node.targets[0].id] = node.value.args[0].id
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "add_argument"):
                continue
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                     and a.value.startswith("-")]
            if not names:
                continue
            field = None
            for k in node.keywords:
                if k.arg is None and isinstance(k.value, ast.Subscript) and isinstance(k.value.value, ast.Name):
                    cls = holders.get(k.value.value.id)
                    key = k.value.slice
                    if cls and isinstance(key, ast.Constant):
                        field = fields.get(cls, {}).get(key.value)
                elif k.arg is None and isinstance(k.value, ast.Dict):  # **{**kw["field"], ...}
                    for v in k.value.values:
                        if isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name):
                            cls = holders.get(v.value.id)
                            if cls and isinstance(v.slice, ast.Constant):
                                field = fields.get(cls, {}).get(v.slice.value)
            choices = constants(_keyword(node, "choices"), env, fname)
            action = _keyword(node, "action")
            action_name = ast.unparse(action) if action is not None else ""
            plain = action_name.lower().replace("_", "")
            no_value = any(a in plain for a in ("storetrue", "storefalse", "booleanoptionalaction")) or \
                (field is not None and field["bool"] and action is None)
            if choices is None and field is not None:
                choices = field["choices"]
            entry = {"value": not no_value, "choices": _jsonable(choices)}
            if field is not None and field["open"]:
                entry["open"] = True
            if no_value and "BooleanOptionalAction" in action_name or (field is not None and field["bool"]):
                entry["negation"] = "--no-" + names[0][2:]
            _add_flag(flags, names, entry)
    return dict(sorted(flags.items()))


def extract_vllm(sources: dict[str, bytes]) -> dict:
    trees = {f: ast.parse(b, f) for f, b in sources.items()}
    env = Env(trees)
    fields = class_fields(trees, env)
    flags = argparse_flags({f: t for f, t in trees.items() if f.endswith("arg_utils.py")}, env, fields)
    connectors = []
    for node in ast.walk(trees["vllm/distributed/kv_transfer/kv_connector/factory.py"]):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "register_connector" and node.args
                and isinstance(node.args[0], ast.Constant)):
            connectors.append(node.args[0].value)
    configs = {c: fields[c] for c in ("SpeculativeConfig", "KVTransferConfig") if c in fields}
    return {"flags": flags, "configs": configs, "registries": {"kv_connector": sorted(set(connectors))}}


def extract_sglang(sources: dict[str, bytes]) -> dict:
    trees = {f: ast.parse(b, f) for f, b in sources.items()}
    env = Env(trees)
    flags: dict[str, dict] = {}
    for fname, tree in trees.items():
        if "/fields/" not in fname:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for stmt in node.body:
                if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                        and isinstance(stmt.annotation, ast.Subscript)
                        and getattr(stmt.annotation.value, "id", "") in ("A", "Annotated")
                        and isinstance(stmt.annotation.slice, ast.Tuple)):
                    continue
                typ, meta = stmt.annotation.slice.elts[0], stmt.annotation.slice.elts[1]
                arg = meta if isinstance(meta, ast.Call) and getattr(meta.func, "id", "") == "Arg" else None
                no_cli = _keyword(arg, "no_cli") if arg else None
                if isinstance(no_cli, ast.Constant) and no_cli.value is True:
                    continue
                cli = _keyword(arg, "cli_name") if arg else None
                main = cli.value if isinstance(cli, ast.Constant) else "--" + stmt.target.id.replace("_", "-")
                aliases = constants(_keyword(arg, "aliases"), env, fname) if arg else None
                choices = constants(_keyword(arg, "choices"), env, fname) if arg else None
                values, is_open = literal_values(typ, env, fname)
                if choices is None:
                    choices = values
                action = _keyword(arg, "action") if arg else None
                is_flag = _is_bool(typ) and action is None
                entry = {"value": not is_flag, "choices": _jsonable(choices)}
                _add_flag(flags, [main] + list(aliases or []), entry)
    # flags added by hand (deprecated spellings) in server_args.py
    extra = argparse_flags({f: t for f, t in trees.items() if f.endswith("server_args.py")}, env, {})
    for k, v in extra.items():
        flags.setdefault(k, v)
    # --speculative-algorithm declares no choices: SpeculativeAlgorithm.from_string takes the enum's member names
    algorithms = []
    for node in ast.walk(trees["sglang/srt/speculative/spec_info.py"]):
        if isinstance(node, ast.ClassDef) and node.name == "SpeculativeAlgorithm":
            algorithms = [t.id for stmt in node.body if isinstance(stmt, ast.Assign) for t in stmt.targets
                          if isinstance(t, ast.Name) and t.id.isupper()]
    return {"flags": dict(sorted(flags.items())), "configs": {},
            "registries": {"speculative_algorithm": sorted(algorithms)}}


def click_commands(tree: ast.Module, env: Env, fname: str) -> dict[str, dict]:
    """``{command: {flag: ...}}`` of every ``@click.command("name")`` function (named by the function where the
    decorator names none): the names of each ``@click.option`` that start with ``-`` (the first the main one,
    the rest aliases; a bare name is the Python parameter, not a flag), ``is_flag=True`` taking no value, and
    the choices of a ``click.Choice``/``ChoiceWithAlias`` type where they are constants."""
    commands: dict[str, dict] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        name = None
        for deco in fn.decorator_list:
            if isinstance(deco, ast.Call) and getattr(deco.func, "attr", "") == "command":
                first = deco.args[0] if deco.args else None
                name = first.value if isinstance(first, ast.Constant) else fn.name
        if name is None:
            continue
        flags: dict[str, dict] = {}
        for deco in reversed(fn.decorator_list):  # click applies them bottom up; the order does not matter here
            if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute) and deco.func.attr == "option"):
                continue
            names = [a.value for a in deco.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")]
            if not names:
                continue
            is_flag = _keyword(deco, "is_flag")
            typ = _keyword(deco, "type")
            choices = None
            if isinstance(typ, ast.Call) and getattr(typ.func, "attr", getattr(typ.func, "id", "")) in (
                    "Choice", "ChoiceWithAlias") and typ.args:
                choices = constants(typ.args[0], env, fname)
            entry = {"value": not (isinstance(is_flag, ast.Constant) and is_flag.value is True),
                     "choices": _jsonable(choices)}
            _add_flag(flags, names, entry)
        commands[name] = dict(sorted(flags.items()))
    return dict(sorted(commands.items()))


def enum_members(tree: ast.Module, cls: str) -> list[str]:
    """Upper-case member names assigned in class ``cls`` (an Enum)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return sorted(t.id for stmt in node.body if isinstance(stmt, ast.Assign) for t in stmt.targets
                          if isinstance(t, ast.Name) and t.id.isupper())
    return []


def function_params(tree: ast.Module) -> dict[str, list[str]]:
    """``{function: [parameter, ...]}`` of a module's top-level functions."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            a = node.args
            out[node.name] = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    return dict(sorted(out.items()))


def extract_trtllm(sources: dict[str, bytes]) -> dict:
    """``flags``: trtllm-serve's (the ``serve`` click command); ``commands``: every click command of
    ``tensorrt_llm/commands/serve.py`` (``disaggregated`` starts the disaggregated server); ``configs``: the
    fields of ``llm_args.py``'s ``*Config`` and ``*LlmArgs`` classes (what ``--extra_llm_api_options`` YAML
    holds) and of ``disagg_utils.py``'s classes; ``functions``: the parameters of ``disagg_utils.py``'s
    functions (its config file's keys are the keyword arguments of the function that parses it);
    ``registries``: ``server_role`` (``ServerRole`` members) where that file is read."""
    trees = {f: ast.parse(b, f) for f, b in sources.items()}
    env = Env(trees)
    commands = click_commands(trees["tensorrt_llm/commands/serve.py"], env, "tensorrt_llm/commands/serve.py")
    fields = class_fields({f: t for f, t in trees.items() if f.endswith("llm_args.py")}, env)
    configs = {c: v for c, v in fields.items() if c.endswith(("Config", "LlmArgs"))}
    out = {"flags": commands.get("serve", {}), "commands": commands, "configs": configs, "registries": {}}
    disagg = trees.get("tensorrt_llm/llmapi/disagg_utils.py")
    if disagg is not None:
        out["configs"] |= {f"disagg_utils.{c}": v
                           for c, v in class_fields({"disagg_utils.py": disagg}, env).items()}
        out["functions"] = {f"disagg_utils.{k}": v for k, v in function_params(disagg).items()}
        out["registries"]["server_role"] = enum_members(disagg, "ServerRole")
    out["configs"] = dict(sorted(out["configs"].items()))
    return out


EXTRACT = {"vllm": extract_vllm, "sglang": extract_sglang, "tensorrt_llm": extract_trtllm}


def record_engine(name: str, archive) -> dict:
    """The record of one engine from ``archive``: a wheel, sdist or folder (a Path), or (GIT_DIR, TAG)."""
    spec = ENGINES[name]
    entry = {"package": spec["package"], "version": spec["version"], "command": spec["command"]}
    if isinstance(archive, tuple):
        git_dir, tag = archive
        sources, commit = read_git(git_dir, tag, spec["files"])
        entry["git"] = {"tag": tag, "commit": commit}
    else:
        sources = read_sources(archive, spec["files"])
        entry["archive"] = {"filename": archive.name,
                            "sha256": file_sha256(archive) if archive.is_file() else None}
    if spec.get("version_file"):
        found = source_version(sources[spec["version_file"]])
        if found != spec["version"]:
            raise ValueError(f"{spec['version_file']} says {found}, not the pinned {spec['version']}")
    entry["files"] = {f: sha256(b) for f, b in sources.items()}
    entry.update(EXTRACT[name](sources))
    return entry


def checksum(engines: dict) -> str:
    return sha256(json.dumps(engines, sort_keys=True, separators=(",", ":")).encode())


def obtain(name: str, given: dict, tmp: Path):
    """The release of engine ``name``: as given with --source (a Path, or (GIT_DIR, TAG)), else downloaded."""
    if name in given:
        return given[name]
    spec = ENGINES[name]
    folder = tmp / name
    folder.mkdir()
    return download(spec["package"], spec["version"], folder)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed record instead of writing it")
    ap.add_argument("--source", action="append", default=[], metavar="NAME=PATH",
                    help="take ENGINE's release from a wheel, sdist or folder, or from a git repository at a tag "
                         "(GIT_DIR@TAG), instead of downloading it")
    ap.add_argument("--out", type=Path, default=RECORD)
    args = ap.parse_args(argv)
    given = {}
    for s in args.source:
        name, _, path = s.partition("=")
        if name not in ENGINES or not path:
            ap.error(f"--source takes NAME=PATH with NAME one of {', '.join(ENGINES)}")
        given[name] = split_git_source(path) or Path(path)

    old = json.loads(args.out.read_text()) if args.out.exists() else None
    if args.check:
        if old is None:
            print(f"{args.out} is missing: run validation/record_engine_args.py", file=sys.stderr)
            return 1
        if checksum(old["engines"]) != old.get("checksum"):
            print(f"{args.out}: the checksum does not match the content (edited by hand?)", file=sys.stderr)
            return 1
    engines: dict[str, dict] = {}
    failures, unchecked = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ENGINES:
            try:
                archive = obtain(name, given, Path(tmp))
            except (RuntimeError, OSError) as e:
                unchecked.append(f"{name}: {e}")
                if old and name in old["engines"]:
                    engines[name] = old["engines"][name]
                continue
            where = f"{archive[0]} at {archive[1]}" if isinstance(archive, tuple) else archive.name
            print(f"{name} {ENGINES[name]['version']}: {where}")
            try:
                engines[name] = record_engine(name, archive)
            except (ValueError, OSError, subprocess.TimeoutExpired) as e:  # a release given that is not the one pinned
                print(f"{name}: {e}", file=sys.stderr)
                return 2
            if args.check:
                if old is None or name not in old["engines"]:
                    failures.append(f"{name}: not in the record")
                    continue
                new, was = engines[name], old["engines"][name]
                for key in ("version", "files", "flags", "commands", "configs", "functions", "registries"):
                    if new.get(key) != was.get(key):
                        failures.append(f"{name}: {key} differ from the record")
    for u in unchecked:
        print(f"not re-extracted, {u}", file=sys.stderr)
    if args.check:
        if failures:
            print("\n".join(failures), file=sys.stderr)
            return 1
        kept = [n for n in old["engines"] if any(u.startswith(n + ":") for u in unchecked)]
        fresh = [n for n in old["engines"] if n not in kept]
        absent = [n for n in ENGINES if n not in old["engines"]]
        print(f"{args.out.name}: checksum verified"
              + (f"; {', '.join(fresh)} re-extracted and identical" if fresh else "")
              + (f"; {', '.join(kept)} checked by the checksum only (could not download)" if kept else "")
              + (f"; {', '.join(absent)} not recorded" if absent else ""))
        return 0
    data = {"schema_version": 1, "generated_by": "validation/record_engine_args.py", "engines": engines,
            "checksum": checksum(engines)}
    args.out.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    versions = ", ".join(f"{n} {e['version']}" for n, e in engines.items())
    print(f"wrote {args.out} ({versions})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
