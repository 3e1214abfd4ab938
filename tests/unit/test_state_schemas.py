"""Which changes to a checkpointed type a checkpoint survives (rule R8, ``shared.workflow.state_schemas``).

The property is checked against what Python does, not against a table: an object of the old class is
restored as the new class exactly as unpickling restores a dataclass (``__new__``, then the old object's
``__dict__``; no ``__init__``), and an added field counts as incompatible exactly when reading it from the
restored object raises ``AttributeError``. Removed and retyped fields are incompatible by decision (the
restored object carries a value the new code does not expect), whatever reading them does.
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from casekeeper.state_schemas import Incompatibility, held_by, incompatibilities, schema_of, type_key

Kind = Literal["required", "plain", "factory"]
FIELD_NAMES = ("a", "b", "c", "d", "e")


def make_class(fields: dict[str, tuple[Kind, str]]) -> type:
    """A dataclass with these fields (``name: (kind, annotation)``), required ones first as Python needs."""
    specs: list[tuple[str, Any, Any]] = []
    order = sorted(fields.items(), key=lambda item: item[1][0] != "required")
    for name, (kind, annotation) in order:
        if kind == "required":
            specs.append((name, annotation, dataclasses.field()))
        elif kind == "plain":
            specs.append((name, annotation, dataclasses.field(default=None)))
        else:
            specs.append((name, annotation, dataclasses.field(default_factory=list)))
    return dataclasses.make_dataclass("State", specs)


def restored_as(old: object, new_class: type) -> object:
    """What unpickling ``old``'s pickle yields when its key names ``new_class``: no ``__init__``."""
    restored = new_class.__new__(new_class)
    restored.__dict__.update(old.__dict__)
    return restored


fields_strategy = st.dictionaries(
    st.sampled_from(FIELD_NAMES),
    st.tuples(st.sampled_from(["required", "plain", "factory"]), st.sampled_from(["int", "str"])),
    max_size=len(FIELD_NAMES),
)


@given(old_fields=fields_strategy, new_fields=fields_strategy)
def test_a_change_is_incompatible_exactly_when_a_restored_object_would_break(
    old_fields: dict[str, tuple[Kind, str]], new_fields: dict[str, tuple[Kind, str]]
) -> None:
    old_class, new_class = make_class(old_fields), make_class(new_fields)
    old = old_class(**{name: 1 for name, (kind, _) in old_fields.items() if kind == "required"})
    restored = restored_as(old, new_class)

    found = incompatibilities({"m:State": schema_of(old_class)}, {"m:State": schema_of(new_class)})
    reported = {problem.field for problem in found}
    expected = set()
    for name in new_fields:
        if name not in old_fields:
            try:
                getattr(restored, name)
            except AttributeError:
                expected.add(name)
        elif old_fields[name][1] != new_fields[name][1]:
            expected.add(name)  # retyped
    expected |= set(old_fields) - set(new_fields)  # removed
    assert reported == expected, found


def test_each_side_of_the_rule_with_named_fields() -> None:
    @dataclasses.dataclass
    class Old:
        case_id: str
        amount: int
        note: str = ""

    @dataclasses.dataclass
    class New:
        case_id: str
        amount: str  # retyped
        note: str = "changed default"  # compatible: old objects carry their own note
        reason: str | None = None  # compatible: a class attribute
        approvers: list[str] = dataclasses.field(default_factory=list)  # incompatible

    found = incompatibilities({"m:T": schema_of(Old)}, {"m:T": schema_of(New)})
    assert [(p.field, p.problem.split(":")[0]) for p in found] == [
        ("amount", "annotation changed from 'int' to 'str'"),
        ("approvers", "added with a default_factory"),
    ]
    # Without the factory field the same change but the retyping resumes; a removed field does not.
    assert incompatibilities({"m:T": schema_of(Old)}, {"m:T": {**schema_of(New), "amount": {"type": "int"}}}) == [
        found[1]
    ]
    assert incompatibilities({"m:T": {**schema_of(Old), "gone": {"type": "str"}}}, {"m:T": schema_of(Old)}) == [
        Incompatibility("m:T", "gone", "removed: a restored object still carries it")
    ]
    # A renamed type: the old key is not in the build.
    assert incompatibilities({"m:T": schema_of(Old)}, {"m:U": schema_of(Old)})[0].field is None


def test_a_malformed_stored_schema_is_an_incompatibility_never_an_error() -> None:
    running = {"m:T": {"a": {"type": "int"}}}
    assert [p.text() for p in incompatibilities({"m:T": "nonsense"}, running)] == [
        "m:T: the stored schema is malformed"
    ]
    assert incompatibilities({"m:T": {"a": 3}}, running)[0].field == "a"


@dataclasses.dataclass
class Inner:
    value: int


@dataclasses.dataclass
class Outer:
    inner: Inner
    items: list[Any]


def test_held_by_finds_only_listed_types_anywhere_inside_a_value() -> None:
    value = {"messages": [Outer(Inner(1), [{"k": (Inner(2),)}])], "state": {"x": Unlisted()}}
    keys = frozenset({type_key(Inner), type_key(Outer)})
    assert held_by(value, keys) == {type_key(Inner): schema_of(Inner), type_key(Outer): schema_of(Outer)}
    assert held_by(value, frozenset({type_key(Inner)})) == {type_key(Inner): schema_of(Inner)}
    assert held_by({"only": [1, "x", None]}, keys) == {}


class Unlisted:
    """A type off the list, with attributes of its own: walked into, not recorded."""

    def __init__(self) -> None:
        self.hidden = Inner(3)


def test_a_factory_field_really_is_missing_after_a_real_unpickle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The premise, with pickle itself: the key names the next build's class, the state is the old object's."""
    data = pickle.dumps(Inner(5))
    original = Inner

    @dataclasses.dataclass
    class Widened(original):  # type: ignore[valid-type, misc]
        tags: list[str] = dataclasses.field(default_factory=list)
        label: str | None = None

    Widened.__qualname__ = Widened.__name__ = "Inner"
    monkeypatch.setattr(sys.modules[__name__], "Inner", Widened)  # what the next build's module holds
    restored = pickle.loads(data)
    assert type(restored) is Widened and restored.value == 5 and restored.label is None
    assert not hasattr(restored, "tags")
    [problem] = incompatibilities({"k": schema_of(original)}, {"k": schema_of(Widened)})
    assert (problem.field, problem.problem.split(":")[0]) == ("tags", "added with a default_factory")
