"""What the operations page, the drain check and one timer tick cost over a store of 1k and 100k cases.

The store is seeded directly (no events, no worker per case): a few template cases are made by the real
case worker against a real supplier stub (a credit requested and finished, a run paused for an approval),
and then every seeded case is a copy of one of them under its own id, with its effects and its checkpoint.
A small fraction is stuck: paused for an approval (with its checkpoint and the run's in-flight mark), an
effect ``started`` and never settled, a case left ``open`` with its decision never made. The rest finished
long ago.

Then, through :class:`~benchmarks.guarded_effect.CountingStore`, each of these is run once and measured
(wall time, store round trips, documents the queries returned):

- **ops page counts**: the counts by status and the first ids of each (``shared.views.cases``);
- **pending effects**: the ops page's list (the oldest 50 of each open status, and their counts);
- **drain check**: every in-flight run judged against this build (``shared.views.drain``);
- **timer tick**: every duty of one tick (``shared.handlers.health``), the call timeout set to zero so
  that every seeded ``started`` effect and ``open`` case is overdue.

SQLite gets 1k and 100k cases (inserted in one transaction per container); the Cosmos DB test server gets
1k and 10k, seeded through its bulk route (:meth:`~shared.localhost.cosmos_server.CosmosServer.seed`: 100k
documents in about 6 s). Not 100k: the test server answers every query by scanning every document of the
container in JavaScript, about 0.9 ms a document, so one query over 100k cases takes about 90 s (measured:
a ``COUNT`` of one status, and a ``TOP 50`` of it, 85-104 s each) and the drain check alone would run for
hours. What carries over to Azure is the round trips and the documents read, which the 10k rows show
growing with the stuck work, as SQLite's do at 100k; ``--cosmos-sizes 100000`` runs it anyway.

Run: ``python -m benchmarks.scale [--sizes 1000 100000] [--cosmos-sizes 1000 100000] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sqlite3
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.guarded_effect import CountingStore
from casekeeper.capture import uninstall
from casekeeper.core.cases import CaseRepository
from casekeeper.core.clock import ManualClock
from casekeeper.core.ledger import Ledger
from casekeeper.core.ports import CONTAINERS, Document, DocumentStore, Query, partition_of
from casekeeper.stores.sqlite import SqliteDocumentStore
from shared.app import bootstrap
from shared.app.alerts import Alerter
from shared.app.settings import Settings
from shared.domain import events as ev
from shared.domain.invoice import Rules
from shared.handlers.health import run_health_checks
from shared.localhost.supplier_stub import SupplierStub
from shared.supplier.portal import SupplierPortal
from shared.views.cases import cases_by_status
from shared.views.drain import check
from shared.views.effects import pending_view
from shared.views.runs import graph_hash_of
from shared.workflow.build import build_workflow
from shared.workflow.deps import WorkflowDeps
from shared.workflow.messages import ALLOWED_CHECKPOINT_TYPES
from shared.workflow.proposers import RulesProposer
from shared.workflow.runner import WorkflowRunner
from shared.workflow.worker import CaseWorker

if TYPE_CHECKING:
    from shared.localhost.cosmos_server import CosmosServer

STUCK_FRACTION = 0.01
"""Of the seeded cases: 40 % of these paused for an approval, 40 % with a started effect, 20 % left open."""
PAGE_SHOWN = 50
INVOICE = {"invoiceId": "INV-1", "supplierId": "SUP-9", "poNumber": "PO-1", "currency": "EUR", "poAmount": "1000.00"}


@dataclass
class Measure:
    what: str
    seconds: float
    round_trips: int
    documents_read: int
    by_method: dict[str, int]


@dataclass
class SizeResult:
    backend: str
    cases: int
    stuck: int
    seed_seconds: float
    measures: list[Measure] = field(default_factory=list)


# --- templates: real cases, made by the real worker -------------------------------------------------


def templates(store: DocumentStore, supplier_url: str) -> dict[str, list[Document]]:
    """``finished`` (credit requested, its run finished) and ``paused`` (awaiting an approval): each case's
    documents in every container."""
    cases = CaseRepository(store, ManualClock())
    deps = WorkflowDeps(
        cases=cases,
        ledger=Ledger(store, cases),
        supplier=SupplierPortal(supplier_url, timeout=10.0),
        proposer=RulesProposer(),
        rules=Rules(),
    )
    worker = CaseWorker(WorkflowRunner(deps, store, alert=Alerter(store, ManualClock()).raise_alert))
    made = {"finished": ("T-FIN", "1100.00"), "paused": ("T-PAUSE", "2500.00")}
    found: dict[str, list[Document]] = {}
    for name, (case_id, amount) in made.items():
        asyncio.run(worker.handle(ev.CaseEvent(ev.INVOICE_RECEIVED, case_id, {**INVOICE, "invoiceAmount": amount})))
        docs: list[Document] = []
        for container in ("cases", "effects", "checkpoints"):
            docs.extend(store.query(container, Query(partition=case_id)))
        found[name] = docs
    uninstall()
    return found


def copies(
    template: list[Document], case_id: str, *, effect_status: str | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The template's documents for ``case_id``: (container, body); ``effect_status``: the status its effects'
    entries on the case are given (``started``: the case has an open entry, as after a lost reply)."""
    out = []
    for doc in template:
        body = json.loads(json.dumps(doc.body).replace(f'"{doc.partition}"', f'"{case_id}"'))
        if doc.container == "cases" and effect_status is not None:
            body["effects"] = [{**entry, "status": effect_status} for entry in body.get("effects") or ()]
            body["openEffects"] = effect_status in ("started", "needs_reconciliation")
        out.append((doc.container, body))
    return out


def seed_plan(
    n: int, tpl: dict[str, list[Document]], stuck: int | None = None
) -> tuple[list[tuple[str, dict[str, Any]]], int]:
    """Every document of ``n`` cases (``stuck`` of them stuck; default ``STUCK_FRACTION``), and how many are
    stuck."""
    stuck = max(int(n * STUCK_FRACTION), 5) if stuck is None else stuck
    paused, started = int(stuck * 0.4), int(stuck * 0.4)
    docs: list[tuple[str, dict[str, Any]]] = []
    for i in range(n):
        case_id = f"S{i:07d}"
        if i < paused:
            docs.extend(copies(tpl["paused"], case_id))  # its checkpoint and its run's in-flight mark too
        elif i < paused + started:
            docs.extend(copies(tpl["finished"], case_id, effect_status="started"))
        elif i < stuck:
            for container, body in copies(tpl["finished"], case_id):
                if container == "cases":
                    body.update(status="open")  # a fact recorded, its decision never made
                docs.append((container, body))
        else:
            docs.extend(copies(tpl["finished"], case_id))
    return docs, stuck


def seed_sqlite(store: SqliteDocumentStore, docs: list[tuple[str, dict[str, Any]]]) -> None:
    """One transaction: the rows as ``create`` would write them (the store's own ``seq`` and clock)."""
    conn = sqlite3.connect(store.path)
    try:
        with conn:
            seqs = {
                c: conn.execute("SELECT coalesce(max(seq), 0) FROM documents WHERE container = ?", (c,)).fetchone()[0]
                for c in CONTAINERS
            }
            now = time.time()
            rows = []
            for container, body in docs:
                seqs[container] += 1
                seq = seqs[container]
                rows.append(
                    (container, partition_of(container, body), body["id"], json.dumps(body), str(seq), now, seq)
                )
            conn.executemany(
                "INSERT INTO documents (container, partition, id, body, etag, ts, seq) VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
    finally:
        conn.close()


def seed_cosmos(server: CosmosServer, database: str, docs: list[tuple[str, dict[str, Any]]]) -> None:
    """Through the test server's bulk route, each container's documents as creates would write them."""
    for container in CONTAINERS:
        mine = ((partition_of(container, body), body) for name, body in docs if name == container)
        server.seed(database, container, mine)


# --- measuring ----------------------------------------------------------------------------------------


def measure(what: str, counting: CountingStore, work: Callable[[], object]) -> Measure:
    counting.take_tally()
    before = sum(counting.documents_read.values())
    started = time.perf_counter()
    work()
    seconds = time.perf_counter() - started
    tally = counting.take_tally()
    by_method = {m: n for m, n in tally.by_method().items() if n}
    return Measure(what, seconds, tally.total(), sum(counting.documents_read.values()) - before, by_method)


Seeder = Callable[[list[tuple[str, dict[str, Any]]]], None]


@contextlib.contextmanager
def backend(name: str, tmp: Path) -> Iterator[tuple[DocumentStore, Seeder]]:
    """A fresh store of backend ``name`` and how to seed it directly."""
    if name == "sqlite":
        store = SqliteDocumentStore(tmp / "scale.sqlite")
        try:
            yield store, lambda docs: seed_sqlite(store, docs)
        finally:
            store.close()
        return
    from casekeeper.stores.cosmos import CosmosDocumentStore
    from shared.localhost.cosmos_server import start_cosmos_server

    warnings.filterwarnings("ignore", message="Unverified HTTPS request")
    with start_cosmos_server() as server:
        database = f"scale{int(time.time())}"
        # The test server's queries scan every document (see the module's docstring): past the SDK's default
        # read timeout at large sizes.
        cosmos = CosmosDocumentStore(server.endpoint, database, credential=server.key, read_timeout=1800)
        cosmos.ensure_containers()
        try:
            yield cosmos, lambda docs: seed_cosmos(server, database, docs)
        finally:
            cosmos.close()


def run_size(name: str, n: int, supplier_url: str, *, stuck: int | None = None) -> SizeResult:
    """Seed a fresh store of backend ``name`` with ``n`` cases and measure each view and a tick once."""
    with (
        tempfile.TemporaryDirectory(prefix="casekeeper-scale-") as tmp_dir,
        backend(name, Path(tmp_dir)) as (store, seed),
    ):
        tmp = Path(tmp_dir)
        tpl = templates(store, supplier_url)
        docs, stuck = seed_plan(n, tpl, stuck)
        started = time.perf_counter()
        seed(docs)
        result = SizeResult(name, n, stuck, time.perf_counter() - started)
        counting = CountingStore(store)
        settings = Settings.from_mapping(
            {
                "CASEKEEPER_STORE": "sqlite",
                "CASEKEEPER_SQLITE_PATH": str(tmp / "unused.sqlite"),
                "CASEKEEPER_QUEUE": "local",
                "CASEKEEPER_LOCAL_QUEUE_PATH": str(tmp / "queue.sqlite"),
                "SUPPLIER_PORTAL_URL": supplier_url,
                "WEBHOOK_SECRET": "bench",
            },
            receives_events=False,
        )
        svc = bootstrap.build(settings, store=counting, proposer=RulesProposer())
        try:
            graph = graph_hash_of(build_workflow, svc.ops.workflow)
            health = replace(svc.health, call_timeout=0.0)
            result.measures = [
                measure("ops page counts", counting, lambda: cases_by_status(counting)),
                measure("pending effects", counting, lambda: pending_view(counting, svc.ops.ledger, limit=PAGE_SHOWN)),
                measure("drain check", counting, lambda: check(counting, graph, ALLOWED_CHECKPOINT_TYPES)),
                measure("timer tick", counting, lambda: run_health_checks(health)),
            ]
        finally:
            uninstall()
            svc.close()
        return result


def render(results: list[SizeResult]) -> list[str]:
    head = f"{'backend':<8} {'cases':>7} {'stuck':>5}  {'what':<16} {'ms':>8} {'round trips':>11} {'docs read':>9}"
    lines = [f"{head}  by method"]
    for r in results:
        for m in r.measures:
            methods = ", ".join(f"{k} {v}" for k, v in sorted(m.by_method.items()))
            where = f"{r.backend:<8} {r.cases:>7} {r.stuck:>5}  {m.what:<16}"
            cost = f"{m.seconds * 1000:>8.1f} {m.round_trips:>11} {m.documents_read:>9}"
            lines.append(f"{where} {cost}  {methods}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000], help="SQLite store sizes")
    parser.add_argument("--cosmos-sizes", type=int, nargs="*", default=[1000, 10_000], help="Cosmos test server sizes")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    results: list[SizeResult] = []
    supplier = SupplierStub(port=0)
    supplier.start()
    try:
        for n in args.sizes:
            results.append(run_size("sqlite", n, supplier.url))
        for n in args.cosmos_sizes:
            results.append(run_size("cosmos", n, supplier.url))
    finally:
        supplier.stop()
    print("\n".join(render(results)))
    for r in results:
        print(f"seeded {r.cases} cases on {r.backend} in {r.seed_seconds:.1f}s")
    if args.json:
        Path(args.json).write_text(
            json.dumps([r.__dict__ | {"measures": [m.__dict__ for m in r.measures]} for r in results], indent=2)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
