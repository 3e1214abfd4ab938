"""The invoice app's approvals as data (rule R6): the pending request and the answers, read in one place.

A case waiting for a person holds one :class:`~shared.workflow.messages.ApprovalRequest` in its
``data.pendingApproval``; :func:`pending_request` is how everyone reads it. A person's answer is committed
as a field of the transition it makes (``Transition.answer``: who decided what, on which version, to
which request), never only in its reason text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from casekeeper import Case
from shared.workflow.messages import PENDING_APPROVAL, ApprovalRequest


def pending_request(
    case: Case | Mapping[str, Any], request_type: type[ApprovalRequest] = ApprovalRequest
) -> ApprovalRequest | None:
    """The approval request ``case`` (a case, or its ``data``) waits for; ``None`` when none is pending or
    what is stored is not a request (a damaged document is not a pending approval). ``request_type``: the
    type the running build makes requests of, when the caller holds it (the workflow's gate, whose type a
    release may change)."""
    data = case.data if isinstance(case, Case) else case
    stored = data.get(PENDING_APPROVAL)
    if not isinstance(stored, Mapping) or not stored.get("requestId"):
        return None
    try:
        return request_type.from_json(dict(stored))
    except (KeyError, TypeError, ValueError, ArithmeticError):
        return None


def pending_ref(case: Case) -> tuple[str, int] | None:
    """The id of the request ``case`` waits for and the version it was asked on: all the door needs to
    judge an answer, read from the same stored request without requiring the rest of it."""
    stored = case.data.get(PENDING_APPROVAL)
    if not isinstance(stored, Mapping) or not stored.get("requestId"):
        return None
    try:
        return str(stored["requestId"]), int(stored.get("caseVersion", -1))
    except (TypeError, ValueError):
        return str(stored["requestId"]), -1
