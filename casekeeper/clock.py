"""The wall clock, for the guard's human-facing timestamps.

Only history ("when was this committed") uses it. Whether an effect is still in flight is judged by the
store's clock (``DocumentStore.now``), so machines with skewed clocks agree.
"""

from __future__ import annotations

import time

from casekeeper.core.clock import Clock, ManualClock


class SystemClock:
    """Seconds since the epoch, from this machine's clock."""

    def now(self) -> float:
        """The current time (``time.time()``)."""
        return time.time()


__all__ = ["Clock", "ManualClock", "SystemClock"]
