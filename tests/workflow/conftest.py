from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.core.ports import DocumentStore
from shared.supplier.stub import SupplierStub
from shared.workflow.capture import uninstall
from tests.support.app import Harness, make_harness


@pytest.fixture(autouse=True)
def _uninstall_capture() -> Iterator[None]:
    yield
    uninstall()


@pytest.fixture
def app(store: DocumentStore, supplier: SupplierStub) -> Harness:
    return make_harness(store, supplier.url)


def posts(supplier: SupplierStub) -> list[dict[str, object]]:
    return [r for r in supplier.requests if r["method"] == "POST"]
