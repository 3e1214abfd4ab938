"""End to end: what a case costs on ``casekeeper dev``, against DBOS doing the same unit of work.

``python -m benchmarks.e2e [--n 200] [--rate 20] [--seconds 15] [--skip-dbos] [--backends sqlite,cosmos]``
(``make bench`` runs it after ``benchmarks.guarded_effect``). One *case* is one ``invoice.received``
webhook for an invoice over-billed by 100.00 (above the 5.00 tolerance, below the 1000.00 approval
threshold), which the rules answer with exactly one credit-note request to the supplier and one status
commit (``credit_requested``). Everything runs on this machine: one supplier stub process
(``casekeeper supplier-stub``) serves every section and both systems.

1. **Throughput.** ``--n`` cases sent from ``--threads`` client threads (signed ``POST /api/events``,
   one keep-alive connection each, as fast as the 202s come back) to a fresh ``casekeeper dev`` (its
   own temporary ``--data`` and port); then the same unit of work on DBOS
   (:mod:`benchmarks.dbos_baseline`: a durable workflow with an HTTP step to the same stub and a commit
   step into a SQLite table, started from as many client threads, as many running at once as the host
   handles sessions). The systems alternate, ``--rounds`` each, in the order A B B A ..., each round on
   a fresh process that first handles ``--warmup`` uncounted cases. Reported per system, median over
   rounds: cases/s = cases / (last commit - first send), by the commit times the systems recorded
   (the case history's ``at``; the DBOS table's ``at``), and CPU seconds per case of the process tree
   (``/proc/<pid>/stat``, children included) from just before the first send until the tree is idle
   again after the last supplier request (so the change feed's reaction to the last commit is in,
   the idle pollers' tail is not).
2. **Latency under steady load.** A fresh host gets ``--rate`` cases/s for ``--seconds`` on an
   open-loop schedule (case ``i`` is due at ``i / rate`` s whatever happened to the others): the 202's
   latency (send to answer, on the client), and from the 202 to the credit-note request's arrival at the
   supplier (the stub's record time, 1 ms resolution, same machine clock), p50 and p99.
3. **Store operations per case event**, in process (:mod:`benchmarks.store_ops`): every
   ``DocumentStore`` call of the webhook, the case worker and the reconciler's change feed, by
   container and method, with bytes read and written, on each of ``--backends``. Then (3b,
   :mod:`benchmarks.store_paths`, a few seconds) the same count for every path of the capacity model
   (within tolerance, over-billed, credit note, pause for a person, approval answer, ``po.updated``,
   idle timer tick), with each path's request units at the measured sizes.

Every case is checked in every section: the webhook answered 202, the supplier got exactly one
credit-note request for it (status 201), the case ended ``credit_requested`` with one ``done`` effect
whose key the request carried. Goals (below) are reported next to the measurements, never asserted.

Exit status: 0 when every section ran and every case checked out, whatever the goals say; 1 when a run
failed (a case never completed, a wrong number of supplier requests, a process that would not start,
DBOS missing without ``--skip-dbos``).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks import store_ops, store_paths
from benchmarks.guarded_effect import BACKENDS, backends_argument, non_negative_int, positive_int
from benchmarks.processes import (
    ROOT,
    SECRET,
    DevHost,
    OtherLoad,
    Supplier,
    cpu_seconds,
    parse_time,
    running_host,
    running_supplier,
    wait_until_idle,
)
from benchmarks.tables import table
from casekeeper.core.ports import CONTAINERS

GOAL_RATIO = 1.5
"""Casekeeper's cases/s at least this many times DBOS's."""
GOAL_OPS_PER_EVENT = 8
GOAL_P50_MS = 100.0
GOAL_P99_MS = 500.0
GOAL_ACCEPT_P99_MS = 50.0

DEFAULT_N = 200
DEFAULT_THREADS = 8
DEFAULT_ROUNDS = 2
DEFAULT_WARMUP = 8
DEFAULT_RATE = 20.0
DEFAULT_SECONDS = 15.0
DEFAULT_OPS_EVENTS = 20
PATH_EVENTS = 5
"""Counted steps per path in section 3b (the counts are the same for every step; a few seconds in all)."""
CREDIT_AMOUNT = "100.00"


class RunFailed(RuntimeError):
    """A section could not produce a number that means what it says (a case did not complete, ...)."""


# --- sending webhooks -------------------------------------------------------------------------------------


@dataclass
class Sent:
    """One webhook: when it was sent and answered (epoch seconds), its status, its latency (s)."""

    case_id: str
    sent_at: float
    answered_at: float
    status: int
    latency: float
    late: float = 0.0  # paced sends: how long after its due time it went out


class _Webhooks:
    """Signed ``POST /api/events`` over one keep-alive connection (one per client thread)."""

    def __init__(self, url: str) -> None:
        from urllib.parse import urlsplit

        from shared.handlers.ingress import DELIVERY_HEADER, SIGNATURE_HEADER, sign

        split = urlsplit(url)
        self._host, self._port = split.hostname or "127.0.0.1", split.port or 80
        self._sign, self._sig_header, self._delivery_header = sign, SIGNATURE_HEADER, DELIVERY_HEADER
        self._conn: http.client.HTTPConnection | None = None

    def send(self, case_id: str) -> Sent:
        body = json.dumps(store_ops.invoice_event(case_id)).encode()
        headers = {
            "Content-Type": "application/json",
            self._sig_header: self._sign(SECRET, body, int(time.time()), f"bench-{case_id}"),
            self._delivery_header: f"bench-{case_id}",
        }
        for attempt in (1, 2):  # a kept-alive connection the server closed meanwhile is reopened once
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=30)
            sent_at, started = time.time(), time.perf_counter()
            try:
                self._conn.request("POST", "/api/events", body=body, headers=headers)
                response = self._conn.getresponse()
                response.read()
            except (http.client.HTTPException, OSError):
                self._conn.close()
                self._conn = None
                if attempt == 2:
                    raise
                continue
            latency = time.perf_counter() - started
            return Sent(case_id, sent_at, sent_at + latency, response.status, latency)
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


def send_burst(url: str, case_ids: list[str], threads: int) -> list[Sent]:
    """Send every case from ``threads`` client threads, each as fast as its 202s come back."""
    results: list[Sent | None] = [None] * len(case_ids)
    errors: list[str] = []

    def client(first: int) -> None:
        hooks = _Webhooks(url)
        try:
            for i in range(first, len(case_ids), threads):
                try:
                    results[i] = hooks.send(case_ids[i])
                except OSError as exc:
                    errors.append(f"{case_ids[i]}: {exc}")
        finally:
            hooks.close()

    _run_threads(client, threads)
    if errors:
        raise RunFailed(f"{len(errors)} webhooks could not be sent, e.g. {errors[0]}")
    return [s for s in results if s is not None]


def send_paced(url: str, case_ids: list[str], rate: float, threads: int) -> list[Sent]:
    """Open loop: case ``i`` goes out at ``t0 + i / rate``, whenever the others are answered (a pool
    of ``threads`` senders takes the next due case)."""
    results: list[Sent | None] = [None] * len(case_ids)
    errors: list[str] = []
    next_index = iter(range(len(case_ids)))
    lock = threading.Lock()
    t0 = time.perf_counter() + 0.2

    def client(_: int) -> None:
        hooks = _Webhooks(url)
        try:
            while True:
                with lock:
                    i = next(next_index, None)
                if i is None:
                    return
                due = t0 + i / rate
                time.sleep(max(0.0, due - time.perf_counter()))
                late = max(0.0, time.perf_counter() - due)
                try:
                    sent = hooks.send(case_ids[i])
                except OSError as exc:
                    errors.append(f"{case_ids[i]}: {exc}")
                    continue
                sent.late = late
                results[i] = sent
        finally:
            hooks.close()

    _run_threads(client, threads)
    if errors:
        raise RunFailed(f"{len(errors)} webhooks could not be sent, e.g. {errors[0]}")
    return [s for s in results if s is not None]


def _run_threads(target: Callable[[int], None], count: int) -> None:
    pool = [threading.Thread(target=target, args=(k,), daemon=True) for k in range(count)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()


# --- checking cases -----------------------------------------------------------------------------------------


def check_casekeeper_cases(
    host: DevHost, supplier: Supplier, sent: list[Sent], *, timeout: float
) -> tuple[dict[str, float], dict[str, dict[str, Any]], list[str]]:
    """Wait for every sent case to commit and check it. Returns (commit time by case, the credit-note
    request by case, problems). Reads the host (``GET /api/cases/{id}``) only after the supplier saw
    every case, so the reads are not part of the load being measured."""
    problems = [f"{s.case_id}: webhook answered {s.status}, not 202" for s in sent if s.status != 202]
    ids = {s.case_id for s in sent if s.status == 202}
    posts = supplier.wait_for_posts(ids, timeout=timeout)
    by_case: dict[str, list[dict[str, Any]]] = {}
    for record in posts:
        by_case.setdefault(record["body"]["caseId"], []).append(record)
    committed: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=10.0) as client:
        for case_id in sorted(ids):
            view = host.case(client, case_id)
            while _status(view) != "credit_requested" and time.monotonic() < deadline:
                time.sleep(0.1)
                view = host.case(client, case_id)
            problems.extend(_case_problems(case_id, view, by_case.get(case_id, [])))
            at = _commit_time(view)
            if at is not None:
                committed[case_id] = at
    return committed, {c: r[0] for c, r in by_case.items() if len(r) == 1}, problems


def _status(view: dict[str, Any] | None) -> str | None:
    return None if view is None else str(view["case"]["status"])


def _commit_time(view: dict[str, Any] | None) -> float | None:
    for transition in (view or {}).get("history") or ():
        if transition["status"] == "credit_requested" and transition.get("effectKey"):
            return float(transition["at"])
    return None


def _case_problems(case_id: str, view: dict[str, Any] | None, posts: list[dict[str, Any]]) -> list[str]:
    if view is None:
        return [f"{case_id}: no such case"]
    problems = []
    if _status(view) != "credit_requested":
        problems.append(f"{case_id}: status {_status(view)}, not credit_requested")
    effects = view.get("effects") or []
    done = [e for e in effects if e["status"] == "done"]
    if len(effects) != 1 or len(done) != 1:
        problems.append(f"{case_id}: effects {[(e['key'], e['status']) for e in effects]}, not one done")
    if len(posts) != 1:
        problems.append(f"{case_id}: {len(posts)} credit-note requests at the supplier, not exactly 1")
    for post in posts:
        if post["status"] != 201 or post["body"].get("amount") != CREDIT_AMOUNT:
            problems.append(f"{case_id}: supplier answered {post['status']} for amount {post['body'].get('amount')}")
        if done and post["idempotencyKey"] != done[0]["key"]:
            problems.append(f"{case_id}: the request's key is not the done effect's")
    return problems


# --- 1. throughput ----------------------------------------------------------------------------------------------


@dataclass
class Round:
    """One system's burst: ``n`` cases, wall time first send -> last commit, host CPU seconds."""

    system: str
    round: int
    n: int
    wall: float
    cpu: float
    problems: list[str] = field(default_factory=list)
    other_load: float = 0.0  # cores used by processes outside the benchmark meanwhile

    @property
    def cases_per_s(self) -> float:
        return self.n / self.wall if self.wall > 0 else math.inf

    @property
    def cpu_ms_per_case(self) -> float:
        return 1000 * self.cpu / self.n


def casekeeper_round(supplier: Supplier, work: Path, index: int, *, n: int, threads: int, warmup: int) -> Round:
    """One burst on a fresh ``casekeeper dev``."""
    with running_host(work / f"ck-{index}", supplier.url) as host:
        run = f"R{index}T{int(time.time() * 1000) % 10**7}"
        if warmup:
            warm = send_burst(host.url, [f"W{run}-{i:04d}" for i in range(warmup)], threads)
            _, _, problems = check_casekeeper_cases(host, supplier, warm, timeout=60)
            if problems:
                raise RunFailed(f"casekeeper warm-up: {problems[:3]}")
            wait_until_idle(host.pid)
        ids = [f"C{run}-{i:04d}" for i in range(n)]
        load, cpu_before = OtherLoad(), cpu_seconds(host.pid)
        sent = send_burst(host.url, ids, threads)
        supplier.wait_for_posts(set(ids), timeout=max(60.0, n / 2))
        cpu_after, other = wait_until_idle(host.pid), load.cores()
        committed, _, problems = check_casekeeper_cases(host, supplier, sent, timeout=30)
        first_send = min(s.sent_at for s in sent)
        last_commit = max(committed.values(), default=first_send)
        return Round("casekeeper", index, n, last_commit - first_send, cpu_after - cpu_before, problems, other)


def dbos_python() -> str | None:
    """This interpreter, when it has ``dbos`` (``make bench`` installs requirements-bench.txt)."""
    probe = subprocess.run([sys.executable, "-c", "import dbos"], capture_output=True, check=False)
    return sys.executable if probe.returncode == 0 else None


def dbos_round(supplier: Supplier, work: Path, index: int, *, n: int, threads: int, warmup: int) -> Round:
    """One burst on a fresh DBOS process (:mod:`benchmarks.dbos_baseline`)."""
    data = work / f"dbos-{index}"
    command = [sys.executable, "-m", "benchmarks.dbos_baseline", "--supplier", supplier.url, "--data", str(data)]
    command += ["--n", str(n), "--threads", str(threads), "--warmup", str(warmup)]
    with (work / f"dbos-{index}.log").open("w") as log:
        proc = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            if proc.stdout.readline().strip() != "ready":
                raise RunFailed(f"DBOS baseline did not start: {(work / f'dbos-{index}.log').read_text()[-2000:]}")
            wait_until_idle(proc.pid)
            load, cpu_before = OtherLoad(), cpu_seconds(proc.pid)
            proc.stdin.write("go\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            cpu_after, other = cpu_seconds(proc.pid), load.cores()
            proc.stdin.write("quit\n")
            proc.stdin.flush()
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
    if not line:
        raise RunFailed(f"DBOS baseline died: {(work / f'dbos-{index}.log').read_text()[-2000:]}")
    result = json.loads(line)
    committed: dict[str, float] = result["committed"]
    problems = list(result["errors"])
    wanted = {f"{c}" for c in committed}
    if len(wanted) != n:
        problems.append(f"DBOS committed {len(wanted)} of {n} cases")
    posts = supplier.credit_note_posts(wanted)
    counts: dict[str, int] = {}
    for post in posts:
        counts[post["body"]["caseId"]] = counts.get(post["body"]["caseId"], 0) + 1
    problems += [f"DBOS {c}: {k} credit-note requests, not 1" for c, k in counts.items() if k != 1]
    problems += [f"DBOS {c}: no credit-note request" for c in wanted - set(counts)]
    wall = max(committed.values(), default=result["started"]) - result["started"]
    return Round("dbos", index, n, wall, cpu_after - cpu_before, problems, other)


@dataclass
class Throughput:
    rounds: list[Round]

    def of(self, system: str) -> list[Round]:
        return [r for r in self.rounds if r.system == system]

    def median(self, system: str, metric: Callable[[Round], float]) -> float | None:
        values = [metric(r) for r in self.of(system)]
        return statistics.median(values) if values else None

    def ratio(self) -> float | None:
        ck = self.median("casekeeper", lambda r: r.cases_per_s)
        db = self.median("dbos", lambda r: r.cases_per_s)
        return ck / db if ck is not None and db else None


def measure_throughput(
    supplier: Supplier, work: Path, *, n: int, threads: int, rounds: int, warmup: int, dbos: bool
) -> Throughput:
    systems = ["casekeeper", "dbos"] if dbos else ["casekeeper"]
    done: list[Round] = []
    for index in range(rounds):
        order = systems if index % 2 == 0 else systems[::-1]  # A B, B A, ...: drift hits both alike
        for system in order:
            run = casekeeper_round if system == "casekeeper" else dbos_round
            result = run(supplier, work, index + 1, n=n, threads=threads, warmup=warmup)
            _progress(
                f"  {system} round {index + 1}: {result.cases_per_s:.1f} cases/s, "
                f"{result.cpu_ms_per_case:.1f} ms CPU/case{'  PROBLEMS' if result.problems else ''}"
            )
            done.append(result)
    return Throughput(done)


# --- 2. latency ---------------------------------------------------------------------------------------------------


@dataclass
class Latency:
    rate: float
    seconds: float
    n: int
    accept_ms: list[float]
    to_supplier_ms: list[float]
    max_late_ms: float
    cpu_ms_per_case: float
    achieved_rate: float
    problems: list[str] = field(default_factory=list)
    other_load: float = 0.0


def measure_latency(supplier: Supplier, work: Path, *, rate: float, seconds: float, threads: int) -> Latency:
    n = max(1, round(rate * seconds))
    with running_host(work / "ck-latency", supplier.url) as host:
        run = f"L{int(time.time() * 1000) % 10**7}"
        warm = send_burst(host.url, [f"W{run}-{i:04d}" for i in range(4)], min(threads, 4))
        _, _, problems = check_casekeeper_cases(host, supplier, warm, timeout=60)
        if problems:
            raise RunFailed(f"latency warm-up: {problems[:3]}")
        wait_until_idle(host.pid)
        ids = [f"{run}-{i:04d}" for i in range(n)]
        load, cpu_before = OtherLoad(), cpu_seconds(host.pid)
        sent = send_paced(host.url, ids, rate, threads)
        supplier.wait_for_posts(set(ids), timeout=max(60.0, seconds * 2))
        cpu_after, other = wait_until_idle(host.pid), load.cores()
        _, posts, problems = check_casekeeper_cases(host, supplier, sent, timeout=30)
    # In the order the cases were due, so that the run's thirds can be told apart.
    to_supplier = [1000 * (parse_time(posts[s.case_id]["time"]) - s.answered_at) for s in sent if s.case_id in posts]
    span = max(s.sent_at for s in sent) - min(s.sent_at for s in sent)
    return Latency(
        rate=rate,
        seconds=seconds,
        n=n,
        accept_ms=[1000 * s.latency for s in sent],
        to_supplier_ms=to_supplier,
        max_late_ms=1000 * max(s.late for s in sent),
        cpu_ms_per_case=1000 * (cpu_after - cpu_before) / n,
        achieved_rate=(n - 1) / span if span > 0 else math.inf,
        problems=problems,
        other_load=other,
    )


def _thirds(values: list[float]) -> list[list[float]]:
    size = math.ceil(len(values) / 3)
    return [values[i : i + size] for i in range(0, len(values), size)] if values else []


def percentile(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least ``q`` of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)] if ordered else math.nan


# --- output --------------------------------------------------------------------------------------------------------


def _verdict(met: bool | None) -> str:
    return "n/a" if met is None else ("met" if met else "NOT met")


def render_throughput(result: Throughput) -> list[str]:
    rows = []
    for system in ("casekeeper", "dbos"):
        rounds = result.of(system)
        if not rounds:
            continue
        rate = result.median(system, lambda r: r.cases_per_s)
        cpu = result.median(system, lambda r: r.cpu_ms_per_case)
        per_round = ", ".join(f"{r.cases_per_s:.1f}" for r in rounds)
        cpu_rounds = ", ".join(f"{r.cpu_ms_per_case:.1f}" for r in rounds)
        other = ", ".join(f"{r.other_load:.2f}" for r in rounds)
        rows.append((system, f"{rate:.1f}", per_round, f"{cpu:.1f}", cpu_rounds, other))
    lines = table(
        (
            "system",
            "cases/s (median)",
            "cases/s by round",
            "CPU ms/case (median)",
            "CPU ms/case by round",
            "other load (cores) by round",
        ),
        rows,
        text=frozenset({0, 2, 4, 5}),
    )
    ratio = result.ratio()
    ck_cpu = result.median("casekeeper", lambda r: r.cpu_ms_per_case)
    db_cpu = result.median("dbos", lambda r: r.cpu_ms_per_case)
    if ratio is not None and ck_cpu is not None and db_cpu:
        lines.append("")
        lines.append(
            f"Casekeeper/DBOS: cases/s x{ratio:.2f} (goal >= {GOAL_RATIO:g}: {_verdict(ratio >= GOAL_RATIO)}); "
            f"CPU per case x{ck_cpu / db_cpu:.2f}"
        )
    return lines


def render_latency(result: Latency) -> list[str]:
    def row(name: str, values: list[float], p50_goal: float | None, p99_goal: float) -> tuple[str, ...]:
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        goals = (f"p50 < {p50_goal:g}, " if p50_goal is not None else "") + f"p99 < {p99_goal:g}"
        met = (p50_goal is None or p50 < p50_goal) and p99 < p99_goal
        return (name, f"{p50:.1f}", f"{p99:.1f}", f"{max(values, default=math.nan):.1f}", goals, _verdict(met))

    rows = [
        row("202 returned -> request at the supplier", result.to_supplier_ms, GOAL_P50_MS, GOAL_P99_MS),
        row("POST /api/events until its 202", result.accept_ms, None, GOAL_ACCEPT_P99_MS),
    ]
    lines = table(("latency (ms)", "p50", "p99", "max", "goal (ms)", "verdict"), rows, text=frozenset({0, 4, 5}))
    lines.append("")
    thirds = [percentile(part, 0.5) for part in _thirds(result.to_supplier_ms)]
    lines.append(
        "202 -> supplier p50 by third of the run (a host that keeps up stays flat): "
        + ", ".join(f"{p:.0f}" for p in thirds)
        + " ms"
    )
    lines.append(
        f"{result.n} cases at {result.achieved_rate:.1f}/s offered (schedule {result.rate:g}/s, sends at most "
        f"{result.max_late_ms:.0f} ms late); host CPU {result.cpu_ms_per_case:.1f} ms/case "
        f"({result.cpu_ms_per_case * result.rate / 10:.0f}% of one core at this rate); other load "
        f"{result.other_load:.2f} cores"
    )
    return lines


def render_ops(results: list[store_ops.OpsResult]) -> list[str]:
    containers = [*CONTAINERS, store_ops.CLOCK]
    rows = []
    for r in results:
        total = r.total()
        for container in containers:
            count = total.by_container()[container]
            if not count and container == store_ops.CLOCK:
                continue
            methods = ", ".join(
                f"{m} {total.calls[(container, m)] / r.events:g}"
                for m in store_ops.METHODS
                if total.calls[(container, m)]
            )
            rows.append(
                (
                    r.backend,
                    "now() (store clock)" if container == store_ops.CLOCK else container,
                    f"{count / r.events:g}",
                    methods or "-",
                    f"{total.bytes_read[container] / r.events:.0f}",
                    f"{total.bytes_written[container] / r.events:.0f}",
                )
            )
        phases = ", ".join(
            f"{p} {t.total() / r.events:g}" for p, t in r.by_phase.items() if r.change_feed or p != "reconciler"
        )
        rows.append(
            (
                r.backend,
                "all",
                f"{r.per_event():g}",
                phases,
                f"{total.bytes_read.total() / r.events:.0f}",
                f"{total.bytes_written.total() / r.events:.0f}",
            )
        )
    lines = table(
        ("backend", "container", "ops/event", "by method (or phase)", "bytes read", "bytes written"),
        rows,
        text=frozenset({0, 1, 3}),
    )
    lines.append("")
    for r in results:
        met = r.per_event() <= GOAL_OPS_PER_EVENT
        note = "" if r.change_feed else " (no change feed on the test server: the reconciler's share is not in it)"
        lines.append(
            f"{r.backend}: {r.per_event():g} store operations per case event over {r.events} events; "
            f"goal <= {GOAL_OPS_PER_EVENT}: {_verdict(met)}{note}"
        )
    return lines


def render_goals(throughput: Throughput | None, latency: Latency | None, ops: list[store_ops.OpsResult]) -> list[str]:
    rows: list[tuple[str, ...]] = []
    ratio = throughput.ratio() if throughput is not None else None
    rows.append(
        (
            f"cases/s >= {GOAL_RATIO:g} x DBOS",
            "not measured" if ratio is None else f"x{ratio:.2f}",
            _verdict(None if ratio is None else ratio >= GOAL_RATIO),
        )
    )
    for r in ops:
        rows.append(
            (
                f"store ops per case event <= {GOAL_OPS_PER_EVENT} ({r.backend})",
                f"{r.per_event():g}",
                _verdict(r.per_event() <= GOAL_OPS_PER_EVENT),
            )
        )
    if latency is not None:
        p50, p99 = percentile(latency.to_supplier_ms, 0.5), percentile(latency.to_supplier_ms, 0.99)
        accept = percentile(latency.accept_ms, 0.99)
        rows.append((f"steady load p50 < {GOAL_P50_MS:g} ms", f"{p50:.1f} ms", _verdict(p50 < GOAL_P50_MS)))
        rows.append((f"steady load p99 < {GOAL_P99_MS:g} ms", f"{p99:.1f} ms", _verdict(p99 < GOAL_P99_MS)))
        rows.append((f"202 p99 < {GOAL_ACCEPT_P99_MS:g} ms", f"{accept:.1f} ms", _verdict(accept < GOAL_ACCEPT_P99_MS)))
    return table(("goal", "measured", "verdict"), rows, text=frozenset({0, 2}))


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- the command ---------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.e2e",
        description="End-to-end throughput, latency and store operations per case, against DBOS.",
    )
    parser.add_argument("--n", type=positive_int, default=DEFAULT_N, help="cases per throughput round")
    parser.add_argument("--threads", type=positive_int, default=DEFAULT_THREADS, help="client threads")
    parser.add_argument("--rounds", type=positive_int, default=DEFAULT_ROUNDS, help="throughput rounds per system")
    parser.add_argument("--warmup", type=non_negative_int, default=DEFAULT_WARMUP, help="uncounted cases per round")
    parser.add_argument("--rate", type=_positive_float, default=DEFAULT_RATE, help="steady load, cases/s")
    parser.add_argument("--seconds", type=_positive_float, default=DEFAULT_SECONDS, help="steady load duration")
    parser.add_argument(
        "--ops-events", type=positive_int, default=DEFAULT_OPS_EVENTS, help="events counted per backend"
    )
    parser.add_argument("--skip-dbos", action="store_true", help="Casekeeper only (no DBOS baseline)")
    parser.add_argument(
        "--backends",
        type=backends_argument,
        default=list(BACKENDS),
        help="store-ops backends: sqlite,cosmos (default: both)",
    )
    parser.add_argument("--report", type=Path, help="also write every number as JSON to this file")
    parser.add_argument("--keep", type=Path, help="keep the data folders and logs here (default: a temporary folder)")
    return parser


@dataclass
class Results:
    throughput: Throughput | None = None
    latency: Latency | None = None
    ops: list[store_ops.OpsResult] = field(default_factory=list)
    paths: dict[str, dict[str, store_ops.OpsResult]] = field(default_factory=dict)
    """Per backend, per path of the capacity model (:mod:`benchmarks.store_paths`)."""
    failures: list[str] = field(default_factory=list)


def main(argv: list[str] | None = None) -> int:
    """Run every section and print the tables. See the module docstring for the exit status."""
    args = build_parser().parse_args(argv)
    started = time.monotonic()
    results = Results()
    use_dbos = not args.skip_dbos
    if use_dbos and dbos_python() is None:
        results.failures.append("DBOS is not installed here (make bench installs requirements-bench.txt)")
        use_dbos = False
    print("Casekeeper end-to-end benchmark: one case = one invoice.received webhook -> one credit-note request")
    print(
        "to the supplier stub -> one commit (credit_requested). Everything on this machine; the same stub "
        "process for every section and both systems."
    )
    print(
        f"Machine: {os.cpu_count()} cores. 'Other load': cores used meanwhile by processes outside this benchmark "
        "(anything above ~0.1 skews the numbers)."
    )
    print()
    with _workdir(args.keep) as work, running_supplier(work) as supplier:
        _measure(args, results, supplier, work, use_dbos=use_dbos)
    _print_results(args, results)
    print(f"({time.monotonic() - started:.0f} s)")
    if args.report is not None:
        args.report.write_text(json.dumps(_report(args, results), indent=2) + "\n")
    return 1 if results.failures else 0


def _measure(args: argparse.Namespace, results: Results, supplier: Supplier, work: Path, *, use_dbos: bool) -> None:
    _progress(f"1. throughput: {args.n} cases x {args.rounds} rounds per system")
    try:
        results.throughput = measure_throughput(
            supplier, work, n=args.n, threads=args.threads, rounds=args.rounds, warmup=args.warmup, dbos=use_dbos
        )
    except (RunFailed, RuntimeError, OSError) as exc:
        results.failures.append(f"throughput: {type(exc).__name__}: {exc}")
    _progress(f"2. latency: {args.rate:g} cases/s for {args.seconds:g} s")
    try:
        results.latency = measure_latency(supplier, work, rate=args.rate, seconds=args.seconds, threads=args.threads)
    except (RunFailed, RuntimeError, OSError) as exc:
        results.failures.append(f"latency: {type(exc).__name__}: {exc}")
    for backend in args.backends:
        _progress(f"3. store operations: {backend}")
        try:
            results.ops.append(store_ops.measure(backend, supplier, events=args.ops_events))
            results.paths[backend] = store_paths.measure_paths(backend, supplier, events=PATH_EVENTS)
        except Exception as exc:  # one backend failing (no node for cosmos) must not hide the others
            results.failures.append(f"store operations on {backend}: {type(exc).__name__}: {exc}")


def _print_results(args: argparse.Namespace, results: Results) -> None:
    sections: list[tuple[str, list[str]]] = []
    if results.throughput is not None:
        title = (
            f"1. Throughput: {args.n} cases per round from {args.threads} client threads, {args.rounds} rounds per "
            f"system alternating, {args.warmup} warm-up cases each; median. CPU: the process tree."
        )
        sections.append((title, render_throughput(results.throughput)))
        results.failures += [p for r in results.throughput.rounds for p in r.problems]
    if results.latency is not None:
        title = f"2. Latency under steady load: {args.rate:g} cases/s for {args.seconds:g} s, open loop, fresh host."
        sections.append((title, render_latency(results.latency)))
        results.failures += results.latency.problems
    if results.ops:
        title = (
            "3. Store operations per case event (invoice -> credit note), in process: DocumentStore calls of the "
            "webhook, the case worker and the effects change feed."
        )
        sections.append((title, render_ops(results.ops)))
        results.failures += [p for r in results.ops for p in r.problems]
    if results.paths:
        title = (
            f"3b. Store operations per path of the capacity model (docs/performance.md#capacity), per counted step, "
            f"{PATH_EVENTS} per path after 2 warm-up; RU from the published costs at the measured sizes."
        )
        sections.append((title, store_paths.render_paths(results.paths)))
        results.failures += [p for by_path in results.paths.values() for r in by_path.values() for p in r.problems]
    sections.append(("Goals (reported, not asserted):", render_goals(results.throughput, results.latency, results.ops)))
    for title, lines in sections:
        print(title)
        print()
        for line in lines:
            print(line)
        print()
    for failure in results.failures[:20]:
        print(f"FAILED: {failure}")
    if len(results.failures) > 20:
        print(f"FAILED: ... and {len(results.failures) - 20} more")


def _report(args: argparse.Namespace, results: Results) -> dict[str, Any]:
    throughput, latency, ops = results.throughput, results.latency, results.ops
    report: dict[str, Any] = {
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "failures": results.failures,
        "goals": {
            "ratio": GOAL_RATIO,
            "opsPerEvent": GOAL_OPS_PER_EVENT,
            "p50Ms": GOAL_P50_MS,
            "p99Ms": GOAL_P99_MS,
            "acceptP99Ms": GOAL_ACCEPT_P99_MS,
        },
    }
    if throughput is not None:
        report["throughput"] = {
            "rounds": [
                {**asdict(r), "casesPerS": r.cases_per_s, "cpuMsPerCase": r.cpu_ms_per_case} for r in throughput.rounds
            ],
            "ratio": throughput.ratio(),
        }
    if latency is not None:
        report["latency"] = {
            **{k: v for k, v in asdict(latency).items() if k not in ("accept_ms", "to_supplier_ms")},
            "cases": latency.n,
            "completed": len(latency.to_supplier_ms),
            "toSupplierP50Ms": percentile(latency.to_supplier_ms, 0.5),
            "toSupplierP99Ms": percentile(latency.to_supplier_ms, 0.99),
            "acceptP50Ms": percentile(latency.accept_ms, 0.5),
            "acceptP99Ms": percentile(latency.accept_ms, 0.99),
        }
    report["storeOps"] = [r.to_json() for r in ops]
    report["storeOpsByPath"] = {
        backend: {
            name: {**r.to_json(), "requestUnits": store_paths.path_row(name, r).ru} for name, r in by_path.items()
        }
        for backend, by_path in results.paths.items()
    }
    return report


@contextlib.contextmanager
def _workdir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="casekeeper-bench-e2e-") as tmp:
        yield Path(tmp)


def _positive_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError("must be a positive number")
    return value


if __name__ == "__main__":
    sys.exit(main())
