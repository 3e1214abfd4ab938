"""``casekeeper dev`` in its own process, over real sockets, and what the tests say to it.

The host is a real subprocess so that it can be killed with SIGKILL and restarted on the same data. Used by
the end-to-end, local host and browser tests (their fixtures are in each folder's ``conftest.py``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from devhost.ports import free_port
from devhost.supplier_stub import SupplierStub
from shared.handlers.ingress import DELIVERY_HEADER, SIGNATURE_HEADER, sign

ROOT = Path(__file__).resolve().parents[2]
SECRET = "e2e-secret"
CALL_TIMEOUT = 4.0


@dataclass
class DevHost:
    """``casekeeper dev`` in its own process on ``data``, talking to ``supplier``: ``start()`` returns once
    ``/api/health`` answers; ``kill()`` is SIGKILL, ``stop()`` SIGTERM; a restart on the same ``data`` keeps
    the cases."""

    data: Path
    supplier: SupplierStub
    env_overrides: dict[str, str] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)
    """More ``casekeeper dev`` options, such as ``--as NAME --role approver``."""
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[str] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> DevHost:
        env = {
            **os.environ,
            "WEBHOOK_SECRET": SECRET,
            "SUPPLIER_PORTAL_URL": self.supplier.url,
            "CALL_TIMEOUT_SECONDS": str(CALL_TIMEOUT),
            "SUPPLIER_TIMEOUT_SECONDS": "0.9",
            "CHECKPOINT_HEALTH_SCHEDULE": "*/2 * * * * *",
            "CHECKPOINT_LAG_SECONDS": "1",
            **self.env_overrides,
        }
        self.log_path = self.data.parent / f"host-{self.port}-{int(time.time() * 1000)}.log"
        log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "shared.cli",
                "dev",
                "--port",
                str(self.port),
                "--data",
                str(self.data),
                "--lock-duration",
                "3",
                "--app-dir",
                str(ROOT),
                *self.extra_args,
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"host exited: {self.log()}")
            try:
                if httpx.get(self.url + "/api/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"host did not come up: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path and self.log_path.exists() else ""

    def wait_for_log(self, line: str, timeout: float = 10.0) -> str:
        """The host's log once it holds ``line``. The handler logs after its commit, so a status seen over
        the API may be a moment ahead of the log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if line in (log := self.log()):
                return log
            time.sleep(0.1)
        raise AssertionError(f"the host never logged {line!r}\n--- host log ---\n{self.log()[-4000:]}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                return -9
        return self.proc.returncode

    # --- talking to it --------------------------------------------------------------------------

    def post_event(
        self, type_: str, case_id: str, data: dict[str, Any] | None = None, *, delivery: str | None = None
    ) -> httpx.Response:
        body = json.dumps({"type": type_, "caseId": case_id, "data": data or {}}).encode()
        return self.post_raw(body, delivery=delivery or f"d-{uuid.uuid4().hex}")

    def post_raw(
        self,
        body: bytes,
        *,
        delivery: str | None,
        secret: str = SECRET,
        at: float | None = None,
        content_type: str = "application/json",
    ) -> httpx.Response:
        headers = {
            "Content-Type": content_type,
            SIGNATURE_HEADER: sign(secret, body, int(at or time.time()), delivery or ""),
        }
        if delivery is not None:
            headers[DELIVERY_HEADER] = delivery
        return httpx.post(self.url + "/api/events", content=body, headers=headers, timeout=10)

    def approve(self, case_id: str, request_id: str, decision: str, version: int) -> httpx.Response:
        return httpx.post(
            f"{self.url}/api/cases/{case_id}/approvals/{request_id}",
            json={"decision": decision, "caseVersion": version, "approver": "e2e"},
            timeout=10,
        )

    def case(self, case_id: str) -> dict[str, Any] | None:
        response = httpx.get(f"{self.url}/api/cases/{case_id}", timeout=10)
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    def wait_for(self, case_id: str, predicate: Any, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        view: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            view = self.case(case_id)
            if view is not None and predicate(view):
                return view
            time.sleep(0.2)
        raise AssertionError(f"case {case_id} never matched; last view: {view}\n--- host log ---\n{self.log()[-4000:]}")
