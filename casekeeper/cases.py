"""What the guard writes, as readers see it, and the parts a guard is assembled from.

A case's ``history`` is a tuple of :class:`Transition` (a person's :class:`Answer` among its fields); an
effect is an :class:`Effect`: an entry of its case (``entries_of(case)`` lists them without a read) or,
once closed and moved out, a document of the ``effects`` container (the archive).
These are the read side of the guard: an application shows them (a case page, an operator command) and
decides on them (``decision.done()``), but writes through :class:`~casekeeper.Guard`.

:class:`CaseRepository` (``guard.cases``) and :class:`Ledger` (``guard.ledger``) are the guard's two
parts. An application that configures them itself (its telemetry observer, crash-test probes, alert sink,
send margin, the :data:`Watch` that judges every case before it is written) builds them and assembles its
guard with :meth:`~casekeeper.Guard.from_parts`; it reads through them (``cases.get``, ``ledger.for_case``)
and notes on a case (``cases.note``).
:class:`Reconciler` (``guard.reconciler``) re-checks effects with one :class:`ActionPolicy` per declared
effect; an operator tool that records an outcome a person established finishes its commit with it.
"""

from __future__ import annotations

from casekeeper.core.cases import Answer, Case, CaseRepository, Transition, Watch
from casekeeper.core.effect import OPEN_STATUSES, Effect, EffectStatus
from casekeeper.core.entries import CLOSED_KEPT, CommitPlan
from casekeeper.core.entries import effects_of as entries_of
from casekeeper.core.keys import approval_request_id, effect_key
from casekeeper.core.ledger import DEFAULT_CALL_TIMEOUT, DEFAULT_LATE_WATCH, EffectOutcome, Ledger
from casekeeper.core.reconcile import RECONCILED_SUFFIX, ActionPolicy, RecheckResult, Reconciler
from casekeeper.core.watch import AlertSink, Finding

__all__ = [
    "CLOSED_KEPT",
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_LATE_WATCH",
    "OPEN_STATUSES",
    "RECONCILED_SUFFIX",
    "ActionPolicy",
    "AlertSink",
    "Answer",
    "Case",
    "CaseRepository",
    "CommitPlan",
    "Effect",
    "EffectOutcome",
    "EffectStatus",
    "Finding",
    "Ledger",
    "RecheckResult",
    "Reconciler",
    "Transition",
    "Watch",
    "approval_request_id",
    "effect_key",
    "entries_of",
]
