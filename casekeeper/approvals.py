"""Approvals asked and answered on a case version (rule R6), one answer per request.

Asking commits the case, conditionally on the decision's version, to an "awaiting" status with the
request in ``data.pendingApproval``; the request carries the version the case has **while it waits**
(the decision's version plus one), which is what the approver sees. Its id is derived from (case,
action, that version), so a replayed ask asks the same request again.

A change of facts through :meth:`~casekeeper.Guard.update` while a request is pending closes it in the same
write (:func:`closed_by_change`): the case goes back to the status the request was asked from
(``askedFrom``; :data:`CLOSED_TO` for a request that names none), the request moves from
``data.pendingApproval`` to ``data.staleApproval`` with the reason and the version that made it stale, and an
answer to it raises ``StaleApproval`` naming that change. An approval whose effect has not run yet (the
case is still at the version the answer made) lapses the same way. The case never waits on a request
nobody can answer, nor stays approved on facts it has left.

Answering re-reads the case and accepts the answer only if the request is still the pending one and the
case is still at the version it was asked on; the answer is itself a conditional commit that clears
the pending request, so of two answers to one request exactly one lands. An approval returns a
:class:`~casekeeper.Decision` pinned to the version after the answer: the effect it leads to is keyed on
that version, so a redelivered answer (after a crash) replays the same effect, never a second one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from casekeeper.core.cases import Answer, Case, CaseRepository, version_after
from casekeeper.core.errors import ApprovalPending, StaleDecision
from casekeeper.core.keys import approval_request_id, canonical_json, effect_key
from casekeeper.effects import Decision
from casekeeper.errors import ApprovalNotPending, StaleApproval

PENDING = "pendingApproval"
ANSWERED = "approval"
STALE = "staleApproval"
"""The ``data`` field holding the last request a change of facts closed (see :func:`closed_by_change`)."""
CLOSED_TO = "open"
"""The status a case goes back to when a change of facts closes a pending request that does not say which
status it was asked from."""


@dataclass(frozen=True)
class ApprovalRequest:
    """An approval asked on ``version`` of case ``case_id`` for ``action`` with ``details`` (JSON).
    Show the approver the case at ``version``; send the answer with ``on_version=version``."""

    case_id: str
    request_id: str
    action: str
    version: int
    details: dict[str, Any]
    asked_from: str | None = None
    """The status the case had when the request was asked: where a change of facts sends it back."""

    def to_json(self) -> dict[str, Any]:
        """The request as stored in the case's ``data.pendingApproval``."""
        return {
            "requestId": self.request_id,
            "action": self.action,
            "askedOn": self.version,
            "details": self.details,
            **({"askedFrom": self.asked_from} if self.asked_from is not None else {}),
        }

    @classmethod
    def from_json(cls, case_id: str, data: Mapping[str, Any]) -> ApprovalRequest:
        """The request stored in a case's ``data.pendingApproval``."""
        asked_from = data.get("askedFrom")
        return cls(
            case_id,
            str(data["requestId"]),
            str(data["action"]),
            int(data["askedOn"]),
            dict(data["details"]),
            str(asked_from) if asked_from is not None else None,
        )


def pending_of(case: Case) -> dict[str, Any] | None:
    """The case's pending approval request as stored (``data.pendingApproval``), or ``None``."""
    pending = case.data.get(PENDING)
    return dict(pending) if isinstance(pending, Mapping) and pending else None


UNANSWERABLE = "the case has moved past the version it was asked on, so it can no longer be answered: ask again"


def answerable(pending: Mapping[str, Any], case: Case) -> bool:
    """Whether the pending request can still be answered: the case is at the version it was asked on."""
    return int(pending.get("askedOn", -1)) == case.version


def closed_by_change(case: Case, reason: str) -> tuple[str, dict[str, Any]] | None:
    """What a change of facts on ``case`` (with ``reason``) does to its pending request, or to an approval
    not used yet: the status the case goes back to and the ``data`` fields written with the change (the
    request moved to ``staleApproval``, marked with the reason and the version the change makes). ``None``
    when there is neither.

    An approval is not used yet while the case is still at the version its answer made: its effect would
    have committed and moved the version. The approval was given on the facts the change replaces, so it
    lapses; left standing, the case would stay in the approved status with no decision that can act on it."""
    pending = pending_of(case)
    if pending is not None:
        stale = {**pending, "staleOn": version_after(case.version), "staleReason": reason}
        return str(pending.get("askedFrom") or CLOSED_TO), {PENDING: None, STALE: stale}
    answered = case.data.get(ANSWERED)
    if not isinstance(answered, Mapping) or answered.get("approved") is not True:
        return None
    if case.version != version_after(int(answered.get("onVersion", -2))):
        return None
    lapsed = {
        **answered,
        "staleOn": version_after(case.version),
        "staleReason": f"{reason} (after its approval, before its effect ran: the approval lapsed)",
    }
    return str(answered.get("askedFrom") or CLOSED_TO), {STALE: lapsed}


def asked_on(decided_on_version: int) -> int:
    """The version an approval asked by a decision on ``decided_on_version`` is asked on: asking is a commit,
    which moves the version by one, and the approver sees the case as it waits."""
    return version_after(decided_on_version)


def ask(
    cases: CaseRepository, decision: Decision, action: str, details: Mapping[str, Any], *, status: str
) -> ApprovalRequest:
    """Commit the case to ``status`` with the request pending (see the module docstring)."""
    on = asked_on(decision.version)
    canonical_json(dict(details))
    asked_from = decision.case.status if decision.case.version == decision.version else None
    request = ApprovalRequest(
        decision.case_id,
        approval_request_id(decision.case_id, action, on),
        action,
        on,
        dict(details),
        asked_from,
    )
    waiting = pending_of(decision.case) if decision.case.version == decision.version else None
    data: dict[str, Any] = {PENDING: request.to_json()}
    if waiting is not None and not answerable(waiting, decision.case):
        # A request nobody can answer any more (the case moved past it): replaced, kept as stale.
        closed = closed_by_change(decision.case, f"replaced by request {request.request_id}")
        assert closed is not None
        data = {**closed[1], **data}
    elif waiting is not None:
        # Another request waits on this version: asking over it would drop it unanswered.
        raise ApprovalPending(
            key=effect_key(decision.case_id, action, decision.version),
            case_id=decision.case_id,
            action=action,
            request_id=str(waiting.get("requestId")),
        )
    committed = cases.commit_status(
        decision.case_id,
        decision.version,
        status,
        reason=f"approval of {action} requested",
        data=data,
    )
    if committed is not None:
        return request
    case = cases.require(decision.case_id)
    pending = case.data.get(PENDING) or {}
    if pending.get("requestId") == request.request_id and case.version == on:
        return request  # a replay of this very ask: ask the same request again
    raise StaleDecision(
        key=effect_key(decision.case_id, action, decision.version),
        case_id=decision.case_id,
        action=action,
        decided_on_version=decision.version,
        current_version=case.version,
    )


def answer(
    cases: CaseRepository,
    case_id: str,
    request_id: str,
    *,
    approve: bool,
    by: str,
    on_version: int,
    reason: str | None,
    approved_status: str,
    rejected_status: str,
) -> tuple[Case, dict[str, Any]] | None:
    """Commit the answer (see the module docstring). Returns, for an approval, the case after it and the
    answer as recorded (``data.approval``); ``None`` for a rejection."""
    entry: dict[str, Any] = {
        "requestId": request_id,
        "approved": approve,
        "by": by,
        "reason": reason,
        "onVersion": on_version,
    }
    for _ in range(8):
        case = cases.require(case_id)
        pending = case.data.get(PENDING) or {}
        entry.update(action=pending.get("action"), details=pending.get("details"), askedFrom=pending.get("askedFrom"))
        if pending.get("requestId") != request_id:
            stale = case.data.get(STALE) or {}
            if stale.get("requestId") == request_id:
                raise StaleApproval(
                    case_id=case_id,
                    request_id=request_id,
                    answered_on=on_version,
                    current_version=case.version,
                    closed=f"the request was closed on v{stale.get('staleOn')} by a change of facts: "
                    f"{stale.get('staleReason')}",
                )
            answered = case.data.get(ANSWERED) or {}
            same = all(answered.get(k) == entry[k] for k in ("requestId", "approved", "by", "onVersion"))
            if same and approve and case.version == version_after(on_version) and case.status == approved_status:
                # This answer landed before and nothing has happened since (a crash right after it):
                # the same decision again, on the same version, so its effect is replayed, not repeated.
                return case, dict(answered)
            detail = "answered already" if answered.get("requestId") == request_id else "no such pending request"
            raise ApprovalNotPending(case_id=case_id, request_id=request_id, detail=detail)
        waiting_on = int(pending.get("askedOn", -1))
        if on_version != case.version or waiting_on != case.version:
            raise StaleApproval(
                case_id=case_id, request_id=request_id, answered_on=on_version, current_version=case.version
            )
        target = approved_status if approve else rejected_status
        who = f"{'approved' if approve else 'rejected'} by {by}" + (f": {reason}" if reason else "")
        answered_by = Answer(request_id, approve, by, on_version, reason)
        committed = cases.commit_status(
            case_id,
            case.version,
            target,
            reason=who,
            data={PENDING: None, ANSWERED: entry},
            expected=case,
            answer=answered_by,
        )
        if committed is None:
            continue  # the case moved meanwhile: look again (another answer, or a change of facts)
        if not approve:
            return None
        return committed, entry
    raise StaleApproval(case_id=case_id, request_id=request_id, answered_on=on_version, current_version=-1)
