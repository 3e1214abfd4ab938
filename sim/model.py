"""A scripted model: the proposer the simulator controls, in place of a language model.

A real model can be steered by an invoice's text into any amount; the guard must hold whatever it proposes.
The script says, proposal by proposal, what the "model" does with what the invoice rules would propose
(``shared.domain.credit.decide``):

- ``whole``: the rules' proposal as it is;
- ``split``: a credit-note request for just under the approval threshold (999.00 of 1400.00), so the
  rest comes in a later proposal;
- ``part``: a third of the amount, rounded to the cent;
- ``over``: more than may be requested (the guard's validation must refuse it);
- ``review``: a person's review.

Past its script, the "model" draws each proposal's mode from the world's seeded generator (mostly ``whole``),
as a model steered by an invoice's text would. It makes no network call.
"""

from __future__ import annotations

import random
from dataclasses import replace
from decimal import Decimal

from shared.domain.credit import Position, decide
from shared.domain.invoice import Action, InvoiceFacts, Proposal, Rules

SCRIPTS = ("whole", "split", "part", "over", "review")
UNSCRIPTED = (("whole", 12), ("split", 4), ("part", 2), ("over", 1), ("review", 1))
"""How often each mode comes when the script is empty."""
CENT = Decimal("0.01")


class ScriptedModel:
    name = "model"
    label = "model sim-script"
    calls_model = True

    def __init__(self, rng: random.Random) -> None:
        self.script: list[str] = []
        self.rng = rng

    async def propose(self, case_id: str, facts: InvoiceFacts, pos: Position, rules: Rules) -> Proposal:
        proposal = decide(facts, pos, rules)
        if self.script:
            mode = self.script.pop(0)
        else:
            mode = self.rng.choices([m for m, _ in UNSCRIPTED], [w for _, w in UNSCRIPTED])[0]
        if mode == "review":
            return Proposal(Action.NEEDS_REVIEW, rationale="the model asks a person")
        if proposal.action is not Action.REQUEST_CREDIT_NOTE or proposal.amount is None:
            return proposal
        amount = proposal.amount
        if mode == "split" and amount > rules.approval_threshold:
            amount = rules.approval_threshold - Decimal("1.00")
        elif mode == "part" and amount >= Decimal("0.03"):
            amount = (amount / 3).quantize(CENT)
        elif mode == "over":
            amount = amount + Decimal("100.00")
        return replace(proposal, amount=amount, rationale=f"{proposal.rationale} (model: {mode})")
