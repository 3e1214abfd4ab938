"""The money invariant the property and stateful tests check (``tests.support.money``) is strict, and an over-ask
is excused only by an ``over_requested`` alert naming its case with at least its excess."""

from __future__ import annotations

from typing import Any

from casekeeper.core.cases import Case
from casekeeper.core.effect import Effect
from casekeeper.core.ports import Document
from tests.support.money import money_violations

INITIAL = {"invoiceAmount": "1100.00", "poAmount": "1000.00", "currency": "EUR"}


def case() -> Case:
    """A case of 100.00 over-billed that went to a person at v1 -> v2 and asked at v1 and at v2."""
    body = {
        "id": "C-1",
        "status": "credit_requested",
        "version": 3,
        "schemaVersion": 1,
        "facts": INITIAL,
        "history": [
            {"fromVersion": 1, "status": "needs_review", "factsChanged": False},
            {"fromVersion": 2, "status": "credit_requested", "factsChanged": False},
        ],
    }
    return Case.from_document(Document("cases", "C-1", "C-1", body, "e", 0.0))


def effect(key: str, version: int) -> Effect:
    body = {"caseId": "C-1", "action": "request_credit_note", "caseVersion": version, "status": "done"}
    return Effect.from_document(Document("effects", "C-1", key, body, "e", 0.0))


def created(key: str, note: str) -> dict[str, Any]:
    body = {"caseId": "C-1", "amount": "100.00"}
    return {"method": "POST", "created": True, "body": body, "idempotencyKey": key, "creditNoteId": note}


def problems(*told: dict[str, Any]) -> list[str]:
    requests = [created("k1", "CN-1"), created("k2", "CN-2")]
    return money_violations(INITIAL, case(), [effect("k1", 1), effect("k2", 2)], requests, over_requested=told)


def test_asking_twice_for_what_is_owed_once_is_a_violation_unless_a_person_was_told() -> None:
    [problem] = problems()
    assert "outstanding 100.00" in problem and "exceeds invoice - PO = 100.00" in problem
    assert problems({"caseId": "C-1", "excess": "100.00"}) == []
    assert len(problems({"caseId": "C-2", "excess": "100.00"})) == 1
    assert len(problems({"caseId": "C-1", "excess": "99.99"})) == 1
