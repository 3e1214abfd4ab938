"""Waiting on the local session queue is cheap, and cheap waiting keeps every guarantee.

An idle receiver takes no write lock and, until something could have changed, does not even read;
it still sees another process's send, a scheduled message and an expired lock in time. Several
processes polling one file with a seeded mix of scheduled messages and abandons never hold one
session at once, deliver each session in order and settle every message exactly once.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from casekeeper.errors import StoreUnavailable
from shared.messaging.sqlite_queue import LocalSessionQueue, ReceivedMessage
from tests.localhost.queue_child import spawn

ROOT = Path(__file__).resolve().parents[2]
Q = "case-events"


class FakeClock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "queue.sqlite"


@contextmanager
def write_lock_held_elsewhere(path: Path) -> Iterator[None]:
    """Another connection holds the file's write lock (as a long writer in another process would)."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


def statements(q: LocalSessionQueue) -> list[str]:
    """Every SQL statement this thread's connection of ``q`` runs from now on."""
    seen: list[str] = []
    q._db.get().set_trace_callback(seen.append)
    return seen


# --- no write lock, and no read, while idle -----------------------------------------------------


def test_an_idle_receiver_never_takes_the_write_lock(path: Path) -> None:
    q = LocalSessionQueue(path, busy_timeout=0.1)
    q.send(Q, b"x", session_id="case-1", message_id="held")
    q.send(Q, b"x", session_id="case-1", message_id="behind-it")
    q.send(Q, b"x", session_id="case-2", message_id="later", scheduled_enqueue_time=time.time() + 60)
    held = q.receive(Q)
    assert held is not None and held.message_id == "held"
    with write_lock_held_elsewhere(path):
        # Nothing is deliverable (case-1 is held, case-2's message is not visible yet): receiving waits
        # and returns nothing, where a write transaction per look would have timed out on the lock.
        assert q.receive(Q, timeout=0.3) is None
    # Something deliverable: receiving needs the write lock, and waits for it like any writer.
    q.complete(held)
    with write_lock_held_elsewhere(path), pytest.raises(StoreUnavailable):
        q.receive(Q)
    msg = q.receive(Q)
    assert msg is not None and msg.message_id == "behind-it"
    q.close()


def test_an_idle_receiver_reads_again_only_when_something_changed(path: Path) -> None:
    clock = FakeClock()
    q = LocalSessionQueue(path, clock=clock)
    other = LocalSessionQueue(path, clock=clock)  # another connection, as another process would be
    q.send(Q, b"x", session_id="case-1", message_id="later", scheduled_enqueue_time=clock.now + 60)
    seen = statements(q)
    assert q.receive(Q) is None  # one look: nothing deliverable, the next due time noted
    looks = len(seen)
    for _ in range(50):
        assert q.receive(Q) is None
    assert all(s == "PRAGMA data_version" for s in seen[looks:]), seen[looks:]

    other.send(Q, b"x", session_id="case-2", message_id="now")  # a commit elsewhere: look again
    msg = q.receive(Q)
    assert msg is not None and msg.message_id == "now"
    q.complete(msg)  # this thread's own commit (data_version does not move for it): look again
    assert q.receive(Q) is None

    del seen[:]
    clock.now += 59.9
    assert q.receive(Q) is None
    assert seen == ["PRAGMA data_version"]  # short of the due time, nothing changed: no read
    clock.now += 0.1
    due = q.receive(Q)  # the scheduled message fell due: time alone makes it deliverable
    assert due is not None and due.message_id == "later"

    clock.now += q.lock_duration  # its lock expires: time alone frees the session again
    again = q.receive(Q)
    assert again is not None and (again.message_id, again.delivery_count) == ("later", 2)
    other.close()
    q.close()


def test_a_receiver_that_lost_the_race_for_a_message_finds_nothing_and_locks_nothing(path: Path) -> None:
    q = LocalSessionQueue(path)
    other = LocalSessionQueue(path)
    q.send(Q, b"x", session_id="case-1", message_id="m0")
    assert q._may_deliver(Q) is True  # the read hint says yes ...
    first = other.receive(Q)  # ... but another receiver locks it first
    assert first is not None
    assert q.receive(Q) is None  # the write transaction decides: the session is held
    other.complete(first)
    q.close()
    other.close()


# --- waking up ----------------------------------------------------------------------------------


def test_a_waiting_receiver_is_woken_by_a_send_from_another_thread(path: Path) -> None:
    q = LocalSessionQueue(path, poll_interval=30.0)  # only the wake-up can make this quick
    got: list[tuple[ReceivedMessage | None, float]] = []
    waiter = threading.Thread(target=lambda: got.append((q.receive(Q, timeout=20.0), time.monotonic())))
    waiter.start()
    time.sleep(0.3)
    sent_at = time.monotonic()
    q.send(Q, b"x", session_id="case-1", message_id="m0")
    waiter.join(25)
    [(msg, received_at)] = got
    assert msg is not None and msg.message_id == "m0"
    assert received_at - sent_at < 1.0
    q.close()


def test_of_many_waiting_threads_one_looks_and_wakes_the_others_when_it_takes_a_message(path: Path) -> None:
    q = LocalSessionQueue(path, poll_interval=0.05)
    other = LocalSessionQueue(path)  # another process's sends, as far as q can tell
    looks: list[str] = []
    q._db._on_connect = lambda conn: conn.set_trace_callback(  # every connection q opens, traced
        lambda sql: looks.append(sql) if sql == "PRAGMA data_version" else None
    )
    got: list[tuple[str, float]] = []

    def wait() -> None:
        msg = q.receive(Q, timeout=3.0)
        if msg is not None:
            got.append((msg.message_id, time.monotonic()))

    threads = [threading.Thread(target=wait) for _ in range(6)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    idle_looks = len(looks)
    # Six threads looking every 0.05 s would look about 120 times in a second; one looks about 20.
    assert idle_looks < 60, idle_looks
    sent_at = time.monotonic()
    for n in range(3):
        other.send(Q, b"x", session_id=f"case-{n}", message_id=f"m{n}")
    for t in threads:
        t.join(10)
    assert sorted(m for m, _ in got) == ["m0", "m1", "m2"]  # the first taker woke the others
    assert max(at for _, at in got) - sent_at < 1.0
    other.close()
    q.close()


def test_a_waiting_receiver_wakes_when_a_scheduled_message_falls_due(path: Path) -> None:
    q = LocalSessionQueue(path, poll_interval=30.0)  # neither polling nor a commit wakes it
    due = time.time() + 0.5
    q.send(Q, b"x", session_id="case-1", message_id="at-due", scheduled_enqueue_time=due)
    msg = q.receive(Q, timeout=10.0)
    assert msg is not None and msg.message_id == "at-due"
    assert due <= time.time() < due + 1.0
    q.close()


def test_a_waiting_receiver_sees_another_processs_send_within_its_poll_interval(path: Path) -> None:
    q = LocalSessionQueue(path)
    child = spawn("wait", str(path), Q, "20")
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "waiting"
        time.sleep(0.3)
        sent_at = time.time()
        q.send(Q, b"x", session_id="case-1", message_id="cross")
        message_id, returned_at = child.stdout.readline().split()
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert message_id == "cross"
    assert float(returned_at) - sent_at < 1.0  # poll_interval 0.05, plus start-up noise on a busy machine
    q.close()


# --- the guarantees, across processes -----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_processes_polling_one_file_keep_every_guarantee(path: Path, tmp_path: Path, seed: int) -> None:
    """Three processes with a seeded plan: per session FIFO, one holder at a time, every message settled
    exactly once, abandoned ones delivered again, scheduled ones delivered soon after they fall due."""
    rng = random.Random(seed)
    q = LocalSessionQueue(path)
    sessions = [f"case-{i}" for i in range(rng.randint(3, 7))]
    scheduled: dict[str, float] = {}
    start = time.time()
    for i in range(rng.randint(30, 50)):
        session = rng.choice(sessions)
        message_id = f"{session}-m{i:02d}"
        at = start + rng.uniform(0.3, 2.0) if rng.random() < 0.3 else None
        if at is not None:
            scheduled[message_id] = at
        q.send(Q, b"x", session_id=session, message_id=message_id, scheduled_enqueue_time=at)
    sent = {m.message_id for m in q.peek(Q)}
    markers = tmp_path / "markers"
    markers.mkdir()
    logs = [tmp_path / f"worker{n}.log" for n in range(3)]
    children = [spawn("mix", str(path), Q, str(markers), str(log), f"{seed}-{n}") for n, log in enumerate(logs)]
    try:
        for child in children:
            child.wait(timeout=90)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert [c.returncode for c in children] == [0, 0, 0]

    lines = [line.split() for log in logs for line in log.read_text().splitlines()]
    assert [line for line in lines if line[0] in ("overlap", "lost")] == []
    done = Counter(line[1] for line in lines if line[0] == "done")
    assert set(done) == sent and set(done.values()) == {1}  # every message completed exactly once
    abandoned = {line[1] for line in lines if line[0] == "abandoned"}
    receipts = [line for line in lines if line[0] == "recv"]
    deliveries = Counter(line[4] for line in receipts)
    assert all(deliveries[m] == 2 for m in abandoned) and all(deliveries[m] == 1 for m in sent - abandoned)

    by_session: dict[str, list[tuple[int, int]]] = defaultdict(list)
    first_receipt: dict[str, float] = {}
    # When each message became visible: its due time if scheduled, else 0 (all were sent before any fell
    # due, so those sort among themselves by sequence alone).
    visible_at: dict[int, float] = {}
    for _, mono, session, seq, message_id, count, wall, due in receipts:
        by_session[session].append((int(mono), int(seq)))
        visible_at[int(seq)] = float(due)
        if count == "1":
            first_receipt[message_id] = float(wall)
    for session, events in by_session.items():
        # FIFO within a session: by visibility, then sequence; an abandoned message comes again before
        # anything behind it (sorting keeps its two receipts side by side).
        order = [seq for _, seq in sorted(events)]
        assert order == sorted(order, key=lambda s: (visible_at[s], s)), f"{session} out of order"
    lateness = {m: first_receipt[m] - at for m, at in scheduled.items()}
    assert all(late >= 0 for late in lateness.values()), lateness  # never before it is due
    assert max(lateness.values(), default=0.0) < 1.5, lateness  # and soon after (poll interval 0.05 s)
    assert q.counts(Q) == {"active": 0, "scheduled": 0, "locked": 0, "dead_lettered": 0}
    q.close()
