"""The reconciler: reacts to changes of the cases (Cosmos DB change feed on ``cases``), where effects are
claimed and closed (``casekeeper.core.entries``).

- a case with a ``started`` entry: a re-check is scheduled into the case's session for when its call
  timeout expires (its claim time by the store's clock, plus a margin); the re-check applies rule R3.
  A ``done`` entry needs nothing: its outcome and its commit were one write.
- a document of the ``effects`` container (a row of the two-container layout, or the archive), if one is
  delivered: a ``done`` row whose case does not show the commit has it finished (the layout's F5), a
  ``started`` row gets its re-check as above.

All of it is idempotent, so a batch delivered twice (the feed is at-least-once) does no harm: the
commit is conditional, and a re-check's message id is derived from the effect's key and attempt,
so the broker drops the second copy (a case written many times while an entry is open schedules the same
re-check each time; the broker keeps one).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from casekeeper import Document, Effect, EffectStatus, Guard, Record
from casekeeper.records import entries_of
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


def open_entries_from_change(raw: Mapping[str, Any]) -> list[Effect] | None:
    """The ``started`` entries of a changed case document (``None`` if it is not a case). Their claim time is
    the entry's ``changedTs``, else the document's ``_ts`` (the write that claimed it, or a later one)."""
    if raw.get("kind") != "case" or "id" not in raw:
        return None
    if not raw.get("openEffects"):
        return []
    body = {k: v for k, v in raw.items() if not k.startswith("_")}
    doc = Document("cases", str(raw["id"]), str(raw["id"]), body, str(raw.get("_etag", "")), float(raw.get("_ts", 0)))
    case = Record.from_document(doc)
    return [e for e in entries_of(case) if e.status is EffectStatus.STARTED]


def _handle_one(deps: EffectChangeDeps, raw: Mapping[str, Any], summary: ChangeSummary) -> None:
    started = open_entries_from_change(raw)
    if started is not None:
        for entry in started:
            _schedule(deps, entry, summary)
        if not started:
            summary.ignored += 1
        return
    effect = effect_from_change(raw)
    if effect is None:
        summary.ignored += 1
    elif effect.status is EffectStatus.DONE:
        finished = deps.guard.finish_commit(effect)
        if finished in ("committed", "needs_review"):
            deps.telemetry.reconciled(f"commit_{finished}")
            summary.commits_finished.append(effect.key)
    elif effect.status is EffectStatus.STARTED:
        _schedule(deps, effect, summary)
    else:
        summary.ignored += 1


def _schedule(deps: EffectChangeDeps, effect: Effect, summary: ChangeSummary) -> None:
    at = deps.guard.recheck_due(effect) + RECHECK_MARGIN_SECONDS
    schedule_recheck(deps.sender, effect.case_id, effect.key, effect.attempts, at)
    summary.rechecks_scheduled.append(effect.key)
