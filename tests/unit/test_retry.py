"""The retry policy for transient errors (shared.messaging.retry)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.messaging.retry import Backoff


def test_delays_double_up_to_the_cap_with_a_stable_jitter() -> None:
    backoff = Backoff(base=1.0, cap=60.0)
    delays = [backoff.delay(n, seed="webhook:d-1") for n in range(1, 10)]
    assert delays == [backoff.delay(n, seed="webhook:d-1") for n in range(1, 10)]  # a replay schedules the same
    for n, delay in enumerate(delays, start=1):
        assert 0.75 * min(60.0, 2.0 ** (n - 1)) <= delay <= min(60.0, 2.0 ** (n - 1))
    assert backoff.delay(1, seed="a") != backoff.delay(1, seed="b") or backoff.delay(2, seed="a") != backoff.delay(
        2, seed="b"
    )


@given(attempt=st.integers(min_value=1, max_value=10_000), seed=st.text(max_size=20))
def test_a_delay_is_never_beyond_the_cap(attempt: int, seed: str) -> None:
    backoff = Backoff(base=0.5, cap=300.0)
    assert 0 < backoff.delay(attempt, seed=seed) <= 300.0


def test_the_waits_in_place_scale_with_the_base_and_the_window_ends() -> None:
    backoff = Backoff(base=2.0, cap=10.0, give_up_after=100.0)
    assert backoff.in_place == (0.5, 1.0, 2.0)
    assert not backoff.gives_up(100.0) and backoff.gives_up(100.1)
    with pytest.raises(ValueError):
        Backoff(base=5.0, cap=1.0)
    with pytest.raises(ValueError):
        backoff.delay(0)
