"""The local Cosmos DB test server (``@vercel/cosmosdb-server`` via ``cosmos_server.js`` beside this file).

``start_cosmos_server()`` spawns ``node devhost/cosmos_server.js 0`` on a free loopback port and
returns once it listens; ``make_cosmos_store(server, database)`` creates a database with every container
and returns a store on it. The server keeps data in memory only: give each test its own database.

The tests use it, and so does ``casekeeper chaos --store cosmos`` (which is why it is product code).

Needs ``node`` on PATH and ``npm ci`` run in the repository root (the package is pinned in
``package-lock.json``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

import httpx

from casekeeper.stores.cosmos import CosmosDocumentStore

REPO_ROOT: Final = Path(__file__).resolve().parents[1]
LAUNCHER: Final = Path(__file__).with_suffix(".js")
PACKAGE_DIR: Final = REPO_ROOT / "node_modules" / "@vercel" / "cosmosdb-server"

COSMOS_KEY: Final = base64.b64encode(b"casekeeper-local-cosmos-test-key").decode("ascii")
"""Any valid base64 string is accepted by the test server; the SDK insists on base64."""

# The SDK skips TLS verification for 127.0.0.1/localhost (the package's certificate is self-signed
# and expired), and urllib3 then warns on every request. Tests can filter it with this marker:
#     pytestmark = pytest.mark.filterwarnings(INSECURE_REQUEST_WARNING_FILTER)
INSECURE_REQUEST_WARNING_FILTER: Final = "ignore::urllib3.exceptions.InsecureRequestWarning"


SEED_BATCH: Final = 500
"""Documents per seeding request: the server answers 500 creates in a few tens of milliseconds."""


class CosmosServerError(RuntimeError):
    """The test server could not be started (missing tool or package, crash, timeout)."""


class CosmosServer:
    """A running test server. ``endpoint`` and ``key`` are what a ``CosmosClient`` needs.

    Use as a context manager or call :meth:`stop`; either way the process also exits by itself when
    this Python process dies, because it watches its stdin (a pipe we hold).
    """

    key: str = COSMOS_KEY

    def __init__(self, process: subprocess.Popen[str], port: int, stderr_file: IO[str]) -> None:
        self.process = process
        self.port = port
        self._stderr_file = stderr_file

    @property
    def endpoint(self) -> str:
        # 127.0.0.1, not localhost: the server binds IPv4 loopback only and advertises this host in its
        # account metadata; localhost may resolve to ::1 first.
        return f"https://127.0.0.1:{self.port}"

    def stderr_text(self) -> str:
        """What the server wrote to stderr so far (the package logs its internal errors there)."""
        self._stderr_file.flush()
        return Path(self._stderr_file.name).read_text(encoding="utf-8", errors="replace")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server (close its stdin, then SIGTERM, then SIGKILL). Idempotent."""
        process = self.process
        if process.poll() is None:
            with contextlib.suppress(OSError):
                if process.stdin is not None:
                    process.stdin.close()
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.terminate()
                try:
                    process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=timeout)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        if not self._stderr_file.closed:
            self._stderr_file.close()
            Path(self._stderr_file.name).unlink(missing_ok=True)

    def set_faults(self, database: str, *, delay: float = 0.0, throttle_ms: int = 0) -> None:
        """Make the server slow or throttling for ``database`` only (the other tests' databases are served as
        usual): every request on its documents is held ``delay`` seconds before it is served, or, with
        ``throttle_ms``, answered 429 with ``x-ms-retry-after-ms: throttle_ms``, as Cosmos DB throttles. No
        arguments: served as usual again. A test-server tool, never a product path."""
        spec = {"database": database, "delayMs": int(delay * 1000), "throttleMs": int(throttle_ms)}
        with httpx.Client(verify=False, timeout=10.0) as client:  # noqa: S501 -- loopback test server only
            response = client.post(f"{self.endpoint}/_casekeeper/faults", json=spec)
        if response.status_code != 204:
            raise CosmosServerError(f"setting faults: HTTP {response.status_code}: {response.text[:300]}")

    def seed(
        self,
        database: str,
        container: str,
        documents: Iterable[tuple[str, Mapping[str, Any]]],
        *,
        batch: int = SEED_BATCH,
    ) -> int:
        """Create ``documents`` ((partition key value, body) pairs) in ``container`` of ``database`` many at a
        time, for a benchmark that needs a large store: one request per ``batch`` documents through the server's
        bulk route (``x-ms-cosmos-is-batch-request``), which writes each document as a create would (its own
        ``_etag`` and ``_ts``). A test-server tool, never a product path: a benchmark that seeded 100k documents
        one SDK call at a time waited minutes. Returns how many were created; raises ``CosmosServerError`` if
        any create was refused (an id taken, a body the server rejects), naming the first."""
        url = f"{self.endpoint}/dbs/{database}/colls/{container}/docs"
        headers = {"x-ms-cosmos-is-batch-request": "true", "content-type": "application/json"}
        created = 0
        pending: list[dict[str, Any]] = []
        # The server ignores authorization; its certificate is self-signed (see INSECURE_REQUEST_WARNING_FILTER).
        with httpx.Client(verify=False, timeout=60.0) as client:  # noqa: S501 -- loopback test server only

            def flush() -> None:
                nonlocal created
                if not pending:
                    return
                response = client.post(url, content=json.dumps(pending), headers=headers)
                if response.status_code >= 300:
                    raise CosmosServerError(f"seeding {container}: HTTP {response.status_code}: {response.text[:300]}")
                for op, answer in zip(pending, response.json(), strict=True):
                    if answer.get("statusCode") != 201:
                        raise CosmosServerError(
                            f"seeding {container}: {op['resourceBody'].get('id')!r} answered {answer.get('statusCode')}"
                        )
                created += len(pending)
                pending.clear()

            for partition, body in documents:
                pending.append(
                    {"operationType": "Create", "partitionKey": json.dumps([partition]), "resourceBody": dict(body)}
                )
                if len(pending) >= batch:
                    flush()
            flush()
        return created

    def __enter__(self) -> CosmosServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"CosmosServer(endpoint={self.endpoint!r}, pid={self.process.pid})"


def _read_stdout(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    # Hands every stdout line to the starter, then None at EOF. Runs for the server's lifetime so
    # the pipe never fills up, whatever the server prints later.
    for line in stream:
        lines.put(line)
    lines.put(None)


def start_cosmos_server(timeout: float = 30.0) -> CosmosServer:
    """Start the test server on a free loopback port and wait until it listens.

    Raises :class:`CosmosServerError` when ``node`` or the npm package is missing, or when the server
    exits or prints no ``LISTENING <port>`` line within ``timeout`` seconds (the message carries its
    stderr)."""
    node = shutil.which("node")
    if node is None:
        raise CosmosServerError("node is not on PATH; the Cosmos DB test server needs Node.js 20")
    if not PACKAGE_DIR.is_dir():
        raise CosmosServerError(f"{PACKAGE_DIR} is missing; run `npm ci` in {REPO_ROOT}")
    # stderr goes to a file, not a pipe: nobody reads it while tests run, and a full pipe would block
    # the server the moment it logs enough errors.
    stderr_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 -- CosmosServer.stop closes it
        mode="w+", prefix="cosmos-server-", suffix=".log", delete=False, encoding="utf-8"
    )
    try:
        process = subprocess.Popen(
            [node, str(LAUNCHER), "0"],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr_file,
            text=True,
        )
    except OSError as exc:
        stderr_file.close()
        Path(stderr_file.name).unlink(missing_ok=True)
        raise CosmosServerError(f"could not run {node} {LAUNCHER}: {exc}") from exc
    server = CosmosServer(process, 0, stderr_file)
    assert process.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(
        target=_read_stdout,
        args=(process.stdout, lines),
        name="cosmos-stdout",
        daemon=True,
    )
    reader.start()
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    line: str | None = ""
    while line is not None:  # None: stdout closed, the server is gone
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            line = lines.get(timeout=remaining)
        except queue.Empty:
            break
        if line is not None and line.startswith("LISTENING "):
            server.port = int(line.split()[1])
            return server
        if line is not None:
            seen.append(line.rstrip())
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=1.0)  # an exiting server closes stdout just before its exit code is set
    exit_code = process.poll()
    stderr = server.stderr_text().strip() or "(empty)"
    server.stop(timeout=2.0)
    reason = f"did not listen within {timeout:.0f}s"
    if exit_code is not None:
        reason = f"exited with code {exit_code}"
    raise CosmosServerError(f"Cosmos DB test server {reason}.\nstdout: {seen!r}\nstderr:\n{stderr}")


def make_cosmos_store(server: CosmosServer, database: str) -> CosmosDocumentStore:
    """A store on a new (or existing) ``database`` of ``server``, with every container created.
    The caller closes it."""
    store = CosmosDocumentStore(server.endpoint, database, credential=server.key)
    try:
        store.ensure_containers()
    except BaseException:
        store.close()
        raise
    return store
