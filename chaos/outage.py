"""Store outages for a chaos run, made from outside the hosts and always bounded in time.

- **SQLite**: another process opens the store's file and holds its write lock (``BEGIN IMMEDIATE``).
  The hosts' writes wait for it and fail after their busy timeout (``STORE_TIMEOUT_SECONDS``); reads go
  on (WAL). The holder is this module run as ``python -m chaos.outage --sqlite FILE --seconds N``:
  it prints ``held <epoch>`` once it has the lock, and rolls back and exits when its stdin closes (the
  run ends the outage, or the run itself died) or after ``N`` seconds, whichever comes first.
- **Cosmos DB test server**: the server's process is paused with ``SIGSTOP`` and resumed with
  ``SIGCONT``. Requests hang and time out (the SDK's read timeout, ``STORE_TIMEOUT_SECONDS``). A detached
  guard (``sleep N; kill -CONT``) resumes it even if the run dies while it is paused.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from chaos.config import REPO_ROOT

HOLD_GRACE_SECONDS = 15.0
"""How much longer than planned an outage may last at most (its process or guard then ends it)."""
TAKE_LOCK_SECONDS = 20.0
"""How long the holder waits for the write lock itself (the hosts hold it for milliseconds at a time)."""


class OutageError(RuntimeError):
    """An outage could not be started (the lock was not taken, the server could not be paused)."""


@dataclass
class SqliteLockHolder:
    """An outside process holding ``path``'s write lock, from :meth:`begin` to :meth:`end`."""

    path: Path
    grace: float = HOLD_GRACE_SECONDS
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def begin(self, seconds: float) -> float:
        """Take the lock; returns when it is held (epoch seconds). Raises :class:`OutageError`."""
        argv = [sys.executable, "-m", "chaos.outage", "--sqlite", str(self.path), "--seconds", f"{seconds:.1f}"]
        argv += ["--grace", f"{self.grace:.1f}"]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
        self.proc = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        line = _read_line(self.proc.stdout, TAKE_LOCK_SECONDS + 5.0)
        if not line.startswith("held "):
            self.end()
            raise OutageError(f"the store's write lock was not taken: {line or 'no answer'}")
        return float(line.split()[1])

    def end(self) -> float:
        """Release the lock (close the holder's stdin); returns when it is released (epoch seconds)."""
        proc = self.proc
        if proc is None:
            return time.time()
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(10.0)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # a process of our own; its lock dies with it
            proc.wait(10.0)
        self.proc = None
        return time.time()


@dataclass
class ProcessPause:
    """``SIGSTOP`` of one process (the Cosmos DB test server), from :meth:`begin` to :meth:`end`."""

    pid: int
    guard: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def begin(self, seconds: float) -> float:
        resume_by = int(seconds + HOLD_GRACE_SECONDS)
        self.guard = subprocess.Popen(
            ["/bin/sh", "-c", f"sleep {resume_by}; kill -CONT {self.pid}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            os.kill(self.pid, signal.SIGSTOP)
        except ProcessLookupError as exc:
            self._end_guard()
            raise OutageError(f"the Cosmos DB test server (pid {self.pid}) is gone") from exc
        return time.time()

    def end(self) -> float:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)
        self._end_guard()
        return time.time()

    def _end_guard(self) -> None:
        guard = self.guard
        if guard is not None and guard.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(guard.pid, signal.SIGKILL)
            guard.wait(5.0)
        self.guard = None


def _read_line(stream: IO[bytes] | None, timeout: float) -> str:
    if stream is None:
        return ""
    ready, _, _ = select.select([stream], [], [], timeout)
    return stream.readline().decode(errors="replace").strip() if ready else ""


def hold(path: Path, seconds: float, grace: float = HOLD_GRACE_SECONDS) -> int:
    """The holder process: take the write lock, say so, keep it until stdin closes or ``seconds`` and
    ``grace`` have passed."""
    conn = sqlite3.connect(path, timeout=TAKE_LOCK_SECONDS, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        print(f"failed {exc}", flush=True)
        return 1
    print(f"held {time.time():.3f}", flush=True)
    deadline = time.monotonic() + seconds + grace
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([sys.stdin], [], [], left)
        if ready and not os.read(sys.stdin.fileno(), 4096):
            break  # end of file: the run ended the outage, or died
    conn.execute("ROLLBACK")
    conn.close()
    print(f"released {time.time():.3f}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.outage")
    parser.add_argument("--sqlite", type=Path, required=True, help="the store file whose write lock to hold")
    parser.add_argument("--seconds", type=float, required=True, help="the planned length (bounded by it plus a grace)")
    parser.add_argument("--grace", type=float, default=HOLD_GRACE_SECONDS, help="seconds past --seconds at most")
    args = parser.parse_args(argv)
    return hold(args.sqlite, args.seconds, args.grace)


if __name__ == "__main__":
    raise SystemExit(main())
