"""``casekeeper events dead-lettered`` and ``casekeeper events redrive``: events the queue gave up on.

An accepted event is retried with backoff through a transient outage (``shared.messaging.retry``); what still
reaches the queue's dead-letter queue is a bug or an outage of hours. These commands make it visible and
recoverable, for the local host's queue (``--data``) and for Service Bus (``--from-settings``):

- ``queue`` shows the queue's counts (active, scheduled, dead-lettered): a quiet system drains to zero;
- ``dead-lettered`` lists each dead letter: its case, message id, why it was dead-lettered, after how
  many deliveries, and the event it carries;
- ``redrive ID...`` (or ``--all``) puts them back into their case's session as new messages (the id gets
  ``:redrive:<sequence>``, so duplicate detection lets them through) and removes them from the
  dead-letter queue. Redrive after the cause is fixed: events are idempotent, so one handled twice does
  no harm.

The timer raises one ``dead_lettered`` alert per message (``casekeeper alerts``).

Exit codes: 0 done, 1 ``redrive`` named ids that are not dead-lettered, 2 usage or store selection error.
"""

from __future__ import annotations

import argparse
import json
import logging

from shared.app.operations import Operations
from shared.messaging import DeadLetter
from shared.operator.context import (
    common_arguments,
    error,
    operator_identity,
    print_json,
    run_with_operations,
    time_text,
)

log = logging.getLogger("casekeeper.operator")

PROG = "casekeeper events"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Events the queue dead-lettered, and putting them back.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = common_arguments()
    commands.add_parser("queue", parents=[common], help="the queue's counts: active, scheduled, dead-lettered")
    listing = commands.add_parser("dead-lettered", parents=[common], help="list the dead-lettered events")
    listing.add_argument("--limit", type=int, default=100, metavar="N", help="at most N (default 100)")
    redrive = commands.add_parser(
        "redrive", parents=[common], help="put dead-lettered events back into their case's session"
    )
    redrive.add_argument("ids", nargs="*", default=[], metavar="ID", help="message ids, as 'dead-lettered' shows")
    redrive.add_argument("--all", action="store_true", help="every dead-lettered event")
    redrive.add_argument(
        "--by", default="", metavar="WHO", help="who puts them back (logged with the account running the command)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "redrive" and bool(args.all) == bool(args.ids):
        parser.error("redrive takes message ids, or --all")
    return run_with_operations(PROG, args, lambda ops: _run(ops, args))


def _run(ops: Operations, args: argparse.Namespace) -> int:
    if args.command == "queue":
        counts = ops.dead_letters.counts()
        if args.json:
            print_json({"queue": counts})
        else:
            print("  ".join(f"{name} {count}" for name, count in counts.items()))
        return 0
    if args.command == "dead-lettered":
        letters = ops.dead_letters.peek(limit=args.limit)
        if args.json:
            print_json({"deadLettered": [d.to_json() for d in letters]})
        elif not letters:
            print("no dead-lettered events")
        else:
            for letter in letters:
                _print(letter)
        return 0
    moved = ops.dead_letters.redrive(None if args.all else args.ids)
    missing = sorted(set(args.ids) - {m.message_id for m in moved})
    who = operator_identity(args.by or "")
    if moved:
        # A redrive leaves no record on a case; the log keeps who did it, as the ops page's redrive does.
        log.info(
            "dead letters redriven by %s: %s",
            who,
            ", ".join(m.message_id for m in moved),
            extra={"redrivenBy": who, "messageIds": [m.message_id for m in moved]},
        )
    if args.json:
        print_json({"redriven": [m.to_json() for m in moved], "notFound": missing})
    else:
        for letter in moved:
            print(f"put back: {letter.message_id} (case {letter.session_id}) by {who}")
        if not moved and not missing:
            print("no dead-lettered events")
    for message_id in missing:
        error(PROG, f"no dead-lettered event {message_id!r}")
    return 1 if missing else 0


def _print(letter: DeadLetter) -> None:
    when = time_text(letter.enqueued_time) if letter.enqueued_time is not None else "?"
    print(f"{letter.message_id}  case {letter.session_id}  enqueued {when}  deliveries {letter.delivery_count}")
    print(f"    {letter.reason}: {letter.description}")
    try:
        event = json.loads(letter.body)
        print(f"    event: {event.get('type')} {json.dumps(event.get('data'), separators=(',', ':'))}")
    except ValueError:
        print(f"    body: {letter.body[:200]!r}")
