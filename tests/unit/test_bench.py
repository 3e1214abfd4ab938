"""The guarded-effect benchmark counts round trips correctly (counts, not timings: those are not asserted)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import guarded_effect
from casekeeper.core.ports import Query
from casekeeper.stores.sqlite import SqliteDocumentStore


def test_measured_round_trips_per_effect_on_sqlite(tmp_path: Path) -> None:
    store = SqliteDocumentStore(tmp_path / "bench.sqlite")
    try:
        results = {r.variant: r for r in guarded_effect.measure(store, "sqlite", n=5, warmup=1)}
    finally:
        store.close()

    # Two conditional replaces of the case (issue 25): the claim is the version gate (a write, linearizable,
    # unlike a read), the outcome and the commit are one write. No read, no now(), no query.
    assert results["guarded"].round_trips == (2,) * 5
    assert dict(results["guarded"].per_method) == {"replace": 10}
    assert results["read-first"].round_trips == (6,) * 5
    assert dict(results["read-first"].per_method) == {"create": 5, "read": 15, "replace": 10}
    assert results["unguarded"].round_trips == (1,) * 5
    assert all(r.n == 5 for r in results.values())


def test_main_prints_the_table_and_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    code = guarded_effect.main(["--n", "3", "--warmup", "0", "--backends", "sqlite"])
    out = capsys.readouterr().out

    assert code == 0, out
    trips = {m[1]: m[2] for m in re.finditer(r"^\| sqlite\s*\| (\S+)\s*\|\s*(\d+) \|", out, flags=re.MULTILINE)}
    assert trips == {"guarded": "2", "unguarded": "1", "read-first": "6"}
    assert "round trips per guarded effect on sqlite: met (measured 2)" in out
    assert "| cosmos" not in out  # only the requested backend was measured


def test_counting_store_counts_every_port_method(tmp_path: Path) -> None:
    counting = guarded_effect.CountingStore(SqliteDocumentStore(tmp_path / "s.sqlite"))
    try:
        doc = counting.create("health", "k", "a", {"id": "a", "kind": "k"})
        counting.read("health", "k", "a")
        counting.replace("health", "k", "a", {"id": "a", "kind": "k"}, etag=doc.etag)
        counting.upsert("health", "k", "b", {"id": "b", "kind": "k"})
        counting.query("health", Query(partition="k"))
        counting.now()
        counting.delete("health", "k", "b")
        assert counting.take() == dict.fromkeys(("create", "read", "replace", "upsert", "query", "now", "delete"), 1)
        assert counting.take() == {}
    finally:
        counting.close()
