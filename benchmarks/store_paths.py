"""Store operations per path of a case: the figures the capacity model (docs/performance.md#capacity) uses.

:func:`benchmarks.store_ops.measure` counts one path, the over-billed ``invoice.received``. This counts
every path the model prices, the same way (the indexed functions as the host calls them, each
:class:`~casekeeper.core.ports.DocumentStore` call counted by ``CountingStore``, on SQLite and on the Cosmos
DB test server, warm-up cases first and not counted). A path is one counted step, after the uncounted
steps that bring a fresh case to where the step starts:

- ``within``: ``invoice.received`` within tolerance, approved;
- ``over``: ``invoice.received`` over-billed by 100.00, one credit note requested;
- ``credit``: ``credit_note.issued`` for that credit note, which settles the case and closes it (the
  store the host opens stamps retention on the closing write: it is part of the count, as no extra call);
- ``pause``: ``invoice.received`` over-billed by 2,500.00, above the approval threshold: paused for a person;
- ``answer``: an approval answer (``approve``) to that paused case, one credit note requested;
- ``credit_after_answer``: ``credit_note.issued`` closing a case that was answered (``answer``), whose
  run left checkpoints while it waited;
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
from benchmarks.store_ops import CLOCK, METHODS, OpsResult, _functions, _world, invoice_event
from benchmarks.tables import table

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
    PathSpec(
        "pause",
        "`invoice.received` above the approval threshold (paused for a person)",
        (),
        "large",
        "awaiting_approval",
        0,
    ),
    PathSpec("answer", "approval answer (approve: credit note requested)", ("large",), "answer", "credit_requested", 1),
    PathSpec(
        "credit_after_answer",
        "`credit_note.issued` closing a case that waited for a person",
        ("large", "answer"),
        "credit",
        "closed",
        1,
    ),
    PathSpec(
        "po", "`po.updated` (an approved case's PO lowered: credit requested)", ("within",), "po", "credit_requested", 1
    ),
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
    from casekeeper.stores.sqlite import SqliteDocumentStore
    from devhost.changefeed import LocalChangeFeed

    run = uuid.uuid4().hex[:6]
    results: dict[str, OpsResult] = {}
    with _world(backend, supplier.url) as (counting, inner, queue, services):
        feed = LocalChangeFeed(inner, "cases", "bench:paths") if isinstance(inner, SqliteDocumentStore) else None
        driver = _Driver(backend, _functions(), queue, services, feed)
        try:
            for spec in (p for p in PATHS if p.name in paths):
                result = OpsResult(backend, events, {phase: Tally() for phase in PATH_PHASES})
                result.change_feed = feed is not None
                driver.problems = result.problems
                for i in range(warmup + events):
                    case_id = f"P{run}-{spec.name}-{i:03d}"
                    for step in spec.setup:
                        driver.prepare(step, case_id)
                        for _, call in driver.phases(step, case_id):
                            call()
                    driver.prepare(spec.step, case_id)
                    counting.take_tally()
                    for phase, call in driver.phases(spec.step, case_id):
                        call()
                        taken = counting.take_tally()
                        if i >= warmup:
                            result.by_phase[phase].add(taken)
                    if i >= warmup:
                        result.problems.extend(_check(backend, services, supplier, spec, case_id))
                results[spec.name] = result
        finally:
            if feed is not None:
                feed.close()
    return results


class _Driver:
    """Sends a path's steps through the indexed functions, as the host would call them."""

    def __init__(self, backend: str, functions: dict[str, Callable[..., Any]], queue: Any, services: Any, feed: Any):
        self.backend, self.functions, self.queue, self.services, self.feed = backend, functions, queue, services, feed
        self.problems: list[str] = []
        self.pending_of: dict[str, Any] = {}
        self.note_of: dict[str, dict[str, str]] = {}

    def phases(self, step: str, case_id: str) -> list[tuple[str, Callable[[], None]]]:
        first = ("timer", self.timer) if step == "tick" else ("http", lambda: self.http(step, case_id))
        return [first, ("case_worker", self.deliver), ("reconciler", self.follow_feed)]

    def prepare(self, step: str, case_id: str) -> None:
        """What a sender knows before the counted step, read uncounted: the pending request an approver
        answers (from the approval page), the credit note the supplier issued (its id and amount, on the effect)."""
        if step == "answer" and (case := self.services.cases.get(case_id)) is not None:
            self.pending_of[case_id] = case.data.get("pendingApproval")
        elif step == "credit":
            results = [e.result for e in self.services.ledger.for_case(case_id) if e.result]
            note = results[0] if results else {"creditNoteId": f"CN-{case_id}", "amount": "100.00"}
            self.note_of[case_id] = {"creditNoteId": str(note["creditNoteId"]), "amount": str(note["amount"])}

    def expect(self, response: Any, what: str) -> None:
        if response.status_code != 202:
            self.problems.append(f"{self.backend} {what}: answered {response.status_code}")

    def webhook(self, event: dict[str, Any], delivery: str) -> None:
        import azure.functions as func

        from shared.handlers.ingress import DELIVERY_HEADER, SIGNATURE_HEADER, sign

        body = json.dumps(event).encode()
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(SECRET, body, int(time.time()), delivery),
            DELIVERY_HEADER: delivery,
        }
        request = func.HttpRequest(method="POST", url="http://localhost/api/events", headers=headers, body=body)
        self.expect(self.functions["events"](request), f"{event['type']} {event['caseId']}")

    def answer(self, case_id: str) -> None:
        import azure.functions as func

        pending = self.pending_of.pop(case_id, None)
        if not pending:
            self.problems.append(f"{self.backend} {case_id}: no approval pending")
            return
        body = json.dumps({"decision": "approve", "caseVersion": pending["caseVersion"], "approver": "bench"})
        request = func.HttpRequest(
            method="POST",
            url=f"http://localhost/api/cases/{case_id}/approvals/{pending['requestId']}",
            headers={"Content-Type": "application/json"},
            route_params={"caseId": case_id, "requestId": pending["requestId"]},
            body=body.encode(),
        )
        self.expect(self.functions["approvals"](request), f"approval of {case_id}")

    def http(self, step: str, case_id: str) -> None:
        delivery = f"{step}-{case_id}"
        if step == "within":
            self.webhook(_invoice(case_id, "1000.00", "1000.00"), delivery)
        elif step == "over":
            self.webhook(invoice_event(case_id), delivery)
        elif step == "large":
            self.webhook(_invoice(case_id, "3500.00", "1000.00"), delivery)
        elif step == "credit":
            data = self.note_of.pop(case_id, {"creditNoteId": f"CN-{case_id}", "amount": "100.00"})
            self.webhook({"type": "credit_note.issued", "caseId": case_id, "data": data}, delivery)
        elif step == "po":
            self.webhook({"type": "po.updated", "caseId": case_id, "data": {"poAmount": "900.00"}}, delivery)
        elif step == "answer":
            self.answer(case_id)

    def deliver(self) -> None:
        from shared.messaging.sqlite_queue import to_service_bus_message

        while (msg := self.queue.receive("case-events")) is not None:
            try:
                asyncio.run(self.functions["case_worker"](to_service_bus_message(msg)))
            except Exception:
                self.queue.abandon(msg)
                raise
            self.queue.complete(msg)

    def follow_feed(self) -> None:
        from devhost.changefeed import to_document_list

        if self.feed is not None and (batch := self.feed.poll()).documents:
            self.functions["reconciler"](to_document_list(batch))
            self.feed.commit(batch)

    def timer(self) -> None:
        from azure.functions.timer import TimerRequest

        self.functions["checkpoint_health"](TimerRequest(past_due=False))


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


# --- request units, from the published costs docs/performance.md#capacity states ----------------------------------

WRITES = ("create", "replace", "update_if", "upsert", "delete")
READS = ("read",)
QUERIES = ("query", "count")
QUERY_RU = 3.0
"""A small single-partition query."""
CLOCK_RU = 5.0
"""``now()``: on Cosmos DB an upsert of a small document to ``health``."""


def write_ru(size: float) -> float:
    """One write of ``size`` bytes: about 5 RU at 1 KB or less, 6.3 at 2 KB, and (a straight line through
    those two) 1.3 RU more for every further KB."""
    kb = size / 1024
    return 5.0 if kb <= 1 else 5.0 + 1.3 * (kb - 1)


def read_ru(size: float) -> float:
    """One point read of ``size`` bytes: 1 RU a KB, at least 1."""
    return max(1.0, size / 1024)


@dataclass(frozen=True)
class PathRow:
    """One path's counts per counted step, and its request units by the costs above (each container's
    writes and reads priced at that container's mean size per operation, measured)."""

    name: str
    ops: float
    writes: float
    reads: float
    queries: float
    clock: float
    bytes_read: float
    bytes_written: float
    ru: float


def path_row(name: str, result: OpsResult) -> PathRow:
    total, n = result.total(), result.events or 1
    count = {kind: sum(total.calls[(c, m)] for (c, m) in total.calls if m in kind) / n for kind in (WRITES, READS)}
    queries = sum(v for (_, m), v in total.calls.items() if m in QUERIES) / n
    clock = sum(v for (_, m), v in total.calls.items() if m == "now") / n
    ru = QUERY_RU * queries + CLOCK_RU * clock
    for container in {c for c, _ in total.calls}:
        writes = sum(total.calls[(container, m)] for m in WRITES)
        reads = sum(total.calls[(container, m)] for m in READS)
        if writes:
            ru += writes * write_ru(total.bytes_written[container] / writes) / n
        if reads:
            ru += reads * read_ru(total.bytes_read[container] / reads) / n
    return PathRow(
        name=name,
        ops=total.total() / n,
        writes=count[WRITES],
        reads=count[READS],
        queries=queries,
        clock=clock,
        bytes_read=total.bytes_read.total() / n,
        bytes_written=total.bytes_written.total() / n,
        ru=ru,
    )


def by_container(result: OpsResult) -> str:
    """``cases create 1, replace 2; health create 1``: the calls per counted step, by container and method."""
    total, n = result.total(), result.events or 1
    parts = []
    for container in sorted({c for c, _ in total.calls}):
        if container == CLOCK:
            parts.append(f"now() {total.calls[(container, 'now')] / n:g}")
            continue
        methods = ", ".join(f"{m} {total.calls[(container, m)] / n:g}" for m in METHODS if total.calls[(container, m)])
        parts.append(f"{container} {methods}")
    return "; ".join(parts) or "-"


def render_paths(paths: dict[str, dict[str, OpsResult]]) -> list[str]:
    rows = []
    for spec in PATHS:
        for backend, by_path in paths.items():
            if spec.name not in by_path:
                continue
            r = path_row(spec.name, by_path[spec.name])
            rows.append(
                (
                    spec.name,
                    backend,
                    f"{r.ops:g}",
                    f"{r.writes:g} / {r.reads:g} / {r.queries:g} / {r.clock:g}",
                    by_container(by_path[spec.name]),
                    f"{r.bytes_read:.0f}",
                    f"{r.bytes_written:.0f}",
                    f"{r.ru:.0f}",
                )
            )
    lines = table(
        (
            "path",
            "backend",
            "ops",
            "writes / reads / queries / now()",
            "by container",
            "bytes read",
            "bytes written",
            "RU",
        ),
        rows,
        text=frozenset({0, 1, 3, 4}),
    )
    lines.append("")
    lines += [f"{spec.name}: {spec.label}" for spec in PATHS]
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.store_paths [--events N] [--backends sqlite,cosmos]``: the per-path table alone
    (``make bench`` prints it as section 3b). Exit status 1 if a counted step did not end as it must."""
    import argparse
    import tempfile
    from pathlib import Path

    from benchmarks.guarded_effect import BACKENDS, backends_argument, positive_int
    from benchmarks.processes import running_supplier

    parser = argparse.ArgumentParser(prog="python -m benchmarks.store_paths", description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=positive_int, default=5, help="counted steps per path")
    parser.add_argument("--backends", type=backends_argument, default=list(BACKENDS), help="sqlite,cosmos")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="casekeeper-paths-") as tmp, running_supplier(Path(tmp)) as supplier:
        measured = {b: measure_paths(b, supplier, events=args.events) for b in args.backends}
    for line in render_paths(measured):
        print(line)
    problems = [p for by_path in measured.values() for r in by_path.values() for p in r.problems]
    for problem in problems:
        print(f"FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
