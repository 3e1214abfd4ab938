"""Reconciliation and checkpoint health on ``casekeeper dev``, end to end (F2-F7, docs/design.md#failure-points).

The host runs with a 4 s call timeout and a 2 s timer, so a reconciliation completes in seconds.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from casekeeper.core.ports import Query
from casekeeper.stores.sqlite import SqliteDocumentStore
from devhost.supplier_stub import Faults, SupplierStub
from tests.support.dev_host import DevHost
from tests.support.invoices import invoice
from tests.support.supplier import posts

pytestmark = pytest.mark.slow


def health_records(host: DevHost, kind: str) -> list[dict[str, Any]]:
    store = SqliteDocumentStore(host.data / "casekeeper.sqlite")
    try:
        # Alerts and checkpoint failures are spread over partitions (by their ``record``); others keep theirs.
        spread = kind in ("alert", "checkpoint_failure")
        query = Query(equals={"record": kind}) if spread else Query(partition=kind)
        return [d.body for d in store.query("health", query)]
    finally:
        store.close()


def test_a_503_before_creating_the_note_is_retried_with_the_same_key(host: DevHost, supplier: SupplierStub) -> None:
    supplier.set_faults(Faults(fail_before_create=1))
    host.post_event("invoice.received", "INV-R1", invoice("1200.00"))
    view = host.wait_for("INV-R1", lambda v: v["case"]["status"] == "credit_requested", timeout=60)
    [effect] = view["effects"]
    assert effect["status"] == "done" and effect["attempts"] == 2
    sent = posts(supplier)
    assert [p["status"] for p in sent] == [503, 201]
    assert {p["idempotencyKey"] for p in sent} == {effect["key"]}  # the retry used the same key
    assert len(supplier.notes) == 1  # one credit note in all
    lookups = [r for r in supplier.requests if r["method"] == "GET"]
    assert lookups and all(r["status"] == 404 for r in lookups)  # looked up first; nothing there


def test_a_supplier_whose_lookup_is_down_is_escalated_once(host: DevHost, supplier: SupplierStub) -> None:
    supplier.set_faults(Faults(fail_before_create=1, lookup_down=True))
    host.post_event("invoice.received", "INV-R2", invoice("1200.00"))
    view = host.wait_for("INV-R2", lambda v: v["case"]["status"] == "needs_review", timeout=60)
    [effect] = view["effects"]
    assert effect["status"] == "needs_reconciliation"
    assert "lookup by key failed" in effect["reason"]
    assert len(posts(supplier)) == 1  # never retried blindly
    time.sleep(4.0)  # two more timer periods: the escalation must not alert again
    alerts = [a for a in health_records(host, "alert") if a["alertKind"] == "effect_escalated"]
    assert len(alerts) == 1 and alerts[0]["fields"]["caseId"] == "INV-R2"


def test_failing_checkpoint_saves_alert_once_each_within_a_timer_period(tmp_path: Path, supplier: SupplierStub) -> None:
    # Every checkpoint is larger than 300 bytes, so every save is refused: the quiet failure mode, for real.
    # Here it is the run's pause for a person, written (and refused) when the run asks, after its commit.
    dev = DevHost(tmp_path / "data", supplier, env_overrides={"CHECKPOINT_MAX_BYTES": "300"}).start()
    try:
        dev.post_event("invoice.received", "INV-R3", invoice("2500.00"))
        dev.wait_for("INV-R3", lambda v: v["case"]["status"] == "awaiting_approval")  # the run still completes
        deadline = time.monotonic() + 10
        while not (failures := health_records(dev, "checkpoint_failure")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert failures and {f["caseId"] for f in failures} == {"INV-R3"}
        time.sleep(2.5)  # one timer period (2 s) and a little
        alerted = [a for a in health_records(dev, "alert") if a["alertKind"] == "checkpoint_failure"]
        assert len(alerted) == len(failures)
        assert {a["fields"]["failureId"] for a in alerted} == {f["id"] for f in failures}
        time.sleep(4.0)
        assert len([a for a in health_records(dev, "alert") if a["alertKind"] == "checkpoint_failure"]) == len(failures)
        assert "checkpoint save failed for case INV-R3" in dev.log()
        # The run paused with no checkpoint saved: its checkpoints lag its activity, alerted once.
        lag = [a for a in health_records(dev, "alert") if a["alertKind"] == "checkpoint_lag"]
        assert [a["fields"]["caseId"] for a in lag] == ["INV-R3"]
    finally:
        dev.stop()
