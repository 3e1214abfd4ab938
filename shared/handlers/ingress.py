"""HTTP ingress: verify, validate, enqueue. It does no work on the case.

Webhook signature, as Stripe's: header ``Casekeeper-Signature: t=<unix seconds>,v1=<hex>`` where the
hex is HMAC-SHA256 of ``"<t>.<raw body>"`` with the secret. Several secrets may be configured at once
(rotation); any may match; several ``v1=`` values may be sent. A timestamp more than
:data:`TOLERANCE_SECONDS` away from now is refused (replay). Comparison is constant-time.

Every request is accepted whole or refused whole with the reason; nothing is enqueued unless the
answer is 202.

=======  =================================================================
status   when
=======  =================================================================
202      enqueued
400      the JSON does not describe a valid event (each bad field named)
401      signature missing, malformed, wrong or expired
404      (approvals, reads) no such case
413      body over 256 KiB
415      not JSON
503      the queue could not be reached: nothing was enqueued, retry
=======  =================================================================
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from shared.core.clock import Clock
from shared.core.errors import InvalidEvent, QueueUnavailable
from shared.core.ids import id_problem
from shared.domain import events as ev
from shared.messaging import Envelope, EventSender, derived_message_id

SIGNATURE_HEADER = "Casekeeper-Signature"
DELIVERY_HEADER = "Casekeeper-Delivery"
MAX_BODY_BYTES = 256 * 1024
TOLERANCE_SECONDS = 300
KEY_APPROVER_PREFIX = "key:"
"""How an answer from a function-key caller (no signed-in identity) is recorded: ``key:<the name it gave>``."""


@dataclass(frozen=True)
class Response:
    status: int
    body: dict[str, Any] = field(default_factory=dict)

    def json(self) -> str:
        return json.dumps(self.body, separators=(",", ":"))


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The ``Casekeeper-Signature`` header value for ``body`` at ``timestamp``."""
    return f"t={timestamp},v1={_mac(secret, timestamp, body)}"


def _mac(secret: str, timestamp: int | str, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


class SignatureError(Exception):
    """Why a signature was refused (the 401's reason)."""


def verify(header: str | None, body: bytes, secrets: Sequence[str], now: float) -> None:
    """Raises ``SignatureError`` unless ``header`` signs ``body`` with one of ``secrets``, recently."""
    if not header:
        raise SignatureError(f"missing {SIGNATURE_HEADER} header")
    timestamp: str | None = None
    signatures: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t":
            timestamp = value
        elif name == "v1":
            signatures.append(value)
    if timestamp is None or not timestamp.isdigit() or not signatures:
        raise SignatureError(f"malformed {SIGNATURE_HEADER} header: expected t=<unix seconds>,v1=<hex>")
    if abs(now - int(timestamp)) > TOLERANCE_SECONDS:
        raise SignatureError(f"signature timestamp is more than {TOLERANCE_SECONDS}s from now (replayed or clock skew)")
    expected = [_mac(secret, timestamp, body) for secret in secrets]
    # Compare every pair, without short-circuiting on the first match, in constant time.
    matched = False
    for candidate in signatures:
        for mac in expected:
            matched |= hmac.compare_digest(candidate.encode(), mac.encode())
    if not matched:
        raise SignatureError("signature does not match")


class Ingress:
    def __init__(self, secrets: Sequence[str], sender: EventSender, clock: Clock) -> None:
        self._secrets = tuple(secrets)
        self._sender = sender
        self._clock = clock
        self._last_stamp = 0.0
        self._stamp_lock = threading.Lock()

    def _stamp(self) -> float:
        """The acceptance time of an event: the clock, but strictly after the previous stamp of this
        instance, so two events accepted here one after the other are never taken for simultaneous."""
        with self._stamp_lock:
            self._last_stamp = max(self._clock.now(), self._last_stamp + 1e-6)
            return self._last_stamp

    def accept_event(self, headers: Mapping[str, str], body: bytes) -> Response:
        """``POST /api/events``. ``headers`` must be case-insensitive (as the Functions host's are)."""
        if len(body) > MAX_BODY_BYTES:
            return _error(413, f"body is {len(body)} bytes; at most {MAX_BODY_BYTES} are accepted")
        content_type = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != "application/json":
            return _error(415, "Content-Type must be application/json")
        try:
            verify(headers.get(SIGNATURE_HEADER), body, self._secrets, self._clock.now())
        except SignatureError as exc:
            return _error(401, str(exc))
        delivery = headers.get(DELIVERY_HEADER) or ""
        if (problem := id_problem(delivery)) is not None:
            what = "is required" if not delivery else problem
            return _error(400, f"{DELIVERY_HEADER} header {what}", fields={DELIVERY_HEADER: what})
        raw = _json(body)
        if isinstance(raw, Response):
            return raw
        try:
            event = ev.parse_event(raw, allowed_types=ev.PUBLIC_TYPES, delivery_id=delivery)
        except InvalidEvent as exc:
            return _error(400, exc.reason, fields=exc.fields)
        # The order of a fact that carries no occurredAt is when it was first accepted: stamped here, once,
        # and carried unchanged by every copy of the message (docs/design.md#fact-order).
        event = replace(event, envelope=Envelope(accepted_at=self._stamp()).fields())
        # Namespaced, so a sender's delivery id can never collide with the ids Casekeeper gives its own
        # messages (approval:..., recheck:...); the same delivery still maps to the same message id.
        message_id = derived_message_id("webhook", delivery)
        return self._enqueue(event, message_id=message_id, accepted={"accepted": True, "deliveryId": delivery})

    def accept_approval(
        self,
        case_id: str,
        request_id: str,
        body: bytes,
        *,
        case_exists: Callable[[str], bool],
        principal: str | None = None,
    ) -> Response:
        """``POST /api/cases/{caseId}/approvals/{requestId}``: queued into the case's session like any event;
        the case worker decides whether it still applies (rule R6).

        Who answered is never simply what the body says. ``principal`` is the authenticated identity (App
        Service Authentication's ``X-MS-CLIENT-PRINCIPAL``, checked for the approver role by the caller):
        it is recorded, and an ``approver`` in the body must be absent or the same name. Without a principal
        the caller came in with a function key: it must name itself in ``approver`` and is recorded as
        ``key:<name>``, so a key holder can never pass for a person."""
        bad_ids = {
            name: problem
            for name, value in (("caseId", case_id), ("requestId", request_id))
            if (problem := id_problem(value)) is not None
        }
        if bad_ids:
            return _error(400, "invalid approval: " + "; ".join(f"{k} {v}" for k, v in bad_ids.items()), fields=bad_ids)
        if not case_exists(case_id):
            return _error(404, f"no case {case_id!r}")
        if len(body) > MAX_BODY_BYTES:
            return _error(413, "body too large")
        raw = _json(body)
        if isinstance(raw, Response):
            return raw
        if not isinstance(raw, Mapping):
            return _error(400, "the body must be a JSON object")
        return self.enqueue_approval(case_id, request_id, raw, principal=principal)

    def enqueue_approval(
        self, case_id: str, request_id: str, raw: Mapping[str, Any], *, principal: str | None
    ) -> Response:
        """Validate an answer (``decision``, ``caseVersion``, ``approver``, optional ``reason``) and enqueue it.
        The JSON API and the approval page both come through here; see :meth:`accept_approval` for who
        is recorded."""
        unknown = sorted(set(raw) - {"decision", "caseVersion", "approver", "reason"})
        data: dict[str, Any] = {"requestId": request_id, **{k: raw.get(k) for k in ("decision", "caseVersion")}}
        if raw.get("reason") is not None:
            data["reason"] = raw["reason"]
        named = raw.get("approver")
        try:
            if unknown:
                raise InvalidEvent("unknown fields", fields=dict.fromkeys(unknown, "unknown field"))
            if principal is not None:
                if named is not None and named != principal:
                    raise InvalidEvent(
                        "approver",
                        fields={"approver": f"is the signed-in identity ({principal}); it cannot be given as another"},
                    )
                data["approver"] = principal
            elif isinstance(named, str) and named.strip():
                data["approver"] = named if named.startswith(KEY_APPROVER_PREFIX) else KEY_APPROVER_PREFIX + named
            else:
                problems = {"approver": "is required without a signed-in identity: a function-key caller names itself"}
                # Report the other fields' problems too, as every refusal here does.
                try:
                    ev.parse_event({"type": ev.APPROVAL_ANSWERED, "caseId": case_id, "data": {**data, "approver": "x"}})
                except InvalidEvent as exc:
                    problems.update({k.removeprefix("data."): v for k, v in exc.fields.items()})
                raise InvalidEvent("approver", fields=problems)
            event = ev.parse_event({"type": ev.APPROVAL_ANSWERED, "caseId": case_id, "data": data})
        except InvalidEvent as exc:
            fields = {k.removeprefix("data."): v for k, v in exc.fields.items()}
            return _error(400, "invalid approval: " + "; ".join(f"{k} {v}" for k, v in fields.items()), fields=fields)
        # The same answer, sent twice, is the same message: the broker drops the copy.
        message_id = derived_message_id("approval", request_id, str(data["decision"]), str(data["caseVersion"]))
        return self._enqueue(
            event,
            message_id=message_id,
            accepted={"accepted": True, "requestId": request_id, "approver": data["approver"]},
        )

    def accept_withdrawal(
        self, case_id: str, effect_key: str, body: bytes, *, case_exists: Callable[[str], bool]
    ) -> Response:
        """``POST /api/cases/{caseId}/requests/{effectKey}/withdraw``: a person takes an outstanding credit-note
        request off the books, with ``{"by": ..., "why": ...}``. Queued into the case's session; the case
        worker refuses (sets aside, with the reason) a request that is not outstanding."""
        bad_ids = {
            name: problem
            for name, value in (("caseId", case_id), ("effectKey", effect_key))
            if (problem := id_problem(value)) is not None
        }
        if bad_ids:
            return _error(
                400, "invalid withdrawal: " + "; ".join(f"{k} {v}" for k, v in bad_ids.items()), fields=bad_ids
            )
        if not case_exists(case_id):
            return _error(404, f"no case {case_id!r}")
        if len(body) > MAX_BODY_BYTES:
            return _error(413, "body too large")
        raw = _json(body)
        if isinstance(raw, Response):
            return raw
        if not isinstance(raw, Mapping):
            return _error(400, "the body must be a JSON object")
        unknown = sorted(set(raw) - {"by", "why"})
        given = {k: raw[k] for k in ("by", "why") if raw.get(k) is not None}
        data = {"effectKey": effect_key, **given, "at": self._clock.now()}
        try:
            if unknown:
                raise InvalidEvent("unknown fields", fields=dict.fromkeys(unknown, "unknown field"))
            event = ev.parse_event({"type": ev.REQUEST_WITHDRAWN, "caseId": case_id, "data": data})
        except InvalidEvent as exc:
            fields = {k.removeprefix("data."): v for k, v in exc.fields.items()}
            return _error(400, "invalid withdrawal: " + "; ".join(f"{k} {v}" for k, v in fields.items()), fields=fields)
        message_id = derived_message_id("withdraw", case_id, effect_key)
        return self._enqueue(event, message_id=message_id, accepted={"accepted": True, "effectKey": effect_key})

    def _enqueue(self, event: ev.CaseEvent, *, message_id: str, accepted: dict[str, Any]) -> Response:
        try:
            self._sender.send(event, message_id=message_id)
        except QueueUnavailable as exc:
            return _error(503, f"could not enqueue, nothing was accepted; retry: {exc}")
        return Response(202, accepted)


def _json(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return _error(415, "body is not valid UTF-8 JSON")


def _error(status: int, reason: str, *, fields: Mapping[str, str] | None = None) -> Response:
    body: dict[str, Any] = {"error": reason}
    if fields:
        body["fields"] = dict(fields)
    return Response(status, body)
