"""The supplier portal client against the real stub (and a canned server), over loopback sockets."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry import trace

from casekeeper.errors import ConfigurationError, DownstreamRejected, OutcomeUnknown
from devhost.ports import free_port
from devhost.supplier_stub import Faults, SupplierStub
from shared.supplier import SupplierPortal
from shared.supplier.portal import MAX_ANSWER_BYTES, MAX_FIELD_CHARS

REPO = Path(__file__).resolve().parents[2]
HOLD = 0.8  # the stub holds replies this long ...
SHORT_TIMEOUT = 0.25  # ... and an impatient client gives up after this


@pytest.fixture
def stub() -> Iterator[SupplierStub]:
    with SupplierStub() as running:
        yield running


@pytest.fixture
def portal(stub: SupplierStub) -> Iterator[SupplierPortal]:
    with SupplierPortal(stub.url, timeout=2.0) as client:
        yield client


def ask(
    portal: SupplierPortal, key: str = "key-1", *, amount: Decimal = Decimal("120.50"), currency: str = "EUR"
) -> dict[str, Any]:
    return portal.request_credit_note(
        key, case_id="case-1", invoice_id="INV-1", supplier_id="SUP-1", amount=amount, currency=currency
    )


def set_faults(stub: SupplierStub, **faults: Any) -> None:
    """Through the control endpoint, as a test in another process would."""
    response = httpx.post(f"{stub.url}/_control/faults", json=faults)
    assert response.status_code == 200, response.text


def posts(stub: SupplierStub) -> list[dict[str, Any]]:
    return [r for r in stub.requests if r["method"] == "POST" and r["path"] == "/credit-notes"]


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def read_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# --- the happy path and idempotency ------------------------------------------------------------


def test_request_returns_the_new_credit_note(stub: SupplierStub, portal: SupplierPortal) -> None:
    note = ask(portal)

    assert note == {"creditNoteId": "CN-000001", "amount": "120.50", "currency": "EUR"}
    [held] = stub.notes
    assert held["caseId"] == "case-1"
    assert {k: held[k] for k in note} == note
    [post] = posts(stub)
    assert post["status"] == 201
    assert post["idempotencyKey"] == "key-1"


def test_the_same_key_twice_returns_the_same_note_and_creates_one(stub: SupplierStub, portal: SupplierPortal) -> None:
    first = ask(portal)
    second = ask(portal)

    assert second["creditNoteId"] == first["creditNoteId"]
    assert len(stub.notes) == 1
    assert [p["status"] for p in posts(stub)] == [201, 200]


def test_an_equal_amount_written_differently_is_the_same_request(stub: SupplierStub, portal: SupplierPortal) -> None:
    first = ask(portal, amount=Decimal("10.5"))
    second = ask(portal, amount=Decimal("10.50"))

    assert second["creditNoteId"] == first["creditNoteId"]
    assert [p["body"]["amount"] for p in posts(stub)] == ["10.5", "10.50"]


def test_new_keys_get_new_unique_ids(portal: SupplierPortal) -> None:
    ids = [ask(portal, f"key-{n}")["creditNoteId"] for n in range(3)]

    assert ids == ["CN-000001", "CN-000002", "CN-000003"]


def test_concurrent_requests_with_one_key_create_one_note(stub: SupplierStub, portal: SupplierPortal) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = set(pool.map(lambda _: ask(portal)["creditNoteId"], range(8)))

    assert ids == {"CN-000001"}
    assert len(stub.notes) == 1
    assert sorted(p["status"] for p in posts(stub)) == [200] * 7 + [201]


# --- definite refusals ---------------------------------------------------------------------------


def test_the_same_key_with_a_different_body_is_rejected_with_422(stub: SupplierStub, portal: SupplierPortal) -> None:
    ask(portal, amount=Decimal("1.00"))

    with pytest.raises(DownstreamRejected) as caught:
        ask(portal, amount=Decimal("2.00"))

    assert caught.value.status == 422
    assert "different body" in caught.value.reason
    assert len(stub.notes) == 1


@pytest.mark.parametrize(
    ("amount", "currency", "named"),
    [(Decimal("-5"), "EUR", "amount"), (Decimal("0"), "EUR", "amount"), (Decimal("5"), "euro", "currency")],
)
def test_an_invalid_body_is_rejected_with_400(
    stub: SupplierStub, portal: SupplierPortal, amount: Decimal, currency: str, named: str
) -> None:
    with pytest.raises(DownstreamRejected) as caught:
        ask(portal, amount=amount, currency=currency)

    assert caught.value.status == 400
    assert named in caught.value.reason
    assert stub.notes == []


def test_an_injected_rejection_is_a_422_and_creates_nothing(stub: SupplierStub, portal: SupplierPortal) -> None:
    set_faults(stub, reject=1)

    with pytest.raises(DownstreamRejected) as caught:
        ask(portal)

    assert caught.value.status == 422
    assert stub.notes == []
    assert ask(portal)["creditNoteId"] == "CN-000001"  # the counter ran out


# --- unknown outcomes ---------------------------------------------------------------------------


def test_503_before_create_is_unknown_and_nothing_exists(stub: SupplierStub, portal: SupplierPortal) -> None:
    set_faults(stub, fail_before_create=1)

    with pytest.raises(OutcomeUnknown) as caught:
        ask(portal)

    assert caught.value.status == 503
    assert stub.notes == []
    assert portal.find_credit_note("key-1") is None


def test_503_after_create_is_unknown_but_the_lookup_finds_the_note(stub: SupplierStub, portal: SupplierPortal) -> None:
    set_faults(stub, fail_after_create=1)

    with pytest.raises(OutcomeUnknown) as caught:
        ask(portal)

    assert caught.value.status == 503
    found = portal.find_credit_note("key-1")
    assert found is not None
    assert found["creditNoteId"] == "CN-000001"
    assert ask(portal)["creditNoteId"] == "CN-000001"  # a retry with the key replays, creates nothing
    assert len(stub.notes) == 1


def test_a_connection_dropped_after_create_is_unknown(stub: SupplierStub, portal: SupplierPortal) -> None:
    set_faults(stub, drop_after_create=1)

    with pytest.raises(OutcomeUnknown) as caught:
        ask(portal)

    assert caught.value.status is None
    assert "RemoteProtocolError" in caught.value.reason
    assert portal.find_credit_note("key-1") is not None


def test_a_reply_held_past_the_client_timeout_is_unknown_and_the_note_exists(stub: SupplierStub) -> None:
    set_faults(stub, hold_seconds=HOLD)
    impatient = SupplierPortal(stub.url, timeout=SHORT_TIMEOUT)
    started = time.monotonic()

    with impatient, pytest.raises(OutcomeUnknown) as caught:
        ask(impatient)

    assert time.monotonic() - started < HOLD  # the client's timeout ended the call, not the stub's reply
    assert caught.value.status is None
    assert "timed out" in caught.value.reason
    with SupplierPortal(stub.url, timeout=2.0) as patient:
        found = patient.find_credit_note("key-1")  # lookups are not held
    assert found is not None
    assert found["creditNoteId"] == "CN-000001"


def test_a_lookup_of_an_unknown_key_is_none(portal: SupplierPortal) -> None:
    assert portal.find_credit_note("never-used") is None


def test_a_lookup_while_the_portal_is_down_is_unknown(stub: SupplierStub, portal: SupplierPortal) -> None:
    ask(portal)
    set_faults(stub, lookup_down=True)

    with pytest.raises(OutcomeUnknown) as caught:
        portal.find_credit_note("key-1")

    assert caught.value.status == 503


def test_a_refused_connection_is_unknown() -> None:
    with SupplierPortal(closed_port_url(), timeout=1.0) as portal:
        with pytest.raises(OutcomeUnknown) as caught:
            ask(portal)
        assert caught.value.status is None
        assert "could not connect" in caught.value.reason
        with pytest.raises(OutcomeUnknown):
            portal.find_credit_note("key-1")


# --- status mapping, against a server that answers whatever it is told --------------------------


class _CannedHandler(BaseHTTPRequestHandler):
    reply_status = 200
    reply_body = b"{}"
    declare_length = True

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.do_GET()

    def do_GET(self) -> None:
        self.send_response(self.reply_status)
        if self.declare_length:
            self.send_header("Content-Length", str(len(self.reply_body)))
        self.end_headers()
        # Without a Content-Length (HTTP/1.0) the body ends when the connection closes: it must be read.
        with contextlib.suppress(OSError):  # a client that stops reading early closes its end
            self.wfile.write(self.reply_body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def canned() -> Iterator[Callable[..., SupplierPortal]]:
    """``canned(status, body)``: a portal client of a server that answers every request so."""
    servers: list[ThreadingHTTPServer] = []
    clients: list[SupplierPortal] = []

    def serve(status: int, body: str, *, declare_length: bool = True) -> SupplierPortal:
        class Handler(_CannedHandler):
            reply_status = status
            reply_body = body.encode()

        Handler.declare_length = declare_length

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        clients.append(SupplierPortal(f"http://127.0.0.1:{server.server_address[1]}", timeout=2.0))
        return clients[-1]

    yield serve
    for client in clients:
        client.close()
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_a_4xx_is_a_refusal_with_the_portals_reason(canned: Callable[[int, str], SupplierPortal], status: int) -> None:
    portal = canned(status, '{"error": "nope", "message": "supplier SUP-1 is blocked"}')

    with pytest.raises(DownstreamRejected) as caught:
        ask(portal)

    assert caught.value.status == status
    assert f"{status} " in caught.value.reason
    assert "nope: supplier SUP-1 is blocked" in caught.value.reason


def test_a_refusal_without_json_keeps_the_text(canned: Callable[[int, str], SupplierPortal]) -> None:
    with pytest.raises(DownstreamRejected) as caught:
        ask(canned(403, "forbidden by\n policy"))

    assert caught.value.reason.endswith("403 Forbidden: forbidden by policy")


@pytest.mark.parametrize("status", [302, 408, 409, 429, 500, 502, 503, 504])
def test_408_429_5xx_and_redirects_are_unknown(canned: Callable[[int, str], SupplierPortal], status: int) -> None:
    portal = canned(status, '{"error": "later"}')

    with pytest.raises(OutcomeUnknown) as caught:
        ask(portal)

    assert caught.value.status == status


@pytest.mark.parametrize("body", ['{"id": "CN-1"}', '{"creditNoteId": ""}', "[]", "not json", ""])
def test_a_2xx_without_a_credit_note_id_is_unknown(canned: Callable[[int, str], SupplierPortal], body: str) -> None:
    portal = canned(201, body)

    with pytest.raises(OutcomeUnknown) as caught:
        ask(portal)
    assert caught.value.status == 201
    with pytest.raises(OutcomeUnknown):
        portal.find_credit_note("key-1")


@pytest.mark.parametrize("declare_length", [True, False], ids=["declared", "until-close"])
def test_an_answer_over_the_byte_limit_is_unknown_and_not_kept(
    canned: Callable[..., SupplierPortal], declare_length: bool
) -> None:
    """A supplier that answers a credit-note request with 3 MB (its PDF inline): the note may exist, so the
    outcome is unknown (reconciled by lookup), and nothing of the answer is kept."""
    answer = json.dumps({"creditNoteId": "CN-1", "amount": "1.00", "pdf": "x" * 3_000_000})
    portal = canned(201, answer, declare_length=declare_length)

    with pytest.raises(OutcomeUnknown) as caught:
        ask(portal)
    assert caught.value.status == 201
    assert f"over {MAX_ANSWER_BYTES} bytes" in str(caught.value)
    with pytest.raises(OutcomeUnknown):
        portal.find_credit_note("key-1")


def test_only_the_fields_the_app_uses_are_kept(canned: Callable[..., SupplierPortal]) -> None:
    answer = {
        "creditNoteId": "CN-7",
        "amount": "12.00",
        "currency": "EUR",
        "pdf": "x" * (MAX_ANSWER_BYTES // 2),
        "lines": [{"n": n} for n in range(100)],
    }
    portal = canned(201, json.dumps(answer))

    assert ask(portal) == {"creditNoteId": "CN-7", "amount": "12.00", "currency": "EUR"}
    assert portal.find_credit_note("key-1") == {"creditNoteId": "CN-7", "amount": "12.00", "currency": "EUR"}


def test_a_kept_field_too_long_is_dropped_and_a_too_long_id_is_unknown(canned: Callable[..., SupplierPortal]) -> None:
    long_text = "y" * (MAX_FIELD_CHARS + 1)
    assert ask(canned(201, json.dumps({"creditNoteId": "CN-8", "currency": long_text}))) == {"creditNoteId": "CN-8"}
    with pytest.raises(OutcomeUnknown, match="creditNoteId of"):
        ask(canned(201, json.dumps({"creditNoteId": long_text})))


@pytest.mark.parametrize("status", [400, 409, 500, 503])
def test_a_lookup_failure_is_never_a_refusal(canned: Callable[[int, str], SupplierPortal], status: int) -> None:
    with pytest.raises(OutcomeUnknown) as caught:
        canned(status, "{}").find_credit_note("key-1")

    assert caught.value.status == status


# --- the wire format ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "on_the_wire"),
    [(Decimal("1234.50"), "1234.50"), (Decimal("1E+3"), "1000"), (Decimal("0.10"), "0.10")],
)
def test_amounts_travel_as_plain_decimal_strings(
    stub: SupplierStub, portal: SupplierPortal, amount: Decimal, on_the_wire: str
) -> None:
    note = ask(portal, amount=amount)

    [post] = posts(stub)
    assert post["body"]["amount"] == on_the_wire  # parsed from the JSON received: a str, not a number
    assert note["amount"] == on_the_wire


def test_a_float_amount_is_refused_before_anything_is_sent(stub: SupplierStub, portal: SupplierPortal) -> None:
    with pytest.raises(TypeError):
        ask(portal, amount=120.5)  # type: ignore[arg-type]

    assert stub.requests == []


@pytest.mark.parametrize("key", ["", " padded", "line\nbreak", "naïve"])
def test_an_unusable_key_is_refused_before_anything_is_sent(
    stub: SupplierStub, portal: SupplierPortal, key: str
) -> None:
    with pytest.raises(ValueError, match="idempotency key"):
        ask(portal, key)
    with pytest.raises(ValueError, match="idempotency key"):
        portal.find_credit_note(key)

    assert stub.requests == []


def test_the_stub_refuses_a_post_without_a_key_or_with_a_numeric_amount(stub: SupplierStub) -> None:
    body = {"caseId": "c", "invoiceId": "i", "supplierId": "s", "amount": "1.00", "currency": "EUR"}

    without_key = httpx.post(f"{stub.url}/credit-notes", json=body)
    numeric = httpx.post(f"{stub.url}/credit-notes", json={**body, "amount": 1.0}, headers={"Idempotency-Key": "k"})

    assert (without_key.status_code, numeric.status_code) == (400, 400)
    assert stub.notes == []


# --- the client's lifecycle and configuration ---------------------------------------------------


def test_the_client_connects_lazily_and_reopens_after_close(stub: SupplierStub) -> None:
    SupplierPortal(closed_port_url()).close()  # constructing and closing touch no network

    portal = SupplierPortal(stub.url, timeout=2.0)
    ask(portal, "key-1")
    portal.close()
    portal.close()
    assert ask(portal, "key-2")["creditNoteId"] == "CN-000002"
    portal.close()


@pytest.mark.parametrize(
    ("url", "timeout"),
    [("ftp://portal.example", 1.0), ("portal.example", 1.0), ("http://portal.example", 0.0)],
)
def test_an_unusable_configuration_is_refused(url: str, timeout: float) -> None:
    with pytest.raises(ConfigurationError):
        SupplierPortal(url, timeout=timeout)


# --- the stub's control surface -------------------------------------------------------------------


def test_the_faults_endpoint_validates_replaces_and_clears(stub: SupplierStub) -> None:
    faults_url = f"{stub.url}/_control/faults"

    assert httpx.post(faults_url, json={"bogus": 1}).status_code == 400
    assert httpx.post(faults_url, json={"reject": -1}).status_code == 400
    assert httpx.post(faults_url, json={"lookup_down": "yes"}).status_code == 400
    assert httpx.post(faults_url, json={"reject": 2}).json()["reject"] == 2
    assert httpx.post(faults_url, json={"lookup_down": True}).json()["reject"] == 0  # a POST replaces all
    assert httpx.post(faults_url, json={}).json() == Faults().to_json()
    assert httpx.get(faults_url).json() == Faults().to_json()


def test_the_control_endpoints_list_requests_and_notes(stub: SupplierStub, portal: SupplierPortal) -> None:
    ask(portal)
    portal.find_credit_note("key-1")

    listed = httpx.get(f"{stub.url}/_control/requests", params={"method": "POST"}).json()
    notes = httpx.get(f"{stub.url}/_control/notes").json()

    assert [(r["method"], r["path"], r["status"]) for r in listed] == [("POST", "/credit-notes", 201)]
    assert [n["creditNoteId"] for n in notes] == ["CN-000001"]


def test_faults_given_to_the_constructor_apply() -> None:
    with SupplierStub(faults=Faults(fail_before_create=1)) as stub, SupplierPortal(stub.url) as portal:
        with pytest.raises(OutcomeUnknown):
            ask(portal)
        assert ask(portal)["creditNoteId"] == "CN-000001"


# --- the request log ---------------------------------------------------------------------------


def test_the_log_survives_and_a_new_stub_on_it_knows_the_old_notes(tmp_path: Path) -> None:
    log = tmp_path / "supplier.jsonl"
    with SupplierStub(log_path=log) as first, SupplierPortal(first.url) as portal:
        created = ask(portal)
        ask(portal)
    lines = read_log(log)
    assert [(r["method"], r["status"], r["idempotencyKey"]) for r in lines] == [
        ("POST", 201, "key-1"),
        ("POST", 200, "key-1"),
    ]
    assert lines[0]["body"]["amount"] == "120.50"

    with SupplierStub(log_path=log) as second, SupplierPortal(second.url) as portal:
        assert portal.find_credit_note("key-1") == created
        assert ask(portal)["creditNoteId"] == created["creditNoteId"]
        assert ask(portal, "key-2")["creditNoteId"] == "CN-000002"  # the numbering continues
        assert [n["creditNoteId"] for n in second.notes] == ["CN-000001", "CN-000002"]
        assert [r["status"] for r in posts(second)] == [200, 201]
    assert len(read_log(log)) == 5  # appended: two, then a GET and two POSTs


def test_a_line_cut_short_by_a_kill_is_skipped(tmp_path: Path) -> None:
    log = tmp_path / "supplier.jsonl"
    with SupplierStub(log_path=log) as first, SupplierPortal(first.url) as portal:
        ask(portal)
    with log.open("a", encoding="utf-8") as damaged:
        damaged.write('{"method": "POST", "pa')  # no newline: the writer died mid-line

    with SupplierStub(log_path=log) as second, SupplierPortal(second.url) as portal:
        assert portal.find_credit_note("key-1") is not None
        ask(portal, "key-2")

    first_line, cut, *rest = log.read_text(encoding="utf-8").splitlines()
    assert cut == '{"method": "POST", "pa'  # left alone, and the next record starts on a line of its own
    assert [json.loads(line)["idempotencyKey"] for line in [first_line, *rest]] == ["key-1", "key-1", "key-2"]


def test_the_cli_logs_every_request_before_it_is_killed(tmp_path: Path) -> None:
    log = tmp_path / "supplier.jsonl"
    flags = ["--port", "0", "--log", str(log), "--fail-after-create", "1"]
    command = [sys.executable, "-m", "devhost.supplier_stub", *flags]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        with SupplierPortal(url, timeout=2.0) as portal:
            with pytest.raises(OutcomeUnknown):
                ask(portal)
            assert ask(portal)["creditNoteId"] == "CN-000001"
    finally:
        process.kill()
        _, stderr = process.communicate(timeout=5)

    assert [(r["status"], r["created"]) for r in read_log(log)] == [(503, True), (200, False)]
    assert "POST /credit-notes key=key-1 -> 503 CN-000001 [fail_after_create]" in stderr
    assert "POST /credit-notes key=key-1 -> 200 CN-000001" in stderr


def test_both_calls_send_the_current_trace_context_and_none_outside_a_span(
    stub: SupplierStub, portal: SupplierPortal
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    ask(portal, "key-untraced")
    with TracerProvider().get_tracer("test").start_as_current_span("effect request_credit_note") as span:
        ask(portal, "key-traced")
        portal.find_credit_note("key-traced")
    untraced, post, lookup = stub.requests
    assert untraced["traceparent"] is None
    for record in (post, lookup):
        carrier = {"traceparent": record["traceparent"]}
        sent = trace.get_current_span(TraceContextTextMapPropagator().extract(carrier)).get_span_context()
        assert (sent.trace_id, sent.span_id) == (span.get_span_context().trace_id, span.get_span_context().span_id)
