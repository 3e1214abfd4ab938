"""The stand-in model itself: the route and auth the Azure OpenAI SDK uses, its script, and that its
``correct`` answer is the invoice rules' decision (so a chaos run with it must end where the rules do)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.config import MODEL_MIX
from devhost.model_stub import ModelStub, Script, correct
from shared.domain.credit import CreditRequest, decide, position
from shared.domain.invoice import InvoiceFacts, Rules

ROUTE = "/openai/deployments/gpt-x/chat/completions?api-version=2024-10-21"


def ask(stub: ModelStub, headers: dict[str, str]) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": '{"remaining": "0", "outstanding": "0"}'}]}
    return httpx.post(stub.url + ROUTE, json=body, headers=headers, timeout=5)


def test_the_key_or_a_bearer_token_is_required() -> None:
    with ModelStub(api_key="k") as stub:
        assert ask(stub, {}).status_code == 401
        assert ask(stub, {"api-key": "wrong"}).status_code == 401
        assert ask(stub, {"api-key": "k"}).status_code == 200
        assert ask(stub, {"Authorization": "Bearer t"}).status_code == 200
        assert [c["auth"] for c in stub.calls()] == [None, None, "key", "bearer"]


def test_a_script_with_an_unknown_mode_is_refused_and_the_old_one_kept() -> None:
    with ModelStub() as stub:
        stub.script.replace({"steps": [{"mode": "throttle", "retryAfter": 7}]})
        refused = httpx.post(stub.url + "/_control/script", json={"steps": [{"mode": "teleport"}]}, timeout=5)
        assert refused.status_code == 400 and "unknown mode 'teleport'" in refused.json()["error"]["message"]
        throttled = ask(stub, {"api-key": "k"})
        assert throttled.status_code == 429 and throttled.headers["Retry-After"] == "7"
        assert ask(stub, {"api-key": "k"}).status_code == 200  # the script is spent: the default answers


def test_a_seeded_mix_repeats_and_holds_only_transient_failures_for_chaos() -> None:
    one, two = Script(mix=MODEL_MIX, seed=5), Script(mix=MODEL_MIX, seed=5)
    assert [one.next() for _ in range(50)] == [two.next() for _ in range(50)]
    assert set(MODEL_MIX) == {"correct", "throttle", "error", "slow"}
    modes = {Script(mix=MODEL_MIX, seed=5).next()["mode"] for _ in range(1)} | {one.next()["mode"] for _ in range(200)}
    assert modes == set(MODEL_MIX)


amounts = st.decimals(min_value=Decimal("0.00"), max_value=Decimal("3000.00"), places=2)


@settings(max_examples=200, deadline=None)
@given(invoice=amounts, po=amounts, requested=st.lists(amounts, max_size=3), tolerance=amounts)
def test_correct_is_the_rules_decision(
    invoice: Decimal, po: Decimal, requested: list[Decimal], tolerance: Decimal
) -> None:
    facts = InvoiceFacts.from_dict(
        {
            "invoiceId": "I",
            "supplierId": "S",
            "poNumber": "P",
            "invoiceAmount": str(invoice),
            "poAmount": str(po),
            "currency": "EUR",
        }
    )
    requests = [CreditRequest(f"k{i}", a, decided_on_version=1, known=True) for i, a in enumerate(requested) if a]
    pos = position(facts, requests)
    rules = Rules(tolerance=tolerance)
    expected = decide(facts, pos, rules)
    money = pos.to_json()
    prompt: dict[str, Any] = {
        "facts": facts.to_dict(),
        "remaining": money["remaining"],
        "outstanding": money["outstanding"],
        "tolerance": str(tolerance),
    }
    answer = correct(prompt)
    assert answer["action"] == expected.action.value
    if expected.amount is not None:
        assert Decimal(answer["amount"]) == expected.amount and answer["currency"] == "EUR"


@pytest.mark.parametrize("mode", ["malformed", "refusal", "over", "wrong_currency", "missing_field"])
def test_every_wrong_answer_is_a_200_chat_completion(mode: str) -> None:
    with ModelStub() as stub:
        stub.script.replace({"steps": [{"mode": mode}]})
        reply = ask(stub, {"api-key": "k"})
        assert reply.status_code == 200
        assert reply.json()["object"] == "chat.completion" and reply.json()["usage"]["prompt_tokens"] > 0
