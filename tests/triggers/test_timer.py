"""The timer as the host calls it (``TimerRequest``): its sweeps find what is stuck, cost what is stuck,
and every duty runs on its own. The store runs on a clock the test moves, so "older than the call
timeout" needs no sleeping."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from casekeeper.core.clock import ManualClock
from casekeeper.core.effect import EffectStatus
from casekeeper.core.entries import CommitPlan
from casekeeper.core.ports import Document, DocumentStore, Query
from casekeeper.stores.sqlite import SqliteDocumentStore
from devhost.schedule import timer_request
from devhost.supplier_stub import SupplierStub
from shared.app.bootstrap import Services
from shared.handlers.health import HealthChecksFailed, run_health_checks
from shared.messaging.sqlite_queue import LocalSessionQueue, to_service_bus_message
from tests.support.downstream import leave_started
from tests.support.supplier import posts
from tests.triggers.conftest import INVOICE, QUEUE, on_the_local_queue, settings_for, user_function

COMMIT = {"status": "credit_requested", "reason": "over-billed", "clearPendingApproval": False}
REQUEST = {"amount": "100.00", "currency": "EUR", "invoiceId": "INV-1", "supplierId": "S-1", "commit": COMMIT}


class ReadCounter:
    """The real store, counting the documents its queries return per container: the sweep's cost."""

    def __init__(self, inner: DocumentStore) -> None:
        self.inner = inner
        self.returned: dict[str, list[str]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def query(self, container: str, query: Query) -> list[Document]:
        docs = self.inner.query(container, query)
        self.returned.setdefault(container, []).extend(d.id for d in docs)
        return docs


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def timed(tmp_path: Path, supplier: SupplierStub, clock: ManualClock) -> Iterator[tuple[Services, ReadCounter]]:
    settings = settings_for(tmp_path, supplier.url)
    store = ReadCounter(SqliteDocumentStore(settings.sqlite_path, clock=clock.now))
    with on_the_local_queue(settings, store=store) as (svc, _):  # type: ignore[arg-type]
        yield svc, store


def tick(functions: dict[str, Any]) -> None:
    user_function(functions, "checkpoint_health")(timer_request(past_due=False, schedule_status=None))


def deliver_all(functions: dict[str, Any], svc: Services) -> list[dict[str, Any]]:
    queue = LocalSessionQueue(svc.settings.local_queue_path)
    bodies = []
    while (msg := queue.receive(QUEUE)) is not None:
        bodies.append(json.loads(msg.body))
        asyncio.run(user_function(functions, "case_worker")(to_service_bus_message(msg)))
        queue.complete(msg)
    queue.close()
    return bodies


def test_the_sweep_reads_what_is_stuck_not_what_is_done(
    functions: dict[str, Any], timed: tuple[Services, ReadCounter], clock: ManualClock
) -> None:
    """Thirty effects done and committed cost the sweep nothing; the one stuck effect is the one it reads."""
    svc, counter = timed
    for i in range(30):
        case_id = f"D-{i}"
        svc.cases.create(case_id, INVOICE)
        outcome = svc.ledger.run(
            case_id=case_id,
            action="request_credit_note",
            decided_on_version=1,
            call=lambda k: {"creditNoteId": k[:6]},
            commit=CommitPlan.from_intent(COMMIT),
            request=REQUEST,
        )
        assert outcome.commit == "committed"
    svc.cases.create("STUCK", INVOICE)
    stuck = leave_started(svc.ledger, "STUCK", request=REQUEST)
    clock.advance(121)
    counter.returned.clear()
    report = run_health_checks(svc.health)
    assert report.rechecks_scheduled == [stuck.key]
    assert counter.returned.get("effects", []) == []
    assert set(counter.returned["cases"]) == {"STUCK"}


def test_a_case_left_open_without_a_decision_is_investigated(
    functions: dict[str, Any], timed: tuple[Services, ReadCounter], clock: ManualClock, supplier: SupplierStub
) -> None:
    """A fact was recorded and the process died before deciding: the case would stay open forever."""
    svc, _ = timed
    svc.cases.create("C-7", INVOICE)  # open, and nothing is going to happen to it
    clock.advance(121)
    tick(functions)
    tick(functions)  # the same hour: one investigation, not two
    bodies = deliver_all(functions, svc)
    assert [b["type"] for b in bodies] == ["case.investigate"]
    assert svc.cases.require("C-7").status == "credit_requested"
    assert len([r for r in supplier.requests if r["method"] == "POST"]) == 1


def test_each_duty_runs_on_its_own_and_a_malformed_document_is_skipped_and_recorded(
    functions: dict[str, Any], timed: tuple[Services, ReadCounter], clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc, _ = timed
    svc.store.create("cases", "broken", "broken", {"id": "broken", "kind": "case", "openEffects": True})
    svc.cases.create("C-9", INVOICE)
    clock.advance(121)

    def unreachable(limit: int = 100, **paging: Any) -> list[Any]:
        raise ConnectionError("the dead-letter queue cannot be reached")

    monkeypatch.setattr(svc.dead_letters, "peek", unreachable)
    with pytest.raises(HealthChecksFailed, match="dead letters"):
        tick(functions)
    kinds = sorted(a.alert_kind for a in svc.alerts.recent())
    assert kinds == ["malformed_document"]
    [alert] = svc.alerts.recent()
    assert alert.fields["documentId"] == "broken"
    assert [b["caseId"] for b in deliver_all(functions, svc)] == ["C-9"]  # the other sweeps ran


def test_each_dead_lettered_event_alerts_once(functions: dict[str, Any], timed: tuple[Services, ReadCounter]) -> None:
    svc, _ = timed
    queue = LocalSessionQueue(svc.settings.local_queue_path, max_delivery_count=1)
    queue.send(QUEUE, b'{"type":"case.investigate","caseId":"C-1","data":{}}', session_id="C-1", message_id="webhook:x")
    msg = queue.receive(QUEUE)
    assert msg is not None
    queue.abandon(msg)
    queue.close()
    tick(functions)
    tick(functions)
    [alert] = svc.alerts.recent()
    assert alert.alert_kind == "dead_lettered" and alert.fields["messageId"] == "webhook:x"
    assert "casekeeper events redrive webhook:x" in alert.message


def test_every_dead_letter_is_alerted_once_however_many_there_are(
    functions: dict[str, Any], timed: tuple[Services, ReadCounter]
) -> None:
    """105 dead letters: the duty pages past the first 100 (it used to peek only those), and a second tick
    alerts none of them again."""
    svc, _ = timed
    queue = LocalSessionQueue(svc.settings.local_queue_path, max_delivery_count=1)
    for n in range(105):
        body = json.dumps({"type": "case.investigate", "caseId": f"C-{n}", "data": {}}).encode()
        queue.send(QUEUE, body, session_id=f"C-{n}", message_id=f"webhook:d-{n}")
        msg = queue.receive(QUEUE)
        assert msg is not None
        queue.abandon(msg)
    queue.close()
    tick(functions)
    tick(functions)
    alerted = [a.fields["messageId"] for a in svc.alerts.recent(limit=1000) if a.alert_kind == "dead_lettered"]
    assert sorted(alerted) == sorted(f"webhook:d-{n}" for n in range(105))


PAUSED = {"pendingApproval": {"requestId": "r-1", "caseVersion": 1}}
"""A run paused for a person: the one decision a case that holds no checkpoint must have left one for."""


def test_a_case_decided_without_a_pause_needs_no_checkpoint_and_one_paused_without_one_lags(
    timed: tuple[Services, ReadCounter], clock: ManualClock
) -> None:
    """A run that ends writes no checkpoint on a case that holds none (nobody would resume it): such a case
    does not lag. A case waiting for a person with no checkpoint does: its pause was never saved."""
    svc, _ = timed
    svc.cases.create("ENDED", INVOICE)
    assert svc.cases.commit_status("ENDED", 1, "approved", reason="within tolerance")
    svc.cases.create("PAUSED", INVOICE)
    assert svc.cases.commit_status("PAUSED", 1, "awaiting_approval", reason="above tolerance", data=PAUSED)
    clock.advance(svc.settings.checkpoint_lag + 1)
    report = run_health_checks(svc.health)
    assert report.lagging_cases == ["PAUSED"]


def test_the_lagging_runs_check_moves_its_cursor_past_a_case_it_cannot_examine(
    timed: tuple[Services, ReadCounter], clock: ManualClock
) -> None:
    """A case document that does not decode and a case that decodes but cannot be examined (a number
    where its last transition's reason should be) are skipped; the check still alerts the lagging case
    beside them, and its cursor moves past all three, so the next tick reads only what changed since."""
    svc, counter = timed
    svc.store.create("cases", "BAD-DOC", "BAD-DOC", {"id": "BAD-DOC", "kind": "case", "version": 1})
    svc.cases.create("BAD-CASE", INVOICE)
    bad = svc.store.read("cases", "BAD-CASE", "BAD-CASE")
    assert bad is not None
    history = [{"fromVersion": 1, "status": "approved", "reason": 5, "effectKey": None, "factsChanged": False}]
    svc.store.replace(
        "cases",
        "BAD-CASE",
        "BAD-CASE",
        {**bad.body, "status": "approved", "version": 2, "history": history},
        etag=bad.etag,
    )
    svc.cases.create("GOOD", INVOICE)
    assert svc.cases.commit_status(
        "GOOD", 1, "awaiting_approval", reason="above tolerance", data=PAUSED
    )  # no checkpoint
    clock.advance(svc.settings.checkpoint_lag + 1)
    report = run_health_checks(svc.health)  # raises HealthChecksFailed if a duty failed
    assert report.lagging_cases == ["GOOD"]
    assert report.malformed == ["cases/BAD-DOC"]
    cursor = svc.store.read("health", "cursor", "checkpoint-health")
    # The cursor holds the key of the last case examined (the newest of the three).
    good = svc.store.read("cases", "GOOD", "GOOD")
    assert good is not None and cursor is not None and cursor.body["after"] == [good.ts, "GOOD"]

    svc.cases.create("NEW", INVOICE)
    assert svc.cases.commit_status("NEW", 1, "awaiting_approval", reason="above tolerance", data=PAUSED)
    clock.advance(svc.settings.checkpoint_lag + 1)
    counter.returned.clear()
    report = run_health_checks(svc.health)
    assert report.lagging_cases == ["NEW"] and report.malformed == []
    assert set(counter.returned["cases"]) == {"NEW"}  # the skipped cases are not read again
    assert sorted(a.alert_kind for a in svc.alerts.recent()) == [
        "checkpoint_lag",
        "checkpoint_lag",
        "malformed_document",
    ]


def test_a_case_handed_to_a_person_outside_a_run_is_not_a_lagging_run(
    timed: tuple[Services, ReadCounter], clock: ManualClock
) -> None:
    """An escalation (by the reconciler, an operator, or a run) is not a decision a checkpoint follows:
    a case escalated after its last checkpoint does not alert, while a decision committed after it does.
    (Seen end to end: the reconciler's escalation after failed lookups raised checkpoint_lag whenever the
    timer ticked between the escalation and the next run.)"""
    svc, _ = timed
    svc.cases.create("ESCALATED", INVOICE)
    assert svc.cases.escalate("ESCALATED", "needs_review", "effect needs reconciliation", effect_key="k" * 64)
    svc.cases.create("DECIDED", INVOICE)
    assert svc.cases.commit_status("DECIDED", 1, "awaiting_approval", reason="above tolerance", data=PAUSED)
    [escalation] = svc.cases.require("ESCALATED").history
    assert escalation.escalation and not svc.cases.require("DECIDED").history[0].escalation
    clock.advance(svc.settings.checkpoint_lag + 1)
    report = run_health_checks(svc.health)
    assert report.lagging_cases == ["DECIDED"]


def test_an_unknown_outcome_on_the_case_is_swept_by_its_claim_time_however_many_notes_follow(
    functions: dict[str, Any], timed: tuple[Services, ReadCounter], clock: ManualClock, supplier: SupplierStub
) -> None:
    """The effect's entry lives on the case (casekeeper.core.entries). Notes keep moving the case's ``_ts``, but
    the first write after the claim froze the entry's time, so the timer's sweep of ``openEffects`` still
    finds it past the call timeout, and the re-check settles it by key: one request, committed."""
    from casekeeper.core.keys import effect_key
    from casekeeper.errors import OutcomeUnknown

    svc, counter = timed
    svc.cases.create("E-1", INVOICE)

    def unknown(key: str) -> dict[str, Any]:
        raise OutcomeUnknown("reset by the test")

    with pytest.raises(OutcomeUnknown):
        svc.ledger.run(
            case_id="E-1",
            action="request_credit_note",
            decided_on_version=1,
            call=unknown,
            commit=CommitPlan.from_intent(COMMIT),
            request={**REQUEST, "caseId": "E-1"},
        )
    for i in range(4):
        clock.advance(40)
        svc.cases.note("E-1", f"looked at it ({i})")
    counter.returned.clear()
    report = run_health_checks(svc.health)
    key = effect_key("E-1", "request_credit_note", 1)
    assert report.rechecks_scheduled == [key]
    assert counter.returned.get("effects", []) == []
    bodies = deliver_all(functions, svc)
    assert [b["type"] for b in bodies][:1] == ["effect.recheck"]
    case = svc.cases.require("E-1")
    assert case.status == "credit_requested" and [t.effect_key for t in case.transitions_of(key)] == [key]
    assert len(posts(supplier)) == 1  # the same-key retry after a lookup that found nothing


def test_an_effect_a_person_resolved_failed_is_swept_for_its_late_watch_and_then_no_more(
    functions: dict[str, Any], timed: tuple[Services, ReadCounter], clock: ManualClock, supplier: SupplierStub
) -> None:
    """A person resolved the effect failed; the supplier had nothing then. The timer's sweep of ``openEffects``
    looks the watched entry up once per bucket (a lookup, never a call); when the watch ends with nothing
    found, the entry stays failed, its case's flag drops, and the sweep no longer reads it."""
    from casekeeper.core.keys import effect_key
    from casekeeper.errors import OutcomeUnknown
    from shared.views.resolution import resolve

    svc, counter = timed
    svc.cases.create("E-1", INVOICE)

    def unknown(key: str) -> dict[str, Any]:
        raise OutcomeUnknown("reset by the test")

    with pytest.raises(OutcomeUnknown):
        svc.ledger.run(
            case_id="E-1",
            action="request_credit_note",
            decided_on_version=1,
            call=unknown,
            commit=CommitPlan.from_intent(COMMIT),
            request={**REQUEST, "caseId": "E-1"},
        )
    key = effect_key("E-1", "request_credit_note", 1)
    clock.advance(130)  # past the call timeout: a person may resolve it
    svc.cases.require("E-1")  # a reader stamps the claim's time
    resolve(svc.ops, key, result=None, reason="no note at the supplier", by="ana", why="checked the portal")
    clock.advance(130)  # the first lookup is due a call timeout after the person's outcome
    assert run_health_checks(svc.health).rechecks_scheduled == [key]
    bodies = deliver_all(functions, svc)
    assert [b["type"] for b in bodies] == ["effect.recheck"]
    watched = svc.ledger.get("E-1", key)
    assert watched is not None and watched.status is EffectStatus.FAILED and watched.watching
    clock.advance(svc.settings.late_watch)  # the watch is over, nothing was ever found
    assert run_health_checks(svc.health).rechecks_scheduled == [key]
    # The lookup that found nothing scheduled the next one into the case's session: due now, by the store's
    # (manual) clock, so delivered on a queue that keeps that clock.
    queue = LocalSessionQueue(svc.settings.local_queue_path, clock=clock.now)
    delivered = []
    while (msg := queue.receive(QUEUE)) is not None:
        delivered.append(json.loads(msg.body)["type"])
        asyncio.run(user_function(functions, "case_worker")(to_service_bus_message(msg)))
        queue.complete(msg)
    queue.close()
    assert delivered and set(delivered) == {"effect.recheck"}
    ended = svc.ledger.get("E-1", key)
    assert ended is not None and ended.status is EffectStatus.FAILED and not ended.watching
    clock.advance(3600)
    assert run_health_checks(svc.health).rechecks_scheduled == []
    assert counter.query("cases", Query(equals={"openEffects": True})) == []  # the sweep's query: no longer there
    assert posts(supplier) == []  # looked up, never asked: a person said it failed
