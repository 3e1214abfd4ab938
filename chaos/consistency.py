"""Invariants 3 and 4, as pure functions of the evidence.

3. **Every accepted event is reflected in its case, or set aside with a reason.** An event counts once
   per delivery id (a re-send with the same id is the same event); an approval answer once per
   (request id, decision, version), the broker's message id for it. Set aside means a
   ``rejectedEvents`` entry with id ``webhook:<delivery>`` and a non-empty reason. Otherwise, per type:

   - ``invoice.received``: the case exists with that invoice id, amount and currency;
   - ``po.updated``: the case's PO amount was that amount at some version (applied, or a newer report
     of the amount the case held), or the case recorded it as superseded: a ``supersededEvents`` entry
     with its delivery id, type, fact, amount and a reason, for a report that is older in source order
     than the newest PO report (a superseded record for the newest one, or no record, is a violation);
   - ``credit_note.issued``: the case's credits hold that note id, and either the note's amount was the
     reported amount at some version or the report is recorded as superseded, as for ``po.updated``
     (a correction the case left unapplied and unrecorded is a violation);
   - ``case.investigate``: the case exists (an investigation either decides, which the history shows,
     or is a no-op in the case's status, which is only visible in its result);
   - approval answers: the history has the decision (``approved by``/``rejected by`` the answer's
     approver), or the request is no longer the pending one at that version (answered already,
     withdrawn, stale: the rules then commit nothing);
   - per case: the decision every fact change owes is made. The case's creation, and each facts
     transition from a status other than ``credit_requested``/``closed`` (a person's withdrawal of a
     request excepted: it hands the case to that person), is followed by an investigation, which
     always commits a transition; so the last of them must be followed by a transition that is not a
     facts change, unless an effect of the case has no known outcome
     (``started``/``needs_reconciliation``: the decision waits for it);
   - per case: the facts rebuilt from the accepted events equal the case's facts.
   - per case, **the last fact in source order stands** (:mod:`chaos.order`: ``occurredAt``, or
     the order in which Casekeeper first accepted the event): the final PO amount is that of the newest
     accepted ``po.updated`` (or the invoice's own), each credit note's final amount that of its newest
     report; no PO or credit change in the history applied a fact older than the one the case held; and
     no fact event carrying ``occurredAt`` was refused at the door.

4. **Nothing left unknown, every escalation alerted once, every status consistent with its effects,
   the queue drained**:

   - no effect is ``started`` after quiescence (its outcome unknown past the call timeout);
   - every ``needs_reconciliation`` effect has exactly one ``effect_escalated`` alert record and
     exactly one webhook delivery of it, and its case is ``needs_review``;
   - a ``credit_requested`` case's transition into that status (its last one, passing over facts
     changes that kept it ``credit_requested``) names an effect that is ``done`` with the note's id, or,
     when it names none (waiting for credit that requests already made cover), one of the case's done
     requests is still outstanding (its note neither received nor withdrawn);
   - an ``awaiting_approval`` case has a pending approval asked on its current version;
   - every ``done`` effect has a transition naming it (its commit landed, or the case went to a person
     with it), unless it is older than the bounded history; every refused (non-stale ``failed``)
     effect too (the case went to review with it);
   - every note the supplier created belongs to an effect of its case that is ``done`` with that note
     or ``needs_reconciliation``, and every ``done`` effect's note is one the supplier created for it;
   - the queue has nothing active, scheduled or dead-lettered; quiescence was reached.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal, InvalidOperation
from typing import Any

from chaos.evidence import Evidence, Sent
from chaos.facts import Timeline, is_facts_transition
from chaos.order import (
    final_problems,
    refused_with_occurred_at,
    set_aside_delivery,
    set_aside_unapplied,
    superseded_record,
)
from chaos.violations import Violation
from shared.handlers.ingress import KEY_APPROVER_PREFIX

APPROVAL = "approval.answered"
UNSETTLED = ("started", "needs_reconciliation")


def check_reflected(evidence: Evidence, timelines: dict[str, Timeline]) -> list[Violation]:
    violations: list[Violation] = []
    seen: set[tuple[str, ...]] = set()
    for sent in evidence.sent:
        if not sent.accepted:
            continue
        identity = _identity(sent)
        if identity in seen:
            continue
        seen.add(identity)
        problem = _not_reflected(evidence, sent, timelines.get(sent.case_id))
        if problem is not None:
            violations.append(Violation(3, sent.case_id, problem, {"event": sent.__dict__}))
    for case_id, got in sorted(evidence.cases.items()):
        if got.get("operatorView") is not None:
            api = f"GET /api/cases/{{id}} answers {got.get('status')} ({_error_text(got.get('body'))})"
            violations.append(
                Violation(3, case_id, f"{api}, but 'casekeeper case show' shows the case: the API cannot show it", {})
            )
    for case_id, timeline in timelines.items():
        view = evidence.view(case_id)
        assert view is not None  # timelines are built for cases with a view only
        violations += [Violation(3, case_id, f"facts: {p}", {}) for p in timeline.problems]
        violations += [Violation(3, case_id, f"order: {p}", {}) for p in timeline.stale]
        facts = (view.get("case") or {}).get("facts") or {}
        violations += [Violation(3, case_id, f"last fact: {p}", {}) for p in final_problems(timeline.order, facts)]
        owed = _decision_owed(view)
        if owed is not None:
            violations.append(Violation(3, case_id, owed, {"history": view.get("history")}))
    for refused in refused_with_occurred_at(evidence.sent):
        summary = (
            f"{refused.event_type} ({refused.delivery}) with occurredAt {refused.data.get('occurredAt')} refused "
            f"(HTTP {refused.status}): the fact is lost"
        )
        violations.append(Violation(3, refused.case_id, summary, {"event": refused.__dict__}))
    return violations


def _identity(sent: Sent) -> tuple[str, ...]:
    if sent.event_type == APPROVAL:
        return (sent.case_id, sent.delivery, str(sent.data.get("decision")), str(sent.data.get("caseVersion")))
    return (sent.case_id, sent.delivery)


def _not_reflected(evidence: Evidence, sent: Sent, timeline: Timeline | None) -> str | None:
    what = f"{sent.event_type} ({sent.delivery}) accepted"
    view = evidence.view(sent.case_id)
    rejected_records = evidence.rejected(sent.case_id)
    if sent.delivery in set_aside_unapplied(rejected_records, view):
        mine = [r for r in rejected_records if set_aside_delivery(r) == sent.delivery]
        reasons = [str(r.get("reason") or "").strip() for r in mine]
        return None if all(reasons) else f"{what}: set aside without a reason"
    if view is None:
        status = (evidence.cases.get(sent.case_id) or {}).get("status")
        return f"{what}, but the case cannot be read (GET answers {status}) and nothing was set aside"
    case = view.get("case") or {}
    facts = case.get("facts") or {}
    if sent.event_type == "invoice.received":
        same = all(str(facts.get(k)) == str(sent.data.get(k)) for k in ("invoiceId", "currency")) and _eq(
            facts.get("invoiceAmount"), sent.data.get("invoiceAmount")
        )
        return None if same else f"{what} for another invoice than the case's, and not set aside"
    if sent.event_type == "po.updated":
        shown = timeline.every_held() if timeline is not None else []
        amounts = {f.po_amount for f in shown}
        if timeline is not None and shown and not any(_eq(a, sent.data.get("poAmount")) for a in amounts):
            return _superseded(
                view, timeline, sent, f"{what}: the case's PO amount was never {sent.data.get('poAmount')}"
            )
        return None
    if sent.event_type == "credit_note.issued":
        note_id = str(sent.data.get("creditNoteId"))
        if note_id not in {str(c.get("creditNoteId")) for c in facts.get("credits") or ()}:
            return f"{what}: credit {note_id} missing"
        shown = timeline.every_held() if timeline is not None else []
        held = {f.credit(note_id) for f in shown}
        if timeline is not None and shown and not any(_eq(a, sent.data.get("amount")) for a in held):
            never = f"{what}: credit {note_id} was never {sent.data.get('amount')}"
            return _superseded(view, timeline, sent, never)
        return None
    if sent.event_type == APPROVAL:
        return _approval_not_reflected(view, sent, what)
    return None  # case.investigate: the case exists


def _superseded(view: dict[str, Any], timeline: Timeline, sent: Sent, never: str) -> str | None:
    """``None`` when the report, never applied, is recorded as superseded and is older in source order
    than the newest report of its fact; else what is wrong (``never``: it left no trace at all)."""
    if superseded_record(view, sent) is None:
        return f"{never}, and no superseded record names it"
    if not timeline.order.older_than_newest(sent.delivery):
        return f"{never}: recorded as superseded, but it is the newest report of its fact in source order"
    return None


def _approval_not_reflected(view: dict[str, Any], sent: Sent, what: str) -> str | None:
    # The driver answers with a function key, naming itself: the ingress records it as key:<name>.
    named = str(sent.data.get("approver"))
    approver = named if named.startswith(KEY_APPROVER_PREFIX) else KEY_APPROVER_PREFIX + named
    decided = any(
        str(t.get("reason") or "").startswith((f"approved by {approver}", f"rejected by {approver}"))
        for t in view.get("history") or ()
    )
    pending = view.get("pendingApproval") or {}
    version = (view.get("case") or {}).get("version")
    still = pending.get("requestId") == sent.delivery and sent.data.get("caseVersion") == version
    if decided or not still:
        return None
    return f"{what} on v{version}, still pending at v{version} with nothing decided"


def _decision_owed(view: dict[str, Any]) -> str | None:
    history = sorted(view.get("history") or [], key=lambda t: int(t.get("fromVersion", 0)))
    if history and int(history[0].get("fromVersion", 1)) != 1:
        return None  # the creation is out of the bounded history
    if any(e.get("status") in UNSETTLED for e in view.get("effects") or ()):
        return None
    owed_at, owed_by = -1, "the case's creation"
    for i, transition in enumerate(history):
        if not is_facts_transition(transition) or _is_withdrawal(transition):
            continue
        before = history[i - 1].get("status") if i > 0 else "open"
        if before not in ("credit_requested", "closed"):
            owed_at, owed_by = i, f"the facts change on v{transition.get('fromVersion')} ({transition.get('reason')})"
    if any(not is_facts_transition(t) for t in history[owed_at + 1 :]):
        return None
    status = (view.get("case") or {}).get("status")
    return f"no decision followed {owed_by}: the case stayed {status} (a follow-up investigation was lost)"


# --- 4 ------------------------------------------------------------------------------------------


def check_effects_and_status(evidence: Evidence) -> list[Violation]:
    violations = _queue_and_quiescence(evidence)
    alerts = Counter(
        str((a.get("fields") or {}).get("effectKey")) for a in evidence.alerts if a.get("kind") == "effect_escalated"
    )
    delivered = Counter(
        str(((d.get("payload") or {}).get("fields") or {}).get("effectKey"))
        for d in evidence.alert_deliveries
        if isinstance(d.get("payload"), dict) and d["payload"].get("alert") == "effect_escalated"
    )
    notes = {str(r["idempotencyKey"]): r.get("note") or {} for r in evidence.supplier if r.get("created")}
    for case_id in sorted(evidence.cases):
        view = evidence.view(case_id)
        if view is None:
            continue
        status = (view.get("case") or {}).get("status")
        effects = {str(e.get("key")): e for e in view.get("effects") or ()}
        history = sorted(view.get("history") or [], key=lambda t: int(t.get("fromVersion", 0)))
        oldest = int(history[0].get("fromVersion", 1)) if history else 1
        named = {t.get("effectKey") for t in history if t.get("effectKey")}

        def add(summary: str, **details: Any) -> None:
            violations.append(Violation(4, case_id, summary, details))  # noqa: B023 - used at once

        for key, effect in effects.items():
            short, state = key[:12], effect.get("status")
            if state == "started":
                add(f"effect {short} still started after quiescence: its outcome is unknown", effect=effect)
            elif state == "needs_reconciliation":
                if alerts[key] != 1 or delivered[key] != 1:
                    add(
                        f"effect {short} escalated: {alerts[key]} alert records, {delivered[key]} deliveries "
                        "(want 1 and 1)",
                        effect=effect,
                    )
                if status != "needs_review":
                    add(f"effect {short} needs reconciliation but the case is {status}", effect=effect)
            elif state == "done" and key not in named and int(effect.get("caseVersion", 0)) >= oldest:
                add(
                    f"effect {short} is done but no transition names it: its commit never landed and the "
                    "case never went to a person",
                    effect=effect,
                )
            elif state == "failed" and not str(effect.get("reason") or "").startswith("stale") and key not in named:
                add(f"effect {short} was refused but the case never went to review with it", effect=effect)
            note = notes.get(key)
            result = effect.get("result") if isinstance(effect.get("result"), dict) else {}
            if state == "done" and (note is None or result.get("creditNoteId") != note.get("creditNoteId")):
                add(
                    f"effect {short} is done with note {result.get('creditNoteId')}, which the supplier did not "
                    "create for its key",
                    effect=effect,
                    note=note,
                )
        for key, note in notes.items():
            if note.get("caseId") != case_id:
                continue
            effect = effects.get(key)
            state = effect.get("status") if effect else None
            if state not in ("done", "needs_reconciliation", "started"):
                add(
                    f"the supplier created note {note.get('creditNoteId')} for key {key[:12]} but the ledger "
                    f"says {state or 'nothing'}",
                    note=note,
                    effect=effect,
                )
        if status == "credit_requested":
            last = _entered_credit_requested(history)
            if last.get("effectKey"):
                effect = effects.get(str(last.get("effectKey")))
                if effect is None or effect.get("status") != "done" or not _note_of(effect):
                    add(
                        "the case is credit_requested but the transition into it names no done effect with a note",
                        transition=last,
                        effect=effect,
                    )
            elif not _outstanding(view):
                # Waiting for credit without a new request (the requests already made cover what is owed):
                # only consistent while one of them is still outstanding.
                add(
                    "the case is credit_requested, waiting for credit, but no request of it is outstanding",
                    transition=last,
                )
        if status == "awaiting_approval":
            pending = view.get("pendingApproval") or {}
            if pending.get("caseVersion") != (view.get("case") or {}).get("version"):
                add("the case is awaiting_approval without a request on its current version", pending=pending)
    return violations


def _is_withdrawal(transition: dict[str, Any]) -> bool:
    """A person took a request off the books: the case goes to that person (``needs_review``), by design
    with no decision after it; the person investigates when ready."""
    changes = transition.get("changes")
    return isinstance(changes, dict) and set(changes) == {"withdrawn"}


def _note_of(effect: dict[str, Any]) -> str | None:
    result = effect.get("result")
    note = result.get("creditNoteId") if isinstance(result, dict) else None
    return str(note) if note else None


def _outstanding(view: dict[str, Any]) -> list[str]:
    """Keys of the case's done requests whose note is neither received nor withdrawn by a person."""
    facts = (view.get("case") or {}).get("facts") or {}
    received = {str(c.get("creditNoteId")) for c in facts.get("credits") or ()}
    withdrawn = {str(w.get("effectKey")) for w in facts.get("withdrawn") or ()}
    done = [e for e in view.get("effects") or () if e.get("status") == "done"]
    return [str(e.get("key")) for e in done if _note_of(e) not in (None, *received) and e.get("key") not in withdrawn]


def _entered_credit_requested(history: list[dict[str, Any]]) -> dict[str, Any]:
    """The transition that made the case ``credit_requested``: the last one, passing over facts changes
    that kept it so (a credit received for one request while another is outstanding)."""
    for transition in reversed(history):
        kept = is_facts_transition(transition)
        if not (kept and transition.get("status") == "credit_requested"):
            entered: dict[str, Any] = transition
            return entered
    return {}


def _queue_and_quiescence(evidence: Evidence) -> list[Violation]:
    violations = []
    if evidence.quiescence and not evidence.quiescence.get("reached"):
        violations.append(Violation(4, None, f"quiescence not reached: {evidence.quiescence.get('detail')}"))
    for error in evidence.queue.get("errors") or ():
        violations.append(Violation(4, None, f"the queue could not be read: {error}"))
    counts = evidence.queue.get("counts") or {}
    for name in ("active", "scheduled"):
        if counts.get(name):
            violations.append(
                Violation(4, None, f"{counts[name]} messages left {name} in the queue", {"counts": counts})
            )
    for dead in evidence.queue.get("deadLetters") or ():
        violations.append(
            Violation(
                4,
                dead.get("caseId"),
                f"message {dead.get('messageId')} dead-lettered: {dead.get('reason')}"
                + (f" (last failure: {_failure_text(dead['lastFailure'])})" if dead.get("lastFailure") else ""),
                {"deadLetter": dead},
            )
        )
    if isinstance(evidence.pending, dict) and evidence.pending.get("error"):
        violations.append(Violation(4, None, f"casekeeper effects pending failed: {evidence.pending['error']}"))
    for effect in evidence.pending.get("effects") or () if isinstance(evidence.pending, dict) else ():
        # Those of cases the API cannot show; the others are judged on the case's view.
        if effect.get("status") == "started" and evidence.view(str(effect.get("caseId"))) is None:
            summary = f"effect {str(effect.get('key'))[:12]} still started after quiescence (case not readable)"
            violations.append(Violation(4, effect.get("caseId"), summary, {"effect": effect}))
    return violations


def _failure_text(line: str) -> str:
    """``... message X failed (Error: why); redelivering ...`` -> ``Error: why``."""
    start, end = line.find(" failed ("), line.rfind("); redelivering")
    return line[start + len(" failed (") : end] if start >= 0 and end > start else line[-200:]


def _error_text(body: Any) -> str:
    return str(body.get("error")) if isinstance(body, dict) and body.get("error") else "no case view"


def _eq(a: Any, b: Any) -> bool:
    try:
        return Decimal(str(a)) == Decimal(str(b))
    except InvalidOperation:
        return False
