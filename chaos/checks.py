"""The invariants, as pure functions of the evidence. Each returns its violations; none reads a clock.

1. **No request for a key whose note already existed**, unless a lookup of that key had said "not
   found" since the previous request with it. From the supplier's journal alone: a ``POST
   /credit-notes`` with key K is a violation when an earlier request created K's note and no ``GET``
   of K answered 404 between the previous ``POST`` of K and this one.
2. **Money.** For each credit-note request R (the first ``POST`` of key K, amount a, case C) let v be
   the case version its decision was made on (the API's ``effects[].caseVersion`` for K) and F(v) the
   facts that were true then (:mod:`chaos.facts`: the newest in source order the case had seen;
   what the case showed, unless it had applied an older fact over a newer one). Then a + the case's
   earlier requests (keys first posted before R whose note the supplier created; each at its requested
   amount, or at the received amount if F(v) shows its note received; not at all if F(v) shows it
   withdrawn by a person) + the external credits in F(v) must not exceed F(v)'s invoice amount - PO
   amount, unless the over-ask is visible: an ``over_requested`` alert record names the case with an
   ``excess`` at least as large as this one (money asked beyond what the facts owe that a person was told
   of; a decision made on facts a newer one replaced, or an over-ask nobody was told of, still breaks it).
5. **No 5xx to a valid signed request outside a kill window.** Every ``POST`` the driver made (events,
   approval answers; all valid and signed) that got a 5xx or no answer at all, at a time when its host
   was not inside a kill window (from just before the kill until the restarted host answered its
   health check, plus :data:`KILL_MARGIN`), is a violation; so is a host that exited by itself. While
   the store is down (a store outage, plus the margin) a 503 is the honest answer ("nothing was
   accepted; retry"); any other 5xx, or no answer, is still a violation.

Invariants 3 and 4 are in :mod:`chaos.consistency`.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any

from chaos.consistency import check_effects_and_status, check_reflected
from chaos.evidence import Evidence
from chaos.facts import Timeline, rebuild
from chaos.journal import is_credit_post, is_lookup
from chaos.order import set_aside_unapplied
from chaos.violations import Violation

KILL_MARGIN = 1.0
"""Seconds after a kill window in which a failed request is still the kill's (a request sent to the
restarted host as it came up)."""


def check_all(evidence: Evidence) -> list[Violation]:
    timelines = timelines_of(evidence)
    return [
        *check_no_request_for_existing_note(evidence),
        *check_money(evidence, timelines),
        *check_reflected(evidence, timelines),
        *check_effects_and_status(evidence),
        *check_no_5xx(evidence),
    ]


def timelines_of(evidence: Evidence) -> dict[str, Timeline]:
    timelines = {}
    for case_id in sorted({s.case_id for s in evidence.sent}):
        view = evidence.view(case_id)
        if view is not None:
            rejected = evidence.rejected(case_id)
            ids = {str(r.get("id")) for r in rejected}
            timelines[case_id] = rebuild(view, evidence.sent_for(case_id), ids, set_aside_unapplied(rejected, view))
    return timelines


# --- 1 ------------------------------------------------------------------------------------------


def check_no_request_for_existing_note(evidence: Evidence) -> list[Violation]:
    violations = []
    created_at: dict[str, int] = {}
    last_post: dict[str, int] = {}
    not_found_since_post: dict[str, bool] = defaultdict(bool)
    for index, record in enumerate(evidence.supplier):
        key = record.get("idempotencyKey")
        if not key:
            continue
        if is_lookup(record):
            if record.get("status") == 404:
                not_found_since_post[key] = True
            continue
        if not is_credit_post(record):
            continue
        if key in created_at and not not_found_since_post[key]:
            body = record.get("body")
            violations.append(
                Violation(
                    1,
                    body.get("caseId") if isinstance(body, dict) else None,
                    f"key {key[:12]} requested again (request #{record.get('seq')}) after its note "
                    f"was created by request #{evidence.supplier[created_at[key]].get('seq')}, "
                    "with no lookup saying not found in between",
                    {"key": key, "requests": [r for r in evidence.supplier if r.get("idempotencyKey") == key]},
                )
            )
        if record.get("created") and key not in created_at:
            created_at[key] = index
        last_post[key] = index
        not_found_since_post[key] = False
    return violations


# --- 2 ------------------------------------------------------------------------------------------


def check_money(evidence: Evidence, timelines: dict[str, Timeline]) -> list[Violation]:
    violations = []
    notes = _created_notes(evidence)
    alerted = _over_requested_alerts(evidence)
    for case_id, requests in _first_requests_by_case(evidence).items():
        view = evidence.view(case_id)
        timeline = timelines.get(case_id)
        if view is None or timeline is None:
            continue  # invariant 3 reports a case the API cannot show
        # Judged on the facts that were true (the newest the case had seen), not on what the case
        # showed: a decision made on a fact that a newer one replaced breaks the rule.
        versions = {e.get("key"): e.get("caseVersion") for e in view.get("effects") or []}
        case_notes = {n["creditNoteId"] for n in notes.values() if n.get("caseId") == case_id}
        for position, request in enumerate(requests):
            key, amount = request["idempotencyKey"], Decimal(str(request["body"].get("amount")))
            version = versions.get(key)
            facts_version = int(version) if isinstance(version, int) else 0
            facts = timeline.true_at.get(facts_version)
            if facts is None:
                continue  # the key unknown to the ledger is invariant 4's; unknown facts are noted there
            total, parts = amount, [f"this request {amount}"]
            for earlier in requests[:position]:
                note = notes.get(earlier["idempotencyKey"])
                if note is None:
                    continue
                if earlier["idempotencyKey"] in facts.withdrawn:  # a person settled it by hand
                    parts.append(f"withdrawn {earlier['body'].get('amount')}")
                    continue
                received = facts.credit(note["creditNoteId"])
                counted = received if received is not None else Decimal(str(earlier["body"].get("amount")))
                total += counted
                parts.append(f"{'received' if received is not None else 'requested'} {counted}")
            for credit_id, credit in facts.credits:
                if credit_id not in case_notes:  # a credit for none of the case's requests: external
                    total += credit
                    parts.append(f"external {credit_id} {credit}")
            if total > facts.justified and not _alerted(alerted, case_id, total - facts.justified):
                violations.append(
                    Violation(
                        2,
                        case_id,
                        f"request {key[:12]} for {amount} on v{version}: {' + '.join(parts)} = {total} "
                        f"> invoice - PO = {facts.justified} at v{version}",
                        {
                            "key": key,
                            "caseVersion": version,
                            "facts": facts.to_json(),
                            "caseShowed": timeline.at[facts_version].to_json(),
                            "total": str(total),
                            "justified": str(facts.justified),
                            "factsSource": timeline.source,
                        },
                    )
                )
    return violations


def _over_requested_alerts(evidence: Evidence) -> dict[str, list[Decimal]]:
    """Case id -> the excesses its ``over_requested`` alert records name."""
    found: dict[str, list[Decimal]] = defaultdict(list)
    for alert in evidence.alerts:
        fields = alert.get("fields") or {}
        if alert.get("kind") == "over_requested" and fields.get("caseId") is not None:
            found[str(fields["caseId"])].append(Decimal(str(fields.get("excess", "0"))))
    return found


def _alerted(alerted: dict[str, list[Decimal]], case_id: str, excess: Decimal) -> bool:
    """Whether an ``over_requested`` alert names ``case_id`` with at least ``excess``: a person was told."""
    return any(named >= excess for named in alerted.get(case_id, ()))


def _first_requests_by_case(evidence: Evidence) -> dict[str, list[dict[str, Any]]]:
    seen: set[str] = set()
    by_case: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in evidence.supplier:
        key, body = record.get("idempotencyKey"), record.get("body")
        if not is_credit_post(record) or not key or key in seen or not isinstance(body, dict):
            continue
        seen.add(key)
        by_case[str(body.get("caseId"))].append(record)
    return by_case


def _created_notes(evidence: Evidence) -> dict[str, dict[str, Any]]:
    """Key -> the note the supplier created for it."""
    notes = {}
    for record in evidence.supplier:
        note = record.get("note")
        if record.get("created") and isinstance(note, dict) and record.get("idempotencyKey"):
            notes[str(record["idempotencyKey"])] = note
    return notes


# --- 5 ------------------------------------------------------------------------------------------


def check_no_5xx(evidence: Evidence) -> list[Violation]:
    violations = []
    steps = {s.step: s for s in evidence.sent}
    for attempt in evidence.attempts:
        failed = attempt.status is None or attempt.status >= 500
        if attempt.method != "POST" or not failed:
            continue
        excused = any(
            w.host == attempt.host and attempt.started <= w.end + KILL_MARGIN and attempt.ended >= w.start
            for w in evidence.kill_windows
            if w.mode != "died"
        )
        excused = excused or (
            attempt.status == 503
            and any(attempt.started <= o.end + KILL_MARGIN and attempt.ended >= o.start for o in evidence.outages)
        )
        if excused:
            continue
        sent = steps.get(attempt.step)
        answer = f"HTTP {attempt.status}" if attempt.status is not None else f"no answer ({attempt.error})"
        violations.append(
            Violation(
                5,
                sent.case_id if sent else None,
                f"{attempt.method} {attempt.path} to host {attempt.host}: {answer}, outside any kill window",
                {"attempt": attempt.__dict__, "event": sent.__dict__ if sent else None},
            )
        )
    for window in evidence.kill_windows:
        if window.mode == "died":
            violations.append(
                Violation(5, None, f"host {window.host} exited by itself (restarted)", {"window": window.__dict__})
            )
    return violations
