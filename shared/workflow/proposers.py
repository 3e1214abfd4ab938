"""Who proposes: the deterministic rules, or an Agent Framework chat agent. Code validates either way.

The model only ever *proposes*. Its answer is parsed into :class:`ModelProposal` (structured output)
and then checked by :func:`shared.domain.credit.validate` like any other proposal; a malformed or
invalid answer sends the case to ``needs_review`` with the reason, and nothing is executed.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, Field, ValidationError

from shared.core.errors import InvalidProposal
from shared.domain.credit import Position, decide
from shared.domain.invoice import Action, InvoiceFacts, Proposal, Rules, parse_amount

if TYPE_CHECKING:
    from agent_framework import Agent, SupportsChatGetResponse


class Proposer(Protocol):
    name: str

    async def propose(self, case_id: str, facts: InvoiceFacts, pos: Position, rules: Rules) -> Proposal:
        """A proposal for the case, given its facts and where its money stands (``pos``: over-billed,
        received, outstanding, remaining); raises ``InvalidProposal`` when none can be made."""
        ...


class RulesProposer:
    """The default: the invoice rules (``shared.domain.credit.decide``), deterministic."""

    name = "rules"
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
    """Proposals from an Agent Framework ``Agent`` with structured output."""

    name = "model"
    calls_model = True

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    @classmethod
    def from_chat_client(cls, client: SupportsChatGetResponse[Any]) -> AgentProposer:
        from agent_framework import Agent

        return cls(Agent(client, instructions=INSTRUCTIONS, name="invoice-reviewer"))

    @classmethod
    def from_azure_openai(cls, endpoint: str, deployment: str) -> AgentProposer:
        """Identity-based: ``DefaultAzureCredential``, no keys. Creates no connection until first use."""
        from agent_framework.openai import OpenAIChatCompletionClient
        from azure.identity import DefaultAzureCredential

        client = OpenAIChatCompletionClient(
            model=deployment, azure_endpoint=endpoint, credential=DefaultAzureCredential()
        )
        return cls.from_chat_client(client)

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
        try:
            response = await self._agent.run(prompt, options={"response_format": ModelProposal})
            value = response.value
        except (ValidationError, ValueError) as exc:
            raise InvalidProposal(f"the model's answer is not a valid proposal: {exc}", case_id=case_id) from exc
        if not isinstance(value, ModelProposal):
            raise InvalidProposal("the model gave no structured proposal", case_id=case_id)
        amount: Decimal | None = None
        if value.amount is not None:
            try:
                amount = parse_amount(value.amount, "amount")
            except ValueError as exc:
                raise InvalidProposal(str(exc), case_id=case_id, proposal=value.model_dump()) from exc
        return Proposal(Action(value.action), amount=amount, currency=value.currency, rationale=value.rationale)
