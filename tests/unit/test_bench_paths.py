"""The per-path store operations (benchmarks/store_paths.py) are facts the capacity model rests on: each
path counted small on SQLite through the indexed functions, its counts checked, and docs/performance.md's
per-path table checked against them (counts, never timings)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import store_paths
from benchmarks.processes import running_supplier
from benchmarks.store_ops import OpsResult

PERFORMANCE = Path(__file__).resolve().parents[2] / "docs" / "performance.md"


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, OpsResult]]:
    with running_supplier(tmp_path_factory.mktemp("supplier")) as supplier:
        yield store_paths.measure_paths("sqlite", supplier, events=2, warmup=1)


def calls(result: OpsResult) -> dict[tuple[str, str], float]:
    return {key: count / result.events for key, count in result.total().calls.items() if count}


def test_every_path_is_measured_and_ends_as_it_must(measured: dict[str, OpsResult]) -> None:
    assert set(measured) == set(store_paths.NAMES)
    assert {name: r.problems for name, r in measured.items()} == {name: [] for name in measured}


def test_the_over_billed_invoice_is_three_case_writes_its_delivery_record_and_its_fact_clock(
    measured: dict[str, OpsResult],
) -> None:
    """The fact clock of a new case: one read (none yet) and one create, beside the delivery record's."""
    assert calls(measured["over"]) == {
        ("cases", "create"): 1,
        ("cases", "replace"): 2,
        ("health", "create"): 2,
        ("health", "read"): 1,
    }


def test_no_case_path_touches_the_effects_container(measured: dict[str, OpsResult]) -> None:
    """Effects live on the case document: no path of a case reads or writes the ``effects`` container."""
    for name, result in measured.items():
        if name != "tick":
            assert not any(container == "effects" for container, _ in calls(result)), name


def test_the_paths_counts(measured: dict[str, OpsResult]) -> None:
    ops = {name: r.per_event() for name, r in measured.items()}
    assert ops == {
        "within": 6,
        "over": 6,
        "credit": 6,
        "pause": 8,
        "answer": 11,
        "credit_after_answer": 7,
        "po": 8,
        "tick": 11,
    }
    # An idle tick writes nothing but the clock (on Cosmos DB now() is an upsert), and reads that once.
    assert {m for (_, m) in calls(measured["tick"])} <= {"now", "read", "query", "count"}
    assert sum(n for (_, m), n in calls(measured["tick"]).items() if m == "now") == 1
    # The approval answer's claim and outcome are the case's two replaces.
    assert calls(measured["answer"])[("cases", "replace")] == 2


def test_the_request_units_follow_the_published_costs() -> None:
    assert store_paths.write_ru(500) == 5.0 and store_paths.write_ru(2048) == pytest.approx(6.3)
    assert store_paths.read_ru(100) == 1.0 and store_paths.read_ru(4096) == 4.0


def test_the_documented_table_is_the_measured_one(measured: dict[str, OpsResult]) -> None:
    """docs/performance.md's "Request units per case, by path": each row names its path and carries the
    measured operations, writes / reads / queries (the tick's store-clock calls are the rest) and RU
    (within 1 RU: sizes vary by a few bytes)."""
    text = PERFORMANCE.read_text()
    section = text[text.index('<a id="capacity"></a>') :]
    rows = {m[1]: m[0] for m in re.finditer(r"^\| `(\w+)`: .*$", section, flags=re.M)}
    assert set(rows) == set(store_paths.NAMES)
    for name, line in rows.items():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        row = store_paths.path_row(name, measured[name])
        assert cells[1] == f"{row.ops:g}", (name, cells)
        assert cells[2] == f"{row.writes:g} / {row.reads:g} / {row.queries:g}", (name, cells)
        assert row.ops == row.writes + row.reads + row.queries + row.clock
        assert abs(float(cells[4]) - row.ru) <= 1, (name, cells, row.ru)
