"""The case worker, the reconciler and the timer, invoked with ``ServiceBusMessage``, ``DocumentList``
and ``TimerRequest`` as the host would."""

from __future__ import annotations

import json
import time
from typing import Any

import azure.functions as func
import pytest

from casekeeper.capture import failure_partition
from casekeeper.core.ports import Query
from devhost.schedule import timer_request
from devhost.supplier_stub import SupplierStub
from shared.app.bootstrap import Services
from shared.domain.events import CaseEvent
from shared.handlers.case_events import MAX_RECHECKS
from shared.handlers.rejected import rejected_events
from shared.messaging.sqlite_queue import LocalSessionQueue
from tests.support.downstream import leave_started
from tests.triggers.conftest import INVOICE, QUEUE, deliver, user_function


def send(svc: Services, event: CaseEvent, message_id: str) -> None:
    svc.sender.send(event, message_id=message_id)


def test_the_worker_handles_an_invoice_end_to_end(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue, supplier: SupplierStub
) -> None:
    send(svc, CaseEvent("invoice.received", "C-1", INVOICE), "m-1")
    deliver(functions, queue)
    assert svc.cases.require("C-1").status == "credit_requested"
    assert [r["method"] for r in supplier.requests] == ["POST"]
    assert queue.counts(QUEUE)["active"] == 0


def test_an_in_flight_effect_schedules_a_copy_and_completes_the_original(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    svc.cases.create("C-1", INVOICE)
    leave_started(svc.ledger, "C-1")  # another attempt holds the claim, outcome unknown yet
    send(svc, CaseEvent("case.investigate", "C-1", {}), "m-2")
    before = time.time()
    deliver(functions, queue)  # returns normally: the original completes
    [copy] = queue.peek(QUEUE)
    assert copy.session_id == "C-1" and copy.message_id != "m-2"
    assert copy.scheduled_enqueue_time is not None and copy.scheduled_enqueue_time > before + 100
    assert json.loads(copy.body)["retry"] == 1


def test_a_malformed_message_is_set_aside_with_its_reason(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    queue.send(
        QUEUE,
        b'{"type": "po.updated", "caseId": "C-9", "data": {"poAmount": 1.5}}',
        session_id="C-9",
        message_id="bad-1",
    )
    deliver(functions, queue)
    [rejected] = svc.store.query("health", Query(partition="rejected_event"))
    assert rejected.body["caseId"] == "C-9" and "data.poAmount" in rejected.body["fields"]
    assert queue.counts(QUEUE)["active"] == 0  # completed, not retried forever


def test_a_withdrawal_for_an_unknown_case_is_set_aside_and_a_fact_before_its_invoice_is_held(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    withdrawal = {"effectKey": "k", "by": "ana", "why": "settled by phone", "at": 1.0}
    send(svc, CaseEvent("request.withdrawn", "ghost", withdrawal), "m-3")
    deliver(functions, queue)
    [rejected] = svc.store.query("health", Query(partition="rejected_event"))
    assert "unknown case" in rejected.body["reason"]
    send(svc, CaseEvent("po.updated", "early", {"poAmount": "1.00"}), "m-4")
    deliver(functions, queue)
    assert svc.cases.require("early").status == "awaiting_invoice"
    assert len(svc.store.query("health", Query(partition="rejected_event"))) == 1


def test_the_reconciler_schedules_a_recheck_for_a_started_entry_on_a_changed_case(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    """The trigger follows the cases container: a case whose entry is ``started`` gets its re-check for the
    claim time plus the call timeout; a case with only closed entries schedules nothing."""
    from casekeeper.core.entries import CommitPlan
    from casekeeper.errors import OutcomeUnknown

    commit = {"status": "credit_requested", "reason": "over-billed", "clearPendingApproval": False}
    request = {"amount": "100.00", "currency": "EUR", "invoiceId": "INV-1", "supplierId": "S-1", "commit": commit}
    svc.cases.create("C-3", INVOICE)
    svc.cases.create("C-4", INVOICE)

    def unknown(key: str) -> dict[str, Any]:
        raise OutcomeUnknown("reset by the test")

    for case_id, call in (("C-3", unknown), ("C-4", lambda k: {"creditNoteId": "CN-8"})):
        with pytest.raises(OutcomeUnknown) if call is unknown else _nothing():
            svc.ledger.run(
                case_id=case_id,
                action="request_credit_note",
                decided_on_version=1,
                call=call,
                commit=CommitPlan.from_intent(commit),
                request=request,
            )
    docs = []
    for case_id in ("C-3", "C-4"):
        doc = svc.store.read("cases", case_id, case_id)
        assert doc is not None
        docs.append(func.Document.from_dict({**doc.body, "_ts": int(doc.ts), "_etag": doc.etag}))
    user_function(functions, "reconciler")(func.DocumentList(docs))
    [recheck] = queue.peek(QUEUE)
    assert recheck.session_id == "C-3" and json.loads(recheck.body)["type"] == "effect.recheck"
    claimed = svc.store.read("cases", "C-3", "C-3")
    assert claimed is not None
    assert recheck.scheduled_enqueue_time == pytest.approx(int(claimed.ts) + 120 + 5, abs=1.5)


def _nothing() -> Any:
    import contextlib

    return contextlib.nullcontext()


def test_the_timer_alerts_each_checkpoint_failure_once(functions: dict[str, Any], svc: Services) -> None:
    partition = failure_partition("C-1", "f-1")
    failure = {
        "id": "f-1",
        "kind": partition,
        "record": "checkpoint_failure",
        "caseId": "C-1",
        "workflowName": "w",
        "iteration": 3,
        "error": {"type": "WorkflowCheckpointException", "message": "refusing to save"},
        "lastGoodCheckpointId": "cp-2",
        "at": "2026-12-02T10:00:00+00:00",
        "alerted": False,
    }
    svc.store.create("health", partition, "f-1", failure)
    for _ in range(3):
        user_function(functions, "checkpoint_health")(timer_request(past_due=False, schedule_status=None))
    [alert] = svc.alerts.recent()
    assert alert.alert_kind == "checkpoint_failure"
    assert alert.fields["caseId"] == "C-1" and alert.fields["iteration"] == 3
    assert "refusing to save" in alert.message


def test_rechecks_that_reach_their_cap_say_so_in_an_alert(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    """The last re-check the cap allows (``MAX_RECHECKS``) finds the effect still unsettled: no copy is
    scheduled, and instead of going quiet the worker raises one alert naming the effect."""
    svc.cases.create("C-1", INVOICE)
    effect = leave_started(svc.ledger, "C-1")  # in flight: a re-check would ask for another
    envelope = {"retry": MAX_RECHECKS, "rootMessageId": "recheck:root"}
    send(svc, CaseEvent("effect.recheck", "C-1", {"key": effect.key}, envelope=envelope), "recheck:last")
    deliver(functions, queue)
    assert queue.peek(QUEUE) == []  # no further re-check
    [alert] = [a for a in svc.alerts.recent() if a.alert_kind == "rechecks_exhausted"]
    assert alert.fields["effectKey"] == effect.key and alert.fields["rechecks"] == MAX_RECHECKS
    assert "in_flight" in alert.message


def test_an_answer_only_the_worker_can_refuse_is_set_aside_with_its_reason_on_the_case(
    functions: dict[str, Any], svc: Services, queue: LocalSessionQueue
) -> None:
    """The door let it through (the request was pending then); by the time the worker takes it, the request
    is no longer pending. It is shown in the case's ``rejectedEvents`` with the reason, not only logged."""
    svc.cases.create("C-1", INVOICE)
    answer = {"requestId": "apr-gone", "decision": "approve", "caseVersion": 1, "approver": "key:ana"}
    send(svc, CaseEvent("approval.answered", "C-1", answer), "approval:gone")
    deliver(functions, queue)
    [rejected] = rejected_events(svc.store, "C-1")
    assert rejected["messageId"] == "approval:gone"
    assert rejected["reason"].startswith("approval answer not applied: approval apr-gone is not pending")
    assert rejected["fields"] == {"requestId": "apr-gone"}
