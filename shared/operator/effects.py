"""``casekeeper effects pending`` and ``casekeeper effects resolve``: effects without a known outcome (R3).

``pending`` lists every ``started`` and ``needs_reconciliation`` effect, oldest first, with its age by
the **store's** clock (the clock the ledger judges by), and says per status what happens next:

- ``started``, younger than the call timeout: an attempt is mid-call; leave it.
- ``started``, older: the outcome is unknown; reconciliation looks it up by key (the change feed's
  re-check, or the timer's sweep), and retries with the same key only where that is safe.
- ``needs_reconciliation``: a person establishes the outcome with the downstream system and records it
  with ``resolve``.

``resolve KEY (--done RESULT | --failed REASON) --by WHO --why WHY`` records that outcome with the
ledger's conditional write (from ``started`` or ``needs_reconciliation`` only; ``resolution`` says who,
why and when), then settles the case as a worker would have:

- ``--done``: the commit the effect's intent names is finished (``Reconciler.finish_commit``): the case
  gets that status and its data, or goes to ``needs_review`` when it moved on since the decision;
- ``--failed``: the case goes to ``needs_review`` with the reason (a note, if it is there already).

``resolve`` refuses, changing nothing, an unknown key, an effect that already has an outcome, and a
``started`` effect still within its call timeout (an attempt may be mid-call: its outcome is coming).

Exit codes: 0 done, 1 refused (the message says why), 2 usage or store selection error.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from casekeeper import OPEN_STATUSES, Effect, EffectStatus
from shared.app.operations import Operations
from shared.core.errors import OutcomeAlreadyRecorded
from shared.operator.context import (
    age_text,
    common_arguments,
    error,
    operator_identity,
    print_json,
    run_with_operations,
    short,
)
from shared.views.effects import pending_view

PROG = "casekeeper effects"
SOURCE = "operator"
_MAX_REVIEW_ATTEMPTS = 8
SETTLED_TEXT = {
    "committed": "the commit the effect names is finished",
    "already": "it already showed the effect's commit",
    "needs_review": "it moved on since the decision: sent to needs_review for a person",
    "no_intent": "the effect names no commit: unchanged",
    "with_person": "it was handed to a person for this effect and stays so; "
    "'casekeeper send case.investigate ID' decides it again, counting this outcome",
    "sent_to_review": "sent to needs_review with the reason; 'casekeeper send case.investigate ID' decides it again",
    "noted": "it was already in needs_review: a note records the resolution; "
    "'casekeeper send case.investigate ID' decides it again",
    "no_case": "no such case any more: nothing to settle",
    "unsettled": "it kept changing and was not moved: look at it with 'casekeeper case show'",
}
"""What happened to the case after a resolution, for people."""
_RESULT_EXAMPLE = """--done '{"creditNoteId": "CN-123"}'"""


class Refused(Exception):
    """``resolve`` will not record this outcome; nothing was changed."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Effects whose outcome is not known yet (rule R3).")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = common_arguments()
    commands.add_parser(
        "pending",
        parents=[common],
        help="every started and needs_reconciliation effect, oldest first",
        description="List every effect without a known outcome, oldest first, and what happens to it next.",
    )
    resolve = commands.add_parser(
        "resolve",
        parents=[common],
        help="record an outcome a person established, and settle the case",
        description="Record the outcome of an effect that a person established with the downstream system, "
        "then finish the case's commit (--done) or send the case to review (--failed).",
    )
    resolve.add_argument("key", metavar="KEY", help="the effect's full key (64 hex characters)")
    outcome = resolve.add_mutually_exclusive_group(required=True)
    outcome.add_argument(
        "--done",
        metavar="RESULT",
        help=f"it happened; RESULT is the downstream's record as a JSON object: {_RESULT_EXAMPLE}",
    )
    outcome.add_argument("--failed", metavar="REASON", help="it definitely did not happen, and why")
    resolve.add_argument("--by", required=True, metavar="WHO", help="who established the outcome")
    resolve.add_argument("--why", required=True, metavar="WHY", help="how it was established (kept on the effect)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: dict[str, Any] | None = None
    if args.command == "resolve":
        problem = _check_resolve_arguments(args)
        if problem is not None:
            error(PROG + " resolve", problem)
            return 2
        result = json.loads(args.done) if args.done is not None else None
    if args.command == "pending":
        return run_with_operations(PROG, args, lambda ops: _pending(ops, as_json=args.json))
    return run_with_operations(PROG, args, lambda ops: _resolve(ops, args, result))


def _check_resolve_arguments(args: argparse.Namespace) -> str | None:
    if not args.by.strip() or not args.why.strip():
        return "--by and --why must say who and why (they are kept on the effect)"
    if args.failed is not None and not args.failed.strip():
        return "--failed needs a reason"
    if args.done is None:
        return None
    try:
        value = json.loads(args.done)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return (
            f"--done takes the downstream's record as a JSON object, not {args.done!r}; "
            f"for example {_RESULT_EXAMPLE} (quote it for the shell)"
        )
    return None


# --- pending ------------------------------------------------------------------------------------


def _pending(ops: Operations, *, as_json: bool) -> int:
    view = pending_view(ops.store, ops.ledger)
    if as_json:
        print_json(view)
        return 0
    rows = view["effects"]
    if not rows:
        print("no pending effects: every effect has an outcome")
        return 0
    print(f"{'age':>8}  {'case':<16} {'action':<20} {'status':<21} {'attempts':>8}  key")
    for row in rows:
        print(
            f"{age_text(row['ageSeconds']):>8}  {row['caseId']:<16} {row['action']:<20} {row['status']:<21} "
            f"{row['attempts']:>8}  {row['key']}"
        )
        print(f"{'':>10}{row['reason'] or row['next']}")
    print()
    for line in _footer(rows):
        print(line)
    return 0


def _footer(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    started = [r for r in rows if r["status"] == EffectStatus.STARTED.value]
    if started:
        old = sum(1 for r in started if r["inFlightForSeconds"] is None)
        lines.append(
            f"started: {len(started)} ({old} past their call timeout). The others are mid-call; those past it are "
            "looked up by key by reconciliation. Do not retry them by hand."
        )
    waiting = sum(1 for r in rows if r["status"] == EffectStatus.NEEDS_RECONCILIATION.value)
    if waiting:
        lines.append(
            f"needs_reconciliation: {waiting}. A person establishes the outcome with the downstream system, then runs "
            "'casekeeper effects resolve KEY --done RESULT | --failed REASON --by WHO --why WHY'."
        )
    return lines


# --- resolve ------------------------------------------------------------------------------------


def _resolve(ops: Operations, args: argparse.Namespace, result: dict[str, Any] | None) -> int:
    try:
        reason = args.failed.strip() if args.failed is not None else None
        by = operator_identity(args.by)
        view = resolve(ops, args.key, result=result, reason=reason, by=by, why=args.why.strip())
    except Refused as exc:
        if args.json:
            print_json({"refused": str(exc)})
        error(PROG, f"refused: {exc}")
        return 1
    if args.json:
        print_json(view)
        return 0
    effect, case = view["effect"], view["case"]
    print(
        f"recorded {effect['status']} for effect {short(effect['key'])} ({effect['action']}, case {effect['caseId']}) "
        f"by {(effect.get('resolution') or {}).get('by') or args.by.strip()}"
    )
    settled = SETTLED_TEXT.get(view["settled"], view["settled"])
    now = f"; now {case['status']} at v{case['version']}" if case is not None else ""
    print(f"case {effect['caseId']}: {settled}{now}")
    return 0


def resolve(
    ops: Operations, key: str, *, result: dict[str, Any] | None, reason: str | None, by: str, why: str
) -> dict[str, Any]:
    """Record ``done`` with ``result`` (or ``failed`` with ``reason``) and settle the case.

    Raises :class:`Refused`, with nothing changed, when there is no effect ``key``, it already has an
    outcome (now, or by the time the conditional write lands), or it is ``started`` and younger than the
    call timeout.
    """
    if (result is None) == (reason is None):
        raise ValueError("give exactly one of result and reason")
    effect = ops.ledger.find(key)
    if effect is None:
        raise Refused(f"no effect with key {key!r} (give the full 64-character key; see 'casekeeper effects pending')")
    if effect.status not in OPEN_STATUSES:
        raise Refused(f"effect {short(key)} of case {effect.case_id} already has outcome {effect.status.value}")
    age = ops.ledger.age(effect)
    left = ops.ledger.in_flight_for(effect)
    if left is not None:
        wait = age_text(left)
        raise Refused(
            f"effect {short(key)} of case {effect.case_id} started {age_text(age)} ago, within the call timeout: "
            f"an attempt may be mid-call and its outcome is coming; look again in {wait}"
        )
    resolution = {"by": by, "why": why, "at": ops.clock.now()}
    status = EffectStatus.DONE if result is not None else EffectStatus.FAILED
    committed: str | None = None
    try:
        if result is not None:
            # An effect on its case: the outcome and the commit are one write (the commit's data from the
            # action's policy, as the reconciler writes it).
            plan = ops.reconciler.commit_plan(effect)
            recorded, committed = ops.ledger.record_done(
                effect, result, commit=plan, source=SOURCE, resolution=resolution
            )
        else:
            recorded = ops.ledger.record_outcome(
                effect, status, result=result, reason=reason, source=SOURCE, resolution=resolution
            )
    except OutcomeAlreadyRecorded as exc:
        raise Refused(f"effect {short(key)} changed meanwhile (now {exc.recorded_status}); look again") from exc
    if recorded.status is EffectStatus.DONE:
        settled = committed if committed not in (None, "no_intent") else ops.reconciler.finish_commit(recorded)
    else:
        settled = _send_to_review(ops, recorded, by)
    case = ops.cases.get(recorded.case_id)
    return {
        "effect": {
            "key": recorded.key,
            "caseId": recorded.case_id,
            "action": recorded.action,
            "status": recorded.status.value,
            "result": recorded.result,
            "reason": recorded.reason,
            "resolution": recorded.resolution,
        },
        "settled": settled,
        "case": {"id": case.id, "status": case.status, "version": case.version} if case is not None else None,
    }


def _send_to_review(ops: Operations, effect: Effect, by: str) -> str:
    """After a ``failed`` resolution: the case goes to review, as the commit step does for a refusal.

    Returns ``sent_to_review`` (committed), ``noted`` (already there: a note says what was resolved),
    ``unsettled`` (the case kept changing under the bounded retries) or ``no_case`` (it was deleted).
    Conditional on the version, re-read on a lost race. On the effect's own version the commit also
    withdraws the pending approval the effect's intent cleared, as the commit step would; on a later
    version the pending approval belongs to a newer decision and is left alone.
    """
    review = ops.reconciler.review_status
    reason = f"effect {effect.action} ({short(effect.key)}) resolved as failed by {by}: {effect.reason}"
    intent = effect.request.get("commit")
    clears = isinstance(intent, dict) and bool(intent.get("clearPendingApproval"))
    for _ in range(_MAX_REVIEW_ATTEMPTS):
        case = ops.cases.get(effect.case_id)
        if case is None:
            return "no_case"
        if case.status == review:
            ops.cases.note(case.id, reason, effectKey=effect.key)
            return "noted"
        on_decision = case.version == effect.case_version
        if ops.cases.commit_status(
            case.id,
            case.version,
            review,
            reason=reason,
            effect_key=effect.key if on_decision else None,
            data={"pendingApproval": None} if on_decision and clears else None,
            expected=case,
        ):
            return "sent_to_review"
    return "unsettled"
