"""The processes the end-to-end benchmark runs and watches, started only through their command lines.

- :class:`Supplier`: ``casekeeper supplier-stub --port 0 --quiet --log FILE``. Its JSON-lines log (one
  record per request, flushed before the reply) is tailed from this process, so counting what reached
  the supplier puts no load on the stub or the host.
- :class:`DevHost`: ``casekeeper dev`` on its own ``--data`` folder and port, settings from the
  environment only (a developer's ``local.settings.json`` is overridden for every setting that matters).
- :func:`cpu_seconds`: user + system CPU of a process and its descendants, children included, from
  ``/proc/<pid>/stat``; :func:`wait_until_idle` waits for a process tree to stop burning CPU;
  :class:`OtherLoad` measures what everything else on the machine used meanwhile.

Linux only (``/proc``), as the benchmark machine is.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import httpx

from devhost.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
SECRET = "casekeeper-bench-secret"  # noqa: S105 - the benchmark's own webhook secret, for a throwaway host
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --- CPU ----------------------------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, list[str]] | None:
    """(ppid, fields after the command name) of ``pid``, or ``None`` when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    rest = text[text.rindex(")") + 2 :].split()
    return int(rest[1]), rest


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, grandchildren, ...)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                parents.setdefault(stat[0], []).append(int(entry))
    found: list[int] = []
    frontier = [pid]
    while frontier:
        children = parents.get(frontier.pop(), [])
        found.extend(children)
        frontier.extend(children)
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used by ``pid`` and every process below it, including children that
    already exited and were waited for (``cutime``, ``cstime``). 0.0 for a process that is gone."""
    total = 0
    for member in (pid, *descendants(pid)):
        stat = _stat(member)
        if stat is not None:
            fields = stat[1]  # fields[11..14] are utime, stime, cutime, cstime (stat fields 14-17)
            total += sum(int(value) for value in fields[11:15])
    return total / CLOCK_TICKS


def wait_until_idle(pid: int, *, window: float = 0.25, busy_fraction: float = 0.05, limit: float = 10.0) -> float:
    """Wait until ``pid``'s tree uses less than ``busy_fraction`` of one core over ``window`` seconds
    (at most ``limit`` seconds); returns its CPU seconds at the start of that quiet window, so the idle
    tail (pollers, timers) is not charged to the work that just finished."""
    deadline = time.monotonic() + limit
    before = cpu_seconds(pid)
    while True:
        time.sleep(window)
        after = cpu_seconds(pid)
        if after - before < busy_fraction * window or time.monotonic() > deadline:
            return before
        before = after


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy since boot (``/proc/stat``: user, nice, system, irq, softirq)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[:7])
    return (user + nice + system + irq + softirq) / CLOCK_TICKS


class OtherLoad:
    """How much CPU processes outside this benchmark's own tree (this process, the supplier stub, the
    hosts) used meanwhile, in cores: another test suite on the same machine skews every number, and
    this says so. ``OtherLoad()`` starts the clock; :meth:`cores` reads it."""

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._machine = machine_busy_seconds()
        self._ours = cpu_seconds(os.getpid())

    def cores(self) -> float:
        elapsed = time.monotonic() - self._started
        machine = machine_busy_seconds() - self._machine
        ours = cpu_seconds(os.getpid()) - self._ours
        return max(0.0, machine - ours) / elapsed if elapsed > 0 else 0.0


# --- the supplier stub ----------------------------------------------------------------------------------


def parse_time(text: str) -> float:
    """The stub's record time (ISO 8601 UTC, milliseconds) as seconds since the epoch."""
    return datetime.fromisoformat(text).timestamp()


@dataclass
class Supplier:
    """``casekeeper supplier-stub`` in its own process; :meth:`credit_note_posts` tails its log."""

    directory: Path
    proc: subprocess.Popen[str] | None = None
    url: str = ""
    _offset: int = 0
    _records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def log_path(self) -> Path:
        return self.directory / "supplier.jsonl"

    def start(self) -> Supplier:
        command = [sys.executable, "-m", "shared.cli", "supplier-stub", "--port", "0", "--quiet"]
        command += ["--log", str(self.log_path)]
        self.proc = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=(self.directory / "supplier.err").open("w"),
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()  # stdout carries only the URL
        if not self.url.startswith("http://"):
            raise RuntimeError(f"supplier stub did not start: {(self.directory / 'supplier.err').read_text()}")
        return self

    def records(self) -> list[dict[str, Any]]:
        """Every request the stub logged so far, oldest first (complete lines only)."""
        with self.log_path.open("rb") as log:
            log.seek(self._offset)
            chunk = log.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(complete)
        self._records.extend(json.loads(line) for line in complete.splitlines() if line.strip())
        return self._records

    def credit_note_posts(self, case_ids: set[str]) -> list[dict[str, Any]]:
        """The ``POST /credit-notes`` records whose body names one of ``case_ids``."""
        return [
            r
            for r in self.records()
            if r["method"] == "POST"
            and r["path"] == "/credit-notes"
            and isinstance(r.get("body"), dict)
            and r["body"].get("caseId") in case_ids
        ]

    def wait_for_posts(self, case_ids: set[str], *, timeout: float, poll: float = 0.05) -> list[dict[str, Any]]:
        """Wait until every case in ``case_ids`` has at least one credit-note request (or ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            posts = self.credit_note_posts(case_ids)
            if {r["body"]["caseId"] for r in posts} >= case_ids or time.monotonic() > deadline:
                return posts
            time.sleep(poll)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@contextlib.contextmanager
def running_supplier(directory: Path) -> Iterator[Supplier]:
    supplier = Supplier(directory).start()
    try:
        yield supplier
    finally:
        supplier.stop()


# --- casekeeper dev ---------------------------------------------------------------------------------------


def host_environment(data: Path, supplier_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """``casekeeper dev``'s environment: this one, with every setting the measurement depends on pinned
    (SQLite under ``--data``, the rules proposer, console telemetry to the data folder, the defaults
    for timeouts and schedules), so a developer's ``local.settings.json`` or shell cannot change it."""
    return {
        **os.environ,
        "CASEKEEPER_STORE": "sqlite",
        "WEBHOOK_SECRET": SECRET,
        "SUPPLIER_PORTAL_URL": supplier_url,
        "AZURE_OPENAI_ENDPOINT": "",
        "AZURE_OPENAI_DEPLOYMENT": "",
        "APPLICATIONINSIGHTS_CONNECTION_STRING": "",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "",
        "CASEKEEPER_TELEMETRY_FILE": str(data / "telemetry.jsonl"),
        "ALERT_WEBHOOK_URL": "",
        "VARIANCE_TOLERANCE": "5.00",
        "APPROVAL_THRESHOLD": "1000.00",
        "CALL_TIMEOUT_SECONDS": "120",
        "SUPPLIER_TIMEOUT_SECONDS": "10",
        "CHECKPOINT_HEALTH_SCHEDULE": "0 */5 * * * *",
        **(extra or {}),
    }


@dataclass
class DevHost:
    """``casekeeper dev`` as a subprocess on a fresh ``--data`` folder and a free port."""

    data: Path
    supplier_url: str
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[str] | None = None
    _log: IO[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def log_path(self) -> Path:
        return self.data.parent / f"{self.data.name}.log"

    def start(self, *, timeout: float = 60.0) -> DevHost:
        self.data.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("w")
        command = [sys.executable, "-m", "shared.cli", "dev", "--port", str(self.port), "--data", str(self.data)]
        command += ["--app-dir", str(ROOT)]
        self.proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=host_environment(self.data, self.supplier_url),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=1.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"casekeeper dev exited at start: {self.log_tail()}")
                try:
                    if client.get(self.url + "/api/health").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        raise RuntimeError(f"casekeeper dev did not answer /api/health in {timeout:.0f} s: {self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def case(self, client: httpx.Client, case_id: str) -> dict[str, Any] | None:
        """``GET /api/cases/{id}``: the case view, or ``None`` for 404."""
        response = client.get(f"{self.url}/api/cases/{case_id}")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        view: dict[str, Any] = response.json()
        return view

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None


@contextlib.contextmanager
def running_host(data: Path, supplier_url: str) -> Iterator[DevHost]:
    host = DevHost(data, supplier_url).start()
    try:
        yield host
    finally:
        host.stop()
