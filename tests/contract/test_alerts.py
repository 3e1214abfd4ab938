"""Alerts are at least once, twice over: recorded once, and notified until someone acknowledged them.
On every backend. The webhook receiver is httpx's mock transport: a real HTTP exchange would add nothing
to what is checked here (what was POSTed, how often, with which id)."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from casekeeper.core.clock import ManualClock
from casekeeper.core.ports import Document, DocumentStore
from casekeeper.errors import StoreUnavailable
from shared.app.alerts import MAX_WEBHOOK_ATTEMPTS, NOTIFY_GRACE_SECONDS, Alerter


class Receiver:
    """A webhook endpoint that answers ``statuses`` in turn (the last one thereafter) and keeps every POST."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.posts: list[dict[str, Any]] = []

    def client(self) -> httpx.Client:
        def answer(request: httpx.Request) -> httpx.Response:
            import json

            self.posts.append(json.loads(request.content))
            status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
            return httpx.Response(status)

        return httpx.Client(transport=httpx.MockTransport(answer))


def alerter(store: DocumentStore, clock: ManualClock, receiver: Receiver | None = None) -> Alerter:
    if receiver is None:
        return Alerter(store, clock)
    return Alerter(store, clock, webhook_url="https://hooks.example/casekeeper", http=receiver.client())


def test_a_failed_webhook_is_retried_with_backoff_until_it_is_acknowledged(store: DocumentStore) -> None:
    clock, receiver = ManualClock(), Receiver(503, 500, 204)
    alerts = alerter(store, clock, receiver)
    assert alerts.raise_alert("effect_escalated", "effect e1 needs a person", {"caseId": "C-1"}, dedupe_key="e1")
    assert len(receiver.posts) == 1
    assert alerts.deliver_pending() == []  # its next attempt is not due yet
    clock.advance(6)
    assert alerts.deliver_pending() == []  # second attempt: 500
    clock.advance(11)
    assert alerts.deliver_pending() == ["effect_escalated:e1"]
    assert [p["id"] for p in receiver.posts] == ["effect_escalated:e1"] * 3  # a stable id to drop repeats
    clock.advance(3600)
    assert alerts.deliver_pending() == []
    [alert] = alerts.recent()
    assert (alert.delivered, alert.notified, alert.attempts) == (True, True, 3)


def test_an_alert_whose_record_landed_but_timed_out_is_still_notified(
    store: DocumentStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The record write reached the store but its answer was lost: the caller's retry finds the record
    ("already raised"), and without the timer nobody would ever be told."""
    clock, receiver = ManualClock(), Receiver(204)

    class LandsThenTimesOut:
        def __init__(self, inner: DocumentStore) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def create(self, *args: Any, **kwargs: Any) -> Document:
            self.inner.create(*args, **kwargs)
            raise StoreUnavailable("timed out waiting for the reply")

    flaky = alerter(LandsThenTimesOut(store), clock, receiver)  # type: ignore[arg-type]
    with pytest.raises(StoreUnavailable):
        flaky.raise_alert("checkpoint_lag", "case C-2 lags", {"caseId": "C-2"}, dedupe_key="C-2:v3")
    alerts = alerter(store, clock, receiver)
    assert alerts.raise_alert("checkpoint_lag", "case C-2 lags", {"caseId": "C-2"}, dedupe_key="C-2:v3") is False
    assert receiver.posts == []
    with caplog.at_level(logging.ERROR, logger="casekeeper.alerts"):
        assert alerts.deliver_pending() == []  # within the grace period its recorder may still be notifying
        clock.advance(NOTIFY_GRACE_SECONDS + 1)
        assert alerts.deliver_pending() == ["checkpoint_lag:C-2:v3"]
    assert [p["id"] for p in receiver.posts] == ["checkpoint_lag:C-2:v3"]
    [record] = [r for r in caplog.records if r.name == "casekeeper.alerts"]
    assert record.alertId == "checkpoint_lag:C-2:v3" and record.alertKind == "checkpoint_lag"  # type: ignore[attr-defined]


def test_without_a_webhook_an_alert_is_notified_by_its_log_record_once(
    store: DocumentStore, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    alerts = alerter(store, clock)
    with caplog.at_level(logging.ERROR, logger="casekeeper.alerts"):
        assert alerts.raise_alert("dead_lettered", "event m1 dead-lettered", {"caseId": "C-3"}, dedupe_key="m1:7")
        assert not alerts.raise_alert("dead_lettered", "event m1 dead-lettered", {"caseId": "C-3"}, dedupe_key="m1:7")
        clock.advance(NOTIFY_GRACE_SECONDS + 1)
        assert alerts.deliver_pending() == []
    assert len([r for r in caplog.records if r.name == "casekeeper.alerts"]) == 1
    [alert] = alerts.recent()
    assert (alert.delivered, alert.notified) == (None, True)


def test_a_webhook_that_never_answers_is_given_up_on_loudly(store: DocumentStore) -> None:
    clock, receiver = ManualClock(), Receiver(500)
    alerts = alerter(store, clock, receiver)
    alerts.raise_alert("effect_escalated", "effect e2 needs a person", {}, dedupe_key="e2")
    for _ in range(MAX_WEBHOOK_ATTEMPTS + 5):
        clock.advance(3601)
        alerts.deliver_pending()
    assert len(receiver.posts) == MAX_WEBHOOK_ATTEMPTS
    [alert] = alerts.recent()
    assert alert.notified is True and alert.delivered is False


def test_the_grace_before_the_timer_notifies_a_recorded_alert_is_a_setting(store: DocumentStore) -> None:
    """A host killed between recording an alert and posting it: the timer posts it once the grace given to
    the recorder (``ALERT_NOTIFY_GRACE_SECONDS``) has passed, not before."""
    clock, receiver = ManualClock(), Receiver(204)

    class DiesBeforeNotifying(Alerter):
        def _notify(self, doc: Document) -> bool:  # the process is gone before its POST
            return False

    DiesBeforeNotifying(
        store, clock, webhook_url="https://hooks.example/casekeeper", http=receiver.client()
    ).raise_alert("effect_escalated", "effect e9 escalated", {"caseId": "C-9"}, dedupe_key="e9")
    timer = Alerter(
        store, clock, webhook_url="https://hooks.example/casekeeper", http=receiver.client(), notify_grace=3.0
    )
    clock.advance(2.0)
    assert timer.deliver_pending() == []
    clock.advance(1.5)
    assert timer.deliver_pending() == ["effect_escalated:e9"]
    assert [p["id"] for p in receiver.posts] == ["effect_escalated:e9"]
