"""The timer's duties cost what a tick may spend, and the next tick resumes (issue: work bounded by what is
stuck): an incident's overdue effects are scheduled a page at a time within the budget, none twice and none
skipped; the lagging-runs check moves its cursor page by page."""

from __future__ import annotations

import dataclasses

from casekeeper.core.clock import ManualClock
from shared.app.bootstrap import Services
from shared.handlers.health import CURSOR_ID, run_health_checks
from tests.support.downstream import leave_started
from tests.triggers.conftest import INVOICE
from tests.triggers.test_timer import PAUSED, ReadCounter, clock, timed

__all__ = ["clock", "timed"]  # the fixtures this module borrows


def started(svc: Services, n: int) -> list[str]:
    """``n`` cases whose effect was claimed and never settled (a supplier outage)."""
    keys = []
    for i in range(n):
        svc.cases.create(f"OUT-{i}", INVOICE)
        keys.append(leave_started(svc.ledger, f"OUT-{i}").key)
    return keys


def test_an_outage_is_swept_a_page_per_tick_and_every_effect_once(
    timed: tuple[Services, ReadCounter], clock: ManualClock
) -> None:
    svc, counter = timed
    keys = started(svc, 25)
    clock.advance(svc.settings.call_timeout + 1)
    health = dataclasses.replace(svc.health, page_size=10, duty_budget=0.0)  # one page per duty and tick
    scheduled: list[str] = []
    sizes = []
    for _ in range(3):
        counter.returned.clear()
        report = run_health_checks(health)
        sizes.append(len(report.rechecks_scheduled))
        scheduled.extend(report.rechecks_scheduled)
        assert len(counter.returned.get("cases", [])) <= 10 + 10  # a page of open entries (and of open cases)
    assert sizes == [10, 10, 5]
    assert sorted(scheduled) == sorted(keys)  # none skipped, none twice
    fourth = run_health_checks(health)  # a new pass: what is still stuck is scheduled again
    assert fourth.rechecks_scheduled == scheduled[:10]


def test_the_lagging_runs_check_moves_its_cursor_page_by_page(
    timed: tuple[Services, ReadCounter], clock: ManualClock
) -> None:
    svc, counter = timed
    for i in range(7):
        svc.cases.create(f"L-{i}", INVOICE)
        assert svc.cases.commit_status(f"L-{i}", 1, "awaiting_approval", reason="above tolerance", data=PAUSED)
        clock.advance(1)
    clock.advance(svc.settings.checkpoint_lag + 1)
    health = dataclasses.replace(svc.health, page_size=3, duty_budget=0.0)
    lagging: list[str] = []
    for _ in range(3):
        counter.returned.clear()
        lagging.extend(run_health_checks(health).lagging_cases)
        assert len(counter.returned["cases"]) <= 3 + 3  # its page (and the open-cases sweep's)
        cursor = svc.store.read("health", "cursor", CURSOR_ID)
        assert cursor is not None and cursor.body["after"][1] == lagging[-1]
    assert lagging == [f"L-{i}" for i in range(7)]
