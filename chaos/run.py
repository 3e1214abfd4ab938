"""``casekeeper chaos``: run the plan against real processes, settle, collect, check, report.

Phases: start (a fresh data folder, the stub, the hosts) -> inject (the driver's events, the faults, the
store outages and the kills, on their own threads, for ``--seconds``) -> settle (faults cleared, every host up, wait for
quiescence, bounded) -> collect evidence from outside -> check the invariants -> print the table,
write the JSON report. Exit 0 only when every invariant holds; 1 with violations; 2 when the run itself
could not be carried out.

``casekeeper chaos --workflow module:factory`` runs a user's own guarded workflow under kill -9 with real
processes instead (:mod:`casekeeper.check_processes`, which the guard ships); the options after it are that
module's.
"""

from __future__ import annotations

import argparse
import secrets
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from chaos.checks import check_all
from chaos.cluster import Cluster
from chaos.collect import case_views, operator, queue_state, settle
from chaos.config import ChaosConfig
from chaos.driver import Driver
from chaos.evidence import Evidence
from chaos.injector import Injector
from chaos.plan import Plan, make_plan
from chaos.processes import ProcessError
from chaos.report import counts, table, write_json

CASE_SHOWS = 20  # `casekeeper case show` for at most this many violating cases (a process each)


def build_parser() -> argparse.ArgumentParser:
    d = ChaosConfig()
    parser = argparse.ArgumentParser(
        prog="casekeeper chaos",
        description="Drive a seeded mix of events into local hosts while injecting supplier faults and kill -9, "
        "then check Casekeeper's invariants from the outside. Exits 0 only when they all hold.",
    )
    parser.add_argument("--cases", type=int, default=d.cases, help="cases in the plan (%(default)s)")
    parser.add_argument("--seconds", type=float, default=d.seconds, help="injection phase length (%(default)s)")
    parser.add_argument("--kills", type=int, default=d.kills, help="host kills (kill -9) (%(default)s)")
    parser.add_argument(
        "--outages", type=int, default=None, help="store outages, 0-3 (default: 2, or 1 when --seconds is under 100)"
    )
    parser.add_argument("--seed", type=int, default=None, help="the plan's seed (default: a new one, printed)")
    parser.add_argument("--hosts", type=int, choices=(1, 2), default=d.hosts, help="hosts on one store")
    parser.add_argument("--store", choices=("sqlite", "cosmos"), default=d.store)
    parser.add_argument(
        "--model",
        choices=("rules", "stub"),
        default=d.model,
        help="who proposes: the rules, or a local stand-in model through the real client (%(default)s)",
    )
    parser.add_argument("--report", type=Path, help="also write the JSON report here")
    parser.add_argument("--data", type=Path, default=Path(".casekeeper/chaos"), help="work folder (emptied first)")
    parser.add_argument("--app-dir", type=Path, default=d.app_dir, help="the build under test (default: this one)")
    parser.add_argument("--settle", type=float, default=d.settle_seconds, help="quiescence bound, seconds")
    parser.add_argument("--quiet", action="store_true", help="no live progress line")
    parser.add_argument(
        "--workflow",
        metavar="MODULE:FACTORY",
        help="your own guarded workflow under kill -9 instead (options: python -m casekeeper.check_processes -h)",
    )
    return parser


def check_workflow(argv: list[str]) -> int | None:
    """``--workflow module:factory``: the user's workflow, run by :mod:`casekeeper.check_processes` with the
    other options; ``None`` without ``--workflow``."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--workflow")
    known, rest = pre.parse_known_args(argv)
    if known.workflow is None:
        return None
    from casekeeper.check_processes import main as processes_main

    return processes_main([known.workflow, *rest])


def main(argv: list[str] | None = None) -> int:
    """Drive events through faults and kill -9, then check the invariants from outside."""
    checked = check_workflow(list(sys.argv[1:] if argv is None else argv))
    if checked is not None:
        return checked
    args = build_parser().parse_args(argv)
    try:
        config = ChaosConfig(
            cases=args.cases,
            seconds=args.seconds,
            kills=args.kills,
            outages=args.outages,
            seed=args.seed if args.seed is not None else secrets.randbelow(1_000_000),
            hosts=args.hosts,
            store=args.store,
            model=args.model,
            report=args.report,
            data=args.data.resolve(),
            app_dir=args.app_dir.resolve(),
            settle_seconds=args.settle,
            progress=not args.quiet,
        )
    except ValueError as exc:
        print(f"casekeeper chaos: {exc}", file=sys.stderr)
        return 2
    plan = make_plan(
        config.seed,
        cases=config.cases,
        seconds=config.seconds,
        kills=config.kills,
        hosts=config.hosts,
        outages=config.outages,
    )
    # The hosts run in their own process groups, out of reach of a signal to ours: a SIGTERM must end the
    # run through its cleanup (as Ctrl-C does), or they would outlive it.
    signal.signal(signal.SIGTERM, _interrupt)
    return run(config, plan)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(config: ChaosConfig, plan: Plan) -> int:
    began = time.time()
    print(f"casekeeper chaos: seed {config.seed}, work folder {config.data}", file=sys.stderr, flush=True)
    cluster = Cluster(config)
    progress = _Progress(config.progress)
    try:
        cluster.start()
        evidence, extra = _inject_settle_collect(config, plan, cluster, progress)
        violations = check_all(evidence)
        case_shows = {
            case_id: operator(cluster, "case", "show", case_id)
            for case_id in sorted({v.case_id for v in violations if v.case_id})[:CASE_SHOWS]
        }
    except ProcessError as exc:
        progress.done()
        print(f"casekeeper chaos: could not run: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        progress.done()
        print("casekeeper chaos: interrupted", file=sys.stderr)
        return 2
    finally:
        cluster.stop()
    progress.done()
    header = {
        "seed": config.seed,
        "store": config.store,
        "model": config.model,
        "hosts": config.hosts,
        "cases": config.cases,
        "seconds": config.seconds,
        "kills": config.kills,
        "outages": len(plan.outages),
        "appDir": str(config.app_dir),
        "elapsedSeconds": round(time.time() - began, 1),
    }
    summary = counts(evidence, plan.summary(), len(plan.kills))
    title = (
        f"casekeeper chaos: seed {config.seed}, {config.store}, {config.hosts} host{'s' if config.hosts > 1 else ''}, "
        f"model: {config.model}, "
        f"{config.cases} cases, {config.seconds:.0f}s of injection, {len(plan.kills)} kills, "
        f"{len(plan.outages)} store outages "
        f"(ran {header['elapsedSeconds']:.0f}s; reproduce with --seed {config.seed})"
    )
    print(table(title, summary, violations))
    extra["plan"] = plan.to_json()
    for path in {config.data / "report.json", *([config.report] if config.report else [])}:
        write_json(
            path,
            header=header,
            summary=summary,
            violations=violations,
            evidence=evidence,
            case_shows=case_shows,
            extra=extra,
        )
    print(f"\nreport: {config.report or config.data / 'report.json'}")
    return 1 if violations else 0


def _inject_settle_collect(
    config: ChaosConfig, plan: Plan, cluster: Cluster, progress: _Progress
) -> tuple[Evidence, dict[str, Any]]:
    stop = threading.Event()
    driver = Driver(plan, cluster)
    injector = Injector(plan, cluster, facts_accepted=lambda: driver.facts_accepted)
    t0 = time.monotonic()
    threads = injector.start(t0, stop)
    drive = threading.Thread(
        target=driver.run, args=(t0, stop), kwargs={"deadline": t0 + config.seconds + 15}, daemon=True
    )
    drive.start()
    try:
        while drive.is_alive() or any(t.is_alive() for t in threads):
            sent, accepted = driver.counts()
            progress.show(
                f"injecting {time.monotonic() - t0:4.0f}s/{config.seconds:.0f}s  events {accepted} accepted "
                f"({sent} requests)  kills {injector.kills_done}/{len(plan.kills)}  supplier "
                f"{cluster.journal.credit_note_posts()} credit-note requests  "
                f"{'STORE DOWN  ' if cluster.store_down else ''}faults {injector.current_faults or '-'}"
            )
            drive.join(0.5)
    except KeyboardInterrupt:
        stop.set()
        raise
    stop.set()
    driver.close()
    injector.clear_faults()
    case_ids = sorted({c.case_id for c in plan.cases})
    quiescence = settle(cluster, case_ids, config.settle_seconds, on_poll=progress.show)
    progress.show("collecting evidence")
    evidence = Evidence(
        sent=driver.sent,
        attempts=driver.attempts,
        supplier=cluster.journal.refresh(),
        cases=_with_operator_views(cluster, case_views(cluster, case_ids)),
        pending=operator(cluster, "effects", "pending"),
        alerts=list((operator(cluster, "alerts", "--limit", "100000") or {}).get("alerts") or []),
        alert_deliveries=cluster.alerts.received(),
        queue=_with_failure_hints(cluster, queue_state(cluster)),
        kill_windows=list(cluster.kill_windows),
        outages=list(cluster.outages),
        quiescence=quiescence,
        tolerance=config.tolerance,
        approval_threshold=config.approval_threshold,
    )
    extra: dict[str, Any] = {"faultLog": injector.fault_log, "injectorErrors": injector.errors}
    if cluster.model is not None:
        modes = [c["mode"] for c in cluster.model.calls()]
        extra["modelCalls"] = {mode: modes.count(mode) for mode in sorted(set(modes))}
    return evidence, extra


def _with_failure_hints(cluster: Cluster, queue: dict[str, Any]) -> dict[str, Any]:
    dead_letters = queue.get("deadLetters") or []
    hints = cluster.last_failures({str(d.get("messageId")) for d in dead_letters})
    for dead in dead_letters:
        dead["lastFailure"] = hints.get(str(dead.get("messageId")))
    return queue


def _with_operator_views(cluster: Cluster, views: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Ask the operator command for every case the API did not show: a case the API cannot serve (an id
    it cannot route, say) is still checked, and the API's failure is reported on its own."""
    for case_id, got in views.items():
        if got.get("status") != 200:
            shown = operator(cluster, "case", "show", case_id)
            if isinstance(shown, dict) and "case" in shown:
                got["operatorView"] = shown
    return views


class _Progress:
    """One line on stderr, rewritten in place (carriage return)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._width = 0

    def show(self, line: str) -> None:
        if not self.enabled:
            return
        line = line[:160]
        sys.stderr.write("\r" + line.ljust(self._width))
        sys.stderr.flush()
        self._width = len(line)

    def done(self) -> None:
        if self.enabled and self._width:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self._width = 0
