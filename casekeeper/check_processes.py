"""Your workflow under ``kill -9``, with real processes: what ``casekeeper chaos`` does for the invoice app.

``python -m casekeeper.check_processes examples.refund.check:world --processes 3 --seconds 20`` opens cases
with your fact source, starts worker processes that each build your workflow from your factory on one SQLite
file (the store) and one folder (your stand-ins' files), and lets them deliver runs and run the reconciler
while the parent changes facts, answers the approvals it sees waiting, and ends workers with ``SIGKILL`` at
random moments (a worker also ends itself with ``os._exit`` at a random failure point F1-F6 now and then) and
starts them again. Then it stops them all, lets time pass the call timeout, reconciles and runs every case
until nothing moves, and judges the invariants of :mod:`casekeeper.check` (``once``, ``settled`` and yours;
``fresh`` needs the deterministic checker's view of each call) from your stand-in's journal and the cases.

Unlike :mod:`casekeeper.check` this runs on real time and real processes: a seed fixes what each process
tries, not when the kernel runs it, so a finding is reproduced by running again, not by its seed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casekeeper.approvals import PENDING, ApprovalRequest
from casekeeper.cases import Case, Effect
from casekeeper.check import Env, Factory, View, Violation, Workflow, judge, load
from casekeeper.clock import SystemClock
from casekeeper.guard import Guard
from casekeeper.stores import open_sqlite

CALL_TIMEOUT = 1.0
"""The guard's call timeout here, in real seconds: short, so that the quiescent point comes soon."""
CASES = 4
DIE_AT_A_POINT = 0.03
"""How often a worker ends itself at a failure point it reaches."""
ALERTS = "alerts.jsonl"
STOP = "stop"

__all__ = ["CALL_TIMEOUT", "Chaos", "main", "run_processes"]


@dataclass
class Chaos:
    """What a run under kill -9 found: the ``violations``, and how much happened (acts of the downstream, the
    cases' statuses, processes killed or ended at a failure point, alerts raised)."""

    violations: list[Violation] = field(default_factory=list)
    acts: int = 0
    statuses: dict[str, str] = field(default_factory=dict)
    kills: int = 0
    alerts: int = 0

    def __str__(self) -> str:
        statuses = ", ".join(sorted(self.statuses.values()))
        return f"{self.acts} acts of the downstream, {self.kills} processes killed, {self.alerts} alerts; {statuses}"


class _FileHooks:
    """The guard's ``alert`` and ``on_escalate`` of every process, appended to one file the parent reads."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _write(self, entry: Mapping[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as file:
            file.write(json.dumps(entry, default=str) + "\n")

    def alert(self, alert_kind: str, message: str, fields: Mapping[str, Any], *, dedupe_key: str) -> None:
        self._write({"kind": alert_kind, "message": message, "fields": dict(fields)})

    def escalate(self, message: str, fields: dict[str, Any]) -> None:
        self._write({"kind": "escalation", "message": message, "fields": dict(fields)})


def _env(directory: Path, probe: Any) -> Env:
    hooks = _FileHooks(directory / ALERTS)
    options = {
        "call_timeout": CALL_TIMEOUT,
        "probe": probe,
        "alert": hooks.alert,
        "on_escalate": hooks.escalate,
    }
    return Env(directory, open_sqlite(directory / "store.sqlite"), SystemClock(), options)


def _build(factory: Factory, env: Env) -> Workflow:
    workflow = factory(env)
    if not isinstance(workflow, Workflow):
        raise TypeError(f"the factory returned {type(workflow).__name__}, not a casekeeper.check.Workflow")
    return workflow


def worker(target: str, directory: Path, index: int, seed: int) -> int:
    """One worker process: runs and reconciler sweeps over the cases until the parent says stop."""
    rng = random.Random(seed * 1000 + index)  # noqa: S311  # seeded on purpose: what each process tries

    def probe(point: str) -> None:
        if rng.random() < DIE_AT_A_POINT:
            os._exit(9)  # as a killed process stops: nothing after this point runs

    workflow = _build(load(target), _env(directory, probe))
    while not (directory / STOP).exists():
        cases = json.loads((directory / "cases.json").read_text())  # the parent opens more as it goes
        try:
            if rng.random() < 0.15:
                workflow.guard.reconcile()
            else:
                workflow.facts.run(rng.choice(cases))
        except Exception as exc:  # the host's to retry; the parent's quiescent point delivers again
            logging.getLogger("casekeeper.check").info("worker %d: %r", index, exc)
    return 0


def _start(target: str, directory: Path, index: int, seed: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), *sys.path])}
    command = [sys.executable, "-m", "casekeeper.check_processes", "--worker", target, str(directory), str(index)]
    return subprocess.Popen(
        [*command, str(seed)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=Path.cwd()
    )


def _pending(reader: Guard, case_id: str) -> ApprovalRequest | None:
    """The approval request waiting on the case, where the guard's ``ask`` keeps it (see
    :meth:`casekeeper.check.World._see_requests`)."""
    case = reader.get(case_id)
    pending = case.data.get(PENDING) if case is not None else None
    return ApprovalRequest.from_json(case_id, pending) if pending else None


class _Parent:
    """The parent: it opens cases, changes facts, answers approvals, and kills and restarts the workers."""

    def __init__(self, target: str, directory: Path, processes: int, seed: int) -> None:
        self.target, self.directory, self.processes, self.seed = target, directory, processes, seed
        self.rng = random.Random(seed)  # noqa: S311  # seeded on purpose: what the parent does
        self.env = _env(directory, lambda point: None)
        self.workflow = _build(load(target), self.env)
        self.reader = Guard(self.env.store, call_timeout=CALL_TIMEOUT)
        self.cases: list[str] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        self.kills = 0

    def open_one(self) -> None:
        case_id = f"kill{self.seed}-r{len(self.cases) + 1}"
        self.workflow.facts.open(case_id, self.rng.randrange(1_000_000))
        self.cases.append(case_id)
        written = self.directory / "cases.json.new"
        written.write_text(json.dumps(self.cases))
        written.replace(self.directory / "cases.json")  # whole, never half written

    def restart(self, index: int) -> None:
        self.kills += 1
        self.workers[index] = _start(self.target, self.directory, index + self.processes * self.kills, self.seed)

    def act(self) -> None:
        """One of: a new case, a worker killed (SIGKILL) and restarted, facts changed, approvals answered."""
        what, cases, workflow = self.rng.random(), self.cases, self.workflow
        if what < 0.2:
            self.open_one()
        elif what < 0.45:
            index = self.rng.randrange(self.processes)
            self.workers[index].send_signal(signal.SIGKILL)
            self.workers[index].wait()
            self.restart(index)
        elif what < 0.7:
            _quietly(lambda: workflow.facts.change(self.rng.choice(cases), self.rng.randrange(1_000_000)))
        else:
            for case_id in cases:
                request = _pending(self.reader, case_id)
                if request is not None:
                    approve = self.rng.random() < 0.8
                    _quietly(lambda r=request, a=approve: workflow.facts.answer(r, a, "chaos"))
        for index, process in enumerate(self.workers):
            if process.poll() is not None:  # it ended itself at a failure point: the host starts another
                self.restart(index)

    def stop(self) -> None:
        (self.directory / STOP).touch()
        for process in self.workers:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def close(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                process.kill()
                process.wait()
        self.env.store.close()


def run_processes(target: str, *, processes: int = 3, seconds: float = 20.0, seed: int = 0) -> Chaos:
    """Run the workflow ``target`` names (``module:factory``) under kill -9 for ``seconds``."""
    directory = Path(tempfile.mkdtemp(prefix="casekeeper-kill-"))
    parent = _Parent(target, directory, processes, seed)
    try:
        for _ in range(CASES):
            parent.open_one()
        parent.workers = [_start(target, directory, i, seed) for i in range(processes)]
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(parent.rng.uniform(0.05, 0.5))
            parent.act()
        parent.stop()
        chaos = _settle_and_judge(parent.workflow, parent.reader, parent.cases, directory)
        chaos.kills = parent.kills
        return chaos
    finally:
        parent.close()
        shutil.rmtree(directory, ignore_errors=True)


def _quietly(action: Any) -> None:
    try:
        action()
    except Exception as exc:
        logging.getLogger("casekeeper.check").info("chaos: %r", exc)


def _settle_and_judge(workflow: Workflow, reader: Guard, cases: Sequence[str], directory: Path) -> Chaos:
    """Time past the call timeout, the reconciler and every case's run, until nothing moves; then judge."""
    last: object = None
    for _ in range(8):
        time.sleep(CALL_TIMEOUT + 0.2)
        _quietly(workflow.guard.reconcile)
        for case_id in cases:
            _quietly(lambda r=case_id: workflow.facts.run(r))
        _quietly(workflow.guard.reconcile)
        now = [(r.id, r.version, r.status) for r in (reader.get(i) for i in cases) if r is not None]
        if now == last:
            break
        last = now
    found: dict[str, Case] = {}
    effects: dict[str, tuple[Effect, ...]] = {}
    for case_id in cases:
        case = reader.get(case_id)
        if case is not None:
            found[case_id] = case
            effects[case_id] = tuple(reader.effects_of(case))
    alerts_file = directory / ALERTS
    lines = alerts_file.read_text(encoding="utf-8").splitlines() if alerts_file.exists() else []
    alerts = tuple(json.loads(line) for line in lines if line.strip())
    escalated = {str(a["fields"].get("effectKey")) for a in alerts if a["kind"] == "escalation"}
    view = View(found, effects, tuple(dict(a) for a in workflow.journal()), alerts, quiescent=True)
    found_now = judge(view, workflow.invariants, escalated=escalated)
    return Chaos(found_now, len(view.journal), {i: r.status for i, r in found.items()}, 0, len(alerts))


def main(argv: Sequence[str] | None = None) -> int:
    """Run a workflow under kill -9 with real processes; exit 1 on a violation."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--worker"]:
        target, directory, index, seed = args[1:5]
        logging.disable(logging.CRITICAL)
        return worker(target, Path(directory), int(index), int(seed))
    parser = argparse.ArgumentParser(prog="python -m casekeeper.check_processes", description=main.__doc__)
    parser.add_argument("workflow", help="your factory, module:name (e.g. examples.refund.check:world)")
    parser.add_argument("--processes", type=int, default=3, help="worker processes (default 3)")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the chaos lasts (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="what the processes try (default 0)")
    parsed = parser.parse_args(args)
    logging.disable(logging.CRITICAL)
    started = time.monotonic()
    chaos = run_processes(parsed.workflow, processes=parsed.processes, seconds=parsed.seconds, seed=parsed.seed)
    for violation in chaos.violations:
        print(violation)
    summary = "no violation" if not chaos.violations else f"{len(chaos.violations)} violations"
    print(f"{summary}: {parsed.processes} processes under kill -9 for {time.monotonic() - started:.1f}s; {chaos}")
    return 1 if chaos.violations else 0


if __name__ == "__main__":
    import importlib

    sys.exit(importlib.import_module("casekeeper.check_processes").main())
