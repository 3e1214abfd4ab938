"""`casekeeper demo`: its table reports what happened, and it fails loudly when an invariant breaks."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from casekeeper import EffectResult, effect_key
from devhost import demo

# A scenario's first table line: | n | title | N POST [+ M lookup] | outcome...
ROW = re.compile(r"^\|\s*(\d+)\s*\|([^|]*)\|\s*(\d+) POST(?: \+ (\d+) lookup)?\s*\|(.*)\|$")


def rows(out: str) -> dict[int, tuple[int, int, str]]:
    """Scenario number -> (POSTs, lookups, full outcome text, continuation lines joined)."""
    found: dict[int, tuple[int, int, str]] = {}
    current: int | None = None
    for line in out.splitlines():
        match = ROW.match(line)
        if match:
            current = int(match[1])
            found[current] = (int(match[3]), int(match[4] or 0), match[5].strip())
        elif current is not None and line.startswith("|   |"):
            posts, lookups, text = found[current]
            found[current] = (posts, lookups, f"{text} {line.split('|')[4].strip()}")
        else:
            current = None
    return found


def test_demo_table_reports_one_request_per_decision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = demo.main(["--data", str(tmp_path)])
    out = capsys.readouterr().out

    assert code == 0, out
    table = rows(out)
    assert sorted(table) == [1, 2, 3, 4, 5], out
    assert table[1][:2] == (1, 0)
    assert "recorded CN-" in table[1][2]
    assert "already applied" in table[1][2]
    assert table[2][:2] == (1, 0)
    assert "1 of 2 status commits succeeded" in table[2][2]
    notes = set(re.findall(r"CN-\d+", table[2][2]))
    assert len(notes) == 1  # both runs saw the same credit note
    assert table[3][:2] == (0, 0)
    assert "StaleDecision" in table[3][2]
    assert "no claim was written" in table[3][2]  # the claim is the version gate: nothing left to reconcile
    assert table[4][:2] == (1, 1)  # one POST, one lookup by key: never a second POST
    for step in ("stays started", "EffectInFlight", "NeedsReconciliation", "case committed"):
        assert step in table[4][2]
    assert table[5][:2] == (0, 0)
    assert "1 of 8 commits succeeded" in table[5][2]
    assert "2 s" in out  # the shortened call timeout is stated
    assert "All 5 invariants held" in out
    assert "VIOLATION" not in out
    # --data keeps the store and the supplier's log for inspection.
    assert (tmp_path / demo.DB_NAME).exists()
    assert (tmp_path / demo.SUPPLIER_LOG_NAME).exists()


def test_a_rerun_on_the_same_data_dir_starts_fresh(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "SCENARIOS", (demo.replayed_step, demo.stale_decision))
    assert demo.main(["--data", str(tmp_path)]) == 0
    assert demo.main(["--data", str(tmp_path)]) == 0  # old cases and old supplier notes are gone
    out = capsys.readouterr().out
    assert out.count("All 2 invariants held") == 2


def test_the_counts_are_measured_so_a_broken_guard_fails_the_demo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def unguarded_run(self: Any, inv: Any, decision: Any) -> EffectResult:
        # No guard around the call: every run calls the supplier (same key), as an unguarded workflow would on
        # replay, then commits the status conditionally on the decided-on version.
        pinned = self.guard.pin(decision)
        key = effect_key(inv.case_id, demo.ACTION, pinned.version)
        result = self.request_credit_note(key, self.credit_note(inv).args())
        committed = self.guard.commit(pinned, demo.DECIDED) is not None
        return EffectResult(key, result, replayed=False, commit="committed" if committed else "stale", case=None)

    monkeypatch.setattr(demo, "SCENARIOS", (demo.replayed_step,))
    monkeypatch.setattr(demo._Demo, "run", unguarded_run)
    code = demo.main(["--data", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert rows(out)[1][0] == 2  # the table shows the second request the supplier really received
    assert "VIOLATION in scenario 1" in out
    assert "supplier received 2 POSTs, expected 1" in out
    assert "[VIOLATED]" in out
    assert "invariants VIOLATED" in out


def test_the_demo_asks_for_what_the_domains_money_rule_asks_for(tmp_path: Path) -> None:
    """Not invoice minus PO (the demo's own copy of the rule, before): a credit note already received, and
    the tolerance, count as they do in the app."""
    from dataclasses import replace
    from decimal import Decimal

    from shared.domain.invoice import Credit, InvoiceFacts

    wiring = demo._Demo(tmp_path)
    try:
        credited = InvoiceFacts("INV-1", "S-1", "PO-1", Decimal("1250.00"), Decimal("1000.00"), "EUR")
        credited = replace(credited, credits=(Credit("CN-1", Decimal("100.00")),))
        assert wiring.credit_note(demo._Invoice("demo-x", credited)).amount == Decimal("150.00")
        within_tolerance = InvoiceFacts("INV-2", "S-1", "PO-2", Decimal("1003.00"), Decimal("1000.00"), "EUR")
        with pytest.raises(RuntimeError, match="should ask for a credit note"):
            wiring.credit_note(demo._Invoice("demo-y", within_tolerance))
    finally:
        wiring.close()


def test_the_readmes_demo_table_is_what_the_demo_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README shows the demo's table in short: the same scenarios, in order, with what the supplier received."""
    assert demo.main(["--data", str(tmp_path)]) == 0
    printed = [
        (int(m[1]), m[2].strip(), f"{m[3]} POST" + (f" + {m[4]} lookup" if m[4] else ""))
        for m in map(ROW.match, capsys.readouterr().out.splitlines())
        if m
    ]
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### `make demo`", 1)[1].split("\n## ", 1)[0]
    shown = [
        (int(cells[0]), cells[1], cells[2])
        for cells in (
            [c.strip() for c in line.strip("|").split("|")]
            for line in section.splitlines()
            if re.match(r"^\| \d+ \|", line)
        )
    ]
    assert shown == printed


def test_the_demo_uses_the_guard_through_its_public_api_only() -> None:
    """What a stranger to the code can write: names from ``casekeeper`` itself, never its policy
    (``casekeeper.core``), its record types' module or a private module."""
    tree = ast.parse(Path(demo.__file__).read_text())
    guard_imports = sorted(
        {
            node.module if isinstance(node, ast.ImportFrom) and node.module else alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
            if ((node.module or "") if isinstance(node, ast.ImportFrom) else alias.name).startswith("casekeeper")
        }
    )
    assert guard_imports == ["casekeeper"]
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert {"Guard", "open_sqlite"} <= names
