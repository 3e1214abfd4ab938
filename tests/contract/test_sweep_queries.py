"""The timer's sweep queries (``CaseRepository.with_open_gate``, ``in_status_since``) on every backend:
they return exactly the stuck cases, by the store's own clock (Cosmos DB ``_ts``: whole seconds)."""

from __future__ import annotations

import time

import pytest

from casekeeper.core.cases import CaseRepository
from casekeeper.core.clock import ManualClock
from casekeeper.core.ports import Document, DocumentStore

OLDER_THAN = 2.0


@pytest.fixture
def cases(store: DocumentStore) -> CaseRepository:
    return CaseRepository(store, ManualClock())


def gated(cases: CaseRepository, case_id: str, key: str) -> None:
    """A case whose version gate let effect ``key`` through on v1."""
    cases.create(case_id, {})
    assert cases.pass_gate(case_id, 1, effect_key=key) is not None


def test_the_sweep_queries_return_exactly_the_stuck_cases(store: DocumentStore, cases: CaseRepository) -> None:
    # Stuck: a gate passed and nothing named its effect since, even after an unrelated fact change.
    gated(cases, "gate-stuck", "k1")
    gated(cases, "gate-then-facts", "k2")
    assert cases.update_facts("gate-then-facts", 1, {"poAmount": "90.00"}, reason="po edited")
    # Not stuck: the gate closed by the effect's commit, by its escalation, or as never to commit.
    gated(cases, "gate-committed", "k3")
    assert cases.commit_status("gate-committed", 1, "credit_requested", effect_key="k3")
    gated(cases, "gate-escalated", "k4")
    assert cases.escalate("gate-escalated", "needs_review", "moved on", effect_key="k4")
    gated(cases, "gate-closed", "k5")
    case = cases.require("gate-closed")
    assert cases.close_gate(case) is not None
    # Open with no gate, and a case decided.
    cases.create("open-stuck", {})
    cases.create("decided", {})
    assert cases.commit_status("decided", 1, "approved")
    # A case document that cannot be decoded, which an open-gate query matches.
    store.create("cases", "broken", "broken", {"id": "broken", "kind": "case", "gateOpen": True, "gate": {}})

    time.sleep(OLDER_THAN + 1.1)  # older than OLDER_THAN by the store's clock, whole seconds included
    gated(cases, "gate-fresh", "k6")  # too young: its commit may still be on its way
    cases.create("open-fresh", {})

    malformed: list[str] = []

    def record(doc: Document, exc: Exception) -> None:
        malformed.append(doc.id)

    stuck_gates = cases.with_open_gate(OLDER_THAN, on_malformed=record)
    assert sorted(c.id for c in stuck_gates) == ["gate-stuck", "gate-then-facts"]
    assert {c.id: c.gate.effect_key for c in stuck_gates if c.gate is not None} == {
        "gate-stuck": "k1",
        "gate-then-facts": "k2",
    }
    assert malformed == ["broken"]

    open_cases = cases.in_status_since("open", OLDER_THAN, on_malformed=record)
    assert sorted(c.id for c in open_cases) == ["gate-closed", "gate-stuck", "gate-then-facts", "open-stuck"]
    assert sorted(c.id for c in cases.in_status_since("needs_review", OLDER_THAN)) == ["gate-escalated"]

    assert cases.with_open_gate(600.0) == [] and cases.in_status_since("open", 600.0) == []
    assert cases.require("gate-fresh").gate is not None  # left out for its age alone
