"""A model outage defers the event, never dead-letters it: the case worker invoked as the host would, the
real Agent Framework chat client (Azure OpenAI SDK) talking to the local stand-in model over loopback, and
the local session queue's real redelivery and dead-lettering around it.

Before: a 429 or 500 from the model was Agent Framework's ``ChatClientException``, outside Casekeeper's
error tree, so the worker re-raised it; the broker redelivered at once and dead-lettered the event after
ten deliveries, within seconds, with the case left ``open`` and nothing on it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from casekeeper.core.clock import ManualClock
from devhost.model_stub import ModelStub
from devhost.supplier_stub import SupplierStub
from shared.app.bootstrap import Services
from shared.domain.events import CaseEvent
from shared.messaging.sqlite_queue import LocalSessionQueue
from tests.triggers.conftest import INVOICE, QUEUE, deliver_next, on_the_local_queue, settings_for

KEY = "stub-key"


@pytest.fixture
def model() -> Iterator[ModelStub]:
    with ModelStub(api_key=KEY) as stub:
        yield stub


@pytest.fixture
def world(
    tmp_path: Path, supplier: SupplierStub, model: ModelStub, clock: ManualClock
) -> Iterator[tuple[Services, LocalSessionQueue]]:
    settings = settings_for(
        tmp_path,
        supplier.url,
        AZURE_OPENAI_ENDPOINT=model.url,
        AZURE_OPENAI_DEPLOYMENT="gpt-stub",
        AZURE_OPENAI_API_KEY=KEY,
        AZURE_OPENAI_TIMEOUT_SECONDS="2",
        RETRY_BASE_SECONDS="0.05",
        RETRY_MAX_DELAY_SECONDS="60",
    )
    with on_the_local_queue(settings, clock) as world:
        yield world


def test_a_throttled_model_defers_the_event_by_its_retry_after_and_the_case_says_so(
    functions: dict[str, Any], world: tuple[Services, LocalSessionQueue], model: ModelStub, clock: ManualClock
) -> None:
    """429 with ``Retry-After: 30`` twelve times (more than the queue's ten deliveries): each delivery asks
    the model once (no retry in place, none in the SDK), completes, and schedules a copy at least 30 s
    ahead; then the model answers and the case is decided. Nothing is dead-lettered."""
    svc, queue = world
    model.script.replace({"steps": [{"mode": "throttle", "retryAfter": 30}] * 12})
    svc.sender.send(CaseEvent("invoice.received", "C-1", INVOICE, delivery_id="d-1"), message_id="webhook:d-1")
    for attempt in range(1, 13):
        started = time.monotonic()
        assert deliver_next(functions, queue) == "completed"  # the delivery count is never burned
        assert time.monotonic() - started < 20, "the worker slept in place for the model's Retry-After (30 s)"
        assert len(model.calls()) == attempt
        [copy] = queue.peek(QUEUE)
        assert copy.enqueued_time - clock.now() >= 30, "the copy came back before the model's Retry-After"
        # The facts are written on the first attempt: the copy only decides.
        assert json.loads(copy.body)["type"] == "case.investigate"
        clock.advance(copy.enqueued_time - clock.now() + 0.001)
    case = svc.cases.require("C-1")
    assert case.status == "open" and case.facts["invoiceAmount"] == "1100.00"
    notes = [n for n in case.notes if "model unavailable" in n["text"]]
    assert len(notes) == 12
    assert notes[0]["kind"] == "throttled" and notes[0]["status"] == 429 and notes[0]["retryAfter"] == 30
    assert "Retry after 30 seconds" in notes[0]["text"] and notes[0]["deployment"] == "gpt-stub"

    assert deliver_next(functions, queue) == "completed"  # the model answers now
    case = svc.cases.require("C-1")
    assert case.status == "credit_requested"
    assert case.history[-1].proposed_by == "model gpt-stub"
    assert queue.counts(QUEUE)["dead_lettered"] == 0 and queue.peek(QUEUE) == []


@pytest.mark.parametrize("failure", [{"mode": "error", "status": 500}, {"mode": "error", "status": 503}])
def test_a_failing_model_is_retried_by_a_delayed_copy_not_in_place(
    functions: dict[str, Any],
    world: tuple[Services, LocalSessionQueue],
    model: ModelStub,
    clock: ManualClock,
    failure: dict[str, Any],
) -> None:
    svc, queue = world
    model.script.replace({"steps": [failure] * 2})
    svc.sender.send(CaseEvent("invoice.received", "C-2", INVOICE, delivery_id="d-2"), message_id="webhook:d-2")
    for attempt in (1, 2):
        assert deliver_next(functions, queue) == "completed"
        assert len(model.calls()) == attempt  # one call per delivery: no waits in place, no SDK retries
        [copy] = queue.peek(QUEUE)
        clock.advance(copy.enqueued_time - clock.now() + 0.001)
    assert deliver_next(functions, queue) == "completed"
    assert svc.cases.require("C-2").status == "credit_requested"
    assert queue.counts(QUEUE)["dead_lettered"] == 0


def test_a_model_slower_than_its_timeout_is_abandoned_and_retried_later(
    functions: dict[str, Any], world: tuple[Services, LocalSessionQueue], model: ModelStub, clock: ManualClock
) -> None:
    """AZURE_OPENAI_TIMEOUT_SECONDS is 2: a model that takes 10 s is given up long before it answers."""
    svc, queue = world
    model.script.replace({"steps": [{"mode": "slow", "seconds": 10}]})
    svc.sender.send(CaseEvent("invoice.received", "C-3", INVOICE, delivery_id="d-3"), message_id="webhook:d-3")
    started = time.monotonic()
    assert deliver_next(functions, queue) == "completed"
    assert time.monotonic() - started < 8
    [note] = [n for n in svc.cases.require("C-3").notes if "model unavailable" in n["text"]]
    assert note["kind"] == "timeout"
    [copy] = queue.peek(QUEUE)
    clock.advance(copy.enqueued_time - clock.now() + 0.001)
    assert deliver_next(functions, queue) == "completed"
    assert svc.cases.require("C-3").status == "credit_requested"


@pytest.mark.parametrize(
    ("step", "words"),
    [
        ({"mode": "refusal"}, "the model refused: I can't help with approving payments."),
        ({"mode": "content_filter"}, "content filter withheld the answer: The response was filtered"),
    ],
    ids=["refusal", "content-filter"],
)
def test_a_refusal_or_the_content_filter_hands_the_case_to_a_person_with_the_models_words(
    functions: dict[str, Any],
    world: tuple[Services, LocalSessionQueue],
    model: ModelStub,
    supplier: SupplierStub,
    step: dict[str, Any],
    words: str,
) -> None:
    svc, queue = world
    model.script.replace({"steps": [step]})
    svc.sender.send(CaseEvent("invoice.received", "C-4", INVOICE, delivery_id="d-4"), message_id="webhook:d-4")
    assert deliver_next(functions, queue) == "completed"
    case = svc.cases.require("C-4")
    assert case.status == "needs_review"
    assert words in (case.history[-1].reason or "")
    assert case.history[-1].proposed_by == "model gpt-stub"
    assert queue.peek(QUEUE) == [] and [r for r in supplier.requests if r["method"] == "POST"] == []
