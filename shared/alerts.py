"""Alerts: things a person must look at (rule R7; escalated effects, rule R3).

An alert is, at once:

- an ERROR log record on logger ``casekeeper.alerts`` with structured fields (Application Insights
  shows it as a trace with custom dimensions when telemetry goes through ``azure-monitor-opentelemetry``);
- a count on the OpenTelemetry counter ``casekeeper.alerts`` (attribute: the alert kind);
- a durable record in the ``health`` container (kind ``alert``), which ``casekeeper alerts`` lists;
- when ``ALERT_WEBHOOK_URL`` is set, a JSON POST there.

Each alert has a ``dedupe_key``: raising the same key again does nothing, so one failure alerts once,
not once per timer tick. The durable record is written first (create-if-absent); the key is claimed
there, so two hosts raising the same alert at once send one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from opentelemetry import metrics

from shared.core.clock import Clock
from shared.core.errors import AlreadyExists
from shared.core.ports import DocumentStore, Query

HEALTH = "health"
KIND_ALERT = "alert"

log = logging.getLogger("casekeeper.alerts")


@dataclass(frozen=True)
class Alert:
    id: str
    alert_kind: str
    message: str
    fields: dict[str, Any]
    at: float
    delivered: bool | None

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Alert:
        return cls(
            id=str(body["id"]),
            alert_kind=str(body.get("alertKind", "")),
            message=str(body.get("message", "")),
            fields=dict(body.get("fields") or {}),
            at=float(body.get("at", 0.0)),
            delivered=body.get("delivered"),
        )


class Alerter:
    def __init__(
        self,
        store: DocumentStore,
        clock: Clock,
        *,
        webhook_url: str | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        http: httpx.Client | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._webhook_url = webhook_url
        self._http = http
        meter = (meter_provider or metrics.get_meter_provider()).get_meter("casekeeper")
        self._counter = meter.create_counter("casekeeper.alerts", description="alerts raised, by kind")

    def raise_alert(self, alert_kind: str, message: str, fields: Mapping[str, Any], *, dedupe_key: str) -> bool:
        """Raise an alert once per ``dedupe_key``. Returns False when it was raised before."""
        doc_id = f"{alert_kind}:{dedupe_key}"[:250]
        body = {
            "id": doc_id,
            "kind": KIND_ALERT,
            "alertKind": alert_kind,
            "message": message,
            "fields": dict(fields),
            "at": self._clock.now(),
            "delivered": None if self._webhook_url is None else False,
        }
        try:
            self._store.create(HEALTH, KIND_ALERT, doc_id, body)
        except AlreadyExists:
            return False
        log.error(message, extra={"alertKind": alert_kind, **{k: v for k, v in fields.items() if k != "message"}})
        self._counter.add(1, {"casekeeper.alert.kind": alert_kind})
        if self._webhook_url is not None:
            self._deliver(doc_id, body)
        return True

    def _deliver(self, doc_id: str, body: dict[str, Any]) -> None:
        payload = {"alert": body["alertKind"], "message": body["message"], "fields": body["fields"], "id": doc_id}
        try:
            client = self._http or httpx.Client(timeout=5.0)
            response = client.post(self._webhook_url or "", json=payload)
            delivered = response.is_success
        except httpx.HTTPError as exc:
            log.warning("alert webhook failed: %s", exc, extra={"alertId": doc_id})
            delivered = False
        if delivered:
            current = self._store.read(HEALTH, KIND_ALERT, doc_id)
            if current is not None:
                self._store.upsert(HEALTH, KIND_ALERT, doc_id, {**current.body, "delivered": True})

    def recent(self, limit: int = 50) -> list[Alert]:
        docs = self._store.query(HEALTH, Query(partition=KIND_ALERT, order_by_ts="desc", limit=limit))
        return [Alert.from_body(d.body) for d in docs]
