"""Store operations per path of a case: the figures the capacity model (docs/performance.md#capacity) uses.

:func:`benchmarks.store_ops.measure` counts one path, the over-billed ``invoice.received``. This counts
every path the model prices, the same way (the indexed functions as the host calls them, each
:class:`~shared.core.ports.DocumentStore` call counted by ``CountingStore``, on SQLite and on the Cosmos
DB test server, warm-up cases first and not counted). A path is one counted step, after the uncounted
steps that bring a fresh case to where the step starts:

- ``within``: ``invoice.received`` within tolerance, approved;
- ``over``: ``invoice.received`` over-billed by 100.00, one credit note requested;
- ``credit``: ``credit_note.issued`` for that credit note, which settles the case and closes it (the
  store the host opens stamps retention on the closing write: it is part of the count, as no extra call);
- ``answer``: an approval answer (``approve``) to a case paused for approval (over-billed by 2,500.00,
  above the approval threshold), one credit note requested;
- ``po``: ``po.updated`` that lowers the PO of an approved case by 100.00, one credit note requested;
- ``tick``: one run of the timer (``checkpoint_health``) with nothing stuck and nothing changed since the
  previous tick (not per case).

Each counted step is checked (the status it must reach, the credit-note requests at the supplier).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.guarded_effect import Tally
from benchmarks.processes import SECRET, Supplier
from benchmarks.store_ops import OpsResult, _functions, _world, invoice_event

PATH_PHASES = ("http", "case_worker", "reconciler", "timer")


@dataclass(frozen=True)
class PathSpec:
    """One path: the uncounted steps that prepare a fresh case, the counted step, and what it must reach
    (``status`` None: not a case's step; ``posts``: credit-note requests at the supplier for the case)."""

    name: str
    label: str
    setup: tuple[str, ...]
    step: str
    status: str | None
    posts: int


PATHS = (
    PathSpec("within", "`invoice.received` within tolerance (approved)", (), "within", "approved", 0),
    PathSpec("over", "`invoice.received` over-billed (credit note requested)", (), "over", "credit_requested", 1),
    PathSpec("credit", "`credit_note.issued` (settles, closes)", ("over",), "credit", "closed", 1),
    PathSpec("answer", "approval answer (approve: credit note requested)", ("large",), "answer", "credit_requested", 1),
    PathSpec("po", "`po.updated` (an approved case's PO lowered: credit requested)", ("within",), "po", "credit_requested", 1),
    PathSpec("tick", "idle timer tick (every 5 minutes, not per case)", (), "tick", None, 0),
)
NAMES = tuple(p.name for p in PATHS)


def _invoice(case_id: str, invoice: str, po: str) -> dict[str, Any]:
    event = invoice_event(case_id)
    event["data"] = {**event["data"], "invoiceAmount": invoice, "poAmount": po}
    return event


def measure_paths(
    backend: str, supplier: Supplier, *, events: int, warmup: int = 2, paths: tuple[str, ...] = NAMES
) -> dict[str, OpsResult]:
    """Count the store operations of ``events`` counted steps per path in ``paths`` on one fresh store of
    ``backend`` (after ``warmup`` uncounted ones per path)."""
    import azure.functions as func

    from azure.functions.timer import TimerRequest

    from shared.handlers.ingress import DELIVERY_HEADER, SIGNATURE_HEADER, sign
    from shared.localhost.changefeed import LocalChangeFeed, to_document_list
    from shared.messaging.sqlite_queue import to_service_bus_message
    from shared.stores.sqlite import SqliteDocumentStore

    functions = _functions()
    run = uuid.uuid4().hex[:6]
    results: dict[str, OpsResult] = {}
    with _world(backend, supplier.url) as (counting, inner, queue, services):
        feed = LocalChangeFeed(inner, "cases", "bench:paths") if isinstance(inner, SqliteDocumentStore) else None
        problems: list[str] = []

        def expect(response: Any, what: str) -> None:
            if response.status_code != 202:
                problems.append(f"{backend} {what}: answered {response.status_code}")

        def webhook(event: dict[str, Any], delivery: str) -> None:
            body = json.dumps(event).encode()
            headers = {
                "Content-Type": "application/json",
                SIGNATURE_HEADER: sign(SECRET, body, int(time.time()), delivery),
                DELIVERY_HEADER: delivery,
            }
            request = func.HttpRequest(method="POST", url="http://localhost/api/events", headers=headers, body=body)
            expect(functions["events"](request), f"{event['type']} {event['caseId']}")

        pending_of: dict[str, Any] = {}
        note_of: dict[str, str] = {}

        def prepare(step: str, case_id: str) -> None:
            """What a sender knows before the counted step and the benchmark reads uncounted: the pending
            request an approver answers, the credit note the supplier issued (its id, from the effect)."""
            if step == "answer" and (case := services.cases.get(case_id)) is not None:
                pending_of[case_id] = case.data.get("pendingApproval")
            elif step == "credit":
                results = [e.result for e in services.ledger.for_case(case_id) if e.result]
                note_of[case_id] = str(results[0]["creditNoteId"]) if results else f"CN-{case_id}"

        def answer(case_id: str) -> None:
            # Read before counting (a client knows the request from the approval page or its notification).
            pending = pending_of.pop(case_id, None)
            if not pending:
                problems.append(f"{backend} {case_id}: no approval pending")
                return
            body = json.dumps({"decision": "approve", "caseVersion": pending["caseVersion"], "approver": "bench"})
            request = func.HttpRequest(
                method="POST",
                url=f"http://localhost/api/cases/{case_id}/approvals/{pending['requestId']}",
                headers={"Content-Type": "application/json"},
                route_params={"caseId": case_id, "requestId": pending["requestId"]},
                body=body.encode(),
            )
            expect(functions["approvals"](request), f"approval of {case_id}")

        def http(step: str, case_id: str) -> None:
            if step == "within":
                webhook(_invoice(case_id, "1000.00", "1000.00"), f"{step}-{case_id}")
            elif step == "over":
                webhook(invoice_event(case_id), f"{step}-{case_id}")
            elif step == "large":
                webhook(_invoice(case_id, "3500.00", "1000.00"), f"{step}-{case_id}")
            elif step == "credit":
                data = {"creditNoteId": note_of.pop(case_id, f"CN-{case_id}"), "amount": "100.00"}
                webhook({"type": "credit_note.issued", "caseId": case_id, "data": data}, f"{step}-{case_id}")
            elif step == "po":
                data = {"poAmount": "900.00"}
                webhook({"type": "po.updated", "caseId": case_id, "data": data}, f"{step}-{case_id}")
            elif step == "answer":
                answer(case_id)

        def deliver() -> None:
            while (msg := queue.receive("case-events")) is not None:
                try:
                    asyncio.run(functions["case_worker"](to_service_bus_message(msg)))
                except Exception:
                    queue.abandon(msg)
                    raise
                queue.complete(msg)

        def follow_feed() -> None:
            if feed is not None and (batch := feed.poll()).documents:
                functions["reconciler"](to_document_list(batch))
                feed.commit(batch)

        def timer() -> None:
            functions["checkpoint_health"](TimerRequest(past_due=False))

        def phases(step: str, case_id: str) -> list[tuple[str, Callable[[], None]]]:
            if step == "tick":
                return [("timer", timer), ("case_worker", deliver), ("reconciler", follow_feed)]
            return [("http", lambda: http(step, case_id)), ("case_worker", deliver), ("reconciler", follow_feed)]

        try:
            for spec in PATHS:
                if spec.name not in paths:
                    continue
                result = OpsResult(backend, events, {phase: Tally() for phase in PATH_PHASES})
                result.change_feed = feed is not None
                problems = result.problems
                for i in range(warmup + events):
                    case_id = f"P{run}-{spec.name}-{i:03d}"
                    for step in spec.setup:
                        for _, call in phases(step, case_id):
                            call()
                    prepare(spec.step, case_id)
                    counting.take_tally()
                    for phase, call in phases(spec.step, case_id):
                        call()
                        taken = counting.take_tally()
                        if i >= warmup:
                            result.by_phase[phase].add(taken)
                    if i >= warmup:
                        problems.extend(_check(backend, services, supplier, spec, case_id))
                results[spec.name] = result
        finally:
            if feed is not None:
                feed.close()
    return results


def _check(backend: str, services: Any, supplier: Supplier, spec: PathSpec, case_id: str) -> list[str]:
    if spec.status is None:
        return []
    case = services.cases.get(case_id)
    posts = supplier.credit_note_posts({case_id})
    problems = []
    if case is None or case.status != spec.status:
        problems.append(f"{backend} {spec.name} {case_id}: status {getattr(case, 'status', None)}, not {spec.status}")
    if len(posts) != spec.posts:
        problems.append(f"{backend} {spec.name} {case_id}: {len(posts)} credit-note requests, not {spec.posts}")
    return problems
