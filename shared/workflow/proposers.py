"""Who proposes: the deterministic rules, or an Agent Framework chat agent. Code validates either way.

The model only ever *proposes*. Its answer is parsed into :class:`ModelProposal` (structured output)
and then checked by :func:`shared.domain.credit.validate` like any other proposal; a malformed or
invalid answer, a refusal or the content filter sends the case to ``needs_review`` with the reason (the
model's own words for a refusal), and nothing is executed. A model that cannot answer now (throttled,
failing, slow, no token) raises ``ModelUnavailable``: the event is retried later, never dead-lettered
for it (``shared.workflow.model_client`` classifies the client's errors).

Each proposer has a ``label`` that the committed decision records (``Transition.proposed_by``):
``rules``, or ``model <deployment>``.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, Protocol

from opentelemetry import trace
from pydantic import BaseModel, Field, ValidationError

from shared.domain.credit import Position, decide
from shared.domain.invoice import Action, InvoiceFacts, Proposal, Rules, parse_amount
from shared.errors import InvalidProposal, ModelUnavailable
from shared.ports import ModelCall, ModelObserver
from shared.workflow.model_client import ModelConfig, chat_client, classify

if TYPE_CHECKING:
    from agent_framework import Agent, AgentResponse, SupportsChatGetResponse


class Proposer(Protocol):
    name: str
    label: str
    """What the committed decision records as its author: ``rules`` or ``model <deployment>``."""

    async def propose(self, case_id: str, facts: InvoiceFacts, pos: Position, rules: Rules) -> Proposal:
        """A proposal for the case, given its facts and where its money stands (``pos``: over-billed,
        received, outstanding, remaining); raises ``InvalidProposal`` when none can be made."""
        ...


class RulesProposer:
    """The default: the invoice rules (``shared.domain.credit.decide``), deterministic."""

    name = "rules"
    label = "rules"
    calls_model = False
    """Deciding again costs nothing: no checkpoint is written to avoid it."""

    async def propose(self, case_id: str, facts: InvoiceFacts, pos: Position, rules: Rules) -> Proposal:
        return decide(facts, pos, rules)


class ModelProposal(BaseModel):
    """The structured output the model must produce."""

    action: Literal["approve", "request_credit_note", "await_credit", "needs_review"]
    amount: str | None = Field(default=None, description="decimal string, e.g. '125.40'; only for request_credit_note")
    currency: str | None = Field(default=None, description="ISO currency code; only for request_credit_note")
    rationale: str = Field(description="one sentence: why")


INSTRUCTIONS = """You review supplier invoices against purchase orders.
Given the facts of one case and where its money stands, propose exactly one action:
- "approve" when the remaining amount is within the tolerance and nothing is outstanding;
- "request_credit_note" with an amount of at most "remaining" (invoice - PO - credit notes received -
  credit notes requested and not yet received), in the invoice's currency; never more;
- "await_credit" when credit notes already requested and outstanding cover what was over-billed;
- "needs_review" when a person should look (under-billed, over-credited, or more requested than owed).
Amounts are decimal strings with two decimals. Answer only with the JSON object."""


class AgentProposer:
    """Proposals from an Agent Framework ``Agent`` with structured output.

    ``timeout``: the whole call's budget in seconds (token fetch included); past it the call is
    abandoned and ``ModelUnavailable`` raised. ``observer`` is told of every call (tokens, model,
    outcome); the ``propose`` span, current while the proposer runs, gets the same as attributes."""

    name = "model"
    calls_model = True

    def __init__(
        self,
        agent: Agent | None = None,
        *,
        factory: Callable[[], Agent] | None = None,
        deployment: str = "scripted",
        timeout: float | None = None,
        observer: ModelObserver | None = None,
    ) -> None:
        # A factory builds one agent per event loop: the SDK's connection pool belongs to the loop it
        # first ran on, and a host or a test that runs events on a new loop must not reuse it.
        if (agent is None) == (factory is None):
            raise ValueError("give an agent or a factory of agents, not both")
        self._agent, self._factory = agent, factory
        self._agents: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Agent] = weakref.WeakKeyDictionary()
        self.deployment = deployment
        self.label = f"model {deployment}"
        self._timeout = timeout
        self._observer = observer

    @classmethod
    def from_chat_client(
        cls,
        client: SupportsChatGetResponse[Any],
        *,
        deployment: str = "scripted",
        timeout: float | None = None,
        observer: ModelObserver | None = None,
    ) -> AgentProposer:
        from agent_framework import Agent

        agent = Agent(client, instructions=INSTRUCTIONS, name="invoice-reviewer")
        return cls(agent, deployment=deployment, timeout=timeout, observer=observer)

    @classmethod
    def from_config(
        cls, config: ModelConfig, *, credential: Any | None = None, observer: ModelObserver | None = None
    ) -> AgentProposer:
        """Azure OpenAI with a key or the app's identity (``shared.workflow.model_client.chat_client``)."""
        from agent_framework import Agent

        def agent() -> Agent:
            client = chat_client(config, credential=credential)
            return Agent(client, instructions=INSTRUCTIONS, name="invoice-reviewer")

        return cls(factory=agent, deployment=config.deployment, timeout=config.timeout, observer=observer)

    def _agent_for_this_loop(self) -> Agent:
        if self._factory is None:
            assert self._agent is not None
            return self._agent
        loop = asyncio.get_running_loop()
        agent = self._agents.get(loop)
        if agent is None:
            agent = self._agents[loop] = self._factory()
        return agent

    async def propose(self, case_id: str, facts: InvoiceFacts, pos: Position, rules: Rules) -> Proposal:
        # The model sees the same numbers the validator checks it against (the money rule).
        money = pos.to_json()
        prompt = json.dumps(
            {
                "caseId": case_id,
                "facts": facts.to_dict(),
                "overBilled": money["overBilled"],
                "received": money["received"],
                "outstanding": money["outstanding"],
                "remaining": money["remaining"],
                "tolerance": str(rules.tolerance),
            }
        )
        span = trace.get_current_span()
        span.set_attribute("gen_ai.request.model", self.deployment)
        span.set_attribute("casekeeper.model.deployment", self.deployment)
        agent = self._agent_for_this_loop()  # outside the budget: the first one imports the SDK
        try:
            async with asyncio.timeout(self._timeout):
                response = await agent.run(prompt, options={"response_format": ModelProposal})
        except Exception as exc:
            known: ModelUnavailable | InvalidProposal | None = classify(
                exc, case_id=case_id, deployment=self.deployment
            )
            if known is None and isinstance(exc, ValidationError):  # parsed eagerly by a client
                known = InvalidProposal(
                    f"the model's answer is not a valid proposal: {_problems(exc)}", case_id=case_id
                )
            if known is None:
                raise
            kind = f"unavailable:{known.kind}" if isinstance(known, ModelUnavailable) else "invalid"
            self._observe(case_id, None, kind)
            raise known from exc
        try:
            value = _parse(response, case_id)
        except InvalidProposal:
            self._observe(case_id, response, "invalid")
            raise
        self._observe(case_id, response, "proposed")
        amount: Decimal | None = None
        if value.amount is not None:
            try:
                amount = parse_amount(value.amount, "amount")
            except ValueError as exc:
                raise InvalidProposal(str(exc), case_id=case_id, proposal=value.model_dump()) from exc
        return Proposal(Action(value.action), amount=amount, currency=value.currency, rationale=value.rationale)

    def _observe(self, case_id: str, response: AgentResponse[Any] | None, outcome: str) -> None:
        usage = response.usage_details if response is not None else None
        raw = getattr(response, "raw_representation", None)
        model = getattr(raw, "model", None)
        call = ModelCall(
            case_id,
            self.deployment,
            model if isinstance(model, str) else None,
            (usage or {}).get("input_token_count"),
            (usage or {}).get("output_token_count"),
            outcome,
        )
        span = trace.get_current_span()
        span.set_attribute("casekeeper.model.outcome", outcome)
        for name, value in (
            ("gen_ai.response.model", call.model),
            ("gen_ai.usage.input_tokens", call.input_tokens),
            ("gen_ai.usage.output_tokens", call.output_tokens),
        ):
            if value is not None:
                span.set_attribute(name, value)
        if self._observer is not None:
            self._observer(call)


def _parse(response: AgentResponse[Any], case_id: str) -> ModelProposal:
    """The structured answer, or ``InvalidProposal`` saying plainly why there is none: the model's refusal
    in its own words, the content filter, an answer cut off, not JSON, or which fields are wrong (never
    the pydantic error's text, which quotes the answer)."""
    for message in response.messages:
        for content in message.contents:
            props = getattr(content, "additional_properties", None) or {}
            kind = props.get("model_output_kind") or (props.get("core") or {}).get("model_output_kind")
            if kind == "refusal":
                raise InvalidProposal(
                    f"the model refused: {getattr(content, 'text', '') or '(no words)'}", case_id=case_id
                )
    finish = str(response.finish_reason or "")
    if finish == "content_filter":
        raise InvalidProposal("the model's answer was withheld by the content filter", case_id=case_id)
    if finish == "length":
        raise InvalidProposal("the model's answer was cut off (token limit) before it was complete", case_id=case_id)
    try:
        value = response.value
    except ValidationError as exc:
        raise InvalidProposal(
            f"the model's answer is not a valid proposal: {_problems(exc)}", case_id=case_id
        ) from None
    except ValueError:
        raise InvalidProposal("the model's answer is not a valid proposal: not JSON", case_id=case_id) from None
    if not isinstance(value, ModelProposal):
        raise InvalidProposal("the model gave no structured proposal", case_id=case_id)
    return value


def _problems(exc: ValidationError) -> str:
    problems: list[str] = []
    for error in exc.errors(include_input=False, include_url=False):
        if error["type"] in ("json_invalid", "json_type"):
            problems.append("not a JSON object")
            continue
        where = ".".join(str(part) for part in error["loc"]) or "answer"
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems) or "not a valid proposal"
