"""The driver as a webhook sender: a 503 (nothing accepted, the store down) is sent again, with the same
delivery id and a fresh signature, until a host accepts it; one never accepted is not recorded as accepted.

The hosts are an ``httpx.MockTransport`` and the cluster a two-method stand-in: what is under test is the
driver's retry loop and what it records, not a host (the chaos run itself drives real hosts).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

import httpx
import pytest

from chaos import driver as driver_module
from chaos.config import SECRET
from chaos.driver import Driver
from chaos.plan import Plan, Step
from shared.handlers.ingress import DELIVERY_HEADER, SIGNATURE_HEADER, verify


@dataclass
class OneHost:
    """The cluster as the driver uses it: one host, always up, the store never announced down."""

    store_down: bool = False

    def pick(self, preferred: int) -> int | None:
        return 0

    def url(self, index: int) -> str:
        return "http://host"


def driver_answering(statuses: list[int], seen: list[httpx.Request]) -> Driver:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        status = statuses.pop(0) if statuses else 503
        return httpx.Response(status, json={"error": "store down"} if status == 503 else {"accepted": True})

    step = Step(0, 0.0, "event", "C-1", 0, "po.updated", {"poAmount": "1100.00"}, "d-1")
    plan = Plan(seed=1, seconds=1.0, hosts=1, cases=(), steps=(step,), faults=(), kills=())
    return Driver(plan, OneHost(), _http=httpx.Client(transport=httpx.MockTransport(answer)))  # type: ignore[arg-type]


def test_a_503_is_sent_again_with_the_same_delivery_until_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver_module.time, "sleep", lambda _: None)
    seen: list[httpx.Request] = []
    driver = driver_answering([503, 503, 202], seen)
    driver.run(time.monotonic(), stop=threading.Event(), deadline=time.monotonic() + 60)
    [record] = driver.sent
    assert record.accepted and record.accepted_at is not None
    assert [a.status for a in driver.attempts] == [503, 503, 202]
    assert {r.headers[DELIVERY_HEADER] for r in seen} == {"d-1"}
    for request in seen:  # each attempt signed for the delivery id it carries
        verify(request.headers[SIGNATURE_HEADER], request.content, [SECRET], time.time(), delivery_id="d-1")
    assert json.loads(seen[-1].content)["data"] == {"poAmount": "1100.00"}


def test_an_event_no_host_accepted_before_giving_up_is_not_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver_module, "GIVE_UP_SECONDS", 0.2)
    seen: list[httpx.Request] = []
    driver = driver_answering([], seen)
    driver.run(time.monotonic(), stop=threading.Event(), deadline=time.monotonic() + 60)
    [record] = driver.sent
    assert len(seen) >= 2 and not record.accepted and record.status == 503 and record.accepted_at is None
