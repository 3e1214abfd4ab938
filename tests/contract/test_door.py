"""What the door remembers (``shared.handlers.door``), on every backend: a delivery id keeps the body it was
first accepted with, and an approval request keeps its first answer, whatever order requests come in."""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from casekeeper.core.ports import DocumentStore
from shared.handlers.door import body_digest, check_delivery, claim_answer, record_delivery

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
        record_delivery(store, delivery, body, case_id="C-1", event_type=str(body["type"]), at=0.0) is None
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


def test_a_delivery_seen_again_carries_the_stamp_of_its_first_acceptance(store: DocumentStore) -> None:
    """One delivery is one report, stamped once: the same body again gets the first stamp back, however
    late; another body is refused."""
    delivery, body = f"d-{uuid.uuid4().hex[:10]}", {"type": "po.updated", "caseId": "C-1", "data": {"poAmount": "1"}}
    first = check_delivery(store, delivery, body, case_id="C-1", event_type="po.updated", at=10.0, accepted_at=10.5)
    again = check_delivery(store, delivery, body, case_id="C-1", event_type="po.updated", at=900.0, accepted_at=900.5)
    assert (first.refusal, first.accepted_at) == (None, 10.5)
    assert (again.refusal, again.accepted_at) == (None, 10.5)
    other = {**body, "data": {"poAmount": "2"}}
    refused = check_delivery(
        store, delivery, other, case_id="C-1", event_type="po.updated", at=901.0, accepted_at=901.5
    )
    assert refused.refusal is not None and "another body" in refused.refusal
