"""What the case worker logs after a failed attempt says what happens next: a wait in place only when another
attempt follows in the same delivery; otherwise that the event is deferred as a delayed copy, or handed to the
queue's redeliveries. One test per branch, through the worker's own retry loop with fakes around it."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from casekeeper.core.clock import ManualClock
from casekeeper.errors import CasekeeperError, OutcomeUnknown, StoreUnavailable
from shared.domain.events import CaseEvent
from shared.errors import ModelUnavailable
from shared.handlers.case_events import CaseEventDeps, Settlement, _with_retries
from shared.messaging import Envelope
from shared.messaging.retry import Backoff


@dataclass
class Sent:
    copies: list[tuple[str, float]] = field(default_factory=list)

    def send(self, event: CaseEvent, *, message_id: str, schedule_at: float | None = None) -> None:
        self.copies.append((message_id, schedule_at or 0.0))


class Telemetry:
    def deferred(self, error: str) -> None:
        pass


class Cases:
    def note(self, case_id: str, text: str, **fields: Any) -> None:
        pass


class Guard:
    cases = Cases()


EVENT = CaseEvent("invoice.received", "C-1", {}, delivery_id="d-1")


def deps(clock: ManualClock, sent: Sent) -> CaseEventDeps:
    # A tiny base keeps the waits in place (a quarter, a half and all of it) to milliseconds.
    backoff = Backoff(base=0.04, cap=1.0, give_up_after=3600.0)
    return CaseEventDeps(
        worker=cast(Any, None),
        guard=cast(Any, Guard()),
        sender=cast(Any, sent),
        store=cast(Any, None),
        clock=clock,
        backoff=backoff,
        telemetry=cast(Any, Telemetry()),
    )


def run(errors: list[CasekeeperError], *, envelope: Envelope | None = None) -> tuple[Settlement, Sent]:
    """``_with_retries`` on an attempt that raises ``errors`` in turn, then succeeds: its settlement and what it
    scheduled."""
    clock, sent = ManualClock(), Sent()
    left = list(errors)

    async def attempt() -> Settlement:
        if left:
            raise left.pop(0)
        return Settlement("completed", "handled")

    settlement = asyncio.run(_with_retries(deps(clock, sent), EVENT, envelope or Envelope(root="webhook:d-1"), attempt))
    return settlement, sent


class Lines:
    """The worker's log lines so far."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.caplog = caplog

    def __call__(self) -> list[str]:
        return [r.getMessage() for r in self.caplog.records if r.name == "casekeeper.case_events"]


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> Lines:
    caplog.set_level(logging.INFO, logger="casekeeper.case_events")
    return Lines(caplog)


def test_a_wait_in_place_is_logged_only_when_an_attempt_follows(logged: Lines) -> None:
    settlement, sent = run([StoreUnavailable("throttled")])
    lines = logged()
    assert settlement.action == "completed" and sent.copies == []
    assert lines == [
        "case C-1: invoice.received attempt 1 failed (StoreUnavailable: throttled); waiting 0.01s in place before"
        " attempt 2"
    ]


def test_when_the_waits_in_place_are_spent_the_log_says_the_event_is_deferred(logged: Lines) -> None:
    settlement, sent = run([OutcomeUnknown("503")] * 4)
    lines = logged()
    assert settlement.action == "deferred" and len(sent.copies) == 1
    waits = [line for line in lines if "waiting" in line]
    # Four attempts: a wait before each of attempts 2, 3 and 4, and none after the last.
    assert [w.rsplit(" ", 1)[1] for w in waits] == ["2", "3", "4"]
    [last] = [line for line in lines if "waiting" not in line]
    assert last.startswith("case C-1: invoice.received failed (OutcomeUnknown: 503); after 4 attempts in place:")
    assert f"deferred, copy {sent.copies[0][0]} scheduled in" in last
    assert not any("retrying in" in line for line in lines)


def test_an_error_never_waited_on_in_place_says_so_and_is_deferred(logged: Lines) -> None:
    settlement, sent = run([ModelUnavailable("429 from the model", kind="throttled")])
    lines = logged()
    assert settlement.action == "deferred" and len(sent.copies) == 1
    [line] = lines
    assert "not retried in place (ModelUnavailable is never waited on): deferred, copy" in line
    assert "waiting" not in line


def test_past_the_retry_window_the_log_says_it_is_handed_to_the_queue(logged: Lines) -> None:
    # The first failure was two hours ago: past give_up_after (an hour), so no copy is scheduled.
    clock_start = ManualClock().now()
    with pytest.raises(StoreUnavailable):
        run(
            [StoreUnavailable("down")] * 4,
            envelope=Envelope(retry=7, root="webhook:d-1", first_failed_at=clock_start - 7200),
        )
    lines = logged()
    last = lines[-1]
    assert last == (
        "case C-1: invoice.received still failing after 7200s (StoreUnavailable: down): no copy scheduled;"
        " handed to the queue's redeliveries, then its dead-letter queue"
    )
    assert sum("waiting" in line for line in lines) == 3
