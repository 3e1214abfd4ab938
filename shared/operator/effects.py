"""``casekeeper effects pending`` and ``casekeeper effects resolve``: effects without a known outcome (R3).

``pending`` lists every ``started`` and ``needs_reconciliation`` effect, oldest first, with its age by
the **store's** clock (the clock the ledger judges by), and says per status what happens next:

- ``started``, younger than the call timeout: an attempt is mid-call; leave it.
- ``started``, older: the outcome is unknown; reconciliation looks it up by key (the change feed's
  re-check, or the timer's sweep), and retries with the same key only where that is safe.
- ``needs_reconciliation``: a person establishes the outcome with the downstream system and records it
  with ``resolve``.

``resolve KEY [--case CASE_ID] (--done RESULT | --failed REASON) --by WHO --why WHY`` records that outcome with the
ledger's conditional write (from ``started`` or ``needs_reconciliation`` only; ``resolution`` says who,
why and when; :mod:`shared.views.resolution`, which the operations page's form uses too), then settles
the case as a worker would have:

- ``--done``: the commit the effect's intent names is finished (``Reconciler.finish_commit``): the case
  gets that status and its data, or goes to ``needs_review`` when it moved on since the decision;
- ``--failed``: the case goes to ``needs_review`` with the reason (a note, if it is there already).

``resolve`` refuses, changing nothing, an unknown key, an effect that already has an outcome, and a
``started`` effect still within its call timeout (an attempt may be mid-call: its outcome is coming).

``--case`` names the case the effect belongs to (``pending`` shows it): the key is then looked for on that
case alone, one point read. The key cannot name its case, so without ``--case`` a key that is neither open
nor archived (a closed effect, a mistyped key) is looked for on every case, as slow as the store is large.

Exit codes: 0 done, 1 refused (the message says why), 2 usage or store selection error.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from casekeeper import EffectStatus
from shared.app.operations import Operations
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
from shared.views.resolution import SETTLED_TEXT, NoSuchEffect, Refused, resolve

__all__ = ["PROG", "SETTLED_TEXT", "Refused", "build_parser", "main", "resolve"]

PROG = "casekeeper effects"
_RESULT_EXAMPLE = """--done '{"creditNoteId": "CN-123"}'"""
_CASE_HINT = (
    "the key was looked for on every case; with --case CASE_ID (the case column of 'casekeeper effects pending') "
    "it is looked for on that case alone, with one read"
)


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
        "then finish the case's commit (--done) or send the case to review (--failed). With --case the effect "
        "is found with one read of its case; without it, a key that is neither open nor archived is looked for "
        "on every case.",
    )
    resolve.add_argument("key", metavar="KEY", help="the effect's full key (64 hex characters)")
    resolve.add_argument(
        "--case",
        metavar="CASE_ID",
        help="the case the effect belongs to (the case column of 'pending'): the key is looked for there alone, "
        "one read, instead of on every case",
    )
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
            "'casekeeper effects resolve KEY --done RESULT | --failed REASON --by WHO --why WHY --case CASE' "
            "(--case: the effect's case, so that finding it takes one read)."
        )
    return lines


# --- resolve ------------------------------------------------------------------------------------


def _resolve(ops: Operations, args: argparse.Namespace, result: dict[str, Any] | None) -> int:
    try:
        reason = args.failed.strip() if args.failed is not None else None
        by = operator_identity(args.by)
        view = resolve(ops, args.key, result=result, reason=reason, by=by, why=args.why.strip(), case_id=args.case)
    except Refused as exc:
        if args.json:
            print_json({"refused": str(exc)})
        searched_everywhere = isinstance(exc, NoSuchEffect) and exc.searched == "everywhere"
        error(PROG, f"refused: {exc}" + (f"; {_CASE_HINT}" if searched_everywhere else ""))
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
