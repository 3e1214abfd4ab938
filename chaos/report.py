"""The outcome of a run: counts, the invariants table, and the JSON report with evidence per violation."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from chaos.evidence import Evidence, to_json
from chaos.journal import is_credit_post, is_lookup
from chaos.order import FACT_EVENTS, OCCURRED_AT, refused_with_occurred_at
from chaos.violations import INVARIANTS, Violation

SHOWN_PER_INVARIANT = 4


def counts(evidence: Evidence, plan_summary: dict[str, Any], kills_planned: int) -> dict[str, Any]:
    """What happened, from the driver's record, the supplier's journal and the final views."""
    sent = [s for s in evidence.sent if not s.skipped]
    accepted = [s for s in sent if s.accepted]
    events = {(s.case_id, s.delivery) for s in accepted if s.event_type != "approval.answered"}
    statuses = Counter(a.status for a in evidence.attempts if a.method == "POST")
    posts = [r for r in evidence.supplier if is_credit_post(r)]
    lookups = Counter(r.get("status") for r in evidence.supplier if is_lookup(r))
    per_key = Counter(r.get("idempotencyKey") for r in posts)
    effects = [e for c in evidence.cases.values() for e in ((c.get("body") or {}).get("effects") or [])]
    effect_states = Counter(
        "failed (stale)"
        if e.get("status") == "failed" and str(e.get("reason") or "").startswith("stale")
        else e.get("status")
        for e in effects
    )
    statuses_final = Counter(((c.get("body") or {}).get("case") or {}).get("status") for c in evidence.cases.values())
    windows = [w for w in evidence.kill_windows if w.mode != "died"]
    escalations = sum(1 for a in evidence.alerts if a.get("kind") == "effect_escalated")
    escalations_delivered = sum(
        1 for d in evidence.alert_deliveries if (d.get("payload") or {}).get("alert") == "effect_escalated"
    )
    stamped = [s for s in accepted if OCCURRED_AT in s.data and s.event_type in FACT_EVENTS]
    stamped_accepted = {(s.case_id, s.delivery) for s in stamped}
    stamped_refused = refused_with_occurred_at(evidence.sent)
    return {
        "workload": {
            "cases": plan_summary.get("cases"),
            "case kinds": plan_summary.get("caseKinds"),
            "events accepted (distinct deliveries)": len(events),
            "by type": dict(Counter(s.event_type for s in accepted if s.kind in ("event", "credit_for_request"))),
            "re-sent with the same delivery id": sum(1 for s in sent if s.kind == "resend"),
            "sent again under a new delivery id": sum(1 for s in sent if s.kind == "copy"),
            "approval answers sent": sum(1 for s in sent if s.event_type == "approval.answered"),
            "steps skipped": dict(Counter(s.skipped for s in evidence.sent if s.skipped)),
            "HTTP answers to POSTs": {
                str(k) if k is not None else "none": v for k, v in sorted(statuses.items(), key=str)
            },
            "final case statuses": dict(statuses_final),
        },
        "faults": {
            "planned windows": plan_summary.get("faultWindows"),
            "applied by the supplier": dict(Counter(f for r in evidence.supplier for f in r.get("faults") or ())),
        },
        "store outages": {
            "planned": plan_summary.get("outages", 0),
            "done": ", ".join(f"{o.kind} {o.end - o.start:.1f}s" for o in evidence.outages) or "none",
            "fact events sent out of order": plan_summary.get("outOfOrderSends", 0),
            "po.updated sent while the store was down": plan_summary.get("sentDuringOutages", 0),
            "fact events with occurredAt (accepted / refused)": f"{len(stamped_accepted)} / {len(stamped_refused)}",
        },
        "kills": {
            "planned": kills_planned,
            "done": len(windows),
            "just after a supplier request": sum(1 for w in windows if w.detail.startswith("killed just after")),
            "just after a fact event": sum(1 for w in windows if "after a fact event" in w.detail),
            "mean downtime (s)": round(sum(w.end - w.start for w in windows) / len(windows), 2) if windows else 0,
            "hosts that exited by themselves": sum(1 for w in evidence.kill_windows if w.mode == "died"),
        },
        "reconciler (seen from outside)": {
            "credit-note requests": len(posts),
            "keys": len(per_key),
            "requests re-sent with a key": sum(n - 1 for n in per_key.values() if n > 1),
            "notes created": sum(1 for r in posts if r.get("created")),
            "lookups found / not found / failed": f"{lookups.get(200, 0)} / {lookups.get(404, 0)} / "
            f"{sum(v for k, v in lookups.items() if k not in (200, 404))}",
            "effects by status": dict(effect_states),
            "retried effects (attempts > 1)": sum(1 for e in effects if int(e.get("attempts") or 1) > 1),
            "escalation alerts (records / webhook)": f"{escalations} / {escalations_delivered}",
        },
        "quiescence": evidence.quiescence,
    }


def table(header: str, summary: dict[str, Any], violations: list[Violation]) -> str:
    lines = [header, ""]
    for section in ("workload", "faults", "store outages", "kills", "reconciler (seen from outside)"):
        lines.append(section.upper())
        for name, value in summary[section].items():
            lines.append(f"  {name:<40} {_text(value)}")
        lines.append("")
    quiet = summary.get("quiescence") or {}
    if quiet:
        lines += [
            f"QUIESCENCE  {'reached' if quiet.get('reached') else 'NOT reached'} after {quiet.get('waited')}s: "
            f"{quiet.get('detail')}",
            "",
        ]
    by_invariant = Counter(v.invariant for v in violations)
    lines.append("INVARIANTS")
    for number, title in INVARIANTS.items():
        found = by_invariant.get(number, 0)
        lines.append(f"  {number}  {title:<82} {'ok' if not found else 'FAIL':<5}{found:>5}")
    for number in INVARIANTS:
        shown = [v for v in violations if v.invariant == number]
        if not shown:
            continue
        lines += ["", f"VIOLATIONS OF {number} ({len(shown)}; first {min(len(shown), SHOWN_PER_INVARIANT)})"]
        for v in shown[:SHOWN_PER_INVARIANT]:
            lines.append(f"  {v.case_id or '-'}: {v.summary}")
    return "\n".join(lines)


def case_evidence(evidence: Evidence, case_id: str, case_show: Any = None) -> dict[str, Any]:
    """A case's trail for the report: what was sent, what the supplier saw, what the API shows."""
    view = evidence.view(case_id) or {}
    return {
        "events": [to_json(s) for s in evidence.sent_for(case_id)],
        "supplierRequests": evidence.supplier_for(case_id),
        "case": view.get("case"),
        "history": view.get("history"),
        "effects": view.get("effects"),
        "notes": view.get("notes"),
        "rejectedEvents": evidence.rejected(case_id),
        "supersededEvents": view.get("supersededEvents"),
        "factOrder": view.get("factOrder"),
        "httpStatus": (evidence.cases.get(case_id) or {}).get("status"),
        "caseShow": case_show,
    }


def write_json(
    path: Path,
    *,
    header: dict[str, Any],
    summary: dict[str, Any],
    violations: list[Violation],
    evidence: Evidence,
    case_shows: dict[str, Any],
    extra: dict[str, Any],
) -> None:
    trails = {
        case_id: case_evidence(evidence, case_id, case_shows.get(case_id))
        for case_id in sorted({v.case_id for v in violations if v.case_id})
    }
    report = {
        **header,
        "counts": summary,
        "invariants": [
            {"number": n, "title": t, "violations": sum(1 for v in violations if v.invariant == n)}
            for n, t in INVARIANTS.items()
        ],
        "violations": [to_json(v) for v in violations],
        "cases": trails,
        "killWindows": to_json(evidence.kill_windows),
        "storeOutages": to_json(evidence.outages),
        "queue": evidence.queue,
        "alerts": evidence.alerts,
        "alertDeliveries": evidence.alert_deliveries,
        **extra,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")


def _text(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items()) or "-"
    return str(value)
