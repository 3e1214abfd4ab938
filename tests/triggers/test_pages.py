"""The approval and operations pages, invoked as the Functions host invokes them, over a real SQLite store
and the local session queue. Every refused request is checked to have enqueued nothing."""

from __future__ import annotations

import html
import json
import re
import time
from typing import Any
from urllib.parse import urlencode

import azure.functions as func
import pytest

from casekeeper.core.keys import approval_request_id
from shared.app.bootstrap import Services
from shared.handlers.door import ANSWER_SECONDS, RETRY_AFTER_SECONDS
from shared.handlers.pages import approval_path, redrive_purpose
from shared.messaging.sqlite_queue import LocalSessionQueue
from shared.web import csrf
from shared.web.identity import APPROVER_ROLE, OPERATOR_ROLE, PRINCIPAL_HEADER, encode_principal
from tests.support.downstream import leave_started
from tests.support.locks import write_lock
from tests.triggers.conftest import QUEUE, user_function

ORIGIN = "http://localhost"
EVIL = "<script>alert(1)</script>"
EVIL_AS_TEXT = "&lt;script&gt;alert(1)&lt;/script&gt;"


pytestmark = pytest.mark.usefixtures("behind_easy_auth")


def who(name: str, *roles: str) -> dict[str, str]:
    oid = f"oid-{name.split('@', maxsplit=1)[0]}"
    return {PRINCIPAL_HEADER: encode_principal(name, roles, auth_type="aad", object_id=oid)}


ANA_RECORDED = "ana@example.com <oid:oid-ana>"
OLGA_RECORDED = "olga@example.com <oid:oid-olga>"


ANA = who("ana@example.com", APPROVER_ROLE)
OLGA = who("olga@example.com", OPERATOR_ROLE)
NOBODY = who("nobody@example.com")


def pending_case(svc: Services, case_id: str = "INV-7", facts: dict[str, Any] | None = None) -> str:
    """A case at v2 awaiting approval of 1400.00 EUR, as the approval gate leaves it. Returns the request id."""
    facts = facts or {
        "invoiceId": case_id,
        "supplierId": "SUP-9",
        "poNumber": "PO-88",
        "invoiceAmount": "3400.00",
        "poAmount": "2000.00",
        "currency": "EUR",
        "credits": [],
        "withdrawn": [],
    }
    svc.cases.create(case_id, facts)
    request_id = approval_request_id(case_id, "request_credit_note", 2)
    pending = {
        "caseId": case_id,
        "caseVersion": 2,
        "requestId": request_id,
        "action": "request_credit_note",
        "amount": "1400.00",
        "currency": "EUR",
        "facts": facts,
        "rationale": "over-billed by 1400.00 EUR",
        "basis": {
            "currency": "EUR",
            "invoiceAmount": "3400.00",
            "poAmount": "2000.00",
            "overBilled": "1400.00",
            "received": "0",
            "outstanding": "0",
            "remaining": "1400.00",
        },
    }
    assert svc.cases.commit_status(
        case_id, 1, "awaiting_approval", reason="approval requested for 1400.00 EUR", data={"pendingApproval": pending}
    )
    return request_id


def get(functions: dict[str, Any], name: str, path: str, headers: dict[str, str], **route: str) -> func.HttpResponse:
    req = func.HttpRequest(method="GET", url=ORIGIN + path, headers=headers, body=b"", route_params=route)
    return user_function(functions, name)(req)  # type: ignore[no-any-return]


def post_answer(
    functions: dict[str, Any],
    case_id: str,
    request_id: str,
    form: dict[str, str],
    headers: dict[str, str],
    *,
    origin: str | None = ORIGIN,
) -> func.HttpResponse:
    extra = {"Content-Type": "application/x-www-form-urlencoded", "Host": "localhost"}
    if origin is not None:
        extra["Origin"] = origin
    req = func.HttpRequest(
        method="POST",
        url=ORIGIN + approval_path(case_id, request_id),
        headers={**headers, **extra},
        body=urlencode(form).encode(),
        route_params={"caseId": case_id, "requestId": request_id},
    )
    return user_function(functions, "approval_page")(req)  # type: ignore[no-any-return]


def text(response: func.HttpResponse) -> str:
    return response.get_body().decode()


def form_token(page: str) -> str:
    match = re.search(r'name="csrf" value="(\d+\.[0-9a-f]{64})"', page)
    assert match, "the page has no form token"
    return match.group(1)


def open_request(functions: dict[str, Any], case_id: str, request_id: str, headers: dict[str, str]) -> str:
    response = get(
        functions, "approval_page", approval_path(case_id, request_id), headers, caseId=case_id, requestId=request_id
    )
    assert response.status_code == 200
    return text(response)


# --- who may see and answer ------------------------------------------------------------------------


def test_nobody_signed_in_gets_401_and_someone_without_a_role_403_with_the_reason(
    functions: dict[str, Any], svc: Services
) -> None:
    anonymous = get(functions, "approvals_page", "/api/approvals", {})
    # Behind Easy Auth a client that is not a browser gets the 401 with the sign-in link.
    assert anonymous.status_code == 401 and "/.auth/login/aad" in text(anonymous)
    refused = get(functions, "approvals_page", "/api/approvals", NOBODY)
    assert refused.status_code == 403
    assert "nobody@example.com may not see the approvals" in html.unescape(text(refused))
    assert "Casekeeper.Approver" in text(refused)
    assert get(functions, "ops_page", "/api/ops", ANA).status_code == 403  # an approver is not an operator
    assert get(functions, "ops_page", "/api/ops", OLGA).status_code == 200


def test_locally_the_401_says_how_to_sign_in_instead_of_linking_to_app_services_login(
    functions: dict[str, Any], svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("EASY_AUTH_ENABLED", "WEBSITE_SITE_NAME", "WEBSITE_AUTH_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    anonymous = get(functions, "approvals_page", "/api/approvals", {})
    # Locally there is no sign-in page: the 401 says how to start the host with an identity instead.
    assert anonymous.status_code == 401 and "/.auth/login/aad" not in text(anonymous)
    assert "casekeeper dev --as you@localhost --role approver" in text(anonymous)


def test_behind_easy_auth_a_browser_without_a_sign_in_is_sent_to_the_login(
    functions: dict[str, Any], svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    browser = get(functions, "approvals_page", "/api/approvals", {"Accept": "text/html,application/xhtml+xml"})
    assert browser.status_code == 303
    assert browser.headers["Location"] == "/.auth/login/aad?post_login_redirect_uri=/api/approvals"
    assert get(functions, "ops_page", "/api/ops", {"Accept": "application/json"}).status_code == 401
    assert get(functions, "ops_page", "/api/ops", OLGA).status_code == 200  # the platform's header is trusted


def test_without_easy_auth_on_app_service_the_principal_header_is_ignored(
    functions: dict[str, Any], svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEBSITE_SITE_NAME", "casekeeper")
    monkeypatch.delenv("WEBSITE_AUTH_ENABLED", raising=False)
    refused = get(functions, "ops_page", "/api/ops", OLGA)
    assert refused.status_code == 401 and "/.auth/login/aad" in text(refused)  # in Azure: the sign-in link


def test_every_page_is_never_cached_and_runs_only_its_own_script(functions: dict[str, Any], svc: Services) -> None:
    for response in (
        get(functions, "approvals_page", "/api/approvals", ANA),
        get(functions, "approvals_page", "/api/approvals", {}),
        get(functions, "approvals_page", "/api/approvals", NOBODY),
        get(functions, "ops_page", "/api/ops", OLGA),
    ):
        assert response.headers["Cache-Control"] == "no-store"
        assert "script-src 'nonce-" in response.headers["Content-Security-Policy"]
        assert response.mimetype == "text/html"


def test_the_list_shows_pending_approvals_oldest_first(functions: dict[str, Any], svc: Services) -> None:
    first = pending_case(svc, "INV-A")
    pending_case(svc, "INV-B")
    page = text(get(functions, "approvals_page", "/api/approvals", ANA))
    assert page.index("INV-A") < page.index("INV-B")
    assert approval_path("INV-A", first) in page
    assert "1400.00 EUR" in page and "SUP-9" in page and "PO-88" in page and "v2" in page


def test_the_request_page_shows_the_computation_and_the_form(functions: dict[str, Any], svc: Services) -> None:
    request_id = pending_case(svc)
    page = open_request(functions, "INV-7", request_id, ANA)
    for shown in ("3400.00", "2000.00", "= over-billed", "1400.00 EUR", "asked on", "approval requested for 1400.00"):
        assert shown in page
    assert 'id="approve"' in page and 'id="reject"' in page
    # An operator may look, but gets no form.
    as_operator = open_request(functions, "INV-7", request_id, OLGA)
    assert 'id="approve"' not in as_operator and "may look but not answer" in as_operator


def test_every_fact_is_escaped(functions: dict[str, Any], svc: Services) -> None:
    facts = dict.fromkeys(("invoiceId", "supplierId", "poNumber", "invoiceAmount", "poAmount", "currency"), EVIL)
    facts[EVIL] = EVIL  # a fact's name too
    request_id = pending_case(svc, "INV-X", facts=facts)
    svc.cases.note("INV-X", EVIL)
    for page in (
        open_request(functions, "INV-X", request_id, ANA),
        text(get(functions, "approvals_page", "/api/approvals", ANA)),
    ):
        assert "<script>alert" not in page
        assert EVIL_AS_TEXT in page


# --- answering ---------------------------------------------------------------------------------


def test_approving_enqueues_one_answer_recorded_as_the_signed_in_approver(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    request_id = pending_case(svc)
    token = form_token(open_request(functions, "INV-7", request_id, ANA))
    form = {"csrf": token, "caseVersion": "2", "decision": "approve", "reason": ""}
    response = post_answer(functions, "INV-7", request_id, form, ANA)
    assert response.status_code == 303
    assert response.headers["Location"] == approval_path("INV-7", request_id) + "?answered=approve"
    post_answer(functions, "INV-7", request_id, form, ANA)  # a double click: the same message
    [msg] = queue.peek(QUEUE)
    data = json.loads(msg.body)["data"]
    assert (data["approver"], data["decision"], data["caseVersion"]) == (ANA_RECORDED, "approve", 2)


def test_an_answer_while_the_store_is_held_is_refused_503_with_retry_after_within_5_s(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    """The page answers as the API does (docs/design.md#door-budget): within 5 s, and nothing is recorded."""
    request_id = pending_case(svc)
    token = form_token(open_request(functions, "INV-7", request_id, ANA))
    form = {"csrf": token, "caseVersion": "2", "decision": "approve", "reason": ""}
    with write_lock(svc.settings.sqlite_path):
        started = time.monotonic()
        response = post_answer(functions, "INV-7", request_id, form, ANA)
        took = time.monotonic() - started
    assert response.status_code == 503
    assert response.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
    assert took < ANSWER_SECONDS, f"answered after {took:.1f}s"
    assert "Your answer was not recorded" in text(response)
    assert queue.peek(QUEUE) == []
    assert post_answer(functions, "INV-7", request_id, form, ANA).status_code == 303
    assert len(queue.peek(QUEUE)) == 1


def test_a_second_approver_with_another_answer_is_told_the_request_was_already_answered(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    """Two approvers on the same form: the first answer closes the request; the second, different one is
    refused (409) naming it, although the worker has not taken the first yet and the page still shows the form."""
    request_id = pending_case(svc)
    bob = who("bob@example.com", APPROVER_ROLE)
    ana_token = form_token(open_request(functions, "INV-7", request_id, ANA))
    bob_token = form_token(open_request(functions, "INV-7", request_id, bob))
    first = {"csrf": ana_token, "caseVersion": "2", "decision": "approve", "reason": ""}
    assert post_answer(functions, "INV-7", request_id, first, ANA).status_code == 303
    second = {"csrf": bob_token, "caseVersion": "2", "decision": "reject", "reason": "wrong supplier"}
    response = post_answer(functions, "INV-7", request_id, second, bob)
    assert response.status_code == 409
    # The first answer's recorded identity (object id included), escaped in the page.
    assert f"already answered: approve by {html.escape(ANA_RECORDED)} on v2" in text(response)
    assert [json.loads(m.body)["data"]["decision"] for m in queue.peek(QUEUE)] == ["approve"]


def test_rejecting_needs_a_reason_and_keeps_it(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    request_id = pending_case(svc)
    token = form_token(open_request(functions, "INV-7", request_id, ANA))
    refused = post_answer(
        functions, "INV-7", request_id, {"csrf": token, "caseVersion": "2", "decision": "reject"}, ANA
    )
    assert refused.status_code == 400 and "A reason is required to reject" in text(refused)
    assert queue.peek(QUEUE) == []
    form = {"csrf": token, "caseVersion": "2", "decision": "reject", "reason": "duplicate invoice"}
    assert post_answer(functions, "INV-7", request_id, form, ANA).status_code == 303
    [msg] = queue.peek(QUEUE)
    assert json.loads(msg.body)["data"]["reason"] == "duplicate invoice"


@pytest.mark.parametrize(
    ("origin", "token_for", "expected"),
    [
        ("http://evil.example", ANA, "another origin"),
        (None, ANA, "neither where it comes from"),
        (ORIGIN, who("mallory@example.com", APPROVER_ROLE), "token is missing or not for this identity"),
        (ORIGIN, None, "token is missing"),
    ],
)
def test_a_forged_form_is_refused(
    functions: dict[str, Any],
    svc: Services,
    queue: LocalSessionQueue,
    origin: str | None,
    token_for: dict[str, str] | None,
    expected: str,
) -> None:
    request_id = pending_case(svc)
    token = form_token(open_request(functions, "INV-7", request_id, token_for)) if token_for else ""
    form = {"csrf": token, "caseVersion": "2", "decision": "approve"}
    response = post_answer(functions, "INV-7", request_id, form, ANA, origin=origin)
    assert response.status_code == 403 and expected in html.unescape(text(response))
    assert queue.peek(QUEUE) == []


def test_a_token_for_one_request_does_not_answer_another(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    one = pending_case(svc, "INV-1")
    other = pending_case(svc, "INV-2")
    token = form_token(open_request(functions, "INV-1", one, ANA))
    response = post_answer(functions, "INV-2", other, {"csrf": token, "caseVersion": "2", "decision": "approve"}, ANA)
    assert response.status_code == 403
    assert queue.peek(QUEUE) == []


def test_only_an_approver_may_answer(functions: dict[str, Any], svc: Services, queue: LocalSessionQueue) -> None:
    request_id = pending_case(svc)
    assert 'name="csrf"' not in open_request(functions, "INV-7", request_id, OLGA)  # no form to post
    token = csrf.token(svc.settings.webhook_secrets, "oid:oid-olga", f"approval:INV-7:{request_id}", now=time.time())
    response = post_answer(
        functions, "INV-7", request_id, {"csrf": token, "caseVersion": "2", "decision": "approve"}, OLGA
    )
    assert response.status_code == 403 and "Casekeeper.Approver" in text(response)
    assert queue.peek(QUEUE) == []


def test_a_stale_request_says_so_links_the_current_one_and_refuses_the_answer(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    old = pending_case(svc)
    token = form_token(open_request(functions, "INV-7", old, ANA))
    # The PO changes while the approver looks: v3 open, then asked again on v4.
    case = svc.cases.require("INV-7")
    assert svc.cases.commit_status(
        "INV-7", 2, "open", reason="po.updated", data={"pendingApproval": None}, expected=case
    )
    new = approval_request_id("INV-7", "request_credit_note", 4)
    pending = {
        **svc.cases.require("INV-7").data,
        "pendingApproval": {"requestId": new, "caseVersion": 4, "amount": "900.00"},
    }
    assert svc.cases.commit_status(
        "INV-7", 3, "awaiting_approval", reason="approval requested for 900.00 EUR", data=pending
    )

    page = open_request(functions, "INV-7", old, ANA)
    assert "This request is no longer pending" in page and "asked on v2, the case is at v4" in page
    assert 'id="approve"' not in page
    assert approval_path("INV-7", new) in page  # the current request
    response = post_answer(functions, "INV-7", old, {"csrf": token, "caseVersion": "2", "decision": "approve"}, ANA)
    assert response.status_code == 409 and "Not recorded" in text(response)
    assert queue.peek(QUEUE) == []


def test_an_answer_on_another_version_is_refused(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    request_id = pending_case(svc)
    token = form_token(open_request(functions, "INV-7", request_id, ANA))
    response = post_answer(
        functions, "INV-7", request_id, {"csrf": token, "caseVersion": "1", "decision": "approve"}, ANA
    )
    assert response.status_code == 409
    assert queue.peek(QUEUE) == []


def test_an_unknown_request_is_404(functions: dict[str, Any], svc: Services) -> None:
    pending_case(svc)
    response = get(functions, "approval_page", "/x", ANA, caseId="INV-7", requestId="apr-nope")
    assert response.status_code == 404
    assert get(functions, "approval_page", "/x", ANA, caseId="ghost", requestId="apr-nope").status_code == 404


# --- operations -----------------------------------------------------------------------------------


def escalate(svc: Services, case_id: str) -> str:
    """A credit-note request whose outcome nobody could establish: needs_reconciliation."""
    svc.cases.create(case_id, {"invoiceId": case_id})
    effect = leave_started(svc.ledger, case_id)
    svc.ledger.mark_needs_reconciliation(effect, "lookups kept failing")
    return effect.key


def test_the_ops_page_shows_cases_by_status_and_the_exact_resolve_command(
    functions: dict[str, Any], svc: Services
) -> None:
    pending_case(svc, "INV-A")
    key = escalate(svc, "INV-S")
    page = html.unescape(text(get(functions, "ops_page", "/api/ops", OLGA)))
    row = r'data-status="awaiting_approval">.*?<td class="num">1</td><td><a href="[^"]*">INV-A</a></td>'
    assert re.search(row, page)
    # This store is not a local host's data folder, so the command reads the app's settings.
    assert (
        f"casekeeper effects resolve {key} --done '{{\"creditNoteId\": \"CN-...\"}}' --by '{OLGA_RECORDED}' "
        "--why 'confirmed with the supplier' --from-settings --case INV-S"
    ) in page
    failed = f"casekeeper effects resolve {key} --failed 'the supplier has no such request' --by '{OLGA_RECORDED}'"
    assert failed in page
    assert "lookups kept failing" in page
    assert "0 in-flight runs, 0 cannot be resumed by this build" in page


def test_redrive_needs_the_operator_and_the_form_token(functions: dict[str, Any], svc: Services) -> None:
    page = text(get(functions, "ops_page", "/api/ops", OLGA))
    assert "No dead-lettered events" in page
    token = csrf.token(svc.settings.webhook_secrets, "oid:oid-olga", redrive_purpose("all"), now=time.time())

    def redrive(headers: dict[str, str], form: dict[str, str]) -> func.HttpResponse:
        req = func.HttpRequest(
            method="POST",
            url=ORIGIN + "/api/ops/redrive",
            headers={**headers, "Origin": ORIGIN, "Content-Type": "application/x-www-form-urlencoded"},
            body=urlencode(form).encode(),
        )
        return user_function(functions, "ops_redrive")(req)  # type: ignore[no-any-return]

    assert redrive(ANA, {"messageId": "all", "csrf": token}).status_code == 403
    assert redrive(OLGA, {"messageId": "all", "csrf": "f" * 64}).status_code == 403
    nothing = redrive(OLGA, {"messageId": "all", "csrf": token})
    assert nothing.status_code == 404 and "is not dead-lettered" in text(nothing)


def post_ops(functions: dict[str, Any], name: str, path: str, form: dict[str, str], headers: dict[str, str]) -> Any:
    req = func.HttpRequest(
        method="POST",
        url=ORIGIN + path,
        headers={**headers, "Origin": ORIGIN, "Content-Type": "application/x-www-form-urlencoded"},
        body=urlencode(form).encode(),
    )
    return user_function(functions, name)(req)


def test_an_escalation_is_settled_from_the_ops_page_as_the_signed_in_operator(
    functions: dict[str, Any], svc: Services
) -> None:
    key = escalate(svc, "INV-S")
    page = text(get(functions, "ops_page", "/api/ops", OLGA))
    match = re.search(r'name="csrf" value="(\d+\.[0-9a-f]{64})">\s*<input type="hidden" name="key" value="' + key, page)
    assert match, "the escalation has no form"
    form = {"csrf": match.group(1), "key": key, "outcome": "done", "creditNoteId": "CN-77", "why": ""}
    refused = post_ops(functions, "ops_resolve", "/api/ops/resolve", form, OLGA)
    assert refused.status_code == 400 and "say how the outcome was established" in text(refused)
    other = post_ops(functions, "ops_resolve", "/api/ops/resolve", {**form, "key": "0" * 64, "why": "x"}, OLGA)
    assert other.status_code == 403  # the token is for this effect only
    assert post_ops(functions, "ops_resolve", "/api/ops/resolve", {**form, "why": "phone"}, ANA).status_code == 403
    [effect] = svc.ledger.for_case("INV-S")
    assert effect.status.value == "needs_reconciliation"
    # The form names the effect's case, so the effect is looked for there alone.
    assert re.search(r'name="key" value="' + key + r'">\s*<input type="hidden" name="caseId" value="INV-S">', page)
    elsewhere = {**form, "why": "confirmed by phone", "caseId": "INV-A"}
    wrong_case = post_ops(functions, "ops_resolve", "/api/ops/resolve", elsewhere, OLGA)
    assert wrong_case.status_code == 409 and "case INV-A has no effect with it" in text(wrong_case)

    signed = {**form, "why": "confirmed by phone", "caseId": "INV-S"}
    done = post_ops(functions, "ops_resolve", "/api/ops/resolve", signed, OLGA)
    assert done.status_code == 200 and f"Recorded done for effect {key[:12]} of case INV-S by {OLGA_RECORDED}" in (
        html.unescape(text(done))
    )
    [effect] = svc.ledger.for_case("INV-S")
    assert effect.status.value == "done" and effect.result == {"creditNoteId": "CN-77"}
    assert effect.resolution is not None and effect.resolution["by"] == OLGA_RECORDED
    again = post_ops(functions, "ops_resolve", "/api/ops/resolve", {**form, "why": "confirmed by phone"}, OLGA)
    assert again.status_code == 409 and "already has outcome done" in text(again)


def test_a_redrive_token_covers_one_dead_letter(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="casekeeper.pages")
    for case_id, message_id in (("C-1", "webhook:a"), ("C-2", "webhook:b")):
        body = f'{{"type":"case.investigate","caseId":"{case_id}","data":{{}}}}'.encode()
        queue.send(QUEUE, body, session_id=case_id, message_id=message_id)
        msg = queue.receive(QUEUE)
        assert msg is not None
        queue.dead_letter(msg, "Seeded", "for the redrive test")
    page = text(get(functions, "ops_page", "/api/ops", OLGA))
    tokens = {
        m: t
        for t, m in re.findall(
            r'name="csrf" value="([^"]+)"><input type="hidden" name="messageId" value="([^"]+)"', page
        )
    }
    assert set(tokens) == {"webhook:a", "webhook:b", "all"}
    assert len(set(tokens.values())) == 3
    # The form of one dead letter, with its message id changed, redrives nothing.
    forged = post_ops(
        functions, "ops_redrive", "/api/ops/redrive", {"csrf": tokens["webhook:a"], "messageId": "webhook:b"}, OLGA
    )
    assert forged.status_code == 403
    assert len(queue.dead_letters(QUEUE)) == 2
    done = post_ops(
        functions, "ops_redrive", "/api/ops/redrive", {"csrf": tokens["webhook:a"], "messageId": "webhook:a"}, OLGA
    )
    assert done.status_code == 200 and "webhook:a" in text(done)
    [logged] = [r for r in caplog.records if r.name == "casekeeper.pages"]
    assert logged.__dict__["redrivenBy"] == "oid:oid-olga" and OLGA_RECORDED in logged.getMessage()
    assert [d.message_id for d in queue.dead_letters(QUEUE)] == ["webhook:b"]
