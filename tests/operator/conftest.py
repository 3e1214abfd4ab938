"""Operator commands run through their ``main([...])`` on a real SQLite store, as ``--data DIR`` opens it;
the cases in it are made by the real worker against a real supplier stub."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from casekeeper.capture import uninstall
from casekeeper.stores.sqlite import SqliteDocumentStore
from shared.localhost.supplier_stub import SupplierStub
from tests.support.app import Harness, make_harness


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    # No local.settings.json and no tuning from the developer's environment.
    monkeypatch.chdir(tmp_path)
    for name in ("CALL_TIMEOUT_SECONDS", "SUPPLIER_TIMEOUT_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    yield
    uninstall()


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def store(data: Path) -> Iterator[SqliteDocumentStore]:
    opened = SqliteDocumentStore(data / "casekeeper.sqlite")  # where the local host keeps it
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def app(store: SqliteDocumentStore, supplier: SupplierStub) -> Harness:
    return make_harness(store, supplier.url)


@dataclass
class Ran:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], data: Path) -> Callable[..., Ran]:
    """``run(main, "show", "C-1", **kwargs)``: the command on this test's store, with what it printed."""

    def go(main: Callable[..., int], *argv: str, **kwargs: Any) -> Ran:
        capsys.readouterr()
        code = main([*argv, "--data", str(data)], **kwargs)
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return go
