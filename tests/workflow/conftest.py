from __future__ import annotations

from collections.abc import Iterator

import pytest

from casekeeper.capture import uninstall
from casekeeper.core.ports import DocumentStore, Query
from shared.localhost.supplier_stub import SupplierStub
from tests.support.app import Harness, make_harness


@pytest.fixture(autouse=True)
def _uninstall_capture() -> Iterator[None]:
    yield
    uninstall()


@pytest.fixture
def app(store: DocumentStore, supplier: SupplierStub, request: pytest.FixtureRequest) -> Iterator[Harness]:
    harness = make_harness(store, supplier.url)
    yield harness
    # Every path through the workflow must checkpoint cleanly: a failed save is the quiet failure mode
    # (a type missing from the allow-list), and it would otherwise pass unnoticed.
    failures = store.query("health", Query(equals={"record": "checkpoint_failure"}))
    assert not failures, [f.body["error"] for f in failures]
