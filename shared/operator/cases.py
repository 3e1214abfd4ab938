"""``casekeeper case show ID``: everything the store knows about one case, for a person or a machine.

Shown: the case (status, version, schema version) and its facts; its history (from version -> status,
reason, effect key); its effects (key, action, status, attempts, age by the store's clock, result or
reason, resolution); the pending approval and the past approval requests and decisions; notes; events
set aside for it; and its checkpoints, each with whether this build could resume it
(:mod:`shared.views.runs`).

The document is the read model's (:func:`shared.views.case.case_view`, the one ``GET /api/cases/{id}`` and
the case page show, with the checkpoints added): this command parses its arguments and prints it.

Exit codes: 0 shown, 1 no such case, 2 usage or store selection error. Reads only.
"""

from __future__ import annotations

import argparse
from typing import Any

from shared.app.operations import Operations
from shared.operator.context import (
    age_text,
    common_arguments,
    compact,
    error,
    print_json,
    run_with_operations,
    short,
    time_text,
)
from shared.views.case import case_document, case_view
from shared.views.rejected import rejected_events
from shared.views.runs import RUN_TEXT, Build, graph_hash_of
from shared.workflow.build import build_workflow
from shared.workflow.messages import ALLOWED_CHECKPOINT_TYPES

__all__ = ["PROG", "build_parser", "case_document", "case_view", "main", "render"]

PROG = "casekeeper case"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Look at one case.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    show = commands.add_parser(
        "show",
        parents=[common_arguments()],
        help="the case, its history, effects, approvals, notes, rejected events and checkpoints",
        description="Show one case: what happened to it, what is pending, and what a deploy would strand.",
    )
    show.add_argument("case_id", metavar="ID")
    return parser


def main(
    argv: list[str] | None = None,
    *,
    build: Build = build_workflow,
    allowed_types: frozenset[str] = ALLOWED_CHECKPOINT_TYPES,
) -> int:
    """``build`` and ``allowed_types`` stand for the current build (tests pass another)."""
    args = build_parser().parse_args(argv)
    return run_with_operations(PROG, args, lambda ops: _show(ops, args, build, allowed_types))


def _show(ops: Operations, args: argparse.Namespace, build: Build, allowed_types: frozenset[str]) -> int:
    view = case_view(ops, args.case_id, graph_hash_of(build, ops.workflow), allowed_types)
    if view is None:
        rejected = rejected_events(ops.store, args.case_id)
        if args.json:
            print_json({"error": f"no case {args.case_id!r}", "rejectedEvents": rejected})
        error(PROG, f"no case {args.case_id!r} in this store")
        for event in rejected:  # accepted, then set aside: say why, so nothing vanishes silently
            print(f"  event {event['id']} was set aside: {event['reason']}")
        return 1
    if args.json:
        print_json(view)
    else:
        print(render(view))
    return 0


# --- text ---------------------------------------------------------------------------------------


def render(view: dict[str, Any]) -> str:
    """The view for a person: one section per kind of record, "(none)" rather than nothing."""
    case = view["case"]
    lines = [f"case {case['id']}: {case['status']} at v{case['version']} (schema v{case['schemaVersion']})"]
    waiting = view.get("awaitingInvoice")
    if waiting is not None:
        lines.append(
            f"  awaiting its invoice: the facts below came before invoice.received (held since "
            f"{time_text(waiting['heldSince'])}, last {time_text(waiting['lastFactAt'])}); nothing is decided until "
            "it comes, and invoice_missing is alerted INVOICE_WAIT_SECONDS after the last"
        )
    lines += _section("facts", [f"{name:<14} {compact(value)}" for name, value in case["facts"].items()])
    lines += _section("data", [f"{name:<14} {compact(value)}" for name, value in view["data"].items()])
    lines += _section("history (from version -> status)", [_transition_line(t) for t in view["history"]])
    lines += _section("effects", [line for e in view["effects"] for line in _effect_lines(e)])
    lines += _section("approvals", _approval_lines(view["approvals"]))
    lines += _section("notes", [_note_line(n) for n in view["notes"]])
    lines += _section("rejected events", [f"{r['id']}: {r['reason']}" for r in view["rejectedEvents"]])
    superseded = [f"{r.get('deliveryId')}: {r.get('reason')}" for r in view.get("supersededEvents") or ()]
    lines += _section("superseded events (older than the fact held; not applied)", superseded)
    cps = view["checkpoints"]
    title = f"checkpoints (oldest first; this build's graph {cps['graphHash'][:12]})"
    lines += _section(title, [_checkpoint_line(c) for c in cps["list"]])
    if cps["newestRun"] is not None:
        lines.append(f"  newest: run {RUN_TEXT[cps['newestRun']]}")
    return "\n".join(lines)


def _section(title: str, rows: list[str]) -> list[str]:
    return ["", title, *(f"  {row}" for row in rows or ["(none)"])]


def _transition_line(t: dict[str, Any]) -> str:
    line = f"v{t['fromVersion']} -> {t['status']:<18} {t['reason'] or ''}"
    if t["effectKey"]:
        line += f"  [effect {short(t['effectKey'])}]"
    if t["factsChanged"]:
        line += "  [facts changed]"
    if t.get("proposedBy"):
        by = t["proposedBy"]
        line += "  [by the rules]" if by == "rules" else f"  [proposed by {by}]"
    return f"{line}  ({time_text(t['at'])})"


def _effect_lines(e: dict[str, Any]) -> list[str]:
    lines = [
        f"{e['shortKey']}  {e['action']}  {e['status']}  decided on v{e['caseVersion']}  "
        f"attempts {e['attempts']}  last change {age_text(e['ageSeconds'])} ago"
    ]
    if e["result"] is not None:
        lines.append(f"    result: {compact(e['result'])}")
    if e["reason"]:
        lines.append(f"    reason: {e['reason']}{' (stale)' if e['stale'] else ''}")
    if e["resolution"]:
        r = e["resolution"]
        lines.append(f"    resolved by {r.get('by')} at {time_text(float(r.get('at', 0)))}: {r.get('why')}")
    return lines


def _approval_lines(approvals: dict[str, Any]) -> list[str]:
    pending = approvals["pending"]
    lines = []
    if pending:
        lines.append(
            f"pending: {pending.get('requestId')} for {pending.get('amount')} {pending.get('currency')} "
            f"({pending.get('action')}), asked on v{pending.get('caseVersion')}"
        )
    for event in approvals["history"]:
        if event["event"] == "requested":
            lines.append(f"v{event['onVersion']}: {event['detail']}")
        else:
            lines.append(f"v{event['onVersion']}: {event['event']} by {event['by']} -> {event['status']}")
    return lines


def _note_line(note: dict[str, Any]) -> str:
    extra = {k: v for k, v in note.items() if k not in ("text", "at", "atVersion")}
    detail = "  " + " ".join(f"{k}={compact(v)}" for k, v in extra.items()) if extra else ""
    return f"v{note.get('atVersion')}: {note.get('text')}{detail}"


def _checkpoint_line(c: dict[str, Any]) -> str:
    pending = ",".join(c["pendingRequestIds"]) or "-"
    messages = "?" if c["pendingMessages"] is None else str(c["pendingMessages"])
    problems = "; ".join(f"{p['text']}: {p['summary']}" for p in c["problems"])
    resumable = "resumable" if c["resumable"] else f"NOT resumable: {problems}"
    return (
        f"{c['checkpointId']}  seq {c['seq']}  iteration {c['iteration']}  "
        f"pending requests {pending}  pending messages {messages}  {resumable}"
    )
