"""Alerts: things a person must look at (rule R7; escalated effects, rule R3). At least once, twice over.

An alert is *recorded*, then *notified*, and the two are kept apart:

- **recorded**: a durable record in the ``health`` container (kind ``alert``), created if absent under a
  stable id (``<kind>:<dedupe key>``). Raising the same alert again finds the record: one failure alerts
  once, not once per timer tick, and two hosts raising it at once record it once.
- **notified**: an ERROR log record on logger ``casekeeper.alerts`` (with ``alertId`` and ``alertKind``
  as structured fields: Application Insights' alert rule keys on them), a count on the OpenTelemetry
  counter ``casekeeper.alerts``, and, when ``ALERT_WEBHOOK_URL`` is set, a JSON POST there that carries
  the alert's ``id`` so a receiver can drop repeats.

Whoever records an alert notifies it at once. If that fails, or the process dies in between, or the
record write timed out after landing (the next attempt then finds the record), the record stays
``notified: false`` and :meth:`Alerter.deliver_pending` (the timer) notifies it: the log line once
(``logged``), the webhook until it answers 2xx, with backoff (``attempts``, ``nextAttemptAt``), giving
up after :data:`MAX_WEBHOOK_ATTEMPTS` with an ERROR of its own. A notification may therefore repeat
(at least once); a receiver deduplicates on ``id``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from opentelemetry import metrics

from casekeeper import AlreadyExists, Clock, ConcurrencyConflict, Document, DocumentStore, Query
from casekeeper.stores import HEALTH, storable_id

KIND_ALERT = "alert"
"""The record's type (field ``record``) and the prefix of its partitions (:func:`alert_partition`)."""
ALERT_SHARDS = 16
"""Logical partitions alerts are spread over (``kind`` ``alert-00`` ... ``alert-15``, by a hash of the id): an
incident's thousands of alerts share no one partition's 20 GB and 10,000 RU/s."""
MAX_WEBHOOK_ATTEMPTS = 20
WEBHOOK_BACKOFF_CAP = 3600.0
NOTIFY_GRACE_SECONDS = 30.0
"""How long an unnotified record is left to the host that recorded it before the timer notifies it
(``ALERT_NOTIFY_GRACE_SECONDS``). A host killed between recording and notifying delays the notification by
this much plus one timer period; a shorter grace risks a second POST while the first is still in flight."""

log = logging.getLogger("casekeeper.alerts")


def alert_partition(doc_id: str) -> str:
    """The logical partition of the alert record ``doc_id``: fixed by the id, so that raising it again lands
    on the same one (and finds it)."""
    shard = int(hashlib.sha256(doc_id.encode("utf-8")).hexdigest()[:8], 16) % ALERT_SHARDS
    return f"{KIND_ALERT}-{shard:02d}"


@dataclass(frozen=True)
class Alert:
    id: str
    alert_kind: str
    message: str
    fields: dict[str, Any]
    at: float
    delivered: bool | None
    """``None``: no webhook configured; else whether the webhook acknowledged it."""
    notified: bool
    attempts: int

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Alert:
        return cls(
            id=str(body["id"]),
            alert_kind=str(body.get("alertKind", "")),
            message=str(body.get("message", "")),
            fields=dict(body.get("fields") or {}),
            at=float(body.get("at", 0.0)),
            delivered=body.get("delivered"),
            notified=bool(body.get("notified", body.get("delivered") is not False)),
            attempts=int(body.get("attempts", 0)),
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
        on_malformed: Callable[[Document, Exception], None] | None = None,
        notify_grace: float = NOTIFY_GRACE_SECONDS,
    ) -> None:
        self._store = store
        self._notify_grace = notify_grace
        self._clock = clock
        self._webhook_url = webhook_url
        self._http = http
        self._on_malformed = on_malformed
        meter = (meter_provider or metrics.get_meter_provider()).get_meter("casekeeper")
        self._counter = meter.create_counter("casekeeper.alerts", description="alerts raised, by kind")

    def raise_alert(self, alert_kind: str, message: str, fields: Mapping[str, Any], *, dedupe_key: str) -> bool:
        """Record an alert once per ``dedupe_key`` and notify it. Returns ``False`` when it was recorded
        before (its notification, if still owed, is the timer's). Raises ``StoreUnavailable`` when it
        could not be recorded: the caller's retry raises it again, harmlessly."""
        doc_id = storable_id(f"{alert_kind}:{dedupe_key}"[:250])
        partition = alert_partition(doc_id)
        body = {
            "id": doc_id,
            "kind": partition,
            "record": KIND_ALERT,
            "alertKind": alert_kind,
            "message": message,
            "fields": dict(fields),
            "at": self._clock.now(),
            "notified": False,
            "logged": False,
            "delivered": None if self._webhook_url is None else False,
            "attempts": 0,
            "nextAttemptAt": None,
        }
        try:
            created = self._store.create(HEALTH, partition, doc_id, body)
        except AlreadyExists:
            return False
        self._notify(created)
        return True

    def deliver_pending(self) -> list[str]:
        """Notify every recorded alert still owed a notification (the timer's duty). Returns their ids."""
        now = self._clock.now()
        owed = Query(equals={"record": KIND_ALERT, "notified": False}, order_by_ts="asc")
        docs = self._store.query(HEALTH, owed)
        notified: list[str] = []
        for doc in docs:
            try:
                body = doc.body
                if now - float(body.get("at", 0.0)) < self._notify_grace and not body.get("logged"):
                    continue  # just recorded: its host is notifying it right now
                next_at = body.get("nextAttemptAt")
                if next_at is not None and float(next_at) > now:
                    continue
                if self._notify(doc):
                    notified.append(doc.id)
            except (KeyError, TypeError, ValueError) as exc:
                if self._on_malformed is None:
                    raise
                self._on_malformed(doc, exc)
        return notified

    def recent(self, limit: int = 50) -> list[Alert]:
        newest = Query(equals={"record": KIND_ALERT}, order_by_ts="desc", limit=limit)
        return [Alert.from_body(d.body) for d in self._store.query(HEALTH, newest)]

    # --- notifying ----------------------------------------------------------------------------------

    def _notify(self, doc: Document) -> bool:
        """Log (once) and POST (until acknowledged), then record what happened. ``True`` when the alert
        needs nothing more."""
        body = dict(doc.body)
        if not body.get("logged"):
            fields = {k: v for k, v in (body.get("fields") or {}).items() if k != "message"}
            log.error(body["message"], extra={"alertId": body["id"], "alertKind": body["alertKind"], **fields})
            self._counter.add(1, {"casekeeper.alert.kind": str(body["alertKind"])})
            body["logged"] = True
        if self._webhook_url is not None and body.get("delivered") is not True:
            attempts = int(body.get("attempts") or 0) + 1
            body["attempts"] = attempts
            if self._post(body):
                body["delivered"] = True
            elif attempts >= MAX_WEBHOOK_ATTEMPTS:
                log.error(
                    "alert %s: the webhook refused it %d times; giving up (the record stays)",
                    body["id"],
                    attempts,
                    extra={"alertId": body["id"], "alertKind": body["alertKind"]},
                )
                body["deliveryAbandoned"] = True
            else:
                body["nextAttemptAt"] = self._clock.now() + min(WEBHOOK_BACKOFF_CAP, 5.0 * 2 ** (attempts - 1))
        done = body.get("delivered") is not False or bool(body.get("deliveryAbandoned"))
        body["notified"] = done
        # Another host may have notified it meanwhile: at least once is the promise, and it holds.
        with contextlib.suppress(ConcurrencyConflict):
            self._store.replace(HEALTH, doc.partition, doc.id, body, etag=doc.etag)
        return done

    def _post(self, body: Mapping[str, Any]) -> bool:
        payload = {"id": body["id"], "alert": body["alertKind"], "message": body["message"], "fields": body["fields"]}
        try:
            client = self._http or httpx.Client(timeout=5.0)
            response = client.post(self._webhook_url or "", json=payload)
        except httpx.HTTPError as exc:
            log.warning("alert webhook failed: %s", exc, extra={"alertId": body["id"]})
            return False
        if not response.is_success:
            log.warning("alert webhook answered %s", response.status_code, extra={"alertId": body["id"]})
        return response.is_success
