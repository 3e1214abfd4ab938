"""The tree drawn in ``shared/core/errors.py`` is the tree of classes that exist.

Every module of ``shared`` and ``casekeeper`` is imported, and every ``CasekeeperError`` subclass defined
there must appear in the drawing exactly once, under its real base class, with its real ``retryable``; the
drawing may name no class that does not exist. A class defined outside ``shared.core.errors`` must be named
in the module docstring together with the module that defines it. A new error anywhere in ``shared`` or
``casekeeper`` fails this test
until the drawing shows it.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator
from dataclasses import dataclass

import casekeeper
import shared
from shared.core import errors
from shared.core.errors import CasekeeperError

ROW = re.compile(r"^    (?P<branch>(?:[│ ]   )*(?:[├└]── )?)(?P<name>[A-Z]\w+)\s+(?P<retryable>yes|no)\s+\S")


@dataclass(frozen=True)
class Row:
    name: str
    parent: str | None
    retryable: bool


def drawn() -> list[Row]:
    doc = errors.__doc__ or ""
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
    yield from (m.name for m in pkgutil.walk_packages(shared.__path__, "shared."))
    # The guard's public package defines errors of its own too (the Agent Framework pieces).
    yield from (m.name for m in pkgutil.walk_packages(casekeeper.__path__, "casekeeper."))


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


def test_every_error_class_is_drawn_once_under_its_base_with_its_retryable() -> None:
    rows = drawn()
    names = [row.name for row in rows]
    assert len(names) == len(set(names)), f"drawn twice: {sorted({n for n in names if names.count(n) > 1})}"
    classes = real_classes()
    assert sorted(set(classes) - set(names)) == [], "error classes missing from the drawing in shared/core/errors.py"
    assert sorted(set(names) - set(classes)) == [], "the drawing names classes that do not exist"
    for row in rows:
        cls = classes[row.name]
        if row.parent is not None:
            assert cls.__bases__ == (classes[row.parent],), f"{row.name} is drawn under {row.parent}"
        assert cls.retryable is row.retryable, f"{row.name}: drawn retryable={row.retryable}, is {cls.retryable}"


def test_a_class_defined_elsewhere_is_named_with_its_module() -> None:
    doc = " ".join((errors.__doc__ or "").split())
    for name, cls in real_classes().items():
        if cls.__module__ != errors.__name__:
            assert f"``{name}`` in ``{cls.__module__}``" in doc, f"errors.py does not say where {name} lives"


def test_every_class_says_what_it_means_in_its_own_docstring() -> None:
    undocumented = [name for name, cls in real_classes().items() if not cls.__dict__.get("__doc__")]
    assert undocumented == []
