"""``casekeeper dev`` over real sockets answers a webhook within 5 s while its store is held by another writer:
503 with ``Retry-After``, then 202 once the store answers (docs/design.md#door-budget)."""

from __future__ import annotations

import time

from shared.handlers.door import ANSWER_SECONDS, RETRY_AFTER_SECONDS
from tests.support.dev_host import DevHost
from tests.support.invoices import invoice
from tests.support.locks import write_lock


def test_the_local_host_answers_503_with_retry_after_within_5_s_while_its_store_is_held(host: DevHost) -> None:
    with write_lock(host.data / "casekeeper.sqlite"):
        started = time.monotonic()
        response = host.post_event("invoice.received", "C-held", invoice("1000.00"), delivery="d-held")
        took = time.monotonic() - started
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
    assert took < ANSWER_SECONDS, f"answered after {took:.1f}s"

    response = host.post_event("invoice.received", "C-held", invoice("1000.00"), delivery="d-held")
    assert response.status_code == 202, response.text
    assert host.wait_for("C-held", lambda case: case["case"]["status"] == "approved")
