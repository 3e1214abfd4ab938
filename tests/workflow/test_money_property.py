"""The money invariant as a property: over random sequences of ordinary events and faults, the supplier is
never asked for more than the facts of each decision justify.

Each example is one invoice case driven through the real case worker on SQLite, against the supplier stub
over HTTP: PO edits up and down, credit notes for our requests (in full, in part, over) and from
elsewhere, investigations, approvals answered current or stale, redelivered events, withdrawals by a
person, supplier faults (503 before or after creating the note, a dropped reply, a refusal) and time
passing beyond the call timeout so reconciliation runs. The invariant is checked from the supplier's
record (``tests/support/money.py``), not from the code under test.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import tempfile
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from casekeeper.capture import uninstall
from casekeeper.core.clock import ManualClock
from casekeeper.core.ledger import EffectStatus
from casekeeper.errors import CasekeeperError
from casekeeper.stores.sqlite import SqliteDocumentStore
from shared.domain import events as ev
from shared.localhost.supplier_stub import Faults, SupplierStub
from tests.support.app import Harness, make_harness
from tests.support.invoices import invoice
from tests.support.money import money_violations
from tests.support.reconciling import credit_note_reconciler

CALL_TIMEOUT = 30.0
_ids = itertools.count()


def money(low: int, high: int) -> st.SearchStrategy[Decimal]:
    """Amounts in cents from ``low`` to ``high``, as two-decimal ``Decimal``."""
    return st.integers(min_value=low, max_value=high).map(lambda c: (Decimal(c) / 100).quantize(Decimal("0.01")))


po_amounts = money(0, 300_000)
over_billing = money(-50_000, 150_000)  # invoice - PO: mostly over-billed, under and over the threshold
po_moves = money(-100_000, 100_000)  # a PO edit, relative to the PO as it stands
small = money(1, 50_000)
FAULTS = ("fail_before_create", "fail_after_create", "drop_after_create", "reject")

step = st.one_of(
    st.tuples(st.just("po"), po_moves),
    st.tuples(st.just("credit"), st.integers(0, 2), st.sampled_from(["full", "partial", "over"])),
    st.tuples(st.just("external"), small),
    st.just(("investigate",)),
    st.tuples(st.just("answer"), st.sampled_from(["approve", "reject"]), st.booleans()),
    st.just(("duplicate",)),
    st.tuples(st.just("withdraw"), st.integers(0, 2)),
    st.tuples(st.just("fault"), st.sampled_from(FAULTS)),
    st.just(("later",)),
)


@pytest.fixture(scope="module")
def stub() -> Iterator[SupplierStub]:
    server = SupplierStub(port=0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class World:
    """One case, the worker and the reconciler around it, and what the test has sent so far."""

    def __init__(self, directory: Path, stub: SupplierStub, invoice_facts: dict[str, str]) -> None:
        self.clock = ManualClock()
        self.store = SqliteDocumentStore(directory / f"store-{next(_ids)}.sqlite", clock=self.clock.now)
        self.app: Harness = make_harness(self.store, stub.url, call_timeout=CALL_TIMEOUT)
        self.reconciler = credit_note_reconciler(self.store, stub.url, call_timeout=CALL_TIMEOUT)
        self.stub = stub
        self.case_id = f"P-{next(_ids)}"
        self.initial = invoice_facts
        self.last: tuple[str, dict[str, Any]] | None = None
        self.approvals: list[dict[str, Any]] = []

    def send(self, type_: str, **data: Any) -> None:
        self.last = (type_, data)
        # In flight, outcome unknown, invalid: the real host reschedules, redelivers or sets it aside.
        with contextlib.suppress(CasekeeperError):
            asyncio.run(self.app.worker.handle(ev.CaseEvent(type_, self.case_id, data)))
        case = self.app.cases.get(self.case_id)
        pending = case.data.get("pendingApproval") if case is not None else None
        if pending and pending not in self.approvals:
            self.approvals.append(pending)

    def notes(self) -> list[tuple[str, Decimal]]:
        """(credit note id, requested amount) of each note the supplier created for this case."""
        return [
            (str(r["creditNoteId"]), Decimal(str(r["body"]["amount"])))
            for r in self.stub.requests
            if r["method"] == "POST" and r["created"] and r["body"].get("caseId") == self.case_id
        ]

    def apply(self, action: tuple[Any, ...]) -> None:
        kind = action[0]
        if kind == "po":
            case = self.app.cases.require(self.case_id)
            moved = max(Decimal("0.00"), Decimal(case.facts["poAmount"]) + action[1])
            self.send(ev.PO_UPDATED, poAmount=str(moved))
        elif kind == "credit":
            notes = self.notes()
            if notes:
                note_id, requested = notes[action[1] % len(notes)]
                factor = {"full": Decimal("1"), "partial": Decimal("0.5"), "over": Decimal("1.1")}[action[2]]
                amount = max(Decimal("0.01"), (requested * factor).quantize(Decimal("0.01")))
                self.send(ev.CREDIT_NOTE_ISSUED, creditNoteId=note_id, amount=str(amount))
        elif kind == "external":
            self.send(ev.CREDIT_NOTE_ISSUED, creditNoteId=f"EXT-{next(_ids)}", amount=str(action[1]))
        elif kind == "investigate":
            self.send(ev.CASE_INVESTIGATE)
        elif kind == "answer" and self.approvals:
            asked = self.approvals[0] if action[2] else self.approvals[-1]  # the oldest may have gone stale
            self.send(
                ev.APPROVAL_ANSWERED,
                requestId=asked["requestId"],
                decision=action[1],
                caseVersion=asked["caseVersion"],
                approver="ana",
            )
        elif kind == "duplicate" and self.last is not None:
            self.send(self.last[0], **self.last[1])
        elif kind == "withdraw":
            done = [e for e in self.app.ledger.for_case(self.case_id) if e.status is EffectStatus.DONE]
            if done:
                key = done[action[1] % len(done)].key
                self.send(ev.REQUEST_WITHDRAWN, effectKey=key, by="ana", why="cancelled by phone", at=1.0)
        elif kind == "fault":
            self.stub.set_faults(Faults(**{action[1]: 1}))
        elif kind == "later":
            self.time_passes()

    def time_passes(self) -> None:
        """Past every call timeout: reconciliation settles what it can (as the re-checks and the sweep
        would), then the case is decided again (as a scheduled copy of the event would)."""
        self.clock.advance(CALL_TIMEOUT + 1)
        for _ in range(4):
            open_effects = [
                e
                for e in self.app.ledger.for_case(self.case_id)
                if e.status in (EffectStatus.STARTED, EffectStatus.NEEDS_RECONCILIATION)
            ]
            if not open_effects:
                break
            for effect in open_effects:
                with contextlib.suppress(CasekeeperError):
                    self.reconciler.recheck(self.case_id, effect.key)
            self.clock.advance(CALL_TIMEOUT + 1)
        self.send(ev.CASE_INVESTIGATE)

    def close(self) -> None:
        self.stub.set_faults(Faults())
        uninstall()
        self.store.close()


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(po_amount=po_amounts, over=over_billing, steps=st.lists(step, max_size=12))
def test_the_supplier_is_never_asked_for_more_than_the_facts_justify(
    stub: SupplierStub, po_amount: Decimal, over: Decimal, steps: list[tuple[Any, ...]]
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        facts = invoice(str(max(Decimal("0.00"), po_amount + over)), str(po_amount))
        world = World(Path(directory), stub, facts)
        try:
            world.send(ev.INVOICE_RECEIVED, **facts)
            for action in steps:
                world.apply(action)
            case = world.app.cases.require(world.case_id)
            effects = world.app.ledger.for_case(world.case_id)
            assert money_violations(facts, case, effects, world.stub.requests) == []
        finally:
            world.close()
