"""The HTTP functions invoked as the host would, with ``azure.functions.HttpRequest``.

Every rejected request is checked to have enqueued nothing: the local session queue is read back.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import azure.functions as func
import pytest

from shared.app.bootstrap import Services
from shared.domain.events import CaseEvent
from shared.localhost.supplier_stub import SupplierStub
from shared.messaging.sqlite_queue import LocalSessionQueue
from shared.web.identity import APPROVER_ROLE, OPERATOR_ROLE, PRINCIPAL_HEADER, encode_principal
from tests.triggers.conftest import QUEUE, SECRET, signed_request, user_function


def event(**overrides: Any) -> bytes:
    body = {
        "type": "invoice.received",
        "caseId": "INV-1001",
        "data": {
            "invoiceId": "INV-1001",
            "supplierId": "SUP-1",
            "poNumber": "PO-1",
            "invoiceAmount": "1250.00",
            "poAmount": "1000.00",
            "currency": "EUR",
        },
    }
    body.update(overrides)
    return json.dumps(body).encode()


def call(functions: dict[str, Any], name: str, req: func.HttpRequest) -> tuple[int, dict[str, Any]]:
    response = user_function(functions, name)(req)
    return response.status_code, json.loads(response.get_body())


def test_a_signed_event_is_enqueued_into_its_case_session(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    status, body = call(functions, "events", signed_request(event(), delivery="dlv-1"))
    assert (status, body) == (202, {"accepted": True, "deliveryId": "dlv-1"})
    [msg] = queue.peek(QUEUE)
    assert (msg.session_id, msg.message_id) == ("INV-1001", "webhook:dlv-1")
    assert json.loads(msg.body)["data"]["invoiceAmount"] == "1250.00"


def test_a_redelivered_webhook_is_dropped_by_the_broker(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    for _ in range(3):
        assert call(functions, "events", signed_request(event(), delivery="dlv-same"))[0] == 202
    assert len(queue.peek(QUEUE)) == 1


def test_the_previous_secret_still_verifies_during_rotation(functions: dict[str, Any], svc: Services) -> None:
    assert call(functions, "events", signed_request(event(), secret="old-secret"))[0] == 202


@pytest.mark.parametrize(
    ("request_factory", "status", "reason"),
    [
        (lambda: signed_request(event(), secret=""), 401, "missing Casekeeper-Signature"),
        (lambda: signed_request(event(), secret="wrong"), 401, "does not match"),
        (lambda: signed_request(event(), at=time.time() - 301), 401, "more than 300s"),
        (lambda: signed_request(event(), signature="v1=abc"), 401, "malformed"),
        (lambda: signed_request(event(), delivery=None), 400, "Casekeeper-Delivery"),
        (lambda: signed_request(b"x" * (256 * 1024 + 1)), 413, "at most"),
        (lambda: signed_request(event(), content_type="text/plain"), 415, "application/json"),
        (lambda: signed_request(b"{not json"), 415, "not valid UTF-8 JSON"),
        (lambda: signed_request(event(type="invoice.paid")), 400, "type must be one of"),
        (lambda: signed_request(event(type="approval.answered")), 400, "type must be one of"),
        (lambda: signed_request(event(caseId="")), 400, "caseId"),
        (lambda: signed_request(event(data={"poAmount": 12.5})), 400, "data."),
    ],
    ids=[
        "unsigned",
        "wrong-secret",
        "expired",
        "malformed-signature",
        "no-delivery-id",
        "too-large",
        "not-json-type",
        "not-json-body",
        "unknown-type",
        "internal-type",
        "empty-case-id",
        "bad-fields",
    ],
)
def test_bad_input_is_refused_whole_and_nothing_is_enqueued(
    functions: dict[str, Any],
    svc: Services,
    queue: LocalSessionQueue,
    request_factory: Any,
    status: int,
    reason: str,
) -> None:
    got, body = call(functions, "events", request_factory())
    assert got == status
    assert reason in body["error"]
    assert queue.peek(QUEUE) == []


def test_every_offending_field_is_named(functions: dict[str, Any], svc: Services) -> None:
    data = {
        "invoiceId": "INV-1",
        "supplierId": "",
        "poNumber": "PO",
        "invoiceAmount": "12.345",
        "poAmount": 10,
        "currency": "euro",
        "extra": True,
    }
    status, body = call(functions, "events", signed_request(event(data=data)))
    assert status == 400
    assert set(body["fields"]) == {
        "data.supplierId",
        "data.invoiceAmount",
        "data.poAmount",
        "data.currency",
        "data.extra",
    }


def approval(
    case_id: str, request_id: str, payload: dict[str, Any], headers: dict[str, str] | None = None
) -> func.HttpRequest:
    return func.HttpRequest(
        method="POST",
        url=f"http://localhost/api/cases/{case_id}/approvals/{request_id}",
        headers={"Content-Type": "application/json", **(headers or {})},
        route_params={"caseId": case_id, "requestId": request_id},
        body=json.dumps(payload).encode(),
    )


def awaiting(svc: Services, case_id: str, request_id: str = "apr-1") -> int:
    """A case waiting for an answer to ``request_id``; returns the version it waits on (2)."""
    svc.cases.create(case_id, {"x": 1})
    pending = {"requestId": request_id, "caseVersion": 2}
    asked = svc.cases.commit_status(case_id, 1, "awaiting_approval", reason="asked", data={"pendingApproval": pending})
    assert asked is not None
    return asked.version


def test_a_function_key_callers_approval_is_enqueued_under_the_name_it_gives(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    awaiting(svc, "INV-1001")
    answer = {"decision": "approve", "caseVersion": 2, "approver": "ana"}
    status, body = call(functions, "approvals", approval("INV-1001", "apr-1", answer))
    # No signed-in identity: a key holder, recorded as such, never as the person it names.
    assert (status, body) == (202, {"accepted": True, "requestId": "apr-1", "approver": "key:ana"})
    call(functions, "approvals", approval("INV-1001", "apr-1", answer))  # the same answer twice: one message
    [msg] = queue.peek(QUEUE)
    assert msg.session_id == "INV-1001"
    assert json.loads(msg.body)["data"] == {"requestId": "apr-1", **answer, "approver": "key:ana"}


def signed_in(name: str, *roles: str) -> dict[str, str]:
    """As Easy Auth sends a Microsoft Entra ID user: display name, app roles and the object id."""
    oid = f"oid-{name.split('@', maxsplit=1)[0]}"
    return {PRINCIPAL_HEADER: encode_principal(name, roles, auth_type="aad", object_id=oid)}


@pytest.mark.usefixtures("behind_easy_auth")
def test_a_signed_in_approvers_answer_is_recorded_as_that_identity(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    awaiting(svc, "INV-1001")
    answer = {"decision": "reject", "caseVersion": 2, "reason": "wrong supplier"}
    ana = signed_in("ana@example.com", APPROVER_ROLE)
    status, body = call(functions, "approvals", approval("INV-1001", "apr-1", answer, ana))
    # The immutable object id, with the display name for reading.
    assert (status, body["approver"]) == (202, "ana@example.com <oid:oid-ana>")
    [msg] = queue.peek(QUEUE)
    assert json.loads(msg.body)["data"] == {"requestId": "apr-1", **answer, "approver": "ana@example.com <oid:oid-ana>"}


def test_off_easy_auth_a_principal_header_a_client_sent_is_not_believed(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    # func start, a container: no platform strips the header, so anyone could send it with every role.
    awaiting(svc, "INV-1001")
    forged = signed_in("boss@example.com", APPROVER_ROLE, OPERATOR_ROLE)
    status, body = call(
        functions, "approvals", approval("INV-1001", "apr-1", {"decision": "approve", "caseVersion": 2}, forged)
    )
    assert status == 400 and "function-key caller names itself" in body["fields"]["approver"]
    status, body = call(
        functions,
        "approvals",
        approval("INV-1001", "apr-1", {"decision": "approve", "caseVersion": 2, "approver": "x"}, forged),
    )
    assert (status, body["approver"]) == (202, "key:x")  # a key holder, never the person the header names


@pytest.mark.usefixtures("behind_easy_auth")
def test_a_signed_in_caller_cannot_answer_as_someone_else_or_without_the_role(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    awaiting(svc, "INV-1001")
    ana = signed_in("ana@example.com", APPROVER_ROLE)
    typed = {"decision": "approve", "caseVersion": 2, "approver": "boss@example.com"}
    status, body = call(functions, "approvals", approval("INV-1001", "apr-1", typed, ana))
    assert status == 400 and "signed-in identity" in body["fields"]["approver"]
    olga = signed_in("olga@example.com", OPERATOR_ROLE)
    status, body = call(
        functions, "approvals", approval("INV-1001", "apr-1", {"decision": "approve", "caseVersion": 2}, olga)
    )
    assert status == 403 and APPROVER_ROLE in body["error"]
    assert queue.peek(QUEUE) == []


def test_bad_approvals_are_refused(functions: dict[str, Any], svc: Services, queue: LocalSessionQueue) -> None:
    assert call(functions, "approvals", approval("ghost", "apr-1", {"decision": "approve"}))[0] == 404
    svc.cases.create("INV-1001", {})
    status, body = call(functions, "approvals", approval("INV-1001", "apr-1", {"decision": "maybe", "caseVersion": 0}))
    assert status == 400
    assert set(body["fields"]) == {"decision", "caseVersion", "approver"}
    assert "function-key caller names itself" in body["fields"]["approver"]
    # "key:" alone names nobody.
    status, body = call(
        functions,
        "approvals",
        approval("INV-1001", "apr-1", {"decision": "approve", "caseVersion": 2, "approver": "key:"}),
    )
    assert status == 400 and "function-key caller names itself" in body["fields"]["approver"]
    assert queue.peek(QUEUE) == []


@pytest.mark.parametrize("route", ["approvals", "withdraw_request"])
def test_the_json_routes_take_only_json_and_survive_any_nesting(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue, route: str
) -> None:
    svc.cases.create("INV-1001", {})
    params = {"caseId": "INV-1001", "requestId": "apr-1", "effectKey": "k1"}
    body = {"decision": "approve", "caseVersion": 2, "approver": "ana", "by": "ana", "why": "x"}

    def post(content: bytes, content_type: str | None) -> tuple[int, dict[str, Any]]:
        headers = {"Content-Type": content_type} if content_type else {}
        req = func.HttpRequest(
            method="POST", url="http://localhost/api/x", headers=headers, route_params=params, body=content
        )
        return call(functions, route, req)

    # What a web page may send to another site without asking first: text/plain, a form, nothing declared.
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        status, answer = post(json.dumps(body).encode(), content_type)
        assert status == 415 and "application/json" in answer["error"]
    status, answer = post(b"[" * 100_000, "application/json")
    assert status == 400 and "nested too deeply" in answer["error"]
    assert queue.peek(QUEUE) == []


def test_get_case_shows_the_case_its_effects_and_the_pending_approval(functions: dict[str, Any], svc: Services) -> None:
    svc.cases.create("INV-1", {"invoiceId": "INV-1"})
    req = func.HttpRequest(
        method="GET", url="http://localhost/api/cases/INV-1", body=b"", route_params={"caseId": "INV-1"}
    )
    status, body = call(functions, "get_case", req)
    assert status == 200
    assert body["case"] == {
        "id": "INV-1",
        "status": "open",
        "version": 1,
        "schemaVersion": 1,
        "facts": {"invoiceId": "INV-1"},
    }
    assert body["effects"] == [] and body["pendingApproval"] is None
    missing = func.HttpRequest(method="GET", url="http://localhost/api/cases/x", body=b"", route_params={"caseId": "x"})
    assert call(functions, "get_case", missing)[0] == 404


def test_health(functions: dict[str, Any], svc: Services) -> None:
    req = func.HttpRequest(method="GET", url="http://localhost/api/health", body=b"")
    assert call(functions, "health", req) == (200, {"status": "ok", "store": "sqlite", "queue": "local"})


def test_anonymous_health_checks_cost_the_store_one_query_per_interval(
    functions: dict[str, Any], svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    queries: list[str] = []
    real = svc.ops.store.query
    monkeypatch.setattr(svc.ops.store, "query", lambda container, q: queries.append(container) or real(container, q))
    req = func.HttpRequest(method="GET", url="http://localhost/api/health", body=b"")
    for _ in range(50):
        assert call(functions, "health", req)[0] == 200
    assert queries.count("health") == 1  # not one per request


def test_the_secret_is_never_echoed(functions: dict[str, Any], svc: Services) -> None:
    _, body = call(functions, "events", signed_request(event(), secret="wrong"))
    assert SECRET not in json.dumps(body)


BAD_IDS = ["INV/2026/0042", "back\\slash", "what?", "frag#1", " leading", "trailing ", "bell\x07", "x" * 129, ".", ".."]


@pytest.mark.parametrize("bad_id", BAD_IDS)
def test_an_id_no_backend_can_store_is_refused_at_the_door_naming_the_field(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue, bad_id: str
) -> None:
    """Case ids, delivery ids and approval ids follow one rule (casekeeper.core.ids), on every backend: an
    id that would be accepted and then fail forever in the store gets a 400 instead."""
    status, body = call(functions, "events", signed_request(event(caseId=bad_id, data={}, type="case.investigate")))
    assert (status, list(body["fields"])) == (400, ["caseId"])
    status, body = call(functions, "events", signed_request(event(), delivery=bad_id))
    assert (status, list(body["fields"])) == (400, ["Casekeeper-Delivery"])
    status, body = call(functions, "approvals", approval(bad_id, "apr-1", {}))
    assert (status, list(body["fields"])) == (400, ["caseId"])
    svc.cases.create("INV-1001", {})
    status, body = call(functions, "approvals", approval("INV-1001", bad_id, {}))
    assert (status, list(body["fields"])) == (400, ["requestId"])
    req = func.HttpRequest(method="GET", url="http://localhost/api/cases/x", body=b"", route_params={"caseId": bad_id})
    assert call(functions, "get_case", req)[0] == 400
    assert queue.peek(QUEUE) == []


def test_ids_with_inner_spaces_and_unicode_are_accepted(functions: dict[str, Any], svc: Services) -> None:
    status, _ = call(functions, "events", signed_request(event(caseId="INV 2026 ÄÖ-42"), delivery="d 1"))
    assert status == 202


def withdrawal(
    case_id: str, key: str, payload: dict[str, Any], headers: dict[str, str] | None = None
) -> func.HttpRequest:
    return func.HttpRequest(
        method="POST",
        url=f"http://localhost/api/cases/{case_id}/requests/{key}/withdraw",
        headers={"Content-Type": "application/json", **(headers or {})},
        route_params={"caseId": case_id, "effectKey": key},
        body=json.dumps(payload).encode(),
    )


def test_a_withdrawal_is_queued_into_the_case_session_with_who_and_why(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    assert call(functions, "withdraw_request", withdrawal("ghost", "k1", {"by": "a", "why": "b"}))[0] == 404
    svc.cases.create("INV-1001", {})
    status, body = call(functions, "withdraw_request", withdrawal("INV-1001", "k1", {"by": "ana"}))
    assert status == 400 and body["fields"] == {"why": "is required"}
    status, body = call(functions, "withdraw_request", withdrawal("INV-1001", "k1", {"by": "ana", "why": "ticket 7"}))
    # A function-key caller is recorded as a key holder, never as the person it names.
    assert (status, body) == (202, {"accepted": True, "effectKey": "k1", "by": "key:ana"})
    [msg] = queue.peek(QUEUE)
    data = json.loads(msg.body)["data"]
    assert (msg.session_id, data["effectKey"], data["by"], data["why"]) == ("INV-1001", "k1", "key:ana", "ticket 7")
    for nobody in ({"why": "x"}, {"by": "", "why": "x"}, {"by": "key:", "why": "x"}):
        status, body = call(functions, "withdraw_request", withdrawal("INV-1001", "k2", nobody))
        assert status == 400 and "function-key caller names itself" in body["fields"]["by"]


@pytest.mark.usefixtures("behind_easy_auth")
def test_a_signed_in_withdrawal_is_recorded_as_the_operator_and_needs_the_role(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    svc.cases.create("INV-1001", {})
    olga, ana = signed_in("olga@example.com", OPERATOR_ROLE), signed_in("ana@example.com", APPROVER_ROLE)
    status, body = call(functions, "withdraw_request", withdrawal("INV-1001", "k1", {"why": "ticket 7"}, ana))
    assert status == 403 and OPERATOR_ROLE in body["error"]
    as_other = {"by": "boss@example.com", "why": "ticket 7"}
    status, body = call(functions, "withdraw_request", withdrawal("INV-1001", "k1", as_other, olga))
    assert status == 400 and "signed-in identity" in body["fields"]["by"]
    assert queue.peek(QUEUE) == []
    status, body = call(functions, "withdraw_request", withdrawal("INV-1001", "k1", {"why": "ticket 7"}, olga))
    assert (status, body["by"]) == (202, "olga@example.com <oid:oid-olga>")
    [msg] = queue.peek(QUEUE)
    assert json.loads(msg.body)["data"]["by"] == "olga@example.com <oid:oid-olga>"


def test_the_case_view_shows_how_much_may_still_be_requested_and_the_excess(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue, supplier: SupplierStub
) -> None:
    facts = json.loads(event(data={**json.loads(event())["data"], "invoiceAmount": "1300.00"}))["data"]
    asyncio.run(svc.worker.handle(CaseEvent("invoice.received", "INV-1001", facts)))
    asyncio.run(svc.worker.handle(CaseEvent("po.updated", "INV-1001", {"poAmount": "1200.00"})))
    req = func.HttpRequest(
        method="GET", url="http://localhost/api/cases/INV-1001", body=b"", route_params={"caseId": "INV-1001"}
    )
    status, body = call(functions, "get_case", req)
    assert status == 200 and body["case"]["status"] == "needs_review"
    credit = body["credit"]
    assert {k: credit[k] for k in ("overBilled", "received", "outstanding", "remaining", "excess")} == {
        "overBilled": "100.00",
        "received": "0",
        "outstanding": "300.00",
        "remaining": "-200.00",
        "excess": "200.00",
    }
    [request] = credit["requests"]
    assert (request["amount"], request["state"], request["decidedOnVersion"]) == ("300.00", "outstanding", 1)
    assert body["history"][1]["changes"] == {"poAmount": "1200.00"}
    assert "by 200.00 EUR" in body["history"][-1]["reason"]


def test_an_answer_the_door_can_tell_will_not_count_is_refused_with_409_and_the_reason(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    """As the approval page refuses them: an unknown request, an answer on another version, and a second,
    different answer to a request the first answer closed. Nothing is enqueued for any of them."""
    awaiting(svc, "INV-1001")
    ana = {"decision": "approve", "caseVersion": 2, "approver": "ana"}
    status, body = call(functions, "approvals", approval("INV-1001", "apr-nope", ana))
    assert status == 409 and body["error"].startswith("unknown request")
    status, body = call(functions, "approvals", approval("INV-1001", "apr-1", {**ana, "caseVersion": 1}))
    assert status == 409 and body["error"].startswith("stale: answered on v1")
    assert queue.peek(QUEUE) == []
    assert call(functions, "approvals", approval("INV-1001", "apr-1", ana))[0] == 202
    bob = {"decision": "reject", "caseVersion": 2, "approver": "bob", "reason": "wrong supplier"}
    status, body = call(functions, "approvals", approval("INV-1001", "apr-1", bob))
    assert (status, body["error"]) == (
        409,
        "already answered: approve by key:ana on v2; the first answer closes the request",
    )
    assert call(functions, "approvals", approval("INV-1001", "apr-1", ana))[0] == 202  # the same answer: idempotent
    assert [json.loads(m.body)["data"]["decision"] for m in queue.peek(QUEUE)] == ["approve"]


def test_a_delivery_id_reused_with_another_body_is_refused_with_409(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    """A delivery id is an idempotency key: the same body again is the same event (202, one message; key
    order and whitespace do not matter), another body under it is refused instead of dropped unseen."""
    first = event()
    assert call(functions, "events", signed_request(first, delivery="dlv-7"))[0] == 202
    reordered = json.dumps(json.loads(first), indent=2, sort_keys=True).encode()
    assert call(functions, "events", signed_request(reordered, delivery="dlv-7"))[0] == 202
    other = event(type="po.updated", data={"poAmount": "900.00"})
    status, body = call(functions, "events", signed_request(other, delivery="dlv-7"))
    assert status == 409 and "already accepted with another body" in body["error"]
    assert body["fields"] == {"Casekeeper-Delivery": "already used with another body"}
    assert [m.message_id for m in queue.peek(QUEUE)] == ["webhook:dlv-7"]
