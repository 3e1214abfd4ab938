"""The workflow's message and state types.

They are module-level dataclasses because Agent Framework pickles them into checkpoints under the key
``module:QualName``; checkpoint loading unpickles only the types listed in :data:`CHECKPOINT_TYPES`
(rule R8). Renaming or moving one of these classes is a breaking change for in-flight runs: keep the
old name importable, or let ``casekeeper drain check`` list the runs it would strand.

Unpickling restores an object's fields without running ``__init__``: a field added later is read from
the class, so only a plain default (``= None``) reaches objects pickled before it existed; a field
without one, or with ``default_factory`` (which leaves no class attribute), is missing from them. Such
changes are caught before a resume (``shared.workflow.state_schemas``) and before merging
(``tests/unit/test_state_schema_manifest.py``).

Amounts travel as ``Decimal`` (which checkpoint loading allows); JSON documents hold decimal strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from shared.domain.money import amount_text, parse_amount


@dataclass
class Investigate:
    """Start message: decide what to do with the case at its current facts."""

    case_id: str
    reason: str


@dataclass
class ApprovalAnswer:
    """A person's answer to an approval request."""

    request_id: str
    decision: str  # "approve" | "reject"
    case_version: int
    approver: str
    reason: str | None = None
    """Why, for a rejection. A plain default, so an answer pickled before the field existed reads ``None``
    (a ``default_factory`` would leave it missing: see the module docstring)."""


@dataclass
class AnswerWithoutCheckpoint:
    """Start message when an answer arrives but the pause checkpoint cannot be resumed (rule R8):
    the run is rebuilt from the case document, which holds the pending request."""

    case_id: str
    answer: ApprovalAnswer


@dataclass
class CaseSnapshot:
    """The case as intake read it: the decision is made on ``version``. ``requests`` are its credit-note
    requests as the ledger knew them then (``CreditRequest.to_json``), for the money rule."""

    case_id: str
    version: int
    status: str
    facts: dict[str, Any]
    requests: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Proposed:
    """A proposal that passed validation, or the reason it did not."""

    snapshot: CaseSnapshot
    action: str
    amount: Decimal | None
    currency: str | None
    rationale: str
    proposer: str
    invalid_reason: str | None = None
    basis: dict[str, Any] = field(default_factory=dict)
    """The money rule's numbers the proposal was checked against (``Position.to_json``)."""
    proposed_by: str | None = None
    """The proposer's label (``rules``, ``model <deployment>``): recorded on the committed transition."""


PENDING_APPROVAL = "pendingApproval"
"""The case ``data`` field holding the :class:`ApprovalRequest` a case waits for (read it with
``shared.workflow.approval.pending_request``)."""


@dataclass
class ApprovalRequest:
    """What the approver sees (rule R6): the version it was asked on, the action and the facts. The one
    approval-request type of the invoice app: the gate asks it, the case stores it (``PENDING_APPROVAL``),
    the door, the pages and the commands read it back."""

    case_id: str
    case_version: int
    request_id: str
    action: str
    amount: Decimal
    currency: str
    facts: dict[str, Any]
    rationale: str
    basis: dict[str, Any] = field(default_factory=dict)
    """How the amount was computed (over-billed, received, outstanding, remaining)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "caseId": self.case_id,
            "caseVersion": self.case_version,
            "requestId": self.request_id,
            "action": self.action,
            "amount": amount_text(self.amount),
            "currency": self.currency,
            "facts": self.facts,
            "rationale": self.rationale,
            "basis": self.basis,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ApprovalRequest:
        return cls(
            case_id=str(data["caseId"]),
            case_version=int(data["caseVersion"]),
            request_id=str(data["requestId"]),
            action=str(data["action"]),
            amount=parse_amount(data["amount"], "amount"),
            currency=str(data["currency"]),
            facts=dict(data.get("facts") or {}),
            rationale=str(data.get("rationale", "")),
            basis=dict(data.get("basis") or {}),
        )


@dataclass
class RebuiltAnswer:
    """An answer routed to the gate without a pause checkpoint (the run was rebuilt)."""

    request: ApprovalRequest
    answer: ApprovalAnswer


@dataclass
class CommitOrder:
    """What the commit step executes: an optional effect, then a conditional status change."""

    case_id: str
    decided_on_version: int
    target_status: str
    reason: str
    action: str | None = None  # an effect to run first, e.g. "request_credit_note"
    amount: Decimal | None = None
    currency: str | None = None
    clear_pending_approval: bool = False
    invoice_id: str | None = None
    supplier_id: str | None = None
    basis: dict[str, Any] = field(default_factory=dict)
    proposed_by: str | None = None
    """Who proposed the decision (``rules``, ``model <deployment>``); ``None`` for a person's answer."""
    answer: dict[str, Any] | None = None
    """The person's answer this order commits (``Answer.to_json``: who decided what, on which version), or
    ``None``."""

    def __post_init__(self) -> None:
        # Plain strings only: an enum member would be pickled under its own type key, which the
        # checkpoint allow-list (rightly) refuses.
        self.target_status = str(self.target_status)
        self.action = None if self.action is None else str(self.action)


@dataclass
class RunOutcome:
    """The workflow's output: what happened to the case, for the caller to log and settle on."""

    case_id: str
    outcome: str  # committed | already_applied | nothing_to_do | awaiting_approval | superseded | ignored
    status: str | None = None
    version: int | None = None
    detail: str = ""
    effect_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.status = None if self.status is None else str(self.status)


CHECKPOINT_TYPES: tuple[type, ...] = (
    Investigate,
    ApprovalAnswer,
    AnswerWithoutCheckpoint,
    CaseSnapshot,
    Proposed,
    ApprovalRequest,
    RebuiltAnswer,
    CommitOrder,
    RunOutcome,
)


def type_key(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


ALLOWED_CHECKPOINT_TYPES: frozenset[str] = frozenset(type_key(t) for t in CHECKPOINT_TYPES)
"""What checkpoint loading may unpickle: exactly the types above."""
