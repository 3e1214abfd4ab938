"""The approver's and the operator's pages: server-rendered HTML over the same services as the JSON API.

=============================================  ===============  ==========================================
route                                          role             what
=============================================  ===============  ==========================================
``GET /api/approvals``                         approver or      pending approvals, oldest first
                                               operator
``GET /api/approvals/{caseId}/{requestId}``    approver or      one request: facts, the money rule's
                                               operator         numbers, credit notes, history; the form
``POST /api/approvals/{caseId}/{requestId}``   approver         answer it (form: decision, caseVersion,
                                                                reason, csrf)
``GET /api/cases/{caseId}/page``              approver or      one case: facts, money rule, effects,
                                               operator         timeline, approvals, what to do next
``GET /api/ops``                               operator         what is stuck: the views the commands print
``POST /api/ops/redrive``                      operator         put dead-lettered events back
``POST /api/ops/resolve``                      operator         settle an escalated effect (as
                                                                ``casekeeper effects resolve``)
=============================================  ===============  ==========================================

Nobody signed in: 401 (or, behind App Service Authentication, a redirect to its login). Signed in without
the role: 403 with the reason. A POST must come from this origin and carry the form's token
(:mod:`shared.web.csrf`). An answer is checked against the case before it is enqueued: a request that is
no longer pending, or an answer on another version, is refused with the reason (409) and nothing is
enqueued; the case worker checks again when it handles it (rule R6), so a race between the two changes
nothing either. The same answer sent twice is one message (the ingress's message id).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qs, quote

from casekeeper import Case, Clock, approval_request_id
from casekeeper.errors import CasekeeperError, InvalidDocumentId, StoreError
from shared.app.alerts import Alerter
from shared.domain.invoice import Status
from shared.handlers import case_page as one_case
from shared.handlers.door import RETRY_AFTER_SECONDS
from shared.handlers.ingress import Ingress
from shared.messaging import DeadLetterQueue
from shared.views.alerts import alert_json, recent_alerts
from shared.views.case import CaseRecords
from shared.views.cases import cases_by_status
from shared.views.drain import check as drain_check
from shared.views.effects import pending_view
from shared.views.rejected import rejected_events
from shared.views.resolution import SETTLED_TEXT, Refused, Resolver
from shared.views.resolution import resolve as resolve_effect
from shared.web import csrf
from shared.web.identity import (
    APPROVER_ROLE,
    OPERATOR_ROLE,
    PRINCIPAL_HEADER,
    Principal,
    PrincipalError,
    easy_auth_on,
    principal_from_headers,
)
from shared.web.render import Page, approval_path, redirect, render
from shared.workflow.actions import REQUEST_CREDIT_NOTE, money_position
from shared.workflow.messages import ALLOWED_CHECKPOINT_TYPES

log = logging.getLogger("casekeeper.pages")

MAX_FORM_BYTES = 16 * 1024
LOGIN_PATH = "/.auth/login/aad"
"""App Service Authentication's Microsoft Entra ID login; it returns to ``post_login_redirect_uri``."""
# How often each page refreshes its content, counted from the end of the previous load (a refresh never
# overlaps one still running: base.html).
LIST_REFRESH_SECONDS = 10
REQUEST_REFRESH_SECONDS = 3
OPS_REFRESH_SECONDS = 20
OPS_PENDING_SHOWN = 50
"""Effects of each open status the ops page lists (oldest first); it counts all of them."""


@dataclass(frozen=True)
class OpsPageDeps:
    """What the operations page reads and does beyond the cases and their effects."""

    alerts: Alerter
    dead_letters: DeadLetterQueue
    graph_hash: Callable[[], str]
    """This build's workflow graph hash, for the drain check; computed when the page asks (it builds the
    workflow), so a failure shows in that part of the page alone."""
    resolver: Resolver
    """What the resolution form records the outcome and settles the case through."""


@dataclass(frozen=True)
class PageDeps:
    """What the pages' triggers take."""

    records: CaseRecords
    """The cases, their effects and the store: every page reads them."""
    clock: Clock
    ingress: Ingress
    ops_page: OpsPageDeps
    webhook_secrets: tuple[str, ...]
    """The keys the forms' tokens are made with (``shared.web.csrf``)."""
    store_option: str
    """How the operator commands shown on the ops page reach this store (``--data DIR`` or
    ``--from-settings``)."""
    platform: Mapping[str, str] = field(default_factory=dict)
    """The platform's settings as the host sees them now (the composition root passes the process
    environment): whether App Service Authentication is in front, and whether this is App Service at all
    (``WEBSITE_SITE_NAME``), in which case a page links to its sign-in."""


def resolve_purpose(key: str) -> str:
    return f"ops:resolve:{key}"


def redrive_purpose(message_id: str) -> str:
    """One dead letter's redrive (``all``: every one): a token for one does not redrive the others."""
    return f"ops:redrive:{message_id}"


Headers = Mapping[str, str]


def approval_purpose(case_id: str, request_id: str) -> str:
    return f"approval:{case_id}:{request_id}"


# --- who may see what -----------------------------------------------------------------------------


def _signed_in(deps: PageDeps, headers: Headers, path: str, *, roles: tuple[str, ...], doing: str) -> Principal | Page:
    """The principal if it holds one of ``roles``; otherwise the page that says why not."""
    try:
        principal = principal_from_headers(headers, deps.platform)
    except PrincipalError as exc:
        return render("message.html", 401, title="Not signed in", principal=None, message=str(exc), login=_login(path))
    if principal is None:
        if easy_auth_on(deps.platform) and "text/html" in (headers.get("Accept") or ""):
            return redirect(_login(path))
        if not deps.platform.get("WEBSITE_SITE_NAME"):
            # Locally there is no sign-in page to link to (/.auth/ is App Service's): say how to get one.
            return render(
                "message.html",
                401,
                title="Not signed in",
                principal=None,
                message=f"Sign in to {doing}. This host runs without App Service Authentication, so nobody is "
                "signed in. Locally, start the host with an identity: casekeeper dev --as you@localhost "
                "--role approver --role operator (make run does this).",
                login=None,
            )
        return render(
            "message.html",
            401,
            title="Not signed in",
            principal=None,
            message=f"Sign in to {doing}. (No {PRINCIPAL_HEADER} identity came with the request.)",
            login=_login(path),
        )
    if not any(principal.has(role) for role in roles):
        held = ", ".join(sorted(principal.roles)) or "no app roles"
        return render(
            "message.html",
            403,
            title="Not allowed",
            principal=principal,
            message=f"{principal.name} may not {doing}: that needs the app role {' or '.join(roles)}, "
            f"and this identity has {held}.",
            login=None,
        )
    return principal


def _login(path: str) -> str:
    return f"{LOGIN_PATH}?post_login_redirect_uri={quote(path, safe='/')}"


def _token(deps: PageDeps, principal: Principal, purpose: str) -> str:
    return csrf.token(deps.webhook_secrets, principal.id, purpose, now=deps.clock.now())


def _post_guard(
    deps: PageDeps, principal: Principal, headers: Headers, url: str, *, purpose: str, form: Mapping[str, str]
) -> Page | None:
    """Refuses a POST that is not from our own page (origin) or lacks this person's token for ``purpose``."""
    problem = csrf.same_origin_problem(headers, url)
    given = form.get(csrf.FIELD)
    if problem is None and not csrf.valid(deps.webhook_secrets, principal.id, purpose, given, now=deps.clock.now()):
        problem = (
            "the form's token is missing or not for this identity and request, or it has expired; "
            "reload the page and try again"
        )
    if problem is None:
        return None
    return render("message.html", 403, title="Refused", principal=principal, message=problem, login=None)


def _form(body: bytes) -> dict[str, str] | None:
    if len(body) > MAX_FORM_BYTES:
        return None
    try:
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        return None
    return {k: v[0] for k, v in parsed.items() if v}


# --- approvals ------------------------------------------------------------------------------------


def approvals_list(deps: PageDeps, headers: Headers) -> Page:
    who = _signed_in(deps, headers, "/api/approvals", roles=(APPROVER_ROLE, OPERATOR_ROLE), doing="see the approvals")
    if isinstance(who, Page):
        return who
    try:
        rows = _pending_rows(deps)
    except CasekeeperError as exc:  # not "none pending": say the read failed
        return render("approvals.html", 503, principal=who, rows=[], error=_failure(exc), refresh=LIST_REFRESH_SECONDS)
    return render("approvals.html", principal=who, rows=rows, error=None, refresh=LIST_REFRESH_SECONDS)


def _failure(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


def _pending_rows(deps: PageDeps) -> list[dict[str, Any]]:
    now = deps.clock.now()
    rows = []
    for case in deps.records.cases.in_status(Status.AWAITING_APPROVAL):
        pending = case.data.get("pendingApproval") or {}
        if not pending.get("requestId"):
            continue
        asked_at = _asked_at(case, int(pending.get("caseVersion", case.version)))
        facts = case.facts
        rows.append(
            {
                "caseId": case.id,
                "requestId": pending["requestId"],
                "href": approval_path(case.id, pending["requestId"]),
                "supplier": facts.get("supplierId"),
                "invoice": facts.get("invoiceId"),
                "po": facts.get("poNumber"),
                "amount": pending.get("amount"),
                "currency": pending.get("currency"),
                "version": pending.get("caseVersion"),
                "askedAt": asked_at,
                "age": max(now - asked_at, 0.0),
            }
        )
    rows.sort(key=lambda r: r["askedAt"])
    return rows


def _asked_at(case: Case, asked_on: int) -> float:
    """When the request was asked: the commit that moved the case to the version it was asked on."""
    transition = case.transition_from(asked_on - 1)
    return transition.at if transition is not None else case.ts


def _request_record(case: Case, request_id: str) -> dict[str, Any] | None:
    """What the case's history says about ``request_id``: the version it was asked on, how it was asked,
    and the answer committed on that version, if any. ``None``: never asked on this case."""
    for t in case.history:
        asked_on = t.from_version + 1
        if t.status != Status.AWAITING_APPROVAL or approval_request_id(case.id, REQUEST_CREDIT_NOTE, asked_on) != (
            request_id
        ):
            continue
        answer = case.transition_from(asked_on)
        decided = answer.answer if answer is not None else None
        return {
            "askedOn": asked_on,
            "asked": t.reason,
            "at": t.at,
            "answer": (
                {
                    "decision": decided.decision,
                    "by": decided.by,
                    "reason": decided.reason,
                    "status": answer.status,
                }
                if decided is not None and answer is not None
                else None
            ),
        }
    return None


def approval_page(
    deps: PageDeps, headers: Headers, case_id: str, request_id: str, params: Mapping[str, str] | None = None
) -> Page:
    path = approval_path(case_id, request_id)
    who = _signed_in(deps, headers, path, roles=(APPROVER_ROLE, OPERATOR_ROLE), doing="see the approvals")
    if isinstance(who, Page):
        return who
    params = params or {}
    try:
        return _approval_view(deps, who, case_id, request_id, answered=params.get("answered"))
    except InvalidDocumentId as exc:
        return render("message.html", 404, title="No such case", principal=who, message=str(exc))
    except CasekeeperError as exc:  # a store that cannot be read is not "no such case"
        return render(
            "message.html",
            503,
            title="Could not read the case",
            principal=who,
            message=f"Could not read case {case_id}: {_failure(exc)}. Nothing was changed; reload to try again.",
            refresh=REQUEST_REFRESH_SECONDS,
        )


def _approval_view(
    deps: PageDeps,
    principal: Principal,
    case_id: str,
    request_id: str,
    *,
    answered: str | None = None,
    error: str | None = None,
    status: int = 200,
    reason_text: str = "",
) -> Page:
    case = deps.records.cases.get(case_id)
    if case is None:
        return render("message.html", 404, title="No such case", principal=principal, message=f"no case {case_id!r}")
    pending = case.data.get("pendingApproval") or {}
    current = pending.get("requestId") == request_id and case.status == Status.AWAITING_APPROVAL
    record = _request_record(case, request_id)
    if not current and record is None:
        return render(
            "message.html",
            404,
            title="No such request",
            principal=principal,
            message=f"case {case_id} was never asked for approval {request_id!r}",
        )
    effects = deps.records.ledger.for_case(case.id)
    try:
        position: dict[str, Any] | None = money_position(case.facts, effects).to_json()
    except (KeyError, ValueError, ArithmeticError):
        position = None
    basis = pending.get("basis") if current else None
    stale = not current or int(pending.get("caseVersion", 0)) != case.version
    other = pending.get("requestId") if pending.get("requestId") and pending.get("requestId") != request_id else None
    view = {
        "caseId": case.id,
        "requestId": request_id,
        "path": approval_path(case.id, request_id),
        "case": case,
        "facts": case.facts,
        "request": pending if current else None,
        "record": record,
        "askedOn": int(pending["caseVersion"]) if current else (record or {}).get("askedOn"),
        "basis": basis or position,
        "basisIsAsked": bool(basis),
        "position": position,
        "stale": stale,
        "currentHref": approval_path(case.id, other) if other else None,
        "history": list(reversed(case.history)),
        "notes": list(case.notes),
        "rejected": rejected_events(deps.records.store, case.id),
        "canAnswer": current and not stale and principal.has(APPROVER_ROLE),
        "mayAnswer": principal.has(APPROVER_ROLE),
        "csrf": _token(deps, principal, approval_purpose(case.id, request_id)),
        "answered": answered if answered in ("approve", "reject") else None,
        "error": error,
        "reasonText": reason_text,
    }
    view["state"] = approval_state(view, principal)
    view["canAnswer"] = view["state"] == "open"
    # Refresh while the answer is on its way, or while nothing can be typed into the page.
    refresh = REQUEST_REFRESH_SECONDS if view["state"] != "open" else 0
    return render("approval.html", status, principal=principal, v=view, refresh=refresh)


def approval_state(view: Mapping[str, Any], principal: Principal) -> str:
    """The one state the approval page shows (one banner, and the form only when ``open``):

    ``open``       pending on the case's version, and this person may answer: the form
    ``look``       pending, but this person may not answer (no approver role)
    ``applying``   this person's answer was accepted and the worker has not applied it yet: no form
    ``applied``    this person's answer is the one on the case's history
    ``answered``   someone else answered it
    ``superseded`` this person answered, but the case changed first: the answer committed nothing
    ``stale``      no longer pending, unanswered: the case changed after it was asked
    """
    record = view["record"] or {}
    answer = record.get("answer")
    mine = view["answered"] is not None
    if answer is not None:
        return "applied" if mine and answer["by"] == principal.recorded else "answered"
    if not view["stale"]:
        if mine:
            return "applying"
        return "open" if view["mayAnswer"] else "look"
    return "superseded" if mine else "stale"


def answer_approval(deps: PageDeps, headers: Headers, url: str, case_id: str, request_id: str, *, body: bytes) -> Page:
    """The approval form's POST: checks who and where from, then whether the request still stands, then
    enqueues the answer as the JSON API does, recorded with the signed-in identity."""
    path = approval_path(case_id, request_id)
    who = _signed_in(deps, headers, path, roles=(APPROVER_ROLE,), doing="answer approvals")
    if isinstance(who, Page):
        return who
    form = _form(body)
    if form is None:
        return render("message.html", 400, title="Bad form", principal=who, message="the form could not be read")
    refused = _post_guard(deps, who, headers, url, purpose=approval_purpose(case_id, request_id), form=form)
    if refused is not None:
        return refused
    decision = form.get("decision")
    reason = (form.get("reason") or "").strip()
    version_text = form.get("caseVersion") or ""
    # Read by the door, within its budget (shared.handlers.door): the answer comes within 5 s, outage or not.
    deadline = deps.ingress.deadline()
    try:
        case = deps.ingress.find_case(case_id, deadline)
    except StoreError as exc:
        return _not_now(who, f"the case could not be read: {exc}")
    if case is None:
        return render("message.html", 404, title="No such case", principal=who, message=f"no case {case_id!r}")
    pending = case.data.get("pendingApproval") or {}
    still_pending = pending.get("requestId") == request_id and case.status == Status.AWAITING_APPROVAL
    if not still_pending or not version_text.isdigit() or int(version_text) != case.version:
        seen = f"v{version_text}" if version_text.isdigit() else "an unknown version"
        return _approval_view(
            deps,
            who,
            case_id,
            request_id,
            status=409,
            error=f"Not recorded: you answered on {seen}, and the case is now {case.status} at v{case.version}. "
            "An answer counts only on the version it was asked on.",
        )
    if decision not in ("approve", "reject"):
        return _approval_view(deps, who, case_id, request_id, status=400, error="Choose Approve or Reject.")
    if decision == "reject" and not reason:
        return _approval_view(
            deps, who, case_id, request_id, status=400, error="A reason is required to reject.", reason_text=reason
        )
    answer: dict[str, Any] = {"decision": decision, "caseVersion": int(version_text)}
    if reason:
        answer["reason"] = reason
    result = deps.ingress.enqueue_approval(
        case_id, request_id, answer, principal=who.recorded, case=case, deadline=deadline
    )
    if result.status == 503:
        return _not_now(who, str(result.body.get("error", "")))
    if result.status != 202:
        return _approval_view(
            deps,
            who,
            case_id,
            request_id,
            status=result.status,
            error=f"Not recorded: {result.body.get('error', 'refused')}",
            reason_text=reason,
        )
    return redirect(f"{path}?answered={decision}")


def _not_now(who: Principal, why: str) -> Page:
    """503 with ``Retry-After``: the answer was not recorded, and the page reads nothing more to say so."""
    page = render(
        "message.html",
        503,
        title="Not recorded: try again",
        principal=who,
        message=f"Your answer was not recorded, the store or the queue did not answer in time ({why}). "
        f"Send it again in {RETRY_AFTER_SECONDS} seconds.",
    )
    return replace(page, headers={**page.headers, "Retry-After": str(RETRY_AFTER_SECONDS)})


# --- one case -------------------------------------------------------------------------------------


def case_page(deps: PageDeps, headers: Headers, case_id: str) -> Page:
    """``GET /api/cases/{caseId}/page`` (:mod:`shared.handlers.case_page`), for an approver or an operator."""
    path = one_case.case_href(case_id)
    who = _signed_in(deps, headers, path, roles=(APPROVER_ROLE, OPERATOR_ROLE), doing="see cases")
    if isinstance(who, Page):
        return who
    return one_case.case_page(deps.records, who, case_id, store_option=deps.store_option)


# --- operations -----------------------------------------------------------------------------------


def _section(build: Callable[[], Any]) -> dict[str, Any]:
    """One part of the ops page; a part that cannot be read says why instead of failing the page."""
    try:
        return {"ok": True, "value": build()}
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def _shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def resolve_commands(key: str, by: str, store: str, case_id: str) -> dict[str, str]:
    """The exact ``casekeeper effects resolve`` commands for an escalated effect, to copy and fill in (with
    its case, so that the command finds the effect with one read)."""
    who, case = _shell_quote(by), _shell_quote(case_id)
    return {
        "done": f'casekeeper effects resolve {key} --done \'{{"creditNoteId": "CN-..."}}\' --by {who} '
        f"--why 'confirmed with the supplier' {store} --case {case}",
        "failed": f"casekeeper effects resolve {key} --failed 'the supplier has no such request' --by {who} "
        f"--why 'confirmed with the supplier' {store} --case {case}",
    }


def ops_page(deps: PageDeps, headers: Headers, *, notice: str | None = None, status: int = 200) -> Page:
    who = _signed_in(deps, headers, "/api/ops", roles=(OPERATOR_ROLE,), doing="see the operations page")
    if isinstance(who, Page):
        return who
    store = deps.store_option
    pending = _section(lambda: pending_view(deps.records.store, deps.records.ledger, limit=OPS_PENDING_SHOWN))
    escalations: list[dict[str, Any]] = []
    if pending["ok"]:
        for row in pending["value"]["effects"]:
            if row["status"] == "needs_reconciliation":
                escalations.append(
                    {
                        **row,
                        "commands": resolve_commands(row["key"], who.recorded, store, row["caseId"]),
                        "csrf": _token(deps, who, resolve_purpose(row["key"])),
                    }
                )
    view = {
        "cases": _section(lambda: cases_by_status(deps.records.store)),
        "pending": pending,
        "escalations": escalations,
        "alerts": _section(lambda: [alert_json(a) for a in recent_alerts(deps.ops_page.alerts, 20)]),
        "dead": _section(
            lambda: [
                {**d.to_json(), "csrf": _token(deps, who, redrive_purpose(d.message_id))}
                for d in deps.ops_page.dead_letters.peek(limit=50)
            ]
        ),
        "queue": _section(deps.ops_page.dead_letters.counts),
        "drain": _section(
            lambda: drain_check(deps.records.store, deps.ops_page.graph_hash(), ALLOWED_CHECKPOINT_TYPES).to_json()
        ),
        "store": store,
        "csrf": _token(deps, who, redrive_purpose("all")),
        "notice": notice,
    }
    return render("ops.html", status, principal=who, v=view, refresh=OPS_REFRESH_SECONDS)


def ops_redrive(deps: PageDeps, headers: Headers, url: str, body: bytes) -> Page:
    """Put dead-lettered events back (``casekeeper events redrive``): the ids in the form, or ``all``."""
    who = _signed_in(deps, headers, "/api/ops", roles=(OPERATOR_ROLE,), doing="redrive dead-lettered events")
    if isinstance(who, Page):
        return who
    form = _form(body)
    if form is None:
        return render("message.html", 400, title="Bad form", principal=who, message="the form could not be read")
    message_id = form.get("messageId") or ""
    refused = _post_guard(deps, who, headers, url, purpose=redrive_purpose(message_id), form=form)
    if refused is not None:
        return refused
    if not message_id:
        return ops_page(deps, headers, notice="Nothing redriven: no message id was given.", status=400)
    moved = deps.ops_page.dead_letters.redrive(None if message_id == "all" else [message_id])
    if not moved:
        return ops_page(deps, headers, notice=f"Nothing redriven: {message_id} is not dead-lettered.", status=404)
    names = ", ".join(m.message_id for m in moved)
    # The redrive leaves no record on a case; the log keeps who did it (as the resolve keeps it on the effect).
    log.info(
        "dead letters redriven by %s: %s",
        who.recorded,
        names,
        extra={"redrivenBy": who.id, "messageIds": [m.message_id for m in moved]},
    )
    return ops_page(deps, headers, notice=f"Put back into their case's session by {who.recorded}: {names}.")


def ops_resolve(deps: PageDeps, headers: Headers, url: str, body: bytes) -> Page:
    """Record the outcome a person established for an escalated effect, signed by who is signed in, and
    settle its case: ``casekeeper effects resolve`` (the same function), from the ops page's form."""
    who = _signed_in(deps, headers, "/api/ops", roles=(OPERATOR_ROLE,), doing="settle escalated effects")
    if isinstance(who, Page):
        return who
    form = _form(body)
    if form is None:
        return render("message.html", 400, title="Bad form", principal=who, message="the form could not be read")
    key = form.get("key") or ""
    # The effect's case, from the page's row: the effect is then found with one read of it. A form without it
    # is served by the key alone (a wider search: ``Ledger.find``).
    case_id = form.get("caseId") or None
    refused = _post_guard(deps, who, headers, url, purpose=resolve_purpose(key), form=form)
    if refused is not None:
        return refused
    outcome, why = form.get("outcome"), (form.get("why") or "").strip()
    note_id, reason = (form.get("creditNoteId") or "").strip(), (form.get("reason") or "").strip()
    problem = None
    if not why:
        problem = "say how the outcome was established (kept on the effect)"
    elif outcome == "done" and not note_id:
        problem = "give the credit note id the supplier issued"
    elif outcome == "failed" and not reason:
        problem = "give the reason it did not happen"
    elif outcome not in ("done", "failed"):
        problem = "choose whether it happened (done) or not (failed)"
    if problem is not None:
        return ops_page(deps, headers, notice=f"Nothing recorded: {problem}.", status=400)
    try:
        view = resolve_effect(
            deps.ops_page.resolver,
            key,
            result={"creditNoteId": note_id} if outcome == "done" else None,
            reason=reason if outcome == "failed" else None,
            by=who.recorded,
            why=why,
            case_id=case_id,
        )
    except Refused as exc:
        return ops_page(deps, headers, notice=f"Nothing recorded: {exc}.", status=409)
    effect, case = view["effect"], view["case"]
    settled = SETTLED_TEXT.get(view["settled"], view["settled"])
    now = f"; now {case['status']} at v{case['version']}" if case is not None else ""
    return ops_page(
        deps,
        headers,
        notice=f"Recorded {effect['status']} for effect {effect['key'][:12]} of case {effect['caseId']} "
        f"by {who.recorded}. The case: {settled}{now}.",
    )
