"""What the guard writes, as readers see it: records' transitions, ledger effects, keys.

A record's ``history`` is a tuple of :class:`Transition`; an effect's ledger row is an :class:`Effect`.
These are the read side of the guard: an application shows them (a case page, an operator command) and
decides on them (``decision.done()``), but writes only through :class:`~casekeeper.Guard`.
"""

from __future__ import annotations

from shared.core.cases import Answer, Gate, Transition
from shared.core.keys import approval_request_id, effect_key
from shared.core.ledger import OPEN_STATUSES, Effect, EffectStatus
from shared.core.reconcile import RECONCILED_SUFFIX, RecheckResult

__all__ = [
    "OPEN_STATUSES",
    "RECONCILED_SUFFIX",
    "Answer",
    "Effect",
    "EffectStatus",
    "Gate",
    "RecheckResult",
    "Transition",
    "approval_request_id",
    "effect_key",
]
