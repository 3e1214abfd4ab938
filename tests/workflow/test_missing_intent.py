"""A done effect whose ledger row names no commit intent is an error, never a silent no-op (issue 24).

Before, the core's commit finisher answered ``no_intent`` and wrote nothing: the case kept its gate open on
the effect for ever, nothing committed, and every sweep reported it again. Now the invoice app's paths (the
change feed's commit, the worker's settling before a decision) go through the guard: the change feed hands
the case to a person with one alert, and the worker refuses to decide on top of it.
"""

from __future__ import annotations

from typing import Any

import pytest

from casekeeper import Effect, EffectStatus, Guard, MissingCommitIntent
from shared.app.telemetry import Telemetry
from shared.handlers.effect_changes import EffectChangeDeps, handle_effect_changes
from shared.workflow.actions import declare_credit_note
from tests.support.app import Harness
from tests.support.invoices import invoice


class Sent:
    """A sender that keeps what it was given (no re-check is scheduled for a done effect)."""

    def __init__(self) -> None:
        self.messages: list[Any] = []

    def send(self, *args: Any, **kwargs: Any) -> None:
        self.messages.append((args, kwargs))


def _done_without_intent(app: Harness) -> Effect:
    app.cases.create("C-1", invoice("1100.00"), status="open")
    request = {"amount": "100.00", "currency": "EUR", "invoiceId": "INV-1", "supplierId": "SUP-1"}  # no "commit"
    outcome = app.ledger.run(
        case_id="C-1",
        action="request_credit_note",
        decided_on_version=1,
        call=lambda key: {"creditNoteId": "CN-1"},
        request=request,
    )
    case = app.cases.require("C-1")
    assert outcome.effect.status is EffectStatus.DONE and case.gate is not None  # the gate stays open on it
    return outcome.effect


def test_the_change_feed_hands_the_case_to_a_person_instead_of_leaving_its_gate_open(app: Harness) -> None:
    effect = _done_without_intent(app)
    alerts: list[tuple[str, dict[str, Any]]] = []
    # The guard as the composition root assembles it, its escalation hook heard here.
    guard = Guard.from_parts(
        app.store, app.cases, app.ledger, on_escalate=lambda message, fields: alerts.append((message, fields))
    )
    declare_credit_note(guard, app.deps.supplier)
    deps = EffectChangeDeps(guard=guard, sender=Sent(), telemetry=Telemetry())  # type: ignore[arg-type]

    summary = handle_effect_changes(deps, [{**effect.to_body(), "_etag": effect.etag, "_ts": effect.ts}])

    case = app.cases.require("C-1")
    assert case.status == "needs_review" and case.gate is None
    assert [t.effect_key for t in case.transitions_of(effect.key)] == [effect.key]
    assert [fields["effectKey"] for _, fields in alerts] == [effect.key]
    assert "names no commit intent" in alerts[0][1]["reason"]
    assert summary.commits_finished == []


def test_the_worker_refuses_to_decide_on_top_of_it(app: Harness) -> None:
    _done_without_intent(app)
    guard, _ = app.deps.guarded
    with pytest.raises(MissingCommitIntent):
        guard.settle("C-1")
    assert app.cases.require("C-1").status == "open"  # nothing decided on top of it
