"""The local host's adapters of the messaging ports, on its SQLite session queue (``sqlite_queue.py``).

They behave as the Service Bus adapters do where the app relies on it: sessions, scheduled messages,
duplicate detection by message id, and a dead-letter queue that can be listed and redriven. Both kinds
pass ``tests/contract/test_senders.py``.

Errors: the session queue reports its SQLite file's failures as ``StoreError`` (``StoreUnavailable`` when
the file stays locked); the ports promise ``QueueError`` (``QueueUnavailable``), as the Service Bus
adapters raise, so :func:`_queue_errors` translates them here, once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from casekeeper.errors import StoreError, StoreUnavailable
from shared.domain.events import CaseEvent
from shared.errors import QueueError, QueueUnavailable
from shared.messaging import DeadLetter, encode, message_properties, redrive_message_id
from shared.messaging.sqlite_queue import LocalSessionQueue


@contextmanager
def _queue_errors(queue_name: str) -> Iterator[None]:
    try:
        yield
    except StoreUnavailable as exc:
        raise QueueUnavailable(f"local queue: {exc}", queue=queue_name) from exc
    except StoreError as exc:
        raise QueueError(f"local queue: {exc}", queue=queue_name) from exc


class LocalQueueEventSender:
    """:class:`~shared.messaging.EventSender` on the local queue (thread-safe: a connection per thread)."""

    def __init__(self, queue: LocalSessionQueue, queue_name: str, *, owns_queue: bool = False) -> None:
        """``owns_queue``: :meth:`close` closes ``queue`` (opened for this sender alone, as the door's is)."""
        self._queue = queue
        self._queue_name = queue_name
        self._owns_queue = owns_queue

    def close(self) -> None:
        if self._owns_queue:
            self._queue.close()

    def send(self, event: CaseEvent, *, message_id: str, schedule_at: float | None = None) -> None:
        with _queue_errors(self._queue_name):
            self._queue.send(
                self._queue_name,
                encode(event),
                session_id=event.case_id,
                message_id=message_id,
                scheduled_enqueue_time=schedule_at,
                application_properties=message_properties(event),
            )


class LocalDeadLetters:
    """:class:`~shared.messaging.DeadLetterQueue` of the local queue."""

    def __init__(self, queue: LocalSessionQueue, queue_name: str) -> None:
        self._queue = queue
        self._queue_name = queue_name

    def peek(self, limit: int = 100, *, after_sequence: int | None = None) -> list[DeadLetter]:
        with _queue_errors(self._queue_name):
            everything = sorted(self._queue.dead_letters(self._queue_name), key=lambda d: d.sequence_number)
        after = -1 if after_sequence is None else after_sequence
        letters = [d for d in everything if d.sequence_number > after][:limit]
        return [
            DeadLetter(
                message_id=d.message_id,
                session_id=d.session_id,
                sequence_number=d.sequence_number,
                reason=d.reason,
                description=d.description,
                delivery_count=d.delivery_count,
                enqueued_time=d.enqueued_time,
                body=d.body,
            )
            for d in letters
        ]

    def counts(self) -> dict[str, int]:
        with _queue_errors(self._queue_name):
            counts = self._queue.counts(self._queue_name)
        return {k: counts[k] for k in ("active", "scheduled", "dead_lettered")}

    def redrive(self, message_ids: Iterable[str] | None = None) -> list[DeadLetter]:
        wanted = None if message_ids is None else set(message_ids)
        moved: list[DeadLetter] = []
        for letter in self.peek(limit=10_000):
            if wanted is not None and letter.message_id not in wanted:
                continue
            new_id = redrive_message_id(letter.message_id, letter.sequence_number)
            with _queue_errors(self._queue_name):
                redriven = self._queue.redrive(self._queue_name, letter.sequence_number, message_id=new_id)
            if redriven:
                moved.append(letter)
        return moved
