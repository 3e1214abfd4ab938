"""An effect of the ledger: its statuses, its stored shape and the changes an entry goes through (rules R2-R4),
apart from the policy that decides when to make them (:class:`~casekeeper.core.ledger.Ledger`).

An effect is an entry of its case document (``casekeeper.core.entries``) or, once closed and moved out, a
document of the ``effects`` container (the archive): the same body shape either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from casekeeper.core.cases import Case
from casekeeper.core.ports import Document

EFFECTS = "effects"
_HISTORY_LIMIT = 50


class EffectStatus(StrEnum):
    """Where an effect stands: ``started`` (claimed; the call may be in flight or its outcome unknown),
    ``done`` (happened, result recorded, committed with it), ``failed`` (definitely refused, or closed as
    stale or by a person), ``needs_reconciliation`` (handed to a person: only they settle it)."""

    STARTED = "started"
    DONE = "done"
    FAILED = "failed"
    NEEDS_RECONCILIATION = "needs_reconciliation"


OPEN_STATUSES = (EffectStatus.STARTED, EffectStatus.NEEDS_RECONCILIATION)
"""Statuses without a known outcome: what reconciliation and operators look at."""


@dataclass(frozen=True)
class Effect:
    """One effect. ``ts`` (store clock) is when it last changed; for a ``started`` entry, when the current
    attempt was claimed. ``etag`` is its case's (an entry is written with its case), or its archive
    document's."""

    key: str
    case_id: str
    action: str
    case_version: int
    status: EffectStatus
    request: dict[str, Any]
    result: dict[str, Any] | None
    reason: str | None
    stale: bool
    attempts: int
    resolution: dict[str, Any] | None
    history: tuple[dict[str, Any], ...]
    etag: str = field(repr=False)
    ts: float
    watching: bool = False
    """A ``failed`` entry a person resolved: the guard still looks it up by key for the late watch
    (docs/design.md#close-stale-claims), since a stalled call may yet have made it happen."""
    part: str | None = None
    """The name of this effect among several of one action in one decision (an order line); part of its key."""
    args_digest: str | None = None
    """The digest of the arguments it was claimed with (``casekeeper.core.keys.args_digest``): a run of the
    same key with other arguments is refused, never replayed."""

    @classmethod
    def from_entry(cls, case: Case, entry: Mapping[str, Any]) -> Effect:
        """The effect an entry of ``case`` holds. Its ``ts`` is the entry's ``changedTs`` (for a ``started``
        entry, when its current attempt was claimed, by the store's clock; see ``casekeeper.core.entries``)."""
        body = {k: v for k, v in entry.items() if k != "changedTs"}
        ts = entry.get("changedTs")
        doc = Document(EFFECTS, case.id, str(entry["id"]), body, case.etag, float(ts if ts is not None else case.ts))
        return cls.from_document(doc)

    @classmethod
    def from_document(cls, doc: Document) -> Effect:
        """The effect an archive document (or an entry wrapped as one) holds."""
        b = doc.body
        return cls(
            key=doc.id,
            case_id=str(b["caseId"]),
            action=str(b["action"]),
            case_version=int(b["caseVersion"]),
            status=EffectStatus(b["status"]),
            request=dict(b.get("request") or {}),
            result=dict(b["result"]) if b.get("result") is not None else None,
            reason=b.get("reason"),
            stale=bool(b.get("stale", False)),
            attempts=int(b.get("attempts", 1)),
            resolution=dict(b["resolution"]) if b.get("resolution") else None,
            history=tuple(dict(h) for h in b.get("history") or ()),
            etag=doc.etag,
            ts=doc.ts,
            watching=bool(b.get("watching", False)),
            part=str(b["part"]) if b.get("part") is not None else None,
            args_digest=str(b["argsDigest"]) if b.get("argsDigest") is not None else None,
        )

    def to_body(self) -> dict[str, Any]:
        """The effect as stored: an entry of its case, or its archive document."""
        return {
            "id": self.key,
            "kind": "effect",
            "caseId": self.case_id,
            "action": self.action,
            "caseVersion": self.case_version,
            "status": self.status.value,
            "request": self.request,
            "result": self.result,
            "reason": self.reason,
            "stale": self.stale,
            "attempts": self.attempts,
            "resolution": self.resolution,
            "history": list(self.history),
            **({"watching": True} if self.watching else {}),
            **({"part": self.part} if self.part is not None else {}),
            **({"argsDigest": self.args_digest} if self.args_digest is not None else {}),
        }


def late_outcome_alert(closed: Effect) -> tuple[str, dict[str, Any]]:
    """The message and fields of the alert for a call that succeeded after its entry was closed: whoever
    closed it believed nothing was asked, and the case may have asked again since (money possibly
    over-requested)."""
    amount, currency = closed.request.get("amount"), closed.request.get("currency")
    asked = f"{amount} {currency}".strip() if amount is not None else "an unknown amount"
    message = (
        f"effect {closed.action} ({closed.key[:12]}) of case {closed.case_id} happened after its entry was closed "
        f"as {closed.status.value}{' (stale)' if closed.stale else ''}: {asked} was asked on v{closed.case_version} "
        "and may be over-requested if the case asked again since; a person checks the supplier's notes"
    )
    fields = {
        "caseId": closed.case_id,
        "effectKey": closed.key,
        "action": closed.action,
        "amount": amount,
        "currency": currency,
        "decidedOnVersion": closed.case_version,
        "closedAs": closed.status.value,
    }
    return message, fields


def left_version_alert(effect: Effect, case_version: int, reason: str) -> tuple[str, dict[str, Any]]:
    """The message and fields of the ``effect_on_left_version`` alert: ``effect`` happened on facts the case
    has since left (it is at ``case_version``), so what it asked may be over-requested."""
    amount, currency = effect.request.get("amount"), effect.request.get("currency")
    asked = f"{amount} {currency}".strip() if amount is not None else "an unknown amount"
    message = (
        f"case {effect.case_id}: {reason}; {asked} was asked on facts the case has left and may be "
        "over-requested: a person decides"
    )
    fields = {
        "caseId": effect.case_id,
        "effectKey": effect.key,
        "action": effect.action,
        "amount": amount,
        "currency": currency,
        "decidedOnVersion": effect.case_version,
        "caseVersion": case_version,
    }
    return message, fields


def superseded_by_ignorance(current: Effect) -> bool:
    """Closed by someone who did not know that our call succeeded: a stale refusal (which called nothing),
    an escalation, a person's ``failed`` (they found no note, and ours was still on its way), or a later
    attempt's refusal. Only a ``done`` stands against a success: the effect happened, so the ledger must say
    so, and the money rule must count it."""
    return current.status in (EffectStatus.NEEDS_RECONCILIATION, EffectStatus.FAILED)


def _evolve(effect: Effect, *, history_entry: dict[str, Any], **changes: Any) -> Effect:
    history = ((*effect.history, history_entry))[-_HISTORY_LIMIT:]
    return replace(effect, history=history, **changes)


def with_outcome(
    effect: Effect,
    status: EffectStatus,
    *,
    result: dict[str, Any] | None,
    reason: str | None,
    stale: bool,
    source: str,
    resolution: dict[str, Any] | None = None,
) -> Effect:
    """``effect`` with the outcome ``status`` (``result`` or ``reason``) recorded by ``source``. ``resolution``
    (who established it, why, when) replaces the effect's only when given."""
    return _evolve(
        effect,
        status=status,
        result=result,
        reason=reason,
        stale=stale,
        resolution=resolution if resolution is not None else effect.resolution,
        history_entry={"status": status.value, "source": source, **({"reason": reason} if reason else {})},
    )


def late_done(closed: Effect, result: dict[str, Any], *, source: str) -> Effect:
    """``done`` with ``result`` over ``closed``, which someone closed without knowing that our call (by
    ``source``) succeeded (:func:`superseded_by_ignorance`): the effect happened, so the ledger must say so.
    Its history names what it replaced; raise the ``late_outcome`` alert (:func:`late_outcome_alert`) with it."""
    return _evolve(
        closed,
        status=EffectStatus.DONE,
        result=result,
        reason=f"late outcome: the call succeeded after the entry was {closed.status.value}",
        stale=False,
        watching=False,
        history_entry={"status": "done", "source": f"{source}-late", "replaced": closed.status.value},
    )


def watch_ended(watched: Effect, *, source: str) -> Effect:
    """``watched`` (``failed`` by a person) no longer looked up: its late watch ended with nothing found."""
    return _evolve(
        watched,
        watching=False,
        history_entry={"status": "failed", "source": source, "reason": "late watch ended: not found by key"},
    )


def reclaimed(effect: Effect, *, source: str) -> Effect:
    """``effect`` claimed again for a same-key retry by ``source``: its next attempt. The entry is written
    without ``changedTs``, so its clock restarts at this write (``casekeeper.core.entries``)."""
    attempts = effect.attempts + 1
    return _evolve(
        effect, attempts=attempts, history_entry={"status": "started", "attempt": attempts, "source": source}
    )


def escalated(effect: Effect, reason: str, *, source: str) -> Effect:
    """``effect`` handed to a person (``needs_reconciliation``) by ``source``, with ``reason``."""
    return _evolve(
        effect,
        status=EffectStatus.NEEDS_RECONCILIATION,
        reason=reason,
        history_entry={"status": EffectStatus.NEEDS_RECONCILIATION.value, "source": source, "reason": reason},
    )
