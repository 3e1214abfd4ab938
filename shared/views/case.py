"""One case's view: everything the store knows about a case, as one JSON-ready document.

``GET /api/cases/{id}`` answers with :func:`case_document`, the case page shows it, and ``casekeeper case
show`` prints :func:`case_view` (the same document and the case's checkpoints, each judged against the
build). The history entries carry the person's answer a transition committed (``answer``: who decided what,
on which version, to which request), read as data (``Transition.answer``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from casekeeper import Answer, Case, DocumentStore, Effect
from casekeeper.cases import CaseRepository, Ledger
from casekeeper.checkpoints import CaseCheckpointStorage
from shared.domain.invoice import AWAITING_INVOICE
from shared.views.rejected import rejected_events
from shared.views.runs import CheckpointView, inspect_checkpoint
from shared.views.text import short
from shared.workflow.actions import money_position
from shared.workflow.build import WORKFLOW_NAME
from shared.workflow.fact_events import FACT_ORDER, SUPERSEDED

AWAITING_APPROVAL = "awaiting_approval"
_ASKED = "approval requested"
_SHOWN_APART = frozenset({"pendingApproval", SUPERSEDED, FACT_ORDER})
"""``data`` fields the case's document shows under their own names."""


class CaseReads(Protocol):
    """What a case's document is read from: the store (the rejected events, the clock) and the ledger (the
    case's effects). ``shared.app.operations.Operations`` is one."""

    @property
    def store(self) -> DocumentStore: ...

    @property
    def ledger(self) -> Ledger: ...


class CaseViewReads(CaseReads, Protocol):
    """:class:`CaseReads` and the case repository, for the view that looks the case up by id."""

    @property
    def cases(self) -> CaseRepository: ...


@dataclass(frozen=True)
class CaseRecords:
    """The case repository, the ledger and the store that holds their records: what the case views read
    (a :class:`CaseViewReads`). The composition root builds one for the API and the pages."""

    store: DocumentStore
    cases: CaseRepository
    ledger: Ledger


def case_document(reads: CaseReads, case: Case, *, with_ages: bool = False) -> dict[str, Any]:
    """The case as one JSON-ready document: ``GET /api/cases/{id}`` answers with it, and ``casekeeper case
    show`` adds the checkpoints. The money rule's numbers (``credit``) are ``None`` while the facts are
    incomplete. ``with_ages``: each effect's ``ageSeconds`` by the store's clock (one clock read, on Cosmos
    DB a round trip); without it the document changes only when the case or its effects do."""
    effects = reads.ledger.effects_for(case)
    now = reads.store.now() if effects and with_ages else None
    pending = case.data.get("pendingApproval") or None
    return {
        "case": case.summary(),
        "credit": _credit(case, effects),
        "history": [
            {
                "fromVersion": t.from_version,
                "toVersion": t.from_version + 1,
                "status": t.status,
                "reason": t.reason,
                "effectKey": t.effect_key,
                "factsChanged": t.facts_changed,
                "escalation": t.escalation,
                "proposedBy": t.proposed_by,
                "changes": t.changes,
                "deliveryId": t.delivery_id,
                "answer": _answer_json(t.answer),
                "at": t.at,
            }
            for t in case.history
        ],
        "effects": [_effect_json(e, None if now is None else now - e.ts) for e in effects],
        "pendingApproval": (
            {
                "requestId": pending["requestId"],
                "caseVersion": pending["caseVersion"],
                "amount": pending["amount"],
                "currency": pending.get("currency"),
                "facts": pending.get("facts"),
            }
            if pending
            else None
        ),
        "approvals": {"pending": pending, "history": approval_history(case)},
        "data": {k: v for k, v in case.data.items() if k not in _SHOWN_APART},
        "notes": list(case.notes),
        "rejectedEvents": rejected_events(reads.store, case.id),
        "awaitingInvoice": _awaiting_invoice(case),
        # Reports older than the fact the case holds: accepted, never applied, never dropped.
        "supersededEvents": list(case.data.get(SUPERSEDED) or ()),
        "factOrder": case.data.get(FACT_ORDER),
    }


def case_view(
    reads: CaseViewReads, case_id: str, graph_hash: str, allowed_types: frozenset[str]
) -> dict[str, Any] | None:
    """``casekeeper case show``'s document: :func:`case_document` and the checkpoints, each judged against
    the build whose graph hash is ``graph_hash``; ``None`` when there is no such case."""
    case = reads.cases.get(case_id)
    if case is None:
        return None
    storage = CaseCheckpointStorage(reads.store, case_id, allowed_types)
    checkpoints = [
        inspect_checkpoint(reads.store, storage, record, graph_hash) for record in storage.records(WORKFLOW_NAME)
    ]
    return {
        **case_document(reads, case, with_ages=True),
        "checkpoints": {
            "graphHash": graph_hash,
            "list": [c.to_json() for c in checkpoints],
            "newestRun": _newest_run(checkpoints),
        },
    }


def approval_history(case: Case) -> list[dict[str, Any]]:
    """The case's approval requests and the answers to them, oldest first: ``requested`` (on the version
    asked), then ``approved``/``rejected`` with who answered, on which version, and the status it led to."""
    events: list[dict[str, Any]] = []
    for t in case.history:
        reason = t.reason or ""
        decision = t.answer
        if t.status == AWAITING_APPROVAL and reason.startswith(_ASKED):
            events.append({"event": "requested", "onVersion": t.to_version, "detail": reason, "at": t.at})
        elif decision is not None:
            events.append(
                {
                    "event": decision.decision,
                    "by": decision.by,
                    **({"reason": decision.reason} if decision.reason else {}),
                    "onVersion": decision.on_version,
                    "status": t.status,
                    "effectKey": t.effect_key,
                    "at": t.at,
                }
            )
    return events


def _answer_json(answer: Answer | None) -> dict[str, Any] | None:
    """The answer as the history entry shows it: as the transition stores it (``Answer.to_json``)."""
    return answer.to_json() if answer is not None else None


def _awaiting_invoice(case: Case) -> dict[str, Any] | None:
    """For a case that holds facts before its invoice (docs/design.md#facts-before-their-case): since when,
    its last held fact (the invoice-missing alert counts from it) and the deliveries held; else ``None``."""
    if case.status != AWAITING_INVOICE:
        return None
    held = [t for t in case.history if t.facts_changed]
    return {
        "heldSince": held[0].at if held else case.ts,
        "lastFactAt": held[-1].at if held else case.ts,
        "deliveries": [t.delivery_id for t in held if t.delivery_id is not None],
    }


def _credit(case: Case, effects: list[Effect]) -> dict[str, Any] | None:
    """The money rule's numbers (over-billed, received, outstanding, remaining, excess) and each request."""
    try:
        return money_position(case.facts, effects).to_json()
    except (KeyError, ValueError, ArithmeticError):  # incomplete facts have no money position to show
        return None


def _effect_json(effect: Effect, age: float | None) -> dict[str, Any]:
    return {
        "key": effect.key,
        "shortKey": short(effect.key),
        "action": effect.action,
        "caseVersion": effect.case_version,
        "status": effect.status.value,
        "attempts": effect.attempts,
        **({"ageSeconds": round(age, 3)} if age is not None else {}),
        "result": effect.result,
        "reason": effect.reason,
        "stale": effect.stale,
        "resolution": effect.resolution,
        "request": effect.request,
        "history": list(effect.history),
    }


def _newest_run(checkpoints: list[CheckpointView]) -> str | None:
    return checkpoints[-1].run if checkpoints else None
