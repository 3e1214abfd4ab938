"""Approvals asked and answered on a record version (rule R6), one answer per request.

Asking commits the record, conditionally on the decision's version, to an "awaiting" status with the
request in ``data.pendingApproval``; the request carries the version the record has **while it waits**
(the decision's version plus one), which is what the approver sees. Its id is derived from (record,
action, that version), so a replayed ask asks the same request again.

Answering re-reads the record and accepts the answer only if the request is still the pending one and the
record is still at the version it was asked on; the answer is itself a conditional commit that clears
the pending request, so of two answers to one request exactly one lands. An approval returns a
:class:`~casekeeper.Decision` pinned to the version after the answer: the effect it leads to is keyed on
that version, so a redelivered answer (after a crash) replays the same effect, never a second one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from casekeeper.core.cases import Answer, Case, CaseRepository, version_after
from casekeeper.core.errors import StaleDecision
from casekeeper.core.keys import approval_request_id, canonical_json, effect_key
from casekeeper.effects import Decision
from casekeeper.errors import ApprovalNotPending, StaleApproval

PENDING = "pendingApproval"
ANSWERED = "approval"


@dataclass(frozen=True)
class ApprovalRequest:
    """An approval asked on ``version`` of record ``record_id`` for ``action`` with ``details`` (JSON).
    Show the approver the record at ``version``; send the answer with ``on_version=version``."""

    record_id: str
    request_id: str
    action: str
    version: int
    details: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The request as stored in the record's ``data.pendingApproval``."""
        return {
            "requestId": self.request_id,
            "action": self.action,
            "askedOn": self.version,
            "details": self.details,
        }

    @classmethod
    def from_json(cls, record_id: str, data: Mapping[str, Any]) -> ApprovalRequest:
        """The request stored in a record's ``data.pendingApproval``."""
        return cls(record_id, str(data["requestId"]), str(data["action"]), int(data["askedOn"]), dict(data["details"]))


def asked_on(decided_on_version: int) -> int:
    """The version an approval asked by a decision on ``decided_on_version`` is asked on: asking is a commit,
    which moves the version by one, and the approver sees the record as it waits."""
    return version_after(decided_on_version)


def ask(
    records: CaseRepository, decision: Decision, action: str, details: Mapping[str, Any], *, status: str
) -> ApprovalRequest:
    """Commit the record to ``status`` with the request pending (see the module docstring)."""
    on = asked_on(decision.version)
    canonical_json(dict(details))
    request = ApprovalRequest(
        decision.record_id,
        approval_request_id(decision.record_id, action, on),
        action,
        on,
        dict(details),
    )
    committed = records.commit_status(
        decision.record_id,
        decision.version,
        status,
        reason=f"approval of {action} requested",
        data={PENDING: request.to_json()},
    )
    if committed is not None:
        return request
    record = records.require(decision.record_id)
    pending = record.data.get(PENDING) or {}
    if pending.get("requestId") == request.request_id and record.version == on:
        return request  # a replay of this very ask: ask the same request again
    raise StaleDecision(
        key=effect_key(decision.record_id, action, decision.version),
        case_id=decision.record_id,
        action=action,
        decided_on_version=decision.version,
        current_version=record.version,
    )


def answer(
    records: CaseRepository,
    record_id: str,
    request_id: str,
    *,
    approve: bool,
    by: str,
    on_version: int,
    reason: str | None,
    approved_status: str,
    rejected_status: str,
) -> tuple[Case, dict[str, Any]] | None:
    """Commit the answer (see the module docstring). Returns, for an approval, the record after it and the
    answer as recorded (``data.approval``); ``None`` for a rejection."""
    entry: dict[str, Any] = {
        "requestId": request_id,
        "approved": approve,
        "by": by,
        "reason": reason,
        "onVersion": on_version,
    }
    for _ in range(8):
        record = records.require(record_id)
        pending = record.data.get(PENDING) or {}
        entry.update(action=pending.get("action"), details=pending.get("details"))
        if pending.get("requestId") != request_id:
            answered = record.data.get(ANSWERED) or {}
            same = all(answered.get(k) == entry[k] for k in ("requestId", "approved", "by", "onVersion"))
            if same and approve and record.version == version_after(on_version) and record.status == approved_status:
                # This answer landed before and nothing has happened since (a crash right after it):
                # the same decision again, on the same version, so its effect is replayed, not repeated.
                return record, dict(answered)
            detail = "answered already" if answered.get("requestId") == request_id else "no such pending request"
            raise ApprovalNotPending(case_id=record_id, request_id=request_id, detail=detail)
        waiting_on = int(pending.get("askedOn", -1))
        if on_version != record.version or waiting_on != record.version:
            raise StaleApproval(
                case_id=record_id, request_id=request_id, answered_on=on_version, current_version=record.version
            )
        target = approved_status if approve else rejected_status
        who = f"{'approved' if approve else 'rejected'} by {by}" + (f": {reason}" if reason else "")
        answered_by = Answer(request_id, approve, by, on_version, reason)
        committed = records.commit_status(
            record_id,
            record.version,
            target,
            reason=who,
            data={PENDING: None, ANSWERED: entry},
            expected=record,
            answer=answered_by,
        )
        if committed is None:
            continue  # the record moved meanwhile: look again (another answer, or a change of facts)
        if not approve:
            return None
        return committed, entry
    raise StaleApproval(case_id=record_id, request_id=request_id, answered_on=on_version, current_version=-1)
