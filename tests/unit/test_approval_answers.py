"""A rejection's reason: carried by the event, kept across old checkpoints, read back from the history."""

from __future__ import annotations

import pickle

import pytest

from casekeeper.core.reconcile import RECONCILED_SUFFIX
from shared.domain import events as ev
from shared.errors import InvalidEvent
from shared.operator.cases import DECISION_REASON
from shared.workflow.messages import ApprovalAnswer


def answer(**data: object) -> dict[str, object]:
    base = {"requestId": "apr-1", "decision": "reject", "caseVersion": 2, "approver": "ana"}
    return {"type": ev.APPROVAL_ANSWERED, "caseId": "C-1", "data": {**base, **data}}


def test_the_reason_is_optional_and_checked_when_given() -> None:
    assert "reason" not in ev.parse_event(answer()).data
    assert ev.parse_event(answer(reason="duplicate invoice")).data["reason"] == "duplicate invoice"
    with pytest.raises(InvalidEvent) as refused:
        ev.parse_event(answer(reason=""))
    assert refused.value.fields == {"data.reason": "must be a non-empty string"}
    with pytest.raises(InvalidEvent):
        ev.parse_event({**answer(), "type": ev.CASE_INVESTIGATE, "data": {"reason": "x"}})  # only on answers


def test_an_answer_pickled_before_the_reason_existed_still_loads() -> None:
    old = ApprovalAnswer("apr-1", "approve", 2, "ana")
    del old.__dict__["reason"]  # as a checkpoint written by the previous build holds it
    loaded = pickle.loads(pickle.dumps(old))
    assert loaded.reason is None and loaded.approver == "ana"


@pytest.mark.parametrize(
    ("reason", "groups"),
    [
        ("approved by ana@example.com", ("approved", "ana@example.com", None)),
        ("rejected by key:bot", ("rejected", "key:bot", None)),
        ("rejected by ana (reason: duplicate invoice)", ("rejected", "ana", "duplicate invoice")),
        (f"rejected by ana (reason: dup) {RECONCILED_SUFFIX}", ("rejected", "ana", "dup")),
        (f"approved by ana {RECONCILED_SUFFIX}", ("approved", "ana", None)),
    ],
)
def test_case_show_reads_who_and_why_from_the_commit_reason(reason: str, groups: tuple[str | None, ...]) -> None:
    match = DECISION_REASON.match(reason)
    assert match is not None and match.groups() == groups
