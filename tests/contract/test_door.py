"""What the door remembers (``shared.handlers.door``), on every backend: a delivery id keeps the body it was
first accepted with, and an approval request keeps its first answer, whatever order requests come in."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from casekeeper.core.ports import DocumentStore
from shared.handlers.door import HEALTH, KIND_DELIVERY, body_digest, check_delivery, claim_answer

BODIES = st.sampled_from(
    [
        {"type": "po.updated", "caseId": "C-1", "data": {"poAmount": "900.00"}},
        {"type": "po.updated", "caseId": "C-1", "data": {"poAmount": "950.00"}},
        {"type": "credit_note.issued", "caseId": "C-1", "data": {"creditNoteId": "CN-1", "amount": "40.00"}},
    ]
)
ANSWERS = st.fixed_dictionaries(
    {
        "decision": st.sampled_from(["approve", "reject"]),
        "caseVersion": st.sampled_from([2, 3]),
        "approver": st.sampled_from(["ana", "bob"]),
    }
)
SLOW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SLOW
@given(bodies=st.lists(BODIES, min_size=1, max_size=6))
def test_a_delivery_id_accepts_only_the_body_it_was_first_accepted_with(
    store: DocumentStore, bodies: list[dict[str, object]]
) -> None:
    delivery = f"d-{uuid.uuid4().hex[:10]}"  # one delivery id per example: the store outlives examples
    verdicts = [
        check_delivery(store, delivery, body, case_id="C-1", event_type=str(body["type"]), at=0.0).refusal is None
        for body in bodies
    ]
    assert verdicts == [body_digest(b) == body_digest(bodies[0]) for b in bodies]


@SLOW
@given(answers=st.lists(ANSWERS, min_size=1, max_size=6))
def test_the_first_answer_closes_the_request_and_only_the_same_answer_is_accepted_again(
    store: DocumentStore, answers: list[dict[str, object]]
) -> None:
    request = f"apr-{uuid.uuid4().hex[:10]}"
    verdicts = [claim_answer(store, "C-1", request, answer) for answer in answers]
    assert [v is None for v in verdicts] == [a == answers[0] for a in answers]
    first = answers[0]
    for verdict in verdicts:
        assert verdict is None or f"{first['decision']} by {first['approver']} on v{first['caseVersion']}" in verdict


def test_the_digest_ignores_key_order_and_whitespace_but_not_values() -> None:
    assert body_digest({"a": 1, "b": [1, 2]}) == body_digest({"b": [1, 2], "a": 1})
    assert body_digest({"a": "1"}) != body_digest({"a": 1})


def test_a_delivery_is_stamped_by_the_stores_clock_once_whatever_the_hosts_clock_says(store: DocumentStore) -> None:
    """One delivery is one report, stamped once, by the store's clock at the door's record (never by the host's
    ``at``, which only people read): the same body again gets the first stamp back, however late; another body
    is refused."""
    delivery, body = f"d-{uuid.uuid4().hex[:10]}", {"type": "po.updated", "caseId": "C-1", "data": {"poAmount": "1"}}
    before = store.now()
    first = check_delivery(store, delivery, body, case_id="C-1", event_type="po.updated", at=10.0)
    after = store.now()
    record = store.read(HEALTH, KIND_DELIVERY, delivery)
    assert record is not None and first.accepted_at == record.body["acceptedAt"]
    assert before - 1.0 <= first.accepted_at <= after + 1.0  # Cosmos DB's _ts has whole seconds
    again = check_delivery(store, delivery, body, case_id="C-1", event_type="po.updated", at=99999.0)
    assert (first.status, again.status, again.accepted_at) == (None, None, first.accepted_at)
    other = {**body, "data": {"poAmount": "2"}}
    refused = check_delivery(store, delivery, other, case_id="C-1", event_type="po.updated", at=901.0)
    assert refused.status == 409 and refused.refusal is not None and "another body" in refused.refusal


def test_the_reports_of_one_case_get_distinct_stamps_in_the_order_the_store_took_them(store: DocumentStore) -> None:
    """Many acceptances of one case within one second, from racing threads: each gets its own stamp (none
    tie, even where the store's clock has whole seconds), all from the store's clock, and one after
    another they increase."""
    case = f"C-{uuid.uuid4().hex[:8]}"
    before = store.now()

    def accept(n: int) -> float:
        body = {"type": "po.updated", "caseId": case, "data": {"poAmount": f"{n}.00"}}
        return check_delivery(store, f"{case}-{n}", body, case_id=case, event_type="po.updated", at=0.0).accepted_at

    with ThreadPoolExecutor(max_workers=4) as pool:
        racing = list(pool.map(accept, range(8)))
    assert len(set(racing)) == 8 and min(racing) >= before - 1.0
    one_by_one = [accept(n) for n in range(8, 12)]
    assert one_by_one == sorted(one_by_one) and len(set(one_by_one)) == 4 and min(one_by_one) > max(racing)


def test_an_occurred_at_too_far_ahead_of_the_stores_clock_is_refused_and_nothing_of_it_kept(
    store: DocumentStore,
) -> None:
    """Measured against the store's clock at the record: ``FUTURE_SKEW_SECONDS`` ahead is the limit, named in
    the refusal; the refused delivery leaves no record, so its corrected body is accepted under the same id."""
    now = store.now()
    ahead = datetime.fromtimestamp(now + 400, tz=UTC).isoformat()
    within = datetime.fromtimestamp(now + 200, tz=UTC).isoformat()
    delivery = f"d-{uuid.uuid4().hex[:10]}"
    early = {"type": "po.updated", "caseId": "C-1", "data": {"poAmount": "1", "occurredAt": ahead}}
    refused = check_delivery(
        store, delivery, early, case_id="C-1", event_type="po.updated", at=now, occurred_at=ahead, future_skew=300
    )
    assert refused.status == 400 and refused.refusal is not None and "FUTURE_SKEW_SECONDS=300s" in refused.refusal
    assert store.read(HEALTH, KIND_DELIVERY, delivery) is None
    fixed = {**early, "data": {"poAmount": "1", "occurredAt": within}}
    accepted = check_delivery(
        store, delivery, fixed, case_id="C-1", event_type="po.updated", at=now, occurred_at=within, future_skew=300
    )
    assert (accepted.status, accepted.refusal) == (None, None)
