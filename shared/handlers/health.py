"""The timer (rule R7): checkpoint health, and the backstop sweep of stuck effects.

Each tick:

1. **Checkpoint failures.** Every failure recorded by the capture (``shared.workflow.capture``) and not
   yet alerted becomes one alert (case, iteration, error); the failure is then marked alerted, so it
   alerts once, not once per tick.
2. **Lagging runs.** A case whose last workflow commit is not covered by its checkpoints (none was
   saved, the newest is older than the commit by more than ``CHECKPOINT_LAG_SECONDS``, or saves failed
   for several supersteps since it) has a run that a resume would replay from far back: alert once per
   case version. Cases are examined once, in a window that trails now by the lag, so a run still in
   progress is never flagged.
3. **Sweep.** ``started`` effects older than the call timeout get a re-check scheduled. The change
   feed shows a row only when it changes; a row that stops changing would otherwise wait forever.
   The re-check's message id is derived from the effect's key and attempt, so a re-check already
   pending is not duplicated. ``done`` effects of the last day whose commit never landed (a change
   feed batch skipped after its retries) get it finished.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from shared.bootstrap import Services
from shared.core.cases import CASES, Case
from shared.core.ledger import EffectStatus
from shared.core.ports import Query
from shared.core.reconcile import RECONCILED_SUFFIX
from shared.handlers.case_events import schedule_recheck
from shared.workflow.build import WORKFLOW_NAME
from shared.workflow.capture import failures_since, mark_alerted
from shared.workflow.checkpoints import CaseCheckpointStorage
from shared.workflow.messages import ALLOWED_CHECKPOINT_TYPES

log = logging.getLogger("casekeeper.health")

CURSOR_KIND = "cursor"
CURSOR_ID = "checkpoint-health"


@dataclass
class HealthReport:
    failures_alerted: list[str] = field(default_factory=list)
    lagging_cases: list[str] = field(default_factory=list)
    rechecks_scheduled: list[str] = field(default_factory=list)
    commits_finished: list[str] = field(default_factory=list)


def run_health_checks(svc: Services) -> HealthReport:
    report = HealthReport()
    _alert_checkpoint_failures(svc, report)
    _alert_lagging_runs(svc, report)
    _sweep_started_effects(svc, report)
    _sweep_uncommitted_done(svc, report)
    log.info(
        "checkpoint health: %d failures alerted, %d lagging runs, %d re-checks scheduled",
        len(report.failures_alerted),
        len(report.lagging_cases),
        len(report.rechecks_scheduled),
    )
    return report


def _alert_checkpoint_failures(svc: Services, report: HealthReport) -> None:
    for failure in failures_since(svc.store, None, alerted=False):
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
        svc.alerts.raise_alert("checkpoint_failure", message, fields, dedupe_key=failure.id)
        if mark_alerted(svc.store, failure):
            report.failures_alerted.append(failure.id)


def _alert_lagging_runs(svc: Services, report: HealthReport) -> None:
    lag = svc.settings.checkpoint_lag
    store_now = svc.store.now()
    cursor_doc = svc.store.read("health", CURSOR_KIND, CURSOR_ID)
    since = float(cursor_doc.body["casesTs"]) - 1.0 if cursor_doc is not None else None  # _ts: whole seconds
    until = store_now - lag
    for doc in svc.store.query(CASES, Query(ts_after=since, ts_before=until)):
        case = Case.from_document(doc)
        behind = _lag(svc, case, lag)
        if behind is None:
            continue
        fields = {"caseId": case.id, "caseVersion": case.version, "status": case.status, "behind": behind}
        message = f"case {case.id}: its run's checkpoints lag its last commit (v{case.version}): {behind}"
        if svc.alerts.raise_alert("checkpoint_lag", message, fields, dedupe_key=f"{case.id}:v{case.version}"):
            report.lagging_cases.append(case.id)
    svc.store.upsert("health", CURSOR_KIND, CURSOR_ID, {"id": CURSOR_ID, "kind": CURSOR_KIND, "casesTs": until})


SUPERSTEPS_BEHIND = 2
"""Failed saves since the newest checkpoint that make a run count as lagging (rule R7: "several")."""


def _lag(svc: Services, case: Case, lag: float) -> str | None:
    """How the case's newest checkpoint lags its last workflow commit, or ``None`` when it does not."""
    if not case.history:
        return None
    last = case.history[-1]
    # Only a commit made by a workflow run is followed by a checkpoint; fact changes and commits finished
    # by the reconciler are not.
    if last.facts_changed or (last.reason or "").endswith(RECONCILED_SUFFIX):
        return None
    newest = CaseCheckpointStorage(svc.store, case.id, ALLOWED_CHECKPOINT_TYPES).latest_record(WORKFLOW_NAME)
    if newest is None:
        return "no checkpoint was saved"
    if newest.ts < case.ts - lag:
        return f"newest checkpoint {newest.checkpoint_id} is {case.ts - newest.ts:.0f}s older than the commit"
    failed = [f for f in failures_since(svc.store, newest.ts - 1.0) if f.case_id == case.id]
    if len(failed) >= SUPERSTEPS_BEHIND:
        return f"newest checkpoint {newest.checkpoint_id} is {len(failed)} supersteps behind (saves failed since)"
    return None


DONE_LOOKBACK_SECONDS = 24 * 3600
"""How far back the sweep looks for done effects whose commit never landed (the change feed's backstop)."""


def _sweep_uncommitted_done(svc: Services, report: HealthReport) -> None:
    since = svc.store.now() - DONE_LOOKBACK_SECONDS
    for effect in svc.ledger.with_status_since(EffectStatus.DONE, since):
        if svc.reconciler.finish_commit(effect) in ("committed", "needs_review"):
            report.commits_finished.append(effect.key)


def _sweep_started_effects(svc: Services, report: HealthReport) -> None:
    now = time.time()
    # One sweep re-check per effect per hour: the broker's duplicate window (a day, in infra) would
    # otherwise swallow the sweep's copy of a re-check that was lost (dead-lettered) meanwhile.
    bucket = f"sweep-{int(now // 3600)}"
    for effect in svc.ledger.started_older_than(svc.ledger.call_timeout):
        schedule_recheck(svc, effect.case_id, effect.key, effect.attempts, now, tag=bucket)
        report.rechecks_scheduled.append(effect.key)
