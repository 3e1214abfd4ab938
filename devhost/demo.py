"""``casekeeper demo``: the breaks of docs/design.md#breaks that the guard covers, live.

What it does, in one process and in a few seconds:

- opens a **fresh** SQLite store (in a temporary directory, or ``--data DIR``: the demo then owns
  ``DIR/demo.sqlite`` and ``DIR/supplier.jsonl`` and recreates both on every run);
- starts a real :class:`~devhost.supplier_stub.SupplierStub` on a free loopback port; every guarded
  call goes through :class:`~shared.supplier.portal.SupplierPortal` over that socket;
- builds the guard as any user of the library does (``Guard(open_sqlite(...), call_timeout=...)``, the
  credit-note request declared on it with ``guard.register``) and runs every effect through its public
  API: ``guard.decide``, ``effect.run(decision, args)``, ``guard.commit``, ``guard.reconcile_effect``;
- drives five scenarios, each on its own case, and prints one table row per scenario:
  ``scenario | requests the supplier received | outcome``.

Every number in the table is measured: request counts come from the stub's request log (filtered by the
scenario's idempotency key), states from the case's effects (``guard.effects_of``) and the cases
themselves, commit counts from what ``run`` and ``guard.commit`` returned. Each scenario also checks its
invariant; a violation is printed and makes :func:`main` return 1. :func:`main` returns 0 when every
invariant held.

The guard's call timeout is :data:`DEMO_CALL_TIMEOUT` (2 s, the default is 120 s) so that the
unknown-outcome scenario can age past it while you watch; the output says so.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from casekeeper import (
    Case,
    Decision,
    Effect,
    EffectInFlight,
    EffectResult,
    EffectStatus,
    Guard,
    NeedsReconciliation,
    OutcomeUnknown,
    StaleDecision,
    effect_key,
    open_sqlite,
)
from devhost.supplier_stub import NOTES_PATH, Faults, SupplierStub
from shared.domain.credit import decide, position
from shared.domain.invoice import Action, InvoiceFacts, Rules
from shared.supplier.portal import SupplierPortal
from shared.workflow.actions import REQUEST_CREDIT_NOTE, CreditNoteCall

DEMO_CALL_TIMEOUT = 2.0
"""The guard's call timeout in the demo, in seconds (production default: 120 s)."""

# The portal must give up well inside the call timeout (see SupplierPortal): pool + connect + write +
# read is at most about 4 x this, which stays under DEMO_CALL_TIMEOUT.
_PORTAL_TIMEOUT = 0.45
# What of the call timeout must be left after the version gate for the call to be sent: what sending can
# take (the portal's pool, connect and write phases) plus a second, at most half the timeout, as the app
# sets it (shared.app.bootstrap.send_margin).
_SEND_MARGIN = min(3 * _PORTAL_TIMEOUT + 1.0, DEMO_CALL_TIMEOUT / 2)
# How long the stub holds its reply in the two-runs scenario, so the second run really finds the
# first one mid-call instead of after it.
_HOLD_SECONDS = 0.25
_BACKOFF_CAP = 0.05
_SETTLE_DEADLINE = 10.0
_COMMITTERS = 8
# A little margin past the in-flight window, for the store clock's resolution.
_CLOCK_MARGIN = 0.2

ACTION = REQUEST_CREDIT_NOTE
DECIDED = "credit_note_requested"
DB_NAME = "demo.sqlite"
SUPPLIER_LOG_NAME = "supplier.jsonl"

HEADER = """\
Casekeeper demo: what happens when an agent run is resumed, retried or run twice.

An agent workflow that calls a supplier can repeat that call when a superstep is replayed, when two
runs handle one case, or when it acts on facts that changed. Casekeeper's guard (its effect ledger and
versioned records) stops that. Each scenario below is one such break, on its own case, against a real
supplier stub over HTTP. "Supplier received" counts what the supplier's request log shows for that
case's idempotency key: POST = a credit note request, lookup = a GET by key."""


@dataclass
class ScenarioResult:
    """One table row. ``violations`` is empty when the scenario's invariant held."""

    number: int
    title: str
    posts: int | None  # None: the scenario crashed before it could count
    lookups: int
    outcome: list[str]
    violations: list[str] = field(default_factory=list)

    @property
    def received(self) -> str:
        if self.posts is None:
            return "? POST"
        text = f"{self.posts} POST"
        if self.lookups:
            text += f" + {self.lookups} lookup"
        return text


@dataclass(frozen=True)
class _Invoice:
    """One demo case and the facts it was opened with (the decision of every scenario is made on them)."""

    case_id: str
    facts: InvoiceFacts


class _Demo:
    """The wiring shared by the scenarios: one store, one guard with the credit-note request declared on
    it, one stub, one portal client."""

    def __init__(self, data_dir: Path) -> None:
        self.db_path = data_dir / DB_NAME
        self.log_path = data_dir / SUPPLIER_LOG_NAME
        # Fresh by contract: an old file's cases would collide, and a stub reloads notes from its old log.
        for stale in (self.db_path, Path(f"{self.db_path}-wal"), Path(f"{self.db_path}-shm"), self.log_path):
            stale.unlink(missing_ok=True)
        self.stub = SupplierStub(port=0, log_path=self.log_path).start()
        self.portal = SupplierPortal(self.stub.url, timeout=_PORTAL_TIMEOUT)
        self.rules = Rules()
        self.store = open_sqlite(self.db_path)
        self.guard = Guard(self.store, call_timeout=DEMO_CALL_TIMEOUT, send_margin=_SEND_MARGIN)
        # The guarded call, declared once: the key goes to the supplier as its Idempotency-Key; an unknown
        # outcome is looked up by that key, and what the lookup did not find is asked again with it.
        self.credit = self.guard.register(
            ACTION,
            self.request_credit_note,
            commit=DECIDED,
            lookup=self.portal.find_credit_note,
            retry_same_key=True,
            commit_data=lambda result: {"creditNoteId": result.get("creditNoteId")},
        )

    def close(self) -> None:
        self.portal.close()
        self.store.close()
        self.stub.stop()

    # --- helpers ------------------------------------------------------------------------------

    def new_case(self, number: int) -> _Invoice:
        """A new case at v1: an invoice of 1250.00 against a PO of 1000.00 (250.00 over-billed)."""
        facts = InvoiceFacts(
            f"INV-{1000 + number}", "SUP-ACME", f"PO-{1000 + number}", Decimal("1250.00"), Decimal("1000.00"), "EUR"
        )
        inv = _Invoice(f"demo-{number}", facts)
        self.guard.create(inv.case_id, facts.to_dict())
        return inv

    def request_credit_note(self, key: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """The guarded call: ask the supplier, over HTTP, for the credit note ``args`` describe."""
        return dict(CreditNoteCall.from_args(args).bind(self.portal)(key))

    def credit_note(self, inv: _Invoice) -> CreditNoteCall:
        """The request the app itself would decide on the case's first facts: the domain's rule
        (:func:`shared.domain.credit.decide`), not a second copy of it."""
        facts = inv.facts
        proposal = decide(facts, position(facts, ()), self.rules)
        if proposal.action is not Action.REQUEST_CREDIT_NOTE or proposal.amount is None:
            raise RuntimeError(f"the demo's invoice should ask for a credit note; the rule says {proposal}")
        return CreditNoteCall(inv.case_id, facts.invoice_id, facts.supplier_id, proposal.amount, facts.currency)

    def run(self, inv: _Invoice, decision: Decision | Mapping[str, Any]) -> EffectResult:
        """Run the credit-note request for ``decision`` (or its ``to_json()``, as a resumed run carries it)
        through the guard: at most one call per decision, and the status commit with it."""
        return self.credit.run(decision, self.credit_note(inv).args(), reason="credit note requested")

    def run_until_settled(self, inv: _Invoice, decision: Decision) -> tuple[EffectResult, int]:
        """What a well-behaved worker does: on ``EffectInFlight``, back off and re-read; never call again.
        Returns the result and how many times it backed off."""
        backoffs = 0
        give_up = time.monotonic() + _SETTLE_DEADLINE
        while True:
            try:
                return self.run(inv, decision), backoffs
            except EffectInFlight as exc:
                if time.monotonic() > give_up:
                    raise
                backoffs += 1
                time.sleep(min(exc.retry_after, _BACKOFF_CAP))

    def case(self, inv: _Invoice) -> Case:
        found = self.guard.get(inv.case_id)
        if found is None:
            raise AssertionError(f"no case {inv.case_id}")
        return found

    def supplier_requests(self, key: str) -> tuple[int, int]:
        """(POSTs, lookups) the stub recorded for ``key``: the supplier's own account, not ours."""
        records = [r for r in self.stub.requests if r["idempotencyKey"] == key and r["path"] == NOTES_PATH]
        posts = sum(1 for r in records if r["method"] == "POST")
        lookups = sum(1 for r in records if r["method"] == "GET")
        return posts, lookups

    def notes_for(self, key: str) -> list[dict[str, Any]]:
        return [n for n in self.stub.notes if n["idempotencyKey"] == key]

    def effect_or_none(self, inv: _Invoice, key: str) -> Effect | None:
        """The case's effect with ``key`` as the guard reads it, or ``None`` when none was claimed."""
        return next((e for e in self.guard.effects_of(self.case(inv)) if e.key == key), None)

    def effect(self, inv: _Invoice, key: str) -> Effect:
        found = self.effect_or_none(inv, key)
        if found is None:
            raise AssertionError(f"no effect {key} on {inv.case_id}")
        return found


class _Checks:
    """Collects invariant violations instead of stopping at the first: the table shows them all."""

    def __init__(self) -> None:
        self.violations: list[str] = []

    def expect(self, condition: bool, what: str) -> None:
        if not condition:
            self.violations.append(what)


# --- the scenarios ------------------------------------------------------------------------------


def replayed_step(demo: _Demo, number: int) -> ScenarioResult:
    """Break 1 (F6): the superstep that called the supplier is replayed on resume, same input."""
    inv = demo.new_case(number)
    key = effect_key(inv.case_id, ACTION, 1)
    check = _Checks()

    decision = demo.guard.decide(inv.case_id)
    first = demo.run(inv, decision)
    # The resume: the checkpoint predates the superstep, so it runs the same call on the decision it carried.
    second = demo.run(inv, decision.to_json())
    case = demo.case(inv)
    applied = case.transition_from(1)

    posts, lookups = demo.supplier_requests(key)
    first_committed = first.commit == "committed"
    check.expect(posts == 1, f"supplier received {posts} POSTs, expected 1")
    check.expect(not first.replayed and second.replayed, "second run should replay the recorded result")
    check.expect(first.result == second.result, "second run returned a different result")
    check.expect(first_committed and second.commit == "already", "status should commit exactly once")
    check.expect(applied is not None and applied.effect_key == key, "case history lacks the committed effect")
    check.expect(case.version == 2, f"case at v{case.version}, expected v2")
    how = "the recorded" if second.replayed else "a NEW call's"
    seen = {"already": "saw the status already applied", "committed": "COMMITTED AGAIN"}.get(
        second.commit, f"ended {second.commit}"
    )
    outcome = [
        f"run 1 called, got {first.result['creditNoteId']}"
        + (f", committed (v1 -> v{case.version});" if first_committed else ", did NOT commit;"),
        f"run 2 (the replay) got {how} {second.result['creditNoteId']}"
        + (", no second call;" if posts == 1 else f"; the supplier got {posts} POSTs;"),
        f"its commit {seen}.",
    ]
    return ScenarioResult(number, "replayed step (resume)", posts, lookups, outcome, check.violations)


def two_runs(demo: _Demo, number: int) -> ScenarioResult:
    """Break 2: two runs of one case (a duplicate webhook) act on the same decision at the same time."""
    inv = demo.new_case(number)
    key = effect_key(inv.case_id, ACTION, 1)
    check = _Checks()
    barrier = threading.Barrier(2)
    results: dict[int, tuple[EffectResult, int]] = {}
    errors: dict[int, Exception] = {}

    def worker(i: int) -> None:
        try:
            decision = demo.guard.decide(inv.case_id)  # each run decides, on the case as it finds it (v1)
            barrier.wait()
            results[i] = demo.run_until_settled(inv, decision)
        except Exception as exc:  # reported as a violation, not lost in a thread
            errors[i] = exc

    # Hold the supplier's reply so that the second run finds the first one mid-call.
    demo.stub.set_faults(Faults(hold_seconds=_HOLD_SECONDS))
    try:
        threads = [threading.Thread(target=worker, args=(i,), name=f"demo-run-{i}") for i in (1, 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        demo.stub.set_faults(Faults())

    posts, lookups = demo.supplier_requests(key)
    check.expect(posts == 1, f"supplier received {posts} POSTs, expected 1")
    for i, exc in sorted(errors.items()):
        check.expect(False, f"run {i} raised {type(exc).__name__}: {exc}")
    notes = {r[0].result["creditNoteId"] for r in results.values()}
    check.expect(len(results) == 2 and len(notes) == 1, f"the two runs saw different results: {sorted(notes)}")
    commits = sum(1 for r in results.values() if r[0].commit == "committed")
    check.expect(commits == 1, f"{commits} status commits, expected exactly 1")
    callers = [r for r in results.values() if not r[0].replayed]
    check.expect(len(callers) == 1, f"{len(callers)} runs called the supplier, expected 1")
    waiting = [r for r in results.values() if r[0].replayed]
    backoffs = waiting[0][1] if waiting else 0
    waited = f"backed off {backoffs}x on EffectInFlight," if backoffs else "found the effect already done,"
    outcome = [
        f"{'both runs got ' if len(notes) == 1 else 'the runs got '}{', '.join(sorted(notes)) or '-'}; "
        f"{len(callers)} of 2 called;",
        f"the other {waited} then read the recorded result;" if waiting else "neither replayed the recorded result;",
        f"{commits} of 2 status commits succeeded.",
    ]
    return ScenarioResult(number, "two runs of one case", posts, lookups, outcome, check.violations)


def stale_decision(demo: _Demo, number: int) -> ScenarioResult:
    """Break 5 (R4): decided on v1, then the PO was edited (v2) before the call."""
    inv = demo.new_case(number)
    key = effect_key(inv.case_id, ACTION, 1)
    check = _Checks()
    decision = demo.guard.decide(inv.case_id)
    edited = demo.guard.update(inv.case_id, 1, {"poAmount": "1200.00"}, reason="PO edited")
    check.expect(edited is not None, "the PO edit did not commit")

    refused: StaleDecision | None = None
    try:
        demo.run(inv, decision)
    except StaleDecision as exc:
        refused = exc
    claimed = demo.effect_or_none(inv, key)

    posts, lookups = demo.supplier_requests(key)
    check.expect(posts == 0, f"supplier received {posts} POSTs, expected 0")
    check.expect(refused is not None, "the call on a stale decision was not refused")
    # The claim is the version gate: on a moved case it is never written, so nothing is left open.
    check.expect(claimed is None, f"the refused decision left a claim ({claimed.status.value if claimed else ''})")
    current = refused.current_version if refused is not None else None
    refusal = f"StaleDecision (decided on v1, case at v{current})" if refused is not None else "NOT refused"
    state = "no claim was written" if claimed is None else f"a claim was left {claimed.status.value}"
    outcome = [
        f"{refusal}, " + ("nothing sent;" if posts == 0 else f"{posts} POST sent;"),
        f"{state}: nothing for",
        "reconciliation to retry later." if claimed is None else "reconciliation would misread it.",
    ]
    return ScenarioResult(number, "stale decision (PO edited)", posts, lookups, outcome, check.violations)


def unknown_outcome(demo: _Demo, number: int) -> ScenarioResult:
    """F3 (R3): the supplier created the note but answered 503; the outcome is unknown until looked up."""
    inv = demo.new_case(number)
    key = effect_key(inv.case_id, ACTION, 1)
    check = _Checks()
    steps: list[str] = []
    decision = demo.guard.decide(inv.case_id)

    demo.stub.set_faults(Faults(fail_after_create=1))
    try:
        demo.run(inv, decision)
        check.expect(False, "the 503 was not reported as an unknown outcome")
    except OutcomeUnknown as exc:
        post = next((r for r in demo.stub.requests if r["idempotencyKey"] == key and r["method"] == "POST"), {})
        created = f"supplier created {post.get('creditNoteId')}" if post.get("created") else "supplier created nothing"
        state = demo.effect(inv, key).status.value
        steps.append(f"{created}, answered {exc.status} -> effect stays {state};")
    finally:
        demo.stub.set_faults(Faults())

    # How long the claim stays in flight, by the store's clock, as the guard judges it.
    in_flight_for = 0.0
    try:
        demo.run(inv, decision)
        check.expect(False, "a re-run inside the call timeout was not refused as in flight")
    except EffectInFlight as exc:
        in_flight_for = exc.retry_after
        steps.append("re-run at once -> EffectInFlight;")

    time.sleep(in_flight_for + _CLOCK_MARGIN)
    try:
        demo.run(inv, decision)
        check.expect(False, "a re-run after the call timeout did not ask for reconciliation")
    except NeedsReconciliation:
        steps.append(f"re-run after the {DEMO_CALL_TIMEOUT:.0f} s call timeout -> NeedsReconciliation;")

    # Reconciliation (R3), the guard's own: never retry blindly; ask the supplier by the same key.
    recheck = demo.guard.reconcile_effect(inv.case_id, key)
    final = demo.effect(inv, key)
    found = final.result if recheck.outcome == "recorded" else None
    committed = recheck.committed
    if found is not None:
        steps.append(f"reconciler looked the key up: found {found.get('creditNoteId')};")
        steps.append("recorded done;" + (" case committed." if committed else " case NOT committed."))
    else:
        steps.append(f"reconciler: {recheck.outcome} ({recheck.detail}).")

    posts, lookups = demo.supplier_requests(key)
    case = demo.case(inv)
    check.expect(posts == 1, f"supplier received {posts} POSTs, expected 1")
    check.expect(len(demo.notes_for(key)) == 1, "the supplier should hold exactly one note for the key")
    check.expect(found is not None, "the lookup by key did not find the note the supplier created")
    check.expect(final.status is EffectStatus.DONE, f"the effect ended {final.status.value}, expected done")
    check.expect(committed and case.status == DECIDED, "the case status was not committed after reconciliation")
    return ScenarioResult(number, "unknown outcome (503 after create)", posts, lookups, _wrap(steps), check.violations)


def concurrent_commits(demo: _Demo, number: int) -> ScenarioResult:
    """R5: many writers commit a status on the same version; exactly one may win."""
    inv = demo.new_case(number)
    check = _Checks()
    barrier = threading.Barrier(_COMMITTERS)
    results: list[bool] = []
    errors: list[Exception] = []
    lock = threading.Lock()
    decision = demo.guard.decide(inv.case_id)

    def committer(i: int) -> None:
        try:
            barrier.wait()
            ok = demo.guard.commit(decision, f"decided-by-{i}", reason=f"committer {i}") is not None
        except Exception as exc:  # reported as a violation, not lost in a thread
            with lock:
                errors.append(exc)
            return
        with lock:
            results.append(ok)

    threads = [threading.Thread(target=committer, args=(i,), name=f"demo-commit-{i}") for i in range(_COMMITTERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    case = demo.case(inv)

    wins = results.count(True)
    for exc in errors:
        check.expect(False, f"a committer raised {type(exc).__name__}: {exc}")
    check.expect(wins == 1, f"{wins} of {_COMMITTERS} commits succeeded, expected exactly 1")
    check.expect(case.version == 2, f"case at v{case.version}, expected v2")
    outcome = [
        f"{wins} of {_COMMITTERS} commits succeeded, {results.count(False)} were told to re-read;",
        f"case at v{case.version} (status {case.status!r}).",
    ]
    return ScenarioResult(number, f"{_COMMITTERS} concurrent commits", 0, 0, outcome, check.violations)


SCENARIOS: tuple[Callable[[_Demo, int], ScenarioResult], ...] = (
    replayed_step,
    two_runs,
    stale_decision,
    unknown_outcome,
    concurrent_commits,
)


# --- output -------------------------------------------------------------------------------------


def _wrap(steps: list[str], width: int = 62) -> list[str]:
    """Steps joined into lines of at most ``width`` characters (a step is never split)."""
    lines: list[str] = []
    for step in steps:
        if lines and len(lines[-1]) + 1 + len(step) <= width:
            lines[-1] += " " + step
        else:
            lines.append(step)
    return lines


def render_table(results: list[ScenarioResult]) -> list[str]:
    """The table: ``# | scenario | supplier received | outcome``, a multi-line outcome on extra lines."""
    headers = ("#", "scenario", "supplier received", "outcome")
    rows: list[tuple[str, str, str, str]] = []
    for r in results:
        mark = "" if not r.violations else "  [VIOLATED]"
        lines = r.outcome or [""]
        rows.append((str(r.number), r.title, r.received, lines[0] + mark))
        rows.extend(("", "", "", more) for more in lines[1:])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]

    def line(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *(line(row) for row in rows)]


def summary(results: list[ScenarioResult]) -> str:
    held = sum(1 for r in results if not r.violations)
    posts = sum(r.posts or 0 for r in results)
    if held == len(results):
        return (
            f"All {len(results)} invariants held: the supplier received {posts} credit note requests in total, "
            "never two for one decision, and no case committed twice."
        )
    return f"{len(results) - held} of {len(results)} invariants VIOLATED (see above)."


@contextlib.contextmanager
def _data_dir(given: Path | None) -> Iterator[Path]:
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="casekeeper-demo-") as tmp:
        yield Path(tmp)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog or "casekeeper demo",
        description="Show, against a real supplier stub, how Casekeeper keeps retried and duplicated runs "
        "from acting twice.",
    )
    parser.add_argument(
        "--data",
        type=Path,
        metavar="DIR",
        help=f"keep the store and the supplier log in DIR ({DB_NAME}, {SUPPLIER_LOG_NAME}; recreated on "
        "every run). Default: a temporary directory, removed afterwards.",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Drive the failure modes against a local supplier and print what the supplier saw.

    Runs every scenario and prints the table. Returns 0 when every invariant held, 1 otherwise."""
    args = build_parser().parse_args(argv)
    print(HEADER)
    print()
    results: list[ScenarioResult] = []
    with _data_dir(args.data) as data_dir:
        demo = _Demo(data_dir)
        try:
            where = f"{demo.db_path}" + (" (kept)" if args.data is not None else " (temporary)")
            print(f"Store:    SQLite, fresh file {where}")
            print(f"Supplier: SupplierStub at {demo.stub.url} (real HTTP, request log {demo.log_path.name})")
            print("Guard:    casekeeper.Guard over that store, through its public API only")
            print(
                f"Call timeout: {DEMO_CALL_TIMEOUT:.0f} s for this demo (production default 120 s), so scenario 4 "
                "can outlive it."
            )
            print()
            for number, scenario in enumerate(SCENARIOS, start=1):
                results.append(_run_scenario(scenario, demo, number))
        finally:
            demo.close()
    for line in render_table(results):
        print(line)
    print()
    for r in results:
        for violation in r.violations:
            print(f"VIOLATION in scenario {r.number} ({r.title}): {violation}")
    print(summary(results))
    return 0 if all(not r.violations for r in results) else 1


def _run_scenario(scenario: Callable[[_Demo, int], ScenarioResult], demo: _Demo, number: int) -> ScenarioResult:
    """Run one scenario; an unexpected exception becomes a violated row rather than ending the demo."""
    try:
        return scenario(demo, number)
    except Exception as exc:
        title = scenario.__name__.replace("_", " ")
        return ScenarioResult(
            number, title, None, 0, [f"crashed: {type(exc).__name__}"], [f"{type(exc).__name__}: {exc}"]
        )
