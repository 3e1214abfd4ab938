"""The supplier stub as the tests run it, and what it was asked."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from devhost.supplier_stub import SupplierStub


@contextmanager
def running_supplier(log_path: Path | None = None) -> Iterator[SupplierStub]:
    """The supplier stub on a free loopback port: real HTTP, every request recorded (and appended to
    ``log_path`` as JSON lines, where the stub reloads them when restarted on the same file)."""
    stub = SupplierStub(port=0, log_path=log_path)
    stub.start()
    try:
        yield stub
    finally:
        stub.stop()


def posts(supplier: SupplierStub) -> list[dict[str, Any]]:
    """The POST requests the stub received (the credit-note requests, and any other POST), in order."""
    return [r for r in supplier.requests if r["method"] == "POST"]
