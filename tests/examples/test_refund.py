"""The refund example, in one process: run twice, a changed case before the call, approvals (one answer
per request, a stale answer), a definite refusal, an unknown outcome reconciled by key, and the count of
the example's guard lines. (Kill -9 at F2-F6 is ``test_refund_crash.py``.)"""

from __future__ import annotations

import ast
import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from casekeeper import AlreadyExists, ApprovalPending, ArgumentsMismatch, capture, open_sqlite
from casekeeper.agent import CaseCheckpointStorage, capture_failures, failures_since
from examples.refund.app import WORKFLOW_NAME, ApprovalAnswered, Outcome, RefundApp, RefundRequested
from examples.refund.payments import Payments

APP = Path(__file__).resolve().parents[2] / "examples" / "refund" / "app.py"
GUARD_LINES_AT_MOST = 15


@pytest.fixture
def app(tmp_path: Path) -> Iterator[RefundApp]:
    store = open_sqlite(tmp_path / "store.sqlite")
    capture_failures(store)  # what the example's host does once per process (rule R7)
    try:
        yield RefundApp(store, Payments(tmp_path / "payments.sqlite"), call_timeout=1.0)
    finally:
        capture.uninstall()
        store.close()


def handle(app: RefundApp, message: RefundRequested | ApprovalAnswered) -> Outcome:
    return asyncio.run(app.handle(message))


def requested(app: RefundApp, case_id: str, paid: str, amount: str) -> None:
    app.guard.create(case_id, {"paid": paid, "requested": amount}, status="requested")


def test_run_twice_pays_once_and_commits_once(app: RefundApp) -> None:
    requested(app, "r1", "80.00", "50.00")
    first = handle(app, RefundRequested("r1"))
    second = handle(app, RefundRequested("r1"))
    assert (first.outcome, first.detail) == ("refunded", "committed")
    assert second.outcome == "nothing_to_do"
    assert [p["amount"] for p in app.payments.payments("r1")] == ["50.00"]
    assert app.payments.requests() == 1
    case = app.guard.get("r1")
    assert case is not None and case.status == "refunded" and case.version == 2
    # Nobody resumes a finished run and the case held no older checkpoint to supersede: none was written,
    # and nothing failed to save.
    assert CaseCheckpointStorage(app.guard.store, "r1").latest_record(WORKFLOW_NAME) is None
    assert failures_since(app.guard.store, None) == []


def test_a_case_changed_before_the_call_is_refused_then_decided_again_on_the_new_facts(tmp_path: Path) -> None:
    store = open_sqlite(tmp_path / "store.sqlite")
    changed: list[int] = []

    def probe(point: str) -> None:
        # F1: decided, not yet claimed. The customer lowers the request meanwhile (another writer).
        if point == "F1" and not changed:
            case = app.guard.get("r1")
            assert case is not None
            app.guard.update("r1", case.version, {"requested": "20.00"}, reason="customer changed the request")
            changed.append(case.version)

    app = RefundApp(store, Payments(tmp_path / "payments.sqlite"), call_timeout=1.0, probe=probe)
    requested(app, "r1", "80.00", "50.00")
    stale = handle(app, RefundRequested("r1"))
    assert stale.outcome == "stale"
    assert app.payments.requests() == 0  # the version gate refused before any call
    again = handle(app, RefundRequested("r1"))
    assert again.outcome == "refunded"
    assert [p["amount"] for p in app.payments.payments()] == ["20.00"]
    store.close()


def test_above_the_threshold_a_person_approves_once_and_a_second_answer_changes_nothing(app: RefundApp) -> None:
    requested(app, "r2", "300.00", "250.00")
    asked = handle(app, RefundRequested("r2"))
    assert asked.outcome == "awaiting_approval"
    assert app.payments.requests() == 0
    case = app.guard.get("r2")
    assert case is not None and case.status == "awaiting_approval"
    # Asking again (the event redelivered) asks the same request: still one pending.
    assert handle(app, RefundRequested("r2")).outcome == "nothing_to_do"

    approve = ApprovalAnswered("r2", asked.detail, True, "ann", case.version)
    assert handle(app, approve).outcome == "refunded"
    reject = ApprovalAnswered("r2", asked.detail, False, "bob", case.version)
    late = handle(app, reject)
    assert late.outcome == "ignored" and "answered already" in late.detail
    assert handle(app, approve).outcome == "ignored"  # redelivered after it was paid: not paid again
    assert [p["amount"] for p in app.payments.payments()] == ["250.00"]


def test_an_answer_on_a_version_the_case_left_is_stale_and_pays_nothing(app: RefundApp) -> None:
    requested(app, "r3", "300.00", "250.00")
    asked = handle(app, RefundRequested("r3"))
    case = app.guard.get("r3")
    assert case is not None
    # The facts change while the request waits: the approver saw the old ones (rule R6).
    app.guard.update("r3", case.version, {"requested": "260.00"}, reason="customer asked for more")
    stale = handle(app, ApprovalAnswered("r3", asked.detail, True, "ann", case.version))
    assert stale.outcome == "ignored" and "answered on v2, case is at v3" in stale.detail
    assert app.payments.requests() == 0


def test_the_traps_a_stranger_steps_on_are_refused_out_loud(app: RefundApp) -> None:
    requested(app, "r7", "300.00", "250.00")
    with pytest.raises(AlreadyExists):
        requested(app, "r7", "300.00", "10.00")  # another request under an id in use
    asked = handle(app, RefundRequested("r7"))
    assert asked.outcome == "awaiting_approval"
    # A refund that skips the gate (a fresh decision, no answer) is held by the pending request.
    with pytest.raises(ApprovalPending):
        app.pay_once.run(app.guard.decide("r7"), {"caseId": "r7", "amount": "250.00"})
    case = app.guard.get("r7")
    assert case is not None
    # The facts change while the request waits: the request is closed and the case is not left stuck.
    app.guard.update("r7", case.version, {"requested": "200.00"}, reason="customer lowered the request")
    changed = app.guard.get("r7")
    assert changed is not None and changed.status == "requested"
    stale = handle(app, ApprovalAnswered("r7", asked.detail, True, "ann", case.version))
    assert stale.outcome == "ignored" and "customer lowered the request" in stale.detail
    again = handle(app, RefundRequested("r7"))  # decided again on the new facts: a new request
    assert again.outcome == "awaiting_approval" and again.detail != asked.detail
    waiting = app.guard.get("r7")
    assert waiting is not None
    approved = handle(app, ApprovalAnswered("r7", again.detail, True, "ann", waiting.version))
    assert approved.outcome == "refunded"
    # The approved decision run again with another amount is refused, not answered with the first payment.
    decision = app.guard.pinned("r7", waiting.version + 1)
    with pytest.raises(ArgumentsMismatch):
        app.pay_once.run(decision, {"caseId": "r7", "amount": "150.00"})
    assert [p["amount"] for p in app.payments.payments()] == ["200.00"]


def test_a_rejection_commits_rejected_and_pays_nothing(app: RefundApp) -> None:
    requested(app, "r4", "300.00", "250.00")
    asked = handle(app, RefundRequested("r4"))
    case = app.guard.get("r4")
    assert case is not None
    assert handle(app, ApprovalAnswered("r4", asked.detail, False, "bob", case.version)).outcome == "rejected"
    after = app.guard.get("r4")
    assert after is not None and after.status == "rejected" and not after.data.get("pendingApproval")
    assert app.payments.requests() == 0


def test_a_definite_refusal_is_recorded_and_the_case_goes_to_a_person(app: RefundApp) -> None:
    requested(app, "r5", "80.00", "50.00")
    app.payments.set("refuse")
    refused = handle(app, RefundRequested("r5"))
    assert refused.outcome == "refused"
    case = app.guard.get("r5")
    assert case is not None and case.status == "needs_review"
    assert handle(app, RefundRequested("r5")).outcome == "nothing_to_do"
    assert app.payments.requests() == 1


def test_an_unknown_outcome_waits_then_is_reconciled_by_key_without_a_second_payment(app: RefundApp) -> None:
    requested(app, "r6", "80.00", "50.00")
    app.payments.set("lose_reply")  # paid, but the reply is lost: the caller cannot tell
    assert handle(app, RefundRequested("r6")).outcome == "waiting"
    assert handle(app, RefundRequested("r6")).outcome == "waiting"  # never retried blindly
    assert app.guard.reconcile() == []  # still within the call timeout: nobody may touch it
    time.sleep(1.3)
    assert [r.outcome for r in app.guard.reconcile()] == ["recorded"]
    case = app.guard.get("r6")
    assert case is not None and case.status == "refunded"
    assert app.payments.requests() == 1 and len(app.payments.payments()) == 1
    assert app.guard.reconcile() == []


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["request", "request", "answer", "change", "reconcile"]), min_size=1, max_size=8))
def test_any_sequence_of_redeliveries_answers_and_changes_pays_each_decision_at_most_once(
    tmp_path_factory: pytest.TempPathFactory, steps: list[str]
) -> None:
    base = tmp_path_factory.mktemp("seq")
    store = open_sqlite(base / "store.sqlite")
    app = RefundApp(store, Payments(base / "payments.sqlite"), call_timeout=1.0)
    requested(app, "r", "500.00", "150.00")
    asked: dict[str, Any] = {}
    for step in steps:
        case = app.guard.get("r")
        assert case is not None
        if step == "request":
            out = handle(app, RefundRequested("r"))
            if out.outcome == "awaiting_approval":
                asked.update(request=out.detail, version=case.version + 1)
        elif step == "answer" and asked:
            handle(app, ApprovalAnswered("r", asked["request"], True, "ann", asked["version"]))
        elif step == "change":
            app.guard.update("r", case.version, {"requested": "120.00"}, reason="changed")
        else:
            app.guard.reconcile()
    payments = app.payments.payments()
    keys = [p["key"] for p in payments]
    assert len(keys) == len(set(keys)) == app.payments.requests()  # every request a new key: none repeated
    total = sum(float(p["amount"]) for p in payments)
    assert total <= 500.00  # never more than was paid
    case = app.guard.get("r")
    assert case is not None
    # Commits name their effect; a later change of facts also carries the status, without one.
    assert sum(1 for t in case.history if t.status == "refunded" and t.effect_key) == len(payments)
    store.close()


def guard_lines(path: Path) -> list[int]:
    """Lines of ``path`` that are guard code: statements naming anything imported from ``casekeeper``, the
    guard (``guard``) or the declared effect (``pay_once``), counted over their full extent, plus the headers
    of ``with`` blocks and ``except`` clauses that name them. Imports are not counted."""
    tree = ast.parse(path.read_text())
    names = {"guard"}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "casekeeper":
            names |= {alias.asname or alias.name for alias in node.names}

    def mentions(node: ast.AST) -> bool:
        return any(
            (isinstance(n, ast.Name) and n.id in names)
            or (isinstance(n, ast.Attribute) and n.attr in {"guard", "pay_once"})
            for n in ast.walk(node)
        )

    lines: set[int] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                continue
            if isinstance(child, ast.ExceptHandler) and child.type is not None and mentions(child.type):
                lines.update(range(child.lineno, (child.type.end_lineno or child.lineno) + 1))
            elif isinstance(child, ast.With | ast.AsyncWith):
                for item in child.items:
                    if mentions(item.context_expr):
                        lines.update(range(child.lineno, (item.context_expr.end_lineno or child.lineno) + 1))
            elif isinstance(child, ast.stmt) and not hasattr(child, "body") and mentions(child):
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
                continue
            visit(child)

    visit(tree)
    return sorted(lines)


def test_the_example_needs_at_most_fifteen_lines_of_guard_code() -> None:
    counted = guard_lines(APP)
    assert 0 < len(counted) <= GUARD_LINES_AT_MOST, counted
