"""``casekeeper effects pending`` and ``resolve``: effects whose outcome is unknown, settled by a person."""

from __future__ import annotations

import getpass
import socket
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from casekeeper.core.cases import CASES
from casekeeper.core.keys import effect_key
from casekeeper.core.ledger import EFFECTS
from casekeeper.core.reconcile import RECONCILED_SUFFIX
from casekeeper.errors import OutcomeUnknown
from casekeeper.stores.sqlite import SqliteDocumentStore
from shared.app import bootstrap
from shared.domain import events as ev
from shared.localhost.supplier_stub import Faults, SupplierStub
from shared.operator.effects import main
from tests.operator.conftest import Ran
from tests.support.app import Harness
from tests.support.counting import Counting
from tests.support.invoices import invoice
from tests.support.reconciling import credit_note_reconciler
from tests.support.supplier import posts

Run = Callable[..., Ran]
ACTION = "request_credit_note"
CN = '{"creditNoteId": "CN-123"}'


def recorded(name: str) -> str:
    """How an operator command records a person: the typed name and the account that ran the command."""
    return f"{name} <cli:{getpass.getuser()}@{socket.gethostname()}>"


def started(app: Harness, supplier: SupplierStub, case_id: str) -> str:
    """A real run whose supplier call ends with an unknown outcome (a 503): the effect stays started."""
    supplier.set_faults(Faults(fail_before_create=1))
    with pytest.raises(OutcomeUnknown):
        app.handle(ev.INVOICE_RECEIVED, case_id, **invoice("1100.00"))
    key = effect_key(case_id, ACTION, 1)
    effect = app.ledger.get(case_id, key)
    assert effect is not None and effect.status.value == "started"
    return key


def escalated(app: Harness, store: SqliteDocumentStore, supplier: SupplierStub, case_id: str) -> str:
    """A started effect that reconciliation could not settle (lookups down): ``needs_reconciliation``."""
    key = started(app, supplier, case_id)
    supplier.set_faults(Faults(lookup_down=True))
    time.sleep(0.1)
    reconciler = credit_note_reconciler(store, supplier.url, call_timeout=0.05, max_lookup_failures=1)
    result = reconciler.recheck(case_id, key)
    assert result.outcome == "escalated"
    supplier.set_faults(Faults())
    return key


@pytest.fixture
def short_timeout(monkeypatch: pytest.MonkeyPatch) -> float:
    """The app's call timeout, as the local host reads it from the environment: 1 s, so effects age past it."""
    monkeypatch.setenv("CALL_TIMEOUT_SECONDS", "1")
    monkeypatch.setenv("SUPPLIER_TIMEOUT_SECONDS", "0.2")
    return 1.0


def test_pending_lists_started_and_escalated_effects_oldest_first(
    app: Harness, store: SqliteDocumentStore, supplier: SupplierStub, run: Run, short_timeout: float
) -> None:
    old = started(app, supplier, "C-old")
    time.sleep(short_timeout + 0.2)
    stuck = escalated(app, store, supplier, "C-stuck")
    fresh = started(app, supplier, "C-fresh")

    listed = run(main, "pending", "--json")
    assert listed.code == 0
    view = listed.json()
    rows = {r["caseId"]: r for r in view["effects"]}
    assert [r["key"] for r in view["effects"]] == [old, stuck, fresh]
    assert rows["C-old"]["status"] == "started" and rows["C-old"]["ageSeconds"] >= short_timeout
    assert rows["C-old"]["next"] == "outcome unknown: reconciliation looks it up by key"
    assert rows["C-fresh"]["ageSeconds"] < short_timeout and rows["C-fresh"]["next"].startswith("in flight")
    assert rows["C-old"]["inFlightForSeconds"] is None
    assert 0 < rows["C-fresh"]["inFlightForSeconds"] <= short_timeout
    assert rows["C-stuck"]["status"] == "needs_reconciliation"
    assert "lookup by key failed 1 times" in rows["C-stuck"]["reason"]
    assert all(r["attempts"] == 1 and r["action"] == ACTION for r in rows.values())

    text = run(main, "pending").out
    lines = text.splitlines()
    assert lines[0].split() == ["age", "case", "action", "status", "attempts", "key"]
    assert lines[1].split()[1:] == ["C-old", ACTION, "started", "1", old]
    assert lines[1].split()[0] in ("1s", "2s")
    assert "started: 2 (1 past their call timeout)" in text
    assert "looked up by key by reconciliation" in text
    assert "needs_reconciliation: 1. A person establishes the outcome" in text
    assert "casekeeper effects resolve KEY --done RESULT | --failed REASON --by WHO --why WHY" in text


def test_pending_with_nothing_pending(app: Harness, run: Run) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    listed = run(main, "pending")
    assert (listed.code, listed.out) == (0, "no pending effects: every effect has an outcome\n")


def test_resolve_done_records_the_outcome_and_finishes_the_commit(
    app: Harness, supplier: SupplierStub, run: Run, short_timeout: float
) -> None:
    key = started(app, supplier, "C-1")
    time.sleep(short_timeout + 0.2)

    resolved = run(main, "resolve", key, "--done", CN, "--by", "ana", "--why", "the portal lists CN-123")
    assert resolved.code == 0, resolved.err
    assert f"recorded done for effect {key[:12]} (request_credit_note, case C-1) by {recorded('ana')}" in resolved.out
    assert "case C-1: the commit the effect names is made; now credit_requested at v2" in resolved.out

    effect = app.ledger.get("C-1", key)
    assert effect is not None and effect.status.value == "done" and effect.result == {"creditNoteId": "CN-123"}
    assert effect.resolution is not None
    assert (effect.resolution["by"], effect.resolution["why"]) == (recorded("ana"), "the portal lists CN-123")
    assert effect.history[-1]["source"] == "operator"
    case = app.cases.require("C-1")
    assert (case.status, case.version) == ("credit_requested", 2)
    assert case.data["creditRequest"] == {
        "effectKey": key,
        "creditNoteId": "CN-123",
        "amount": "100.00",
        "currency": "EUR",
    }
    assert case.history[-1].effect_key == key and case.history[-1].reason.endswith(RECONCILED_SUFFIX)  # type: ignore[union-attr]
    assert len(posts(supplier)) == 1  # the one that failed with 503; nothing was called again

    again = run(main, "resolve", key, "--done", '{"creditNoteId": "CN-999"}', "--by", "bo", "--why", "typo")
    assert again.code == 1
    assert "refused: effect" in again.err and "already has outcome done" in again.err
    unchanged = app.ledger.get("C-1", key)
    assert unchanged is not None and unchanged.etag == effect.etag and unchanged.result == {"creditNoteId": "CN-123"}
    assert app.cases.require("C-1").etag == case.etag


def test_resolve_failed_sends_the_case_to_review(
    app: Harness, supplier: SupplierStub, run: Run, short_timeout: float
) -> None:
    key = started(app, supplier, "C-1")
    time.sleep(short_timeout + 0.2)
    resolved = run(
        main, "resolve", key, "--failed", "the portal has no such request", "--by", "ana", "--why", "called them"
    )
    assert resolved.code == 0, resolved.err
    assert "now needs_review at v2" in resolved.out
    effect = app.ledger.get("C-1", key)
    assert effect is not None and effect.status.value == "failed"
    assert effect.reason == "the portal has no such request" and effect.resolution["by"] == recorded("ana")  # type: ignore[index]
    case = app.cases.require("C-1")
    assert (case.status, case.version) == ("needs_review", 2)
    assert case.history[-1].reason == (
        f"effect request_credit_note ({key[:12]}) resolved as failed by {recorded('ana')}: "
        "the portal has no such request"
    )


def test_resolve_an_escalated_effect_of_a_case_already_in_review_adds_a_note(
    app: Harness, store: SqliteDocumentStore, supplier: SupplierStub, run: Run
) -> None:
    key = escalated(app, store, supplier, "C-1")
    before = app.cases.require("C-1")
    assert before.status == "needs_review"
    resolved = run(main, "resolve", key, "--failed", "never arrived", "--by", "ana", "--why", "portal", "--json")
    assert resolved.code == 0
    assert resolved.json()["settled"] == "noted"
    after = app.cases.require("C-1")
    assert after.version == before.version and after.notes[-1]["effectKey"] == key


def test_resolve_refuses_a_started_effect_within_its_call_timeout(
    app: Harness, supplier: SupplierStub, run: Run
) -> None:
    key = started(app, supplier, "C-1")  # the default call timeout, 120 s: an attempt may be mid-call
    refused = run(main, "resolve", key, "--done", CN, "--by", "ana", "--why", "x")
    assert refused.code == 1
    assert "within the call timeout" in refused.err
    effect = app.ledger.get("C-1", key)
    assert effect is not None and effect.status.value == "started"


def test_resolve_refuses_bad_input_and_unknown_keys(app: Harness, supplier: SupplierStub, run: Run) -> None:
    key = started(app, supplier, "C-1")
    bare = run(main, "resolve", key, "--done", "CN-123", "--by", "ana", "--why", "x")
    assert bare.code == 2
    assert "--done takes the downstream's record as a JSON object, not 'CN-123'" in bare.err
    assert '{"creditNoteId": "CN-123"}' in bare.err
    blank = run(main, "resolve", key, "--done", CN, "--by", " ", "--why", "x")
    assert blank.code == 2 and "--by and --why" in blank.err
    unknown = run(main, "resolve", "0" * 64, "--failed", "no", "--by", "ana", "--why", "x")
    assert unknown.code == 1 and "no effect with key" in unknown.err
    with pytest.raises(SystemExit) as exited:
        main(["resolve", key, "--done", CN, "--by", "ana"])  # --why is required
    assert exited.value.code == 2
    effect = app.ledger.get("C-1", key)
    assert effect is not None and effect.status.value == "started"


def test_resolving_an_escalated_effect_done_leaves_the_case_with_its_person_and_says_what_next(
    app: Harness, store: SqliteDocumentStore, supplier: SupplierStub, run: Run
) -> None:
    """The escalation moved the case past the effect's version, so the effect's own commit cannot land;
    the command says so and names the next step instead of printing the finisher's raw outcome."""
    key = escalated(app, store, supplier, "C-1")
    before = app.cases.require("C-1")
    resolved = run(main, "resolve", key, "--done", CN, "--by", "ana", "--why", "the portal lists CN-123")
    assert resolved.code == 0, resolved.err
    assert "case C-1: it was handed to a person for this effect and stays so" in resolved.out
    assert "casekeeper send case.investigate ID" in resolved.out
    after = app.cases.require("C-1")
    assert (after.status, after.version) == ("needs_review", before.version)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[Counting]:
    """Every store the commands open from here on, counted (one per command run)."""
    opened: list[Counting] = []
    real = bootstrap.open_store

    def open_counted(settings: Any) -> Any:
        opened.append(Counting(real(settings)))
        return opened[-1]

    monkeypatch.setattr(bootstrap, "open_store", open_counted)
    return opened


def test_resolve_with_case_looks_for_the_key_on_that_case_alone(
    app: Harness, store: SqliteDocumentStore, supplier: SupplierStub, run: Run, counted: list[Counting]
) -> None:
    """``--case``: the effect is found with one read of its case, never by walking every case, which is what a
    closed or mistyped key costs without it (and the command then says so)."""
    stuck = escalated(app, store, supplier, "C-1")
    for case_id in ("C-2", "C-3", "C-4"):
        app.handle(ev.INVOICE_RECEIVED, case_id, **invoice("1100.00"))
    closed = effect_key("C-3", ACTION, 1)
    done = app.ledger.get("C-3", closed)
    assert done is not None and done.status.value == "done"
    mistyped = "0" * 64

    def resolve(key: str, *case: str) -> tuple[Ran, Counter[tuple[str, str]]]:
        ran = run(main, "resolve", key, *case, "--failed", "never arrived", "--by", "ana", "--why", "portal")
        return ran, counted[-1].ops

    ran, ops = resolve(closed, "--case", "C-3")
    assert ran.code == 1 and "already has outcome done" in ran.err
    assert ops == Counter({("read", CASES): 1})
    ran, ops = resolve(mistyped, "--case", "C-3")
    assert ran.code == 1 and "case C-3 has no effect with it" in ran.err and "every case" not in ran.err
    assert ops == Counter({("read", CASES): 1})  # nothing of C-3 was archived: its entries are all there is
    ran, _ = resolve(closed, "--case", "C/3")
    assert ran.code == 1 and "'C/3' is not a case id" in ran.err

    # Without --case: the same answers, by walking the cases; for a key nobody has, the command says so.
    ran, ops = resolve(closed)
    assert ran.code == 1 and "already has outcome done" in ran.err
    assert ops[("query", CASES)] >= 2  # the open entries, then the walk
    ran, ops = resolve(mistyped)
    assert ran.code == 1 and "no effect with key" in ran.err and ops[("query", CASES)] >= 2
    assert "with --case CASE_ID" in ran.err and "on that case alone, with one read" in ran.err

    # The escalated effect is settled as without --case, having read its case and nothing else to find it.
    ran, ops = resolve(stuck, "--case", "C-1")
    assert ran.code == 0, ran.err
    assert f"recorded failed for effect {stuck[:12]} (request_credit_note, case C-1)" in ran.out
    assert ops[("query", CASES)] == 0 and ops[("query", EFFECTS)] == 0
    effect = app.ledger.get("C-1", stuck)
    assert effect is not None and effect.status.value == "failed" and effect.reason == "never arrived"


def test_resolve_help_says_what_case_saves(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["resolve", "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--case CASE_ID" in text and "one read" in text and "on every case" in text
