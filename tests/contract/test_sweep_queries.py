"""The timer's sweep queries (``Ledger.overdue``, ``CaseRepository.in_status_since``) on every backend: they
return exactly the stuck work, by the store's own clock (Cosmos DB ``_ts``: whole seconds)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import pytest

from casekeeper.core.cases import CaseRepository
from casekeeper.core.clock import ManualClock
from casekeeper.core.entries import CommitPlan
from casekeeper.core.ledger import Ledger
from casekeeper.core.ports import Document, DocumentStore
from casekeeper.errors import DownstreamRejected, EffectFailed, OutcomeUnknown

OLDER_THAN = 2.0


@pytest.fixture
def cases(store: DocumentStore) -> CaseRepository:
    return CaseRepository(store, ManualClock())


def lost(key: str) -> dict[str, object]:
    raise OutcomeUnknown("reply lost")


def refused(key: str) -> dict[str, object]:
    raise DownstreamRejected("no", status=422)


def claimed(ledger: Ledger, case_id: str, call: Callable[[str], dict[str, object]]) -> None:
    """A case whose decision on v1 claimed an effect and called ``call``."""
    ledger.cases.create(case_id, {})
    with contextlib.suppress(OutcomeUnknown, EffectFailed):
        ledger.run(case_id=case_id, action="pay", decided_on_version=1, call=call, commit=CommitPlan("paid"))


def test_the_sweep_queries_return_exactly_the_stuck_work(store: DocumentStore, cases: CaseRepository) -> None:
    ledger = Ledger(store, cases, call_timeout=OLDER_THAN)
    # Stuck: an entry started and never closed, even after a later fact change of its case.
    claimed(ledger, "started", lost)
    claimed(ledger, "started-then-facts", lost)
    assert cases.update_facts("started-then-facts", 1, {"poAmount": "90.00"}, reason="po edited")
    # Not stuck: an entry done (with its commit), or refused.
    claimed(ledger, "done", lambda key: {"ok": True})
    claimed(ledger, "refused", refused)
    # Open with no effect, and a case decided.
    cases.create("open-stuck", {})
    cases.create("decided", {})
    assert cases.commit_status("decided", 1, "approved")
    # A case document that cannot be decoded, which the open-entry query matches.
    store.create("cases", "broken", "broken", {"id": "broken", "kind": "case", "openEffects": True})

    time.sleep(OLDER_THAN + 1.1)  # older than OLDER_THAN by the store's clock, whole seconds included
    claimed(ledger, "started-fresh", lost)  # too young: its reply may still be on its way
    cases.create("open-fresh", {})

    malformed: list[str] = []

    def record(doc: Document, exc: Exception) -> None:
        malformed.append(doc.id)

    overdue = ledger.overdue(on_malformed=record)
    assert sorted(e.case_id for e in overdue) == ["started", "started-then-facts"]
    assert malformed == ["broken"]

    open_cases = cases.in_status_since("open", OLDER_THAN, on_malformed=record)
    assert sorted(c.id for c in open_cases) == ["open-stuck", "refused", "started", "started-then-facts"]
    assert sorted(c.id for c in cases.in_status_since("paid", OLDER_THAN)) == ["done"]

    patient = Ledger(store, cases, call_timeout=600.0)
    assert patient.overdue(on_malformed=record) == [] and cases.in_status_since("open", 600.0) == []
    fresh = [e.case_id for e in ledger.open_entries(on_malformed=record)]
    assert fresh.count("started-fresh") == 1  # left out for its age alone
