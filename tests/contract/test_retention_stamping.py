"""The retention policy's stamping writes on every backend (SQLite and the Cosmos DB test server).

A case's archived effects and pause checkpoint get their ``ttl`` by patches when it closes, and its effects lose it
when it reopens: all through the real SDK here. That the documents then expire is checked on SQLite
(tests/contract/test_time_to_live.py); the test server keeps them whatever their ttl.
"""

from __future__ import annotations

from casekeeper.core.cases import CaseRepository
from casekeeper.core.clock import ManualClock
from casekeeper.core.ports import DocumentStore
from shared.app.retention import DAY, RetainingStore, Retention


def effect(case_id: str, doc_id: str, **fields: object) -> dict[str, object]:
    return {"id": doc_id, "caseId": case_id, **fields}


def test_the_retention_policy_stamps_through_either_store(store: DocumentStore) -> None:
    retaining = RetainingStore(store, Retention())
    cases = CaseRepository(retaining, ManualClock())

    def ttl(container: str, partition: str, doc_id: str) -> object:
        doc = store.read(container, partition, doc_id)
        assert doc is not None
        return doc.body.get("ttl")

    # A credit-note request, counted while the case is open, stamped when it closes.
    cases.create("c1", {})
    # A partial update (patch) of the case, then an archived effect of it, patched too.
    assert retaining.update_if("cases", "c1", "c1", where={"version": 1}, set_fields={"openEffects": False})
    retaining.create("effects", "c1", "e1", effect("c1", "e1", status="failed"))
    retaining.update_if("effects", "c1", "e1", where={"status": "failed"}, set_fields={"status": "done"})
    assert cases.commit_status("c1", 1, "credit_requested", effect_key="e1")
    assert ttl("effects", "c1", "e1") is None
    assert cases.commit_status("c1", 2, "closed")
    assert ttl("cases", "c1", "c1") == 90 * DAY and ttl("effects", "c1", "e1") == 90 * DAY

    # A pause checkpoint, patched to the finished run's ttl when its case is approved, then reopened.
    cases.create("c2", {})
    assert cases.commit_status("c2", 1, "awaiting_approval")
    retaining.create(
        "checkpoints", "c2", "p1", {"id": "p1", "caseId": "c2", "kind": "checkpoint", "pendingRequestIds": ["r1"]}
    )
    assert ttl("checkpoints", "c2", "p1") == 90 * DAY
    retaining.create("effects", "c2", "e2", effect("c2", "e2", status="done"))
    assert cases.commit_status("c2", 2, "approved", effect_key="e2")
    assert ttl("checkpoints", "c2", "p1") == 7 * DAY and ttl("effects", "c2", "e2") == 90 * DAY
    assert cases.commit_status("c2", 3, "open")
    assert ttl("cases", "c2", "c2") is None and ttl("effects", "c2", "e2") == -1
