"""The invoice domain's one external action, requesting a credit note, built in one place.

:class:`CreditNoteCall` is everything the supplier is asked, built once by the commit step and stored
as the effect's ``request``; the reconciler rebuilds the very same call from that record to retry it
with the same key. The supplier portal honours ``Idempotency-Key`` and can be asked by key, so an
effect whose outcome is unknown is looked up, and if the supplier has no record of it, retried.

The ledger's effects of this action are also the case's credit-note *requests* for the money rule
(:func:`credit_requests`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from casekeeper import Case, Effect, EffectStatus, Guard, GuardedEffect
from casekeeper.cases import Finding
from shared.domain.credit import CreditRequest, Position, over_requested, position
from shared.domain.invoice import Action, InvoiceFacts, Status
from shared.domain.money import amount_text, parse_amount
from shared.workflow.messages import PENDING_APPROVAL

REQUEST_CREDIT_NOTE = Action.REQUEST_CREDIT_NOTE.value


@dataclass(frozen=True)
class CreditNoteCall:
    """One credit-note request to the supplier. Amounts stay ``Decimal`` until the portal client writes
    them on the wire."""

    case_id: str
    invoice_id: str
    supplier_id: str
    amount: Decimal
    currency: str

    def bind(self, supplier: Any) -> Callable[[str], dict[str, Any]]:
        """The guarded call: receives the effect key and sends it as ``Idempotency-Key``. ``supplier`` is a
        ``SupplierPortal`` (or anything with its ``request_credit_note``)."""

        def call(key: str) -> dict[str, Any]:
            result: dict[str, Any] = supplier.request_credit_note(
                key,
                case_id=self.case_id,
                invoice_id=self.invoice_id,
                supplier_id=self.supplier_id,
                amount=self.amount,
                currency=self.currency,
            )
            return result

        return call

    def record(self, *, commit: Mapping[str, Any], basis: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The effect's ``request``: what a reconciler needs to look it up, retry it with the same key and
        finish the status commit without the workflow (``commit``), and how the amount was computed
        (``basis``, the money rule's numbers at the decision)."""
        return {
            "amount": amount_text(self.amount),
            "currency": self.currency,
            "invoiceId": self.invoice_id,
            "supplierId": self.supplier_id,
            "commit": dict(commit),
            **({"basis": dict(basis)} if basis else {}),
        }

    def args(self, *, basis: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The guarded effect's args (JSON), stored flat as the ledger row's ``request``: what the supplier is
        asked, and how the amount was computed (``basis``, the money rule's numbers at the decision)."""
        return {
            "caseId": self.case_id,
            "amount": str(self.amount),
            "currency": self.currency,
            "invoiceId": self.invoice_id,
            "supplierId": self.supplier_id,
            **({"basis": dict(basis)} if basis else {}),
        }

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> CreditNoteCall:
        """The call :meth:`args` describes."""
        return cls(
            case_id=str(args["caseId"]),
            invoice_id=str(args["invoiceId"]),
            supplier_id=str(args["supplierId"]),
            amount=parse_amount(args["amount"], "amount"),
            currency=str(args["currency"]),
        )


def credit_request_data(effect: Effect) -> dict[str, Any]:
    """The case ``data`` written with the ``credit_requested`` commit, by whoever finishes it (the worker,
    the reconciler, the timer, a person's resolution): the request made and, when the decision answered an
    approval (its intent says ``clearPendingApproval``), the withdrawn pending request."""
    data: dict[str, Any] = {
        "creditRequest": {
            "effectKey": effect.key,
            "creditNoteId": (effect.result or {}).get("creditNoteId"),
            "amount": effect.request.get("amount"),
            "currency": effect.request.get("currency"),
        }
    }
    intent = effect.request.get("commit")
    if isinstance(intent, Mapping) and intent.get("clearPendingApproval"):
        data[PENDING_APPROVAL] = None
    return data


def credit_requests(effects: Iterable[Effect]) -> tuple[CreditRequest, ...]:
    """The case's credit-note requests for the money rule: every effect of this action that may have
    reached the supplier. A refused or stale effect (``failed``) never asked for anything."""
    requests: list[CreditRequest] = []
    for effect in effects:
        if effect.action != REQUEST_CREDIT_NOTE or effect.status is EffectStatus.FAILED:
            continue
        done = effect.status is EffectStatus.DONE
        note_id = (effect.result or {}).get("creditNoteId") if done else None
        requests.append(
            CreditRequest(
                effect_key=effect.key,
                amount=parse_amount(effect.request.get("amount", "0"), "amount"),
                decided_on_version=effect.case_version,
                known=done,
                credit_note_id=str(note_id) if note_id else None,
            )
        )
    return tuple(requests)


def money_position(facts: Mapping[str, Any], effects: Iterable[Effect]) -> Position:
    """The money rule's numbers for a case's facts and its ledger effects (the case view's ``credit``)."""
    return position(InvoiceFacts.from_dict(dict(facts)), credit_requests(effects))


OVER_REQUESTED = "over_requested"
"""The alert kind: a case requested more than its newest facts owe."""


def money_watch(effects_for: Callable[[Case], Iterable[Effect]]) -> Callable[[Case], list[Finding]]:
    """The guard's watch over the money rule (``casekeeper.cases.Watch``): for a case about to be written,
    an ``over_requested`` finding when what it requested exceeds what its facts owe, once per excess
    (the dedupe key is the case and the excess). Every write of a case goes through the guard's watch, so
    whichever path made the excess (a decision, a fact, an outcome recorded late, a person, reconciliation)
    raises it; a case without an invoice yet has no money to judge.

    ``effects_for(case)``: the case's effects as the decision reads them (its entries, and the archive when
    some were moved there)."""

    def watch(case: Case) -> list[Finding]:
        # Nothing requested, nothing over-requested: most writes are judged without parsing anything.
        if (
            not any(
                e.get("action") == REQUEST_CREDIT_NOTE and e.get("status") != EffectStatus.FAILED.value
                for e in case.entries
            )
            and not case.effects_archived
        ):
            return []
        try:
            over = over_requested(money_position(case.facts, effects_for(case)))
        except (KeyError, TypeError, ValueError, ArithmeticError):
            # Facts that do not parse (none pass the door) cannot be judged here; the decision that reads
            # them hands the case to a person with the reason. The write itself must not fail for it.
            return []
        if over is None:
            return []
        owed, requested, excess = amount_text(over.owed), amount_text(over.requested), amount_text(over.excess)
        message = (
            f"case {case.id}: {requested} {over.currency} requested where its facts owe {owed}: {excess} "
            "over-requested; a person checks the supplier's notes and withdraws what is not owed"
        )
        fields = {
            "caseId": case.id,
            "owed": owed,
            "requested": requested,
            "excess": excess,
            "currency": over.currency,
            "caseVersion": case.version,
        }
        return [Finding(OVER_REQUESTED, message, f"{case.id}:{excess}", fields)]

    return watch


def declare_credit_note(guard: Guard, supplier: Any) -> GuardedEffect:
    """The credit-note request, declared once on the app's guard (``supplier``: a ``SupplierPortal``).

    Its commit moves the case to ``credit_requested`` with the request's data
    (:func:`credit_request_data`); the supplier is asked by key when an outcome is unknown and, having no
    record of it, asked again with the same key (it honours ``Idempotency-Key``). The args are stored flat
    as the ledger row's request, where the money rule, the views and the checks read them; a refusal is
    committed by the workflow itself (with the answer it refuses), so the guard leaves the case alone."""

    def call(key: str, args: Mapping[str, Any]) -> dict[str, Any]:
        return dict(CreditNoteCall.from_args(args).bind(supplier)(key))

    return guard.register(
        REQUEST_CREDIT_NOTE,
        call,
        commit=Status.CREDIT_REQUESTED.value,
        lookup=supplier.find_credit_note,
        retry_same_key=True,
        commit_data_from=credit_request_data,
        flat_request=True,
        review_on_refusal=False,
    )
