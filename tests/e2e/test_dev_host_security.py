"""A web page the signed-in person has open cannot drive ``casekeeper dev`` as them, and the host survives
hostile clients (docs/design.md#threats). Real host, real sockets."""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devhost.http_server import MAX_CONNECTIONS
from devhost.send import main as send_main
from devhost.supplier_stub import SupplierStub
from shared.messaging.sqlite_queue import LocalSessionQueue
from tests.support.dev_host import ROOT, DevHost
from tests.support.invoices import invoice

pytestmark = pytest.mark.slow

CLIENT_TIMEOUT = 3.0
BODY = {"decision": "approve", "caseVersion": 2, "approver": "ana"}


@pytest.fixture
def signed_in_host(tmp_path: Path, supplier: SupplierStub) -> Iterator[DevHost]:
    """``casekeeper dev --as ana --role approver --role operator``, its secret generated (no WEBHOOK_SECRET)."""
    host = DevHost(
        tmp_path / "data",
        supplier,
        env_overrides={"WEBHOOK_SECRET": ""},
        extra_args=[
            "--as",
            "ana",
            "--role",
            "approver",
            "--role",
            "operator",
            "--workers",
            "1",
            "--client-timeout",
            str(CLIENT_TIMEOUT),
        ],
    ).start()
    try:
        yield host
    finally:
        host.stop()


def raw(host: DevHost, request: bytes, *, read_for: float = 5.0) -> bytes:
    """Send ``request`` bytes as they are and read what comes back until the host closes or ``read_for``."""
    with socket.create_connection(("127.0.0.1", host.port), timeout=read_for) as conn:
        conn.sendall(request)
        received = b""
        try:
            while chunk := conn.recv(65536):
                received += chunk
                if b"\r\n\r\n" in received and b"Connection: close" not in received:
                    head, _, rest = received.partition(b"\r\n\r\n")
                    length = next(
                        (
                            int(line.split(b":")[1])
                            for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length")
                        ),
                        0,
                    )
                    if len(rest) >= length:
                        break
        except TimeoutError:
            pass
        return received


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def enqueued(host: DevHost) -> int:
    queue = LocalSessionQueue(host.data / "queue.sqlite")
    try:
        return sum(queue.counts("case-events").values())
    finally:
        queue.close()


def test_a_cross_site_post_cannot_answer_or_withdraw_as_the_signed_in_person(signed_in_host: DevHost) -> None:
    host = signed_in_host
    case_url = f"{host.url}/api/cases/INV-1/approvals/apr-1"
    # What a form or fetch() from any web page may send without a preflight: text/plain.
    simple = httpx.post(case_url, content=json.dumps(BODY), headers={"Content-Type": "text/plain"}, timeout=10)
    assert simple.status_code == 415
    withdraw = httpx.post(
        f"{host.url}/api/cases/INV-1/requests/k1/withdraw",
        content=json.dumps({"why": "x"}),
        headers={"Content-Type": "text/plain", "Origin": "http://evil.example"},
        timeout=10,
    )
    assert withdraw.status_code == 403 and "another origin" in withdraw.json()["error"]
    # Declared JSON, but sent from another origin: refused before any function runs.
    cross = httpx.post(case_url, json=BODY, headers={"Origin": "http://evil.example"}, timeout=10)
    assert cross.status_code == 403 and "another origin" in cross.json()["error"]
    form = httpx.post(f"{host.url}/api/ops/redrive", data={"messageId": "all"}, headers={"Origin": "null"}, timeout=10)
    assert form.status_code == 403
    assert enqueued(host) == 0


def test_a_rebound_dns_name_reaches_nothing(signed_in_host: DevHost) -> None:
    host = signed_in_host
    for path in ("/api/approvals", "/api/ops", "/api/health"):
        rebound = httpx.get(host.url + path, headers={"Host": f"attacker.example:{host.port}"}, timeout=10)
        assert rebound.status_code == 421 and "ana" not in rebound.text
    same_origin_of_the_attacker = httpx.post(
        f"{host.url}/api/cases/INV-1/approvals/apr-1",
        json=BODY,
        headers={"Host": f"attacker.example:{host.port}", "Origin": f"http://attacker.example:{host.port}"},
        timeout=10,
    )
    assert same_origin_of_the_attacker.status_code == 421
    # Its own names still work: the signed-in pages are there for the person at this machine.
    for name in ("127.0.0.1", "localhost"):
        page = httpx.get(host.url + "/api/approvals", headers={"Host": f"{name}:{host.port}"}, timeout=10)
        assert page.status_code == 200 and "ana" in page.text


def test_the_stand_in_answers_as_its_id_and_a_client_sent_marker_is_replaced(signed_in_host: DevHost) -> None:
    host = signed_in_host
    page = httpx.get(host.url + "/api/ops", headers={"X-Casekeeper-Dev-Stand-In": "0" * 32}, timeout=10)
    assert page.status_code == 200 and "local identity" in page.text  # the host's own marker replaced it
    # The JSON route, called the way a script on this machine would: recorded as the stand-in's id.
    secret = (host.data / "webhook-secret").read_text().strip()
    event = json.dumps({"type": "invoice.received", "caseId": "INV-S", "data": invoice("2500.00")}).encode()
    assert host.post_raw(event, delivery="d-stand-in", secret=secret).status_code == 202
    pending = host.wait_for("INV-S", lambda v: v.get("pendingApproval") is not None)["pendingApproval"]
    answer = httpx.post(
        f"{host.url}/api/cases/INV-S/approvals/{pending['requestId']}",
        json={"decision": "approve", "caseVersion": pending["caseVersion"]},
        timeout=10,
    )
    assert answer.status_code == 202 and answer.json()["approver"] == "ana <dev:ana>"


def test_hostile_framing_and_bodies_get_4xx_never_500(signed_in_host: DevHost) -> None:
    host = signed_in_host
    head = f"POST /api/events HTTP/1.1\r\nHost: 127.0.0.1:{host.port}\r\nContent-Type: application/json\r\n"
    negative = raw(host, (head + "Content-Length: -1\r\n\r\n{}").encode())
    assert status_of(negative) == 400
    assert status_of(raw(host, (head + "Content-Length: ١٢\r\n\r\n{}").encode())) == 400
    # A signature timestamp of Unicode digits passes str.isdigit(): it must still be a plain 401.
    body = json.dumps({"type": "case.investigate", "caseId": "C-1", "data": {}}).encode()
    superscript = httpx.post(
        host.url + "/api/events",
        content=body,
        headers={
            "Content-Type": "application/json",
            "Casekeeper-Signature": "t=²,v2=00".encode("latin-1"),
            "Casekeeper-Delivery": "d-1",
        },
        timeout=10,
    )
    assert superscript.status_code == 401 and "malformed" in superscript.json()["error"]
    deep = b"[" * 100_000
    # The routes look the case up before they read the body: make one.
    secret = (host.data / "webhook-secret").read_text().strip()  # generated by the host
    event = json.dumps({"type": "invoice.received", "caseId": "INV-D", "data": invoice("2500.00")}).encode()
    assert host.post_raw(event, delivery="d-deep", secret=secret).status_code == 202
    pending = host.wait_for("INV-D", lambda v: v.get("pendingApproval") is not None)["pendingApproval"]
    approval = f"/api/cases/INV-D/approvals/{pending['requestId']}"  # a real, pending request
    for path in (approval, "/api/cases/INV-D/requests/k1/withdraw"):
        response = httpx.post(host.url + path, content=deep, headers={"Content-Type": "application/json"}, timeout=10)
        assert response.status_code == 400 and "nested too deeply" in response.json()["error"]
    assert "Traceback" not in host.log()


def test_a_half_sent_request_is_cut_off_and_a_flood_is_answered_503(signed_in_host: DevHost) -> None:
    host = signed_in_host
    started = time.monotonic()
    half = (f"POST /api/events HTTP/1.1\r\nHost: 127.0.0.1:{host.port}\r\nContent-Length: 100\r\n\r\n{{").encode()
    assert raw(host, half, read_for=CLIENT_TIMEOUT * 4) == b""  # closed by the host, nothing answered
    assert time.monotonic() - started < CLIENT_TIMEOUT * 3
    # Idle connections take every slot; the next is told to come back, at once, without a thread.
    idle = [socket.create_connection(("127.0.0.1", host.port), timeout=5) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.3)
        refused = raw(host, f"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{host.port}\r\n\r\n".encode(), read_for=2)
        assert status_of(refused) == 503
    finally:
        for conn in idle:
            conn.close()
    # Once they are gone the host serves again.
    deadline = time.monotonic() + 10
    while httpx.get(host.url + "/api/health", timeout=5).status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_the_data_folder_and_its_files_are_the_users_only(signed_in_host: DevHost) -> None:
    data = signed_in_host.data
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    for name in ("webhook-secret", "casekeeper.sqlite", "queue.sqlite"):
        assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
    for extra in data.glob("*.sqlite-*"):  # WAL and shared-memory files follow the database's mode
        assert stat.S_IMODE(extra.stat().st_mode) & 0o077 == 0, extra.name


def test_a_signed_in_identity_is_not_served_to_the_network(tmp_path: Path) -> None:
    started = subprocess.run(
        [sys.executable, "-m", "shared.cli", "dev", "--host", "0.0.0.0", "--as", "ana", "--data", str(tmp_path)],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 2
    assert "refused on any address but loopback" in started.stderr


def test_casekeeper_send_signs_what_the_host_accepts(
    signed_in_host: DevHost, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WEBHOOK_SECRET", raising=False)  # the host's generated secret, from its data folder
    argv = ["case.investigate", "C-SEND", "--url", signed_in_host.url, "--data", str(signed_in_host.data)]
    assert send_main([*argv, "--delivery", "send-1"]) == 0
    assert capsys.readouterr().out.startswith("202 ")
