"""``Named``: a named tuple declared like ``typing.NamedTuple`` (fields as annotations, defaults as values), built
without compiling code at import.

``typing.NamedTuple`` (through ``collections.namedtuple``) compiles each class's ``__new__`` from source when the
module is imported: ~20-200 µs a class, ~2 ms (~9 M instructions) for the ~25 classes of a one-off query
(docs/robustness.md). Here one ``__new__``, written once, maps arguments to fields, and the class gets the named
tuple's interface: field accessors, ``_fields``, ``_field_defaults``, ``_make``, ``_replace``, ``_asdict``,
``__repr__`` and pickling (``__getnewargs__``), behaving as ``typing.NamedTuple``'s do. A subclass that declares no
fields (``Arch`` over ``_ArchFields``) keeps its base's.
"""

try:
    from _collections import _tuplegetter
except ImportError:  # another Python
    from operator import itemgetter as _itemgetter

    def _tuplegetter(index, doc):
        return property(_itemgetter(index), doc=doc)


class _NamedMeta(type):
    """Turns a ``Named`` subclass's annotations into fields: slots off (``__slots__ = ()``), an accessor per field
    in place of its default."""

    def __new__(mcls, name, bases, ns):
        ns.setdefault("__slots__", ())
        notes = ns.get("__annotations__")
        if notes and any(isinstance(b, _NamedMeta) for b in bases):
            fields = tuple(notes)
            defaults = {}
            for i, field in enumerate(fields):
                if field.startswith("_"):
                    raise ValueError(f"{name}: field names cannot start with an underscore: {field!r}")
                if field in ns:
                    defaults[field] = ns[field]
                elif defaults:
                    raise TypeError(f"{name}: non-default field {field!r} follows a default field")
                ns[field] = _tuplegetter(i, f"Alias for field number {i}")
            ns["_fields"] = fields
            ns["_field_defaults"] = defaults
            ns["__match_args__"] = fields
        return super().__new__(mcls, name, bases, ns)


class Named(tuple, metaclass=_NamedMeta):
    """Base of aicalc's named tuples (module docstring)."""

    _fields = ()
    _field_defaults = {}

    def __new__(cls, *args, **kw):
        if kw or len(args) != len(cls._fields):
            args = _arguments(cls, args, kw)
        return tuple.__new__(cls, args)

    @classmethod
    def _make(cls, iterable):
        result = tuple.__new__(cls, iterable)
        if len(result) != len(cls._fields):
            raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(result)}")
        return result

    def _replace(self, /, **kw):
        result = self._make(map(kw.pop, self._fields, self))
        if kw:
            raise ValueError(f"Got unexpected field names: {list(kw)!r}")
        return result

    def _asdict(self) -> dict:
        return dict(zip(self._fields, self, strict=True))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({', '.join(f'{k}={v!r}' for k, v in zip(self._fields, self, strict=True))})"

    def __getnewargs__(self):
        return tuple(self)


def _arguments(cls, args: tuple, kw: dict) -> tuple:
    """The field values of ``cls(*args, **kw)``: positional ones, then keywords, then defaults; TypeError as a
    function of those parameters raises."""
    fields, name = cls._fields, cls.__name__
    if len(args) > len(fields):
        raise TypeError(f"{name}() takes {len(fields)} positional arguments but {len(args)} were given")
    defaults = cls._field_defaults
    out = list(args)
    used = 0
    for field in fields[len(args):]:
        if field in kw:
            out.append(kw[field])
            used += 1
        elif field in defaults:
            out.append(defaults[field])
        else:
            raise TypeError(f"{name}() missing required argument: '{field}'")
    if used != len(kw):
        for k in kw:
            if k not in fields:
                raise TypeError(f"{name}() got an unexpected keyword argument '{k}'")
            if fields.index(k) < len(args):
                raise TypeError(f"{name}() got multiple values for argument '{k}'")
    return tuple(out)
