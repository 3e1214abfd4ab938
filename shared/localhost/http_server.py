"""The local host's HTTP side: serves every ``httpTrigger`` function under ``/api/<route>``.

Routes come from the indexed bindings (``route``, ``methods``), with ``{name}`` segments as route
parameters, as the Functions host matches them. Requests become ``azure.functions.HttpRequest``;
the function's ``HttpResponse`` is written back. Function keys are not enforced locally, as with Core
Tools' ``func start``.

Identity stands in for App Service Authentication: a client's own ``X-MS-CLIENT-PRINCIPAL*`` headers are
always removed (as the platform removes them), and with ``casekeeper dev --as NAME`` every request
carries that local identity instead (``shared.web.identity``).
"""

from __future__ import annotations

import asyncio
import inspect
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

from shared.web.identity import PRINCIPAL_HEADER

log = logging.getLogger("casekeeper.dev.http")
PRINCIPAL_PREFIX = PRINCIPAL_HEADER.lower()

MAX_REQUEST_BYTES = 10 * 1024 * 1024  # the Functions host's own limit is larger; the app refuses > 256 KiB


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

    def __init__(
        self,
        address: tuple[str, int],
        routes: list[Route],
        runner: Callable[[Any], Any],
        principal: str | None = None,
    ) -> None:
        super().__init__(address, _Handler)
        self.routes = routes
        self.runner = runner
        self.principal = principal


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            self._write(413, b'{"error":"request too large"}', "application/json")
            return
        body = self.rfile.read(length) if length else b""
        allowed = []
        for route in self.server.routes:
            match = route.pattern.match(url.path)
            if match is None:
                continue
            if self.command not in route.methods:
                allowed.append(route)
                continue
            headers = {k: v for k, v in self.headers.items() if not k.lower().startswith(PRINCIPAL_PREFIX)}
            if self.server.principal is not None:
                headers[PRINCIPAL_HEADER] = self.server.principal
            request = func.HttpRequest(
                method=self.command,
                url=f"http://{self.headers.get('Host', 'localhost')}{self.path}",
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
    ) -> None:
        """``principal``: an encoded ``X-MS-CLIENT-PRINCIPAL`` to send with every request (``--as``)."""
        self._loop = loop
        self._server = _Server((host, port), routes, self._run, principal)
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
