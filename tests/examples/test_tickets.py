"""The support-ticket example, on SQLite and the Cosmos DB test server: every trap a stranger steps on.

Two lines of one ticket are two effects of one action in one decision (named by part); a duplicate
delivery and two concurrent runs refund each line once; a line run with other arguments is refused; a
pending approval holds every refund of the ticket; facts changed during the approval close the request and
its answer is stale; opening a ticket under an id in use says so. The payments service is the refund
example's stand-in (one SQLite file, keyed by idempotency key, every request counted).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from casekeeper import AlreadyExists, ApprovalPending, ArgumentsMismatch, DocumentStore, effect_key
from examples.refund.payments import Payments
from examples.tickets.app import Outcome, TicketAnswered, TicketApp, TicketOpened

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"L1": "30.00", "L2": "45.00"}  # 75.00 in all: under the threshold
LARGE = {"L1": "100.00", "L2": "80.00"}  # 180.00: a person approves


@pytest.fixture
def app(store: DocumentStore, tmp_path: Path) -> TicketApp:
    return TicketApp(store, Payments(tmp_path / "payments.sqlite"), call_timeout=5.0)


def handle(app: TicketApp, message: TicketOpened | TicketAnswered) -> Outcome:
    return asyncio.run(app.handle(message))


def paid(app: TicketApp, ticket_id: str) -> dict[str, str]:
    """Line -> amount of every payment made for the ticket (the key says which line)."""
    lines = {effect_key(ticket_id, "refund", v, line): line for v in range(1, 8) for line in ("L1", "L2")}
    return {lines[p["key"]]: p["amount"] for p in app.payments.payments(ticket_id)}


def test_both_lines_are_refunded_once_and_a_duplicate_delivery_pays_nothing_more(app: TicketApp) -> None:
    assert app.open_ticket("T1", "cust-1", SMALL) is True
    decision = app.guard.decide("T1")
    first = handle(app, TicketOpened("T1"))
    assert (first.outcome, first.lines, first.replayed) == ("refunded", ["L1", "L2"], False)
    assert paid(app, "T1") == SMALL and app.payments.requests() == 2
    assert handle(app, TicketOpened("T1")).outcome == "nothing_to_do"  # the event delivered again
    # The plan delivered again (the same decision, the same lines): both lines replay, nothing is paid.
    for n, (line, amount) in enumerate(sorted(SMALL.items()), start=1):
        args = {"ticketId": "T1", "line": line, "amount": amount, "last": n == 2}
        assert app.refund_line.run(decision, args, part=line).replayed is True
    assert app.payments.requests() == 2
    case = app.guard.get("T1")
    assert case is not None and (case.status, case.version) == ("refunded", 3)


def test_two_concurrent_runs_refund_each_line_once(app: TicketApp) -> None:
    app.open_ticket("T2", "cust-2", SMALL)

    async def both() -> list[Outcome]:
        return list(await asyncio.gather(app.handle(TicketOpened("T2")), app.handle(TicketOpened("T2"))))

    outcomes = asyncio.run(both())
    assert {o.outcome for o in outcomes} <= {"refunded", "waiting", "stale", "nothing_to_do"}
    # Whatever the loser met (a replay, a line in flight, a version its twin moved), the next run finishes.
    assert handle(app, TicketOpened("T2")).outcome in {"refunded", "nothing_to_do"}
    assert paid(app, "T2") == SMALL and app.payments.requests() == 2
    case = app.guard.get("T2")
    assert case is not None and case.status == "refunded"


def test_a_second_line_without_a_part_is_refused_and_says_to_name_it(app: TicketApp) -> None:
    app.open_ticket("T3", "cust-3", SMALL)
    decision = app.guard.decide("T3")
    app.refund_line.run(decision, {"ticketId": "T3", "line": "L1", "amount": "30.00", "last": False})
    with pytest.raises(ArgumentsMismatch) as refused:
        app.refund_line.run(decision, {"ticketId": "T3", "line": "L2", "amount": "45.00", "last": True})
    assert "part=" in str(refused.value)
    assert [p["amount"] for p in app.payments.payments("T3")] == ["30.00"]  # L2 was not silently dropped


def test_a_line_run_again_with_other_arguments_is_refused(app: TicketApp) -> None:
    app.open_ticket("T4", "cust-4", SMALL)
    decision = app.guard.decide("T4")
    assert handle(app, TicketOpened("T4")).outcome == "refunded"
    other = {"ticketId": "T4", "line": "L1", "amount": "35.00", "last": False}
    with pytest.raises(ArgumentsMismatch):
        app.refund_line.run(decision, other, part="L1")
    assert paid(app, "T4") == SMALL and app.payments.requests() == 2


def test_a_pending_approval_holds_every_refund_of_the_ticket_until_it_is_answered(app: TicketApp) -> None:
    app.open_ticket("T5", "cust-5", LARGE)
    asked = handle(app, TicketOpened("T5"))
    assert asked.outcome == "awaiting_approval"
    assert handle(app, TicketOpened("T5")).detail == asked.detail  # redelivered: the same request waits
    # Anything that runs the refund without the approval (a fresh decision, a stray message) is refused.
    stray = {"ticketId": "T5", "line": "L1", "amount": "100.00", "last": False}
    with pytest.raises(ApprovalPending) as held:
        app.refund_line.run(app.guard.decide("T5"), stray, part="L1")
    assert held.value.request_id == asked.detail
    assert app.payments.requests() == 0
    case = app.guard.get("T5")
    assert case is not None
    approve = TicketAnswered("T5", asked.detail, True, "ann", case.version)
    done = handle(app, approve)
    assert (done.outcome, done.lines) == ("refunded", ["L1", "L2"])
    assert handle(app, approve).outcome == "ignored"  # answered already
    assert paid(app, "T5") == LARGE and app.payments.requests() == 2


def test_facts_changed_during_the_approval_close_the_request_and_its_answer_is_stale(app: TicketApp) -> None:
    app.open_ticket("T6", "cust-6", LARGE)
    asked = handle(app, TicketOpened("T6"))
    waiting = app.guard.get("T6")
    assert waiting is not None and waiting.status == "awaiting_approval"
    changed = app.guard.update("T6", waiting.version, {"lines": {"L1": "100.00"}}, reason="customer withdrew L2")
    assert changed is not None and changed.status == "open" and not changed.data.get("pendingApproval")
    assert changed.data["staleApproval"]["requestId"] == asked.detail
    stale = handle(app, TicketAnswered("T6", asked.detail, True, "ann", waiting.version))
    assert stale.outcome == "stale_approval" and "customer withdrew L2" in stale.detail
    assert app.payments.requests() == 0
    # The ticket is open again: the next run decides on the new facts (100.00: no approval needed).
    again = handle(app, TicketOpened("T6"))
    assert (again.outcome, again.lines) == ("refunded", ["L1"])
    assert paid(app, "T6") == {"L1": "100.00"}


def test_opening_a_ticket_under_an_id_in_use_says_so(app: TicketApp) -> None:
    assert app.open_ticket("T7", "cust-7", SMALL) is True
    assert app.open_ticket("T7", "cust-7", SMALL) is False  # the same ticket delivered again
    with pytest.raises(AlreadyExists) as exists:
        app.open_ticket("T7", "cust-8", {"L1": "999.00", "L2": "1.00"})
    assert "exist_ok=True" in str(exists.value)
    case = app.guard.get("T7")
    assert case is not None and case.facts == {"customer": "cust-7", "lines": SMALL}


def test_the_executor_in_the_guard_docs_is_the_examples_own_word_for_word() -> None:
    guide = (ROOT / "docs" / "guard.md").read_text()
    section = guide[guide.index("## In an Agent Framework executor") :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    assert match.group(1) in (ROOT / "examples" / "tickets" / "app.py").read_text()


class Crash(BaseException):
    """Ends a run at a probe point, as a killed process would (nothing after it runs)."""


@pytest.mark.parametrize(("lines", "approve"), [(SMALL, False), (LARGE, True)], ids=["small", "approved"])
def test_a_run_stopped_between_the_two_lines_is_finished_by_the_next_without_asking_again(
    store: DocumentStore, tmp_path: Path, lines: dict[str, str], approve: bool
) -> None:
    crashed: list[str] = []

    def probe(point: str) -> None:
        if point == "F6" and not crashed:  # the first line is paid and committed; the process dies
            crashed.append(point)
            raise Crash

    app = TicketApp(store, Payments(tmp_path / "payments.sqlite"), call_timeout=5.0, probe=probe)
    app.open_ticket("T8", "cust-8", lines)
    message: TicketOpened | TicketAnswered = TicketOpened("T8")
    if approve:
        asked = handle(app, message)
        waiting = app.guard.get("T8")
        assert asked.outcome == "awaiting_approval" and waiting is not None
        message = TicketAnswered("T8", asked.detail, True, "ann", waiting.version)
    with pytest.raises(Crash):
        handle(app, message)
    stopped = app.guard.get("T8")
    assert stopped is not None and stopped.status == "refunding" and paid(app, "T8") == {"L1": lines["L1"]}
    finished = handle(app, TicketOpened("T8"))  # the event redelivered to the next process
    assert (finished.outcome, finished.lines) == ("refunded", ["L2"])  # L2 was approved with L1: not asked again
    assert paid(app, "T8") == lines and app.payments.requests() == 2
