"""A local stand-in for an Azure OpenAI chat deployment, on the standard library: the model path end to end
without a model. Tests, ``casekeeper dev --model stub`` (``make run`` with ``CASEKEEPER_MODEL=stub``) and
``casekeeper chaos --model stub`` use it; the real client (``shared.workflow.model_client``) talks to it.

It answers the route the Azure OpenAI SDK calls for a deployment,
``POST /openai/deployments/<deployment>/chat/completions?api-version=...``, with a chat completion whose
content is a ``ModelProposal`` as JSON (structured output). Authentication as Azure checks it: the
``api-key`` header must be the stub's key when it has one, else a bearer token must be present; otherwise
401. The prompt is the JSON the proposer sends (facts, ``overBilled``, ``received``, ``outstanding``,
``remaining``, ``tolerance``); ``correct`` decides from those numbers as the invoice rules do.

What each request gets is scripted: the next step of the script, else the default mode, or with ``mix``
a seeded random choice. Modes:

- ``correct``: the right proposal; ``answer``: the step's ``content`` as it is (any text, e.g. a proposal
  with three decimals); ``over``: a credit note above the remainder; ``wrong_currency``;
  ``malformed`` (not JSON); ``missing_field`` (JSON without ``action``); ``refusal`` (the ``refusal`` field,
  as the service sends it); ``content_filter`` (400 with code ``content_filter``);
- ``slow``: ``correct`` after ``seconds`` (default 5); ``throttle``: 429 with ``Retry-After: retryAfter``
  (default 1); ``error``: ``status`` (default 500).

Control endpoints: ``GET /_control/requests`` (every request: deployment, mode, auth kind, the prompt),
``GET /_control/script`` and ``POST /_control/script`` with ``{"steps": [{"mode": ..., ...}], "default":
MODE, "mix": {MODE: weight}, "seed": N}`` (a POST replaces the script).

From a shell: ``casekeeper model-stub --port 8766`` prints its URL on stdout.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import threading
import time
from decimal import Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

MODES = (
    "correct",
    "answer",
    "over",
    "wrong_currency",
    "malformed",
    "missing_field",
    "refusal",
    "content_filter",
    "slow",
    "throttle",
    "error",
)
ROUTE = re.compile(r"/openai/deployments/(?P<deployment>[^/]+)/chat/completions")
MODEL_NAME = "stub-model"
MAX_BODY_BYTES = 1_000_000


class Script:
    """What the next requests get; thread-safe."""

    def __init__(self, *, default: str = "correct", mix: dict[str, float] | None = None, seed: int = 0) -> None:
        self._lock = threading.Lock()
        self.replace({"default": default, "mix": mix or {}, "seed": seed})

    def replace(self, spec: dict[str, Any]) -> None:
        """Raises ``ValueError`` naming the problem; the script is unchanged then."""
        steps = [dict(s) for s in spec.get("steps") or []]
        default = str(spec.get("default") or "correct")
        mix = {str(k): float(v) for k, v in (spec.get("mix") or {}).items()}
        for mode in [default, *mix, *(str(s.get("mode")) for s in steps)]:
            if mode not in MODES:
                raise ValueError(f"unknown mode {mode!r}; modes: {', '.join(MODES)}")
        if any(w < 0 for w in mix.values()):
            raise ValueError("mix weights must not be negative")
        with self._lock:
            self._steps, self._default, self._mix = steps, default, mix
            self._random = random.Random(int(spec.get("seed") or 0))  # noqa: S311 - a reproducible test mix

    def next(self) -> dict[str, Any]:
        with self._lock:
            if self._steps:
                return self._steps.pop(0)
            if self._mix and sum(self._mix.values()) > 0:
                modes, weights = zip(*self._mix.items(), strict=True)
                return {"mode": self._random.choices(modes, weights)[0]}
            return {"mode": self._default}

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            return {"steps": list(self._steps), "default": self._default, "mix": dict(self._mix)}


def correct(prompt: dict[str, Any]) -> dict[str, Any]:
    """The invoice rules' decision from the numbers the prompt carries (``shared.domain.credit.decide``)."""
    try:
        remaining = Decimal(str(prompt["remaining"]))
        outstanding = Decimal(str(prompt["outstanding"]))
        tolerance = Decimal(str(prompt.get("tolerance", "5.00")))
        currency = str(prompt["facts"]["currency"])
    except (KeyError, TypeError, InvalidOperation):
        return {"action": "needs_review", "rationale": "the prompt lacks the numbers to decide"}
    if outstanding > 0 and remaining < 0:
        return {"action": "needs_review", "rationale": "more requested than over-billed"}
    if remaining > tolerance:
        return {
            "action": "request_credit_note",
            "amount": f"{remaining:.2f}",
            "currency": currency,
            "rationale": f"over-billed by {remaining:.2f} {currency}",
        }
    if remaining < -tolerance:
        return {"action": "needs_review", "rationale": f"under-billed by {-remaining:.2f} {currency}"}
    if outstanding > 0:
        return {"action": "await_credit", "rationale": "the outstanding request covers the over-billing"}
    return {"action": "approve", "rationale": "within tolerance"}


class ModelStub:
    """The server; a context manager. ``url`` is the endpoint to set as ``AZURE_OPENAI_ENDPOINT``."""

    def __init__(
        self, *, port: int = 0, api_key: str | None = None, script: Script | None = None, quiet: bool = True
    ) -> None:
        self.api_key = api_key
        self.script = script or Script()
        self.quiet = quiet
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ModelStub:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ModelStub:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def calls(self) -> list[dict[str, Any]]:
        """The chat-completion requests so far (not the control ones)."""
        with self._lock:
            return [dict(r) for r in self.requests]

    def record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)
        if not self.quiet:
            print(json.dumps({k: entry[k] for k in ("deployment", "mode", "auth", "status")}), file=sys.stderr)


def _handler(stub: ModelStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == "/_control/requests":
                self._json(200, {"requests": stub.calls()})
            elif path == "/_control/script":
                self._json(200, stub.script.to_json())
            else:
                self._json(404, {"error": {"code": "NotFound", "message": f"no route {path}"}})

        def do_POST(self) -> None:
            path = urlsplit(self.path).path
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._json(413, {"error": {"code": "TooLarge", "message": "request body too large"}})
                return
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._json(400, {"error": {"code": "BadRequest", "message": "body is not JSON"}})
                return
            if path == "/_control/script":
                try:
                    stub.script.replace(body if isinstance(body, dict) else {})
                except (ValueError, TypeError) as exc:
                    self._json(400, {"error": {"code": "BadScript", "message": str(exc)}})
                    return
                self._json(200, stub.script.to_json())
                return
            route = ROUTE.fullmatch(path)
            if route is None:
                self._json(404, {"error": {"code": "DeploymentNotFound", "message": f"no route {path}"}})
                return
            self._complete(route["deployment"], body)

        def _complete(self, deployment: str, body: dict[str, Any]) -> None:
            auth = self._auth()
            messages = body.get("messages") or []
            text = str(messages[-1].get("content") or "") if messages else ""
            try:
                prompt = json.loads(text)
            except ValueError:
                prompt = {}
            step = stub.script.next() if auth else {"mode": "unauthorized"}
            entry = {
                "deployment": deployment,
                "mode": step["mode"],
                "auth": auth,
                "prompt": prompt,
                "responseFormat": (body.get("response_format") or {}).get("type"),
                "at": time.time(),
            }
            status, reply, headers = _answer(step, prompt)
            entry["status"] = status
            stub.record(entry)
            if step["mode"] == "slow":
                time.sleep(float(step.get("seconds", 5)))
            self._json(status, reply, headers)

        def _auth(self) -> str | None:
            key = self.headers.get("api-key")
            bearer = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
            if stub.api_key is not None:
                return "key" if key == stub.api_key else ("bearer" if bearer and not key else None)
            return "key" if key else ("bearer" if bearer else None)

        def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (its timeout): nothing to tell it

    return Handler


def _answer(step: dict[str, Any], prompt: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
    mode = step["mode"]
    if mode == "unauthorized":
        return 401, _error("401", "Access denied due to invalid subscription key or wrong API endpoint."), {}
    if mode == "throttle":
        wait = step.get("retryAfter", 1)
        message = f"Requests have exceeded the rate limit. Retry after {wait} seconds."
        return 429, _error("429", message), {"Retry-After": str(wait)}
    if mode == "error":
        status = int(step.get("status", 500))
        return status, _error("InternalServerError", "The server had an error processing your request."), {}
    if mode == "content_filter":
        error = _error("content_filter", "The response was filtered due to the prompt triggering the content policy.")
        error["error"]["innererror"] = {"code": "ResponsibleAIPolicyViolation", "content_filter_result": {}}
        return 400, error, {}
    if mode == "refusal":
        return 200, _completion(None, refusal="I can't help with approving payments."), {}
    if mode == "malformed":
        return 200, _completion("I think the supplier should probably be paid."), {}
    if mode == "answer":
        content = step.get("content", "")
        return 200, _completion(content if isinstance(content, str) else json.dumps(content)), {}
    proposal = correct(prompt)
    if mode == "missing_field":
        proposal.pop("action", None)
    elif mode == "over":
        remaining = Decimal(str(prompt.get("remaining", "0")))
        currency = str((prompt.get("facts") or {}).get("currency", "EUR"))
        proposal = {
            "action": "request_credit_note",
            "amount": f"{max(remaining, Decimal(0)) + Decimal('100.00'):.2f}",
            "currency": currency,
            "rationale": "asking for more than remains",
        }
    elif mode == "wrong_currency":
        proposal = {**proposal, "action": "request_credit_note", "currency": "XXX"}
        proposal.setdefault("amount", str(prompt.get("remaining", "1.00")))
    return 200, _completion(json.dumps(proposal)), {}


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def _completion(content: str | None, *, refusal: str | None = None) -> dict[str, Any]:
    prompt_tokens, completion_tokens = 180, len(content or refusal or "") // 4 + 1
    return {
        "id": f"chatcmpl-stub-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL_NAME,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": refusal},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


DEV_DEPLOYMENT = "stub"


def settings_for(stub: ModelStub, deployment: str = DEV_DEPLOYMENT) -> dict[str, str]:
    """The settings that point Casekeeper's model path at ``stub`` (the real client, key auth)."""
    return {
        "AZURE_OPENAI_ENDPOINT": stub.url,
        "AZURE_OPENAI_DEPLOYMENT": deployment,
        "AZURE_OPENAI_API_KEY": stub.api_key or "local-stand-in",
    }


def serve_for_dev() -> dict[str, str]:
    """``casekeeper dev --model stub``: a stand-in on a free loopback port for the life of this process,
    answering ``correct``; returns its settings."""
    stub = ModelStub(api_key="local-stand-in").start()
    return settings_for(stub)


def parse_mix(raw: str) -> dict[str, float]:
    """``throttle=0.1,error=0.05`` -> weights; ``correct`` takes the rest of 1."""
    mix: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        mode, _, weight = part.partition("=")
        mix[mode.strip()] = float(weight)
    mix.setdefault("correct", max(0.0, 1.0 - sum(mix.values())))
    return mix


def main(argv: list[str] | None = None) -> int:
    """Serve a scriptable stand-in for an Azure OpenAI chat deployment locally."""
    parser = argparse.ArgumentParser(prog="casekeeper model-stub", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--key", default=None, help="the api-key it accepts (default: any key or bearer token)")
    parser.add_argument("--default", default="correct", choices=MODES, help="the mode when nothing is scripted")
    parser.add_argument("--mix", default="", help="random modes by weight, e.g. throttle=0.1,error=0.05")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="no line per request on stderr")
    args = parser.parse_args(argv)
    try:
        script = Script(default=args.default, mix=parse_mix(args.mix) if args.mix else None, seed=args.seed)
    except ValueError as exc:
        print(f"casekeeper model-stub: {exc}", file=sys.stderr)
        return 2
    try:
        stub = ModelStub(port=args.port, api_key=args.key, script=script, quiet=args.quiet).start()
    except OSError as exc:
        print(f"casekeeper model-stub: cannot listen on port {args.port}: {exc.strerror}", file=sys.stderr)
        return 2
    print(stub.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        stub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
