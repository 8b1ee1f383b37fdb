"""Find, load and validate presets: built-in ones (shipped in the wheel) plus user folders.

User folders come from ``--presets-dir`` or the ``AICALC_PRESETS`` environment variable (several
folders separated by the OS path separator); each holds ``chips/``, ``nodes/`` and ``models/``
sub-folders of YAML files, and an entry there overrides a built-in one with the same id.
"""

import os
from functools import cache
from pathlib import Path
from typing import Any

from aicalc.catalog.arch import Arch
from aicalc.errors import AicalcError, UnknownPreset
from aicalc.tuples import Named

KINDS = ("chip", "node", "model")
_extra_dirs: list[Path] = []


def set_user_dirs(dirs: list[Path]) -> None:
    """Called once by the CLI for ``--presets-dir``; the environment variable is read as well."""
    _extra_dirs[:] = dirs
    _index.cache_clear()


@cache
def builtin_root() -> Path:
    """``aicalc/presets`` in an installed wheel, else the repository's top-level ``presets/`` (found once: a
    query asks for it dozens of times, and each look resolves the path and stats the folder)."""
    here = Path(__file__).resolve().parent.parent
    shipped = here / "presets"
    return shipped if shipped.is_dir() else here.parent / "presets"


def path_is(path, kind: str = "exists") -> bool:
    """``Path(path).exists()`` / ``.is_file()`` / ``.is_dir()`` (``kind``), False for a name the file system
    cannot hold (too long, a NUL byte) instead of an OSError or ValueError."""
    try:
        p = Path(path)
        return p.is_file() if kind == "file" else p.is_dir() if kind == "dir" else p.exists()
    except (OSError, ValueError):
        return False


def _roots() -> list[Path]:
    env = [Path(p) for p in os.environ.get("AICALC_PRESETS", "").split(os.pathsep) if p]
    roots = [builtin_root(), *env, *_extra_dirs]
    for r in roots[1:]:
        if not path_is(r, "dir"):
            raise AicalcError(f"presets folder '{_short(r)}' does not exist")
    return roots


@cache
def _index(kind: str) -> dict[str, Path]:
    """id → file, later roots overriding earlier ones. Reads only the folder listings."""
    found = _Files()
    for root in _roots():
        folder = root / f"{kind}s"
        if folder.is_dir():
            # the listing's names, sorted: what sorted(folder.glob("*.yaml")) gives, without pathlib's glob
            for name in sorted(e.name for e in os.scandir(folder) if e.name.endswith(".yaml")):
                dot = name.rfind(".")  # Path(name).stem
                found[name[:dot] if 0 < dot < len(name) - 1 else name] = (folder, name)
    return found


class _Files(dict):
    """Preset id → its file, each path formed the first time it is asked for (a query asks for a few of the
    ~80; forming them all cost ~1 M instructions)."""

    def __getitem__(self, key) -> Path:
        f = super().__getitem__(key)
        if type(f) is tuple:
            f = f[0] / f[1]
            super().__setitem__(key, f)
        return f

    def get(self, key, default=None):
        return self[key] if key in self else default

    def values(self):
        return [self[k] for k in self]

    def items(self):
        return [(k, self[k]) for k in self]


def ids(kind: str) -> list[str]:
    return sorted(_index(kind))


# Every file aicalc reads (presets, budgets, config.json) is bounded before it is parsed: size, nesting depth and
# the number of nodes once YAML aliases are expanded (docs/robustness.md).
MAX_FILE_BYTES = 4 * 2**20
MAX_DEPTH = 64
MAX_NODES = 200_000
MAX_INT_DIGITS = 30  # a JSON integer longer than this is not a model dimension


def _short(text, n: int = 160) -> str:
    """A name or path as an error message shows it: at most ``n`` characters, its start and its end."""
    text = str(text)
    return text if len(text) <= n else text[: n // 2 - 1] + "…" + text[-(n // 2):]


def read_text(path: Path) -> str:
    """The UTF-8 text of a regular file of at most MAX_FILE_BYTES, refused by its size before it is read."""
    import stat

    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise AicalcError(f"{_short(path)}: not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise AicalcError(f"{_short(path)}: {st.st_size:,} bytes is more than the {MAX_FILE_BYTES // 2**20} MiB "
                              "aicalc reads from one file")
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise AicalcError(f"{_short(path)}: cannot read ({e.strerror or e})") from None
    if len(data) > MAX_FILE_BYTES:
        raise AicalcError(f"{_short(path)}: more than the {MAX_FILE_BYTES // 2**20} MiB aicalc reads from one file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AicalcError(f"{_short(path)}: not UTF-8 text (byte {e.start:,})") from None


def load_yaml(path: Path) -> Any:
    """One YAML document through a safe loader (built-in presets from the compiled index), bounded by
    MAX_FILE_BYTES, MAX_DEPTH and MAX_NODES; a key given twice in one mapping is an error naming file:line."""
    builtin = _builtin_file(path)
    if builtin is not None:
        return builtin
    return _parse_yaml(read_text(path), str(path))[0]


def load_yaml_lines(path: Path) -> tuple[Any, dict[tuple, int]]:
    """:func:`load_yaml` plus the 1-based line of every key and item, by its path (keys and list indices). Plain
    YAML (a budget file as written) is read without PyYAML (:mod:`aicalc.catalog.plain_yaml`), the same values
    and lines."""
    from aicalc.catalog import plain_yaml

    text = read_text(path)
    plain = plain_yaml.parse(text)
    return plain if plain is not None else yaml_lines(text, str(path))


def yaml_lines(text: str, origin: str) -> tuple[Any, dict[tuple, int]]:
    """:func:`load_yaml_lines` of a text, through PyYAML."""
    data, root = _parse_yaml(text, origin)
    lines: dict[tuple, int] = {}
    if root is None:
        return data, lines
    import yaml

    todo = [(root, ())]
    while todo:  # the node tree is at most MAX_DEPTH deep and MAX_NODES large (aliases expanded)
        node, where = todo.pop()
        lines.setdefault(where, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode):
                    lines[(*where, k.value)] = k.start_mark.line + 1
                    todo.append((v, (*where, k.value)))
        elif isinstance(node, yaml.SequenceNode):
            todo += [(v, (*where, i)) for i, v in enumerate(node.value)]
    return data, lines


def _yaml_error(origin: str, e) -> AicalcError:
    mark = getattr(e, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    return AicalcError(f"{_short(origin)}: invalid YAML{where}: {problem}")


def _parse_yaml(text: str, origin: str):
    """(data, root node). The node tree is composed here from the parser's events, without recursion, so
    that depth, size after alias expansion and duplicate keys are checked before anything is built."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)  # safe loaders only: no object construction
    try:
        root = _compose(loader, origin)
        return (None if root is None else loader.construct_document(root)), root
    except yaml.YAMLError as e:
        raise _yaml_error(origin, e) from None
    except RecursionError:  # a merge chain the constructor follows recursively
        raise AicalcError(f"{_short(origin)}: YAML nested too deeply") from None
    finally:
        loader.dispose()


def _compose(loader, origin: str):
    """yaml.Composer.compose_document, iteratively, with the limits of :func:`load_yaml`."""
    from yaml import events as ev
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    merge = "tag:yaml.org,2002:merge"
    loader.get_event()  # stream start
    if loader.check_event(ev.StreamEndEvent):
        return None
    loader.get_event()  # document start
    anchors: dict[str, tuple] = {}  # anchor → (node, expanded size); None size while the node is open
    stack: list[list] = []  # [node, expanded size, pending key node, {key: line}, anchor]
    root = None
    while root is None:
        event = loader.get_event()
        line = event.start_mark.line + 1
        if isinstance(event, ev.AliasEvent):
            if event.anchor not in anchors:
                raise AicalcError(f"{_short(origin)}:{line}: unknown alias *{_short(event.anchor, 40)}")
            node, size = anchors[event.anchor]
            if size is None:
                raise AicalcError(f"{_short(origin)}:{line}: alias *{_short(event.anchor, 40)} refers to itself")
        elif isinstance(event, (ev.ScalarEvent, ev.SequenceStartEvent, ev.MappingStartEvent)):
            if event.anchor is not None and event.anchor in anchors:
                raise AicalcError(f"{_short(origin)}:{line}: anchor &{_short(event.anchor, 40)} defined twice")
            if isinstance(event, ev.ScalarEvent):
                tag = event.tag
                if tag is None or tag == "!":
                    tag = loader.resolve(ScalarNode, event.value, event.implicit)
                if tag == "tag:yaml.org,2002:int" and len(event.value) > MAX_INT_DIGITS:
                    raise AicalcError(f"{_short(origin)}:{line}: an integer of {len(event.value):,} digits")
                node, size = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style), 1
                if event.anchor is not None:
                    anchors[event.anchor] = (node, 1)
            else:
                if len(stack) >= MAX_DEPTH:
                    raise AicalcError(f"{_short(origin)}:{line}: nested more than {MAX_DEPTH} levels deep")
                kind = SequenceNode if isinstance(event, ev.SequenceStartEvent) else MappingNode
                tag = event.tag
                if tag is None or tag == "!":
                    tag = loader.resolve(kind, None, event.implicit)
                node = kind(tag, [], event.start_mark, None, flow_style=event.flow_style)
                if event.anchor is not None:
                    anchors[event.anchor] = (node, None)
                stack.append([node, 1, None, {}, event.anchor])
                continue
        elif isinstance(event, (ev.SequenceEndEvent, ev.MappingEndEvent)):
            node, size, _, _, anchor = stack.pop()
            node.end_mark = event.end_mark
            if anchor is not None:
                anchors[anchor] = (node, size)
        else:  # pragma: no cover - the parser only yields the events above inside a document
            raise AicalcError(f"{_short(origin)}:{line}: unexpected YAML event {type(event).__name__}")
        if not stack:
            root = node
            break
        parent = stack[-1]
        parent[1] += size
        if parent[1] > MAX_NODES:
            raise AicalcError(f"{_short(origin)}:{line}: more than {MAX_NODES:,} values once its aliases are "
                              "expanded")
        if isinstance(parent[0], SequenceNode):
            parent[0].value.append(node)
        elif parent[2] is None:
            parent[2] = node
        else:
            key = parent[2]
            if isinstance(key, ScalarNode) and key.tag != merge:
                k, at = loader.construct_object(key), key.start_mark.line + 1
                try:
                    first = parent[3].get(k)
                except TypeError:  # an unhashable key: the constructor reports it
                    first = None
                else:
                    parent[3].setdefault(k, at)
                if first is not None:
                    raise AicalcError(f"{_short(origin)}:{at}: duplicate key '{_short(key.value, 40)}' (first at "
                                      f"line {first})")
            parent[0].value.append((key, node))
            parent[2] = None
    loader.get_event()  # document end
    if not loader.check_event(ev.StreamEndEvent):
        raise AicalcError(f"{_short(origin)}:{loader.peek_event().start_mark.line + 1}: more than one YAML "
                          "document in the file")
    return root


def validation_message(path: Path | str, err) -> str:
    """One line from a pydantic ValidationError: file, field path, message (and how many more)."""
    errors = err.errors()
    first = errors[0]
    field = ".".join(str(p) for p in first["loc"]) or "(top level)"
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return f"{path}: field '{field}': {first['msg']}{more}"


@cache
def _validated(kind: str, path: Path):
    """The preset at ``path`` checked by its pydantic schema (user presets when used; built-ins when the
    catalog index is compiled)."""
    from pydantic import ValidationError

    from aicalc.catalog import schema

    cls = {"chip": schema.Chip, "node": schema.Node, "model": schema.ModelPreset}[kind]
    data = _parse_yaml(read_text(path), str(path))[0]
    if not isinstance(data, dict):
        raise AicalcError(f"{_short(path)}: expected a mapping of fields, got {type(data).__name__}")
    try:
        obj = cls.model_validate(data)
    except ValidationError as e:
        raise AicalcError(validation_message(_short(path), e)) from None
    if obj.id != path.stem:
        raise AicalcError(f"{_short(path)}: field 'id' is '{_short(obj.id)}' but the file is named '{path.stem}'")
    if kind != "model":
        _check_figures(obj.model_dump(), path)
        for field in ("chip", "efficiency_class"):  # ids of other presets and profiles: names of files
            ref = getattr(obj, field, None)
            if ref is not None and not (isinstance(ref, str) and is_id(ref)):
                raise AicalcError(f"{_short(path)}: field '{field}' must be a preset id (a-z, 0-9, '.', '-', '_'; "
                                  f"at most 64 characters), got '{_short(ref, 60)}'")
    return obj


_ID_FIRST = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_ID_CHARS = _ID_FIRST | frozenset("._-")


def is_id(text: str) -> bool:
    """Whether a text is an id: ``[a-z0-9][a-z0-9._-]{0,63}`` (checked without compiling the pattern)."""
    return 0 < len(text) <= 64 and text[0] in _ID_FIRST and set(text) <= _ID_CHARS


# The range of every figure of a chip or node preset (docs/robustness.md): ~1000x beyond the chips that exist
# either way, so that no estimate divides by a vanishing peak or overflows on an absurd one.
FIGURE_RANGES = {
    "memory": (2.0**20, 2.0**50), "sram": (1.0, 2.0**50), "memory_bandwidth_gbs": (1e-3, 1e9),
    "sram_bandwidth_gbs": (1e-3, 1e9), "bandwidth_gbs": (1e-3, 1e9), "dense_tflops": (1e-6, 1e9),
    "sparse_tflops": (1e-6, 1e9), "tdp_w": (1e-3, 1e7), "system_power_w": (1e-3, 1e9),
    "price_per_hour_usd": (1e-6, 1e6), "count": (1, 2**20),
}
MAX_FIGURE = 1e18  # any other number in a preset


def _check_figures(data: dict, path: Path) -> None:
    import math

    todo: list[tuple[tuple, Any]] = [((), data)]
    while todo:
        where, value = todo.pop()
        if isinstance(value, dict):
            todo += [((*where, str(k)), v) for k, v in value.items()]
        elif isinstance(value, list):
            todo += [((*where, str(i)), v) for i, v in enumerate(value)]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            field = next((w for w in reversed(where) if w in FIGURE_RANGES), None)
            lo, hi = FIGURE_RANGES.get(field, (-MAX_FIGURE, MAX_FIGURE))
            if not (math.isfinite(value) and lo <= value <= hi):
                shown = f"{value:.4g}" if isinstance(value, float) or abs(value) < 10**300 else "a 300-digit number"
                raise AicalcError(f"{_short(path)}: field '{'.'.join(where)}' is {shown}; aicalc accepts {lo:g} to "
                                  f"{hi:g} (see docs/robustness.md)")


class Record:
    """A validated preset as read-only attributes, without pydantic: what :func:`load` returns. Its fields
    are those of the pydantic schema in :mod:`aicalc.catalog.schema`, defaults filled in."""

    __slots__ = ("_data",)

    def __init__(self, data: dict):
        object.__setattr__(self, "_data", dict(data))

    def __getattr__(self, name: str):
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no field '{name}'") from None

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __eq__(self, other):
        return type(self) is type(other) and self._data == other._data

    def __hash__(self):
        return hash((type(self).__name__, self._data.get("id"), self._data.get("name")))

    def __repr__(self):
        return f"{type(self).__name__}(id={self._data.get('id')!r})"

    def __str__(self):  # the id, so a record handed back to the library resolves to itself
        return str(self._data.get("id"))

    def model_dump(self) -> dict:
        import copy

        return {k: v.model_dump() if isinstance(v, Record) else copy.deepcopy(v) for k, v in self._data.items()}


class InterconnectRecord(Record):
    __slots__ = ()

    @property
    def per_direction_bytes_per_s(self) -> float | None:
        """Bytes/s one way: vendors' NVLink/ICI totals count both directions (specs.md pitfall 7)."""
        bw = self._data.get("bandwidth_gbs")
        if bw is None:
            return None
        return (bw / 2 if self._data.get("direction", "bidirectional") == "bidirectional" else bw) * 1e9


class _Linked(Record):
    """A preset with an ``interconnect`` block (chips and nodes), read as an :class:`InterconnectRecord`."""

    __slots__ = ()

    def __init__(self, data: dict):
        data = dict(data)
        if isinstance(data.get("interconnect"), dict):
            data["interconnect"] = InterconnectRecord(data["interconnect"])
        super().__init__(data)


class ChipRecord(_Linked):
    """A chip preset (fields of :class:`aicalc.catalog.schema.Chip`, the same derived properties)."""

    __slots__ = ()

    @property
    def memory_bytes(self) -> int:
        return int(self._data["memory"])

    @property
    def usable_memory_bytes(self) -> int:
        """The measured usable total where the preset has one (``usable_memory``), else the label."""
        return int(self._data.get("usable_memory") or self._data["memory"])

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self._data["memory_bandwidth_gbs"] * 1e9

    def peak_flop_per_s(self, dtype: str) -> float | None:
        tf = self._data["dense_tflops"].get(dtype)
        return None if tf is None else float(round(tf * 1e12))

    @property
    def exp_per_s(self) -> float:
        """Exponentials per second of its special-function units (:func:`aicalc.core.exponentials.exp_per_s`)."""
        from aicalc.core.exponentials import exp_per_s

        return exp_per_s(self._data["kind"], self._data.get("generation"), self.peak_flop_per_s("fp32"))


class NodeRecord(_Linked):
    """A node preset: ``count`` chips of id ``chip`` on its interconnect."""

    __slots__ = ()


RECORDS = {"chip": ChipRecord, "node": NodeRecord, "model": Record}


# The built-in catalog compiled once into a JSON index in the user's cache folder (rebuilt when a built-in
# file, the schema or this module changes): a one-off query reads it instead of parsing YAML and building
# pydantic schemas. The test suite validates every built-in preset against the schema.
INDEX_FORMAT = 3  # 2: a checksum line before the JSON body; 3: a JSON line per entry, parsed when it is used
SECTIONS = ("files", "chip", "node")


def _stamp(root: Path) -> list:
    """(relative path, size, mtime) of every built-in YAML file and of the code that shapes the index."""
    out = []
    try:
        for sub in sorted(os.scandir(root), key=lambda e: e.name):
            if sub.is_dir():
                for f in sorted(os.scandir(sub.path), key=lambda e: e.name):
                    if f.name.endswith(".yaml"):
                        st = f.stat()
                        out.append([f"{sub.name}/{f.name}", st.st_size, st.st_mtime_ns])
        here = Path(__file__).resolve().parent
        for code in (here / "schema.py", here / "store.py"):
            st = code.stat()
            out.append([code.name, st.st_size, st.st_mtime_ns])
    except OSError:
        return []
    return out


def cache_dir() -> Path:
    """aicalc's cache folder: ``$AICALC_CACHE_DIR``, else ``$XDG_CACHE_HOME/aicalc`` or ``~/.cache/aicalc``."""
    base = os.environ.get("AICALC_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "aicalc")
    return Path(base)


def _cache_file(root: Path) -> Path | None:
    import zlib

    from aicalc import __version__

    return cache_dir() / f"catalog-{__version__}-{zlib.crc32(str(root).encode()):08x}.json"


MAX_INDEX_BYTES = 64 * 2**20  # the built-in index is ~0.2 MiB; anything far larger is not one


@cache
def _catalog() -> dict:
    """{"files": {relative path: {"data"|"error"}}, "chip": {id: {"data"|"error"}}, "node": {…}}."""
    root = builtin_root()
    stamp = _stamp(root)
    cache_file = _cache_file(root)
    index = _read_index(cache_file, stamp)
    if index is not None:
        return index
    index = _compile(root, stamp)
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_name(f"{cache_file.name}.{os.getpid()}.tmp")
        tmp.write_bytes(_index_bytes(index))
        os.replace(tmp, cache_file)
    except OSError:  # a read-only home: compile in memory on every run
        pass
    return index


def _crc(body: bytes) -> str:
    import zlib

    return f"{zlib.crc32(body):08x}"


def _read_index(cache_file: Path, stamp: list) -> dict | None:
    """The cached index, or None (compile it again) unless it is a regular file of bounded size whose body
    matches the checksum on its first line and has the current format and stamp: a FIFO, a device, a truncated
    or edited file is never trusted, so it can neither hang the run nor feed it malformed records."""
    import stat as st_mode

    try:
        info = os.stat(cache_file)
        if not st_mode.S_ISREG(info.st_mode) or info.st_size > MAX_INDEX_BYTES:
            return None
        with open(cache_file, "rb") as f:
            raw = f.read(MAX_INDEX_BYTES + 1)
        head, _, body = raw.partition(b"\n")
        if head.decode("ascii", "replace") != _crc(body):
            return None
        first, *lines = body.split(b"\n")
        index = _loads(first)
        if not (isinstance(index, dict) and index.get("format") == INDEX_FORMAT and index.get("stamp") == stamp
                and stamp and set(index) == {"format", "stamp"}):
            return None
        # a section's entries held as their JSON lines, each parsed the first time it is asked for: a one-off
        # query reads a model, a chip or two and a few profiles of the ~130 entries (parsing them all cost ~8 M
        # instructions)
        index.update((k, _Lazy()) for k in SECTIONS)
        for line in lines:
            section, key, value = line.split(b"\t", 2)
            index[section.decode("ascii")].raw[key.decode("utf-8")] = value
    except (OSError, ValueError, RecursionError, KeyError, UnicodeDecodeError):
        return None
    return index  # the checksum only catches accidents (anyone can recompute it): _record checks each record it reads


class _Lazy(dict):
    """One section of the cached index: ``get`` parses an entry's JSON line the first time it is asked for;
    a line that is not JSON (the checksum only catches accidents) is an entry that is not there."""

    def __init__(self):
        super().__init__()
        self.raw: dict[str, bytes] = {}

    def get(self, key, default=None):
        if key not in self and key in self.raw:
            try:
                self[key] = _loads(self.raw[key])
            except (ValueError, RecursionError):
                return default
        return super().get(key, default)

    def fresh(self, key):
        """A new copy of an entry, its line parsed again (a fifth of the work of ``copy.deepcopy``); None where
        there is none or its line is not JSON."""
        if key not in self.raw:
            return None
        try:
            return _loads(self.raw[key])
        except (ValueError, RecursionError):
            return None


def _index_bytes(index: dict) -> bytes:
    """The index file: the checksum of the body, then the body: a JSON line of the format and stamp, then a line
    per entry, ``section<TAB>key<TAB>JSON`` (an entry whose key holds a tab or a line break is left out: it is
    read from its preset file)."""
    import json

    lines = [json.dumps({"format": index["format"], "stamp": index["stamp"]})]
    for section in SECTIONS:
        for key, entry in plain(index)[section].items():
            if "\t" not in key and "\n" not in key and "\r" not in key:
                lines.append(f"{section}\t{key}\t{json.dumps(entry)}")
    body = "\n".join(lines).encode("utf-8")
    return f"{_crc(body)}\n".encode() + body


def plain(index: dict) -> dict:
    """The index with every entry parsed (a section read from the cache parses its entries when used)."""
    out = dict(index)
    for section in SECTIONS:
        part = index[section]
        if isinstance(part, _Lazy):
            part = {k: part.get(k) for k in part.raw}
            part = {k: v for k, v in part.items() if v is not None}
        out[section] = part
    return out


# The fields of a chip and a node record as the schema (aicalc/catalog/schema.py) dumps them: "s" a text, "i" an
# integer, "n" a number, "?" or None, "d" dtype → number, "c" an interconnect, "e" efficiency factors, "l" texts.
_RECORD_FIELDS = {
    "chip": {"id": "s", "name": "s", "vendor": "s", "kind": "s", "generation": "s?", "year": "i?", "memory": "i",
             "usable_memory": "i?", "usable_memory_source": "s?", "memory_type": "s", "memory_bandwidth_gbs": "n", "sram": "i?", "sram_bandwidth_gbs": "n?",
             "dense_tflops": "d", "sparse_tflops": "d", "interconnect": "c", "scale_out_gbs": "n?", "efficiency": "e",
             "efficiency_class": "s?", "default_engine": "s?", "tdp_w": "n?", "price_per_hour_usd": "n?", "price_source": "s?", "source": "s",
             "notes": "l"},
    "node": {"id": "s", "name": "s", "chip": "s", "count": "i", "interconnect": "c", "system_power_w": "n?",
             "price_per_hour_usd": "n?", "price_source": "s?", "source": "s", "notes": "l"},
}


def _trusted(kind: str, data, where: Path) -> bool:
    """Whether a chip or node record read from the index cache has the schema's fields and types and every
    figure within the ranges a preset file is held to (:func:`_check_figures`): a cache is checked like a file,
    never trusted for numbers."""
    def number(v, positive=True):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and (not positive or v > 0)

    def ok(code: str, v) -> bool:
        if code.endswith("?"):
            return v is None or ok(code[0], v)
        if code == "s":
            return isinstance(v, str)
        if code == "i":
            return isinstance(v, int) and number(v)
        if code == "n":
            return number(v)
        if code == "d":
            return isinstance(v, dict) and all(k in _DTYPES and number(x) for k, x in v.items())
        if code == "l":
            return isinstance(v, list) and all(isinstance(x, str) for x in v)
        if code == "e":
            return isinstance(v, dict) and all(isinstance(f, dict) and set(f) == {"value", "source"}
                                               and number(f["value"], False) and f["value"] >= 0
                                               and isinstance(f["source"], str) for f in v.values())
        if code == "c":
            return v is None or (isinstance(v, dict) and set(v) <= {"name", "bandwidth_gbs", "direction", "domain"}
                                 and isinstance(v.get("name"), str) and ok("n?", v.get("bandwidth_gbs"))
                                 and v.get("direction", "bidirectional") in ("bidirectional", "per-direction")
                                 and ok("i?", v.get("domain")))
        return False

    fields = _RECORD_FIELDS[kind]
    if not (isinstance(data, dict) and set(data) == set(fields) and all(ok(c, data[k]) for k, c in fields.items())):
        return False
    if kind == "chip" and data["usable_memory"] is not None and (data["usable_memory"] > data["memory"]
                                                                 or not data["usable_memory_source"]):
        return False
    if any(data.get(f) is not None and not is_id(data[f]) for f in ("chip", "efficiency_class",
                                                                           "default_engine")):
        return False
    try:
        _check_figures(data, where)
    except AicalcError:
        return False
    return True


_DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp6", "fp4", "int4")  # schema.DTYPES


class _Decoding:
    """What json's C scanner reads of a decoder: ``json.loads``'s defaults."""

    strict, object_hook, object_pairs_hook, parse_float, parse_int = True, None, None, float, int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__
    memo: dict = {}


def _loads(body: bytes):
    """``json.loads(body)`` of the index (ASCII, as ``json.dumps`` wrote it), through json's C scanner alone where
    CPython has it: importing the json package compiles five patterns of its encoder and decoder (~5 M
    instructions of a one-off query, which neither writes nor reads other JSON). ValueError as json.loads."""
    try:
        from _json import make_scanner
    except ImportError:  # another Python
        import json

        return json.loads(body)
    text = body.decode("utf-8")
    try:
        value, end = make_scanner(_Decoding())(text, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    if end != len(text):
        raise ValueError("extra data after the JSON")
    return value


def _compile(root: Path, stamp: list) -> dict:
    import json

    index: dict[str, Any] = {"format": INDEX_FORMAT, "stamp": stamp, "files": {}, "chip": {}, "node": {}}
    for rel, *_ in stamp:
        if "/" not in rel or rel.startswith(("chips/", "nodes/")):  # chips and nodes: held validated, below
            continue
        path = root / rel
        try:
            data = _parse_yaml(read_text(path), str(path))[0]
        except AicalcError as e:
            index["files"][rel] = {"error": str(e)}
            continue
        try:
            if json.loads(json.dumps(data)) != data:
                continue  # not plain JSON data (dates, NaN): parsed from the YAML when used
        except (TypeError, ValueError):
            continue
        index["files"][rel] = {"data": data}
    for kind in ("chip", "node"):
        folder = root / f"{kind}s"
        for f in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
            try:
                index[kind][f.stem] = {"data": _validated.__wrapped__(kind, f).model_dump(mode="json")}
            except AicalcError as e:
                index[kind][f.stem] = {"error": str(e)}
    return index


def _builtin_rel(path: Path) -> str | None:
    """``path``'s relative POSIX path under the built-in root (lexically, as ``Path.relative_to``), or None where
    it is relative or elsewhere: string operations on the paths' text (a query asks for a dozen files)."""
    if not path.is_absolute():
        return None
    text, root = str(path), str(builtin_root())
    if not text.startswith(root):
        return None
    rest = text[len(root):]
    if not rest.startswith(os.sep) or rest == os.sep:
        return None
    return rest[1:].replace(os.sep, "/")


def _builtin_file(path: Path):
    """A built-in preset file's data from the index (a fresh copy), or None for any other file."""
    rel = _builtin_rel(path)
    if rel is None:
        return None
    files = _catalog()["files"]
    lazy = isinstance(files, _Lazy)  # read from the cache: a fresh copy is its line parsed again (the C scanner)
    entry = files.fresh(rel) if lazy else files.get(rel)
    if entry is None:
        return None
    if "error" in entry:
        raise AicalcError(entry["error"])
    if lazy:
        return entry["data"]
    import copy

    return copy.deepcopy(entry["data"])


@cache
def _record(kind: str, path: Path):
    root = builtin_root()
    if kind in ("chip", "node") and path.is_relative_to(root) and path.parent == root / f"{kind}s":
        entry = _catalog()[kind].get(path.stem)
        if isinstance(entry, dict) and isinstance(entry.get("error"), str):
            raise AicalcError(entry["error"])
        if isinstance(entry, dict) and _trusted(kind, entry.get("data"), path):
            return RECORDS[kind](entry["data"])
        if entry is not None:  # a record the cache holds wrongly (forged, edited): the preset file, as compiled
            return RECORDS[kind](_validated(kind, path).model_dump(mode="json"))
    return RECORDS[kind](_validated(kind, path).model_dump())


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def canonical(kind: str, name: str) -> str | None:
    """The preset id of ``kind`` that ``name`` spells, ignoring case and ``_``/``-`` (``H100-SXM`` →
    ``h100-sxm``); None when there is none."""
    if name in _index(kind):
        return name
    found = _keys(kind).get(_key(name), ())
    return found[0] if len(found) == 1 else None


_KEYS: dict[str, tuple[dict, dict]] = {}  # kind → (the index they were worked out from, its keys)


def _keys(kind: str) -> dict[str, tuple[str, ...]]:
    """:func:`_key` of each preset id of ``kind`` → those ids, in the index's order: worked out once per index
    (:func:`_index`, anew whenever it is), where each lookup went through every id."""
    index = _index(kind)
    held = _KEYS.get(kind)
    if held is None or held[0] is not index:
        out: dict[str, tuple[str, ...]] = {}
        for i in index:
            out[_key(i)] = (*out.get(_key(i), ()), i)
        held = _KEYS[kind] = (index, out)
    return held[1]


def load(kind: str, preset_id: str):
    """The validated preset of ``kind`` with id ``preset_id`` (case-insensitive), as a :class:`Record`."""
    index = _index(kind)
    found = canonical(kind, preset_id)
    if found is None:
        raise UnknownPreset(kind, _short(preset_id), list(index))
    return _record(kind, index[found])


class ModelSpec(Named):
    """A model: its architecture, where its figures come from and, for a model whose files were read (a GGUF
    file, a Hub id, a folder beside safetensors files), its checkpoint's exact bytes."""

    id: str
    name: str
    source: str
    arch: Arch
    official_params: str | None = None
    hf_repo: str | None = None
    checkpoint: object = None  # aicalc.catalog.checkpoint.Checkpoint
    config: dict | None = None  # the Hugging Face config the arch was read from (train-mem --trace builds it)
    release: object = None  # ReleaseFormat: the official checkpoint's precision (None: bf16)


class ReleaseFormat(Named):
    """A preset's ``release:`` block as plain values (see :class:`aicalc.catalog.schema.Release`)."""

    dtype: str
    experts: str | None = None
    source: str = ""
    checkpoint_bytes: int | None = None


def _release(data) -> ReleaseFormat | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        data = data.model_dump()
    return ReleaseFormat(**{k: data.get(k) for k in ReleaseFormat._fields if data.get(k) is not None})


def looks_like_path(name: str) -> bool:
    """A MODEL argument meant as a file or folder rather than a preset id."""
    return "/" in name or os.sep in name or name.endswith(".json") or name in (".", "..")


def _json_pairs(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key '{_short(k, 40)}'")
        out[k] = v
    return out


def _json_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text):,} digits")
    return int(text)


def _json_depth_ok(text: str) -> bool:
    """False when brackets (outside strings) nest deeper than MAX_DEPTH; unbalanced ones are json's to report."""
    import re

    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return True
    brackets = re.sub(r"[^\[\]{}]+", "", re.sub(r'"(?:[^"\\\n]|\\.)*"', "", text))
    for _ in range(MAX_DEPTH):
        shorter = re.sub(r"\[\]|\{\}", "", brackets)
        if shorter == brackets or not shorter:
            return True
        brackets = shorter
    return re.sub(r"\[\]|\{\}", "", brackets) == brackets


def load_json(path: Path) -> Any:
    """A JSON file bounded like :func:`load_yaml`: size, nesting depth, integer length, no duplicate keys."""
    import json

    text = read_text(path)
    if not _json_depth_ok(text):
        raise AicalcError(f"{_short(path)}: nested more than {MAX_DEPTH} levels deep")
    try:
        return json.loads(text, object_pairs_hook=_json_pairs, parse_int=_json_int)
    except json.JSONDecodeError as e:
        raise AicalcError(f"{_short(path)}:{e.lineno}: not a readable JSON file ({e.msg})") from None
    except (ValueError, RecursionError) as e:
        raise AicalcError(f"{_short(path)}: not a readable JSON file ({e})") from None


def _path_kind(name: str) -> tuple[bool, bool]:
    """(meant as a path, is a folder) for a MODEL argument; names the OS cannot hold are no path."""
    path = Path(name)
    try:
        return looks_like_path(name) or path.exists(), path.is_dir()
    except (OSError, ValueError):  # a name too long for the file system, or with a NUL byte
        return looks_like_path(name), False


def resolve_model(name: str) -> ModelSpec:
    """A preset id, a path to a ``config.json``, or a folder holding one."""
    from aicalc.catalog.hf_config import arch_from_config

    is_path, is_dir = _path_kind(name)
    if is_path:
        path = Path(name)
        file = path / "config.json" if is_dir else path
        if not path_is(file, "file"):
            raise AicalcError(f"no config.json at '{_short(name)}'")
        cfg = load_json(file)
        label = cfg.get("_name_or_path") if isinstance(cfg, dict) else None
        label = label if isinstance(label, str) and label else None
        return ModelSpec(id=str(file), name=label or file.parent.name or str(file), source=str(file),
                         arch=arch_from_config(cfg, _short(file)), config=cfg)
    index = _index("model")
    found = canonical("model", name)
    if found is None:
        raise UnknownPreset("model", _short(name), list(index))
    name = found
    path = index[name]
    if path.is_relative_to(builtin_root()):
        # Built-in presets are schema-checked by the test suite (tests/test_catalog_models.py); reading them
        # from the compiled index keeps YAML and pydantic off the path of a one-off query.
        data = load_yaml(path)
        if not isinstance(data, dict):
            raise AicalcError(f"{path}: expected a mapping of fields")
        meta = {k: data.get(k) for k in ("id", "name", "source", "official_params", "hf_repo")}
        meta["release"] = _release(data.get("release"))
        cfg = data.get("config")
    else:
        preset = load("model", name)
        meta = {k: getattr(preset, k) for k in ("id", "name", "source", "official_params", "hf_repo")}
        meta["release"] = _release(preset.release)
        cfg = preset.config
    if not isinstance(cfg, dict):
        raise AicalcError(f"{path}: field 'config' must be a mapping of config.json fields")
    return ModelSpec(arch=arch_from_config(dict(cfg), str(path)), config=dict(cfg), **meta)


CHAT_SUFFIXES = ("-Instruct", "-Chat", "-it")  # a fine-tune's repo beside its base: the same config.json shapes


def preset_for_repo(repo_id: str) -> tuple[str, str] | None:
    """``(preset id, the repo it copies)`` of the model preset whose ``hf_repo`` is ``repo_id`` (case-insensitive),
    or, failing that, is ``repo_id`` less one chat suffix (``meta-llama/Llama-3.1-8B-Instruct`` →
    ``meta-llama/Llama-3.1-8B``: a chat fine-tune keeps its base's shapes); None when no preset copies it. Reads
    each preset's ``hf_repo:`` line only (a fallback when the Hub cannot be reached, not the path of a query)."""
    import re

    wanted = repo_id.casefold()
    bases = [repo_id[: -len(s)].casefold() for s in CHAT_SUFFIXES if repo_id.casefold().endswith(s.casefold())]
    found: dict[str, tuple[str, str]] = {}
    for pid, path in _index("model").items():
        try:
            head = read_text(path)
        except AicalcError:
            continue
        m = re.search(r"^hf_repo:[ \t]*['\"]?([^'\"\s#]+)", head, re.M)
        if m:
            found.setdefault(m.group(1).casefold(), (pid, m.group(1)))
    for key in (wanted, *bases):
        if key in found:
            return found[key]
    return None


def resolve_chip(name: str):
    """``(chip, count)``: a chip id gives one chip, a node id (``dgx-h100``) its chips."""
    chip = canonical("chip", name)
    node = canonical("node", name) if chip is None else None  # a chip id is a chip, whatever a node is called
    if node is not None:
        node = load("node", node)
        return load("chip", node.chip), node.count
    if chip is None:
        raise UnknownPreset("chip", _short(name), list(_index("chip")) + list(_index("node")))
    return load("chip", chip), 1
