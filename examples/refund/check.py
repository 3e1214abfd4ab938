"""The refund workflow, checked the way Casekeeper's app is: ``python -m casekeeper.check
examples.refund.check:world`` (or ``casekeeper sim --workflow examples.refund.check:world``).

``world(env)`` is the entry point the checker calls (again after every crash, with the same ``env``): the
guard on the checker's store, the refund effect it declares, the payments stand-in (``payments.py``, on a
file in ``env.directory``, so a restarted workflow meets the same service) whose payments are the journal,
and the fact source: a refund request opened with what the customer paid and asks back, the request
changed, the workflow run for a ``refund.requested`` event, a person's answer to an approval.

Two invariants of the refund's own beside the checker's: what was refunded for a case never exceeds
what the customer paid (unless the guard names a late refund that no decision could hold back), and no case
is left ``approved`` with nothing to pay it (seed 40 found one: facts changed after the approval, before the
payment; the guard now lets such an approval lapse).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal

from casekeeper import ApprovalRequest
from casekeeper.check import Env, View, Workflow
from examples.refund.app import REQUESTED, ApprovalAnswered, RefundApp, RefundRequested
from examples.refund.payments import Payments

CENT = Decimal("0.01")


def paid(n: int) -> Decimal:
    """What the customer paid: 20.00 to 299.99."""
    return (Decimal(2000 + n % 28000) / 100).quantize(CENT)


def asked(n: int, of: Decimal) -> Decimal:
    """What the customer asks back: 10% to 130% of what they paid (more than paid is capped by the workflow)."""
    return (of * (10 + (n // 100) % 121) / 100).quantize(CENT)


class RefundFacts:
    """The refund's events, as the example's host would deliver them."""

    def __init__(self, app: RefundApp) -> None:
        self.app = app

    def open(self, case_id: str, n: int) -> None:
        facts = {"paid": str(paid(n)), "requested": str(asked(n, paid(n)))}
        self.app.guard.create(case_id, facts, status=REQUESTED)

    def change(self, case_id: str, n: int) -> None:
        case = self.app.guard.get(case_id)
        if case is not None:
            requested = asked(n, Decimal(case.facts["paid"]))
            self.app.guard.update(case_id, case.version, {"requested": str(requested)}, reason="request changed")

    def run(self, case_id: str) -> None:
        asyncio.run(self.app.handle(RefundRequested(case_id)))

    def answer(self, request: ApprovalRequest, approve: bool, by: str) -> None:
        answer = ApprovalAnswered(request.case_id, request.request_id, approve, by, request.version)
        asyncio.run(self.app.handle(answer))


def refunded_within_paid(view: View) -> Iterator[str]:
    """What the payments service refunded for a case never exceeds what the customer paid, unless a
    ``late_outcome`` alert names the case: a refund that landed after its call timeout, once the case had
    moved on (a stalled call), is one no decision could hold back; the guard records it and says so. Judged at
    quiescent points, where the late watch has looked every such refund up (the journal only grows)."""
    if not view.quiescent:
        return
    late = {a["fields"].get("caseId") for a in view.alerts if a["kind"] == "late_outcome"}
    for case_id, case in view.cases.items():
        refunded = sum((Decimal(a["amount"]) for a in view.journal if a["caseId"] == case_id), Decimal(0))
        if refunded > Decimal(case.facts["paid"]) and case_id not in late:
            yield f"{case_id}: refunded {refunded}, paid {case.facts['paid']}"


def never_stuck_approved(view: View) -> Iterator[str]:
    """At a quiescent point no case waits in ``approved``: its approved refund was paid (``refunded``), or
    the approval lapsed when the facts changed before the payment (back to ``requested``, decided again)."""
    if not view.quiescent:
        return
    for case_id, case in view.cases.items():
        if case.status == "approved":
            yield f"{case_id}: approved at v{case.version}, and nothing will pay it or ask again"


def checked(app: RefundApp) -> Workflow:
    """The refund app as the checker sees it (a test builds a broken one the same way)."""
    return Workflow(
        guard=app.guard,
        effects=[app.pay_once],
        facts=RefundFacts(app),
        journal=app.payments.payments,
        invariants={"refunded": refunded_within_paid, "approved": never_stuck_approved},
    )


def world(env: Env) -> Workflow:
    """The checker's entry point."""
    return checked(RefundApp(env.store, Payments(env.path("payments.sqlite")), **env.guard_options))
