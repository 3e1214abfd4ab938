"""What the guard writes, as readers see it, and the parts a guard is assembled from.

A record's ``history`` is a tuple of :class:`Transition` (a person's :class:`Answer` among its fields); an
effect's ledger row is an :class:`Effect`. These are the read side of the guard: an application shows them
(a case page, an operator command) and decides on them (``decision.done()``), but writes through
:class:`~casekeeper.Guard`.

:class:`RecordRepository` (``guard.records``) and :class:`Ledger` (``guard.ledger``) are the guard's two
parts. An application that configures them itself (its telemetry observer, crash-test probes, alert sink,
send margin) builds them and assembles its guard with :meth:`~casekeeper.Guard.from_parts`; it reads
through them (``records.get``, ``ledger.for_case``) and notes on a record (``records.note``).
"""

from __future__ import annotations

from shared.core.cases import Answer, Gate, Transition
from shared.core.cases import CaseRepository as RecordRepository
from shared.core.keys import approval_request_id, effect_key
from shared.core.ledger import OPEN_STATUSES, AlertSink, Effect, EffectStatus, Ledger
from shared.core.reconcile import RECONCILED_SUFFIX, RecheckResult

__all__ = [
    "OPEN_STATUSES",
    "RECONCILED_SUFFIX",
    "AlertSink",
    "Answer",
    "Effect",
    "EffectStatus",
    "Gate",
    "Ledger",
    "RecheckResult",
    "RecordRepository",
    "Transition",
    "approval_request_id",
    "effect_key",
]
