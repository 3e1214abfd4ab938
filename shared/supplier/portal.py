"""The supplier portal client: requests credit notes over HTTP, idempotently, by effect key.

Every answer is translated into one of three outcomes the effect ledger understands:

- a parsed credit note (a 2xx whose JSON body has ``creditNoteId``): it happened;
- :class:`~casekeeper.core.errors.DownstreamRejected`: the portal definitely refused (any 4xx except
  408 and 429); nothing was created, and asking again with the same body will not change that;
- :class:`~casekeeper.core.errors.OutcomeUnknown`: everything else (timeout, 5xx, 408, 429, connection
  failure, a connection dropped mid-reply, a 2xx without ``creditNoteId``, a 1xx/3xx). The note may
  or may not exist: repeat the request with the **same** key, or look it up by key.

The portal de-duplicates on the ``Idempotency-Key`` header, which is why a repeat with the same key is
always safe and a fresh key never is.

**An answer is bounded.** It is read up to :data:`MAX_ANSWER_BYTES` (after content decoding, so a
compressed bomb is cut too); a longer one is an unknown outcome (the note may exist: the ledger reconciles
it by lookup, whose answer has the same bound). Of a credit note only the fields the app uses are kept
(:data:`KEPT_FIELDS`, each a string of at most :data:`MAX_FIELD_CHARS`): the effect's recorded result sits
on the case document, whose size is bounded (docs/design.md#case-bounds).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from decimal import Decimal
from types import TracebackType
from typing import Any

import httpx
from opentelemetry import propagate

from casekeeper.errors import ConfigurationError, DownstreamRejected, OutcomeUnknown
from shared import __version__
from shared.domain.money import amount_text

CREDIT_NOTES_PATH = "/credit-notes"
MAX_ANSWER_BYTES = 64 * 1024
"""The most of an answer's body that is read; a longer answer is an unknown outcome."""
KEPT_FIELDS = ("creditNoteId", "amount", "currency")
"""What the app uses of a credit note (the request's commit, the case page); anything else is dropped."""
MAX_FIELD_CHARS = 200
"""A kept field longer than this is dropped; a ``creditNoteId`` longer than this is an unknown outcome."""

# 408 and 429 say "not now", not "no": the request may be accepted later, so the outcome is open.
# Not refusals: 408 and 429 say "not now"; 409 is how many idempotency-key APIs answer a request whose
# key is still being processed by an earlier attempt, so the effect may yet happen.
_NOT_NOW_STATUSES = frozenset({408, 409, 429})
_MAX_DETAIL_CHARS = 300


class SupplierPortal:
    """HTTP client of the supplier portal. Thread-safe; one instance per process is enough.

    ``timeout`` bounds each network operation once connected (waiting for a pooled connection,
    writing the request, each read of the reply); ``connect_timeout`` (default: ``timeout``) bounds
    opening the connection. httpx applies them per operation, not per call, so a portal that answers
    in one piece is given at most about ``connect_timeout + 2 * timeout`` (write, then read). Keep
    that below the ledger's call timeout, or a slow call could outlive its claim.

    The underlying ``httpx.Client`` is created on first use and reused (connection pooling);
    :meth:`close` releases it, and a later call opens a new one. ``transport`` is for tests only.

    Raises :class:`~casekeeper.core.errors.ConfigurationError` for an unusable ``base_url`` or timeout.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 5.0,
        connect_timeout: float | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = _checked_base_url(base_url)
        connect = timeout if connect_timeout is None else connect_timeout
        if timeout <= 0 or connect <= 0:
            raise ConfigurationError(f"supplier portal timeouts must be positive (got {timeout}, {connect})")
        self.timeout = httpx.Timeout(timeout, connect=connect)
        self._transport = transport
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def request_credit_note(
        self,
        key: str,
        *,
        case_id: str,
        invoice_id: str,
        supplier_id: str,
        amount: Decimal,
        currency: str,
    ) -> dict[str, Any]:
        """Ask the supplier for a credit note; ``key`` is sent as ``Idempotency-Key``.

        Returns the credit note's kept fields, with a non-empty ``creditNoteId``. A repeat with the
        same key and body returns the same credit note and creates nothing.

        Raises:
            DownstreamRejected: a 4xx other than 408/429 (invalid body, same key with a different
                body, ...), with ``status`` and the portal's reason text. Nothing was created.
            OutcomeUnknown: a timeout, connection failure or dropped connection (``status=None``);
                a 5xx, 408, 429 or other non-2xx; or a 2xx without ``creditNoteId`` (``status`` set).
            TypeError, ValueError: ``amount`` is not a finite ``Decimal`` or ``key`` is unusable as a
                header; raised before anything is sent.
        """
        body = {
            "caseId": case_id,
            "invoiceId": invoice_id,
            "supplierId": supplier_id,
            "amount": amount_text(amount),
            "currency": currency,
        }
        headers = {"Idempotency-Key": _checked_key(key)}
        response = self._send("POST", "request credit note", headers=headers, json=body)
        if response.is_success:
            return _credit_note(response, "request credit note")
        if _is_refusal(response.status_code):
            reason = f"supplier portal refused the credit note: {_reason_text(response)}"
            raise DownstreamRejected(reason, status=response.status_code)
        raise OutcomeUnknown(
            f"supplier portal answered the credit note request with {_reason_text(response)}",
            status=response.status_code,
        )

    def find_credit_note(self, key: str) -> dict[str, Any] | None:
        """The credit note requested with ``key``, or ``None`` when the portal has none (a 404).

        Raises:
            OutcomeUnknown: the lookup failed (timeout, connection failure, any status other than
                2xx/404, a 2xx without ``creditNoteId``): the portal's state is still unknown.
            ValueError: ``key`` is empty or not printable ASCII; raised before anything is sent.
        """
        params = {"idempotencyKey": _checked_key(key)}
        response = self._send("GET", "look up credit note", params=params)
        if response.status_code == 404:
            return None
        if response.is_success:
            return _credit_note(response, "look up credit note")
        raise OutcomeUnknown(f"supplier portal lookup answered {_reason_text(response)}", status=response.status_code)

    def close(self) -> None:
        """Release pooled connections. Idempotent; a later call opens a new client."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> SupplierPortal:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SupplierPortal({self.base_url!r})"

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(
                    base_url=self.base_url,
                    timeout=self.timeout,
                    transport=self._transport,
                    headers={"Accept": "application/json", "User-Agent": f"casekeeper/{__version__}"},
                    # A redirect is not an answer: following it could repeat a POST somewhere else.
                    follow_redirects=False,
                )
            return self._client

    def _send(self, method: str, action: str, *, headers: dict[str, str] | None = None, **kwargs: Any) -> _Answer:
        """One HTTP exchange, its body read up to :data:`MAX_ANSWER_BYTES`; every transport failure, and an
        answer over the bound, becomes ``OutcomeUnknown``.

        The current trace context goes along as ``traceparent`` (OpenTelemetry's propagator), so the
        supplier's side of the call is part of the case event's trace. Where httpx is instrumented (Azure
        Monitor's distro does it), the instrumentation replaces it with its client span's, in the same trace.
        """
        headers = dict(headers or {})
        propagate.inject(headers)
        try:
            with self._http().stream(method, CREDIT_NOTES_PATH, headers=headers, **kwargs) as response:
                return _Answer(response.status_code, response.reason_phrase, _bounded_body(response, action))
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            # Nothing was sent, but the caller keeps the same key either way, so "unknown" stays safe.
            raise OutcomeUnknown(
                f"{action}: could not connect to the supplier portal ({type(exc).__name__}: {exc})"
            ) from exc
        except httpx.TimeoutException as exc:
            raise OutcomeUnknown(f"{action}: supplier portal timed out ({type(exc).__name__})") from exc
        except httpx.RequestError as exc:
            raise OutcomeUnknown(
                f"{action}: connection to the supplier portal failed ({type(exc).__name__}: {exc})"
            ) from exc


@dataclass(frozen=True)
class _Answer:
    """The portal's answer: its status and its body as read (at most :data:`MAX_ANSWER_BYTES`)."""

    status_code: int
    reason_phrase: str
    content: bytes

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


def _bounded_body(response: httpx.Response, action: str) -> bytes:
    """The body of ``response``, or ``OutcomeUnknown`` as soon as it is known to pass :data:`MAX_ANSWER_BYTES`
    (declared so, or read so): the rest is never read."""
    declared = response.headers.get("Content-Length", "")
    too_long = OutcomeUnknown(
        f"{action}: the portal's answer ({response.status_code}) is over {MAX_ANSWER_BYTES} bytes; not read",
        status=response.status_code,
    )
    if declared.isascii() and declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
        raise too_long
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            raise too_long
    return bytes(body)


def _checked_base_url(base_url: str) -> str:
    try:
        url = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ConfigurationError(f"supplier portal URL {base_url!r} is invalid: {exc}") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigurationError(f"supplier portal URL {base_url!r} needs an http(s) scheme and a host")
    return str(url)


def _checked_key(key: str) -> str:
    # A header value with control characters would be refused by httpx mid-call or, worse, split.
    if not key or not key.isascii() or not key.isprintable() or key != key.strip():
        raise ValueError(f"idempotency key must be non-empty printable ASCII without padding, got {key!r}")
    return key


def _is_refusal(status: int) -> bool:
    return 400 <= status < 500 and status not in _NOT_NOW_STATUSES


def _credit_note(response: _Answer, action: str) -> dict[str, Any]:
    """The kept fields (:data:`KEPT_FIELDS`) of a 2xx's JSON object; without a usable ``creditNoteId`` we
    cannot tell what the portal did."""
    status = response.status_code
    data = _json_or_none(response)
    if not isinstance(data, dict):
        raise OutcomeUnknown(f"{action}: the portal answered {status} without a JSON object", status=status)
    note_id = data.get("creditNoteId")
    if not isinstance(note_id, str) or not note_id:
        raise OutcomeUnknown(f"{action}: the portal answered {status} without a creditNoteId", status=status)
    if len(note_id) > MAX_FIELD_CHARS:
        raise OutcomeUnknown(
            f"{action}: the portal answered {status} with a creditNoteId of {len(note_id)} characters "
            f"(at most {MAX_FIELD_CHARS} are kept)",
            status=status,
        )
    return {
        name: value
        for name in KEPT_FIELDS
        if isinstance(value := data.get(name), str) and len(value) <= MAX_FIELD_CHARS
    }


def _reason_text(response: _Answer) -> str:
    """``"<status> <phrase>: <portal's reason>"`` from a JSON error body, or the start of its text."""
    head = f"{response.status_code} {response.reason_phrase}".strip()
    detail = _json_detail(_json_or_none(response)) or response.text
    detail = " ".join(detail.split())[:_MAX_DETAIL_CHARS]
    return f"{head}: {detail}" if detail else head


def _json_detail(data: Any) -> str:
    if not isinstance(data, dict):
        return ""
    texts = [data.get(name) for name in ("error", "message", "detail", "title")]
    return ": ".join(text for text in texts if isinstance(text, str) and text)


def _json_or_none(response: _Answer) -> Any:
    try:
        return response.json()
    except ValueError:  # includes JSONDecodeError and UnicodeDecodeError
        return None
