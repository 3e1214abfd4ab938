"""Alerts are spread over logical partitions of ``health`` (not one ``alert`` partition per container), and
alerts recorded in the older layout (partition ``alert``) are still listed, found when raised again, and
notified. On every backend."""

from __future__ import annotations

import pytest

from casekeeper.core.clock import ManualClock
from casekeeper.core.ports import HEALTH, DocumentStore, Query
from devhost.cosmos_server import INSECURE_REQUEST_WARNING_FILTER
from shared.app.alerts import ALERT_SHARDS, KIND_ALERT, LEGACY_ALERT_PARTITION, Alerter, alert_partition

pytestmark = pytest.mark.filterwarnings(INSECURE_REQUEST_WARNING_FILTER)


def test_an_incidents_alerts_spread_over_partitions(store: DocumentStore) -> None:
    alerts = Alerter(store, ManualClock())
    for i in range(64):
        assert alerts.raise_alert(
            "dead_lettered", f"event m{i} dead-lettered", {"messageId": f"m{i}"}, dedupe_key=f"m{i}"
        )
    assert not alerts.raise_alert("dead_lettered", "again", {}, dedupe_key="m7")  # found in its partition
    partitions = {alert_partition(a.id) for a in alerts.recent(100)}
    assert len(partitions) > ALERT_SHARDS // 2  # 64 alerts over 16 shards: one partition holds a few
    assert store.query(HEALTH, Query(partition=LEGACY_ALERT_PARTITION)) == []
    biggest = max(len(store.query(HEALTH, Query(partition=p))) for p in partitions)
    assert biggest < 64 // 2
    assert len(alerts.recent(100)) == 64 and len(alerts.recent(5)) == 5


def test_alerts_of_the_older_layout_are_read_found_and_notified(store: DocumentStore) -> None:
    clock = ManualClock()
    old = {
        "id": "checkpoint_lag:C-1:v2",
        "kind": LEGACY_ALERT_PARTITION,  # the older layout: one partition, no ``record`` field
        "alertKind": "checkpoint_lag",
        "message": "case C-1 lags",
        "fields": {"caseId": "C-1"},
        "at": clock.now(),
        "notified": False,
        "logged": False,
        "delivered": None,
        "attempts": 0,
        "nextAttemptAt": None,
    }
    store.create(HEALTH, LEGACY_ALERT_PARTITION, old["id"], old)
    alerts = Alerter(store, clock)
    assert not alerts.raise_alert("checkpoint_lag", "again", {}, dedupe_key="C-1:v2")  # not recorded twice
    assert alerts.raise_alert("checkpoint_lag", "case C-2 lags", {"caseId": "C-2"}, dedupe_key="C-2:v1")
    assert {a.id for a in alerts.recent()} == {"checkpoint_lag:C-1:v2", "checkpoint_lag:C-2:v1"}
    clock.advance(3600)
    assert alerts.deliver_pending() == ["checkpoint_lag:C-1:v2"]  # the old record, notified in place
    legacy = store.read(HEALTH, LEGACY_ALERT_PARTITION, old["id"])
    assert legacy is not None and legacy.body["notified"] is True
    new = store.query(HEALTH, Query(equals={"record": KIND_ALERT}))
    assert [d.partition for d in new] == [alert_partition("checkpoint_lag:C-2:v1")]
