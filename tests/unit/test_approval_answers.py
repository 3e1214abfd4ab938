"""A rejection's reason: carried by the event, checked when given."""

from __future__ import annotations

import pytest

from shared.domain import events as ev
from shared.errors import InvalidEvent


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
