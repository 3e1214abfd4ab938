"""What a chaos run collects, as plain data: what the driver sent, what the supplier logged, what the
API and the operator commands show at the end, and when hosts were down.

The checks (:mod:`chaos.checks`) are pure functions of an :class:`Evidence`; unit tests build
one by hand. Times are epoch seconds taken by the chaos process, so they compare with each other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any


@dataclass
class Attempt:
    """One HTTP request of the driver to a host."""

    step: int
    host: int
    method: str
    path: str
    started: float
    ended: float
    status: int | None  # None: no answer (connection refused or dropped, timed out)
    error: str = ""


@dataclass
class Sent:
    """One planned step as it was carried out: what was sent, and whether a host accepted it (202)."""

    step: int
    kind: str  # event | resend | copy | credit_for_request | approval
    case_id: str
    event_type: str  # an event's type, or "approval.answered"
    data: dict[str, Any]
    delivery: str  # the delivery id (events), or the approval's request id
    status: int | None = None  # the last answer
    accepted_at: float | None = None  # when a host answered 202
    host: int | None = None
    skipped: str = ""  # why nothing was sent (e.g. no note to credit yet)

    @property
    def accepted(self) -> bool:
        return self.status == 202


@dataclass
class KillWindow:
    host: int
    start: float  # just before the kill
    end: float  # the restarted host answered its health check
    mode: str = "now"
    detail: str = ""


@dataclass
class StoreOutage:
    """A store outage as it happened: ``kind`` ``sqlite-write-lock`` or ``cosmos-sigstop``; ``start`` when
    the lock was held (the server paused), ``end`` when released (resumed); ``planned_*`` in seconds into
    the injection phase."""

    kind: str
    start: float
    end: float
    planned_start: float
    planned_end: float
    detail: str = ""


@dataclass
class Evidence:
    """Everything the checks look at."""

    sent: list[Sent] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    supplier: list[dict[str, Any]] = field(default_factory=list)
    cases: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Case id -> ``{"status": HTTP status, "body": the GET /api/cases/{id} answer}``, plus
    ``"operatorView"`` (``casekeeper case show --json``) when the API did not show the case."""
    pending: dict[str, Any] = field(default_factory=dict)
    """``casekeeper effects pending --json``."""
    alerts: list[dict[str, Any]] = field(default_factory=list)
    """``casekeeper alerts --json``'s ``alerts``."""
    alert_deliveries: list[dict[str, Any]] = field(default_factory=list)
    queue: dict[str, Any] = field(default_factory=dict)
    """``{"counts": {...}, "deadLetters": [...]}`` of the case-events queue."""
    kill_windows: list[KillWindow] = field(default_factory=list)
    outages: list[StoreOutage] = field(default_factory=list)
    quiescence: dict[str, Any] = field(default_factory=dict)
    tolerance: Decimal = Decimal("5.00")
    approval_threshold: Decimal = Decimal("1000.00")

    def view(self, case_id: str) -> dict[str, Any] | None:
        """The case's API view (200); when the API could not show an existing case, the operator's
        ``case show`` view in the API's shape; else ``None``."""
        got = self.cases.get(case_id)
        if got is None:
            return None
        if got.get("status") == 200:
            body: dict[str, Any] = got["body"]
            return body
        shown = got.get("operatorView")
        return api_shape(shown) if isinstance(shown, dict) and "case" in shown else None

    def rejected(self, case_id: str) -> list[dict[str, Any]]:
        """The events set aside for the case, from its view or its 404 answer."""
        got = self.cases.get(case_id) or {}
        view = self.view(case_id)
        body = view if view is not None else got.get("body")
        return list(body.get("rejectedEvents") or []) if isinstance(body, dict) else []

    def sent_for(self, case_id: str) -> list[Sent]:
        return [s for s in self.sent if s.case_id == case_id]

    def supplier_for(self, case_id: str) -> list[dict[str, Any]]:
        keys = {r.get("idempotencyKey") for r in self.supplier if _case_of(r) == case_id}
        return [r for r in self.supplier if _case_of(r) == case_id or r.get("idempotencyKey") in keys - {None}]


def api_shape(shown: dict[str, Any]) -> dict[str, Any]:
    """``casekeeper case show --json`` as ``GET /api/cases/{id}`` shows a case (it has all the same fields)."""
    return {
        "case": shown.get("case"),
        "effects": shown.get("effects") or [],
        "pendingApproval": (shown.get("approvals") or {}).get("pending"),
        "history": shown.get("history") or [],
        "notes": shown.get("notes") or [],
        "rejectedEvents": shown.get("rejectedEvents") or [],
        "supersededEvents": shown.get("supersededEvents") or [],
        "factOrder": shown.get("factOrder"),
    }


def _case_of(record: dict[str, Any]) -> str | None:
    body = record.get("body")
    return body.get("caseId") if isinstance(body, dict) else None


def to_json(value: Any) -> Any:
    """Dataclasses and decimals as JSON-ready values."""
    if hasattr(value, "__dataclass_fields__"):
        return to_json(asdict(value))
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, Decimal):
        return str(value)
    return value
