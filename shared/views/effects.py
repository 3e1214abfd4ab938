"""The pending effects' view: every effect without a known outcome (rule R3), oldest first, with what happens
to it next. Shown by ``casekeeper effects pending`` and the operations page."""

from __future__ import annotations

from itertools import islice
from typing import Any

from casekeeper.cases import OPEN_STATUSES, Effect, EffectStatus, Ledger
from casekeeper.stores import EFFECTS, DocumentStore, Query, walk
from shared.views.text import age_text, short


def pending_view(store: DocumentStore, ledger: Ledger, *, limit: int | None = None) -> dict[str, Any]:
    """The effects without an outcome, oldest first (store clock): all of them, or the oldest ``limit`` of
    each open status (``counts`` then says how many there are; one aggregate query per status)."""
    effects: list[Effect] = []
    counts: dict[str, int] = {}
    for status in OPEN_STATUSES:
        docs = walk(store, EFFECTS, Query(equals={"status": status.value}), size=min(limit or 200, 200))
        found = [Effect.from_document(d) for d in (islice(docs, limit) if limit is not None else docs)]
        effects.extend(found)
        counts[status.value] = store.count(EFFECTS, Query(equals={"status": status.value})) if limit else len(found)
    # The open entries on cases (where effects are claimed now: casekeeper.core.entries), as many as are open.
    on_cases = [e for e in ledger.open_entries() if e.status in OPEN_STATUSES]
    for status in OPEN_STATUSES:
        of_status = [e for e in on_cases if e.status is status]
        effects.extend(of_status[:limit] if limit is not None else of_status)
        counts[status.value] += len(of_status)
    effects.sort(key=lambda e: e.ts)
    now = store.now() if effects else 0.0  # once: on Cosmos DB reading the clock is a write
    rows = []
    for effect in effects:
        age = now - effect.ts
        # What Ledger.in_flight_for decides, against the one reading of the clock.
        due = ledger.recheck_due(effect) - now
        left = due if effect.status is EffectStatus.STARTED and due > 0 else None
        rows.append(
            {
                "key": effect.key,
                "shortKey": short(effect.key),
                "caseId": effect.case_id,
                "action": effect.action,
                "status": effect.status.value,
                "caseVersion": effect.case_version,
                "ageSeconds": round(age, 3),
                "attempts": effect.attempts,
                "reason": effect.reason,
                "inFlightForSeconds": round(left, 3) if left is not None else None,
                "next": next_step(effect, left),
            }
        )
    return {"effects": rows, "counts": counts, "shown": len(rows), "total": sum(counts.values())}


def next_step(effect: Effect, in_flight_for: float | None) -> str:
    if effect.status is EffectStatus.NEEDS_RECONCILIATION:
        return "a person establishes the outcome and runs 'casekeeper effects resolve'"
    if in_flight_for is not None:
        return f"in flight: an attempt may be mid-call (call timeout in {age_text(in_flight_for)})"
    return "outcome unknown: reconciliation looks it up by key"
