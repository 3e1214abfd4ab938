"""The table names every invariant with its count, and the JSON report carries each violating case's trail."""

from __future__ import annotations

import json
from pathlib import Path

from chaos.checks import check_all
from chaos.report import counts, table, write_json
from chaos.violations import INVARIANTS
from tests.chaos.builders import Story


def test_the_table_and_the_report_show_a_violation_with_its_evidence(tmp_path: Path) -> None:
    story = Story(invoice="1300.00", po="1000.00")
    story.request("a", "300.00")
    story.po_updated("900.00", "d-po", status_after="needs_review")
    story.request("b", "400.00")
    evidence = story.done()
    violations = check_all(evidence)
    summary = counts(evidence, {"cases": 1, "caseKinds": {"over_small": 1}}, kills_planned=0)

    text = table("casekeeper chaos: seed 1", summary, violations)
    assert all(title in text for title in INVARIANTS.values())
    assert "FAIL" in text and "VIOLATIONS OF 2 (1; first 1)" in text and "C-1: request" in text
    assert "STORE OUTAGES" in text and "done                                     none" in text

    path = tmp_path / "report.json"
    write_json(
        path, header={"seed": 1}, summary=summary, violations=violations, evidence=evidence, case_shows={}, extra={}
    )
    report = json.loads(path.read_text())
    assert report["seed"] == 1
    assert [i["violations"] for i in report["invariants"]] == [0, 1, 0, 0, 0]
    trail = report["cases"]["C-1"]
    assert [e["event_type"] for e in trail["events"]] == ["invoice.received", "po.updated"]
    assert [r["body"]["amount"] for r in trail["supplierRequests"]] == ["300.00", "400.00"]
    assert len(trail["history"]) == 3
