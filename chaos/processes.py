"""The processes of a chaos run: the supplier stub and the local hosts, each in its own process group.

Each is started with ``start_new_session=True``, so ``kill -9`` of its group (:func:`os.killpg`) takes
down the process and anything it started, exactly as a crashed machine would. A host is restarted on
the same ``--data``; its output is appended to one log file per host across restarts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from chaos.config import LOCK_DURATION_SECONDS
from devhost.ports import free_port


class ProcessError(RuntimeError):
    """A process could not be started (it exited, or did not answer in time); the message has its log."""


@dataclass
class Managed:
    """A command run in its own process group, its output appended to ``log_path``."""

    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    def spawn(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """``kill -9`` of the whole process group; returns once the process is reaped."""
        proc = self.proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        self._close_log()

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to the group, then SIGKILL if it has not exited within ``timeout``."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_log()

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _base_env(app_dir: Path, extra: Mapping[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    # The build under test is the one in app_dir: its `shared` package comes first on the path.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(app_dir), env.get("PYTHONPATH", "")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # another checkout is run, not written to
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


class SupplierProcess(Managed):
    def __init__(self, workdir: Path, app_dir: Path) -> None:
        self.port = free_port()
        self.journal = workdir / "supplier.jsonl"
        argv = [sys.executable, "-m", "shared.cli", "supplier-stub", "--port", str(self.port)]
        argv += ["--log", str(self.journal), "--quiet"]
        super().__init__("supplier", argv, _base_env(app_dir, {}), app_dir, workdir / "supplier.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> None:
        self.spawn()
        _wait_until(self, lambda: httpx.get(self.url + "/_control/faults", timeout=1.0).status_code == 200, timeout)


class HostProcess(Managed):
    """``casekeeper dev`` number ``index`` on ``data`` (shared with the other host, if any)."""

    def __init__(self, index: int, workdir: Path, data: Path, app_dir: Path, env: Mapping[str, str]) -> None:
        self.index = index
        self.port = free_port()
        argv = [sys.executable, "-m", "shared.cli", "dev", "--port", str(self.port), "--data", str(data)]
        argv += ["--lock-duration", str(LOCK_DURATION_SECONDS), "--app-dir", str(app_dir)]
        super().__init__(f"host-{index}", argv, _base_env(app_dir, env), app_dir, workdir / f"host-{index}.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        self.spawn()
        _wait_until(self, lambda: httpx.get(self.url + "/api/health", timeout=1.0).status_code == 200, timeout)

    def ready(self) -> bool:
        try:
            return self.alive and httpx.get(self.url + "/api/health", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False


def _wait_until(process: Managed, check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.alive:
            raise ProcessError(f"{process.name} exited:\n{process.tail()}")
        try:
            if callable(check) and check():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise ProcessError(f"{process.name} did not answer within {timeout:.0f}s:\n{process.tail()}")
