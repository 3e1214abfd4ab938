"""The trees drawn in ``casekeeper/core/errors.py`` (the guard's) and ``shared/errors.py`` (the invoice
app's, under the guard's) are the trees of classes that exist.

Every module of ``casekeeper`` and ``shared`` is imported. Every ``CasekeeperError`` subclass the guard
defines must appear in the guard's drawing exactly once, under its real base class, with its real
``retryable``; every one the app defines, in the app's drawing the same way. The app's drawing may name a
guard class only as the parent its own classes hang under. No drawing may name a class that does not
exist. A class defined outside its tree's errors module must be named in that module's docstring
together with the module that defines it. A new error anywhere fails this test until a drawing shows it.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType

import pytest

import casekeeper
import shared
from casekeeper.core import errors as guard_errors
from casekeeper.core.errors import CasekeeperError
from shared import errors as app_errors

ROW = re.compile(r"^    (?P<branch>(?:[│ ]   )*(?:[├└]── )?)(?P<name>[A-Z]\w+)\s+(?P<retryable>yes|no)\s+\S")

TREES = {"guard": (guard_errors, "casekeeper."), "app": (app_errors, "shared.")}


@dataclass(frozen=True)
class Row:
    name: str
    parent: str | None
    retryable: bool


def drawn(module: ModuleType) -> list[Row]:
    doc = module.__doc__ or ""
    block = doc.split("::", 1)[1].split("\n\n")[1]  # the literal block after "::"
    lines = block.splitlines()
    assert lines[0].split() == ["CasekeeperError", "retryable", "meaning"], lines[0]
    rows: list[Row] = [Row("CasekeeperError", None, False)]
    stack = ["CasekeeperError"]  # stack[d] is the last class drawn at depth d
    for line in lines[1:]:
        match = ROW.match(line)
        assert match, f"not a row of the tree: {line!r}"
        depth = len(match["branch"]) // 4
        assert 1 <= depth <= len(stack), f"{match['name']} is drawn deeper than its parent"
        del stack[depth:]
        rows.append(Row(match["name"], stack[-1], match["retryable"] == "yes"))
        stack.append(match["name"])
    return rows


def every_module() -> Iterator[str]:
    yield from (m.name for m in pkgutil.walk_packages(casekeeper.__path__, "casekeeper."))
    yield from (m.name for m in pkgutil.walk_packages(shared.__path__, "shared."))


def real_classes() -> dict[str, type[CasekeeperError]]:
    for name in every_module():
        importlib.import_module(name)
    found: dict[str, type[CasekeeperError]] = {"CasekeeperError": CasekeeperError}
    pending = [CasekeeperError]
    while pending:
        for cls in pending.pop().__subclasses__():
            if cls.__module__.startswith(("shared.", "casekeeper.")):
                assert cls.__name__ not in found or found[cls.__name__] is cls, f"two classes named {cls.__name__}"
                found[cls.__name__] = cls
            pending.append(cls)
    return found


def defined_in(prefix: str) -> set[str]:
    return {name for name, cls in real_classes().items() if cls.__module__.startswith(prefix)}


@pytest.mark.parametrize("tree", sorted(TREES))
def test_every_error_class_is_drawn_once_under_its_base_with_its_retryable(tree: str) -> None:
    module, prefix = TREES[tree]
    rows = drawn(module)
    names = [row.name for row in rows]
    assert len(names) == len(set(names)), f"drawn twice: {sorted({n for n in names if names.count(n) > 1})}"
    classes = real_classes()
    own = defined_in(prefix)
    assert sorted(own - set(names)) == [], f"error classes missing from the drawing in {module.__name__}"
    assert sorted(set(names) - set(classes)) == [], "the drawing names classes that do not exist"
    if tree == "app":
        parents = {row.parent for row in rows if row.name in own}
        borrowed = {name for name in names if name not in own}
        assert borrowed <= parents | {"CasekeeperError"}, "the app's drawing names guard classes it adds nothing under"
        assert not own & {row.name for row in drawn(guard_errors)}, "the guard's drawing names the app's errors"
    for row in rows:
        cls = classes[row.name]
        if row.parent is not None:
            assert cls.__bases__ == (classes[row.parent],), f"{row.name} is drawn under {row.parent}"
        assert cls.retryable is row.retryable, f"{row.name}: drawn retryable={row.retryable}, is {cls.retryable}"


@pytest.mark.parametrize("tree", sorted(TREES))
def test_a_class_defined_elsewhere_is_named_with_its_module(tree: str) -> None:
    module, prefix = TREES[tree]
    doc = " ".join((module.__doc__ or "").split())
    for name, cls in real_classes().items():
        if cls.__module__.startswith(prefix) and cls.__module__ != module.__name__:
            assert f"``{name}`` in ``{cls.__module__}``" in doc, f"{module.__name__} does not say where {name} lives"


def test_every_class_says_what_it_means_in_its_own_docstring() -> None:
    undocumented = [name for name, cls in real_classes().items() if not cls.__dict__.get("__doc__")]
    assert undocumented == []
