"""Each invariant, fed evidence with and without a violation: a check that cannot fail is worthless."""

from __future__ import annotations

from chaos.checks import check_all
from chaos.evidence import Attempt, Evidence, KillWindow, StoreOutage
from chaos.violations import Violation
from tests.chaos.builders import Story, key


def violations(evidence: Evidence, invariant: int) -> list[Violation]:
    return [v for v in check_all(evidence) if v.invariant == invariant]


# --- 1: no request for a key whose note already existed -----------------------------------------


def test_a_second_request_for_an_existing_note_is_a_violation() -> None:
    story = Story()
    story.request("a", "300.00")
    story.post("a", "300.00", created=False, status=200)  # the stub answers with the same note
    [found] = violations(story.done(), 1)
    assert found.case_id == "C-1" and "requested again" in found.summary
    assert len(found.details["requests"]) == 2


def test_a_retry_after_a_lookup_said_not_found_is_allowed() -> None:
    story = Story()
    story.post("a", "300.00", created=False, status=503)  # 503 before the note was created
    story.lookup("a", 404)
    story.request("a", "300.00")
    assert violations(story.done(), 1) == []


def test_a_lookup_that_found_the_note_does_not_excuse_a_second_request() -> None:
    story = Story()
    story.request("a", "300.00")
    story.lookup("a", 200)
    story.post("a", "300.00", created=False, status=200)
    assert len(violations(story.done(), 1)) == 1


# --- 2: money ------------------------------------------------------------------------------------


def test_the_known_bug_300_then_po_down_then_400_more_is_caught() -> None:
    # invoice 1300 / PO 1000: 300 requested; PO to 900 -> needs_review; investigate -> 400 more.
    story = Story(invoice="1300.00", po="1000.00")
    story.request("a", "300.00")
    story.po_updated("900.00", "d-po", status_after="needs_review")
    story.request("b", "400.00")
    [found] = violations(story.done(), 2)
    assert "300.00" in found.summary and "400.00" in found.summary
    assert found.details["total"] == "700.00" and found.details["justified"] == "400.00"
    assert found.details["factsSource"] == "driver"


def test_the_known_bug_is_caught_from_the_history_changes_alone() -> None:
    story = Story(invoice="1300.00", po="1000.00")
    story.request("a", "300.00")
    story.po_updated("900.00", "d-po", status_after="needs_review", changes=True)
    story.request("b", "400.00")
    [found] = violations(story.done(), 2)
    assert found.details["factsSource"] == "changes"


def test_a_partly_received_note_then_a_request_for_the_rest_holds() -> None:
    story = Story(invoice="1300.00", po="1000.00")
    story.request("a", "300.00")
    story.credit("CN-1", "150.00", "d-credit", status_after="needs_review")
    story.request("b", "150.00")
    assert violations(story.done(), 2) == []


def test_an_external_credit_counts_against_what_may_be_requested() -> None:
    story = Story(invoice="1300.00", po="1000.00")
    story.request("a", "300.00")
    story.credit("EXT-1", "100.00", "d-ext", status_after="needs_review")
    story.request("b", "200.00")  # 300 outstanding + 100 received + 200 = 600 > 300
    [found] = violations(story.done(), 2)
    assert "external EXT-1 100.00" in found.summary


def test_a_request_within_the_variance_holds() -> None:
    story = Story(invoice="1300.00", po="1000.00")
    story.request("a", "300.00")
    assert violations(story.done(), 2) == []


def over_requested(case_id: str, excess: str) -> dict[str, object]:
    """An ``over_requested`` alert record as ``casekeeper alerts --json`` lists it."""
    fields = {"caseId": case_id, "owed": "100.00", "requested": "200.00", "excess": excess, "currency": "EUR"}
    return {"id": f"over_requested:{case_id}:{excess}", "kind": "over_requested", "fields": fields}


def test_an_over_ask_is_excused_only_by_an_over_requested_alert_naming_the_case_and_the_excess() -> None:
    """100.00 asked, then asked again (a late success after a person resolved the first one failed):
    [100.00, 100.00] for 100.00 owed. A person told of it, by an alert naming this case and an excess at
    least as large, makes it visible; an alert for another case, or for a smaller excess, does not."""

    def story(*alerts: dict[str, object]) -> list[Violation]:
        told = Story(invoice="1100.00", po="1000.00")
        told.request("a", "100.00")
        told.transition("needs_review", "resolved failed by a person")
        told.request("b", "100.00")
        told.evidence.alerts.extend(alerts)
        return violations(told.done(), 2)

    assert len(story()) == 1
    assert story(over_requested("C-1", "100.00")) == []
    assert len(story(over_requested("C-2", "100.00"))) == 1
    assert len(story(over_requested("C-1", "50.00"))) == 1
    assert len(story({**over_requested("C-1", "100.00"), "kind": "late_outcome"})) == 1


# --- 3: accepted events are reflected ------------------------------------------------------------


def test_an_accepted_po_change_missing_from_the_case_is_a_violation() -> None:
    story = Story()
    story.send("po.updated", {"poAmount": "800.00"}, "d-po")  # accepted, never applied
    story.transition("needs_review", "under-billed")
    found = violations(story.done(), 3)
    assert any("PO amount was never 800.00" in v.summary for v in found)
    assert any("last fact: PO amount 1000.00, but the last PO in source order is 800.00" in v.summary for v in found)


def test_an_event_set_aside_with_a_reason_is_reflected_and_without_one_is_not() -> None:
    story = Story()
    story.transition("approved", "variance within tolerance")
    story.send("invoice.received", {"invoiceId": "INV-9", "invoiceAmount": "1.00", "currency": "EUR"}, "d-other")
    story.rejected.append({"id": "webhook:d-other", "reason": "another invoice"})
    assert violations(story.done(), 3) == []
    story.rejected[0]["reason"] = ""
    [found] = violations(story.done(), 3)
    assert "without a reason" in found.summary


def test_events_for_a_case_the_api_cannot_show_are_not_reflected() -> None:
    story = Story(case_id="C/1")
    evidence = story.done()
    evidence.cases["C/1"] = {"status": 404, "body": {"error": "no case"}}
    [found] = violations(evidence, 3)
    assert "answers 404" in found.summary


def test_a_fact_change_whose_investigation_was_lost_is_a_violation() -> None:
    story = Story(invoice="1000.00", po="1000.00")
    story.transition("approved", "variance 0.00 within tolerance")
    story.po_updated("900.00", "d-po", status_after="open")  # approved -> open; the decision never came
    [found] = violations(story.done(), 3)
    assert "no decision followed the facts change on v2" in found.summary


def test_a_decision_may_wait_for_an_effect_without_a_known_outcome() -> None:
    story = Story(invoice="1000.00", po="1000.00")
    story.transition("needs_review", "effect needs reconciliation", effect=key("a"))
    story.po_updated("900.00", "d-po", status_after="needs_review")
    story.effects.append({"key": key("a"), "status": "needs_reconciliation", "caseVersion": 1, "attempts": 1})
    evidence = story.done()
    evidence.alerts = [{"kind": "effect_escalated", "fields": {"effectKey": key("a")}}]
    evidence.alert_deliveries = [{"payload": {"alert": "effect_escalated", "fields": {"effectKey": key("a")}}}]
    assert violations(evidence, 3) == []
    assert violations(evidence, 4) == []


def test_an_approval_answer_left_pending_is_a_violation() -> None:
    story = Story(invoice="3000.00", po="1000.00")
    story.transition("awaiting_approval", "approval requested for 2000.00 EUR")
    story.pending = {"requestId": "R-1", "caseVersion": 2}
    answer = story.send("approval.answered", {"decision": "approve", "caseVersion": 2, "approver": "x"}, "R-1")
    answer.event_type = "approval.answered"
    [found] = violations(story.done(), 3)
    assert "still pending" in found.summary
    story.pending = None
    story.transition("credit_requested", "approved by key:x", effect=None)
    assert not any("still pending" in v.summary for v in violations(story.done(), 3))


# --- 4: effects settled, escalations alerted once, statuses consistent, queue drained ------------


def test_an_effect_left_started_is_a_violation() -> None:
    story = Story()
    story.post("a", "300.00", created=True, status=None)
    story.effects.append({"key": key("a"), "status": "started", "caseVersion": 1, "attempts": 1})
    assert any("still started" in v.summary for v in violations(story.done(), 4))


def test_an_escalation_must_be_alerted_exactly_once() -> None:
    story = Story()
    story.post("a", "300.00", created=False, status=503)
    story.effects.append({"key": key("a"), "status": "needs_reconciliation", "caseVersion": 1, "attempts": 1})
    story.transition("needs_review", "effect needs reconciliation", effect=key("a"))
    evidence = story.done()
    evidence.alerts = [{"kind": "effect_escalated", "fields": {"effectKey": key("a")}}]
    [found] = violations(evidence, 4)
    assert "1 alert records, 0 deliveries" in found.summary
    delivery = {"payload": {"alert": "effect_escalated", "fields": {"effectKey": key("a")}}}
    evidence.alert_deliveries = [delivery]
    assert violations(evidence, 4) == []
    evidence.alert_deliveries = [delivery, delivery]
    assert len(violations(evidence, 4)) == 1


def test_a_done_effect_whose_commit_never_landed_is_a_violation() -> None:
    story = Story()
    record = story.post("a", "300.00", created=True)
    story.effects.append({"key": key("a"), "status": "done", "caseVersion": 1, "result": record["note"], "attempts": 1})
    found = violations(story.done(), 4)
    assert any("no transition names it" in v.summary for v in found)


def test_a_note_the_ledger_says_failed_is_a_violation() -> None:
    story = Story()
    story.post("a", "300.00", created=True, status=None)  # created, the answer dropped
    story.effects.append({"key": key("a"), "status": "failed", "reason": "stale: v1", "caseVersion": 1})
    assert any("the ledger says failed" in v.summary for v in violations(story.done(), 4))


def test_a_dead_letter_and_a_scheduled_message_are_violations() -> None:
    story = Story()
    story.transition("approved", "within tolerance")
    evidence = story.done()
    evidence.queue = {
        "counts": {"active": 0, "scheduled": 1, "dead_lettered": 1},
        "deadLetters": [{"caseId": "C-1", "messageId": "webhook:d", "reason": "MaxDeliveryCountExceeded"}],
    }
    summaries = [v.summary for v in violations(evidence, 4)]
    assert any("dead-lettered" in s for s in summaries) and any("scheduled" in s for s in summaries)


def test_a_consistent_case_has_no_violations_at_all() -> None:
    story = Story(invoice="1300.00", po="1000.00")
    story.request("a", "300.00")
    story.credit("CN-1", "300.00", "d-credit", status_after="closed")
    assert check_all(story.done()) == []


# --- 5: no 5xx outside a kill window -------------------------------------------------------------


def test_a_503_outside_a_kill_window_is_a_violation_and_inside_one_is_not() -> None:
    story = Story()
    story.transition("approved", "within tolerance")
    evidence = story.done()
    evidence.attempts = [
        Attempt(0, 0, "POST", "/api/events", 100.0, 100.1, 503),
        Attempt(0, 0, "POST", "/api/events", 200.0, 200.2, None, "ConnectError"),
    ]
    evidence.kill_windows = [KillWindow(0, 199.9, 201.5)]
    [found] = violations(evidence, 5)
    assert "HTTP 503" in found.summary
    evidence.kill_windows.append(KillWindow(0, 99.0, 99.5))  # ended 0.5 s before: within the margin
    assert violations(evidence, 5) == []


def test_a_kill_of_one_host_does_not_excuse_another() -> None:
    story = Story()
    story.transition("approved", "within tolerance")
    evidence = story.done()
    evidence.attempts = [Attempt(0, 1, "POST", "/api/events", 100.0, 100.1, 500)]
    evidence.kill_windows = [KillWindow(0, 99.0, 101.0)]
    assert len(violations(evidence, 5)) == 1


def test_a_case_only_the_operator_command_can_show_is_checked_and_the_api_reported() -> None:
    story = Story(case_id="C/2", invoice="1300.00", po="1000.00")
    story.request("a", "300.00")
    story.po_updated("900.00", "d-po", status_after="needs_review")
    story.request("b", "400.00")
    evidence = story.done()
    view = evidence.cases["C/2"]["body"]
    shown = {**view, "approvals": {"pending": None, "history": []}}
    evidence.cases["C/2"] = {
        "status": 404,
        "body": {"error": "no function serves /api/cases/C%2F2"},
        "operatorView": shown,
    }
    [api] = violations(evidence, 3)
    assert "no function serves" in api.summary and "case show" in api.summary
    assert len(violations(evidence, 2)) == 1  # the money check still ran, on the operator's view


def test_credit_requested_must_rest_on_a_done_request_even_after_a_partial_credit() -> None:
    story = Story(invoice="1300.00", po="1000.00")
    story.request("a", "200.00")
    story.request("b", "100.00")
    story.credit("CN-2", "100.00", "d-credit", status_after="credit_requested")  # 200.00 still outstanding
    assert violations(story.done(), 4) == []
    story.history[1]["effectKey"] = None  # the request's commit names no effect
    summaries = [v.summary for v in violations(story.done(), 4)]
    assert any("no transition names it" in s for s in summaries)


def test_waiting_for_credit_without_a_new_request_needs_one_still_outstanding() -> None:
    """A case may go back to credit_requested without a new request when the requests already made cover
    what is owed (the PO moved back); that only holds while one of them is outstanding."""
    story = Story(invoice="1300.00", po="1000.00")
    story.request("a", "300.00")
    story.transition("needs_review", "po.updated: PO amount 1000.00 -> 1100.00", changes={"poAmount": "1100.00"})
    story.transition("credit_requested", "300.00 EUR requested and outstanding covers the over-billing")
    assert violations(story.done(), 4) == []
    story.credit("CN-1", "300.00", "d-credit", status_after="credit_requested")
    story.transition("credit_requested", "300.00 EUR requested and outstanding covers the over-billing")
    summaries = [v.summary for v in violations(story.done(), 4)]
    assert any("no request of it is outstanding" in s for s in summaries), summaries


def test_a_withdrawal_hands_the_case_to_a_person_and_owes_no_decision() -> None:
    story = Story(invoice="1300.00", po="1000.00")
    story.request("a", "300.00")
    withdrawn = [{"effectKey": "a", "by": "ana", "why": "settled by phone", "at": 1.0}]
    story.transition("needs_review", "request.withdrawn: request a withdrawn by ana", changes={"withdrawn": withdrawn})
    assert [v.summary for v in violations(story.done(), 3) if "no decision followed" in v.summary] == []
    story.transition("needs_review", "po.updated: PO amount 1000.00 -> 1100.00", changes={"poAmount": "1100.00"})
    assert any("no decision followed" in v.summary for v in violations(story.done(), 3))


def test_a_503_while_the_store_is_down_is_excused_and_a_500_or_no_answer_is_not() -> None:
    story = Story()
    story.transition("approved", "within tolerance")
    evidence = story.done()
    evidence.outages = [StoreOutage("sqlite-write-lock", 100.0, 120.0, 10.0, 30.0)]
    evidence.attempts = [Attempt(0, 0, "POST", "/api/events", 110.0, 110.1, 503)]
    assert violations(evidence, 5) == []
    evidence.attempts += [
        Attempt(0, 0, "POST", "/api/events", 111.0, 111.1, 500),
        Attempt(0, 0, "POST", "/api/events", 112.0, 112.1, None, "ReadTimeout"),
        Attempt(0, 0, "POST", "/api/events", 130.0, 130.1, 503),  # after the outage and its margin
    ]
    assert len(violations(evidence, 5)) == 3


def test_a_superseded_record_changes_no_fact_and_owes_no_decision() -> None:
    story = Story(invoice="1300.00", po="1000.00")
    story.send("po.updated", {"poAmount": "1100.00", "occurredAt": "2026-01-05T10:00:00+00:00"}, "d-new")
    story.po = "1100.00"
    story.transition("needs_review", "po.updated: PO amount -> 1100.00", changes={"poAmount": "1100.00"})
    story.transition("approved", "variance within tolerance")
    old = story.send("po.updated", {"poAmount": "900.00", "occurredAt": "2026-01-05T09:00:00+00:00"}, "d-old")
    # As the product records it: an entry in supersededEvents, no transition, the version unchanged.
    story.supersede(old, "1100.00")
    evidence = story.evidence
    evidence.sent[0].data["occurredAt"] = "2026-01-05T08:00:00+00:00"
    assert check_all(story.done()) == []
