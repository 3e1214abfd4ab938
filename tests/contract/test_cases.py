"""The case store's contract (rule R5), on every backend."""

from __future__ import annotations

import pytest

from casekeeper.core.cases import CASE_SCHEMA_VERSION, CaseRepository
from casekeeper.core.clock import ManualClock
from casekeeper.core.ports import DocumentStore
from casekeeper.errors import AlreadyExists, CaseNotFound


@pytest.fixture
def cases(store: DocumentStore) -> CaseRepository:
    return CaseRepository(store, ManualClock())


def test_create_starts_at_version_one_with_the_schema_version(cases: CaseRepository) -> None:
    case = cases.create("c1", {"invoiceAmount": "100.00"})
    assert (case.id, case.status, case.version, case.schema_version) == ("c1", "open", 1, CASE_SCHEMA_VERSION)
    assert case.facts == {"invoiceAmount": "100.00"}
    with pytest.raises(AlreadyExists):
        cases.create("c1", {})
    again, created = cases.create_if_absent("c1", {"other": 1})
    assert created is False and again.facts == {"invoiceAmount": "100.00"}


def test_commit_status_is_conditional_and_increments(cases: CaseRepository) -> None:
    cases.create("c1", {})
    assert cases.commit_status("c1", 1, "approved", reason="within tolerance") is not None
    case = cases.require("c1")
    assert (case.status, case.version) == ("approved", 2)
    assert case.transition_from(1) is not None and case.transition_from(1).status == "approved"  # type: ignore[union-attr]
    # A second writer that decided on v1 is told it lost, and changes nothing.
    assert cases.commit_status("c1", 1, "needs_review") is None
    assert cases.require("c1").status == "approved"


def test_update_facts_bumps_the_version(cases: CaseRepository) -> None:
    cases.create("c1", {"poAmount": "100.00", "currency": "EUR"})
    assert cases.update_facts("c1", 1, {"poAmount": "90.00"}, reason="po.updated") is not None
    case = cases.require("c1")
    assert case.version == 2 and case.facts == {"poAmount": "90.00", "currency": "EUR"}
    assert case.history[-1].facts_changed is True
    assert cases.update_facts("c1", 1, {"poAmount": "80.00"}, reason="late") is None


def test_a_note_does_not_move_the_version_and_a_commit_absorbs_it(cases: CaseRepository) -> None:
    cases.create("c1", {})
    snapshot = cases.require("c1")
    cases.note("c1", "rebuilt from the case document", reason="graph changed")
    assert cases.require("c1").version == 1
    # The snapshot's ETag is now old, but the version is not: the commit still goes through.
    assert cases.commit_status("c1", 1, "approved", expected=snapshot) is not None
    case = cases.require("c1")
    assert case.version == 2 and case.notes[0]["text"] == "rebuilt from the case document"


def test_commit_with_data_fields_and_missing_cases(cases: CaseRepository) -> None:
    cases.create("c1", {})
    assert cases.commit_status("c1", 1, "awaiting_approval", data={"pendingApproval": {"requestId": "r"}})
    assert cases.require("c1").data == {"pendingApproval": {"requestId": "r"}}
    with pytest.raises(CaseNotFound):
        cases.commit_status("ghost", 1, "approved")
    assert cases.get("ghost") is None
