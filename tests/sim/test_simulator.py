"""The simulator (``sim``): a fixed budget of seeds keeps every invariant, a seed replays exactly, and each
invariant can fail.

The fixed-budget test is what ``make test`` asks of the product: seeds 0..SEEDS-1 of STEPS steps each, every
invariant judged (about 45 s on one core). On a build that breaks an invariant it fails with the seed, the
shrunk steps and the violations, which ``casekeeper sim --seed N --seeds 1`` reproduces. Which seed finds
which failure of issue 32 is in docs/simulator.md, shown by ``casekeeper sim --expect-violation``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from decimal import Decimal

import httpx
import pytest

from casekeeper.check import Step
from sim import checks
from sim.checks import MAX_CASE_BYTES, Post, Record
from sim.run import describe, main, plan_from_json, plan_to_json
from sim.runner import Plan, Shape, Sim, make_plan, search, shrink
from sim.supplier import BIG_ANSWER_BYTES, Supplier

SEEDS = 250
STEPS = 40


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    """The app logs every fault the simulator injects; the findings are in the assertions."""
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_invariant_holds_over_a_fixed_budget_of_seeds() -> None:
    found = search(0, steps=STEPS, seeds=SEEDS)
    failing = found.failing
    if failing is not None:
        small = shrink(failing, seconds=30)
        shown = Sim(small).run()
        pytest.fail(
            describe(failing, small, sum(o.seconds for o in found.outcomes), STEPS, shown if shown.violations else None)
        )
    assert len(found.outcomes) == SEEDS


FOUND_ON_THE_MERGED_CODE = (61, 173, 182, 258, 373, 383, 1272, 1276, 2079, 2145, 2373, 3610, 4301, 6179, 8286, 10386)
"""Seeds past the fixed budget at which the simulator stopped on the code with issue 32's fixes
(docs/simulator.md says what each was): the product's five (1276, a late success whose process died after a
person's resolve; 2079, the PO depending on which invoice report came first; 2145, an invoice report lost
when it met an interrupted run's call in flight; 4301, a copy posted after the door forgot its id judged
again; 6179, delayed copies of two acceptances of one delivery id under one message id) and the model's."""


@pytest.mark.parametrize("seed", FOUND_ON_THE_MERGED_CODE)
def test_a_seed_the_simulator_stopped_at_holds_now(seed: int) -> None:
    outcome = Sim(make_plan(seed, STEPS)).run()
    assert outcome.violations == [], [str(v) for v in outcome.violations]


def test_a_seed_replays_exactly() -> None:
    """Two runs of one plan do the same: the door's answers, the supplier's journal, the stored cases; judged
    (stopping where an invariant breaks, if one does) and to the end."""
    for seed in (3, 11):
        first, second = Sim(make_plan(seed, STEPS)).run(), Sim(make_plan(seed, STEPS)).run()
        assert first.digest == second.digest
        assert (first.at_step, [str(v) for v in first.violations]) == (
            second.at_step,
            [str(v) for v in second.violations],
        )
        whole, again = Sim(make_plan(seed, STEPS), ()).run(), Sim(make_plan(seed, STEPS), ()).run()
        assert whole.at_step == len(whole.plan.steps) and whole.digest == again.digest


def test_a_saved_plan_reads_back_as_it_was() -> None:
    plan = make_plan(7, STEPS)
    assert plan_from_json(json.loads(json.dumps(plan_to_json(plan)))) == plan


def test_every_action_runs_in_one_world() -> None:
    """Each step the simulator knows, at least once, in one plan: the world can express all of them."""
    steps = [
        Step("invoice", (0, 100_000, 150_000, 0)),
        Step("po", (1, 5_000, 1)),
        Step("invoice", (1, 100_000, 20_000, 2)),
        Step("supplier_fault", ("stall", ("resolve", "post_po"))),
        Step("deliver", (4, 0)),
        Step("script", ("split",)),
        Step("approval", (0, "approve", False, "both", 1)),
        Step("pause", ("F2", ("reconciler", "timer", "deliver"))),
        Step("deliver", (4, 1)),
        Step("crash", ("F4",)),
        Step("po", (0, -3_000, 2)),
        Step("deliver", (4, 2)),
        Step("ext_credit", (0, 1_000, 0)),
        Step("credit_for_request", (0, 0, 1)),
        Step("investigate", (1, 0, 0)),
        Step("late_po", (0, 2, 500, 1)),
        Step("hold", (2,)),
        Step("po", (0, 700, 0)),
        Step("release", (0, True)),
        Step("resend", (1, 0)),
        Step("copy", (2, 1)),
        Step("reuse", (0, 100, 2)),
        Step("outage", ("*", "throttle", 10.0)),
        Step("po", (1, 100, 0)),
        Step("retry_refused", ()),
        Step("lookup_down", ()),
        Step("crash", ("F7",)),
        Step("deliver", (4, 0)),
        Step("withdraw", (0, 0, 0)),
        Step("resolve", (0, 0, 0)),
        Step("redrive", ()),
        Step("time", (91 * 86400.0,)),
        Step("reconciler", ()),
        Step("timer", ()),
        Step("settle", ()),
    ]
    plan = Plan(1, Shape((0.0, 2.5, -1.0), (("dated", 0.0), ("undated", 0.0)), True), tuple(steps))
    sim = Sim(plan, invariants=())  # judged elsewhere: here, that every step runs to the end
    ran: list[int] = []
    outcome = sim.run(on_step=lambda number, step: ran.append(number))
    assert ran == list(range(1, len(steps) + 1)) and outcome.at_step == len(steps)
    assert sorted(sim.world.pauses) == ["F2", "F3-stall"]  # the worker froze, and a call hung
    assert {p.status for p in sim.record.posts} >= {202, 503}  # the throttled door refused, the rest went in


def test_the_cli_exits_by_what_it_found(capsys: pytest.CaptureFixture[str]) -> None:
    """``--expect-violation NAME`` exits 0 only when NAME breaks: not when it is not even judged."""
    argv = ["--seed", "0", "--seeds", "1", "--steps", "5", "--no-shrink"]
    assert main([*argv, "--invariants", "case_size", "--expect-violation", "door"]) == 1
    assert main([*argv, "--invariants", "nonsense"]) == 2
    assert "unknown invariants: nonsense" in capsys.readouterr().err


# --- each invariant can fail ----------------------------------------------------------------------------------


def post(
    kind: str, data: dict[str, object], *, delivery: str, at: float, seq: int, status: int = 202, **kw: object
) -> Post:
    return Post(
        1, "C", kind, dict(data), delivery, status, at, float(kw.get("seconds", 0.1)), kw.get("retry_after"), seq
    )  # type: ignore[arg-type]


def test_the_door_invariant_catches_a_slow_answer_a_500_and_a_503_without_retry_after() -> None:
    posts = [
        post("po.updated", {}, delivery="a", at=0, seq=1, status=202, seconds=30.0),
        post("po.updated", {}, delivery="b", at=0, seq=2, status=500),
        post("po.updated", {}, delivery="c", at=0, seq=3, status=503),
        post("po.updated", {}, delivery="d", at=0, seq=4, status=503, retry_after="5"),
    ]
    assert [v.detail.split(":")[0] for v in checks.check_door(posts)] == ["step 1"] * 3


def test_the_size_and_threshold_invariants() -> None:
    assert checks.check_case_size({"C": MAX_CASE_BYTES + 1, "D": 10})[0].detail.startswith("case C")
    record = Record()
    assert checks.check_threshold(record, "C", Decimal("1400.00"))
    record.approved.add("C")
    assert not checks.check_threshold(record, "C", Decimal("1400.00"))


INVOICE = {
    "invoiceId": "I",
    "supplierId": "S",
    "poNumber": "P",
    "invoiceAmount": "1500.00",
    "poAmount": "1000.00",
    "currency": "EUR",
}


def test_facts_in_source_order_follow_occurred_at_then_the_worlds_acceptance() -> None:
    record = Record()
    record.posts = [
        post("invoice.received", INVOICE, delivery="i", at=10, seq=1),
        # Accepted later, but it happened first: the older report.
        post("po.updated", {"poAmount": "1450.00", "occurredAt": "2027-01-15T08:00:02Z"}, delivery="b", at=30, seq=3),
        post("po.updated", {"poAmount": "1200.00", "occurredAt": "2027-01-15T08:00:01Z"}, delivery="a", at=40, seq=4),
    ]
    assert checks.expected_facts(record, "C", set()).po == "1450.00"
    undated = Record()
    undated.posts = [
        post("invoice.received", INVOICE, delivery="i", at=10, seq=1),
        post("po.updated", {"poAmount": "900.00"}, delivery="a", at=20, seq=2),
        post("po.updated", {"poAmount": "1100.00"}, delivery="b", at=21, seq=3),
    ]
    expected = checks.expected_facts(undated, "C", set())
    assert expected.po == "1100.00"
    assert [p.delivery for p in expected.changing] == ["a", "b"]


def test_a_delivery_id_reused_with_another_body_is_no_fact_but_must_show_set_aside() -> None:
    record = Record()
    record.posts = [
        post("invoice.received", INVOICE, delivery="i", at=10, seq=1),
        post("po.updated", {"poAmount": "900.00"}, delivery="a", at=20, seq=2),
        post("po.updated", {"poAmount": "950.00"}, delivery="a", at=30, seq=3),
    ]
    assert checks.expected_facts(record, "C", set()).po == "900.00"
    view: dict[str, object] = {
        "case": {"status": "open", "facts": {**INVOICE, "poAmount": "900.00", "credits": []}},
        "history": [{"deliveryId": "a"}],
    }
    found = checks.check_quiescent(record, "C", view, [], ["facts", "deliveries"])
    assert [v.detail.split(" was ")[1].split(" with ")[0] for v in found] == ["accepted at step 1"]
    # Set aside, with the reason: seen once is enough, even after its record expired.
    record.observe("C", {**view, "rejectedEvents": [{"messageId": "webhook:a", "reason": "another body"}]})
    assert not checks.check_quiescent(record, "C", view, [], ["facts", "deliveries"])
    view["history"] = []
    unshown = Record(posts=record.posts[:2])
    assert [v.invariant for v in checks.check_quiescent(unshown, "C", view, [], ["deliveries"])] == ["deliveries"]


def test_the_money_invariant_needs_an_over_requested_alert_naming_the_case() -> None:
    record = Record()
    record.posts = [
        post("invoice.received", INVOICE, delivery="i", at=10, seq=1),
        post("po.updated", {"poAmount": "1480.00"}, delivery="a", at=20, seq=2),
    ]
    view = {
        "case": {"status": "needs_review", "facts": {**INVOICE, "poAmount": "1480.00", "credits": []}},
        "history": [{"deliveryId": "a"}],
    }

    class Note:
        note_id, key, amount = "CN-1", "k", "100.00"

    found = checks.check_quiescent(record, "C", view, [Note()], ["money"])
    assert [v.invariant for v in found] == ["money"]
    record.alerts["x"] = ("over_requested", {"caseId": "C"})
    assert not checks.check_quiescent(record, "C", view, [Note()], ["money"])


def test_the_supplier_stand_in_is_idempotent_by_key_and_can_answer_big() -> None:
    supplier = Supplier(on_stall=lambda: None)
    client = httpx.Client(transport=supplier.transport(), base_url="http://supplier.sim")
    body = {"caseId": "C", "invoiceId": "I", "supplierId": "S", "amount": "10.00", "currency": "EUR"}
    first = client.post("/credit-notes", json=body, headers={"Idempotency-Key": "k"}).json()
    again = client.post("/credit-notes", json=body, headers={"Idempotency-Key": "k"}).json()
    assert first == again and len(supplier.notes) == 1
    other = client.post("/credit-notes", json={**body, "amount": "11.00"}, headers={"Idempotency-Key": "k"})
    assert other.status_code == 422
    supplier.arm("big")
    big = client.post("/credit-notes", json=body, headers={"Idempotency-Key": "k"})
    assert len(big.content) > BIG_ANSWER_BYTES
    assert client.get("/credit-notes", params={"idempotencyKey": "nope"}).status_code == 404
