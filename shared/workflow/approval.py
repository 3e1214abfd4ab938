"""The invoice app's approvals as data (rule R6): the pending request and the answers, read in one place.

A case waiting for a person holds one :class:`~shared.workflow.messages.ApprovalRequest` in its
``data.pendingApproval``; :func:`pending_request` is how everyone reads it. A person's answer is committed
as a field of the transition it makes (``Transition.answer``: who decided what, on which version, to
which request); :func:`answer_of` reads it back.

Transitions written before answers were fields carry the answer only in their reason text ("approved by
ann", "rejected by bob (reason: ...)", "approved by ann, but 1500.00 exceeds what may still be requested
(100.00)"). :func:`answer_of` reads those with :data:`LEGACY_ANSWER`, which knows that last form: the
general pattern alone would read its approver as "ann, but 1500.00 exceeds ...". Nothing new is written
that way, so the legacy reading only ever meets old documents.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from casekeeper import RECONCILED_SUFFIX, Answer, Record, Transition, approval_request_id
from shared.domain.invoice import Action
from shared.workflow.messages import PENDING_APPROVAL, ApprovalRequest

LEGACY_ANSWER = re.compile(
    r"^(?P<decision>approved|rejected) by (?P<by>.+?)"
    r"(?:, but .+? exceeds what may still be requested .*?)?"
    r"(?: \(reason: (?P<reason>.*?)\))?"
    r"(?: " + re.escape(RECONCILED_SUFFIX) + r")?$",
    re.DOTALL,
)
"""An answer as old transitions wrote it in their reason text (see the module docstring). Its groups are
(decision, approver, reason), as the pattern the operator views used had them."""


def pending_request(
    case: Record | Mapping[str, Any], request_type: type[ApprovalRequest] = ApprovalRequest
) -> ApprovalRequest | None:
    """The approval request ``case`` (a case, or its ``data``) waits for; ``None`` when none is pending or
    what is stored is not a request (a damaged document is not a pending approval). ``request_type``: the
    type the running build makes requests of, when the caller holds it (the workflow's gate, whose type a
    release may change)."""
    data = case.data if isinstance(case, Record) else case
    stored = data.get(PENDING_APPROVAL)
    if not isinstance(stored, Mapping) or not stored.get("requestId"):
        return None
    try:
        return request_type.from_json(dict(stored))
    except (KeyError, TypeError, ValueError, ArithmeticError):
        return None


def pending_ref(case: Record) -> tuple[str, int] | None:
    """The id of the request ``case`` waits for and the version it was asked on: all the door needs to
    judge an answer, read from the same stored request without requiring the rest of it."""
    stored = case.data.get(PENDING_APPROVAL)
    if not isinstance(stored, Mapping) or not stored.get("requestId"):
        return None
    try:
        return str(stored["requestId"]), int(stored.get("caseVersion", -1))
    except (TypeError, ValueError):
        return str(stored["requestId"]), -1


def answer_of(case_id: str, transition: Transition) -> Answer | None:
    """The person's answer ``transition`` committed, or ``None`` when it committed none. Reads the
    transition's ``answer`` field, or, for a transition written before that field existed, its reason."""
    if transition.answer is not None:
        return transition.answer
    match = LEGACY_ANSWER.match(transition.reason or "")
    if match is None:
        return None
    # An answer is committed on the version it was given on; the request was asked on that version.
    request_id = approval_request_id(case_id, Action.REQUEST_CREDIT_NOTE.value, transition.from_version)
    return Answer(
        request_id=request_id,
        approved=match["decision"] == "approved",
        by=match["by"],
        on_version=transition.from_version,
        reason=match["reason"],
    )
