"""HTTP handlers: events and approvals in, case views out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.bootstrap import Services
from shared.core.ids import id_problem
from shared.core.ports import Query
from shared.handlers.rejected import rejected_events
from shared.ingress import Response


def post_event(svc: Services, headers: Mapping[str, str], body: bytes) -> Response:
    return svc.ingress.accept_event(headers, body)


def post_approval(svc: Services, case_id: str, request_id: str, body: bytes) -> Response:
    return svc.ingress.accept_approval(
        case_id, request_id, body, case_exists=lambda valid_id: svc.cases.get(valid_id) is not None
    )


def get_case(svc: Services, case_id: str) -> Response:
    if (problem := id_problem(case_id)) is not None:
        return Response(400, {"error": f"caseId {problem}", "fields": {"caseId": problem}})
    case = svc.cases.get(case_id)
    if case is None:
        # Events set aside for an id that never became a case are still shown: they were accepted.
        body: dict[str, Any] = {"error": f"no case {case_id!r}"}
        rejected = rejected_events(svc.store, case_id)
        if rejected:
            body["rejectedEvents"] = rejected
        return Response(404, body)
    pending = case.data.get("pendingApproval")
    view: dict[str, Any] = {
        "case": case.summary(),
        "effects": [
            {
                "key": e.key,
                "action": e.action,
                "status": e.status.value,
                "caseVersion": e.case_version,
                "result": e.result,
                "reason": e.reason,
                "attempts": e.attempts,
            }
            for e in svc.ledger.for_case(case_id)
        ],
        "pendingApproval": (
            {
                "requestId": pending["requestId"],
                "caseVersion": pending["caseVersion"],
                "amount": pending["amount"],
                "currency": pending.get("currency"),
                "facts": pending.get("facts"),
            }
            if pending
            else None
        ),
        "history": [
            {"fromVersion": t.from_version, "status": t.status, "reason": t.reason, "effectKey": t.effect_key}
            for t in case.history
        ],
        "notes": list(case.notes),
        "rejectedEvents": rejected_events(svc.store, case_id),
    }
    return Response(200, view)


def health(svc: Services) -> Response:
    """Liveness plus one store round trip: the store answers and has a clock."""
    svc.store.query("health", Query(partition="alert", limit=1))
    return Response(200, {"status": "ok", "store": svc.settings.store, "queue": svc.settings.queue})
