"""A local supplier portal on the standard library, for trying Casekeeper out and for tests.

The portal API it implements (amounts are decimal strings, never JSON numbers):

- ``POST /credit-notes`` with ``Idempotency-Key`` and ``{"caseId", "invoiceId", "supplierId", "amount",
  "currency"}``: 201 with the new note; 200 with the same note for a repeat of the key with an equal body
  (amounts compared as decimals); 422 for the key with a different body; 400 for a missing key or an
  invalid body.
- ``GET /credit-notes?idempotencyKey=K``: 200 with the note, or 404.

Control endpoints for tests (recorded like any request, never touching notes):

- ``GET /_control/requests`` (optionally ``?method=POST&path=/credit-notes``): the recorded requests;
- ``GET /_control/notes``: the credit notes, in creation order;
- ``GET /_control/faults`` and ``POST /_control/faults``: read or replace the fault set (:class:`Faults`);
  a POST replaces every fault, so ``{}`` clears them.

Every request is recorded in memory and, with a log path, appended to the log as one JSON line, flushed
before the reply is sent, so another process can count requests after this one is killed. A record that
created a note carries the note: a stub started on an existing log reloads its notes (state is derived
from the log), and continues the ``CN-000001`` numbering. One log serves one stub at a time. A record keeps
the request's ``traceparent`` header (``None`` without one): which trace the caller was in.

From a shell: ``casekeeper supplier-stub --port 8765 --log supplier.jsonl`` prints its URL on
stdout, then one line per request on stderr.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO, cast
from urllib.parse import parse_qs, urlsplit

NOTES_PATH = "/credit-notes"
CONTROL_PREFIX = "/_control/"
DEFAULT_PORT = 8765  # SUPPLIER_PORTAL_URL's default
MAX_BODY_BYTES = 1_000_000
NOTE_FIELDS = ("caseId", "invoiceId", "supplierId", "amount", "currency")

_TEXT_FIELDS = ("caseId", "invoiceId", "supplierId")
_AMOUNT = re.compile(r"[0-9]+(\.[0-9]+)?")
_CURRENCY = re.compile(r"[A-Z]{3}")
_NOTE_ID = re.compile(r"CN-([0-9]+)")
_POLL_SECONDS = 0.05  # how quickly stop() is noticed by the accept loop

log = logging.getLogger("casekeeper.supplier.stub")


@dataclass
class Faults:
    """Injected misbehaviour of ``POST /credit-notes`` and ``GET /credit-notes``.

    Counters count down, one per POST they apply to; the other faults hold until changed.

    - ``fail_before_create``: the next N POSTs answer 503 and create nothing.
    - ``reject``: the next N POSTs answer 422 and create nothing.
    - ``fail_after_create``: the next N valid POSTs create (or find) the note, then answer 503.
    - ``drop_after_create``: the next N valid POSTs create the note, then close the connection unanswered.
    - ``hold_seconds``: every POST's reply is held this long after the note is created and logged, so
      the caller can time out or be killed meanwhile. Stopping the stub drops held replies unanswered.
    - ``lookup_down``: ``GET /credit-notes`` answers 503.
    - ``lookup_hold_seconds``: every lookup's reply is held this long (a slow supplier).
    - ``pad_answer_bytes``: every POST's answer carries an ``attachment`` field of this many bytes besides
      the note (a supplier that sends its PDF inline); lookups answer without it.

    Raises ``ValueError`` for a negative or non-numeric value.
    """

    hold_seconds: float = 0.0
    fail_before_create: int = 0
    reject: int = 0
    fail_after_create: int = 0
    drop_after_create: int = 0
    lookup_down: bool = False
    lookup_hold_seconds: float = 0.0
    pad_answer_bytes: int = 0

    def __post_init__(self) -> None:
        for spec in fields(self):
            _check_fault(spec.name, getattr(self, spec.name))
        self.hold_seconds = float(self.hold_seconds)
        self.lookup_hold_seconds = float(self.lookup_hold_seconds)

    @classmethod
    def from_json(cls, data: Any) -> Faults:
        """Faults from a JSON object; unknown names are a ``ValueError`` (a typo must not pass silently)."""
        if not isinstance(data, dict):
            raise ValueError("faults must be a JSON object")
        known = {spec.name for spec in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown faults {unknown}; known: {sorted(known)}")
        return cls(**data)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _check_fault(name: str, value: Any) -> None:
    if name == "lookup_down":
        if not isinstance(value, bool):
            raise ValueError("lookup_down must be true or false")
    elif name in ("hold_seconds", "lookup_hold_seconds"):
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if not numeric or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a non-negative number")
    elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer")


@dataclass(frozen=True)
class _Request:
    """One parsed HTTP request."""

    method: str
    path: str
    query: dict[str, str]
    key: str | None  # the Idempotency-Key header
    raw: bytes | None  # None: longer than MAX_BODY_BYTES, left unread
    json: Any = None
    json_ok: bool = False
    traceparent: str | None = None  # the W3C trace context header, as sent

    @classmethod
    def parse(
        cls, method: str, target: str, key: str | None, raw: bytes | None, traceparent: str | None = None
    ) -> _Request:
        split = urlsplit(target)
        query = {name: values[-1] for name, values in parse_qs(split.query).items()}
        if not raw:
            return cls(method, split.path, query, key, raw, traceparent=traceparent)
        try:
            parsed = json.loads(raw)
        except ValueError:  # not JSON, or not UTF-8
            return cls(method, split.path, query, key, raw, traceparent=traceparent)
        return cls(method, split.path, query, key, raw, parsed, json_ok=True, traceparent=traceparent)

    def logged_body(self) -> Any:
        """The body as the caller sent it: parsed JSON (so a number stays a number), else text."""
        if self.json_ok:
            return self.json
        return self.raw.decode("utf-8", "replace") if self.raw else None


@dataclass(frozen=True)
class _Reply:
    """What the stub decided to answer, and what that answer did."""

    status: int
    body: Any
    note: dict[str, Any] | None = None  # the note this request created or found
    created: bool = False
    faults: tuple[str, ...] = ()
    hold: float = 0.0
    drop: bool = False


def _error(status: int, code: str, message: str, *faults: str) -> _Reply:
    return _Reply(status, {"error": code, "message": message}, faults=faults)


class _BadRequestError(ValueError):
    """A credit note request the API refuses with 400."""


class SupplierStub:
    """An in-process supplier portal: ``SupplierStub(port=0).start()``, then ``.url``, then ``.stop()``.

    ``port=0`` picks a free port. ``log_path``: the JSON-lines request log, reloaded when it exists.
    ``faults``: the initial :class:`Faults`. ``echo``: print one line per request to stderr.
    Construction reads the log (``OSError`` if unreadable); ``start`` and ``serve_forever`` bind
    the port (``OSError`` if taken).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        log_path: Path | None = None,
        *,
        faults: Faults | None = None,
        echo: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.log_path = Path(log_path) if log_path is not None else None
        self._faults = replace(faults) if faults is not None else Faults()
        self._echo = echo
        self._lock = threading.Lock()
        self._notes: dict[str, dict[str, Any]] = {}  # by idempotency key, in creation order
        self._requests: list[dict[str, Any]] = []
        self._next_number = 1
        self._log: TextIO | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._looping = False
        self._stopping = threading.Event()
        if self.log_path is not None and self.log_path.exists():
            self._reload(self.log_path)

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> SupplierStub:
        """Bind and serve on a background (daemon) thread; returns ``self``."""
        server = self._open()
        self._looping = True  # set before the thread runs, so an early stop() still shuts the loop down
        self._thread = threading.Thread(
            target=server.serve_forever, args=(_POLL_SECONDS,), name="supplier-stub", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self, ready: Callable[[str], None] | None = None) -> None:
        """Bind and serve on this thread until :meth:`stop` (from another thread) or Ctrl-C.

        ``ready`` is called with the URL once the port is bound.
        """
        server = self._open()
        self._looping = True
        try:
            if ready is not None:
                ready(self.url)
            server.serve_forever(_POLL_SECONDS)
        finally:
            self._looping = False
            self._close()

    def stop(self) -> None:
        """Stop serving and close the log. Held replies are dropped unanswered. Idempotent."""
        self._stopping.set()
        server, thread = self._server, self._thread
        if server is not None and self._looping:
            server.shutdown()
        if thread is not None:
            thread.join(timeout=5.0)
            self._thread = None
        self._looping = False
        self._close()

    @property
    def url(self) -> str:
        """``http://host:port`` of the bound server; ``RuntimeError`` before it is started."""
        server = self._server
        if server is None:
            raise RuntimeError("supplier stub is not started")
        host, port = server.server_address[:2]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{port}"

    def __enter__(self) -> SupplierStub:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- inspection and control (the same as the /_control/ endpoints) ------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The requests this process recorded, oldest first (a reloaded log's requests are not here)."""
        with self._lock:
            return copy.deepcopy(self._requests)

    @property
    def notes(self) -> list[dict[str, Any]]:
        """The credit notes, in creation order, including those reloaded from the log."""
        with self._lock:
            return copy.deepcopy(list(self._notes.values()))

    @property
    def faults(self) -> Faults:
        """A copy of the current faults (counters as they stand now)."""
        with self._lock:
            return replace(self._faults)

    def set_faults(self, faults: Faults) -> None:
        """Replace every fault; ``Faults()`` clears them."""
        with self._lock:
            self._faults = replace(faults)

    # --- request handling (called by the handler threads) --------------------------------------

    def _dispatch(
        self, method: str, target: str, key: str | None, raw: bytes | None, traceparent: str | None = None
    ) -> _Reply:
        request = _Request.parse(method, target, key, raw, traceparent)
        # One critical section for the decision and its record: the log's order is the state's order.
        with self._lock:
            reply = self._route(request)
            record = self._record(request, reply)
        if self._echo:
            print(_echo_line(record), file=sys.stderr, flush=True)
        return reply

    def _hold(self, seconds: float) -> bool:
        """Wait ``seconds``; ``True`` when the stub is stopping (the reply must then be dropped)."""
        return self._stopping.wait(seconds)

    def _route(self, request: _Request) -> _Reply:
        if request.raw is None:
            return _error(413, "too_large", f"bodies are limited to {MAX_BODY_BYTES} bytes")
        if request.path == NOTES_PATH:
            if request.method == "POST":
                return self._post_note(request)
            if request.method == "GET":
                return self._get_note(request)
            return _error(405, "method_not_allowed", f"{request.method} {NOTES_PATH} is not supported")
        if request.path.startswith(CONTROL_PREFIX):
            return self._control(request)
        return _error(404, "not_found", f"no such resource: {request.path}")

    def _post_note(self, request: _Request) -> _Reply:
        refused = self._fault_before_create()
        if refused is not None:
            return refused
        if not request.key:
            return _error(400, "missing_idempotency_key", "the Idempotency-Key header is required")
        try:
            wanted = _note_fields(request)
        except _BadRequestError as exc:
            return _error(400, "invalid_body", str(exc))
        existing = self._notes.get(request.key)
        if existing is None:
            note = self._create(request.key, wanted)
            return self._faults_after_create(_Reply(201, note, note=note, created=True))
        if not _same_request(existing, wanted):
            note_id = existing["creditNoteId"]
            reused = f"Idempotency-Key {request.key!r} was already used with a different body ({note_id})"
            return _error(422, "idempotency_key_reused", reused)
        return self._faults_after_create(_Reply(200, existing, note=existing))

    def _fault_before_create(self) -> _Reply | None:
        if self._faults.fail_before_create > 0:
            self._faults.fail_before_create -= 1
            return _error(503, "unavailable", "injected fault: fail_before_create", "fail_before_create")
        if self._faults.reject > 0:
            self._faults.reject -= 1
            return _error(422, "rejected", "injected fault: reject", "reject")
        return None

    def _faults_after_create(self, reply: _Reply) -> _Reply:
        if self._faults.fail_after_create > 0:
            self._faults.fail_after_create -= 1
            failed = _error(503, "unavailable", "injected fault: fail_after_create", "fail_after_create")
            reply = replace(failed, note=reply.note, created=reply.created)
        elif self._faults.drop_after_create > 0:
            self._faults.drop_after_create -= 1
            reply = replace(reply, drop=True, faults=("drop_after_create",))
        if self._faults.pad_answer_bytes > 0 and isinstance(reply.body, dict):
            padded = {**reply.body, "attachment": "x" * self._faults.pad_answer_bytes}
            reply = replace(reply, body=padded, faults=(*reply.faults, "pad_answer_bytes"))
        if self._faults.hold_seconds > 0:
            reply = replace(reply, hold=self._faults.hold_seconds, faults=(*reply.faults, "hold_seconds"))
        return reply

    def _get_note(self, request: _Request) -> _Reply:
        if self._faults.lookup_down:
            return _error(503, "unavailable", "injected fault: lookup_down", "lookup_down")
        key = request.query.get("idempotencyKey")
        if not key:
            return _error(400, "missing_idempotency_key", "the idempotencyKey query parameter is required")
        note = self._notes.get(key)
        reply = (
            _Reply(200, note, note=note)
            if note is not None
            else _error(404, "not_found", f"no credit note for Idempotency-Key {key!r}")
        )
        if self._faults.lookup_hold_seconds > 0:
            reply = replace(reply, hold=self._faults.lookup_hold_seconds, faults=(*reply.faults, "lookup_hold_seconds"))
        return reply

    def _control(self, request: _Request) -> _Reply:
        name = request.path.removeprefix(CONTROL_PREFIX)
        if request.method == "GET" and name == "requests":
            return _Reply(200, _matching(self._requests, request.query))
        if request.method == "GET" and name == "notes":
            return _Reply(200, list(self._notes.values()))
        if request.method == "GET" and name == "faults":
            return _Reply(200, self._faults.to_json())
        if request.method == "POST" and name == "faults":
            return self._set_faults_from(request)
        return _error(404, "not_found", f"no such control endpoint: {request.method} {request.path}")

    def _set_faults_from(self, request: _Request) -> _Reply:
        try:
            faults = Faults.from_json(request.json if request.json_ok else None)
        except (TypeError, ValueError) as exc:
            return _error(400, "invalid_faults", str(exc))
        self._faults = faults
        return _Reply(200, faults.to_json())

    # --- state and its log ------------------------------------------------------------------------

    def _create(self, key: str, wanted: dict[str, str]) -> dict[str, Any]:
        note_id = f"CN-{self._next_number:06d}"
        self._next_number += 1
        note: dict[str, Any] = {"creditNoteId": note_id, "idempotencyKey": key, **wanted}
        note.update(status="requested", createdAt=_now())
        self._notes[key] = note
        return note

    def _record(self, request: _Request, reply: _Reply) -> dict[str, Any]:
        record: dict[str, Any] = {
            "seq": len(self._requests) + 1,
            "time": _now(),
            "method": request.method,
            "path": request.path,
            "query": request.query,
            "idempotencyKey": request.key if request.key is not None else request.query.get("idempotencyKey"),
            "body": request.logged_body(),
            "status": None if reply.drop else reply.status,  # None: the connection was dropped unanswered
            "creditNoteId": reply.note["creditNoteId"] if reply.note is not None else None,
            "created": reply.created,
            "faults": list(reply.faults),
            "traceparent": request.traceparent,  # which trace the caller was in (None: it sent none)
        }
        if reply.created:
            record["note"] = reply.note  # what a restarted stub reloads
        self._requests.append(record)
        if self._log is not None:
            self._log.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._log.flush()
        return record

    def _reload(self, path: Path) -> None:
        with path.open(encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, start=1):
                try:
                    record = json.loads(line) if line.strip() else None
                except ValueError:  # a line cut short by a kill
                    log.warning("%s:%d: skipped a line that is not JSON", path, number)
                    continue
                note = _created_note(record)
                if note is not None:
                    self._restore(note)

    def _restore(self, note: dict[str, Any]) -> None:
        self._notes[note["idempotencyKey"]] = note
        match = _NOTE_ID.fullmatch(note["creditNoteId"])
        if match is not None:
            self._next_number = max(self._next_number, int(match.group(1)) + 1)

    def _open(self) -> _Server:
        if self._server is not None:
            raise RuntimeError("supplier stub is already started")
        server = _Server((self.host, self.port), self)
        try:
            log_file = _open_log(self.log_path) if self.log_path is not None else None
        except OSError:
            server.server_close()
            raise
        with self._lock:
            self._server, self._log = server, log_file
        self._stopping.clear()
        return server

    def _close(self) -> None:
        # Under the lock, so a handler still running after stop() never writes to a closed log.
        with self._lock:
            server, self._server = self._server, None
            log_file, self._log = self._log, None
        if server is not None:
            server.server_close()
        if log_file is not None:
            log_file.close()


def _note_fields(request: _Request) -> dict[str, str]:
    """The five note fields of a valid body; raises ``_BadRequestError`` naming the first problem."""
    body = request.json
    if not request.json_ok or not isinstance(body, dict):
        raise _BadRequestError("the body must be a JSON object")
    missing = [name for name in NOTE_FIELDS if name not in body]
    if missing:
        raise _BadRequestError(f"missing fields: {', '.join(missing)}")
    for name in _TEXT_FIELDS:
        if not isinstance(body[name], str) or not body[name].strip():
            raise _BadRequestError(f"{name} must be a non-empty string")
    amount = body["amount"]
    if not isinstance(amount, str) or not _AMOUNT.fullmatch(amount) or Decimal(amount) <= 0:
        raise _BadRequestError('amount must be a positive decimal string such as "12.50" (not a JSON number)')
    if not isinstance(body["currency"], str) or not _CURRENCY.fullmatch(body["currency"]):
        raise _BadRequestError('currency must be a three-letter ISO 4217 code such as "EUR"')
    return {name: body[name] for name in NOTE_FIELDS}


def _same_request(note: dict[str, Any], wanted: dict[str, str]) -> bool:
    # "10.5" and "10.50" are the same amount; a caller re-formatting a retry is not a different request.
    same_text = all(note[name] == wanted[name] for name in (*_TEXT_FIELDS, "currency"))
    return same_text and Decimal(note["amount"]) == Decimal(wanted["amount"])


def _matching(records: list[dict[str, Any]], query: dict[str, str]) -> list[dict[str, Any]]:
    wanted = {name: query[name] for name in ("method", "path", "idempotencyKey") if name in query}
    return [record for record in records if all(record.get(name) == value for name, value in wanted.items())]


def _created_note(record: Any) -> dict[str, Any] | None:
    """The note a log record created, or ``None`` for every other record."""
    note = record.get("note") if isinstance(record, dict) and record.get("created") else None
    if not isinstance(note, dict):
        return None
    if not isinstance(note.get("idempotencyKey"), str) or not isinstance(note.get("creditNoteId"), str):
        return None
    return note


def _open_log(path: Path) -> TextIO:
    path.parent.mkdir(parents=True, exist_ok=True)
    log_file = path.open("a", encoding="utf-8")
    if _ends_mid_line(path):
        # A kill mid-write left half a line; without this newline the next record would extend it.
        log_file.write("\n")
        log_file.flush()
    return log_file


def _ends_mid_line(path: Path) -> bool:
    with path.open("rb") as existing:
        if existing.seek(0, os.SEEK_END) == 0:
            return False
        existing.seek(-1, os.SEEK_END)
        return existing.read(1) != b"\n"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _echo_line(record: dict[str, Any]) -> str:
    parts = [record["time"], record["method"], record["path"]]
    if record["idempotencyKey"]:
        parts.append(f"key={record['idempotencyKey']}")
    parts.append("->")
    parts.append("dropped" if record["status"] is None else str(record["status"]))
    if record["creditNoteId"]:
        parts.append(record["creditNoteId"])
    if record["faults"]:
        parts.append(f"[{', '.join(record['faults'])}]")
    return " ".join(parts)


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a held reply must not keep the process alive

    def __init__(self, address: tuple[str, int], stub: SupplierStub) -> None:
        super().__init__(address, _Handler)
        self.stub = stub


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.0: one request per connection. With keep-alive, a stopped stub's handler threads would go on
    # answering pooled connections from stale state, out of sight of a stub restarted on the same port.
    protocol_version = "HTTP/1.0"
    server_version = "CasekeeperSupplierStub/0.1"

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the stub prints its own line per request when echoing."""

    def _serve(self) -> None:
        stub = cast(_Server, self.server).stub
        key = self.headers.get("Idempotency-Key")
        reply = stub._dispatch(self.command, self.path, key, self._read_body(), self.headers.get("traceparent"))
        if reply.drop or (reply.hold > 0 and stub._hold(reply.hold)):
            self.close_connection = True  # closing without a status line is what a crash looks like
            return
        self._send(reply)

    def _read_body(self) -> bytes | None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        if length > MAX_BODY_BYTES:
            return None
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, reply: _Reply) -> None:
        payload = json.dumps(reply.body).encode("utf-8")
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:  # the caller gave up (timed out, was killed) while the reply was held
            self.close_connection = True


# --- command line ------------------------------------------------------------------------------


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The stub's command-line options (also usable as a ``casekeeper`` subcommand's parser)."""
    parser = argparse.ArgumentParser(
        prog=prog or "casekeeper supplier-stub",
        description="Run a local supplier portal. Prints its URL on stdout, one line per request on stderr.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: %(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0: any free port (%(default)s)")
    parser.add_argument("--log", type=Path, metavar="FILE", help="JSON-lines request log, reloaded at start")
    parser.add_argument("--quiet", action="store_true", help="do not print a line per request")
    faults = parser.add_argument_group("faults (the same as POST /_control/faults)")
    faults.add_argument(
        "--hold-seconds",
        type=_non_negative_float,
        default=0.0,
        metavar="S",
        help="create the note, then hold every reply S seconds (a caller can be killed meanwhile)",
    )
    counted = {
        "fail-before-create": "answer the next N POSTs 503 and create nothing",
        "reject": "answer the next N POSTs 422 (a definite refusal)",
        "fail-after-create": "create the note, then answer the next N POSTs 503",
        "drop-after-create": "create the note, then drop the next N connections unanswered",
    }
    for name, text in counted.items():
        faults.add_argument(f"--{name}", type=_non_negative_int, default=0, metavar="N", help=text)
    faults.add_argument("--lookup-down", action="store_true", help="answer every lookup by key 503")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Serve the supplier portal API locally, logging every request.

    Runs the stub in the foreground until interrupted. Returns the exit status (1: cannot start)."""
    args = build_parser().parse_args(argv)
    faults = Faults(
        hold_seconds=args.hold_seconds,
        fail_before_create=args.fail_before_create,
        reject=args.reject,
        fail_after_create=args.fail_after_create,
        drop_after_create=args.drop_after_create,
        lookup_down=args.lookup_down,
    )
    try:
        stub = SupplierStub(args.host, args.port, args.log, faults=faults, echo=not args.quiet)
        stub.serve_forever(ready=lambda url: _announce(url, args.log, faults))
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(f"supplier stub: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


def _announce(url: str, log_path: Path | None, faults: Faults) -> None:
    print(url, flush=True)  # stdout carries only the URL, for a parent process to read
    active = {name: value for name, value in faults.to_json().items() if value}
    details = f"log: {log_path or 'none'}, faults: {active or 'none'}"
    print(f"supplier stub listening on {url} ({details})", file=sys.stderr, flush=True)


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError("must be a finite number >= 0")
    return value


if __name__ == "__main__":
    sys.exit(main())
