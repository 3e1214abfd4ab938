"""Shared fixtures. Backends are chosen here so that the contract suites run unchanged on each."""

from __future__ import annotations

import importlib
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from casekeeper.core.ports import DocumentStore
from casekeeper.stores.sqlite import SqliteDocumentStore
from devhost.supplier_stub import SupplierStub
from tests.support.supplier import running_supplier

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("cosmos", id="cosmos", marks=pytest.mark.cosmos),
]
STORE_FACTORY_ENV = "CASEKEEPER_STORE_FACTORY"
"""``module:function`` of a third store, ``function(directory: str) -> DocumentStore``: with it set, every
contract suite also runs on that store (docs/guard.md#stores). ``directory`` is a fresh empty folder per
test; calling the function twice with one directory must open the same data (a child process does)."""
if os.environ.get(STORE_FACTORY_ENV):
    BACKENDS.append(pytest.param("factory", id="factory"))


def _store_factory(spec: str) -> Callable[[str], DocumentStore]:
    module, _, name = spec.partition(":")
    factory: Callable[[str], DocumentStore] = getattr(importlib.import_module(module), name)
    return factory


@dataclass(frozen=True)
class StoreSpec:
    """How to open a store: picklable, so a child process can open the same one."""

    kind: str
    sqlite_path: str | None = None
    cosmos_endpoint: str | None = None
    cosmos_key: str | None = None
    cosmos_database: str | None = None
    factory: str | None = None

    def open(self) -> DocumentStore:
        if self.kind == "factory":
            assert self.factory is not None and self.sqlite_path is not None
            return _store_factory(self.factory)(self.sqlite_path)
        if self.kind == "sqlite":
            assert self.sqlite_path is not None
            return SqliteDocumentStore(self.sqlite_path)
        from casekeeper.stores.cosmos import cosmos_store_from_settings

        assert self.cosmos_endpoint and self.cosmos_database
        return cosmos_store_from_settings(self.cosmos_endpoint, self.cosmos_database, self.cosmos_key)


@pytest.fixture
def supplier(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SupplierStub]:
    """The supplier stub on a free loopback port: real HTTP, every request recorded, in memory and in a
    JSON-lines log of its own (not in the test's ``tmp_path``, which stays the test's)."""
    with running_supplier(tmp_path_factory.mktemp("supplier") / "supplier.jsonl") as stub:
        yield stub


@pytest.fixture(scope="session")
def cosmos_server() -> Iterator[object]:
    """The Cosmos DB test server, started once per session on a free loopback port."""
    from devhost.cosmos_server import start_cosmos_server

    server = start_cosmos_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=BACKENDS)
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> StoreSpec:
    if request.param == "sqlite":
        return StoreSpec("sqlite", sqlite_path=str(tmp_path / "store.sqlite"))
    if request.param == "factory":
        return StoreSpec("factory", sqlite_path=str(tmp_path), factory=os.environ[STORE_FACTORY_ENV])
    from devhost.cosmos_server import make_cosmos_store

    server = request.getfixturevalue("cosmos_server")
    database = f"t{uuid.uuid4().hex[:12]}"
    make_cosmos_store(server, database).close()  # creates the database and containers
    return StoreSpec(
        "cosmos",
        cosmos_endpoint=server.endpoint,
        cosmos_key=server.key,
        cosmos_database=database,  # type: ignore[attr-defined]
    )


@pytest.fixture
def store(store_spec: StoreSpec) -> Iterator[DocumentStore]:
    opened = store_spec.open()
    try:
        yield opened
    finally:
        opened.close()
