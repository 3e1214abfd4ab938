"""State schemas: the fields of every type a checkpoint holds, and which changes a checkpoint survives (rule R8).

A checkpoint pickles the workflow's dataclasses, and unpickling restores an object's ``__dict__`` without
running ``__init__``. So an object pickled by the previous build has exactly the fields that build
declared, whatever the running build declares now. A field it lacks is looked up on the class: a field
with a plain default is a class attribute and reads as that default; a field without a default, or with a
``default_factory`` (which leaves no class attribute), raises ``AttributeError`` the first time code reads
it, deep inside a resumed run.

A **schema** is, per type key (``module:QualName``), per field: its annotation as written and what an
object that lacks the field reads (``{"type": "str", "default": "None"}``; no ``default`` when it raises).
Every checkpoint document stores the schemas of the application types it actually holds
(``stateSchemas``); before a run is resumed they are compared with the running build's
(:func:`incompatibilities`), as the graph hash is. The rules, for a type a checkpoint holds:

====================================================  ==========  =========================================
change                                                 resumes?    why
====================================================  ==========  =========================================
field added with a plain default (``= None``)          yes         the old object reads the class attribute
field added without a default, or ``default_factory``  no          the old object has no such attribute
field removed                                          no          the old run's state carries a value the
                                                                   code no longer reads: decided without it
field's annotation changed                             no          the old object holds the old type
a field's default changed, fields reordered            yes         the old object holds its own values
type renamed or removed                                no          the old key no longer loads (decoding
                                                                   names it)
type added                                             yes         no old checkpoint holds it
====================================================  ==========  =========================================

A run that cannot be resumed is rebuilt from the case. Keep the schemas your last release wrote in a
committed manifest (like a lock file) and compare them with :func:`current` of your allow-list before
merging (:func:`incompatibilities` names the fix); a changed type then never reaches a deploy unseen.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

FieldSpec = dict[str, str]
"""``{"type": annotation}``, plus ``"default"``: the repr of what an object lacking the field reads (absent:
reading it raises), and ``"factory"``: the name of a dataclass field's ``default_factory``, if it has one."""
TypeSchema = dict[str, FieldSpec]
Schemas = dict[str, TypeSchema]
"""Type key (``module:QualName``) -> field name -> :data:`FieldSpec`."""

_MAX_DEPTH: Final = 32


def type_key(cls: type) -> str:
    """The ``"module:QualName"`` key that pickling and the checkpoint allow-list use for ``cls``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def schema_of(cls: type) -> TypeSchema:
    """The fields of ``cls`` (a dataclass; otherwise its annotations) and what an object lacking each reads."""
    factories: dict[str, str] = {}
    if dataclasses.is_dataclass(cls):
        names = {f.name: f.type for f in dataclasses.fields(cls)}
        for f in dataclasses.fields(cls):
            if f.default_factory is not dataclasses.MISSING:
                factories[f.name] = getattr(f.default_factory, "__qualname__", repr(f.default_factory))
    else:
        names = dict(inspect.get_annotations(cls))
    schema: TypeSchema = {}
    for name, annotation in names.items():
        spec: FieldSpec = {"type": annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)}
        # What attribute lookup on an object without the field finds: the class attribute, if any.
        missing = inspect.getattr_static(cls, name, _NOTHING)
        if missing is not _NOTHING:
            spec["default"] = repr(missing)
        if name in factories:
            spec["factory"] = factories[name]
        schema[name] = spec
    return schema


_NOTHING: Final = object()


def resolve(key: str) -> type | None:
    """The class ``key`` names in this build, or ``None``. Call it only with keys of the build's own
    allow-list: it imports the key's module."""
    module_name, _, qualname = key.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError, ValueError):
        return None
    return target if isinstance(target, type) else None


def current(keys: Iterable[str]) -> Schemas:
    """This build's schemas of the types ``keys`` name (those that resolve to a class)."""
    schemas: Schemas = {}
    for key in sorted(keys):
        cls = resolve(key)
        if cls is not None:
            schemas[key] = schema_of(cls)
    return schemas


def held_by(value: object, keys: frozenset[str]) -> Schemas:
    """The schemas of the types named in ``keys`` that ``value`` holds, anywhere inside it (dataclass
    fields, object attributes, dicts, lists, tuples, sets): what a checkpoint document records."""
    found: dict[str, type] = {}
    seen: set[int] = set()
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if id(item) in seen or depth > _MAX_DEPTH or isinstance(item, str | bytes | int | float | type(None)):
            continue
        seen.add(id(item))
        children: Iterable[object]
        if isinstance(item, Mapping):
            children = [*item.keys(), *item.values()]
        elif isinstance(item, list | tuple | set | frozenset):
            children = item
        else:
            key = type_key(type(item))
            if key in keys:
                found[key] = type(item)
            children = vars(item).values() if hasattr(item, "__dict__") else ()
        stack.extend((child, depth + 1) for child in children)
    return {key: schema_of(cls) for key, cls in sorted(found.items())}


@dataclass(frozen=True)
class Incompatibility:
    """One reason a checkpoint written under the ``stored`` schemas cannot be resumed by this build."""

    type_key: str
    field: str | None
    problem: str

    def text(self) -> str:
        where = self.type_key if self.field is None else f"{self.type_key}.{self.field}"
        return f"{where}: {self.problem}"


def incompatibilities(stored: Mapping[str, Any], running: Mapping[str, TypeSchema]) -> list[Incompatibility]:
    """Why objects pickled under ``stored`` would not work under ``running`` (see the module's table);
    empty when they would. A type key of ``stored`` missing from ``running`` counts as renamed or removed.
    ``stored`` comes from a document: anything malformed in it is an incompatibility, never an error."""
    found: list[Incompatibility] = []
    for key, old in sorted(stored.items()):
        new = running.get(key)
        if new is None:
            found.append(Incompatibility(key, None, "no such type in this build (renamed or removed)"))
            continue
        if not isinstance(old, Mapping):
            found.append(Incompatibility(key, None, "the stored schema is malformed"))
            continue
        for name, spec in sorted(new.items()):
            before = old.get(name)
            if before is None:
                if "default" not in spec:
                    how = "a default_factory" if "factory" in spec else "no default"
                    found.append(
                        Incompatibility(
                            key,
                            name,
                            f"added with {how}: an object restored from a checkpoint lacks it (no __init__ runs)",
                        )
                    )
            elif not isinstance(before, Mapping) or before.get("type") != spec["type"]:
                was = before.get("type") if isinstance(before, Mapping) else before
                found.append(Incompatibility(key, name, f"annotation changed from {was!r} to {spec['type']!r}"))
        for name in sorted(set(old) - set(new)):
            found.append(Incompatibility(key, name, "removed: a restored object still carries it"))
    return found
