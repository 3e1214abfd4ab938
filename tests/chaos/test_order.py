"""Invariant 3's order rule (the last fact in source order stands) and the money rule on the facts that
were true, fed evidence that breaks them and evidence that keeps them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.checks import check_all, timelines_of
from chaos.evidence import Evidence, api_shape
from chaos.order import occurred_at, set_aside_unapplied
from chaos.violations import Violation
from tests.chaos.builders import Story

BASE = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)


def violations(evidence: Evidence, invariant: int) -> list[Violation]:
    return [v for v in check_all(evidence) if v.invariant == invariant]


def stamp(minutes: int, offset_hours: float = 0) -> str:
    zone = timezone(timedelta(hours=offset_hours))
    return (BASE + timedelta(minutes=minutes)).astimezone(zone).isoformat(timespec="milliseconds")


def apply_po(story: Story, amount: str) -> None:
    """The case applies a PO change (the history records what changed)."""
    story.po = amount
    story.transition("needs_review", f"po.updated: PO amount -> {amount}", changes={"poAmount": amount})


def supersede(story: Story, delivery: str) -> None:
    """The case records a fact older than the one it holds as superseded (in ``supersededEvents``, with
    its delivery id; no transition), and decides again on the facts it holds."""
    sent = next(s for s in reversed(story.evidence.sent) if s.delivery == delivery)
    story.supersede(sent, story.po)


def decide(story: Story) -> None:
    story.transition("approved", "variance within tolerance")


def stamped_invoice() -> Story:
    story = Story(invoice="1300.00", po="1000.00")
    story.evidence.sent[0].data["occurredAt"] = stamp(0)
    return story


# --- the rule, by example ---------------------------------------------------------------------------


def test_occurred_at_orders_by_time_not_by_text() -> None:
    earlier, later = "2026-01-05T10:00:00.000+05:30", "2026-01-05T06:00:00.000+00:00"
    assert earlier > later  # as text
    assert (occurred_at({"occurredAt": earlier}) or 0) < (occurred_at({"occurredAt": later}) or 0)
    assert occurred_at({"occurredAt": "2026-01-05T06:00:00"}) is None  # no offset: not a place in an order
    assert occurred_at({}) is None


def test_an_older_po_delivered_late_and_applied_over_a_newer_one_is_a_violation() -> None:
    story = stamped_invoice()
    story.send("po.updated", {"poAmount": "1100.00", "occurredAt": stamp(20, 2)}, "d-new")
    apply_po(story, "1100.00")
    story.send("po.updated", {"poAmount": "1250.00", "occurredAt": stamp(10, -5)}, "d-old")
    apply_po(story, "1250.00")  # last handled wins: the bug
    decide(story)
    summaries = [v.summary for v in violations(story.done(), 3)]
    assert any(s.startswith("order: v3: PO amount became 1250.00, an older fact") for s in summaries), summaries
    assert any("last fact: PO amount 1250.00, but the last PO in source order is 1100.00" in s for s in summaries)


def test_the_older_po_recorded_as_superseded_keeps_every_invariant() -> None:
    story = stamped_invoice()
    story.send("po.updated", {"poAmount": "1100.00", "occurredAt": stamp(20, 2)}, "d-new")
    apply_po(story, "1100.00")
    story.send("po.updated", {"poAmount": "1250.00", "occurredAt": stamp(10, -5)}, "d-old")
    supersede(story, "d-old")
    decide(story)
    assert check_all(story.done()) == []


def test_a_superseded_po_must_be_recorded_with_its_delivery_id() -> None:
    story = stamped_invoice()
    story.send("po.updated", {"poAmount": "1100.00", "occurredAt": stamp(20)}, "d-new")
    apply_po(story, "1100.00")
    story.send("po.updated", {"poAmount": "1250.00", "occurredAt": stamp(10)}, "d-old")  # silently dropped
    decide(story)
    [found] = violations(story.done(), 3)
    assert "(d-old) accepted: the case's PO amount was never 1250.00" in found.summary


def test_without_occurred_at_the_acceptance_order_is_the_truth() -> None:
    """Two PO changes accepted in order while the store was down; the first one's delayed copy came back
    behind the second and was applied again."""
    story = Story(invoice="1300.00", po="1000.00")
    story.send("po.updated", {"poAmount": "1250.00"}, "d-1")
    story.send("po.updated", {"poAmount": "1100.00"}, "d-2")
    apply_po(story, "1250.00")
    apply_po(story, "1100.00")
    decide(story)
    assert violations(story.done(), 3) == []
    apply_po(story, "1250.00")  # d-1's delayed copy, again
    decide(story)
    summaries = [v.summary for v in violations(story.done(), 3)]
    assert any("last PO in source order is 1100.00 (d-2, by acceptance order)" in s for s in summaries), summaries
    assert any(s.startswith("order: v5: PO amount became 1250.00") for s in summaries)


def test_a_re_sent_delivery_keeps_its_first_place_and_a_copy_takes_a_new_one() -> None:
    story = Story(invoice="1300.00", po="1000.00")
    story.send("po.updated", {"poAmount": "1250.00"}, "d-1")
    story.send("po.updated", {"poAmount": "1100.00"}, "d-2")
    story.send("po.updated", {"poAmount": "1250.00"}, "d-1")  # the sender's retry: still the older fact
    apply_po(story, "1250.00")
    apply_po(story, "1100.00")
    decide(story)
    assert violations(story.done(), 3) == []
    story.send("po.updated", {"poAmount": "1250.00"}, "d-3")  # a new delivery: a newer fact
    apply_po(story, "1250.00")
    decide(story)
    assert violations(story.done(), 3) == []


def test_a_credit_note_correction_must_stand_and_an_older_report_must_not_override_it() -> None:
    story = stamped_invoice()
    story.send("credit_note.issued", {"creditNoteId": "EXT-1", "amount": "40.00", "occurredAt": stamp(5)}, "d-40")
    story.credits = [{"creditNoteId": "EXT-1", "amount": "40.00"}]
    story.transition(
        "needs_review", "credit_note.issued: credit note EXT-1 for 40.00 received", changes={"credits": story.credits}
    )
    decide(story)
    story.send("credit_note.issued", {"creditNoteId": "EXT-1", "amount": "100.00", "occurredAt": stamp(9)}, "d-100")
    ignored = story.done()  # the correction left no trace: the case still holds 40.00
    assert any("credit EXT-1 stands at 40.00" in v.summary for v in violations(ignored, 3))

    story.credits = [{"creditNoteId": "EXT-1", "amount": "100.00"}]
    story.transition(
        "needs_review", "credit_note.issued: EXT-1 corrected 40.00 -> 100.00", changes={"credits": story.credits}
    )
    decide(story)
    assert violations(story.done(), 3) == []

    story.credits = [{"creditNoteId": "EXT-1", "amount": "40.00"}]  # d-40's delayed copy applied again
    story.transition("needs_review", "credit_note.issued: EXT-1 40.00", changes={"credits": story.credits})
    decide(story)
    summaries = [v.summary for v in violations(story.done(), 3)]
    assert any(s.startswith("order: v6: credit EXT-1 became 40.00, an older fact") for s in summaries), summaries


def test_a_fact_event_with_occurred_at_refused_at_the_door_is_a_violation() -> None:
    story = stamped_invoice()
    story.send("po.updated", {"poAmount": "1100.00", "occurredAt": stamp(3)}, "d-po", status=400)
    decide(story)
    [found] = violations(story.done(), 3)
    assert "po.updated (d-po) with occurredAt" in found.summary and "HTTP 400" in found.summary
    story.send("po.updated", {"poAmount": "1100.00", "occurredAt": stamp(3)}, "d-po")  # a retry got it in
    apply_po(story, "1100.00")
    decide(story)
    assert violations(story.done(), 3) == []


def test_money_is_judged_on_the_facts_that_were_true_not_on_a_stale_one_the_case_showed() -> None:
    """PO 1099.00 -> 900.00 -> 1100.00, then the 900.00 event's delayed copy applied again: the case asks
    for 200.00 on PO 900.00, which nobody owed once the PO was 1100.00."""
    story = Story(invoice="1100.00", po="1099.00")
    story.send("po.updated", {"poAmount": "900.00"}, "d-900")
    story.send("po.updated", {"poAmount": "1100.00"}, "d-1100")
    apply_po(story, "900.00")
    apply_po(story, "1100.00")
    apply_po(story, "900.00")
    story.request("a", "200.00")
    [found] = violations(story.done(), 2)
    assert found.details["justified"] == "0.00" and found.details["caseShowed"]["poAmount"] == "900.00"


def test_money_on_a_case_that_only_applied_newer_facts_is_judged_as_it_showed() -> None:
    story = Story(invoice="1300.00", po="1099.00")
    story.send("po.updated", {"poAmount": "900.00"}, "d-900")
    story.send("po.updated", {"poAmount": "1100.00"}, "d-1100")
    apply_po(story, "900.00")
    apply_po(story, "1100.00")
    story.request("a", "200.00")
    assert violations(story.done(), 2) == []


# --- the rule, as a property --------------------------------------------------------------------------


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[bool, list[str], list[int]]:
    """(stamped, PO amounts in source order, the order in which the case handles them)."""
    amounts = draw(st.lists(st.integers(100, 999), min_size=2, max_size=4, unique=True))
    handled = draw(st.permutations(range(len(amounts))))
    return draw(st.booleans()), [f"{a}.00" for a in amounts], list(handled)


@settings(max_examples=150, deadline=None)
@given(deliveries(), st.lists(st.sampled_from([0, 2, -5, 5.5]), min_size=4, max_size=4))
def test_only_a_case_that_applies_facts_by_their_source_order_keeps_invariant_3(
    case: tuple[bool, list[str], list[int]], offsets: list[float]
) -> None:
    """Stamped: delivered (and handled) in any order, source order by ``occurredAt``. Unstamped: accepted in
    source order, handled in any order (delayed copies). A case that applies a fact only when it is newer
    than the one it holds keeps the invariant; one where the last handled wins breaks it exactly when the
    handling order is not the source order."""
    stamped, amounts, handled = case

    def story_for(last_wins: bool) -> Story:
        story = stamped_invoice() if stamped else Story(invoice="1300.00", po="1000.00")
        data = [
            {"poAmount": a, **({"occurredAt": stamp(10 * (i + 1), offsets[i])} if stamped else {})}
            for i, a in enumerate(amounts)
        ]
        for i in handled if stamped else range(len(amounts)):  # stamped: accepted as delivered
            story.send("po.updated", data[i], f"d-{i}")
        held = -1
        for i in handled:
            if last_wins or i > held:
                apply_po(story, amounts[i])
                held = max(held, i)
            else:
                supersede(story, f"d-{i}")
        decide(story)
        return story

    assert violations(story_for(last_wins=False).done(), 3) == []
    broken = violations(story_for(last_wins=True).done(), 3)
    assert bool(broken) == (handled != sorted(handled)), [v.summary for v in broken]


def test_a_fact_without_a_readable_occurred_at_falls_back_to_acceptance_order() -> None:
    story = Story(invoice="1300.00", po="1000.00")
    story.send("po.updated", {"poAmount": "1250.00", "occurredAt": "yesterday"}, "d-1")
    story.send("po.updated", {"poAmount": "1100.00"}, "d-2")
    apply_po(story, "1250.00")
    apply_po(story, "1100.00")
    decide(story)
    assert violations(story.done(), 3) == []


# --- the product's record of a superseded report (supersededEvents) ------------------------------------


def test_a_superseded_record_for_the_newest_report_is_a_violation() -> None:
    """The case kept the older PO and recorded the newest one as superseded: the record does not excuse it."""
    story = stamped_invoice()
    old = story.send("po.updated", {"poAmount": "1250.00", "occurredAt": stamp(10)}, "d-old")
    new = story.send("po.updated", {"poAmount": "1100.00", "occurredAt": stamp(20)}, "d-new")
    apply_po(story, "1250.00")
    story.supersede(new, "1250.00")
    decide(story)
    summaries = [v.summary for v in violations(story.done(), 3)]
    assert any("(d-new) accepted" in s and "it is the newest report of its fact" in s for s in summaries), summaries
    assert any("last fact: PO amount 1250.00" in s for s in summaries), summaries
    assert old.delivery not in " ".join(summaries)


def test_a_superseded_record_must_name_the_delivery_its_amount_and_a_reason() -> None:
    story = stamped_invoice()
    story.send("po.updated", {"poAmount": "1100.00", "occurredAt": stamp(20)}, "d-new")
    apply_po(story, "1100.00")
    old = story.send("po.updated", {"poAmount": "1250.00", "occurredAt": stamp(10)}, "d-old")
    story.supersede(old, "1100.00")
    decide(story)
    assert check_all(story.done()) == []
    for broken in ({"deliveryId": "d-other"}, {"value": "1249.00"}, {"reason": ""}, {"fact": "credits"}):
        record = story.superseded[0]
        story.superseded[0] = {**record, **broken}
        [found] = violations(story.done(), 3)
        assert "(d-old) accepted: the case's PO amount was never 1250.00, and no superseded record" in found.summary
        story.superseded[0] = record


def test_an_older_credit_report_must_be_recorded_as_superseded_and_a_newer_one_applied() -> None:
    """CN-1 reported for 100.00, then (late) its older report for 40.00: the case keeps 100.00 and must
    record the 40.00 report as superseded; without the record the older report left no trace."""
    story = stamped_invoice()
    story.send("credit_note.issued", {"creditNoteId": "EXT-1", "amount": "100.00", "occurredAt": stamp(9)}, "d-100")
    story.credits = [{"creditNoteId": "EXT-1", "amount": "100.00"}]
    story.transition(
        "needs_review", "credit_note.issued: credit note EXT-1 for 100.00 received", changes={"credits": story.credits}
    )
    decide(story)
    old = story.send("credit_note.issued", {"creditNoteId": "EXT-1", "amount": "40.00", "occurredAt": stamp(5)}, "d-40")
    [found] = violations(story.done(), 3)
    assert "(d-40) accepted: credit EXT-1 was never 40.00, and no superseded record names it" in found.summary
    story.supersede(old, "100.00")
    assert check_all(story.done()) == []


def test_a_set_aside_delayed_copy_counts_by_its_delivery_id() -> None:
    """A delayed copy set aside has its own message id (``webhook:<delivery>:retry:<n>``); with its body
    cut off, the delivery id still comes from that message id."""
    story = stamped_invoice()
    story.send("po.updated", {"poAmount": "1250.00", "occurredAt": stamp(10)}, "d-1")
    story.rejected.append(
        {"id": "webhook:d-1:retry:2", "messageId": "webhook:d-1:retry:2", "reason": "bad", "body": "{"}
    )
    decide(story)
    assert violations(story.done(), 3) == []
    story.rejected[0]["reason"] = ""
    [found] = violations(story.done(), 3)
    assert "(d-1) accepted: set aside without a reason" in found.summary


def test_the_reason_only_rebuild_expects_po_amounts_in_source_order_less_the_superseded() -> None:
    """A build whose history has no ``changes``: the PO amounts come from the accepted events, ordered by
    ``occurredAt`` (not by when they were accepted), leaving out the one recorded as superseded."""
    story = stamped_invoice()
    late = story.send("po.updated", {"poAmount": "1250.00", "occurredAt": stamp(10)}, "d-1")
    story.send("po.updated", {"poAmount": "1100.00", "occurredAt": stamp(20)}, "d-2")
    story.send("po.updated", {"poAmount": "1150.00", "occurredAt": stamp(15)}, "d-3")  # accepted last, older
    story.po = "1150.00"
    story.transition("needs_review", "po.updated: PO amount 1000.00 -> 1150.00")
    story.po = "1100.00"
    story.transition("needs_review", "po.updated: PO amount 1150.00 -> 1100.00")
    story.supersede(late, "1100.00")
    decide(story)
    evidence = story.done()
    assert check_all(evidence) == []
    timeline = timelines_of(evidence)["C-1"]
    assert timeline.source == "driver" and [str(p) for p in timeline.expected_po] == ["1150.00", "1100.00"]


def test_the_operator_view_carries_the_superseded_records() -> None:
    """When only ``casekeeper case show --json`` shows the case, its superseded records count too."""
    story = stamped_invoice()
    story.send("po.updated", {"poAmount": "1100.00", "occurredAt": stamp(20)}, "d-new")
    apply_po(story, "1100.00")
    old = story.send("po.updated", {"poAmount": "1250.00", "occurredAt": stamp(10)}, "d-old")
    story.supersede(old, "1100.00")
    decide(story)
    evidence = story.done()
    view = evidence.cases["C-1"]["body"]
    evidence.cases["C-1"] = {"status": 500, "body": {"error": "boom"}, "operatorView": {**view, "approvals": {}}}
    assert api_shape(evidence.cases["C-1"]["operatorView"])["supersededEvents"] == story.superseded
    summaries = [v.summary for v in violations(evidence, 3)]
    assert summaries and all("the API cannot show it" in s for s in summaries), summaries


def test_a_set_aside_report_applied_later_under_its_id_is_not_left_out() -> None:
    rejected = [
        {"id": "r1", "messageId": "webhook:d-1", "reason": "unknown case 'C'"},
        {"id": "r2", "messageId": "webhook:d-2:retry:1", "reason": "unknown case 'C'"},
    ]
    view = {"history": [{"fromVersion": 1, "status": "open", "deliveryId": "d-1", "changes": {"poAmount": "1.00"}}]}
    assert set_aside_unapplied(rejected, view) == {"d-2"}
    assert set_aside_unapplied(rejected, None) == {"d-1", "d-2"}


def test_facts_held_before_the_invoice_count_as_shown_and_the_fold_is_judged_by_source_order() -> None:
    """Two PO edits came before their invoice (held on an ``awaiting_invoice`` case, the second replacing the
    first), then the invoice, accepted last, opened the case on its own PO amount, the newest in source order,
    and recorded the held edit as superseded. Every accepted report is reflected: the first edit was shown
    while held, the second is superseded; the last fact in source order stands."""
    story = Story(invoice="1300.00", po="1000.00")
    invoice = story.evidence.sent[0]
    story.send("po.updated", {"poAmount": "1250.00"}, "d-1")
    second = story.send("po.updated", {"poAmount": "1200.00"}, "d-2")
    invoice.accepted_at = story.tick()  # the invoice was accepted after both edits
    story.transition("awaiting_invoice", "po.updated: PO amount 1250.00 held", changes={"poAmount": "1250.00"})
    story.transition("awaiting_invoice", "po.updated: PO amount 1200.00 held", changes={"poAmount": "1200.00"})
    story.supersede(second, "1000.00")
    opened = {"invoiceAmount": "1300.00", "poAmount": "1000.00", "credits": [], "withdrawn": []}
    story.transition("open", "invoice.received: invoice INV-1 opens the case on the facts held", changes=opened)
    story.request("a", "300.00")
    assert check_all(story.done()) == []
