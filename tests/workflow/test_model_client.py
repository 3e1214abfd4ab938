"""The model path through the real client: Agent Framework's Azure OpenAI chat client, over loopback, to the
local stand-in model (``shared.localhost.model_stub``), which answers as the scripted case asks.

Covered here: every wrong answer ends in ``needs_review`` with a plain reason and no supplier call; the
decision records who proposed it; the SDK neither retries nor sleeps; the token comes from an async
credential that never blocks the loop; tokens, model and deployment reach the span and the metrics.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from casekeeper.capture import uninstall
from casekeeper.core.ports import DocumentStore
from shared.app import bootstrap
from shared.app.telemetry import Telemetry
from shared.domain import events as ev
from shared.domain.credit import position
from shared.domain.invoice import InvoiceFacts, Rules
from shared.errors import ModelUnavailable
from shared.localhost.model_stub import ModelStub
from shared.localhost.supplier_stub import SupplierStub
from shared.operator.cases import _transition_line
from shared.workflow.model_client import ModelConfig
from shared.workflow.proposers import AgentProposer
from tests.support.app import make_harness
from tests.support.invoices import invoice
from tests.support.supplier import posts
from tests.triggers.conftest import settings_for

KEY = "stub-key"


@pytest.fixture
def model() -> Iterator[ModelStub]:
    with ModelStub(api_key=KEY) as stub:
        yield stub


def proposer(model: ModelStub, *, timeout: float = 5.0, **kwargs: Any) -> AgentProposer:
    config = ModelConfig(model.url, "gpt-stub", api_key=kwargs.pop("api_key", KEY), timeout=timeout)
    return AgentProposer.from_config(config, **kwargs)


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("over", "amount 200.00 exceeds what may still be requested, 100.00"),
        ("wrong_currency", "does not match"),
        ("malformed", "the model's answer is not a valid proposal: not a JSON object"),
        ("missing_field", "the model's answer is not a valid proposal: action: Field required"),
        ("refusal", "the model refused: I can't help with approving payments."),
        (
            {"mode": "answer", "content": {"action": "request_credit_note", "amount": "99.995", "currency": "EUR"}},
            "the model's answer is not a valid proposal: rationale: Field required",
        ),
        (
            {
                "mode": "answer",
                "content": {"action": "request_credit_note", "amount": "99.995", "currency": "EUR", "rationale": "r"},
            },
            "two decimal places",
        ),
        ({"mode": "answer", "content": {"action": "approve", "rationale": "r"}}, "approve proposed but 100.00 remains"),
    ],
    ids=["over", "wrong-currency", "malformed", "missing-field", "refusal", "no-rationale", "sub-cent", "approve"],
)
def test_a_wrong_answer_goes_to_review_with_a_plain_reason_and_calls_nobody(
    store: DocumentStore, supplier: SupplierStub, model: ModelStub, mode: str | dict[str, Any], reason: str
) -> None:
    model.script.replace({"steps": [mode if isinstance(mode, dict) else {"mode": mode}]})
    app = make_harness(store, supplier.url, proposer=proposer(model))
    result = app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    assert (result.outcome, result.status) == ("committed", "needs_review")
    last = app.cases.require("C-1").history[-1]
    assert reason in (last.reason or "")
    # Not pydantic's text: it quotes the model's output and links to its documentation.
    assert "input_value" not in (last.reason or "") and "errors.pydantic.dev" not in (last.reason or "")
    assert last.proposed_by == "model gpt-stub"
    assert posts(supplier) == []
    [call] = model.calls()
    assert call["auth"] == "key" and call["responseFormat"] == "json_schema"
    assert (call["prompt"]["overBilled"], call["prompt"]["remaining"]) == ("100.00", "100.00")


def test_the_decision_says_who_proposed_it(store: DocumentStore, supplier: SupplierStub, model: ModelStub) -> None:
    by_model = make_harness(store, supplier.url, proposer=proposer(model))
    assert by_model.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00")).status == "credit_requested"
    assert by_model.cases.require("C-1").history[-1].proposed_by == "model gpt-stub"
    assert by_model.cases.require("C-1").to_body()["history"][-1]["proposedBy"] == "model gpt-stub"
    by_rules = make_harness(store, supplier.url)
    assert by_rules.handle(ev.INVOICE_RECEIVED, "C-2", **invoice("1000.00")).status == "approved"
    assert by_rules.cases.require("C-2").history[-1].proposed_by == "rules"
    # Over the approval threshold: the pause is the proposer's decision too.
    assert by_rules.handle(ev.INVOICE_RECEIVED, "C-3", **invoice("3000.00")).status == "awaiting_approval"
    assert by_rules.cases.require("C-3").history[-1].proposed_by == "rules"
    # What `casekeeper case show` prints for each.
    model_line, rules_line = (
        _transition_line({**t, "proposedBy": t.get("proposedBy")})
        for t in (
            by_model.cases.require("C-1").to_body()["history"][-1],
            by_rules.cases.require("C-2").to_body()["history"][-1],
        )
    )
    assert "[proposed by model gpt-stub]" in model_line and "[by the rules]" in rules_line


def propose_once(p: AgentProposer) -> Any:
    facts = InvoiceFacts.from_dict(invoice("1100.00"))
    return p.propose("C-1", facts, position(facts, []), Rules())


def test_the_sdk_neither_retries_nor_sleeps_on_retry_after(model: ModelStub) -> None:
    """The SDK's default: two retries, each after the service's Retry-After (up to 120 s). Here: one call,
    and the wait handed back as data for the event's delayed copy."""
    model.script.replace({"steps": [{"mode": "throttle", "retryAfter": 120}] * 3})
    started = time.monotonic()
    with pytest.raises(ModelUnavailable) as raised:
        asyncio.run(propose_once(proposer(model)))
    assert time.monotonic() - started < 30  # far below the 120 s the SDK would have slept
    assert (raised.value.kind, raised.value.status, raised.value.retry_after) == ("throttled", 429, 120.0)
    assert len(model.calls()) == 1


def test_a_rejected_key_is_a_token_failure_to_retry_later(model: ModelStub) -> None:
    with pytest.raises(ModelUnavailable) as raised:
        asyncio.run(propose_once(proposer(model, api_key="wrong-key")))
    assert (raised.value.kind, raised.value.status) == ("token", 401)


class NoTokenCredential:
    """An async credential with no identity to give (no managed identity here, none signed in)."""

    async def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        from azure.core.exceptions import ClientAuthenticationError

        raise ClientAuthenticationError("ManagedIdentityCredential: no identity endpoint")

    async def close(self) -> None:
        pass


def test_no_token_is_a_failure_to_retry_later_and_nothing_is_sent(model: ModelStub) -> None:
    with pytest.raises(ModelUnavailable) as raised:
        asyncio.run(propose_once(proposer(model, api_key=None, credential=NoTokenCredential())))
    assert raised.value.kind == "token" and "no identity endpoint" in raised.value.reason
    assert model.calls() == []


class SlowAsyncCredential:
    """An async token credential whose token endpoint takes ``delay`` seconds (a stand-in for the managed
    identity endpoint: none runs here). It only awaits, so a loop that is not blocked keeps running."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.scopes: list[str] = []

    async def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.scopes.extend(scopes)
        await asyncio.sleep(self.delay)
        return AccessToken("token-from-identity", int(time.time()) + 3600)

    async def close(self) -> None:
        pass

    async def __aenter__(self) -> SlowAsyncCredential:
        return self

    async def __aexit__(self, *args: object) -> None:
        pass


def test_without_a_key_the_async_identity_credential_fetches_the_token_off_the_loop(
    model: ModelStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key: ``azure.identity.aio.DefaultAzureCredential`` (replaced here by a slow one of the same kind)
    gives a bearer token; while it takes 0.5 s the event loop keeps serving other work."""
    import azure.identity.aio

    credential = SlowAsyncCredential(0.5)
    monkeypatch.setattr(azure.identity.aio, "DefaultAzureCredential", lambda: credential)

    async def run() -> tuple[Any, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.02)
                ticks += 1

        task = asyncio.create_task(ticker())
        proposal = await propose_once(proposer(model, api_key=None))
        task.cancel()
        return proposal, ticks

    proposal, ticks = asyncio.run(run())
    assert str(proposal.amount) == "100.00"
    assert credential.scopes == ["https://cognitiveservices.azure.com/.default"]
    assert ticks >= 10, f"the loop was blocked while the token was fetched ({ticks} ticks in 0.5 s)"
    [call] = model.calls()
    assert call["auth"] == "bearer"


def test_tokens_model_and_deployment_are_on_the_propose_span_and_in_the_metrics(
    tmp_path: Path, supplier: SupplierStub, model: ModelStub
) -> None:
    """Wired as in Azure: the settings name the model; the composition root builds the client."""
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    telemetry = Telemetry(tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader]))
    settings = settings_for(
        tmp_path,
        supplier.url,
        AZURE_OPENAI_ENDPOINT=model.url,
        AZURE_OPENAI_DEPLOYMENT="gpt-stub",
        AZURE_OPENAI_API_KEY=KEY,
    )
    svc = bootstrap.build(settings, telemetry=telemetry)
    try:
        result = asyncio.run(svc.ops.worker.handle(ev.CaseEvent(ev.INVOICE_RECEIVED, "C-1", invoice("1100.00"))))
    finally:
        uninstall()
        svc.close()
    assert result.status == "credit_requested"
    [span] = [s for s in spans.get_finished_spans() if s.name == "propose"]
    attributes = dict(span.attributes or {})
    assert attributes["casekeeper.proposer"] == "model"
    assert attributes["gen_ai.request.model"] == "gpt-stub"
    assert attributes["gen_ai.response.model"] == "stub-model"
    assert attributes["gen_ai.usage.input_tokens"] == 180
    assert int(attributes["gen_ai.usage.output_tokens"]) > 0  # type: ignore[arg-type]
    assert attributes["casekeeper.model.outcome"] == "proposed"
    points: dict[tuple[str, str], int] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:  # type: ignore[union-attr]
                    labels = dict(point.attributes or {})
                    key = str(labels.get("gen_ai.token.type") or labels.get("casekeeper.model.outcome"))
                    points[(metric.name, key)] = int(point.value)  # type: ignore[union-attr]
    assert points[("casekeeper.model.tokens", "input")] == 180
    assert points[("casekeeper.model.tokens", "output")] == attributes["gen_ai.usage.output_tokens"]
    assert points[("casekeeper.model.calls", "proposed")] == 1


class Crash(BaseException):
    """Stands for the process dying at a failure point: nothing below the probe runs."""


def test_a_crash_after_the_model_answered_resumes_without_asking_it_again(
    store: DocumentStore, supplier: SupplierStub, model: ModelStub
) -> None:
    """Through the real client: the model is asked once; the restarted worker resumes from the checkpoint
    written after its answer, and the supplier is asked once."""

    def die_at_f2(point: str) -> None:
        if point == "F2":
            raise Crash(point)

    dying = make_harness(store, supplier.url, proposer=proposer(model), probe=die_at_f2, call_timeout=1.0)
    with pytest.raises(Crash):
        dying.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    assert len(model.calls()) == 1 and posts(supplier) == []
    time.sleep(1.2)  # the claim F2 left ages past the call timeout: the resumed run settles it by key
    restarted = make_harness(store, supplier.url, proposer=proposer(model), call_timeout=1.0)
    restarted.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    assert len(model.calls()) == 1  # resumed: the model was not asked again
