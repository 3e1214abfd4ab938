"""Retention: which documents expire, how the store wrapper stamps them, and the settings behind it.

The wrapper is tested over the real SQLite store (which honours ``ttl``) with a clock the test moves, and
through the real writers (the case repository, the ledger's store calls, the alerter), so what expires is
what the code writes, not hand-made bodies alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from casekeeper.core.cases import CaseRepository
from casekeeper.core.clock import ManualClock
from casekeeper.core.ports import Query
from casekeeper.errors import ConfigurationError, StoreUnavailable
from casekeeper.stores.sqlite import SqliteDocumentStore
from shared.app.alerts import Alerter
from shared.app.bootstrap import open_store
from shared.app.retention import DAY, RetainingStore, Retention, backend
from shared.app.settings import Settings

POLICY = Retention(
    closed_case_days=90, settled_effect_days=60, finished_checkpoint_days=7, alert_days=30, failure_days=20
)


@pytest.mark.parametrize(
    ("container", "body", "days"),
    [
        ("cases", {"status": "closed"}, 90),
        ("cases", {"status": "approved"}, 90),
        ("cases", {"status": "closed", "openEffects": True}, None),  # an effect on it is still open
        ("cases", {"status": "open"}, None),
        ("cases", {"status": "awaiting_approval"}, None),
        ("cases", {"status": "needs_review"}, None),
        ("cases", {"status": "credit_requested"}, None),
        # An effect never by its own write: the money rule counts it while its case can decide again.
        ("effects", {"status": "done"}, None),
        ("effects", {"status": "failed"}, None),
        ("effects", {"status": "started"}, None),
        ("effects", {"status": "needs_reconciliation"}, None),
        ("checkpoints", {"kind": "checkpoint", "pendingRequestIds": []}, 7),
        ("checkpoints", {"kind": "checkpoint", "pendingRequestIds": ["r1"]}, 90),
        ("health", {"kind": "alert-03", "record": "alert", "notified": False}, None),
        ("health", {"kind": "alert-03", "record": "alert", "notified": True}, 30),
        ("health", {"kind": "checkpoint_failure-07", "record": "checkpoint_failure", "alerted": False}, None),
        ("health", {"kind": "checkpoint_failure-07", "record": "checkpoint_failure", "alerted": True}, 20),
        ("health", {"kind": "rejected_event"}, 20),
        ("health", {"kind": "lookup_failures"}, 20),
        ("health", {"kind": "delivery"}, 90),
        ("health", {"kind": "approval_answer"}, 90),
        ("health", {"kind": "cursor"}, None),
        ("health", {"kind": "clock"}, None),
        ("health", {"kind": "something new"}, None),  # unknown: kept, never lost by accident
    ],
)
def test_what_expires_and_what_is_kept(container: str, body: dict[str, Any], days: int | None) -> None:
    assert POLICY.ttl(container, body) == (days * DAY if days is not None else None)
    stamped = POLICY.stamped(container, {**body, "ttl": 5})
    assert stamped.get("ttl") == POLICY.ttl(container, body) and {**stamped, "ttl": 5} == {**body, "ttl": 5}


def test_zero_keeps_forever_and_fractions_round_to_seconds() -> None:
    forever = Retention(closed_case_days=0)
    assert forever.ttl("cases", {"status": "closed"}) is None
    assert (
        Retention(alert_days=0.5).ttl("health", {"kind": "alert-01", "record": "alert", "notified": True}) == DAY // 2
    )


class World:
    def __init__(self, tmp_path: Path) -> None:
        self.now = 1_000_000.0
        self.sqlite = SqliteDocumentStore(tmp_path / "store.sqlite", clock=lambda: self.now)
        self.store = RetainingStore(self.sqlite, POLICY)
        self.cases = CaseRepository(self.store, ManualClock())

    def later(self, days: float) -> None:
        self.now += days * DAY


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_a_closed_case_expires_and_an_open_one_of_the_same_age_is_kept(world: World) -> None:
    world.cases.create("closed", {})
    world.cases.create("open", {})
    assert world.cases.commit_status("closed", 1, "closed")
    world.later(89.9)
    assert world.store.read("cases", "closed", "closed") is not None
    world.later(0.2)
    assert world.store.read("cases", "closed", "closed") is None
    assert world.store.read("cases", "open", "open") is not None
    assert [c.id for c in world.cases.in_status("open")] == ["open"]


def test_reopening_a_case_takes_its_ttl_away(world: World) -> None:
    world.cases.create("c1", {})
    assert world.cases.commit_status("c1", 1, "approved")
    assert world.sqlite.read("cases", "c1", "c1").body["ttl"] == 90 * DAY  # type: ignore[union-attr]
    assert world.cases.commit_status("c1", 2, "open")
    assert "ttl" not in world.sqlite.read("cases", "c1", "c1").body  # type: ignore[union-attr]
    world.later(1000)
    assert world.store.read("cases", "c1", "c1") is not None


def effect_of(world: World, case_id: str, key: str, status: str) -> None:
    world.store.create("effects", case_id, key, {"id": key, "caseId": case_id, "status": status})


def ttl_of(world: World, container: str, partition: str, doc_id: str) -> Any:
    doc = world.sqlite.read(container, partition, doc_id)
    assert doc is not None
    return doc.body.get("ttl")


def test_a_case_that_closes_stamps_its_settled_effects_and_keeps_the_rest(world: World) -> None:
    world.cases.create("c1", {})
    effect_of(world, "c1", "e1", "done")
    effect_of(world, "c1", "e2", "needs_reconciliation")
    assert world.cases.commit_status("c1", 1, "credit_requested", effect_key="e1")
    assert ttl_of(world, "effects", "c1", "e1") is None  # the case still counts its request
    world.later(365)
    assert len(world.store.query("effects", Query(partition="c1"))) == 2
    assert world.cases.commit_status("c1", 2, "closed")
    assert ttl_of(world, "effects", "c1", "e1") == 60 * DAY and ttl_of(world, "effects", "c1", "e2") is None
    world.later(60)
    assert [d.id for d in world.store.query("effects", Query(partition="c1"))] == ["e2"]


def test_reopening_a_case_unstamps_its_effects(world: World) -> None:
    world.cases.create("c1", {})
    effect_of(world, "c1", "e1", "done")
    assert world.cases.commit_status("c1", 1, "approved", effect_key="e1")
    assert ttl_of(world, "effects", "c1", "e1") == 60 * DAY
    world.later(59)
    assert world.cases.commit_status("c1", 2, "open")  # a po.updated reopens it: decided again
    assert ttl_of(world, "effects", "c1", "e1") == -1
    world.later(1000)
    assert world.store.read("effects", "c1", "e1") is not None


def test_a_failed_unstamping_fails_the_case_write_for_a_retry(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    world.cases.create("c1", {})
    effect_of(world, "c1", "e1", "done")
    assert world.cases.commit_status("c1", 1, "approved", effect_key="e1")

    def down(container: str, query: Query) -> list[Any]:
        raise StoreUnavailable("store down", container=container)

    monkeypatch.setattr(world.sqlite, "query", down)
    with pytest.raises(StoreUnavailable):
        world.cases.commit_status("c1", 2, "open")
    monkeypatch.undo()
    world.cases.update_facts("c1", 3, {"poAmount": "90.00"}, reason="po edited")  # the retried event's write
    assert ttl_of(world, "effects", "c1", "e1") == -1


def test_a_final_case_stamps_its_checkpoints_a_pause_included(world: World) -> None:
    def checkpoint(doc_id: str, pending: list[str]) -> dict[str, Any]:
        return {"id": doc_id, "caseId": "c1", "kind": "checkpoint", "pendingRequestIds": pending, "encoded": "x"}

    world.cases.create("c1", {})
    assert world.cases.commit_status("c1", 1, "awaiting_approval")
    world.store.create("checkpoints", "c1", "pause", checkpoint("pause", ["r1"]))
    world.store.create("checkpoints", "c1", "after", checkpoint("after", []))
    assert world.sqlite.read("checkpoints", "c1", "pause").body["ttl"] == 90 * DAY  # type: ignore[union-attr]
    assert world.cases.commit_status("c1", 2, "closed")
    ttls = {d.id: d.body["ttl"] for d in world.sqlite.query("checkpoints", Query(partition="c1"))}
    assert ttls == {"pause": 7 * DAY, "after": 7 * DAY}
    world.later(7)
    assert world.store.query("checkpoints", Query(partition="c1")) == []


def test_a_case_that_never_paused_closes_without_an_extra_store_operation(world: World) -> None:
    calls: list[str] = []
    real_query = world.sqlite.query

    def counted(container: str, query: Query) -> list[Any]:
        calls.append(container)
        return real_query(container, query)

    world.sqlite.query = counted  # type: ignore[method-assign]
    world.cases.create("c1", {})
    assert world.cases.commit_status("c1", 1, "closed")
    assert calls == []


def test_an_alert_is_kept_until_notified_then_expires(world: World) -> None:
    alerter = Alerter(world.store, ManualClock())
    alerter.raise_alert("effect_escalated", "effect e1 needs a person", {"caseId": "c1"}, dedupe_key="e1")
    [doc] = world.sqlite.query("health", Query(equals={"record": "alert"}))
    assert doc.body["notified"] is True and doc.body["ttl"] == 30 * DAY  # no webhook: notified by logging
    unnotified = {"id": "a2", "kind": "alert-01", "record": "alert", "notified": False, "at": 0.0}
    world.store.create("health", "alert-01", "a2", unnotified)
    world.later(365)
    assert [d.id for d in world.store.query("health", Query(equals={"record": "alert"}))] == ["a2"]


def test_the_wrapper_passes_the_backend_through(world: World) -> None:
    assert backend(world.store) is world.sqlite and backend(world.sqlite) is world.sqlite
    assert world.store.changes_since("cases", 0) == []  # the SQLite store's own method


def test_the_settings_carry_the_retention_and_the_composition_root_applies_it(tmp_path: Path) -> None:
    local = {"CASEKEEPER_QUEUE": "local", "CASEKEEPER_SQLITE_PATH": str(tmp_path / "s.sqlite")}
    settings = Settings.from_mapping(local, receives_events=False)
    assert settings.retention == Retention(90, 90, 7, 30, 30)
    store = open_store(settings)
    try:
        assert isinstance(store, RetainingStore) and store.retention == settings.retention
    finally:
        store.close()
    env = {**local, "CLOSED_CASE_RETENTION_DAYS": "0", "ALERT_RETENTION_DAYS": "1.5"}
    assert Settings.from_mapping(env, receives_events=False).retention == Retention(0, 90, 7, 1.5, 30)
    with pytest.raises(ConfigurationError, match="FAILURE_RETENTION_DAYS") as raised:
        Settings.from_mapping({**local, "FAILURE_RETENTION_DAYS": "-1", "SETTLED_EFFECT_RETENTION_DAYS": "x"})
    assert "SETTLED_EFFECT_RETENTION_DAYS" in str(raised.value)
