"""The retention policy's stamping writes on every backend (SQLite and the Cosmos DB test server).

A settled effect's ``ttl`` comes from a replace after its partial update, and a closed case's pause
checkpoint gets its ``ttl`` by a patch: both go through the real SDK here. That the documents then expire
is checked on SQLite (tests/contract/test_time_to_live.py); the test server keeps them whatever their ttl.
"""

from __future__ import annotations

from shared.app.retention import DAY, RetainingStore, Retention
from shared.core.cases import CaseRepository
from shared.core.clock import ManualClock
from shared.core.ports import DocumentStore


def effect(doc_id: str, **fields: object) -> dict[str, object]:
    return {"id": doc_id, "caseId": "c1", **fields}


def test_the_retention_policy_stamps_through_either_store(store: DocumentStore) -> None:
    retaining = RetainingStore(store, Retention())
    retaining.create("effects", "c1", "e1", effect("e1", status="started"))
    settled = retaining.update_if("effects", "c1", "e1", where={"status": "started"}, set_fields={"status": "done"})
    assert settled.body["ttl"] == 90 * DAY
    stored = store.read("effects", "c1", "e1")
    assert stored is not None and stored.body["ttl"] == 90 * DAY and stored.etag == settled.etag

    cases = CaseRepository(retaining, ManualClock())
    cases.create("c1", {})
    assert cases.commit_status("c1", 1, "awaiting_approval")
    pause = {"id": "p1", "caseId": "c1", "kind": "checkpoint", "pendingRequestIds": ["r1"]}
    retaining.create("checkpoints", "c1", "p1", pause)
    assert cases.commit_status("c1", 2, "approved")
    checkpoint = store.read("checkpoints", "c1", "p1")
    assert checkpoint is not None and checkpoint.body["ttl"] == 7 * DAY
    case = store.read("cases", "c1", "c1")
    assert case is not None and case.body["ttl"] == 90 * DAY
