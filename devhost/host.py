"""``casekeeper dev``: the embedded local host. It serves the very same functions as Azure, on SQLite.

It discovers the functions from ``function_app``'s indexed bindings and serves each with a local
stand-in for what only Azure has:

==================  =================================================================================
binding             local stand-in
==================  =================================================================================
httpTrigger         a real HTTP server, routes under ``/api/`` (``http_server``)
serviceBusTrigger   the durable SQLite session queue (``queue``): one receiver per session, FIFO,
                    peek-lock with renewal, redelivery, dead-lettering, scheduled messages, dedupe
cosmosDBTrigger     a change feed over the SQLite store in commit order, continuation persisted
                    (``changefeed``), retried per the function's ``@retry`` policy
timerTrigger        the NCRONTAB schedule (``schedule``)
==================  =================================================================================

Settings come from the environment, falling back to ``local.settings.json``; the stores live under
``--data``. Everything is durable: after ``kill -9`` and a restart on the same ``--data``, nothing
accepted is lost and a message that was being handled is redelivered when its lock expires.

The case worker (the ``serviceBusTrigger`` functions) runs in ``--workers`` processes, as the Functions
host runs ``FUNCTIONS_WORKER_PROCESS_COUNT`` language workers: :class:`CaseWorkers` starts them, each a
``casekeeper dev`` of its own that builds the app from the same settings and receives sessions from the
same queue file (the session locks keep one receiver per session across processes), and restarts one
that dies. They die with this process, ``kill -9`` included. ``--workers 1`` keeps them in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import inspect
import ipaddress
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casekeeper import StoreError
from casekeeper.stores.sqlite import SqliteDocumentStore
from devhost.changefeed import LocalChangeFeed, to_document_list
from devhost.http_server import SOCKET_TIMEOUT_SECONDS, HttpFrontend, Route
from devhost.schedule import NcrontabSchedule, timer_request
from shared.app import bootstrap
from shared.app.bootstrap import Services
from shared.app.retention import backend
from shared.app.settings import SETTINGS, Settings
from shared.app.telemetry import configure as configure_telemetry
from shared.app.telemetry import quiet_library_loggers
from shared.messaging.local import LocalDeadLetters, LocalQueueEventSender
from shared.messaging.sqlite_queue import LocalSessionQueue, LockLost, to_service_bus_message
from shared.web.identity import ROLE_ALIASES, encode_principal, role_name

log = logging.getLogger("casekeeper.dev")

SECRET_FILE = "webhook-secret"  # noqa: S105 - a file name, not a secret


@dataclass
class DevOptions:
    host: str = "127.0.0.1"
    port: int = 7071
    data: Path = Path(".casekeeper/dev")
    lock_duration: float = 30.0
    max_delivery_count: int = 10
    sessions: int | None = None  # default: host.json's maxConcurrentSessions
    poll_interval: float = 0.2
    app_dir: Path = field(default_factory=Path.cwd)
    identity: str | None = None
    """``--as NAME``: every request carries this signed-in identity, as App Service Authentication would."""
    roles: tuple[str, ...] = ()
    """``--role``: its app roles (``approver``, ``operator`` or a full role name)."""
    workers: int = 1
    """``--workers``: case-worker processes; 1 runs the case worker in this process (the CLI's default is
    the number of cores). The session threads (``sessions``) are shared out among them."""
    case_worker_of: int | None = None
    """Set in a case-worker process: the pid of the host that started it. Serves the queue triggers only."""
    client_timeout: float = SOCKET_TIMEOUT_SECONDS
    """``--client-timeout``: an HTTP client silent this long is disconnected."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a ``--host`` value) is reachable from this machine only."""
    if host.strip().lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def load_environment(options: DevOptions, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Settings for the local host: ``local.settings.json`` (``Values``), overridden by the environment.

    The queue is always the local one, and unless Cosmos DB is configured the store is SQLite, both
    under ``--data``. Without ``WEBHOOK_SECRET`` a secret is generated once and kept in ``--data``.
    """
    values: dict[str, str] = {}
    local = options.app_dir / "local.settings.json"
    if local.exists():
        values.update({k: str(v) for k, v in json.loads(local.read_text()).get("Values", {}).items()})
    values.update(base if base is not None else os.environ)
    data = options.data.resolve()
    # The folder holds the cases, the queue, telemetry and the webhook secret: this user's only.
    data.mkdir(mode=0o700, parents=True, exist_ok=True)
    data.chmod(0o700)
    values["CASEKEEPER_QUEUE"] = "local"
    values["CASEKEEPER_LOCAL_QUEUE_PATH"] = str(data / "queue.sqlite")
    if values.get("CASEKEEPER_STORE", "sqlite").lower() != "cosmos":
        values["CASEKEEPER_STORE"] = "sqlite"
        values["CASEKEEPER_SQLITE_PATH"] = str(data / "casekeeper.sqlite")
    values.setdefault("CASEKEEPER_TELEMETRY_FILE", str(data / "telemetry.jsonl"))
    if not values.get("WEBHOOK_SECRET"):
        secret_file = data / SECRET_FILE
        if not secret_file.exists():
            # Created 0600 in one step: a file written first and restricted after is readable in between.
            try:
                fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass  # another process created it meanwhile: read theirs
            else:
                with os.fdopen(fd, "w") as out:
                    out.write(secrets.token_hex(32) + "\n")
        values["WEBHOOK_SECRET"] = secret_file.read_text().strip()
    return values


def _resolve(value: str, env: Mapping[str, str]) -> str:
    """``%NAME%`` binding expressions, as the Functions host resolves them from app settings."""
    if value.startswith("%") and value.endswith("%"):
        name = value.strip("%")
        default = next((s.default for s in SETTINGS if s.name == name), None)
        resolved = env.get(name) or default
        if resolved is None:
            raise ValueError(f"binding refers to setting {name}, which is not set")
        return resolved
    return value


def _host_json(app_dir: Path) -> dict[str, Any]:
    path = app_dir / "host.json"
    return json.loads(path.read_text()) if path.exists() else {}


class LocalHost:
    workers: CaseWorkers | None = None
    """The case-worker processes, when ``--workers`` is more than 1 (started by :meth:`start`)."""

    def __init__(self, options: DevOptions, env: Mapping[str, str]) -> None:
        self.options = options
        self.env = dict(env)
        settings = Settings.from_mapping(self.env)
        os.environ.setdefault("CASEKEEPER_TELEMETRY_FILE", self.env["CASEKEEPER_TELEMETRY_FILE"])
        configure_telemetry(settings)
        self.queue = LocalSessionQueue(
            settings.local_queue_path,
            lock_duration=options.lock_duration,
            max_delivery_count=options.max_delivery_count,
        )
        self.services: Services = bootstrap.start(
            bootstrap.build(
                settings,
                sender=LocalQueueEventSender(self.queue, settings.case_events_queue),
                dead_letters=LocalDeadLetters(self.queue, settings.case_events_queue),
                # The door sends with its own short budget, as in Azure (docs/design.md#door-budget).
                door_sender=bootstrap.open_door_sender(settings),
            )
        )
        bootstrap.use(self.services)
        self.loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self.loop.run_forever, name="dev-loop", daemon=True)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._routes: list[Route] = []
        self._plan: list[str] = []
        self._discover()
        principal = (
            encode_principal(options.identity, [role_name(r) for r in options.roles])
            if options.identity is not None
            else None
        )
        self.http: HttpFrontend | None = None
        if options.case_worker_of is None:
            self.http = HttpFrontend(
                options.host,
                options.port,
                self._routes,
                self.loop,
                principal=principal,
                client_timeout=options.client_timeout,
            )

    # --- discovery ----------------------------------------------------------------------------------

    def _discover(self) -> None:
        import function_app

        host_json = _host_json(self.options.app_dir)
        sb_settings = host_json.get("extensions", {}).get("serviceBus", {})
        sessions = self.options.sessions or int(sb_settings.get("maxConcurrentSessions", 8))
        in_worker = self.options.case_worker_of is not None
        for fn in function_app.create_app().get_functions():
            name = str(fn.get_function_name())
            user = fn.get_user_function()
            [trigger] = [json.loads(b) for b in fn.get_raw_bindings() if json.loads(b)["type"].endswith("Trigger")]
            kind = trigger["type"]
            if in_worker and kind != "serviceBusTrigger":
                continue  # the host that started this process serves the rest
            if kind == "serviceBusTrigger" and self.options.workers > 1:
                queue_name = _resolve(trigger["queueName"], self.env)
                if self.workers is None:  # one set of processes serves every queue trigger
                    self.workers = CaseWorkers(self.options, self.env, sessions)
                    self._thread("case-workers", self.workers.supervise, self._stop)
                shares = "+".join(str(n) for n in self.workers.sessions)
                self._plan.append(
                    f"queue   {name:<18} {queue_name} (sessions, {sessions} at a time in "
                    f"{len(self.workers.sessions)} worker processes: {shares})"
                )
            elif kind == "httpTrigger":
                self._routes.append(Route.build(name, trigger["route"], trigger["methods"], user))
                self._plan.append(f"http    {name:<18} {','.join(trigger['methods']):<5} /api/{trigger['route']}")
            elif kind == "serviceBusTrigger":
                queue_name = _resolve(trigger["queueName"], self.env)
                for i in range(sessions):
                    self._thread(f"sb-{name}-{i}", self._consume, user, queue_name)
                self._plan.append(f"queue   {name:<18} {queue_name} (sessions, {sessions} at a time)")
            elif kind == "cosmosDBTrigger":
                container = _resolve(trigger["containerName"], self.env)
                store = backend(self.services.store)  # the SQLite store under the retention policy
                if not isinstance(store, SqliteDocumentStore):
                    log.warning(
                        "%s: no local change feed for a Cosmos DB store; the timer's sweep is the backstop", name
                    )
                    continue
                feed = LocalChangeFeed(store, container, f"{name}:{container}")
                retry = fn.get_settings_dict("retry_policy") or {}
                self._thread(f"feed-{name}", self._follow, user, feed, retry)
                self._plan.append(f"feed    {name:<18} {container} (change feed, lease in the store file)")
            elif kind == "timerTrigger":
                schedule = NcrontabSchedule(_resolve(trigger["schedule"], self.env))
                self._thread(f"timer-{name}", self._tick, user, schedule)
                self._plan.append(f"timer   {name:<18} {schedule}")
            else:
                log.warning("function %s: trigger %s has no local stand-in; not served", name, kind)

    def _thread(self, name: str, target: Callable[..., None], *args: Any) -> None:
        self._threads.append(threading.Thread(target=target, args=args, name=name, daemon=True))

    # --- invocation ---------------------------------------------------------------------------------

    def _invoke(self, function: Callable[..., Any], *args: Any) -> Any:
        result = function(*args)
        if inspect.isawaitable(result):
            return asyncio.run_coroutine_threadsafe(_await(result), self.loop).result()
        return result

    def _consume(self, function: Callable[..., Any], queue_name: str) -> None:
        while not self._stop.is_set():
            try:
                msg = self.queue.receive(queue_name, timeout=0.5)
            except Exception:
                log.exception("receive from %s failed", queue_name)
                self._stop.wait(1.0)
                continue
            if msg is None:
                continue
            renewing = threading.Event()
            renewer = threading.Thread(target=self._renew, args=(msg, renewing), daemon=True)
            renewer.start()
            try:
                self._invoke(function, to_service_bus_message(msg))
            except Exception as exc:
                renewing.set()
                log.warning(
                    "case %s: message %s failed (%s: %s); redelivering (delivery %d of %d)",
                    msg.session_id,
                    msg.message_id,
                    type(exc).__name__,
                    exc,
                    msg.delivery_count,
                    self.options.max_delivery_count,
                )
                try:
                    self.queue.abandon(msg)
                except (LockLost, StoreError) as settle:  # the lock expires and the message comes back
                    log.warning("case %s: could not abandon %s: %s", msg.session_id, msg.message_id, settle)
                continue
            renewing.set()
            try:
                self.queue.complete(msg)
            except LockLost:
                log.warning("case %s: lock on message %s was lost before completion", msg.session_id, msg.message_id)
            except StoreError as settle:  # handled, not completed: redelivered when the lock expires (idempotent)
                log.warning("case %s: could not complete %s: %s", msg.session_id, msg.message_id, settle)

    def _renew(self, msg: Any, done: threading.Event) -> None:
        """Keep the session lock while a handler runs (``maxAutoLockRenewalDuration``)."""
        while not done.wait(self.options.lock_duration / 3):
            try:
                self.queue.renew_lock(msg)
            except LockLost:
                return
            except StoreError as exc:  # try again at the next tick; the lock has two more ticks to live
                log.warning("case %s: lock renewal failed: %s", msg.session_id, exc)

    def _follow(self, function: Callable[..., Any], feed: LocalChangeFeed, retry: Mapping[str, Any]) -> None:
        attempts = int(retry.get("max_retry_count", 0))
        while not self._stop.is_set():
            try:
                batch = feed.poll()
            except StoreError as exc:
                log.warning("change feed %s: poll failed (%s); retrying", feed.name, exc)
                self._stop.wait(1.0)
                continue
            if not len(batch):
                self._stop.wait(self.options.poll_interval)
                continue
            for attempt in range(attempts + 1):
                try:
                    self._invoke(function, to_document_list(batch))
                    break
                except Exception:
                    log.exception("change feed batch failed (attempt %d of %d)", attempt + 1, attempts + 1)
                    if self._stop.wait(min(2.0**attempt, 30.0)):
                        return
            else:
                # As the Cosmos DB trigger does once retries are exhausted; the timer's sweep is the backstop.
                log.error("change feed batch skipped after %d attempts", attempts + 1)
            try:
                feed.commit(batch)
            except StoreError as exc:  # the batch is delivered again: the reconciler is idempotent
                log.warning("change feed %s: commit failed (%s)", feed.name, exc)

    def _tick(self, function: Callable[..., Any], schedule: NcrontabSchedule) -> None:
        due = schedule.next_after(time.time())
        while not self._stop.wait(max(0.0, due - time.time())):
            past_due = time.time() - due > 1.0
            try:
                self._invoke(function, timer_request(past_due=past_due, schedule_status=None))
            except Exception:
                log.exception("timer function failed")
            due = schedule.next_after(time.time())

    # --- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        self._loop_thread.start()
        if self.http is not None:
            self.http.start()
        for thread in self._threads:
            thread.start()

    def describe(self) -> str:
        if self.http is None:
            lines = [f"Casekeeper case worker of host {self.options.case_worker_of}  (pid {os.getpid()})", *self._plan]
            return "\n".join(lines)
        lines = [f"Casekeeper local host on {self.http.url}  (data: {self.options.data})", *self._plan]
        if self.options.identity is not None:
            roles = ", ".join(role_name(r) for r in self.options.roles) or "no app roles"
            lines.append(f"local identity: every request is signed in as {self.options.identity} ({roles})")
            lines.append(f"approvals: {self.http.url}/api/approvals   operations: {self.http.url}/api/ops")
        return "\n".join(lines)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop taking work, let handlers in progress finish (bounded), close everything."""
        self._stop.set()
        if self.http is not None:
            self.http.stop()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._loop_thread.join(5.0)
        bootstrap.use(None)
        self.services.close()
        self.queue.close()

    def run_until_signalled(self) -> None:
        done = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: done.set())
        self.start()
        print(self.describe(), flush=True)
        # Any thread may take the signal, and Python runs the handler only on the main thread, between
        # bytecodes: a wait without a timeout could sleep through it. Short waits let the handler run.
        while not done.wait(0.5):
            pass
        log.info("shutting down")
        self.stop()


async def _await(awaitable: Any) -> Any:
    return await awaitable


# --- case-worker processes ------------------------------------------------------------------------


class CaseWorkers:
    """The case worker's processes: started, restarted when one dies, stopped with the host.

    Each is ``casekeeper dev --case-worker-of <this pid>`` with the host's settings in its environment
    and its share of the session threads. It inherits this process's output (its log lines carry
    ``[worker N]``) and process group, so ``kill -9`` of the group takes it too; and it dies with this
    process however that ends: on Linux the kernel kills it (``PR_SET_PDEATHSIG``), and anywhere it
    kills itself when the pipe this process holds open reaches end-of-file.
    """

    RESTART_MAX_DELAY = 30.0

    def __init__(self, options: DevOptions, env: Mapping[str, str], sessions: int) -> None:
        count = max(1, min(options.workers, sessions))
        self.sessions = [sessions // count + (1 if i < sessions % count else 0) for i in range(count)]
        self.options = options
        self.env = dict(env)
        # The code this host runs, first on the path: a worker runs the very same build.
        root = str(Path(__file__).resolve().parents[1])
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * count
        self._alive_r, self._alive_w = os.pipe()  # never inherited: only this process holds the write end

    def argv(self, index: int) -> list[str]:
        o = self.options
        return [
            sys.executable,
            "-m",
            "shared.cli",
            "dev",
            "--data",
            str(o.data.resolve()),
            "--app-dir",
            str(o.app_dir),
            "--lock-duration",
            str(o.lock_duration),
            "--max-delivery-count",
            str(o.max_delivery_count),
            "--sessions",
            str(self.sessions[index]),
            "--workers",
            "1",
            "--case-worker-of",
            str(os.getpid()),
            "--parent-fd",
            str(self._alive_r),
            "--worker-index",
            str(index + 1),
        ]

    def _spawn(self, index: int) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(self.argv(index), env=self.env, stdin=subprocess.DEVNULL, pass_fds=(self._alive_r,))
        log.info("case worker %d started (pid %d, %d sessions)", index + 1, proc.pid, self.sessions[index])
        return proc

    def supervise(self, stop: threading.Event) -> None:
        """Run the workers until ``stop`` is set, then stop them (SIGTERM, then SIGKILL past the grace).

        The thread running this must outlive the workers: on Linux a child's parent-death signal fires
        when the thread that started it ends.
        """
        failures = [0] * len(self.procs)
        started = [0.0] * len(self.procs)
        not_before = [0.0] * len(self.procs)
        try:
            while not stop.is_set():
                for i, proc in enumerate(self.procs):
                    if proc is not None and proc.poll() is None:
                        continue
                    now = time.monotonic()
                    if proc is not None:  # it ended by itself: that is worth a line, and a restart
                        failures[i] = 0 if now - started[i] > self.RESTART_MAX_DELAY else failures[i] + 1
                        delay = min(self.RESTART_MAX_DELAY, 0.5 * 2 ** failures[i])
                        log.log(
                            logging.INFO if proc.returncode == 0 else logging.WARNING,  # 0: stopped by a signal
                            "case worker %d exited with %s; restarting in %.1fs",
                            i + 1,
                            proc.returncode,
                            delay,
                        )
                        not_before[i] = now + delay
                        self.procs[i] = None
                    if now >= not_before[i]:
                        try:
                            self.procs[i] = self._spawn(i)
                        except OSError as exc:
                            log.error("case worker %d could not be started: %s", i + 1, exc)
                            not_before[i] = now + self.RESTART_MAX_DELAY
                            continue
                        started[i] = now
                stop.wait(0.5)
        finally:
            self.stop()

    def stop(self, grace: float = 12.0) -> None:
        running = [p for p in self.procs if p is not None and p.poll() is None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in running:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("case worker pid %d did not stop in %.0fs; killing it", proc.pid, grace)
                proc.kill()
                proc.wait()
        os.close(self._alive_w)
        os.close(self._alive_r)


def die_with_parent(parent_pid: int, parent_fd: int | None, *, death_signal: bool = True) -> None:
    """Make this case-worker process end when the host that started it ends, however it ends.

    ``death_signal=False`` leaves out ``PR_SET_PDEATHSIG``, as where it does not exist (tests).
    """
    if death_signal and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            pr_set_pdeathsig = 1
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # it died before the line above took effect
        os._exit(1)
    if parent_fd is None:
        return

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(parent_fd, 1):
                pass
        # End of file: the host is gone without stopping this worker first. Go as it went, at once.
        print(f"case worker {os.getpid()}: host {parent_pid} is gone; exiting", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def build_parser() -> Any:
    import argparse

    parser = argparse.ArgumentParser(prog="casekeeper dev", description="Serve Casekeeper's functions locally.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7071)
    parser.add_argument("--data", type=Path, default=Path(".casekeeper/dev"), help="where the stores live")
    parser.add_argument("--lock-duration", type=float, default=30.0, help="queue message lock, seconds")
    parser.add_argument(
        "--client-timeout",
        type=float,
        default=SOCKET_TIMEOUT_SECONDS,
        help="seconds an HTTP client may stay silent (a half-sent request) before it is disconnected",
    )
    parser.add_argument("--max-delivery-count", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=None, help="sessions handled at once (host.json)")
    parser.add_argument("--app-dir", type=Path, default=Path.cwd(), help="where function_app.py and host.json are")
    parser.add_argument(
        "--as",
        dest="identity",
        metavar="NAME",
        default=None,
        help="sign every request in as NAME, standing in for App Service Authentication (marked local on the pages)",
    )
    parser.add_argument(
        "--role",
        dest="roles",
        action="append",
        default=[],
        metavar="ROLE",
        help="an app role of the --as identity: approver (Casekeeper.Approver), operator (Casekeeper.Operator); "
        "repeat for several",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="case-worker processes sharing the sessions (default: the number of cores); 1: in this process",
    )
    parser.add_argument(
        "--model",
        choices=("settings", "stub"),
        default="settings",
        help="who proposes: as the settings say (AZURE_OPENAI_*; none: the rules), or stub: a local stand-in "
        "model that the real Azure OpenAI client talks to (devhost/model_stub.py)",
    )
    # Set by the host on the case-worker processes it starts.
    parser.add_argument("--case-worker-of", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--parent-fd", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Serve the function app locally on SQLite (HTTP, session queue, change feed, timers)."""
    import sys

    args = build_parser().parse_args(argv)
    if args.case_worker_of is not None:
        die_with_parent(args.case_worker_of, args.parent_fd)
    tag = f" [worker {args.worker_index}]" if args.worker_index is not None else ""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)-7s %(name)s{tag}: %(message)s")
    quiet_library_loggers()  # per-superstep and per-request INFO lines drown the rest
    options = DevOptions(
        host=args.host,
        port=args.port,
        data=args.data,
        lock_duration=args.lock_duration,
        client_timeout=args.client_timeout,
        max_delivery_count=args.max_delivery_count,
        sessions=args.sessions,
        app_dir=args.app_dir.resolve(),
        identity=args.identity,
        roles=tuple(args.roles),
        workers=args.workers,
        case_worker_of=args.case_worker_of,
    )
    if options.roles and options.identity is None:
        print("casekeeper dev: --role needs --as NAME", file=sys.stderr)
        return 2
    unknown = [r for r in options.roles if role_name(r) not in ROLE_ALIASES.values()]
    if unknown:
        valid = ", ".join(f"{alias} ({full})" for alias, full in ROLE_ALIASES.items())
        print(f"casekeeper dev: unknown role {unknown[0]!r}: the app roles are {valid}", file=sys.stderr)
        return 2
    if options.identity is not None and not options.identity.strip():
        print("casekeeper dev: --as needs a name", file=sys.stderr)
        return 2
    if options.identity is not None and not is_loopback(options.host):
        print(
            f"casekeeper dev: --as signs in everyone who reaches --host {options.host} as {options.identity}; "
            "it is refused on any address but loopback (127.0.0.1, ::1, localhost)",
            file=sys.stderr,
        )
        return 2
    os.umask(0o077)  # SQLite files, telemetry and the secret under --data: this user's only
    if options.workers < 1:
        print("casekeeper dev: --workers needs 1 or more", file=sys.stderr)
        return 2
    sys.path.insert(0, str(options.app_dir))
    if args.model == "stub" and args.case_worker_of is None:
        from devhost.model_stub import serve_for_dev

        model = serve_for_dev()
        os.environ.update(model)  # the case-worker processes inherit it with the host's settings
        log.info("a local stand-in model answers at %s (deployment stub)", model["AZURE_OPENAI_ENDPOINT"])
    try:
        host = LocalHost(options, load_environment(options))
    except Exception as exc:  # configuration errors: say what is wrong, in one line
        print(f"casekeeper dev: cannot start: {exc}", file=sys.stderr)
        return 1
    host.run_until_signalled()
    return 0
