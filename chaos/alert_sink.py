"""A webhook receiver for the hosts' alerts (``ALERT_WEBHOOK_URL``): what a pager would have seen.

"Each escalation alerted exactly once" is checked against these deliveries as well as against the
durable alert records, because a person is told through the webhook.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast


class AlertSink:
    def __init__(self) -> None:
        self.deliveries: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.1,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/alerts"

    def start(self) -> AlertSink:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def received(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.deliveries)

    def record(self, payload: Any) -> None:
        with self._lock:
            self.deliveries.append({"at": time.time(), "payload": payload})


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], sink: AlertSink) -> None:
        super().__init__(address, _Handler)
        self.sink = sink


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        try:
            payload: Any = json.loads(raw)
        except ValueError:
            payload = raw.decode("utf-8", "replace")
        cast(_Server, self.server).sink.record(payload)
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Silent."""
