"""The page of one case, ``GET /api/cases/{caseId}/page``: what a person needs to understand a case and
what they can do next, for an approver or an operator.

It shows the same document as ``GET /api/cases/{caseId}`` and ``casekeeper case show``
(:func:`shared.views.case.case_document`): the facts, the money rule's numbers, the effects with their
state and age, a timeline of the case's history, its approvals, notes and the events set aside, and the
next actions its status calls for, as links and the exact commands. A case that cannot be read says so
(503); an id no store accepts, or an unknown case, is a 404.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from decimal import Decimal
from typing import Any
from urllib.parse import quote

from casekeeper.errors import CasekeeperError, InvalidDocumentId
from shared.domain.invoice import Status
from shared.views.case import CaseViewReads, case_document
from shared.web.identity import APPROVER_ROLE, OPERATOR_ROLE, Principal
from shared.web.render import Page, approval_path, case_href, render

__all__ = ["case_href", "case_page", "next_actions"]

CASE_REFRESH_SECONDS = 5
EFFECT_TEXT = {
    "started": "called; no outcome recorded yet (in flight, or unknown once past the call timeout)",
    "done": "done: the supplier has it",
    "failed": "failed: the supplier refused, or the case moved on before the call",
    "needs_reconciliation": "a person must establish the outcome",
}


def case_page(records: CaseViewReads, principal: Principal, case_id: str, *, store_option: str) -> Page:
    """The page of ``case_id`` for ``principal`` (already checked to hold a role that may see it)."""
    try:
        case = records.cases.get(case_id)
        document = case_document(records, case, with_ages=True) if case is not None else None
    except InvalidDocumentId as exc:
        return render("message.html", 404, title="No such case", principal=principal, message=str(exc))
    except CasekeeperError as exc:
        return render(
            "message.html",
            503,
            title="Could not read the case",
            principal=principal,
            message=f"Could not read case {case_id}: {type(exc).__name__}: {exc}. Reload to try again.",
            refresh=CASE_REFRESH_SECONDS,
        )
    if document is None:
        return render("message.html", 404, title="No such case", principal=principal, message=f"no case {case_id!r}")
    pending = document["pendingApproval"]
    view = {
        "doc": document,
        "case": document["case"],
        "jsonHref": f"/api/cases/{quote(case_id, safe='')}",
        "effects": [
            {**e, "text": EFFECT_TEXT.get(e["status"], e["status"]), "outcome": outcome_text(e)}
            for e in document["effects"]
        ],
        "timeline": list(reversed(document["history"])),
        "approvalHref": approval_path(case_id, pending["requestId"]) if pending else None,
        "approvalLinks": _approval_links(case_id, document, approval_path),
        "next": next_actions(
            document, principal, store_option, approval_path(case_id, pending["requestId"]) if pending else ""
        ),
    }
    return render("case.html", principal=principal, v=view, refresh=CASE_REFRESH_SECONDS)


def outcome_text(effect: Mapping[str, Any]) -> str:
    """An effect's outcome in a few words: the credit note it made, or why it did not happen."""
    result = effect.get("result")
    if isinstance(result, Mapping) and result.get("creditNoteId"):
        amount = f" for {result['amount']} {result.get('currency', '')}".rstrip() if result.get("amount") else ""
        return f"credit note {result['creditNoteId']}{amount}"
    if effect.get("reason"):
        return str(effect["reason"])
    return "-" if result is None else json.dumps(result, default=str)[:200]


def _approval_links(case_id: str, document: Mapping[str, Any], approval_path: Any) -> list[dict[str, Any]]:
    """Each past request, linked to its page (its request id follows from the version it was asked on)."""
    from casekeeper import approval_request_id
    from shared.workflow.actions import REQUEST_CREDIT_NOTE

    rows = []
    for event in document["approvals"]["history"]:
        row = dict(event)
        if event["event"] == "requested":
            request_id = approval_request_id(case_id, REQUEST_CREDIT_NOTE, int(event["onVersion"]))
            row["href"] = approval_path(case_id, request_id)
        rows.append(row)
    return rows


def next_actions(
    document: Mapping[str, Any], principal: Principal, store_option: str, approval_href: str
) -> list[dict[str, str]]:
    """What a person can do next, from the case's status and effects: each a text, and a link (``href``) or a
    command to run (``command``), either possibly empty."""
    case = document["case"]
    case_id, status = case["id"], case["status"]
    quoted = shlex.quote(case_id)
    actions: list[dict[str, str]] = []
    escalated = [e for e in document["effects"] if e["status"] == "needs_reconciliation"]
    for e in escalated:
        actions.append(
            {
                "text": f"Effect {e['shortKey']} needs a person: ask the supplier about key {e['key']}, then record "
                "the outcome on the operations page, or run:",
                "command": f'casekeeper effects resolve {e["key"]} --done \'{{"creditNoteId": "CN-..."}}\' '
                f"--by {shlex.quote(principal.name)} --why '...' {store_option} --case {quoted}",
                "href": "/api/ops" if principal.has(OPERATOR_ROLE) else "",
            }
        )
    if status == Status.AWAITING_APPROVAL and document["pendingApproval"]:
        who = "Approve or reject it" if principal.has(APPROVER_ROLE) else "An approver answers it"
        actions.append(_do(f"{who} on its approval page.", href=approval_href))
    elif status == Status.NEEDS_REVIEW:
        credit = document["credit"] or {}
        if credit and Decimal(str(credit.get("excess") or 0)) > 0:
            for r in credit.get("requests", []):
                if r.get("state") == "outstanding":
                    actions.append(
                        {
                            "text": f"Requests exceed the over-billing. If request {r['effectKey'][:12]} will not be "
                            "honoured, agreed with the supplier, withdraw it:",
                            "command": f"casekeeper requests withdraw {quoted} {r['effectKey'][:12]} "
                            f"--by {shlex.quote(principal.name)} --why '...' {store_option}",
                            "href": "",
                        }
                    )
        actions.append(
            {
                "text": "Once the cause is settled, decide the case again:",
                "command": f"casekeeper send case.investigate {quoted}",
                "href": "",
            }
        )
    elif status == Status.CREDIT_REQUESTED:
        actions.append(_do("Nothing to do: waiting for the supplier's credit note (credit_note.issued)."))
    elif status == Status.OPEN:
        actions.append(_do("Nothing to do: the case is being decided. This page refreshes itself."))
    elif status == Status.AWAITING_INVOICE:
        actions.append(
            _do(
                "Waiting for the invoice: these facts came before its invoice.received and are held; nothing is "
                "decided until it comes. If it does not, an invoice_missing alert says so (INVOICE_WAIT_SECONDS "
                "after the last fact): check that the sender delivers the invoice under this case id."
            )
        )
    elif not escalated:
        actions.append(_do(f"Nothing to do: the case is {status}."))
    return actions


def _do(text: str, *, href: str = "", command: str = "") -> dict[str, str]:
    return {"text": text, "href": href, "command": command}
