"""How long and how often a transiently failing event is retried, so that an accepted event is never lost.

A retryable error (``CasekeeperError.retryable``: the store or the queue unavailable or throttled, a
conditional write that kept losing, an outcome not known yet) must not burn the broker's delivery count:
Service Bus redelivers an abandoned message at once, so ten deliveries go by in moments and the event is
dead-lettered by an outage of seconds. Instead:

1. **A few short waits in place** (:attr:`Backoff.in_place`, under twice ``base`` in all), holding the
   message: a blip passes without the event leaving its place in the case's session, so the case's
   events stay in order.
2. **Then a delayed copy**: the event is sent again into its session, scheduled ``delay(attempt)``
   seconds ahead (exponential, capped, with a jitter derived from the message id so a burst of failures
   does not come back at one instant), under a new message id per attempt so duplicate detection does not
   swallow it; the original is completed.
3. **Past** :attr:`Backoff.give_up_after` **seconds** since the first failure, the error propagates: the
   broker's own redeliveries, and then its dead-letter queue, take over. That is an outage of hours or a
   bug: visible (``casekeeper events dead-lettered``, an alert) and recoverable (``events redrive``).

The rule this serves: docs/design.md#accepted-events.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    base: float = 1.0
    """The first delayed copy's delay, in seconds; each later one doubles it."""
    cap: float = 300.0
    """No copy is scheduled further ahead than this."""
    give_up_after: float = 3600.0
    """Seconds after the first failure past which the event is left to the broker (and its DLQ)."""

    @property
    def in_place(self) -> tuple[float, ...]:
        """The short waits before the first copy, while the message is held (order within the session
        kept): a quarter, a half and all of ``base``."""
        return (self.base / 4, self.base / 2, self.base)

    def __post_init__(self) -> None:
        if self.base <= 0 or self.cap < self.base or self.give_up_after < 0:
            raise ValueError(f"invalid backoff: base {self.base}, cap {self.cap}, give up after {self.give_up_after}")

    def delay(self, attempt: int, *, seed: str = "") -> float:
        """The delay before delayed copy number ``attempt`` (1, 2, ...): ``base * 2**(attempt-1)``, capped,
        scaled by a factor in [0.75, 1.0] that depends only on ``seed`` and ``attempt`` (so a replay of the
        same failure schedules the same copy)."""
        if attempt < 1:
            raise ValueError(f"attempt must be 1 or more, got {attempt}")
        raw = min(self.cap, self.base * 2.0 ** min(attempt - 1, 30))
        digest = hashlib.sha256(f"{seed}:{attempt}".encode()).digest()
        return raw * (0.75 + 0.25 * digest[0] / 255)

    def gives_up(self, elapsed: float) -> bool:
        return elapsed > self.give_up_after
