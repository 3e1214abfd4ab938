"""The error tree of the guard, in one place.

Every error the guard raises on purpose is a :class:`CasekeeperError`; ``retryable`` says whether trying
the same thing again later can help. The tree is Casekeeper's own (``casekeeper.core.errors``), re-exported
(among them :class:`MissingCommitIntent`: a ``done`` effect without the commit it should lead to, never a
silent no-op), plus two errors of the public API:

- :class:`ApprovalNotPending`: an answer to a request that is not the case's pending one (answered
  already, withdrawn, or never asked);
- :class:`StaleApproval`: an answer given on a case version the case has left (rule R6).

What a guarded call raises to tell the guard what happened downstream:

- :class:`DownstreamRejected`: a definite refusal (a 4xx). Recorded ``failed``; the guard raises
  :class:`EffectFailed`.
- :class:`OutcomeUnknown` (or any other exception): the effect may or may not have happened. The ledger
  row stays ``started``; only a lookup by key (reconciliation) or a person settles it.
"""

from __future__ import annotations

from casekeeper.core.errors import (
    AlreadyExists,
    ApprovalPending,
    ArgumentsMismatch,
    CaseError,
    CasekeeperError,
    CaseNotFound,
    CaseTooLarge,
    ConcurrencyConflict,
    ConfigurationError,
    DownstreamError,
    DownstreamRejected,
    EffectError,
    EffectFailed,
    EffectInFlight,
    InvalidDocumentId,
    MissingCommitIntent,
    NeedsReconciliation,
    OutcomeAlreadyRecorded,
    OutcomeUnknown,
    SendDeadlinePassed,
    StaleDecision,
    StoreError,
    StoreUnavailable,
)


class ApprovalNotPending(CaseError):
    """The answered request is not the case's pending approval: it was answered already (one answer per
    request), withdrawn, or never asked. Nothing was changed."""

    def __init__(self, *, case_id: str, request_id: str, detail: str) -> None:
        super().__init__(f"approval {request_id} of case {case_id!r} is not pending: {detail}", case_id=case_id)
        self.request_id = request_id
        self.detail = detail


class StaleApproval(CaseError):
    """The answer was given on a case version the case has left (rule R6): the approver saw other
    facts. Nothing was changed; decide again and ask again. ``closed`` names the change of facts that closed
    the request, when one did."""

    def __init__(
        self, *, case_id: str, request_id: str, answered_on: int, current_version: int, closed: str | None = None
    ) -> None:
        super().__init__(
            f"approval {request_id} of case {case_id!r} answered on v{answered_on}, case is at v{current_version}"
            + (f" ({closed})" if closed else ""),
            case_id=case_id,
        )
        self.request_id = request_id
        self.answered_on = answered_on
        self.current_version = current_version
        self.closed = closed
        """What closed the request, when a change of facts did (its version and reason)."""


__all__ = [
    "AlreadyExists",
    "ApprovalNotPending",
    "ApprovalPending",
    "ArgumentsMismatch",
    "CaseError",
    "CaseNotFound",
    "CaseTooLarge",
    "CasekeeperError",
    "ConcurrencyConflict",
    "ConfigurationError",
    "DownstreamError",
    "DownstreamRejected",
    "EffectError",
    "EffectFailed",
    "EffectInFlight",
    "InvalidDocumentId",
    "MissingCommitIntent",
    "NeedsReconciliation",
    "OutcomeAlreadyRecorded",
    "OutcomeUnknown",
    "SendDeadlinePassed",
    "StaleApproval",
    "StaleDecision",
    "StoreError",
    "StoreUnavailable",
]
