"""The local host's HTTP side: serves every ``httpTrigger`` function under ``/api/<route>``.

Routes come from the indexed bindings (``route``, ``methods``), with ``{name}`` segments as route
parameters, as the Functions host matches them. Requests become ``azure.functions.HttpRequest``;
the function's ``HttpResponse`` is written back. Function keys are not enforced locally, as with Core
Tools' ``func start``.

Identity stands in for App Service Authentication: a client's own ``X-MS-CLIENT-PRINCIPAL*`` headers are
always removed (as the platform removes them), and with ``casekeeper dev --as NAME`` every request
carries that local identity instead, marked with this process's stand-in token (``shared.web.identity``).

A web page the person has open must not be able to drive this host as them (docs/design.md#threats):

- only the host's own names are answered (``Host``: ``localhost``, a loopback or other IP literal, or the
  name it was bound to), so a DNS name rebound to 127.0.0.1 reaches nothing (421);
- a request that changes something and carries an ``Origin`` other than the host's own is refused (403);
- ``Content-Length`` must be a plain non-negative number no larger than :data:`MAX_REQUEST_BYTES`;
- a client that stops sending is cut off after :data:`SOCKET_TIMEOUT_SECONDS`, and at most
  :data:`MAX_CONNECTIONS` requests are served at once (beyond that: 503 at once, no thread).
"""

from __future__ import annotations

import asyncio
import inspect
import ipaddress
import json
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import azure.functions as func

from shared.web.identity import PRINCIPAL_HEADER, STAND_IN_HEADER, stand_in_token

log = logging.getLogger("casekeeper.dev.http")
PRINCIPAL_PREFIX = PRINCIPAL_HEADER.lower()

MAX_REQUEST_BYTES = 10 * 1024 * 1024  # the Functions host's own limit is larger; the app refuses > 256 KiB
SOCKET_TIMEOUT_SECONDS = 30.0
"""A client silent this long (a half-sent request, an idle keep-alive) is disconnected."""
MAX_CONNECTIONS = 64
"""Requests served at once; more are answered 503 without a thread."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_LOOPBACK_NAMES = frozenset({"localhost", "localhost."})


@dataclass(frozen=True)
class Route:
    name: str
    methods: frozenset[str]
    pattern: re.Pattern[str]
    template: str
    function: Callable[..., Any]

    @classmethod
    def build(cls, name: str, template: str, methods: list[str], function: Callable[..., Any]) -> Route:
        parts = []
        for segment in template.strip("/").split("/"):
            match = re.fullmatch(r"\{(\w+)(?::[^}]*)?\}", segment)
            parts.append(f"(?P<{match.group(1)}>[^/]+)" if match else re.escape(segment))
        pattern = re.compile("^/api/" + "/".join(parts) + "/?$")
        return cls(name, frozenset(m.upper() for m in methods), pattern, template, function)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # the listen backlog: a burst of connections is accepted, then judged by slots

    def __init__(
        self,
        address: tuple[str, int],
        routes: list[Route],
        runner: Callable[[Any], Any],
        principal: str | None = None,
        client_timeout: float = SOCKET_TIMEOUT_SECONDS,
    ) -> None:
        self.client_timeout = client_timeout
        super().__init__(address, _Handler)
        self.routes = routes
        self.runner = runner
        self.principal = principal
        self.bound_name = address[0].lower()
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        # ThreadingHTTPServer starts a thread per connection, without limit; a flood of slow clients would
        # hold them all. Past the limit, answer at once on this thread and close.
        if not self.slots.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                body = b'{"error":"the local host is busy; retry"}'
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                    + body
                )
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out or hung up is not the host's failure: one debug line, no traceback.
        log.debug("connection from %s ended with an error", client_address, exc_info=True)

    def own_host(self, host_header: str | None) -> bool:
        """Whether ``Host`` names this host: ``localhost``, an IP literal (never a rebound DNS name) or the
        name it was bound to. The port is not checked: a rebinding attack controls the name, not the port."""
        if not host_header:
            return False
        name = host_header.strip().lower()
        if name.startswith("["):  # [::1]:7071
            name = name[1 : name.find("]")] if "]" in name else name
        elif name.count(":") == 1:
            name = name.rsplit(":", 1)[0]
        if name in _LOOPBACK_NAMES or name == self.bound_name:
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_SECONDS  # StreamRequestHandler sets it on the socket: every read is bounded

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.client_timeout)

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def _refuse(self, status: int, reason: str) -> None:
        self.close_connection = True  # the body, if any, was not read: the connection cannot be reused
        self._write(status, json.dumps({"error": reason}).encode(), "application/json")

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        host = self.headers.get("Host")
        if not self.server.own_host(host):
            self._refuse(421, f"this local host answers only to its own names (localhost, 127.0.0.1), not {host!r}")
            return
        origin = self.headers.get("Origin")
        if self.command not in SAFE_METHODS and origin is not None and origin.lower() != f"http://{host}".lower():
            self._refuse(403, f"refused: sent from another origin ({origin}); this host serves its own pages only")
            return
        length_text = (self.headers.get("Content-Length") or "0").strip()
        if not (length_text.isascii() and length_text.isdigit()):
            self._refuse(400, "Content-Length must be a non-negative whole number")
            return
        length = int(length_text)
        if length > MAX_REQUEST_BYTES:
            self._refuse(413, "request too large")
            return
        body = self.rfile.read(length) if length else b""
        if len(body) < length:
            self.close_connection = True
            return  # the client hung up mid-body: nothing to answer
        allowed = []
        for route in self.server.routes:
            match = route.pattern.match(url.path)
            if match is None:
                continue
            if self.command not in route.methods:
                allowed.append(route)
                continue
            # What a client sent in the platform's place is dropped, as App Service drops it.
            headers = {
                k: v
                for k, v in self.headers.items()
                if not k.lower().startswith(PRINCIPAL_PREFIX) and k.lower() != STAND_IN_HEADER.lower()
            }
            if self.server.principal is not None:
                headers[PRINCIPAL_HEADER] = self.server.principal
                headers[STAND_IN_HEADER] = stand_in_token()
            request = func.HttpRequest(
                method=self.command,
                url=f"http://{host}{self.path}",
                headers=headers,
                params=dict(parse_qsl(url.query)),
                # The Functions host decodes route values: /api/cases/INV%201 is case "INV 1".
                route_params={k: unquote(v) for k, v in match.groupdict().items()},
                body=body,
            )
            try:
                response = self.server.runner(lambda r=route, q=request: r.function(q))
            except Exception:
                log.exception("function %s failed", route.name)
                self._write(500, b'{"error":"the function failed; see the host log"}', "application/json")
                return
            self._write(
                response.status_code,
                response.get_body(),
                _content_type(response),
                extra=response.headers,
            )
            return
        if allowed:
            self._write(405, json.dumps({"error": f"{self.command} not allowed"}).encode(), "application/json")
        else:
            self._write(404, json.dumps({"error": f"no function serves {url.path}"}).encode(), "application/json")

    def _write(self, status: int, body: bytes, mimetype: str, extra: Any = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", mimetype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (extra or {}).items():  # the function's own headers (Cache-Control, Location, ...)
            if name.lower() not in ("content-type", "content-length", "connection", "transfer-encoding"):
                self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


def _content_type(response: func.HttpResponse) -> str:
    mimetype = response.mimetype or "application/json"
    return f"{mimetype}; charset={response.charset}" if mimetype.startswith("text/") else mimetype


class HttpFrontend:
    """A threaded HTTP server over the app's HTTP functions. ``runner`` calls a function: sync functions
    run in the request thread, coroutines on the host's event loop."""

    def __init__(
        self,
        host: str,
        port: int,
        routes: list[Route],
        loop: asyncio.AbstractEventLoop,
        *,
        principal: str | None = None,
        client_timeout: float = SOCKET_TIMEOUT_SECONDS,
    ) -> None:
        """``principal``: an encoded ``X-MS-CLIENT-PRINCIPAL`` to send with every request (``--as``)."""
        self._loop = loop
        self._server = _Server((host, port), routes, self._run, principal, client_timeout)
        self._thread = threading.Thread(target=self._server.serve_forever, name="dev-http", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def _run(self, call: Callable[[], Any]) -> Any:
        result = call()
        if inspect.isawaitable(result):
            return asyncio.run_coroutine_threadsafe(_await(result), self._loop).result()
        return result

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


async def _await(awaitable: Any) -> Any:
    return await awaitable
