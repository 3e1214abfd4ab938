"""The reconciler: reacts to changes of the cases (Cosmos DB change feed on ``cases``), where effects are
claimed and closed (``casekeeper.core.entries``).

A case with a ``started`` entry gets a re-check scheduled into its session for when the entry's call timeout
expires (its claim time by the store's clock, plus a margin); the re-check applies rule R3. An entry a person
resolved ``failed`` that the guard still watches gets its first lookup by key a call timeout after the
person's outcome; each lookup that finds nothing schedules the next until the late watch ends
(docs/design.md#close-stale-claims). A ``done`` entry needs nothing: its outcome and its commit were one write.
Anything else the feed delivers is ignored.

All of it is idempotent, so a batch delivered twice (the feed is at-least-once) does no harm: a re-check's
message id is derived from the effect's key and attempt, so the broker drops the second copy (a case written
many times while an entry is open schedules the same re-check each time; the broker keeps one).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from casekeeper import Case, Document, Effect, EffectStatus, Guard
from casekeeper.cases import entries_of
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
    rechecks_scheduled: list[str] = field(default_factory=list)
    ignored: int = 0


def handle_effect_changes(deps: EffectChangeDeps, changes: Iterable[Mapping[str, Any]]) -> ChangeSummary:
    """Handle a batch. One document's failure does not stop the others; the first failure is raised at
    the end, so the trigger's retry redelivers the batch (everything here is safe to repeat)."""
    summary = ChangeSummary()
    failures: list[Exception] = []
    for raw in changes:
        try:
            _handle_one(deps, raw, summary)
        except Exception as exc:
            log.exception("reconciler: change of case %s failed", raw.get("id"), extra={"caseId": raw.get("id")})
            failures.append(exc)
    if summary.rechecks_scheduled:
        log.info("reconciler: %d re-checks scheduled", len(summary.rechecks_scheduled))
    if failures:
        raise failures[0]
    return summary


def open_entries_from_change(raw: Mapping[str, Any]) -> list[Effect] | None:
    """The ``started`` and watched entries of a changed case document (``None`` if it is not a case). Their
    time is the entry's ``changedTs``, else the document's ``_ts`` (the write that claimed or closed it, or a
    later one)."""
    if raw.get("kind") != "case" or "id" not in raw:
        return None
    if not raw.get("openEffects"):
        return []
    body = {k: v for k, v in raw.items() if not k.startswith("_")}
    doc = Document("cases", str(raw["id"]), str(raw["id"]), body, str(raw.get("_etag", "")), float(raw.get("_ts", 0)))
    case = Case.from_document(doc)
    return [e for e in entries_of(case) if e.status is EffectStatus.STARTED or e.watching]


def _handle_one(deps: EffectChangeDeps, raw: Mapping[str, Any], summary: ChangeSummary) -> None:
    started = open_entries_from_change(raw)
    if not started:
        summary.ignored += 1
        return
    for entry in started:
        _schedule(deps, entry, summary)


def _schedule(deps: EffectChangeDeps, effect: Effect, summary: ChangeSummary) -> None:
    at = deps.guard.recheck_due(effect) + RECHECK_MARGIN_SECONDS
    # A watched entry's lookups are their own message: the attempt's re-check has the "feed" id already.
    tag = "watch" if effect.watching else "feed"
    schedule_recheck(deps.sender, effect.case_id, effect.key, effect.attempts, at, tag=tag)
    summary.rechecks_scheduled.append(effect.key)
