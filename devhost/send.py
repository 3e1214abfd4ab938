"""``casekeeper send``: sign and post one event to a Casekeeper ingress (local or in Azure)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

import httpx

from devhost.host import SECRET_FILE
from shared.handlers.ingress import DELIVERY_HEADER, SIGNATURE_HEADER, sign


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="casekeeper send",
        description="Sign and POST an event, e.g.: casekeeper send invoice.received INV-1 invoiceId=INV-1 "
        "supplierId=SUP-1 poNumber=PO-1 invoiceAmount=1250.00 poAmount=1000.00 currency=EUR",
    )
    parser.add_argument("type", help="invoice.received | po.updated | credit_note.issued | case.investigate")
    parser.add_argument("case_id")
    parser.add_argument("fields", nargs="*", help="data fields as name=value (values are sent as strings)")
    parser.add_argument("--url", default="http://127.0.0.1:7071", help="the app's base URL")
    parser.add_argument("--secret", help="webhook secret (default: WEBHOOK_SECRET, else --data's generated one)")
    parser.add_argument("--data", type=Path, default=Path(".casekeeper/dev"), help="the local host's data folder")
    parser.add_argument("--delivery", help="delivery id (default: a new one); the same id is deduplicated")
    parser.add_argument("--json", action="store_true", help="print the status and the answer as one JSON document")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Sign and post an event to the ingress."""
    args = build_parser().parse_args(argv)
    secret = args.secret or os.environ.get("WEBHOOK_SECRET", "").split(",")[-1].strip()
    if not secret:
        secret_file = args.data / SECRET_FILE
        if not secret_file.exists():
            hint = f"pass --secret, set WEBHOOK_SECRET or start 'casekeeper dev --data {args.data}' first"
            print(f"casekeeper send: no secret: {hint}", file=sys.stderr)
            return 2
        secret = secret_file.read_text().strip()
    data: dict[str, str] = {}
    for item in args.fields:
        name, sep, value = item.partition("=")
        if not sep:
            print(f"casekeeper send: field {item!r} is not name=value", file=sys.stderr)
            return 2
        data[name] = value
    body = json.dumps({"type": args.type, "caseId": args.case_id, "data": data}).encode()
    delivery = args.delivery or f"cli-{uuid.uuid4().hex}"
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(secret, body, int(time.time()), delivery),
        DELIVERY_HEADER: delivery,
    }
    url = args.url.rstrip("/") + "/api/events"
    try:
        response = httpx.post(url, content=body, headers=headers, timeout=30.0)
    except httpx.ConnectError:
        print(
            f"casekeeper send: nothing answers at {url}: is the host running? Start it with make run "
            "(or casekeeper dev), or pass --url",
            file=sys.stderr,
        )
        return 1
    except httpx.HTTPError as exc:
        print(f"casekeeper send: {url}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return _report(args, url, response)


def _report(args: argparse.Namespace, url: str, response: httpx.Response) -> int:
    """The answer: on stdout when accepted (or with --json, always), otherwise one line on stderr."""
    try:
        answer: object = response.json()
    except ValueError:
        answer = response.text
    if args.json:
        print(json.dumps({"status": response.status_code, "body": answer}))
    elif response.is_success:
        print(f"{response.status_code} {response.text}")
    if response.is_success:
        return 0
    if not args.json:
        print(f"casekeeper send: {url} answered {response.status_code}: {response.text.strip()}", file=sys.stderr)
    if response.status_code == 401:
        where = (
            "--secret"
            if args.secret
            else "WEBHOOK_SECRET"
            if os.environ.get("WEBHOOK_SECRET")
            else f"{args.data / SECRET_FILE}"
        )
        print(
            f"casekeeper send: the signature was made with the secret from {where}; the host checks it against "
            f"its WEBHOOK_SECRET, or without one the file {SECRET_FILE} in its --data folder: pass the same "
            "--data, or --secret",
            file=sys.stderr,
        )
    return 1
