"""The webhook signature covers the delivery id (docs/design.md#signed-delivery)."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from casekeeper.core.clock import ManualClock
from shared.domain.events import CaseEvent
from shared.handlers.ingress import DELIVERY_HEADER, SIGNATURE_HEADER, Ingress, SignatureError, sign, verify

SECRET = "s3cret-s3cret-s3cret-s3cret-s3cret"
NOW = 1_800_000_000
BODY = json.dumps({"type": "po.updated", "caseId": "C-1", "data": {"poAmount": "900.00"}}).encode()
ids = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="/\\?#"), min_size=1, max_size=40
)


class Sent:
    """Stands in for the queue: only what was enqueued matters here."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def send(self, event: CaseEvent, *, message_id: str, schedule_at: float | None = None) -> None:
        self.ids.append(message_id)


def post(ingress: Ingress, signature: str, delivery: str) -> int:
    headers = {"Content-Type": "application/json", SIGNATURE_HEADER: signature, DELIVERY_HEADER: delivery}
    return ingress.accept_event(headers, BODY).status


@given(original=ids, replayed=ids)
def test_a_captured_delivery_cannot_be_replayed_under_another_id(original: str, replayed: str) -> None:
    signature = sign(SECRET, BODY, NOW, original)
    verify(signature, BODY, [SECRET], NOW, delivery_id=original)
    if replayed != original:
        with pytest.raises(SignatureError, match="does not match"):
            verify(signature, BODY, [SECRET], NOW, delivery_id=replayed)


def test_a_signature_of_the_body_alone_never_counts() -> None:
    """Only ``v2=`` (time, delivery id and body) is a signature: an HMAC of the body alone could be replayed
    under any other delivery id within the tolerance."""
    body_only = f"t={NOW},v1={hmac.new(SECRET.encode(), f'{NOW}.'.encode() + BODY, hashlib.sha256).hexdigest()}"
    sent = Sent()
    ingress = Ingress([SECRET], sent, ManualClock(NOW))  # type: ignore[arg-type]
    assert post(ingress, body_only, "d-1") == 401
    assert post(ingress, body_only, "d-2") == 401
    assert post(ingress, sign(SECRET, BODY, NOW, "d-3"), "d-3") == 202
    assert sent.ids == ["webhook:d-3"]


@pytest.mark.parametrize("timestamp", ["²", "\uff11\uff12\uff13", "٣", "-1", "1e9", "9" * 40, ""])
def test_a_timestamp_that_is_not_plain_ascii_digits_is_malformed_not_a_crash(timestamp: str) -> None:
    with pytest.raises(SignatureError, match="malformed"):
        verify(f"t={timestamp},v2=00", BODY, [SECRET], NOW, delivery_id="d-1")


def test_the_readme_formula_is_the_signature() -> None:
    message: Any = f"{NOW}.d-1\n".encode() + BODY
    mac = hmac.new(SECRET.encode(), message, hashlib.sha256).hexdigest()
    assert sign(SECRET, BODY, NOW, "d-1") == f"t={NOW},v2={mac}"
