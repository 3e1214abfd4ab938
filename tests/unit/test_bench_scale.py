"""The operations page, the drain check and a timer tick read what is stuck, not what exists: over stores
seeded with ten times as many finished cases and the same stuck ones, they make the same store round trips
and read the same documents (counted by ``benchmarks.guarded_effect.CountingStore``; no timings asserted)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks.scale import run_size
from devhost.supplier_stub import SupplierStub
from shared.domain.invoice import Status


@pytest.fixture(scope="module")
def supplier_url() -> Iterator[str]:
    stub = SupplierStub(port=0)
    stub.start()
    try:
        yield stub.url
    finally:
        stub.stop()


def test_the_views_and_a_tick_cost_the_same_over_ten_times_the_cases(supplier_url: str) -> None:
    small = run_size("sqlite", 150, supplier_url, stuck=10)
    large = run_size("sqlite", 1500, supplier_url, stuck=10)
    for few, many in zip(small.measures, large.measures, strict=True):
        assert few.what == many.what
        assert (few.round_trips, few.documents_read) == (many.round_trips, many.documents_read), few.what
    reads = {m.what: m.documents_read for m in large.measures}
    # What is read follows the stuck cases: 4 paused, 4 with a started effect, 2 left open.
    assert reads["ops page counts"] <= len(Status) * 20  # at most a short page per status, whatever the counts
    assert reads["drain check"] <= 4 + 4 + 4 * 2  # the marks, the waiting cases, then their checkpoints
    assert reads["timer tick"] < 100
    counts = {m.what: m.by_method for m in large.measures}
    assert counts["ops page counts"]["count"] == len(Status)  # one aggregate per status
