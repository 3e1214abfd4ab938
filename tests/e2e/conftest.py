"""End-to-end: ``casekeeper dev`` in its own process, over real sockets, with the supplier stub.

The host and what the tests say to it are in ``tests/support/dev_host.py``; the ``supplier`` fixture is the
root ``tests/conftest.py``'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devhost.supplier_stub import SupplierStub
from tests.support.dev_host import DevHost


@pytest.fixture
def host(tmp_path: Path, supplier: SupplierStub) -> Iterator[DevHost]:
    dev = DevHost(tmp_path / "data", supplier).start()
    try:
        yield dev
    finally:
        dev.stop()
