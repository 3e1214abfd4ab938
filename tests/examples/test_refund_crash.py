"""The refund example's worker killed (``os._exit``, no cleanup) at each failure point F2-F6
(docs/design.md#failure-points), then the event redelivered to a new process and reconciliation run.

Every row: the payments service pays once, the case is committed ``refunded`` once, and an unknown
outcome is never retried blindly (F2-F4 wait for reconciliation, which settles them by key).
Real processes; both backends.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from casekeeper import Guard
from examples.refund.app import RefundApp
from examples.refund.payments import Payments
from tests.conftest import StoreSpec
from tests.support.crash import DIED, ROOT, run_crash_worker

# Long enough for a new Python process to start and read the claim inside it on a loaded machine; Cosmos
# DB's clock counts whole seconds.
CALL_TIMEOUT = 4.0
CASE = "refund-crash"


def run_worker(spec: StoreSpec, payments: Path, die_at: str | None = None) -> tuple[int, dict[str, Any]]:
    payload = {
        "store": dataclasses.asdict(spec),
        "payments": str(payments),
        "callTimeout": CALL_TIMEOUT,
        "event": {"caseId": CASE},
        "dieAt": die_at,
    }
    return run_crash_worker("tests.examples.refund_worker", payload)


def refunded_commits(spec: StoreSpec) -> int:
    store = spec.open()
    try:
        case = Guard(store).get(CASE)
        assert case is not None
        return sum(1 for t in case.history if t.status == "refunded" and t.effect_key)
    finally:
        store.close()


def reconcile(spec: StoreSpec, payments: Payments) -> list[str]:
    """What the user's own timer does: one call."""
    store = spec.open()
    try:
        app = RefundApp(store, payments, call_timeout=CALL_TIMEOUT)
        return [r.outcome for r in app.guard.reconcile()]
    finally:
        store.close()


@pytest.fixture
def payments(tmp_path: Path) -> Payments:
    return Payments(tmp_path / "payments.sqlite")


@pytest.fixture
def seeded(store_spec: StoreSpec) -> StoreSpec:
    store = store_spec.open()
    try:
        Guard(store).create(CASE, {"paid": "80.00", "requested": "60.00"}, status="requested")
    finally:
        store.close()
    return store_spec


@pytest.mark.slow
@pytest.mark.parametrize("point", ["F5", "F6"])
def test_a_crash_after_the_payment_is_recorded_commits_once_without_a_second_payment(
    seeded: StoreSpec, payments: Payments, point: str
) -> None:
    code, _ = run_worker(seeded, Path(payments.path), die_at=point)
    assert code == DIED
    assert len(payments.payments()) == 1

    code, result = run_worker(seeded, Path(payments.path))
    assert code == 0
    # F5: deciding again first finishes the commit the crash left (the case is then refunded).
    assert result["outcome"] == "nothing_to_do"
    assert payments.requests() == 1
    assert refunded_commits(seeded) == 1


@pytest.mark.slow
@pytest.mark.parametrize("point", ["F2", "F3", "F4"])
def test_a_crash_around_the_call_waits_then_is_reconciled_by_key(
    seeded: StoreSpec, payments: Payments, point: str
) -> None:
    if point == "F3":
        payments.set("die_after_paying")
    code, _ = run_worker(seeded, Path(payments.path), die_at=None if point == "F3" else point)
    assert code == DIED
    payments.set("die_after_paying", on=False)
    paid_before = 0 if point == "F2" else 1
    assert len(payments.payments()) == paid_before

    # Redelivered at once: the outcome is unknown, so nothing is called (in flight, or waiting for a lookup).
    code, result = run_worker(seeded, Path(payments.path))
    assert code == 0 and result["outcome"] == "waiting", result
    assert payments.requests() == paid_before

    time.sleep(CALL_TIMEOUT + 1.5)
    outcomes = reconcile(seeded, payments)
    # F2: the lookup found nothing, the call is retried with the same key; F3/F4: found, recorded.
    assert outcomes == ["retried" if point == "F2" else "recorded"]
    assert len(payments.payments()) == 1
    assert payments.requests() == 1
    assert refunded_commits(seeded) == 1

    code, result = run_worker(seeded, Path(payments.path))
    assert result["outcome"] == "nothing_to_do"
    assert reconcile(seeded, payments) == []
    assert len(payments.payments()) == 1


@pytest.mark.slow
def test_sigkill_while_the_payment_is_held_is_reconciled_by_key(seeded: StoreSpec, payments: Payments) -> None:
    """kill -9 itself: the process is killed by SIGKILL while the payments service holds its reply."""
    payments.set("hold_after_paying")
    payload = {
        "store": dataclasses.asdict(seeded),
        "payments": payments.path,
        "callTimeout": CALL_TIMEOUT,
        "event": {"caseId": CASE},
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.examples.refund_worker", json.dumps(payload)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 90
        while not payments.payments() and time.monotonic() < deadline:
            assert proc.poll() is None, "the worker ended before paying"
            time.sleep(0.1)
        assert payments.payments(), "the worker never paid"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    payments.set("hold_after_paying", on=False)

    code, result = run_worker(seeded, Path(payments.path))
    assert code == 0 and result["outcome"] == "waiting", result
    time.sleep(CALL_TIMEOUT + 1.5)
    assert reconcile(seeded, payments) == ["recorded"]
    assert payments.requests() == 1 and len(payments.payments()) == 1
    assert refunded_commits(seeded) == 1
