"""A small seeded chaos run, end to end: real hosts, real kills, the invariants checked from outside.

About a minute on two cores. It fails with the run's table when an invariant does not hold; the JSON
report (kept in the test's tmp folder) has the evidence: each violating case's events, supplier
requests and history.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEED = 20251202

# serial: the run loads both cores itself and its hosts work against the clock; make test runs it alone.
pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.serial]


def test_a_small_seeded_run_keeps_every_invariant(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    argv = ["--cases", "24", "--seconds", "35", "--kills", "3", "--seed", str(SEED), "--settle", "90"]
    argv += ["--data", str(tmp_path / "run"), "--report", str(report), "--quiet"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "shared.cli", "chaos", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.terminate()  # SIGTERM: the run stops its hosts (a SIGKILL would orphan their process groups)
        stdout, stderr = proc.communicate(timeout=60)
    assert report.exists(), f"no report; exit {proc.returncode}\n{stdout}\n{stderr[-3000:]}"
    data = json.loads(report.read_text())
    counts = data["counts"]
    # The run did what it claims: events accepted, hosts killed and back, faults applied, quiet at the end.
    assert data["seed"] == SEED
    assert counts["workload"]["events accepted (distinct deliveries)"] >= 60
    assert counts["kills"]["done"] == 3
    assert counts["reconciler (seen from outside)"]["credit-note requests"] > 0
    assert counts["quiescence"]["reached"], counts["quiescence"]
    assert proc.returncode == 0, f"invariants broken (seed {SEED}); report {report}\n{stdout}"
