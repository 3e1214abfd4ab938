"""The DBOS baseline of the end-to-end benchmark: the same unit of work as one Casekeeper case.

``python -m benchmarks.dbos_baseline --supplier URL --data DIR --n 200 [--threads 8] [--warmup 8]``, run
by :mod:`benchmarks.e2e` as a subprocess so that its CPU can be read from ``/proc`` like the host's.

One case is one DBOS workflow (durable: its start, each step's output and its end are rows in DBOS's
system database, SQLite here) with two steps:

1. ``request_credit_note``: ``POST /credit-notes`` to the supplier stub with an ``Idempotency-Key`` (the
   workflow id) and the body Casekeeper sends (``caseId``, ``invoiceId``, ``supplierId``, ``amount``,
   ``currency``), through an ``httpx.Client`` as Casekeeper's supplier portal does;
2. ``commit``: the case's status and credit note id written to a SQLite table (WAL, ``synchronous=FULL``,
   the pragmas of Casekeeper's SQLite store).

``threads`` client threads start the workflows with ``DBOS.start_workflow`` and do not wait for them, as a
webhook sender does not; DBOS runs at most ``threads`` of them at once (``max_executor_threads``), as the
local host handles ``maxConcurrentSessions`` = 8 sessions at once.

The protocol on stdin/stdout, one line each: this prints ``ready`` once DBOS is launched and the warm-up
workflows are done; on ``go`` it runs the measured workflows and prints one JSON object (``started``:
the epoch time of the first start; ``committed``: case id -> epoch time of its commit; ``errors``); on
``quit`` (or end of input) it exits. The parent reads this process's CPU around ``go``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

AMOUNT = "100.00"  # what Casekeeper requests for the benchmark's invoice (1100.00 against a PO of 1000.00)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dbos_baseline")
    parser.add_argument("--supplier", required=True, help="the supplier stub's URL")
    parser.add_argument("--data", type=Path, required=True, help="a fresh folder for the SQLite files")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=8)
    args = parser.parse_args(argv)

    from dbos import DBOS  # type: ignore[import-not-found, unused-ignore]  # requirements-bench.txt

    args.data.mkdir(parents=True, exist_ok=True)
    supplier = httpx.Client(base_url=args.supplier, timeout=10.0)
    table = _table(args.data / "app.sqlite")
    case_workflow = _register(DBOS, supplier, table)
    DBOS(
        config={
            "name": "casekeeper-bench",
            "system_database_url": f"sqlite:///{args.data / 'dbos.sqlite'}",
            "max_executor_threads": args.threads,
            "log_level": "WARNING",
        }
    )
    DBOS.launch()
    try:
        run_id = uuid.uuid4().hex[:6]
        warm = _run(DBOS, case_workflow, [f"DW{run_id}-{i:04d}" for i in range(args.warmup)], args.threads)
        if warm["errors"]:
            print(json.dumps(warm), flush=True)
            return 1
        print("ready", flush=True)
        for line in sys.stdin:
            command = line.strip()
            if command == "go":
                ids = [f"D{run_id}-{i:04d}" for i in range(args.n)]
                result = _run(DBOS, case_workflow, ids, args.threads)
                rows = table().execute("SELECT id, at FROM cases WHERE status = 'credit_requested'").fetchall()
                wanted = set(ids)
                result["committed"] = {case_id: at for case_id, at in rows if case_id in wanted}
                print(json.dumps(result), flush=True)
            elif command == "quit":
                break
    finally:
        DBOS.destroy()
        supplier.close()
    return 0


def _table(path: Path) -> Callable[[], sqlite3.Connection]:
    """This thread's connection to the app's own SQLite file (created with its ``cases`` table)."""
    local = threading.local()

    def connection() -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            local.conn = conn
        return conn

    connection().execute(
        "CREATE TABLE IF NOT EXISTS cases (id TEXT PRIMARY KEY, status TEXT, credit_note_id TEXT, at REAL)"
    )
    return connection


def _register(dbos: Any, supplier: httpx.Client, table: Callable[[], sqlite3.Connection]) -> Callable[[str], str]:
    """The case workflow and its two steps, registered with DBOS (before it is launched)."""

    @dbos.step()  # type: ignore[untyped-decorator]  # dbos is passed in as Any: it may not be installed
    def request_credit_note(case_id: str, key: str) -> str:
        body = {"caseId": case_id, "invoiceId": case_id, "supplierId": "SUP-1", "amount": AMOUNT, "currency": "EUR"}
        response = supplier.post("/credit-notes", headers={"Idempotency-Key": key}, json=body)
        response.raise_for_status()
        return str(response.json()["creditNoteId"])

    @dbos.step()  # type: ignore[untyped-decorator]
    def commit(case_id: str, credit_note_id: str) -> None:
        table().execute(
            "INSERT INTO cases (id, status, credit_note_id, at) VALUES (?, 'credit_requested', ?, ?) "
            "ON CONFLICT(id) DO UPDATE SET status = excluded.status, credit_note_id = excluded.credit_note_id",
            (case_id, credit_note_id, time.time()),
        )

    @dbos.workflow()  # type: ignore[untyped-decorator]
    def case_workflow(case_id: str) -> str:
        credit_note_id: str = request_credit_note(case_id, f"dbos:{dbos.workflow_id}")
        commit(case_id, credit_note_id)
        return credit_note_id

    workflow: Callable[[str], str] = case_workflow
    return workflow


def _run(dbos: Any, workflow: Callable[[str], str], ids: list[str], threads: int) -> dict[str, Any]:
    """Start every workflow from ``threads`` client threads, then wait for all of them."""
    handles: list[Any] = [None] * len(ids)
    errors: list[str] = []
    started = time.time()

    def client(first: int) -> None:
        for i in range(first, len(ids), threads):
            try:
                handles[i] = dbos.start_workflow(workflow, ids[i])
            except Exception as exc:  # reported, and the run counts as failed
                errors.append(f"start {ids[i]}: {type(exc).__name__}: {exc}")

    pool = [threading.Thread(target=client, args=(k,)) for k in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    for case_id, handle in zip(ids, handles, strict=True):
        if handle is None:
            continue
        try:
            handle.get_result()
        except Exception as exc:
            errors.append(f"{case_id}: {type(exc).__name__}: {exc}")
    return {"started": started, "errors": errors}


if __name__ == "__main__":
    sys.exit(main())
