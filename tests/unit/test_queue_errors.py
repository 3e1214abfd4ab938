"""The messaging side reports its failures as ``QueueError`` on every backend, and the webhook answers 503
exactly when trying again later can help (``QueueUnavailable``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from casekeeper.core.clock import ManualClock
from casekeeper.errors import StoreError, StoreUnavailable
from shared.domain.events import CaseEvent
from shared.errors import QueueError, QueueUnavailable
from shared.handlers.ingress import DELIVERY_HEADER, SIGNATURE_HEADER, Ingress, sign
from shared.messaging.local import LocalDeadLetters, LocalQueueEventSender

QUEUE = "case-events"
SECRET = "s3cret"


class BrokenQueue:
    """A stand-in for ``LocalSessionQueue`` whose every call fails with ``error``."""

    def __init__(self, error: StoreError) -> None:
        self.error = error

    def send(self, *args: Any, **kwargs: Any) -> bool:
        raise self.error

    def dead_letters(self, *args: Any, **kwargs: Any) -> list[Any]:
        raise self.error

    def counts(self, *args: Any, **kwargs: Any) -> dict[str, int]:
        raise self.error


def test_a_locked_local_queue_file_is_queue_unavailable_and_retryable() -> None:
    sender = LocalQueueEventSender(BrokenQueue(StoreUnavailable("sqlite busy: database is locked")), QUEUE)  # type: ignore[arg-type]
    with pytest.raises(QueueUnavailable) as caught:
        sender.send(CaseEvent("case.investigate", "C-1", {}), message_id="m-1")
    assert caught.value.retryable and caught.value.queue == QUEUE
    assert isinstance(caught.value.__cause__, StoreUnavailable)


def test_any_other_local_queue_failure_is_a_queue_error_that_is_not_retryable() -> None:
    letters = LocalDeadLetters(BrokenQueue(StoreError("the queue is closed")), QUEUE)  # type: ignore[arg-type]
    for call in (letters.peek, letters.counts, letters.redrive):
        with pytest.raises(QueueError) as caught:
            call()
        assert type(caught.value) is QueueError and not caught.value.retryable


class FailingSender:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def send(self, event: CaseEvent, *, message_id: str, schedule_at: float | None = None) -> None:
        raise self.error


def post(ingress: Ingress, clock: ManualClock) -> tuple[int, dict[str, Any]]:
    body = json.dumps({"type": "case.investigate", "caseId": "C-1", "data": {}}).encode()
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(SECRET, body, int(clock.now()), "d-1"),
        DELIVERY_HEADER: "d-1",
    }
    response = ingress.accept_event(headers, body)
    return response.status, response.body


def test_the_webhook_answers_503_when_the_queue_is_unavailable() -> None:
    clock = ManualClock()
    ingress = Ingress([SECRET], FailingSender(QueueUnavailable("service bus: timed out", queue=QUEUE)), clock)
    status, body = post(ingress, clock)
    assert status == 503 and "nothing was accepted" in body["error"]


def test_a_queue_failure_that_retrying_cannot_mend_is_not_answered_as_503() -> None:
    clock = ManualClock()
    ingress = Ingress([SECRET], FailingSender(QueueError("local queue: no such table", queue=QUEUE)), clock)
    with pytest.raises(QueueError):
        post(ingress, clock)
