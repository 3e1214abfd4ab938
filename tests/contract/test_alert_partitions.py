"""Alerts are spread over logical partitions of ``health`` (not one ``alert`` partition per container), and
are found again in theirs when raised again. On every backend."""

from __future__ import annotations

import pytest

from casekeeper.core.clock import ManualClock
from casekeeper.core.ports import HEALTH, DocumentStore, Query
from shared.app.alerts import ALERT_SHARDS, KIND_ALERT, Alerter, alert_partition
from shared.localhost.cosmos_server import INSECURE_REQUEST_WARNING_FILTER

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
    assert store.query(HEALTH, Query(partition=KIND_ALERT)) == []  # no one partition holds them all
    biggest = max(len(store.query(HEALTH, Query(partition=p))) for p in partitions)
    assert biggest < 64 // 2
    assert len(alerts.recent(100)) == 64 and len(alerts.recent(5)) == 5
