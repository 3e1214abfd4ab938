"""``casekeeper requests withdraw``: take an outstanding credit-note request off the books, as a person.

The money rule (``shared.domain.credit``) counts every credit note requested and not yet received as
outstanding, and never requests more while requested + received exceed what the facts justify. When a
request will never be answered (cancelled with the supplier, settled another way), a person withdraws
it: recorded on the case with who, why and when (a fact change: the case's version moves), after which
it no longer counts. The case goes to ``needs_review``; ``casekeeper send case.investigate ID`` (or the
next fact event) decides it again on what remains.

Only an outstanding request can be withdrawn: one the supplier has (its effect is ``done``), whose note
has not arrived. A request whose outcome is unknown is settled first with ``casekeeper effects resolve``.

The same change is made through the API with ``POST /api/cases/{caseId}/requests/{effectKey}/withdraw``.

Exit codes: 0 withdrawn (or already), 1 refused (the message says why), 2 usage or store selection error.
"""

from __future__ import annotations

import argparse
import asyncio

from casekeeper.capture import install, installed, uninstall
from shared.app.operations import Operations
from shared.domain import events as ev
from shared.errors import InvalidEvent
from shared.operator.context import common_arguments, error, operator_identity, print_json, run_with_operations

PROG = "casekeeper requests"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Credit-note requests a person settles by hand.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    withdraw = commands.add_parser(
        "withdraw", parents=[common_arguments()], help="take an outstanding request off the books"
    )
    withdraw.add_argument("case_id", metavar="CASE")
    withdraw.add_argument(
        "effect_key",
        metavar="KEY",
        help="the request's effect key, or a prefix of it that is unique on the case (case show prints 12 characters)",
    )
    withdraw.add_argument("--by", required=True, help="who decided it")
    withdraw.add_argument("--why", required=True, help="why (a ticket, the supplier's answer)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_with_operations(PROG, args, lambda ops: _withdraw(ops, args))


def full_key(ops: Operations, case_id: str, given: str) -> str:
    """The case's effect key that ``given`` names: the key itself, or a prefix that only one of the case's
    effect keys starts with (``case show`` prints the first 12 characters). Raises :class:`InvalidEvent`
    when several start with it; an unknown key is passed on, and the withdrawal refuses it with its reason."""
    keys = sorted({e.key for e in ops.ledger.for_case(case_id) if e.key.startswith(given)})
    if given in keys or not keys:
        return given
    if len(keys) > 1:
        shown = ", ".join(k[:16] for k in keys)
        raise InvalidEvent(f"{given!r} starts more than one effect key of case {case_id} ({shown}): give more of it")
    return keys[0]


def _withdraw(ops: Operations, args: argparse.Namespace) -> int:
    try:
        key = full_key(ops, args.case_id, args.effect_key.strip())
        data = {"effectKey": key, "by": operator_identity(args.by), "why": args.why, "at": ops.clock.now()}
        event = ev.parse_event({"type": ev.REQUEST_WITHDRAWN, "caseId": args.case_id, "data": data})
        # The case worker may resume a run; a checkpoint save that fails is recorded here, as in the app.
        ours = installed() is None
        if ours:
            install(ops.store)
        try:
            result = asyncio.run(ops.worker.handle(event))
        finally:
            if ours:
                uninstall()
    except InvalidEvent as exc:
        error(PROG, exc.reason)
        return 1
    if args.json:
        print_json(
            {
                "caseId": result.case_id,
                "outcome": result.outcome,
                "status": result.status,
                "version": result.version,
                "detail": result.detail,
            }
        )
    else:
        print(f"case {result.case_id}: {result.detail} -> {result.status} v{result.version}")
        if result.outcome == "facts_changed":
            print(f"decide it again with: casekeeper send case.investigate {result.case_id}")
    return 0
