"""The public face: everything in ``__all__`` exists, and every public name states its contract."""

from __future__ import annotations

import contextlib
import inspect
import re
import types
from types import ModuleType

import pytest

import casekeeper
import casekeeper.agent
import casekeeper.cases
import casekeeper.check
import casekeeper.check_processes
import casekeeper.errors
import casekeeper.stores
from casekeeper.core import errors as core_errors

MODULES = [
    casekeeper,
    casekeeper.agent,
    casekeeper.check,
    casekeeper.check_processes,
    casekeeper.errors,
    casekeeper.cases,
    casekeeper.stores,
]


def _public(module: ModuleType) -> list[tuple[str, object]]:
    return [(name, getattr(module, name)) for name in module.__all__]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_every_exported_name_exists(module: ModuleType) -> None:
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing
    assert len(set(module.__all__)) == len(module.__all__)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_every_public_class_function_and_method_has_a_docstring(module: ModuleType) -> None:
    undocumented: list[str] = []
    for name, obj in _public(module):
        if isinstance(obj, (str, int, float, tuple, frozenset, dict, types.UnionType)):
            continue  # a constant or a union of types: documented where it is defined (its attribute docstring)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            undocumented.append(name)  # a typing alias has no docstring help() could show: make it a class
            continue
        if not inspect.getdoc(obj):
            undocumented.append(name)
        if inspect.isclass(obj) and obj.__module__.startswith("casekeeper"):
            for attr, member in vars(obj).items():
                if attr.startswith("_") or not (inspect.isfunction(member) or isinstance(member, property)):
                    continue
                if not (member.__doc__ or "").strip():
                    undocumented.append(f"{name}.{attr}")
    assert not undocumented


def test_the_whole_error_tree_is_importable_from_the_package() -> None:
    tree = {
        name
        for name, obj in vars(core_errors).items()
        if inspect.isclass(obj) and issubclass(obj, core_errors.CasekeeperError)
    }
    assert tree <= set(casekeeper.__all__)
    assert casekeeper.CaseNotFound is core_errors.CaseNotFound
    for name in ("MissingCommitIntent", "ApprovalNotPending", "StaleApproval"):
        assert issubclass(getattr(casekeeper, name), casekeeper.CasekeeperError)


def test_the_package_is_named_so_it_cannot_collide_and_is_packaged() -> None:
    import tomllib
    from fnmatch import fnmatch
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    guard = tomllib.loads((root / "casekeeper" / "pyproject.toml").read_text())
    assert guard["project"]["name"] == "casekeeper"
    assert set(guard["tool"]["setuptools"]["packages"]) == {"casekeeper", "casekeeper.core", "casekeeper.stores"}
    app = tomllib.loads((root / "pyproject.toml").read_text())
    # The app's distribution: the app and its dev tools, never a copy of the guard.
    include = app["tool"]["setuptools"]["packages"]["find"]["include"]
    assert include == ["shared*", "devhost*", "chaos*", "sim*"]
    assert not [pattern for pattern in include if fnmatch("casekeeper", pattern) or fnmatch("casekeeper.core", pattern)]
    assert casekeeper.Guard.__module__ == "casekeeper.guard"
    assert casekeeper.SystemClock().now() > 1_600_000_000


ABOUT_SOMETHING_ELSE = (
    "CheckpointRecord",  # a stored checkpoint's metadata, and the storage's reads of it
    "CaseCheckpointStorage.records",
    "CaseCheckpointStorage.latest_record",
    "CaseCheckpointStorage.try_decode(record)",
    "Ledger.record_",  # verbs: the ledger records an outcome
)
"""Where a public name says "record" about something other than the guarded object (name prefixes)."""


def _names(qualified: str, obj: object) -> list[str]:
    """``qualified`` and, for a callable, its parameters; for a class, the same for each public member."""
    names = [qualified]
    if callable(obj):
        with contextlib.suppress(TypeError, ValueError):  # a builtin without a signature
            names += [f"{qualified}({p})" for p in inspect.signature(obj).parameters]
    if inspect.isclass(obj) and obj.__module__.startswith("casekeeper"):
        for attr, member in vars(obj).items():
            if not attr.startswith("_"):
                names += _names(f"{qualified}.{attr}", member.fget if isinstance(member, property) else member)
        names += [f"{qualified}.{field}" for field in getattr(obj, "__dataclass_fields__", {})]
    return names


def _says_record(name: str) -> bool:
    words = re.split(r"[^a-z]+", re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower())
    return bool({"record", "records"} & set(words))


def _about_something_else(name: str) -> bool:
    return name.startswith(ABOUT_SOMETHING_ELSE)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_the_public_face_says_case_for_the_guarded_object(module: ModuleType) -> None:
    """One word for the thing a workflow acts on: no public name, member, field or parameter calls it a record."""
    said = {
        name
        for exported, obj in _public(module)
        for name in _names(exported, obj)
        if _says_record(name) and not _about_something_else(name)
    }
    assert not said
