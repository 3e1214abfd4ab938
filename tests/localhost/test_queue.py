"""The local session queue keeps the Service Bus behaviour the app relies on.

In-process tests move an injected clock instead of sleeping; the cross-process tests use real
processes (and real time, with short locks) because that is what they are about.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from casekeeper.errors import CasekeeperError
from shared.messaging.sqlite_queue import (
    MAX_DELIVERY_COUNT_EXCEEDED,
    LocalSessionQueue,
    LockLost,
    ReceivedMessage,
    to_service_bus_message,
)
from tests.localhost.queue_child import spawn

ROOT = Path(__file__).resolve().parents[2]
Q = "case-events"


class FakeClock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "queue.sqlite"


@pytest.fixture
def q(path: Path, clock: FakeClock) -> Iterator[LocalSessionQueue]:
    queue = LocalSessionQueue(path, clock=clock)
    yield queue
    queue.close()


def send(q: LocalSessionQueue, session: str, message_id: str, **kwargs: object) -> bool:
    return q.send(Q, message_id.encode(), session_id=session, message_id=message_id, **kwargs)  # type: ignore[arg-type]


def take(q: LocalSessionQueue) -> ReceivedMessage:
    msg = q.receive(Q)
    assert msg is not None
    return msg


# --- sessions, order, locks ---------------------------------------------------------------------


def test_fifo_within_a_session(q: LocalSessionQueue) -> None:
    for i in range(5):
        send(q, "case-1", f"m{i}")
    seen = []
    while (msg := q.receive(Q)) is not None:
        seen.append(msg.message_id)
        assert msg.body == msg.message_id.encode()
        q.complete(msg)
    assert seen == ["m0", "m1", "m2", "m3", "m4"]


def test_two_receivers_never_hold_the_same_session(q: LocalSessionQueue, path: Path, clock: FakeClock) -> None:
    other = LocalSessionQueue(path, clock=clock)
    send(q, "case-1", "m0")
    send(q, "case-1", "m1")
    first = take(q)
    assert first.message_id == "m0"
    # The session is held while m0 is locked: nobody gets m1, through any instance.
    assert other.receive(Q) is None
    assert q.receive(Q) is None
    q.complete(first)
    second = other.receive(Q)
    assert second is not None and second.message_id == "m1"
    other.close()


def test_other_sessions_proceed_while_one_is_locked(q: LocalSessionQueue) -> None:
    send(q, "case-1", "a0")
    send(q, "case-1", "a1")
    send(q, "case-2", "b0")
    a0 = take(q)
    b0 = take(q)
    assert (a0.message_id, b0.message_id) == ("a0", "b0")
    assert q.receive(Q) is None  # case-1 held by a0, case-2 empty but held by b0
    q.complete(a0)
    assert take(q).message_id == "a1"


def test_lock_expiry_redelivers_with_delivery_count_plus_one(q: LocalSessionQueue, clock: FakeClock) -> None:
    send(q, "case-1", "m0")
    send(q, "case-1", "m1")
    first = take(q)
    assert first.delivery_count == 1
    assert first.locked_until == clock.now + 30.0
    clock.advance(29.9)
    assert q.receive(Q) is None
    clock.advance(0.2)
    again = take(q)
    assert again.message_id == "m0"  # still the head of its session: FIFO survives a lost lock
    assert again.delivery_count == 2
    assert again.lock_token != first.lock_token


def test_abandon_unlocks_at_once(q: LocalSessionQueue) -> None:
    send(q, "case-1", "m0")
    send(q, "case-1", "m1")
    first = take(q)
    q.abandon(first)
    again = take(q)
    assert (again.message_id, again.delivery_count) == ("m0", 2)


def test_renew_lock_extends_it(q: LocalSessionQueue, clock: FakeClock) -> None:
    send(q, "case-1", "m0")
    msg = take(q)
    clock.advance(20)
    until = q.renew_lock(msg)
    assert until == clock.now + 30.0 == msg.locked_until
    clock.advance(20)  # 40 s after receipt, 20 after renewal: still held
    assert q.receive(Q) is None
    q.complete(msg)
    assert q.counts(Q)["active"] == 0


def test_settling_a_lost_lock_raises_lock_lost(q: LocalSessionQueue, clock: FakeClock) -> None:
    send(q, "case-1", "m0")
    stale = take(q)
    clock.advance(31)
    # Expired, not yet received again: already lost (Service Bus does the same).
    with pytest.raises(LockLost, match="expired"):
        q.complete(stale)
    fresh = take(q)
    for settle in (q.complete, q.abandon, q.renew_lock):
        with pytest.raises(LockLost, match="received again") as info:
            settle(stale)
        assert info.value.message_id == "m0" and info.value.session_id == "case-1"
    with pytest.raises(LockLost):
        q.dead_letter(stale, "x", "y")
    assert issubclass(LockLost, CasekeeperError)
    q.complete(fresh)
    with pytest.raises(LockLost, match="already settled"):
        q.complete(fresh)


def test_abandoned_lock_cannot_be_settled(q: LocalSessionQueue) -> None:
    send(q, "case-1", "m0")
    msg = take(q)
    q.abandon(msg)
    with pytest.raises(LockLost, match="released"):
        q.complete(msg)


# --- dead-lettering -----------------------------------------------------------------------------


def test_dead_letter_past_max_delivery_count_by_lock_expiry(path: Path, clock: FakeClock) -> None:
    q = LocalSessionQueue(path, clock=clock, max_delivery_count=3)
    send(q, "case-1", "poison", application_properties={"type": "case.updated"})
    send(q, "case-1", "next")
    for attempt in (1, 2, 3):
        msg = take(q)
        assert (msg.message_id, msg.delivery_count) == ("poison", attempt)
        clock.advance(31)  # the handler died: the lock expires
    # The fourth delivery would exceed 3: the message goes to the dead-letter queue, the session moves on.
    assert take(q).message_id == "next"
    [dead] = q.dead_letters(Q)
    assert dead.message_id == "poison" and dead.session_id == "case-1"
    assert dead.reason == MAX_DELIVERY_COUNT_EXCEEDED
    assert dead.delivery_count == 3
    assert "3 delivery attempts" in dead.description
    assert dead.body == b"poison" and dead.application_properties == {"type": "case.updated"}
    assert q.counts(Q)["dead_lettered"] == 1
    q.close()


def test_dead_letter_past_max_delivery_count_by_abandon(path: Path, clock: FakeClock) -> None:
    q = LocalSessionQueue(path, clock=clock, max_delivery_count=2)
    send(q, "case-1", "poison")
    q.abandon(take(q))
    q.abandon(take(q))  # the second (last allowed) delivery failed: dead-lettered right away
    assert q.receive(Q) is None
    assert [d.reason for d in q.dead_letters(Q)] == [MAX_DELIVERY_COUNT_EXCEEDED]
    assert q.counts(Q) == {"active": 0, "scheduled": 0, "locked": 0, "dead_lettered": 1}
    q.close()


def test_explicit_dead_letter(q: LocalSessionQueue, clock: FakeClock) -> None:
    send(q, "case-1", "bad")
    send(q, "case-1", "good")
    q.dead_letter(take(q), "InvalidEvent", "missing caseId")
    assert take(q).message_id == "good"
    [dead] = q.dead_letters(Q)
    assert (dead.reason, dead.description, dead.delivery_count) == ("InvalidEvent", "missing caseId", 1)
    assert dead.dead_lettered_time == clock.now


# --- scheduling and duplicates ------------------------------------------------------------------


def test_scheduled_message_is_invisible_until_its_time(q: LocalSessionQueue, clock: FakeClock) -> None:
    due = clock.now + 60
    send(q, "case-1", "later", scheduled_enqueue_time=due)
    assert q.receive(Q) is None
    assert q.counts(Q) == {"active": 0, "scheduled": 1, "locked": 0, "dead_lettered": 0}
    assert [m.state for m in q.peek(Q)] == ["scheduled"]
    clock.advance(59.9)
    assert q.receive(Q) is None
    clock.advance(0.1)
    msg = take(q)
    assert msg.message_id == "later"
    assert msg.scheduled_enqueue_time == due and msg.enqueued_time == due


def test_scheduled_message_takes_its_place_when_it_becomes_visible(q: LocalSessionQueue, clock: FakeClock) -> None:
    start = clock.now
    send(q, "case-1", "at+10", scheduled_enqueue_time=start + 10)
    send(q, "case-1", "at+0")
    clock.advance(20)
    send(q, "case-1", "at+20")
    send(q, "case-1", "in-the-past", scheduled_enqueue_time=start)  # past: enqueued now, at +20
    order = []
    while (msg := q.receive(Q)) is not None:
        order.append(msg.message_id)
        q.complete(msg)
    assert order == ["at+0", "at+10", "at+20", "in-the-past"]


def test_duplicate_detection_within_the_window_only(q: LocalSessionQueue, clock: FakeClock) -> None:
    assert send(q, "case-1", "delivery-1") is True
    assert send(q, "case-1", "delivery-1") is False
    q.complete(take(q))
    clock.advance(599)
    # Detected even though the first copy was completed, and whatever the session.
    assert send(q, "case-2", "delivery-1") is False
    assert q.receive(Q) is None
    # Per queue.
    assert q.send("other", b"x", session_id="case-1", message_id="delivery-1") is True
    clock.advance(1.5)  # 600.5 s after the first send: the window has passed
    assert send(q, "case-1", "delivery-1") is True
    assert take(q).message_id == "delivery-1"


def test_ids_are_checked_like_the_sdk(q: LocalSessionQueue) -> None:
    assert send(q, "s" * 128, "m" * 128)
    for session, message_id in (("", "m"), ("s", ""), ("s" * 129, "m"), ("s", "m" * 129)):
        with pytest.raises(ValueError, match=r"1\.\.128"):
            send(q, session, message_id)
    with pytest.raises(TypeError):
        q.send(Q, "text", session_id="s", message_id="m2")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        q.send(Q, b"x", session_id="s", message_id="m3", application_properties={"k": [1]})  # type: ignore[dict-item]


# --- what the host reads ------------------------------------------------------------------------


def test_properties_peek_counts_and_the_functions_message(q: LocalSessionQueue, clock: FakeClock) -> None:
    props = {"type": "case.updated", "retry": 2, "weight": 0.5, "urgent": True}
    send(q, "case-1", "m0", application_properties=props)
    send(q, "case-1", "m1")
    send(q, "case-2", "later", scheduled_enqueue_time=clock.now + 5)
    msg = take(q)
    assert msg.application_properties == props
    assert [type(v) for v in msg.application_properties.values()] == [str, int, float, bool]
    assert q.counts(Q) == {"active": 2, "scheduled": 1, "locked": 1, "dead_lettered": 0}
    peeked = q.peek(Q)
    assert [(m.message_id, m.state, m.locked_until) for m in peeked] == [
        ("m0", "active", msg.locked_until),
        ("m1", "active", None),
        ("later", "scheduled", None),
    ]
    assert q.counts("nothing-here") == {"active": 0, "scheduled": 0, "locked": 0, "dead_lettered": 0}

    fn_msg = to_service_bus_message(msg)
    assert fn_msg.get_body() == b"m0"
    assert (fn_msg.session_id, fn_msg.message_id, fn_msg.delivery_count) == ("case-1", "m0", 1)
    assert fn_msg.sequence_number == msg.sequence_number
    assert fn_msg.application_properties == props
    assert fn_msg.enqueued_time_utc is not None and fn_msg.enqueued_time_utc.timestamp() == msg.enqueued_time


def test_receive_timeout_waits_then_gives_up(path: Path) -> None:
    q = LocalSessionQueue(path)
    assert q.receive(Q, timeout=0.05) is None
    with pytest.raises(ValueError, match="timeout"):
        q.receive(Q, timeout=-1)
    q.close()


def test_threads_sharing_one_instance_hold_a_session_one_at_a_time(path: Path) -> None:
    q = LocalSessionQueue(path)
    for i in range(10):
        for session in ("case-a", "case-b"):
            q.send(Q, b"x", session_id=session, message_id=f"{session}-{i}")
    holders: dict[str, int] = defaultdict(int)
    guard = threading.Lock()
    problems: list[str] = []
    done: list[str] = []

    def work() -> None:
        while (msg := q.receive(Q, timeout=0.2)) is not None or q.counts(Q)["active"]:
            if msg is None:
                continue
            with guard:
                holders[msg.session_id] += 1
                if holders[msg.session_id] > 1:
                    problems.append(f"two holders of {msg.session_id}")
            time.sleep(0.002)
            with guard:
                holders[msg.session_id] -= 1
            q.complete(msg)
            with guard:
                done.append(msg.message_id)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert problems == []
    assert sorted(done) == sorted(f"{s}-{i}" for s in ("case-a", "case-b") for i in range(10))
    q.close()


# --- real processes -----------------------------------------------------------------------------


def test_a_sent_message_survives_the_sender_dying(path: Path) -> None:
    LocalSessionQueue(path).close()  # the schema exists before the child starts
    child = spawn("send", str(path), Q, "case-1", "survivor")
    out, _ = child.communicate(timeout=30)
    assert child.returncode == 0 and out.strip() == "sent"
    q = LocalSessionQueue(path)
    msg = q.receive(Q)
    assert msg is not None and (msg.message_id, msg.body) == ("survivor", b"durable")
    q.complete(msg)
    q.close()


def test_a_lock_held_by_a_killed_process_expires_and_the_message_is_redelivered(path: Path) -> None:
    q = LocalSessionQueue(path)
    q.send(Q, b"work", session_id="case-1", message_id="m0")
    child = spawn("hold", str(path), Q, "0.5")
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert json.loads(line) == {"message_id": "m0", "delivery_count": 1}
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert q.receive(Q) is None  # still locked by the dead process
    msg = q.receive(Q, timeout=5.0)
    assert msg is not None
    assert (msg.message_id, msg.delivery_count) == ("m0", 2)
    q.complete(msg)
    q.close()


def test_four_processes_on_two_sessions(path: Path, tmp_path: Path) -> None:
    q = LocalSessionQueue(path)
    per_session = 15
    for i in range(per_session):
        for session in ("case-a", "case-b"):
            q.send(Q, b"x", session_id=session, message_id=f"{session}-{i:02d}")
    markers = tmp_path / "markers"
    markers.mkdir()
    logs = [tmp_path / f"worker{n}.log" for n in range(4)]
    children = [spawn("work", str(path), Q, str(markers), str(log)) for log in logs]
    try:
        deadline = time.monotonic() + 30
        while len(list(markers.glob("ready-*"))) < len(children) and time.monotonic() < deadline:
            time.sleep(0.01)
        (markers / "go").touch()  # all four receive from the same moment on
        for child in children:
            child.wait(timeout=60)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert [c.returncode for c in children] == [0, 0, 0, 0]

    lines = [line.split() for log in logs for line in log.read_text().splitlines()]
    assert [line for line in lines if line[0] in ("overlap", "lost")] == []
    done = Counter(line[1] for line in lines if line[0] == "done")
    expected = {f"{s}-{i:02d}" for s in ("case-a", "case-b") for i in range(per_session)}
    assert set(done) == expected and set(done.values()) == {1}  # every message completed exactly once
    workers_that_completed = [log for log in logs if "done " in log.read_text()]
    assert len(workers_that_completed) >= 2  # the sessions really were worked on concurrently
    receipts: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for line in lines:
        if line[0] == "recv":
            receipts[line[2]].append((int(line[1]), int(line[3])))
    for session, events in receipts.items():
        seqs = [seq for _, seq in sorted(events)]
        assert seqs == sorted(seqs), f"{session} delivered out of order"
    assert q.counts(Q) == {"active": 0, "scheduled": 0, "locked": 0, "dead_lettered": 0}
    q.close()
