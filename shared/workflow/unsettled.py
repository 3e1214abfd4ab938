"""Before a case is decided again: what its earlier effects left unsettled (rules R3, R4; F5).

Deciding on top of an effect whose commit never landed would ignore what it did; deciding on top of an
effect whose outcome nobody knows could act a second time under a new key. :func:`settle_first` looks
at the case's effects and says whether the decision may go ahead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from shared.core.cases import Case
from shared.core.errors import EffectInFlight
from shared.core.ledger import OPEN_STATUSES, Effect, EffectStatus
from shared.workflow.actions import credit_request_data
from shared.workflow.deps import WorkflowDeps
from shared.workflow.messages import RunOutcome


async def settle_first(deps: WorkflowDeps, case: Case, effects: Sequence[Effect]) -> RunOutcome | None:
    """``None``: nothing is unsettled, decide. Otherwise the run's outcome instead of a decision:

    - a ``done`` effect whose status commit never landed (a crash between the two writes: the case's
      gate is still open on it) has its commit finished now (or the case handed to a person);
    - an effect without a known outcome past its call timeout waits for reconciliation (or a person).

    Raises ``EffectInFlight`` when another attempt may be mid-call: the caller looks again later.
    """
    gate = case.gate
    unfinished = [e for e in effects if gate and e.key == gate.effect_key and e.status is EffectStatus.DONE]
    for effect in unfinished:
        finished = await asyncio.to_thread(deps.finisher.finish, effect, data=credit_request_data(effect))
        if finished.outcome in ("committed", "needs_review"):
            after = finished.case
            if after is None:
                after = await asyncio.to_thread(deps.cases.require, case.id)
            detail = f"finished the commit of effect {effect.key[:12]} a crash had left ({finished.outcome})"
            return RunOutcome(after.id, "committed", after.status, after.version, detail, effect.key)
    for effect in (e for e in effects if e.status in OPEN_STATUSES):
        # By the store's clock (on Cosmos DB, itself a round trip): off the event loop.
        remaining = await asyncio.to_thread(deps.ledger.in_flight_for, effect)
        if remaining is not None:
            raise EffectInFlight(key=effect.key, case_id=effect.case_id, action=effect.action, retry_after=remaining)
        detail = (
            f"effect {effect.action} ({effect.key[:12]}, decided on v{effect.case_version}) is "
            f"{effect.status.value}: it is settled before the case is decided again"
        )
        return RunOutcome(case.id, "waiting_for_reconciliation", case.status, case.version, detail, effect.key)
    return None
