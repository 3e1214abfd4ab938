"""``casekeeper alerts``: recent alerts, raised through the real ``Alerter``."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from casekeeper.core.clock import ManualClock
from casekeeper.stores.sqlite import SqliteDocumentStore
from shared.app.alerts import Alerter
from shared.operator.alerts import main
from tests.operator.conftest import Ran

Run = Callable[..., Ran]


def webhook(status: int) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(status)))


def test_alerts_are_listed_newest_first_with_their_delivery(store: SqliteDocumentStore, run: Run) -> None:
    clock = ManualClock()
    Alerter(store, clock).raise_alert(
        "checkpoint_failure", "checkpoint save failed for case C-1", {"caseId": "C-1"}, dedupe_key="f-1"
    )
    clock.advance(60)
    Alerter(store, clock, webhook_url="https://hooks.example/a", http=webhook(500)).raise_alert(
        "checkpoint_lag", "case C-2 lags", {"caseId": "C-2", "caseVersion": 3}, dedupe_key="C-2:v3"
    )
    clock.advance(60)
    Alerter(store, clock, webhook_url="https://hooks.example/a", http=webhook(204)).raise_alert(
        "effect_escalated",
        "effect abc of case C-3 needs a person",
        {"caseId": "C-3", "effectKey": "abc"},
        dedupe_key="abc",
    )

    listed = run(main)
    assert listed.code == 0
    lines = listed.out.splitlines()
    assert lines[0].split()[2:5] == ["effect_escalated", "delivered", "effect"]
    assert lines[0].startswith("2027-01-15 08:02:00Z")
    assert lines[1].split() == ["caseId=C-3", "effectKey=abc"]
    assert "checkpoint_lag" in lines[2] and "NOT delivered" in lines[2] and "case C-2 lags" in lines[2]
    assert lines[3].split() == ["caseId=C-2", "caseVersion=3"]
    assert "checkpoint_failure" in lines[4] and "no webhook" in lines[4]

    as_json = run(main, "--json", "--limit", "2").json()
    assert [a["kind"] for a in as_json["alerts"]] == ["effect_escalated", "checkpoint_lag"]
    assert [a["delivered"] for a in as_json["alerts"]] == [True, False]
    assert as_json["alerts"][0]["fields"] == {"caseId": "C-3", "effectKey": "abc"}


def test_no_alerts(store: SqliteDocumentStore, run: Run) -> None:
    listed = run(main)
    assert (listed.code, listed.out) == (0, "no alerts\n")
