"""Store outages are real and bounded: the SQLite write lock held from another process, a paused process."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from casekeeper.errors import StoreUnavailable
from casekeeper.stores.sqlite import SqliteDocumentStore
from chaos.outage import ProcessPause, SqliteLockHolder
from devhost.cosmos_server import INSECURE_REQUEST_WARNING_FILTER, make_cosmos_store, start_cosmos_server
from shared.app.bootstrap import open_store
from shared.app.settings import Settings


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


@pytest.mark.cosmos
@pytest.mark.filterwarnings(INSECURE_REQUEST_WARNING_FILTER)
def test_a_paused_cosmos_server_is_a_store_outage_bounded_by_the_store_timeout() -> None:
    """Its own server (pausing the session's would stall other tests). With ``STORE_TIMEOUT_SECONDS`` a
    write to the paused server fails as unavailable in about that time, not the SDK's 65 s; resumed, it
    serves again."""
    server = start_cosmos_server()
    try:
        make_cosmos_store(server, "pause").close()
        env = {
            "WEBHOOK_SECRET": "s",
            "CASEKEEPER_QUEUE": "local",
            "CASEKEEPER_STORE": "cosmos",
            "CosmosDBConnection__accountEndpoint": server.endpoint,
            "COSMOS_KEY": server.key,
            "COSMOS_DATABASE": "pause",
            "STORE_TIMEOUT_SECONDS": "1.5",
        }
        store = open_store(Settings.from_mapping(env))
        store.create("cases", "C-1", "C-1", {"id": "C-1"})
        pause = ProcessPause(server.process.pid)
        pause.begin(20.0)
        try:
            started = time.monotonic()
            with pytest.raises(StoreUnavailable):
                store.create("cases", "C-2", "C-2", {"id": "C-2"})
            assert time.monotonic() - started < 10.0
        finally:
            pause.end()
        assert store.read("cases", "C-1", "C-1") is not None
        store.close()
    finally:
        server.stop()
