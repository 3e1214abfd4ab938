"""``casekeeper dev`` over real sockets answers a webhook within 5 s while its store stalls, on SQLite (held by
another writer) and on the Cosmos DB test server (holding every request on the host's database): 503 with
``Retry-After``, then 202 once the store answers (docs/design.md#door-budget)."""

from __future__ import annotations

import contextlib
import functools
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devhost.supplier_stub import SupplierStub
from shared.handlers.door import ANSWER_SECONDS, RETRY_AFTER_SECONDS
from tests.support.dev_host import DevHost
from tests.support.invoices import invoice
from tests.support.locks import write_lock


@pytest.fixture(params=["sqlite", pytest.param("cosmos", marks=pytest.mark.cosmos)])
def stalling_host(
    request: pytest.FixtureRequest, tmp_path: Path, supplier: SupplierStub
) -> Iterator[tuple[DevHost, Callable[[], contextlib.AbstractContextManager[Any]]]]:
    """The local host, and how to make its store stall."""
    if request.param == "sqlite":
        dev = DevHost(tmp_path / "data", supplier).start()
        held: Callable[[], contextlib.AbstractContextManager[Any]] = functools.partial(
            write_lock, dev.data / "casekeeper.sqlite"
        )
    else:
        from devhost.cosmos_server import make_cosmos_store

        server = request.getfixturevalue("cosmos_server")
        database = f"t{uuid.uuid4().hex[:12]}"
        make_cosmos_store(server, database).close()
        env = {
            "CASEKEEPER_STORE": "cosmos",
            "CosmosDBConnection__accountEndpoint": server.endpoint,
            "COSMOS_KEY": server.key,
            "COSMOS_DATABASE": database,
        }
        dev = DevHost(tmp_path / "data", supplier, env_overrides=env).start()

        @contextlib.contextmanager
        def stalled() -> Iterator[None]:
            server.set_faults(database, delay=30.0)
            try:
                yield
            finally:
                server.set_faults(database)

        held = stalled
    try:
        yield dev, held
    finally:
        dev.stop()


def test_the_local_host_answers_503_with_retry_after_within_5_s_while_its_store_stalls(
    stalling_host: tuple[DevHost, Callable[[], contextlib.AbstractContextManager[Any]]],
) -> None:
    host, held = stalling_host
    with held():
        started = time.monotonic()
        response = host.post_event("invoice.received", "C-held", invoice("1000.00"), delivery="d-held")
        took = time.monotonic() - started
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
    assert took < ANSWER_SECONDS, f"answered after {took:.1f}s"

    response = host.post_event("invoice.received", "C-held", invoice("1000.00"), delivery="d-held")
    assert response.status_code == 202, response.text
    assert host.wait_for("C-held", lambda case: case["case"]["status"] == "approved")
