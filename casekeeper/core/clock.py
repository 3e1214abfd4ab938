"""The clock port. Core code never reads the wall clock; it is handed a :class:`Clock`.

The clock stamps human-facing history ("when was this committed"). Decisions about time that
matter for safety (is a started effect still in flight?) use the **store's** clock instead,
:meth:`casekeeper.core.ports.DocumentStore.now`, so that two machines with skewed clocks agree.
"""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    """Seconds since the epoch."""

    def now(self) -> float:
        """Seconds since the epoch, as this clock reads them."""
        ...


class ManualClock:
    """A clock that only moves when told to: for tests."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        """The time set by hand (and moved by :meth:`advance`)."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        self._now += seconds
