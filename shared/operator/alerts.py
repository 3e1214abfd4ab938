"""``casekeeper alerts``: the recent alerts (rules R3, R7), newest first, and whether the webhook got them.

Alerts are read from their durable records (container ``health``, kind ``alert``; see
:mod:`shared.app.alerts`). Delivery is ``delivered`` / ``NOT delivered`` when ``ALERT_WEBHOOK_URL`` was set
when the alert was raised, ``no webhook`` otherwise.

Exit codes: 0 listed (also when there are none), 2 usage or store selection error. Reads only.
"""

from __future__ import annotations

import argparse

from shared.app.operations import Operations
from shared.operator.context import (
    common_arguments,
    compact,
    print_json,
    run_with_operations,
    time_text,
)
from shared.views.alerts import alert_json, delivery_text, recent_alerts

__all__ = ["alert_json", "build_parser", "main"]

PROG = "casekeeper alerts"
DEFAULT_LIMIT = 20


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, parents=[common_arguments()], description="Recent alerts, newest first."
    )
    parser.add_argument("--limit", type=_positive, default=DEFAULT_LIMIT, metavar="N", help="at most N alerts")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_with_operations(PROG, args, lambda ops: _show(ops, args))


def _show(ops: Operations, args: argparse.Namespace) -> int:
    # Newest first by when it was raised: a delivery mark rewrites the record and moves its store time.
    alerts = recent_alerts(ops.alerts, args.limit)
    if args.json:
        print_json({"alerts": [alert_json(a) for a in alerts]})
        return 0
    if not alerts:
        print("no alerts")
        return 0
    for alert in alerts:
        fields = " ".join(f"{k}={compact(v)}" for k, v in alert.fields.items())
        print(f"{time_text(alert.at)}  {alert.alert_kind:<18} {delivery_text(alert.delivered):<15} {alert.message}")
        if fields:
            print(f"{'':22}{fields}")
    return 0
