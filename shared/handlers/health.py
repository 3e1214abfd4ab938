"""The timer (rules R3, R7): backstop sweeps of stuck work, then alerts. Each duty runs on its own.

Every tick runs these duties, in this order, each in its own ``try``: one that fails (the store is down
for its query, the dead-letter queue cannot be reached) is logged and reported, and the others still
run. The sweeps come first: they keep work moving, the alerts only tell about it. A document a duty
cannot read is skipped and recorded (one ``malformed_document`` alert per document and version), and
the duty carries on with the rest.

1. **Open entries**: every ``started`` effect older than the call timeout gets a re-check (rule R3). The
   change feed shows a case only when it changes; an entry on a case that stops changing would otherwise
   wait forever. The query returns only the cases with an open entry: the sweep's cost follows what is
   stuck, not what is done.
2. **Open cases** left ``open`` for longer than the call timeout: a fact was recorded and the decision
   that should follow never ran (a crash, or an error before its first checkpoint); the case is
   investigated again (idempotent at the same version).
3. **Alert delivery**: every recorded alert still owed its notification is notified (``shared.app.alerts``).
4. **Checkpoint failures** captured since the last tick: one alert each.
5. **Missing invoices**: a case that holds facts but no invoice (``awaiting_invoice``) for
   ``INVOICE_WAIT_SECONDS`` after its last fact raises one ``invoice_missing`` alert
   (docs/design.md#facts-before-their-case); a window behind a cursor, so each case costs one read when due.
6. **Lagging runs**: a case whose last workflow commit is not covered by its checkpoints (a case that holds
   none lags only when it waits for a person: a run that ends writes none there) alerts once per version.
   Cases are examined once, in a window that trails now by the lag; the cursor moves on even past a case
   that could not be examined.
7. **Dead letters**: one alert per message in the queue's dead-letter queue, all of them (read a page at a
   time).

The re-checks and investigations are scheduled into each case's session with a message id derived from
the case (or effect), its version (or attempt) and the hour, so a tick repeated within the hour does not
duplicate one that is still pending, and a lost one is sent again the next hour.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from casekeeper import RECONCILED_SUFFIX, Case, Document, DocumentStore, EffectStatus, Query
from casekeeper.capture import failures_since, mark_alerted
from casekeeper.cases import DEFAULT_CALL_TIMEOUT, CaseRepository, Ledger, entries_of
from casekeeper.checkpoints import CaseCheckpointStorage
from casekeeper.stores import CASES, decode_all
from shared.app.alerts import Alerter
from shared.domain import events as ev
from shared.domain.invoice import AWAITING_INVOICE, Status
from shared.handlers.case_events import schedule_recheck
from shared.handlers.sweep_pages import (
    CURSOR_KIND,
    DEFAULT_BUDGET_SECONDS,
    DEFAULT_PAGE,
    Budget,
    walk_pages,
)
from shared.messaging import DeadLetter, DeadLetterQueue, EventSender, derived_message_id
from shared.workflow.build import WORKFLOW_NAME
from shared.workflow.messages import ALLOWED_CHECKPOINT_TYPES, PENDING_APPROVAL

log = logging.getLogger("casekeeper.health")

DEFAULT_INVOICE_WAIT = 86400.0
"""``INVOICE_WAIT_SECONDS``' default: a day."""
INVOICE_CURSOR_ID = "invoice-missing"
"""The missing-invoice check's cursor (``health``, kind ``cursor``): the key of the last case it examined."""
CURSOR_ID = "checkpoint-health"
"""The lagging-runs check's cursor (``health``, kind ``cursor``): the key of the last case it examined."""
SWEEP_CURSORS = {
    "open entries": "sweep-open-entries",
    "open cases": "sweep-open-cases",
}
"""Each incident sweep's cursor (``health``, kind ``cursor``): where its pass stopped."""
__all__ = ["CURSOR_ID", "CURSOR_KIND", "HealthChecksFailed", "HealthDeps", "HealthReport", "run_health_checks"]
DEAD_LETTER_PAGE = 100
"""Dead letters read per peek; the duty pages through all of them."""
SUPERSTEPS_BEHIND = 2
"""Failed saves since the newest checkpoint that make a run count as lagging (rule R7)."""


@dataclass(frozen=True)
class HealthDeps:
    """What the timer takes."""

    store: DocumentStore
    cases: CaseRepository
    ledger: Ledger
    sender: EventSender
    alerts: Alerter
    dead_letters: DeadLetterQueue
    checkpoint_lag: float
    """``CHECKPOINT_LAG_SECONDS``: how far a run's newest checkpoint may trail its last commit."""
    open_case_grace: float
    """How long a case may stay ``open`` before its decision counts as lost (the call timeout: no run
    takes longer)."""
    call_timeout: float = DEFAULT_CALL_TIMEOUT
    """``CALL_TIMEOUT_SECONDS``: a ``started`` effect older than this is stuck."""
    invoice_wait: float = DEFAULT_INVOICE_WAIT
    """``INVOICE_WAIT_SECONDS``: how long a case may hold facts without its invoice before a person is told."""
    page_size: int = DEFAULT_PAGE
    """Documents per page of every walk; what one page finds is scheduled before the next is read."""
    duty_budget: float = DEFAULT_BUDGET_SECONDS
    """Seconds a paged duty may spend per tick; the next tick resumes from its cursor."""
    monotonic: Callable[[], float] = time.monotonic


@dataclass
class HealthReport:
    rechecks_scheduled: list[str] = field(default_factory=list)
    investigations_scheduled: list[str] = field(default_factory=list)
    alerts_notified: list[str] = field(default_factory=list)
    failures_alerted: list[str] = field(default_factory=list)
    lagging_cases: list[str] = field(default_factory=list)
    invoices_missing: list[str] = field(default_factory=list)
    dead_letters_alerted: list[str] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)
    failed_duties: dict[str, str] = field(default_factory=dict)


class HealthChecksFailed(Exception):
    """Raised after every duty ran, when some failed: the timer's run shows as failed, and the next tick
    tries again."""


class _TickClock:
    """The store's clock, read once per tick: on Cosmos DB a read of it is a write (``casekeeper.stores.cosmos``),
    and five duties each asked for it. A duty that runs later in the tick sees an earlier time, which only
    makes its cutoffs earlier (what is just past one is found by the next tick). A failed read is not kept:
    the next duty that asks reads again."""

    def __init__(self, store: DocumentStore) -> None:
        self._store = store
        self._now: float | None = None

    def now(self) -> float:
        if self._now is None:
            self._now = self._store.now()
        return self._now


def run_health_checks(deps: HealthDeps) -> HealthReport:
    report = HealthReport()
    bucket = f"sweep-{int(deps.cases.now() // 3600)}"
    clock = _TickClock(deps.store)
    duties: list[tuple[str, Callable[[], None]]] = [
        ("open entries", lambda: _sweep_open_entries(deps, report, bucket, clock)),
        ("open cases", lambda: _sweep_open_cases(deps, report, bucket, clock)),
        ("alert delivery", lambda: report.alerts_notified.extend(deps.alerts.deliver_pending())),
        ("checkpoint failures", lambda: _alert_checkpoint_failures(deps, report)),
        ("missing invoices", lambda: _alert_missing_invoices(deps, report, clock)),
        ("lagging runs", lambda: _alert_lagging_runs(deps, report, clock)),
        ("dead letters", lambda: _alert_dead_letters(deps, report)),
    ]
    for name, duty in duties:
        try:
            duty()
        except Exception as exc:
            log.exception("health check %r failed; the other duties still run", name)
            report.failed_duties[name] = f"{type(exc).__name__}: {exc}"
    log.info(
        "health: %d re-checks, %d investigations scheduled; %d alerts notified, %d checkpoint "
        "failures, %d lagging runs, %d missing invoices, %d dead letters alerted; %d malformed documents",
        len(report.rechecks_scheduled),
        len(report.investigations_scheduled),
        len(report.alerts_notified),
        len(report.failures_alerted),
        len(report.lagging_cases),
        len(report.invoices_missing),
        len(report.dead_letters_alerted),
        len(report.malformed),
    )
    if report.failed_duties:
        raise HealthChecksFailed("; ".join(f"{k}: {v}" for k, v in report.failed_duties.items()))
    return report


def _malformed(deps: HealthDeps, report: HealthReport) -> Callable[[Document, Exception], None]:
    def record(doc: Document, exc: Exception) -> None:
        report.malformed.append(f"{doc.container}/{doc.id}")
        message = f"document {doc.container}/{doc.id} cannot be read ({type(exc).__name__}: {exc}); skipped"
        fields = {"container": doc.container, "documentId": doc.id, "partition": doc.partition, "error": str(exc)}
        deps.alerts.raise_alert(
            "malformed_document", message, fields, dedupe_key=f"{doc.container}:{doc.id}:{doc.etag}"
        )

    return record


# --- sweeps ---------------------------------------------------------------------------------------


def _walk(deps: HealthDeps, duty: str, container: str, query: Query, handle: Callable[[list[Document]], None]) -> None:
    """One tick of an incident sweep: a pass over ``query``'s matches, a page at a time, within the budget."""
    budget = Budget(deps.duty_budget, deps.monotonic)
    walk_pages(
        deps.store,
        container,
        query,
        cursor_id=SWEEP_CURSORS[duty],
        handle=handle,
        budget=budget,
        passes=True,
        page=deps.page_size,
    )


def _sweep_open_entries(deps: HealthDeps, report: HealthReport, bucket: str, clock: _TickClock) -> None:
    """The backstop of the change feed on ``cases``: every case with an open or watched entry (indexed
    ``openEffects``), its ``started`` entries past the call timeout by their claim time, and its entries a
    person resolved ``failed`` that are still watched, past their first lookup's time (one lookup each per
    bucket; the re-check ends the watch when it is over). No ``_ts`` bound on the case: a later
    note moves the case's ``_ts`` but not the entry's time (``casekeeper.core.entries``)."""
    now = deps.cases.now()
    cutoff = clock.now() - deps.call_timeout

    def handle(docs: list[Document]) -> None:
        for case in decode_all(docs, Case.from_document, _malformed(deps, report)):
            for effect in entries_of(case):
                if (effect.status is EffectStatus.STARTED or effect.watching) and effect.ts < cutoff:
                    tag = f"{bucket}-watch" if effect.watching else bucket  # not the attempt's own re-check
                    schedule_recheck(deps.sender, effect.case_id, effect.key, effect.attempts, now, tag=tag)
                    report.rechecks_scheduled.append(effect.key)

    _walk(deps, "open entries", CASES, Query(equals={"openEffects": True}), handle)


def _sweep_open_cases(deps: HealthDeps, report: HealthReport, bucket: str, clock: _TickClock) -> None:
    cutoff = clock.now() - deps.open_case_grace

    def handle(docs: list[Document]) -> None:
        for case in decode_all(docs, Case.from_document, _malformed(deps, report)):
            event = ev.CaseEvent(ev.CASE_INVESTIGATE, case.id, {})
            deps.sender.send(event, message_id=derived_message_id("sweep-open", case.id, str(case.version), bucket))
            report.investigations_scheduled.append(case.id)

    _walk(deps, "open cases", CASES, Query(equals={"status": str(Status.OPEN)}, ts_before=cutoff), handle)


# --- alerts ---------------------------------------------------------------------------------------


def _alert_checkpoint_failures(deps: HealthDeps, report: HealthReport) -> None:
    for failure in failures_since(deps.store, None, alerted=False):
        fields = {
            "caseId": failure.case_id,
            "iteration": failure.iteration,
            "error": f"{failure.error_type}: {failure.error_message}",
            "lastGoodCheckpointId": failure.last_good_checkpoint_id,
            "failureId": failure.id,
        }
        message = (
            f"checkpoint save failed for case {failure.case_id} at iteration {failure.iteration}: "
            f"{failure.error_type}: {failure.error_message[:300]}"
        )
        deps.alerts.raise_alert("checkpoint_failure", message, fields, dedupe_key=failure.id)
        if mark_alerted(deps.store, failure):
            report.failures_alerted.append(failure.id)


def _alert_lagging_runs(deps: HealthDeps, report: HealthReport, clock: _TickClock) -> None:
    """Cases changed since the cursor, up to a window end that trails now by the lag, a page at a time
    within the budget (the cursor moves page by page: a tick that runs out resumes there). Only a case whose
    last transition a workflow run committed can lag; only those cost the checkpoint and failure queries.
    The window ends at a whole second of the store's clock, so no later write can land behind the cursor
    (Cosmos DB's ``_ts`` has whole seconds)."""
    lag = deps.checkpoint_lag
    until = float(math.floor(clock.now() - lag))

    def handle(docs: list[Document]) -> None:
        for case in decode_all(docs, Case.from_document, _malformed(deps, report)):
            try:
                behind = _lag(deps, case, lag)
            except Exception:  # one case that cannot be examined must not stop the window from moving on
                log.exception("lagging-run check of case %s failed; skipped", case.id, extra={"caseId": case.id})
                continue
            if behind is None:
                continue
            fields = {"caseId": case.id, "caseVersion": case.version, "status": case.status, "behind": behind}
            message = f"case {case.id}: its run's checkpoints lag its last commit (v{case.version}): {behind}"
            if deps.alerts.raise_alert("checkpoint_lag", message, fields, dedupe_key=f"{case.id}:v{case.version}"):
                report.lagging_cases.append(case.id)

    walk_pages(
        deps.store,
        CASES,
        Query(ts_before=until),
        cursor_id=CURSOR_ID,
        handle=handle,
        budget=Budget(deps.duty_budget, deps.monotonic),
        passes=False,
        page=deps.page_size,
    )


def _alert_missing_invoices(deps: HealthDeps, report: HealthReport, clock: _TickClock) -> None:
    """Cases ``awaiting_invoice`` whose last change is ``INVOICE_WAIT_SECONDS`` old: one ``invoice_missing``
    alert each. A window that trails now by the wait, behind a cursor, as the lagging-runs check walks: each
    case is read once when it becomes due (and again only if a new fact moved it), so the query costs what
    is due, not every case that waits. A case that receives another fact waits again from that fact."""
    until = float(math.floor(clock.now() - deps.invoice_wait))

    def handle(docs: list[Document]) -> None:
        for case in decode_all(docs, Case.from_document, _malformed(deps, report)):
            if case.status != AWAITING_INVOICE:
                continue
            waited = clock.now() - case.ts
            fields = {"caseId": case.id, "caseVersion": case.version, "waitedSeconds": round(waited)}
            fields["facts"] = case.facts
            message = (
                f"case {case.id} holds facts but no invoice.received has come for {waited / 3600:.1f}h "
                f"(INVOICE_WAIT_SECONDS={deps.invoice_wait:g}): check that the sender delivers the invoice, "
                "or that the case id of its facts is right"
            )
            if deps.alerts.raise_alert("invoice_missing", message, fields, dedupe_key=case.id):
                report.invoices_missing.append(case.id)

    walk_pages(
        deps.store,
        CASES,
        Query(equals={"status": str(AWAITING_INVOICE)}, ts_before=until),
        cursor_id=INVOICE_CURSOR_ID,
        handle=handle,
        budget=Budget(deps.duty_budget, deps.monotonic),
        passes=False,
        page=deps.page_size,
    )


def _lag(deps: HealthDeps, case: Case, lag: float) -> str | None:
    """How the case's newest checkpoint lags its last workflow commit, or ``None`` when it does not."""
    if not case.history:
        return None
    last = case.history[-1]
    # Only a decision a workflow run committed is followed by a checkpoint; fact changes, commits finished
    # by the reconciler and escalations to a person (by the reconciler, an operator or a run) are not.
    if last.facts_changed or last.escalation or (last.reason or "").endswith(RECONCILED_SUFFIX):
        return None
    newest = CaseCheckpointStorage(deps.store, case.id, ALLOWED_CHECKPOINT_TYPES).latest_record(WORKFLOW_NAME)
    if newest is None:
        # A run that ends writes no checkpoint on a case that holds none (nobody would resume it); only a run
        # paused for a person must have left one.
        return "no checkpoint was saved" if case.data.get(PENDING_APPROVAL) else None
    if newest.ts < case.ts - lag:
        return f"newest checkpoint {newest.checkpoint_id} is {case.ts - newest.ts:.0f}s older than the commit"
    failed = failures_since(deps.store, newest.ts - 1.0, case_id=case.id)
    if len(failed) >= SUPERSTEPS_BEHIND:
        return f"newest checkpoint {newest.checkpoint_id} is {len(failed)} supersteps behind (saves failed since)"
    return None


def _dead_letters(deps: HealthDeps) -> Iterator[DeadLetter]:
    """Every dead letter, a page at a time: an alert per letter however many there are (not only the oldest
    page's)."""
    after: int | None = None
    while True:
        page = deps.dead_letters.peek(limit=DEAD_LETTER_PAGE, after_sequence=after)
        yield from page
        if len(page) < DEAD_LETTER_PAGE or page[-1].sequence_number == after:
            return
        after = page[-1].sequence_number


def _alert_dead_letters(deps: HealthDeps, report: HealthReport) -> None:
    for letter in _dead_letters(deps):
        message = (
            f"event {letter.message_id} of case {letter.session_id} was dead-lettered after "
            f"{letter.delivery_count} deliveries ({letter.reason}): 'casekeeper events redrive "
            f"{letter.message_id}' puts it back once the cause is fixed"
        )
        fields = {
            "caseId": letter.session_id,
            "messageId": letter.message_id,
            "sequenceNumber": letter.sequence_number,
            "reason": letter.reason,
            "description": letter.description[:500],
        }
        dedupe = f"{letter.message_id}:{letter.sequence_number}"
        if deps.alerts.raise_alert("dead_lettered", message, fields, dedupe_key=dedupe):
            report.dead_letters_alerted.append(letter.message_id)
