"""Before a case is decided again: what its earlier effects left unsettled (rules R3, R4).

Deciding on top of an effect whose outcome nobody knows could act a second time under a new key. The guard's
:meth:`~casekeeper.Guard.settle` says whether one is there; :func:`settle_first` turns its answer into the
run's outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from casekeeper import Case, Effect, NeedsReconciliation
from shared.workflow.deps import WorkflowDeps
from shared.workflow.messages import RunOutcome


async def settle_first(deps: WorkflowDeps, case: Case, effects: Sequence[Effect]) -> RunOutcome | None:
    """``None``: nothing is unsettled, decide. Otherwise the run's outcome instead of a decision: an effect
    without a known outcome past its call timeout, of any version (this case waits even for its current
    decision's own), waits for reconciliation (or a person).

    Raises ``EffectInFlight`` when another attempt may be mid-call: the caller looks again later.
    """
    guard, _ = deps.guarded
    try:
        # By the store's clock (on Cosmos DB, itself a round trip): off the event loop.
        await asyncio.to_thread(guard.settle, case.id, case=case, effects=effects, include_current=True)
    except NeedsReconciliation as exc:
        effect = next((e for e in effects if e.key == exc.key), None)
        on = f", decided on v{effect.case_version}" if effect is not None else ""
        state = effect.status.value if effect is not None else "unsettled"
        detail = f"effect {exc.action} ({exc.key[:12]}{on}) is {state}: it is settled before the case is decided again"
        return RunOutcome(case.id, "waiting_for_reconciliation", case.status, case.version, detail, exc.key)
    return None
