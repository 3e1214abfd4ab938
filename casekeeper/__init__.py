"""Casekeeper's guard for agent workflows: every external effect at most once, on the facts it was decided on.

Everything a user needs is importable from here::

    from casekeeper import Guard, open_sqlite, DownstreamRejected, OutcomeUnknown

    guard = Guard(open_sqlite("app.sqlite"), call_timeout=30)

    @guard.effect("refund", commit="refunded", lookup=payments.find, retry_same_key=True)
    def refund(key, args):
        return payments.pay(amount=args["amount"], idempotency_key=key)

    decision = guard.decide("refund-42")
    refund.run(decision, {"amount": "12.50"})

See docs/guard.md for the call contract, approvals, reconciliation, checkpoints and stores.
The Agent Framework pieces are in :mod:`casekeeper.agent` (imported on demand: they need
``agent-framework-core``).
"""

from __future__ import annotations

from casekeeper.approvals import ApprovalRequest, asked_on
from casekeeper.cases import (
    OPEN_STATUSES,
    RECONCILED_SUFFIX,
    Answer,
    Case,
    Effect,
    EffectStatus,
    RecheckResult,
    Transition,
    approval_request_id,
    effect_key,
)
from casekeeper.clock import Clock, ManualClock, SystemClock
from casekeeper.effects import Call, Decision, EffectResult, Lookup, Settled
from casekeeper.errors import (
    AlreadyExists,
    ApprovalNotPending,
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
    StaleApproval,
    StaleDecision,
    StoreError,
    StoreUnavailable,
)
from casekeeper.guard import Guard, GuardedEffect
from casekeeper.stores import CONTAINERS, Document, DocumentStore, Query, open_cosmos, open_sqlite

__all__ = [
    "CONTAINERS",
    "OPEN_STATUSES",
    "RECONCILED_SUFFIX",
    "AlreadyExists",
    "Answer",
    "ApprovalNotPending",
    "ApprovalPending",
    "ApprovalRequest",
    "ArgumentsMismatch",
    "Call",
    "Case",
    "CaseError",
    "CaseNotFound",
    "CaseTooLarge",
    "CasekeeperError",
    "Clock",
    "ConcurrencyConflict",
    "ConfigurationError",
    "Decision",
    "Document",
    "DocumentStore",
    "DownstreamError",
    "DownstreamRejected",
    "Effect",
    "EffectError",
    "EffectFailed",
    "EffectInFlight",
    "EffectResult",
    "EffectStatus",
    "Guard",
    "GuardedEffect",
    "InvalidDocumentId",
    "Lookup",
    "ManualClock",
    "MissingCommitIntent",
    "NeedsReconciliation",
    "OutcomeAlreadyRecorded",
    "OutcomeUnknown",
    "Query",
    "RecheckResult",
    "SendDeadlinePassed",
    "Settled",
    "StaleApproval",
    "StaleDecision",
    "StoreError",
    "StoreUnavailable",
    "SystemClock",
    "Transition",
    "approval_request_id",
    "asked_on",
    "effect_key",
    "open_cosmos",
    "open_sqlite",
]
