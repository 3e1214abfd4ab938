"""HTTP handlers: events and approvals in, case views out."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from casekeeper import Clock, DocumentStore, Query
from casekeeper.stores import HEALTH, id_problem
from shared.app.telemetry import Telemetry
from shared.handlers.ingress import Ingress, Response
from shared.views.case import CaseRecords, case_document
from shared.views.rejected import rejected_events
from shared.web.identity import APPROVER_ROLE, OPERATOR_ROLE, Principal, PrincipalError, principal_from_headers

HEALTH_PROBE_PARTITION = "probe"
"""The partition ``/api/health`` queries: an empty one, so the round trip costs the least it can."""
HEALTH_STORE_CHECK_SECONDS = 5.0
"""``/api/health`` is anonymous: it asks the store at most once per this many seconds, whoever calls."""


class HealthProbe:
    """The store round trip behind ``/api/health``, shared by every caller within
    :data:`HEALTH_STORE_CHECK_SECONDS`: a flood of anonymous requests costs the store one query per
    interval, not one each. A failure is remembered for the interval too."""

    def __init__(self, interval: float = HEALTH_STORE_CHECK_SECONDS) -> None:
        self._interval = interval
        self._lock = threading.Lock()
        self._checked_at: float | None = None
        self._failure: Exception | None = None

    def check(self, store: DocumentStore, now: float) -> None:
        """Raises what the store raised, now or at the last check within the interval."""
        with self._lock:
            if self._checked_at is None or not 0 <= now - self._checked_at < self._interval:
                self._checked_at = now
                try:
                    store.query(HEALTH, Query(partition=HEALTH_PROBE_PARTITION, limit=1))
                    self._failure = None
                except Exception as exc:
                    self._failure = exc
            if self._failure is not None:
                raise self._failure


@dataclass(frozen=True)
class ApiDeps:
    """What the JSON API's triggers take."""

    ingress: Ingress
    records: CaseRecords
    """The cases, their effects and the store: the case document, whether a case exists, the health probe."""
    clock: Clock
    telemetry: Telemetry
    backends: Mapping[str, str]
    """What ``/api/health`` reports: the configured store and queue."""
    health_probe: HealthProbe = field(default_factory=HealthProbe)


def post_event(deps: ApiDeps, headers: Mapping[str, str], body: bytes) -> Response:
    # The span the message is sent in: its trace context goes into the message (shared.messaging), so the
    # case worker and the supplier call are this trace's continuation.
    with deps.telemetry.span("webhook", {"http.route": "/api/events"}) as span:
        response = deps.ingress.accept_event(headers, body)
        span.set_attribute("http.response.status_code", response.status)
    return response


def post_approval(
    deps: ApiDeps, case_id: str, request_id: str, body: bytes, headers: Mapping[str, str] | None = None
) -> Response:
    """The JSON answer. With a signed-in principal, it must hold the approver role and is recorded as the
    approver; without one, the function-key caller names itself (``key:<name>``; see the ingress)."""
    attributes = {"casekeeper.case_id": case_id, "casekeeper.request_id": request_id}
    with deps.telemetry.span("approval", attributes) as span:
        response = _answer(deps, case_id, request_id, body, headers)
        span.set_attribute("http.response.status_code", response.status)
    return response


def _caller(headers: Mapping[str, str], role: str, doing: str) -> Principal | Response | None:
    """Who sends a JSON state change: the signed-in principal holding ``role``, ``None`` for a function-key
    caller without one, or the refusal. A body that is not declared JSON is refused first (415): a web page
    can send ``text/plain`` to another site without asking, never ``application/json``."""
    content_type = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if content_type != "application/json":
        return Response(415, {"error": "Content-Type must be application/json"})
    try:
        principal = principal_from_headers(headers)
    except PrincipalError as exc:
        return Response(401, {"error": str(exc)})
    if principal is not None and not principal.has(role):
        held = ", ".join(sorted(principal.roles)) or "no app roles"
        return Response(403, {"error": f"{principal.name} may not {doing}: that needs the app role {role} ({held})"})
    return principal


def _answer(deps: ApiDeps, case_id: str, request_id: str, body: bytes, headers: Mapping[str, str] | None) -> Response:
    principal = _caller(headers or {}, APPROVER_ROLE, "answer approvals")
    if isinstance(principal, Response):
        return principal
    # The case is read by the door, through its store with the door's budget (shared.handlers.door).
    return deps.ingress.accept_approval(
        case_id,
        request_id,
        body,
        principal=principal.recorded if principal is not None else None,
        principal_name=principal.name if principal is not None else None,
    )


def post_withdrawal(
    deps: ApiDeps, case_id: str, effect_key: str, body: bytes, headers: Mapping[str, str] | None = None
) -> Response:
    """A withdrawal: with a signed-in principal, it must hold the operator role and is recorded as ``by``;
    without one, the function-key caller names itself (``key:<name>``), as for approvals."""
    attributes = {"casekeeper.case_id": case_id, "casekeeper.effect_key": effect_key}
    with deps.telemetry.span("withdrawal", attributes) as span:
        principal = _caller(headers or {}, OPERATOR_ROLE, "withdraw requests")
        if isinstance(principal, Response):
            response = principal
        else:
            response = deps.ingress.accept_withdrawal(
                case_id,
                effect_key,
                body,
                principal=principal.recorded if principal is not None else None,
                principal_name=principal.name if principal is not None else None,
            )
        span.set_attribute("http.response.status_code", response.status)
    return response


def get_case(deps: ApiDeps, case_id: str) -> Response:
    if (problem := id_problem(case_id)) is not None:
        return Response(400, {"error": f"caseId {problem}", "fields": {"caseId": problem}})
    case = deps.records.cases.get(case_id)
    if case is None:
        # Events set aside for an id that never became a case are still shown: they were accepted.
        body: dict[str, Any] = {"error": f"no case {case_id!r}"}
        rejected = rejected_events(deps.records.store, case_id)
        if rejected:
            body["rejectedEvents"] = rejected
        return Response(404, body)
    return Response(200, case_document(deps.records, case))


def health(deps: ApiDeps) -> Response:
    """Liveness plus a store round trip (at most one per :data:`HEALTH_STORE_CHECK_SECONDS`): the store
    answers."""
    deps.health_probe.check(deps.records.store, deps.clock.now())
    return Response(200, {"status": "ok", **deps.backends})
