"""How each fact event moves an invoice case: pure functions from (status, facts, event) to a plan.

================================  ==============================  ==========================================
event                             status before                   then
================================  ==============================  ==========================================
``po.updated``                    ``closed``                      the PO is recorded; nothing else
                                  ``approved``,                   ``open``, decided again (a pending
                                  ``awaiting_approval``,          approval is withdrawn: it was asked on
                                  ``credit_requested``            other facts); the money rule counts what
                                                                  was already requested
                                  ``open``, ``needs_review``      decided again
``credit_note.issued``            ``credit_requested``            recorded; a note carrying the id of one of
                                                                  our requests settles it. Then: nothing
                                                                  outstanding and within tolerance ->
                                                                  ``closed``; still outstanding and covered
                                                                  -> stays; otherwise ``needs_review``
                                  ``closed``                      recorded; nothing else
                                  ``approved``,                   ``open``, decided again
                                  ``awaiting_approval``
                                  ``open``, ``needs_review``      recorded, decided again
request withdrawn by a person     any but ``closed``              recorded; ``needs_review`` (the person
                                                                  decides when to investigate again)
================================  ==============================  ==========================================

An event whose facts are already recorded (a redelivery) changes nothing, but still asks for the
follow-up decision when the status is investigable: the first delivery may have died between writing
the facts and deciding, and deciding again at the same version is idempotent.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from shared.domain.credit import CreditRequest, RequestState, position
from shared.domain.invoice import INVESTIGABLE, Credit, InvoiceFacts, Rules, Status, Withdrawal

_REDECIDE = frozenset({Status.APPROVED, Status.AWAITING_APPROVAL, Status.CREDIT_REQUESTED})


@dataclass(frozen=True)
class FactPlan:
    """What a fact event does: facts to set (JSON values; empty: nothing changes), maybe a new status,
    the reason for the history, and whether to decide again afterwards."""

    changes: dict[str, Any]
    new_status: str | None
    reason: str
    investigate: bool


class NotWithdrawable(ValueError):
    """A withdrawal that the case's requests do not allow (unknown key, received, already withdrawn...)."""


def po_updated(status: str, facts: InvoiceFacts, po_amount: Decimal) -> FactPlan:
    if facts.po_amount == po_amount:
        return _unchanged(status, f"PO amount already {po_amount}")
    change = {"poAmount": str(po_amount)}
    reason = f"PO amount {facts.po_amount} -> {po_amount}"
    if status == Status.CLOSED:
        return FactPlan(change, None, f"{reason} on a closed case: recorded only", investigate=False)
    if status in _REDECIDE:
        return FactPlan(change, Status.OPEN, f"{reason}: the decision is made again", investigate=True)
    return FactPlan(change, None, reason, investigate=True)


def credit_note_issued(
    status: str,
    facts: InvoiceFacts,
    *,
    credit_note_id: str,
    amount: Decimal,
    requests: tuple[CreditRequest, ...],
    rules: Rules,
) -> FactPlan:
    if facts.has_credit(credit_note_id):
        return _unchanged(status, f"credit note {credit_note_id} already recorded")
    updated = replace(facts, credits=(*facts.credits, Credit(credit_note_id, amount)))
    change = {"credits": updated.to_dict()["credits"]}
    settles = next((r for r in requests if r.credit_note_id == credit_note_id), None)
    what = f"answers request {settles.effect_key[:12]} for {settles.amount}" if settles else "external credit"
    received = f"credit note {credit_note_id} for {amount} received ({what})"
    if status == Status.CREDIT_REQUESTED:
        target, why = _after_credit(updated, requests, rules)
        return FactPlan(change, target, f"{received}; {why}", investigate=False)
    if status == Status.CLOSED:
        return FactPlan(change, None, f"{received} on a closed case: recorded only", investigate=False)
    if status in _REDECIDE:
        return FactPlan(change, Status.OPEN, f"{received}: the decision is made again", investigate=True)
    return FactPlan(change, None, received, investigate=True)


def request_withdrawn(
    status: str,
    facts: InvoiceFacts,
    requests: tuple[CreditRequest, ...],
    *,
    effect_key: str,
    by: str,
    why: str,
    at: float,
) -> FactPlan:
    """A person takes an outstanding request off the books. Raises ``NotWithdrawable`` unless the request
    is outstanding: known to the supplier, its note not received, not withdrawn already. (A request whose
    outcome is unknown is settled with ``effects resolve`` first.)"""
    pos = position(facts, requests)
    line = next((line for line in pos.lines if line.request.effect_key == effect_key), None)
    if line is None:
        raise NotWithdrawable(f"the case has no credit-note request {effect_key}")
    if line.state is RequestState.WITHDRAWN:
        return FactPlan({}, None, f"request {effect_key[:12]} already withdrawn", investigate=False)
    if line.state is not RequestState.OUTSTANDING:
        raise NotWithdrawable(f"request {effect_key[:12]} is {line.state.value}, not outstanding")
    withdrawn = (*facts.withdrawn, Withdrawal(effect_key, by, why, at))
    change = {"withdrawn": replace(facts, withdrawn=withdrawn).to_dict()["withdrawn"]}
    reason = f"request {effect_key[:12]} for {line.request.amount} withdrawn by {by}: {why}"
    if status == Status.CLOSED:
        return FactPlan(change, None, f"{reason} (closed case)", investigate=False)
    return FactPlan(change, Status.NEEDS_REVIEW, reason, investigate=False)


def _after_credit(facts: InvoiceFacts, requests: tuple[CreditRequest, ...], rules: Rules) -> tuple[Status, str]:
    """Where a ``credit_requested`` case goes once a note arrived."""
    pos = position(facts, requests)
    if pos.outstanding > 0 and pos.remaining < 0:
        return Status.NEEDS_REVIEW, f"requested and received exceed the over-billing by {pos.excess}"
    if abs(pos.remaining) <= rules.tolerance:
        if pos.outstanding > 0:
            return Status.CREDIT_REQUESTED, f"{pos.outstanding} still outstanding"
        return Status.CLOSED, f"remaining variance {pos.remaining}"
    if pos.remaining > 0:
        return Status.NEEDS_REVIEW, f"{pos.remaining} over-billing not covered (a partial credit?)"
    return Status.NEEDS_REVIEW, f"over-credited by {-pos.remaining}"


def _unchanged(status: str, reason: str) -> FactPlan:
    return FactPlan({}, None, reason, investigate=status in INVESTIGABLE)
