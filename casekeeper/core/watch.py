"""The alert port, and what a watch over cases asks it to raise.

A **watch** is the application's judgment of a case as it is about to be written: a function of the
case that returns the :class:`Finding` s it warrants (an invariant of the application's own, such as a
money rule: "more was requested than the facts justify"). The case repository asks it before every write
of a case, whoever writes (a decision, a fact, an outcome recorded late, a person, a reconciler), and
raises each finding the case as read did not already carry through the :class:`AlertSink`, *before*
the write: a write that lands has had its alerts recorded, and one that fails raises them again when it is
retried (an alert is recorded once per kind and dedupe key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class AlertSink(Protocol):
    """Raises an alert: recorded once per kind and ``dedupe_key`` (the app's ``Alerter.raise_alert``)."""

    def __call__(self, alert_kind: str, message: str, fields: Mapping[str, Any], *, dedupe_key: str) -> object: ...


@dataclass(frozen=True)
class Finding:
    """An alert a watch asks for: raised once per (``kind``, ``dedupe_key``)."""

    kind: str
    message: str
    dedupe_key: str
    fields: Mapping[str, Any] = field(default_factory=dict)
