"""``GET /api/cases/{id}``: each history entry carries the person's answer its transition committed (issue
27), as data, described by the OpenAPI document; a transition that committed none says ``null``."""

from __future__ import annotations

import json
from typing import Any

import azure.functions as func
from openapi_schema_validator import OAS31Validator

from casekeeper import Answer
from shared.app.bootstrap import Services
from shared.web import openapi
from tests.triggers.conftest import user_function

SPEC: dict[str, Any] = json.loads(openapi.SPEC_FILE.read_text())


def get_case(functions: dict[str, Any], case_id: str) -> dict[str, Any]:
    req = func.HttpRequest(
        method="GET", url=f"http://localhost/api/cases/{case_id}", body=b"", route_params={"caseId": case_id}
    )
    response = user_function(functions, "get_case")(req)
    assert response.status_code == 200
    body: dict[str, Any] = json.loads(response.get_body())
    return body


def case_document_schema() -> OAS31Validator:
    answer = SPEC["paths"]["/cases/{caseId}"]["get"]["responses"]["200"]
    schema = answer["content"]["application/json"]["schema"]
    return OAS31Validator({**schema, "components": SPEC["components"]})


def awaiting_then_answered(svc: Services, case_id: str, answer: Answer | None, reason: str) -> None:
    svc.cases.create(case_id, {"invoiceId": case_id})
    pending = {"requestId": "apr-1", "caseVersion": 2}
    asked = svc.cases.commit_status(
        case_id, 1, "awaiting_approval", reason="approval requested for 1500.00 EUR", data={"pendingApproval": pending}
    )
    assert asked is not None
    answered = svc.cases.commit_status(
        case_id, 2, "needs_review", reason=reason, data={"pendingApproval": None}, answer=answer
    )
    assert answered is not None


def test_the_answer_a_transition_committed_is_in_its_history_entry(functions: dict[str, Any], svc: Services) -> None:
    answer = Answer("apr-1", False, "ana@example.com <oid:oid-ana>", 2, reason="wrong PO, but see mail")
    awaiting_then_answered(svc, "INV-1", answer, "rejected by ana@example.com <oid:oid-ana> (reason: wrong PO)")
    document = get_case(functions, "INV-1")
    case_document_schema().validate(document)
    [asked, answered] = document["history"]
    assert asked["answer"] is None  # asking is no answer
    assert answered["answer"] == {
        "requestId": "apr-1",
        "approved": False,
        "by": "ana@example.com <oid:oid-ana>",
        "onVersion": 2,
        "reason": "wrong PO, but see mail",
    }
    # The approvals' history says the same, from the same field.
    assert document["approvals"]["history"][1]["by"] == answered["answer"]["by"]


def test_an_answer_that_is_not_the_described_shape_fails_the_schema() -> None:
    """The schema is not a blank cheque: the test above would catch a document the description refuses."""
    entry = {"fromVersion": 2, "toVersion": 3, "status": "needs_review", "at": 1.0, "answer": {"by": "ana"}}
    document = {
        "case": {"id": "C", "status": "open", "version": 3, "schemaVersion": 1, "facts": {}},
        "credit": None,
        "history": [entry],
        "effects": [],
        "pendingApproval": None,
        "approvals": {},
        "notes": [],
    }
    assert not case_document_schema().is_valid(document)
    entry["answer"] = None
    assert case_document_schema().is_valid(document)
