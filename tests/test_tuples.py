"""aicalc.tuples.Named behaves as typing.NamedTuple for what aicalc's named tuples use (construction by position,
keyword and default, accessors, _replace, _make, _asdict, _fields, _field_defaults, repr, equality, hashing,
pickling and copying, the errors of bad arguments), checked side by side against typing.NamedTuple itself."""

import copy
import pickle
from typing import NamedTuple

import pytest

from aicalc.catalog.arch import Arch, megatron_gpt
from aicalc.tuples import Named


class Ref(NamedTuple):
    a: int
    b: str
    c: float = 1.5
    d: tuple = ()


class Ours(Named):
    a: int
    b: str
    c: float = 1.5
    d: tuple = ()


CALLS = [((1, "x"), {}), ((1, "x", 2.0, (3,)), {}), ((), {"a": 1, "b": "y"}), ((1,), {"b": "y", "d": (4,)}),
         ((1, "x"), {"c": 0.0})]
BAD = [((), {}), ((1,), {}), ((1, "x", 2.0, (), 5), {}), ((1, "x"), {"e": 1}), ((1, "x"), {"a": 2})]


@pytest.mark.parametrize("args, kw", CALLS)
def test_construction_and_interface(args, kw):
    ref, ours = Ref(*args, **kw), Ours(*args, **kw)
    assert tuple(ours) == tuple(ref) and ours == ref and hash(ours) == hash(ref)
    assert repr(ours) == repr(ref).replace("Ref(", "Ours(")
    assert (ours.a, ours.b, ours.c, ours.d) == (ref.a, ref.b, ref.c, ref.d)
    assert ours._asdict() == ref._asdict()
    assert ours._replace(c=9.0, a=0) == ref._replace(c=9.0, a=0)
    assert type(ours._replace(b="z")) is Ours
    assert Ours._make(list(ref)) == ours and type(Ours._make(ref)) is Ours
    assert pickle.loads(pickle.dumps(ours)) == ours and type(pickle.loads(pickle.dumps(ours))) is Ours
    assert copy.deepcopy(ours) == ours and copy.copy(ours) == ours
    assert isinstance(ours, tuple) and not hasattr(ours, "__dict__")


def test_class_attributes():
    assert Ours._fields == Ref._fields and Ours._field_defaults == Ref._field_defaults
    assert Ours.__match_args__ == Ref.__match_args__


@pytest.mark.parametrize("args, kw", BAD)
def test_bad_arguments_raise_as_typing_does(args, kw):
    with pytest.raises(TypeError):
        Ref(*args, **kw)
    with pytest.raises(TypeError):
        Ours(*args, **kw)


def test_replace_and_make_refuse_as_typing_does():
    for cls in (Ref, Ours):
        with pytest.raises(ValueError, match="unexpected field names"):
            cls(1, "x")._replace(e=1)
        with pytest.raises(TypeError):
            cls._make((1, "x"))


def test_a_subclass_keeps_its_base_fields():
    """Arch declares no fields of its own: it keeps _ArchFields', its __new__ fills the per-layer patterns, and
    _replace (through _make) keeps the values given."""
    arch = megatron_gpt(4, 256, 4)
    assert arch._fields[:3] == ("family", "hidden", "layers") and not hasattr(arch, "__dict__")
    assert arch.layer_types == ("full_attention",) * 4 and arch.extra == {}
    assert arch._replace(layers=2).layers == 2 and type(arch._replace(layers=2)) is Arch
    assert pickle.loads(pickle.dumps(arch)) == arch
