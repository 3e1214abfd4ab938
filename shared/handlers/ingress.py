"""HTTP ingress: verify, validate, enqueue. It does no work on the case.

Webhook signature, after Stripe's: header ``Casekeeper-Signature: t=<unix seconds>,v2=<hex>`` where the
hex is HMAC-SHA256 of ``"<t>.<delivery id>\n<raw body>"`` with the secret (the delivery id is the
``Casekeeper-Delivery`` header; ids never hold a line break, so the message reads one way only). Several
secrets may be configured at once (rotation); any may match; several ``v2=`` values may be sent. A
timestamp more than :data:`TOLERANCE_SECONDS` away from now is refused. Comparison is constant-time.

Because the delivery id is signed, a captured delivery cannot be replayed under another id (the broker's
duplicate detection drops a replay under its own id, for longer than the tolerance), and nobody without
the secret can take a delivery id the sender will use later (docs/design.md#signed-delivery).

Every request is accepted whole or refused whole with the reason; nothing is enqueued unless the
answer is 202.

=======  =================================================================
status   when
=======  =================================================================
202      enqueued
400      the JSON does not describe a valid event (each bad field named); a ``data.occurredAt`` more
         than ``FUTURE_SKEW_SECONDS`` ahead of the store's clock (the limit named)
401      signature missing, malformed, wrong or expired
404      (approvals, reads) no such case
409      a delivery id already accepted with another body; (approvals) an unknown request, a request no
         longer pending, an answer on another version, or a request already answered otherwise
         (``shared.handlers.door``)
413      body over 256 KiB
415      not JSON
503      the queue, or the store that remembers deliveries and answers, could not be reached, or not within
         the door's budget (``shared.handlers.door``): nothing was enqueued, retry after ``Retry-After``
=======  =================================================================

Every answer comes within ``door.ANSWER_SECONDS`` (5 s): see ``shared.handlers.door`` for the budget.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from casekeeper import Case, Clock, DocumentStore, StoreError, StoreUnavailable
from casekeeper.cases import CaseRepository
from casekeeper.stores import id_problem
from shared.domain import events as ev
from shared.errors import InvalidEvent, QueueUnavailable
from shared.handlers import door
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
    headers: dict[str, str] = field(default_factory=dict)
    """Headers of the answer besides its content type (``Retry-After`` on a 503)."""

    def json(self) -> str:
        return json.dumps(self.body, separators=(",", ":"))


def sign(secret: str, body: bytes, timestamp: int, delivery_id: str) -> str:
    """The ``Casekeeper-Signature`` header value for ``body``, delivered as ``delivery_id``, at ``timestamp``."""
    return f"t={timestamp},v2={_mac_v2(secret, timestamp, delivery_id, body)}"


def _mac_v2(secret: str, timestamp: int | str, delivery_id: str, body: bytes) -> str:
    message = f"{timestamp}.{delivery_id}\n".encode() + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


class SignatureError(Exception):
    """Why a signature was refused (the 401's reason)."""


_MAX_TIMESTAMP_DIGITS = 12


def verify(
    header: str | None,
    body: bytes,
    secrets: Sequence[str],
    now: float,
    *,
    delivery_id: str,
) -> None:
    """Raises ``SignatureError`` unless ``header`` signs ``body`` as ``delivery_id`` with one of ``secrets``,
    recently."""
    if not header:
        raise SignatureError(f"missing {SIGNATURE_HEADER} header")
    timestamp: str | None = None
    v2: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t":
            timestamp = value
        elif name == "v2":
            v2.append(value)
    # ASCII digits only: str.isdigit() also admits "²", which int() then refuses.
    if (
        timestamp is None
        or not (timestamp.isascii() and timestamp.isdigit())
        or len(timestamp) > _MAX_TIMESTAMP_DIGITS
        or not v2
    ):
        raise SignatureError(f"malformed {SIGNATURE_HEADER} header: expected t=<unix seconds>,v2=<hex>")
    if abs(now - int(timestamp)) > TOLERANCE_SECONDS:
        raise SignatureError(f"signature timestamp is more than {TOLERANCE_SECONDS}s from now (replayed or clock skew)")
    pairs = [(given, _mac_v2(secret, timestamp, delivery_id, body)) for given in v2 for secret in secrets]
    # Compare every pair, without short-circuiting on the first match, in constant time.
    matched = False
    for candidate, mac in pairs:
        matched |= hmac.compare_digest(candidate.encode(), mac.encode())
    if not matched:
        raise SignatureError("signature does not match")


class Deadline:
    """One request's share of the door's budget (``door.DOOR_BUDGET_SECONDS``, from when it was made): a step
    is started only if it, and the steps that must follow it, fit what is left."""

    def __init__(self, monotonic: Callable[[], float], budget: float = door.DOOR_BUDGET_SECONDS) -> None:
        self._monotonic = monotonic
        self._end = monotonic() + budget
        self.budget = budget

    def require(self, seconds: float, what: str) -> None:
        """Raises ``StoreUnavailable`` (nothing started) unless ``seconds`` are left for ``what``."""
        if self._monotonic() + seconds > self._end:
            raise StoreUnavailable(
                f"the door's budget of {self.budget:g}s would be spent before {what} could finish; "
                "nothing more was done"
            )


class _Budgeted:
    """The door's store as one request uses it: each call is started only while it and the queue send after
    it fit the request's :class:`Deadline` (the call's own bound is the store's: ``door.STORE_CALL_SECONDS``)."""

    def __init__(self, store: DocumentStore, deadline: Deadline) -> None:
        self._store = store
        self._deadline = deadline

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            self._deadline.require(door.STORE_CALL_SECONDS + door.SEND_SECONDS, f"a store call ({name})")
            return attribute(*args, **kwargs)

        return call


class Ingress:
    def __init__(
        self,
        secrets: Sequence[str],
        sender: EventSender,
        clock: Clock,
        *,
        store: DocumentStore | None = None,
        future_skew: float = door.DEFAULT_FUTURE_SKEW,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``store``: where the door remembers delivery ids and approval answers and reads the case an answer
        is for (``shared.handlers.door``), and whose clock stamps each event's acceptance; without one,
        neither is checked (tests of the signature and the queue alone). The door's store and ``sender``
        should be opened with the door's short budgets (``shared.app.bootstrap.open_door_store``,
        ``open_door_sender``). ``future_skew``: ``FUTURE_SKEW_SECONDS``, how far ahead of the store's clock an
        ``occurredAt`` may be. ``monotonic``: what the request's :class:`Deadline` is measured by."""
        self._secrets = tuple(secrets)
        self._sender = sender
        self._clock = clock
        self._store = store
        self._future_skew = future_skew
        self._monotonic = monotonic

    @property
    def store(self) -> DocumentStore | None:
        """The door's store (its owner closes it)."""
        return self._store

    @property
    def sender(self) -> EventSender:
        """The door's queue sender (its owner closes it)."""
        return self._sender

    def deadline(self) -> Deadline:
        """A request's share of the door's budget, from now."""
        return Deadline(self._monotonic)

    def _door_store(self, deadline: Deadline) -> DocumentStore:
        assert self._store is not None
        return cast(DocumentStore, _Budgeted(self._store, deadline))

    def find_case(self, case_id: str, deadline: Deadline | None = None) -> Case | None:
        """The case, read through the door's store within ``deadline`` (a new one without it). Raises
        ``StoreError`` when it cannot be read in time; without a door store, answers ``None``."""
        if self._store is None:
            return None
        store = self._door_store(deadline or self.deadline())
        return CaseRepository(store, self._clock).get(case_id)

    def accept_event(self, headers: Mapping[str, str], body: bytes) -> Response:
        """``POST /api/events``. ``headers`` must be case-insensitive (as the Functions host's are)."""
        deadline = self.deadline()
        if len(body) > MAX_BODY_BYTES:
            return _error(413, f"body is {len(body)} bytes; at most {MAX_BODY_BYTES} are accepted")
        content_type = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != "application/json":
            return _error(415, "Content-Type must be application/json")
        delivery = headers.get(DELIVERY_HEADER) or ""
        try:
            verify(
                headers.get(SIGNATURE_HEADER),
                body,
                self._secrets,
                self._clock.now(),
                delivery_id=delivery,
            )
        except SignatureError as exc:
            return _error(401, str(exc))
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
        # Namespaced, so a sender's delivery id can never collide with the ids Casekeeper gives its own
        # messages (approval:..., recheck:...); the same delivery still maps to the same message id.
        message_id = derived_message_id("webhook", delivery)
        occurred = event.data.get("occurredAt")
        occurred_at = occurred if isinstance(occurred, str) else None
        if self._store is None:
            # No store, no store clock (tests of the signature and the queue alone): the ingress's clock
            # stands in, and no digest travels.
            envelope = Envelope(accepted_at=self._clock.now())
        else:
            try:
                seen = door.check_delivery(
                    self._door_store(deadline),
                    delivery,
                    raw,
                    case_id=event.case_id,
                    event_type=event.type,
                    at=self._clock.now(),
                    occurred_at=occurred_at,
                    future_skew=self._future_skew,
                )
            except StoreError as exc:
                return _unavailable(f"could not record the delivery, nothing was accepted; retry: {exc}")
            if seen.status == 409:
                return _error(409, seen.refusal or "", fields={DELIVERY_HEADER: "already used with another body"})
            if seen.status is not None:
                return _error(seen.status, seen.refusal or "", fields={"data.occurredAt": seen.refusal or ""})
            # The order of a fact that carries no occurredAt is when it was first accepted, by the store's
            # clock at the door's record (docs/design.md#fact-order): one clock for every ingress instance,
            # carried unchanged by every copy of the message. A delivery posted again keeps its first stamp.
            # The body's digest goes with it: the case judges the delivery id by it (shared.handlers.door).
            envelope = Envelope(accepted_at=seen.accepted_at, body_sha256=seen.digest)
        event = replace(event, envelope=envelope.fields())
        return self._enqueue(
            event, message_id=message_id, accepted={"accepted": True, "deliveryId": delivery}, deadline=deadline
        )

    def accept_approval(
        self,
        case_id: str,
        request_id: str,
        body: bytes,
        *,
        find_case: Callable[[str], Case | None] | None = None,
        principal: str | None = None,
        principal_name: str | None = None,
    ) -> Response:
        """``POST /api/cases/{caseId}/approvals/{requestId}``: queued into the case's session like any event;
        the case worker decides whether it still applies (rule R6). ``find_case``: how the case is read
        (default: :meth:`find_case`, the door's store within the request's budget).

        Who answered is never simply what the body says. ``principal`` is the authenticated identity as it
        is recorded (``Principal.recorded``: display name and object id; checked for the approver role by
        the caller), and an ``approver`` in the body must be absent, that, or ``principal_name`` (the
        display name). Without a principal the caller came in with a function key: it must name itself in
        ``approver`` and is recorded as ``key:<name>``, so a key holder can never pass for a person."""
        bad_ids = {
            name: problem
            for name, value in (("caseId", case_id), ("requestId", request_id))
            if (problem := id_problem(value)) is not None
        }
        if bad_ids:
            return _error(400, "invalid approval: " + "; ".join(f"{k} {v}" for k, v in bad_ids.items()), fields=bad_ids)
        deadline = self.deadline()
        try:
            case = find_case(case_id) if find_case is not None else self.find_case(case_id, deadline)
        except StoreError as exc:
            return _unavailable(f"could not read the case, nothing was accepted; retry: {exc}")
        if case is None:
            return _error(404, f"no case {case_id!r}")
        if len(body) > MAX_BODY_BYTES:
            return _error(413, "body too large")
        raw = _json(body)
        if isinstance(raw, Response):
            return raw
        if not isinstance(raw, Mapping):
            return _error(400, "the body must be a JSON object")
        return self.enqueue_approval(
            case_id, request_id, raw, principal=principal, principal_name=principal_name, case=case, deadline=deadline
        )

    def enqueue_approval(
        self,
        case_id: str,
        request_id: str,
        raw: Mapping[str, Any],
        *,
        principal: str | None,
        principal_name: str | None = None,
        case: Case | None = None,
        deadline: Deadline | None = None,
    ) -> Response:
        """Validate an answer (``decision``, ``caseVersion``, ``approver``, optional ``reason``) and enqueue it.
        The JSON API and the approval page both come through here; see :meth:`accept_approval` for who
        is recorded. ``case``: the case as this request just read it (not read again at the door).
        ``deadline``: the request's budget, if it started before (a new one without it)."""
        deadline = deadline or self.deadline()
        unknown = sorted(set(raw) - {"decision", "caseVersion", "approver", "reason"})
        data: dict[str, Any] = {"requestId": request_id, **{k: raw.get(k) for k in ("decision", "caseVersion")}}
        if raw.get("reason") is not None:
            data["reason"] = raw["reason"]
        named = raw.get("approver")
        try:
            if unknown:
                raise InvalidEvent("unknown fields", fields=dict.fromkeys(unknown, "unknown field"))
            if principal is not None:
                if named is not None and named not in (principal, principal_name):
                    raise InvalidEvent(
                        "approver",
                        fields={"approver": f"is the signed-in identity ({principal}); it cannot be given as another"},
                    )
                data["approver"] = principal
            elif isinstance(named, str) and named.removeprefix(KEY_APPROVER_PREFIX).strip():
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
        refused = self._close_request(case_id, request_id, data, case, deadline)
        if refused is not None:
            return refused
        # The same answer, sent twice, is the same message: the broker drops the copy.
        message_id = derived_message_id("approval", request_id, str(data["decision"]), str(data["caseVersion"]))
        return self._enqueue(
            event,
            message_id=message_id,
            accepted={"accepted": True, "requestId": request_id, "approver": data["approver"]},
            deadline=deadline,
        )

    def accept_withdrawal(
        self,
        case_id: str,
        effect_key: str,
        body: bytes,
        *,
        case_exists: Callable[[str], bool] | None = None,
        principal: str | None = None,
        principal_name: str | None = None,
    ) -> Response:
        """``POST /api/cases/{caseId}/requests/{effectKey}/withdraw``: a person takes an outstanding credit-note
        request off the books, with ``{"why": ...}``. Queued into the case's session; the case worker
        refuses (sets aside, with the reason) a request that is not outstanding.

        Who withdrew is recorded as for approvals (:meth:`accept_approval`): the signed-in ``principal``
        (its role checked by the caller), a ``by`` in the body being absent or naming the same person; or,
        for a function-key caller, ``key:<the by it gives>``."""
        bad_ids = {
            name: problem
            for name, value in (("caseId", case_id), ("effectKey", effect_key))
            if (problem := id_problem(value)) is not None
        }
        if bad_ids:
            return _error(
                400, "invalid withdrawal: " + "; ".join(f"{k} {v}" for k, v in bad_ids.items()), fields=bad_ids
            )
        deadline = self.deadline()
        try:
            exists = case_exists(case_id) if case_exists is not None else self.find_case(case_id, deadline) is not None
        except StoreError as exc:
            return _unavailable(f"could not read the case, nothing was accepted; retry: {exc}")
        if not exists:
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
        named = raw.get("by")
        try:
            if unknown:
                raise InvalidEvent("unknown fields", fields=dict.fromkeys(unknown, "unknown field"))
            if principal is not None:
                if named is not None and named not in (principal, principal_name):
                    raise InvalidEvent(
                        "by", fields={"by": f"is the signed-in identity ({principal}); it cannot be given as another"}
                    )
                data["by"] = principal
            elif isinstance(named, str) and named.removeprefix(KEY_APPROVER_PREFIX).strip():
                data["by"] = named if named.startswith(KEY_APPROVER_PREFIX) else KEY_APPROVER_PREFIX + named
            else:
                raise InvalidEvent(
                    "by", fields={"by": "is required without a signed-in identity: a function-key caller names itself"}
                )
            event = ev.parse_event({"type": ev.REQUEST_WITHDRAWN, "caseId": case_id, "data": data})
        except InvalidEvent as exc:
            fields = {k.removeprefix("data."): v for k, v in exc.fields.items()}
            return _error(400, "invalid withdrawal: " + "; ".join(f"{k} {v}" for k, v in fields.items()), fields=fields)
        message_id = derived_message_id("withdraw", case_id, effect_key)
        return self._enqueue(
            event,
            message_id=message_id,
            accepted={"accepted": True, "effectKey": effect_key, "by": data["by"]},
            deadline=deadline,
        )

    def _close_request(
        self, case_id: str, request_id: str, data: Mapping[str, Any], case: Case | None, deadline: Deadline
    ) -> Response | None:
        """One answer per request: refuse (409, with the reason) what the door can already tell will not
        count, then record this answer as the request's first, unless that one was already recorded. What
        only the case worker can know later is set aside there, with the reason."""
        if self._store is None:
            return None
        store = self._door_store(deadline)
        try:
            if door.recorded_answer(store, request_id) is None:
                # The door's refusals are only early answers: the case worker checks the version again.
                if case is None or case.id != case_id:
                    case = CaseRepository(store, self._clock).get(case_id)
                if case is None:
                    return _error(404, f"no case {case_id!r}")
                reason = door.answer_refusal(case, request_id, int(data["caseVersion"]))
                if reason is not None:
                    return _error(409, reason)
            reason = door.claim_answer(store, case_id, request_id, data)
        except StoreError as exc:
            return _unavailable(f"could not record the answer, nothing was accepted; retry: {exc}")
        return _error(409, reason) if reason is not None else None

    def _enqueue(
        self, event: ev.CaseEvent, *, message_id: str, accepted: dict[str, Any], deadline: Deadline
    ) -> Response:
        """Send the event (within ``door.SEND_SECONDS``, the door sender's own budget): 202 once it is enqueued.
        A send that fails or is not started for want of time answers 503; one that failed late may still have
        landed, and the sender's retry is the same message id, which the broker drops."""
        try:
            deadline.require(door.SEND_SECONDS, "the queue send")
            self._sender.send(event, message_id=message_id)
        except (QueueUnavailable, StoreUnavailable) as exc:
            return _unavailable(f"could not enqueue, nothing was accepted; retry: {exc}")
        return Response(202, accepted)


def _json(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return _error(415, "body is not valid UTF-8 JSON")
    except RecursionError:  # "[[[[...": nested deeper than the parser's recursion allows
        return _error(400, "the JSON is nested too deeply")


def _unavailable(reason: str) -> Response:
    """503: nothing was accepted; the sender is told when to try again."""
    return Response(503, {"error": reason}, {"Retry-After": str(door.RETRY_AFTER_SECONDS)})


def _error(status: int, reason: str, *, fields: Mapping[str, str] | None = None) -> Response:
    body: dict[str, Any] = {"error": reason}
    if fields:
        body["fields"] = dict(fields)
    return Response(status, body)
