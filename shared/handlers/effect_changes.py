"""The reconciler: reacts to changes of the effect ledger (Cosmos DB change feed on ``effects``).

- a ``done`` effect whose case does not show the commit: the commit is retried (F5);
- a ``started`` effect: a re-check is scheduled into the case's session for when its call timeout
  expires (its start time by the store's clock, plus a margin); the re-check applies rule R3.

Both are idempotent, so a batch delivered twice (the feed is at-least-once) does no harm: the
commit is conditional, and a re-check's message id is derived from the effect's key and attempt,
so the broker drops the second copy.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from casekeeper import Document, Effect, EffectStatus, Guard
from shared.app.telemetry import Telemetry
from shared.handlers.case_events import schedule_recheck
from shared.messaging import EventSender

log = logging.getLogger("casekeeper.reconciler")

RECHECK_MARGIN_SECONDS = 5.0


@dataclass(frozen=True)
class EffectChangeDeps:
    """What the reconciler's trigger takes."""

    guard: Guard
    sender: EventSender
    telemetry: Telemetry


@dataclass
class ChangeSummary:
    commits_finished: list[str] = field(default_factory=list)
    rechecks_scheduled: list[str] = field(default_factory=list)
    ignored: int = 0


def effect_from_change(raw: Mapping[str, Any]) -> Effect | None:
    """An ``Effect`` from a change-feed document (body plus Cosmos system fields), or None if not one."""
    if raw.get("kind") != "effect" or "caseId" not in raw or "id" not in raw:
        return None
    body = {k: v for k, v in raw.items() if not k.startswith("_")}
    doc = Document(
        "effects", str(raw["caseId"]), str(raw["id"]), body, str(raw.get("_etag", "")), float(raw.get("_ts", 0))
    )
    return Effect.from_document(doc)


def handle_effect_changes(deps: EffectChangeDeps, changes: Iterable[Mapping[str, Any]]) -> ChangeSummary:
    """Handle a batch. One document's failure does not stop the others; the first failure is raised at
    the end, so the trigger's retry redelivers the batch (everything here is safe to repeat)."""
    summary = ChangeSummary()
    failures: list[Exception] = []
    for raw in changes:
        try:
            _handle_one(deps, raw, summary)
        except Exception as exc:
            log.exception("reconciler: change of effect %s failed", raw.get("id"), extra={"effectKey": raw.get("id")})
            failures.append(exc)
    if summary.commits_finished or summary.rechecks_scheduled:
        log.info(
            "reconciler: %d commits finished, %d re-checks scheduled",
            len(summary.commits_finished),
            len(summary.rechecks_scheduled),
        )
    if failures:
        raise failures[0]
    return summary


def _handle_one(deps: EffectChangeDeps, raw: Mapping[str, Any], summary: ChangeSummary) -> None:
    effect = effect_from_change(raw)
    if effect is None:
        summary.ignored += 1
    elif effect.status is EffectStatus.DONE:
        finished = deps.guard.finish_commit(effect)
        if finished in ("committed", "needs_review"):
            deps.telemetry.reconciled(f"commit_{finished}")
            summary.commits_finished.append(effect.key)
    elif effect.status is EffectStatus.STARTED:
        at = deps.guard.recheck_due(effect) + RECHECK_MARGIN_SECONDS
        schedule_recheck(deps.sender, effect.case_id, effect.key, effect.attempts, at)
        summary.rechecks_scheduled.append(effect.key)
    else:
        summary.ignored += 1
