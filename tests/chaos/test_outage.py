"""Store outages are real and bounded: the SQLite write lock held from another process, a paused process."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from shared.chaos.outage import ProcessPause, SqliteLockHolder
from shared.core.errors import StoreUnavailable
from shared.stores.sqlite import SqliteDocumentStore


def test_the_lock_holder_refuses_writes_lets_reads_through_and_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    store = SqliteDocumentStore(path, busy_timeout=0.5)
    holder = SqliteLockHolder(path)
    try:
        store.create("cases", "C-1", "C-1", {"id": "C-1"})
        held = holder.begin(30.0)
        assert abs(held - time.time()) < 10
        with pytest.raises(StoreUnavailable):
            store.create("cases", "C-2", "C-2", {"id": "C-2"})
        assert store.read("cases", "C-1", "C-1") is not None  # reads go on (WAL)
        released = holder.end()
        assert released >= held
        store.create("cases", "C-2", "C-2", {"id": "C-2"})
    finally:
        holder.end()
        store.close()


def test_the_lock_holder_lets_go_by_itself_after_its_time_plus_grace(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    SqliteDocumentStore(path).close()
    holder = SqliteLockHolder(path, grace=1.0)
    holder.begin(0.5)
    proc = holder.proc
    assert proc is not None
    # Bounded even if the run forgot to end it: its seconds plus the grace, never more.
    proc.wait(15.0)
    assert proc.returncode == 0
    holder.end()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_pause_stops_the_process_until_it_ends() -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    pause = ProcessPause(sleeper.pid)
    try:
        pause.begin(5.0)
        time.sleep(0.2)
        assert _state(sleeper.pid) == "T"  # stopped
        assert pause.guard is not None and pause.guard.poll() is None  # the guard would resume it
        pause.end()
        time.sleep(0.2)
        assert _state(sleeper.pid) in ("S", "R")
        assert pause.guard is None
    finally:
        pause.end()
        sleeper.kill()
        sleeper.wait()
