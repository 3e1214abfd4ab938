"""What reaches Application Insights from the logs (issue: only the ``casekeeper`` logger was exported, so
Agent Framework's "Failed to create checkpoint" warning and the Azure SDKs' warnings reached nobody)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_library_warnings_are_exported_at_the_levels_set_in_code(tmp_path: Path) -> None:
    records = [
        "casekeeper.handlers.case_events:WARNING:own warning",
        "agent_framework._workflows._runner:WARNING:Failed to create checkpoint at iteration 3",
        "agent_framework._workflows._runner:INFO:superstep 3 finished",
        "azure.cosmos._retry_utility:WARNING:throttled, retries given up",
        "azure.monitor.opentelemetry.exporter.export._base:WARNING:transmission failed",
        "some.other.library:WARNING:not ours to export",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.appinsights_probe", str(tmp_path / "certs"), *records],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["exporter"] == "azure_monitor"
    assert sorted(result["messages"]) == sorted(
        [
            "own warning",
            "Failed to create checkpoint at iteration 3",  # R7's signal, exported beside the durable record
            "throttled, retries given up",
        ]
    ), "INFO from a library held at WARNING, the exporter's own records and other libraries stay out"
