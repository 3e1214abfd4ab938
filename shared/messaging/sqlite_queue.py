"""A durable Service Bus session queue on one SQLite file: the local host's stand-in for Service Bus.

It keeps the behaviour the app relies on, nothing more:

- **Sessions.** Every message carries a session id. One receiver holds a session at a time: a session
  is held while any of its messages is locked and that lock has not expired. Other sessions proceed.
- **FIFO within a session.** Messages are delivered in the order they became visible (enqueue time,
  then sequence number). A scheduled message becomes visible at its scheduled time and takes its place
  by that time, as Service Bus enqueues it then; its ``sequence_number`` is still assigned at send.
- **Peek-lock.** ``receive`` locks the message for ``lock_duration`` seconds and increments its
  ``delivery_count`` (first delivery = 1). It stays in the queue until :meth:`LocalSessionQueue.complete`,
  :meth:`~LocalSessionQueue.abandon` or :meth:`~LocalSessionQueue.dead_letter`, or until the lock
  expires, after which it is delivered again. Settling needs the current, unexpired lock:
  otherwise :class:`LockLost` (Service Bus raises ``MessageLockLostError`` there too).
- **Dead-lettering.** A message whose delivery count would pass ``max_delivery_count`` goes to the
  dead-letter queue with reason ``MaxDeliveryCountExceeded`` instead of being delivered again.
- **Duplicate detection.** A message id seen on the same queue within ``duplicate_window`` seconds of
  its first send is dropped (``send`` returns ``False``), even if the first copy was already completed.

Durability and concurrency: one SQLite file in WAL mode, ``synchronous=FULL``, every change in one
``BEGIN IMMEDIATE`` transaction, a connection per thread. Several threads and processes may share the
file; what a call acknowledged survives ``kill -9``. A process killed while holding a lock simply
lets the lock expire.

Waiting is cheap: ``receive`` takes the write lock only when a plain read has just seen a message it
could lock, and then decides again inside the write transaction, so the read is only a hint and every
guarantee above rests on the write alone. After a read that found nothing, the same thread does not
even read again until something could have changed: a commit to the file by any other connection
(``PRAGMA data_version`` on the thread's reading connection: other processes, other instances, and
this instance's own writes, which use a writer connection of their own), or the queue's clock reached
the next time a scheduled message becomes visible or a lock expires. Waiting receivers are woken at
once by commits of this instance's other threads (a condition variable); for other processes'
commits, one waiting thread per queue looks at least every ``poll_interval`` seconds and wakes the
rest when it takes a message.

Time: every timestamp (enqueue, schedule, lock expiry, duplicate window) comes from ``clock``,
seconds since the epoch. Processes sharing a file compare each other's timestamps, so they need one
clock: wall time (the default, :func:`time.time`) is right for one machine's local host. Tests inject
a fake clock to move time instead of sleeping. ``receive(timeout=...)`` waits in real seconds.

Settings (``lock_duration``, ``max_delivery_count``, ``duplicate_window``) apply to every queue this
instance touches and are not stored in the file: processes sharing a file should pass the same ones.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from casekeeper.stores.sqlite_connections import SqliteConnections, translate_sqlite_errors
from shared.errors import QueueError

if TYPE_CHECKING:
    from azure.functions.servicebus import ServiceBusMessage

PropertyValue = str | int | float | bool
"""What an application property may hold (Service Bus allows more; the app uses these)."""

MAX_ID_LENGTH = 128
"""Service Bus's limit for ``session_id`` and ``message_id``; the SDK raises ``ValueError`` past it."""

MAX_DELIVERY_COUNT_EXCEEDED = "MaxDeliveryCountExceeded"
"""The dead-letter reason Service Bus gives a message delivered too often."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queue_messages (
    -- AUTOINCREMENT: a sequence number is never reused, even after the newest message is completed.
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    queue          TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    message_id     TEXT NOT NULL,
    body           BLOB NOT NULL,
    properties     TEXT NOT NULL,
    enqueued_time  REAL NOT NULL,
    scheduled_time REAL,
    delivery_count INTEGER NOT NULL DEFAULT 0,
    lock_token     TEXT,
    locked_until   REAL
);
CREATE INDEX IF NOT EXISTS queue_messages_order ON queue_messages (queue, enqueued_time, seq);
CREATE INDEX IF NOT EXISTS queue_messages_session ON queue_messages (queue, session_id, locked_until);
CREATE TABLE IF NOT EXISTS queue_dead_letters (
    seq                INTEGER PRIMARY KEY,
    queue              TEXT NOT NULL,
    session_id         TEXT NOT NULL,
    message_id         TEXT NOT NULL,
    body               BLOB NOT NULL,
    properties         TEXT NOT NULL,
    enqueued_time      REAL NOT NULL,
    scheduled_time     REAL,
    delivery_count     INTEGER NOT NULL,
    reason             TEXT NOT NULL,
    description        TEXT NOT NULL,
    dead_lettered_time REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS queue_dead_letters_by_queue ON queue_dead_letters (queue, dead_lettered_time, seq);
CREATE TABLE IF NOT EXISTS queue_duplicates (
    queue      TEXT NOT NULL,
    message_id TEXT NOT NULL,
    first_seen REAL NOT NULL,
    PRIMARY KEY (queue, message_id)
);
CREATE INDEX IF NOT EXISTS queue_duplicates_by_age ON queue_duplicates (queue, first_seen);
CREATE TABLE IF NOT EXISTS queue_clocks (
    queue        TEXT PRIMARY KEY,
    last_enqueue REAL NOT NULL
);
"""

_MESSAGE_COLUMNS = "seq, queue, session_id, message_id, body, properties, enqueued_time, scheduled_time, delivery_count"

# The oldest visible message over sessions with no live lock. Within a session every visible message is
# unlocked when the session is free, so the oldest one overall is the head of its session: FIFO holds.
_NEXT_DELIVERABLE = (
    f"SELECT {_MESSAGE_COLUMNS} FROM queue_messages AS m "
    "WHERE m.queue = ? AND m.enqueued_time <= ? AND NOT EXISTS ("
    "  SELECT 1 FROM queue_messages AS h "
    "  WHERE h.queue = m.queue AND h.session_id = m.session_id AND h.locked_until > ?"
    ") ORDER BY m.enqueued_time, m.seq LIMIT 1"
)

# The next time, by the queue's clock, that the passing of time alone can make a message deliverable: a
# scheduled message becomes visible, or a lock expires (its session is free again).
_NEXT_DUE = (
    "SELECT min(t) FROM ("
    "  SELECT min(enqueued_time) AS t FROM queue_messages WHERE queue = ? AND enqueued_time > ?"
    "  UNION ALL"
    "  SELECT min(locked_until) AS t FROM queue_messages WHERE queue = ? AND locked_until > ?"
    ")"
)

_RECHECK_AFTER = 2.0
"""Real seconds after which a waiting receiver reads again even if nothing seems to have changed: a
backstop, never needed for correctness (``data_version`` and the due time cover every change)."""


@dataclass
class _Idle:
    """What one thread last saw of one queue when a read found nothing to deliver."""

    data_version: int
    due: float
    """The queue's clock time at which time alone could make a message deliverable (``inf``: never)."""
    seen_at: float
    """``time.monotonic()`` of that read."""


class LockLost(QueueError):
    """A settlement (complete, abandon, dead-letter, renew) whose lock is no longer held.

    Raised when the lock expired, when the message was received again by another receiver (the lock
    token no longer matches), or when the message was already settled. Nothing was changed. Like
    Service Bus's ``MessageLockLostError``: unless it was already settled, the message is (or will
    be) delivered again, so the work done under the lost lock must be safe to repeat.
    """

    def __init__(self, reason: str, *, queue: str, session_id: str, message_id: str, sequence_number: int) -> None:
        super().__init__(f"lock lost on {queue}/{session_id} message {message_id!r} (seq {sequence_number}): {reason}")
        self.reason = reason
        self.queue = queue
        self.session_id = session_id
        self.message_id = message_id
        self.sequence_number = sequence_number


@dataclass
class QueueMessage:
    """The fields every stored message has. Times are seconds since the epoch, by the queue's clock.

    ``enqueued_time`` is when the message became (or becomes) visible: the send time, or the
    scheduled time for a message scheduled in the future. ``scheduled_enqueue_time`` is what the
    sender asked for, ``None`` when it was sent for immediate delivery. ``sequence_number`` is
    assigned at send, unique and increasing within the file (Service Bus: within the queue).
    """

    queue: str
    body: bytes = field(repr=False)
    session_id: str
    message_id: str
    sequence_number: int
    delivery_count: int
    enqueued_time: float
    scheduled_enqueue_time: float | None
    application_properties: dict[str, PropertyValue]


@dataclass
class ReceivedMessage(QueueMessage):
    """A message delivered under a lock. ``lock_token`` identifies this delivery when settling it.

    :meth:`LocalSessionQueue.renew_lock` updates ``locked_until`` in place (as the Service Bus SDK
    does) and returns it.
    """

    lock_token: str
    locked_until: float


@dataclass
class PeekedMessage(QueueMessage):
    """A message as :meth:`LocalSessionQueue.peek` sees it, without locking it.

    ``state`` is ``"scheduled"`` until its enqueue time, then ``"active"`` (Service Bus's names);
    ``locked_until`` is set while a receiver holds its lock.
    """

    state: Literal["active", "scheduled"]
    locked_until: float | None


@dataclass
class DeadLetter(QueueMessage):
    """A message in the dead-letter queue, with why it was moved there and when."""

    reason: str
    description: str
    dead_lettered_time: float


class LocalSessionQueue:
    """Session queues with Service Bus semantics (see the module docstring) on one SQLite file.

    Raises :class:`~casekeeper.core.errors.StoreUnavailable` when the file stays locked past
    ``busy_timeout`` and :class:`~casekeeper.core.errors.StoreError` for any other SQLite failure.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        lock_duration: float = 30.0,
        max_delivery_count: int = 10,
        duplicate_window: float = 600.0,
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 30.0,
        poll_interval: float = 0.05,
    ) -> None:
        """Open (creating if absent) the queue file. Raises ``ValueError`` for a non-positive setting.

        ``poll_interval`` is the longest a waiting ``receive`` goes without looking at the file: how
        late, at most, it sees a message sent by another process (or another instance).
        """
        if not lock_duration > 0:
            raise ValueError(f"lock_duration must be positive, got {lock_duration!r}")
        if max_delivery_count < 1:
            raise ValueError(f"max_delivery_count must be at least 1, got {max_delivery_count!r}")
        if not duplicate_window >= 0:
            raise ValueError(f"duplicate_window must be zero or more, got {duplicate_window!r}")
        if not poll_interval > 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval!r}")
        self.path = Path(path)
        self.poll_interval = float(poll_interval)
        self.lock_duration = float(lock_duration)
        self.max_delivery_count = int(max_delivery_count)
        self.duplicate_window = float(duplicate_window)
        self._clock = clock
        self._db = SqliteConnections(self.path, busy_timeout=busy_timeout, what="queue")
        self._local = threading.local()
        # Waiting receivers, per queue, on conditions of one lock; the count of commits through this
        # instance, so that a commit between a look and the wait is not missed.
        self._lock = threading.Lock()
        self._waiting: dict[str, threading.Condition] = {}
        self._commits = 0
        self._pollers: dict[str, int] = {}
        """Per queue, the waiting thread that looks at the file for the others (by thread id)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with translate_sqlite_errors():
            self._db.get().executescript(_SCHEMA)

    # --- connections ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close every connection this instance opened; later calls raise ``StoreError``."""
        self._db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that, once committed, wakes this instance's waiting receivers.

        It also forgets what this thread last saw as idle, without waiting for ``data_version`` to say so.
        """
        with self._db.write() as conn:
            yield conn
        self._idle().clear()
        with self._lock:
            self._commits += 1
            for waiting in self._waiting.values():
                waiting.notify_all()

    def _idle(self) -> dict[str, _Idle]:
        idle: dict[str, _Idle] | None = getattr(self._local, "idle", None)
        if idle is None:
            idle = self._local.idle = {}
        return idle

    # --- sending --------------------------------------------------------------------------------

    def send(
        self,
        queue: str,
        body: bytes,
        *,
        session_id: str,
        message_id: str,
        scheduled_enqueue_time: float | None = None,
        application_properties: Mapping[str, PropertyValue] | None = None,
    ) -> bool:
        """Enqueue one message; ``False`` when it was dropped as a duplicate of ``message_id``.

        A duplicate is a message id first sent to ``queue`` less than ``duplicate_window`` seconds
        ago, whatever became of that first copy. ``scheduled_enqueue_time`` (epoch seconds) keeps the
        message invisible until then; a time in the past means now.

        Raises ``ValueError`` when ``session_id`` or ``message_id`` is empty or longer than 128
        characters (as the Service Bus SDK does), or a property value is not finite; ``TypeError``
        when ``body`` is not bytes or a property is not a str/int/float/bool.
        """
        _check_name("queue", queue)
        _check_id("session_id", session_id)
        _check_id("message_id", message_id)
        if not isinstance(body, bytes | bytearray | memoryview):
            raise TypeError(f"body must be bytes, got {type(body).__name__}")
        properties = _encode_properties(application_properties or {})
        if scheduled_enqueue_time is not None and not math.isfinite(scheduled_enqueue_time):
            raise ValueError(f"scheduled_enqueue_time must be finite, got {scheduled_enqueue_time!r}")
        with self._write() as conn:
            now = self._clock()
            # Forget ids older than the window first, so any row left is a duplicate.
            conn.execute(
                "DELETE FROM queue_duplicates WHERE queue = ? AND first_seen <= ?",
                (queue, now - self.duplicate_window),
            )
            seen = conn.execute(
                "INSERT INTO queue_duplicates (queue, message_id, first_seen) VALUES (?, ?, ?) "
                "ON CONFLICT (queue, message_id) DO NOTHING RETURNING first_seen",
                (queue, message_id, now),
            ).fetchone()
            if seen is None:
                return False
            # Enqueue times never go backwards on a queue, even if the wall clock does: FIFO within a
            # session follows (enqueue time, sequence), and must agree with the order of the sends.
            sent_at = conn.execute(
                "INSERT INTO queue_clocks (queue, last_enqueue) VALUES (?, ?) "
                "ON CONFLICT (queue) DO UPDATE SET last_enqueue = max(last_enqueue, excluded.last_enqueue) "
                "RETURNING last_enqueue",
                (queue, now),
            ).fetchone()[0]
            visible_at = max(sent_at, scheduled_enqueue_time) if scheduled_enqueue_time is not None else sent_at
            conn.execute(
                "INSERT INTO queue_messages "
                "(queue, session_id, message_id, body, properties, enqueued_time, scheduled_time) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (queue, session_id, message_id, bytes(body), properties, visible_at, scheduled_enqueue_time),
            )
        return True

    # --- receiving ------------------------------------------------------------------------------

    def receive(self, queue: str, *, timeout: float = 0.0) -> ReceivedMessage | None:
        """Lock and return the oldest visible message of a session no receiver holds, or ``None``.

        With ``timeout > 0`` waits up to that many real seconds for one. Of the threads waiting on
        one queue of this instance, one at a time looks at the file at least every ``poll_interval``
        seconds (sooner when a scheduled message or a lock falls due first) and wakes the others when
        it takes a message; every commit through this instance wakes them all.
        On the way, a message already delivered ``max_delivery_count`` times is moved to the
        dead-letter queue (reason ``MaxDeliveryCountExceeded``) instead of being delivered.
        Raises ``ValueError`` for a negative timeout.
        """
        _check_name("queue", queue)
        if not timeout >= 0:
            raise ValueError(f"timeout must be zero or more, got {timeout!r}")
        deadline = time.monotonic() + timeout
        delay = min(0.005, self.poll_interval)
        me = threading.get_ident()
        message: ReceivedMessage | None = None
        with self._lock:
            waiting = self._waiting.setdefault(queue, threading.Condition(self._lock))
        try:
            while True:
                with self._lock:
                    commits = self._commits
                message = self._receive_once(queue)
                remaining = deadline - time.monotonic()
                if message is not None or remaining <= 0:
                    return message
                wait = min(delay, remaining)
                idle = self._idle().get(queue)
                if idle is not None:  # no later than when a scheduled message or a lock falls due
                    wait = min(wait, max(0.0, idle.due - self._clock()))
                with self._lock:
                    if self._commits != commits:  # committed here since the look: look again now
                        continue
                    if self._pollers.setdefault(queue, me) == me:
                        waiting.wait(wait)
                        delay = min(delay * 2, self.poll_interval)
                    else:  # another thread looks for us, and wakes us when it takes a message
                        waiting.wait(remaining)
        finally:
            with self._lock:
                if self._pollers.get(queue) == me:
                    del self._pollers[queue]
                    # Having taken one, there may be more: everyone looks. Else one takes over looking.
                    if message is not None:
                        waiting.notify_all()
                    else:
                        waiting.notify()

    def _receive_once(self, queue: str) -> ReceivedMessage | None:
        if not self._may_deliver(queue):
            return None
        with self._db.write() as conn:
            now = self._clock()
            while True:
                row = conn.execute(_NEXT_DELIVERABLE, (queue, now, now)).fetchone()
                if row is None:
                    return None
                seq, delivery_count = int(row[0]), int(row[8])
                if delivery_count >= self.max_delivery_count:
                    _move_to_dead_letters(conn, seq, MAX_DELIVERY_COUNT_EXCEEDED, _exceeded(delivery_count), now)
                    continue
                token = str(uuid.uuid4())
                locked_until = now + self.lock_duration
                conn.execute(
                    "UPDATE queue_messages SET delivery_count = delivery_count + 1, lock_token = ?, "
                    "locked_until = ? WHERE seq = ?",
                    (token, locked_until, seq),
                )
                base = _message_fields(row)
                base["delivery_count"] = delivery_count + 1
                return ReceivedMessage(**base, lock_token=token, locked_until=locked_until)

    def _may_deliver(self, queue: str) -> bool:
        """Whether a write transaction could find a message to lock now; ``False`` only when it could not.

        Reads only. Skips even the read while nothing that could change the answer has happened since
        this thread last found nothing: no commit by another connection, none by this thread through
        this instance, the clock short of the next due time, and that look younger than ``_RECHECK_AFTER``.
        """
        idle = self._idle()
        with translate_sqlite_errors():
            conn = self._db.get()
            # Read the version before the data: a commit in between makes the next look read again.
            (version,) = conn.execute("PRAGMA data_version").fetchone()
            now = self._clock()
            last = idle.get(queue)
            if (
                last is not None
                and last.data_version == version
                and now < last.due
                and time.monotonic() - last.seen_at < _RECHECK_AFTER
            ):
                return False
            if conn.execute(_NEXT_DELIVERABLE, (queue, now, now)).fetchone() is not None:
                idle.pop(queue, None)
                return True
            (due,) = conn.execute(_NEXT_DUE, (queue, now, queue, now)).fetchone()
        idle[queue] = _Idle(version, float(due) if due is not None else math.inf, time.monotonic())
        return False

    # --- settling -------------------------------------------------------------------------------

    def complete(self, msg: ReceivedMessage) -> None:
        """Remove the message for good. Raises :class:`LockLost` when its lock is no longer held."""
        with self._write() as conn:
            now = self._clock()
            cur = conn.execute(
                "DELETE FROM queue_messages WHERE seq = ? AND lock_token = ? AND locked_until > ?",
                (msg.sequence_number, msg.lock_token, now),
            )
            if cur.rowcount != 1:
                raise _lock_lost(conn, msg, now)

    def abandon(self, msg: ReceivedMessage) -> None:
        """Unlock the message now: it is delivered again at once, with ``delivery_count + 1``.

        Its session is free again, and the message is still the head of it. A message that has
        used up ``max_delivery_count`` goes straight to the dead-letter queue, as in Service Bus.
        Raises :class:`LockLost` when its lock is no longer held.
        """
        with self._write() as conn:
            now = self._clock()
            row = conn.execute(
                "UPDATE queue_messages SET lock_token = NULL, locked_until = NULL "
                "WHERE seq = ? AND lock_token = ? AND locked_until > ? RETURNING delivery_count",
                (msg.sequence_number, msg.lock_token, now),
            ).fetchone()
            if row is None:
                raise _lock_lost(conn, msg, now)
            if int(row[0]) >= self.max_delivery_count:
                _move_to_dead_letters(conn, msg.sequence_number, MAX_DELIVERY_COUNT_EXCEEDED, _exceeded(row[0]), now)

    def dead_letter(self, msg: ReceivedMessage, reason: str, description: str) -> None:
        """Move the message to the dead-letter queue with ``reason`` and ``description``.

        Raises :class:`LockLost` when its lock is no longer held.
        """
        with self._write() as conn:
            now = self._clock()
            held = conn.execute(
                "SELECT 1 FROM queue_messages WHERE seq = ? AND lock_token = ? AND locked_until > ?",
                (msg.sequence_number, msg.lock_token, now),
            ).fetchone()
            if held is None:
                raise _lock_lost(conn, msg, now)
            _move_to_dead_letters(conn, msg.sequence_number, str(reason), str(description), now)

    def renew_lock(self, msg: ReceivedMessage) -> float:
        """Extend the lock to ``lock_duration`` from now; returns and stores the new ``locked_until``.

        Raises :class:`LockLost` when the lock already expired or was taken over: renewal cannot
        revive a lock, so a handler that runs long must renew well before ``locked_until``.
        """
        with self._db.write() as conn:  # makes nothing deliverable: no receiver to wake
            now = self._clock()
            row = conn.execute(
                "UPDATE queue_messages SET locked_until = ? "
                "WHERE seq = ? AND lock_token = ? AND locked_until > ? RETURNING locked_until",
                (now + self.lock_duration, msg.sequence_number, msg.lock_token, now),
            ).fetchone()
            if row is None:
                raise _lock_lost(conn, msg, now)
        msg.locked_until = float(row[0])
        return msg.locked_until

    # --- looking (status and debugging) ---------------------------------------------------------

    def peek(self, queue: str) -> list[PeekedMessage]:
        """Every message in ``queue`` (active and scheduled, not dead-lettered), in delivery order.

        Locks nothing and changes nothing.
        """
        with translate_sqlite_errors():
            now = self._clock()
            rows = (
                self._db.get()
                .execute(
                    f"SELECT {_MESSAGE_COLUMNS}, locked_until FROM queue_messages WHERE queue = ? "
                    "ORDER BY enqueued_time, seq",
                    (queue,),
                )
                .fetchall()
            )
        return [
            PeekedMessage(
                **_message_fields(row),
                state="scheduled" if row[6] > now else "active",
                locked_until=float(row[9]) if row[9] is not None and row[9] > now else None,
            )
            for row in rows
        ]

    def dead_letters(self, queue: str) -> list[DeadLetter]:
        """The dead-letter queue of ``queue``, oldest first."""
        with translate_sqlite_errors():
            rows = (
                self._db.get()
                .execute(
                    f"SELECT {_MESSAGE_COLUMNS}, reason, description, dead_lettered_time FROM queue_dead_letters "
                    "WHERE queue = ? ORDER BY dead_lettered_time, seq",
                    (queue,),
                )
                .fetchall()
            )
        return [
            DeadLetter(**_message_fields(row), reason=row[9], description=row[10], dead_lettered_time=float(row[11]))
            for row in rows
        ]

    def redrive(self, queue: str, sequence_number: int, *, message_id: str) -> bool:
        """Move a dead-lettered message back into ``queue`` as a new message (``message_id``, delivery count
        0, visible now), in one transaction; ``False`` when no such dead letter exists. The new id keeps
        duplicate detection from dropping it: it is a new send, as a Service Bus redrive is."""
        _check_id("message_id", message_id)
        with self._write() as conn:
            now = self._clock()
            row = conn.execute(
                "SELECT session_id, body, properties FROM queue_dead_letters WHERE queue = ? AND seq = ?",
                (queue, sequence_number),
            ).fetchone()
            if row is None:
                return False
            sent_at = conn.execute(
                "INSERT INTO queue_clocks (queue, last_enqueue) VALUES (?, ?) "
                "ON CONFLICT (queue) DO UPDATE SET last_enqueue = max(last_enqueue, excluded.last_enqueue) "
                "RETURNING last_enqueue",
                (queue, now),
            ).fetchone()[0]
            conn.execute(
                "INSERT INTO queue_messages (queue, session_id, message_id, body, properties, enqueued_time) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (queue, row[0], message_id, row[1], row[2], sent_at),
            )
            conn.execute("DELETE FROM queue_dead_letters WHERE queue = ? AND seq = ?", (queue, sequence_number))
        return True

    def counts(self, queue: str) -> dict[str, int]:
        """Message counts of ``queue``, in Service Bus's terms.

        ``active``: visible now, locked or not; ``locked``: the part of ``active`` under a live lock;
        ``scheduled``: not visible yet; ``dead_lettered``: in the dead-letter queue.
        """
        with translate_sqlite_errors():
            now = self._clock()
            conn = self._db.get()
            active, locked, scheduled = conn.execute(
                "SELECT "
                "  coalesce(sum(enqueued_time <= ?), 0), "
                "  coalesce(sum(enqueued_time <= ? AND locked_until > ?), 0), "
                "  coalesce(sum(enqueued_time > ?), 0) "
                "FROM queue_messages WHERE queue = ?",
                (now, now, now, now, queue),
            ).fetchone()
            (dead,) = conn.execute("SELECT count(*) FROM queue_dead_letters WHERE queue = ?", (queue,)).fetchone()
        return {"active": int(active), "scheduled": int(scheduled), "locked": int(locked), "dead_lettered": int(dead)}


def to_service_bus_message(msg: ReceivedMessage) -> ServiceBusMessage:
    """The ``azure.functions`` object a ``service_bus_queue_trigger`` function receives for ``msg``.

    Note: ``azure.functions.ServiceBusMessage`` is the abstract base (body, content type and
    correlation id only); the worker hands functions ``azure.functions.servicebus.ServiceBusMessage``.
    """
    from azure.functions.servicebus import ServiceBusMessage

    def utc(t: float | None) -> datetime | None:
        return datetime.fromtimestamp(t, UTC) if t is not None else None

    return ServiceBusMessage(
        body=msg.body,
        application_properties=dict(msg.application_properties),
        user_properties=dict(msg.application_properties),
        delivery_count=msg.delivery_count,
        enqueued_sequence_number=msg.sequence_number,
        enqueued_time_utc=utc(msg.enqueued_time),
        locked_until=utc(msg.locked_until),
        lock_token=msg.lock_token,
        message_id=msg.message_id,
        scheduled_enqueue_time_utc=utc(msg.scheduled_enqueue_time),
        sequence_number=msg.sequence_number,
        session_id=msg.session_id,
    )


# --- helpers ------------------------------------------------------------------------------------


def _check_name(what: str, value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")


def _check_id(what: str, value: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    if not 1 <= len(value) <= MAX_ID_LENGTH:
        raise ValueError(f"{what} must be 1..{MAX_ID_LENGTH} characters, got {len(value)}")


def _encode_properties(properties: Mapping[str, PropertyValue]) -> str:
    for key, value in properties.items():
        if not isinstance(key, str):
            raise TypeError(f"application property names must be str, got {key!r}")
        if not isinstance(value, str | int | float | bool):
            raise TypeError(f"application property {key!r} must be str, int, float or bool, got {type(value).__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"application property {key!r} must be finite, got {value!r}")
    # JSON keeps str, int, float and bool apart, so they come back with the types they were sent with.
    return json.dumps(dict(properties), separators=(",", ":"))


def _message_fields(row: tuple[Any, ...]) -> dict[str, Any]:
    seq, queue, session_id, message_id, body, properties, enqueued, scheduled, delivery_count = row[:9]
    return {
        "queue": queue,
        "body": bytes(body),
        "session_id": session_id,
        "message_id": message_id,
        "sequence_number": int(seq),
        "delivery_count": int(delivery_count),
        "enqueued_time": float(enqueued),
        "scheduled_enqueue_time": float(scheduled) if scheduled is not None else None,
        "application_properties": json.loads(properties),
    }


def _exceeded(delivery_count: int) -> str:
    return f"Message could not be consumed after {delivery_count} delivery attempts."


def _move_to_dead_letters(conn: sqlite3.Connection, seq: int, reason: str, description: str, now: float) -> None:
    """Move one message to the dead-letter queue, inside the caller's write transaction."""
    conn.execute(
        f"INSERT INTO queue_dead_letters ({_MESSAGE_COLUMNS}, reason, description, dead_lettered_time) "
        f"SELECT {_MESSAGE_COLUMNS}, ?, ?, ? FROM queue_messages WHERE seq = ?",
        (reason, description, now, seq),
    )
    conn.execute("DELETE FROM queue_messages WHERE seq = ?", (seq,))


def _lock_lost(conn: sqlite3.Connection, msg: ReceivedMessage, now: float) -> LockLost:
    """Say why ``msg``'s lock is not held, for an error raised inside the failed write."""
    row = conn.execute(
        "SELECT lock_token, locked_until FROM queue_messages WHERE seq = ?", (msg.sequence_number,)
    ).fetchone()
    if row is None:
        reason = "the message was already settled (completed or dead-lettered)"
    elif row[0] is None:
        reason = "the lock was released (the message was abandoned)"
    elif row[0] != msg.lock_token:
        reason = "the lock expired and the message was received again"
    else:
        reason = f"the lock expired {now - float(row[1]):.3f}s ago"
    return LockLost(
        reason,
        queue=msg.queue,
        session_id=msg.session_id,
        message_id=msg.message_id,
        sequence_number=msg.sequence_number,
    )
