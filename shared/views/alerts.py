"""The alerts' view (rules R3, R7): the recent alerts, newest first, shown by ``casekeeper alerts`` and the
operations page."""

from __future__ import annotations

from typing import Any

from shared.app.alerts import Alert, Alerter


def recent_alerts(alerts: Alerter, limit: int) -> list[Alert]:
    """The ``limit`` most recently written alerts, newest first by when they were raised (a delivery mark
    rewrites a record and moves its store time)."""
    return sorted(alerts.recent(limit), key=lambda a: a.at, reverse=True)


def alert_json(alert: Alert) -> dict[str, Any]:
    return {
        "id": alert.id,
        "kind": alert.alert_kind,
        "at": alert.at,
        "message": alert.message,
        "fields": alert.fields,
        "delivered": alert.delivered,
        "notified": alert.notified,
    }


def delivery_text(delivered: bool | None) -> str:
    if delivered is None:
        return "no webhook"
    return "delivered" if delivered else "NOT delivered"
