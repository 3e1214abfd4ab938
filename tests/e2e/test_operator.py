"""The operator commands against a running local host's data, as an operator would use them."""

from __future__ import annotations

import getpass
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devhost.supplier_stub import Faults, SupplierStub
from shared.operator import drain
from tests.support.changed_build import build_v2
from tests.support.dev_host import DevHost
from tests.support.invoices import invoice

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def recorded(name: str) -> str:
    """How an operator command records a person: the typed name and the account that ran the command."""
    return f"{name} <cli:{getpass.getuser()}@{socket.gethostname()}>"


def casekeeper(*args: str) -> tuple[int, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "shared.cli", *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else None


def test_drain_check_fails_for_a_paused_run_under_a_changed_graph_and_passes_once_it_finishes(
    host: DevHost, supplier: SupplierStub, capsys: pytest.CaptureFixture[str]
) -> None:
    host.post_event("invoice.received", "INV-D1", invoice("2500.00"))
    view = host.wait_for("INV-D1", lambda v: v["pendingApproval"] is not None)
    assert drain.main(["check", "--data", str(host.data)]) == 0  # this build resumes it
    assert drain.main(["check", "--data", str(host.data)], build=build_v2) == 1  # the next build would not
    assert "INV-D1" in capsys.readouterr().out
    pending = view["pendingApproval"]
    host.approve("INV-D1", pending["requestId"], "approve", pending["caseVersion"])
    host.wait_for("INV-D1", lambda v: v["case"]["status"] == "credit_requested")
    assert drain.main(["check", "--data", str(host.data)], build=build_v2) == 0


def test_an_escalated_effect_shows_in_effects_pending_case_show_and_alerts(
    host: DevHost, supplier: SupplierStub
) -> None:
    supplier.set_faults(Faults(fail_before_create=1, lookup_down=True))
    host.post_event("invoice.received", "INV-D2", invoice("1200.00"))
    host.wait_for("INV-D2", lambda v: v["case"]["status"] == "needs_review", timeout=60)

    code, pending = casekeeper("effects", "pending", "--data", str(host.data))
    assert code == 0
    [effect] = [e for e in pending["effects"] if e["caseId"] == "INV-D2"]
    assert effect["status"] == "needs_reconciliation"

    code, alerts = casekeeper("alerts", "--data", str(host.data))
    assert code == 0
    kinds = [a["kind"] for a in alerts["alerts"] if a["fields"].get("caseId") == "INV-D2"]
    assert kinds == ["effect_escalated"], alerts

    # A person asked the supplier: it has no such request. They record that, and the case stays in review.
    supplier.set_faults(Faults())
    code, resolved = casekeeper(
        "effects",
        "resolve",
        effect["key"],
        "--failed",
        "supplier has no such request",
        "--by",
        "ana",
        "--why",
        "phoned the supplier",
        "--data",
        str(host.data),
    )
    assert code == 0, resolved
    code, shown = casekeeper("case", "show", "INV-D2", "--data", str(host.data))
    assert code == 0
    assert shown["case"]["status"] == "needs_review"
    [settled] = shown["effects"]
    assert settled["status"] == "failed" and settled["resolution"]["by"] == recorded("ana")
