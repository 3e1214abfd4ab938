"""What the ledger's writers share: the guarded call's type, the alert sink, and what of the ledger they use.

:class:`~casekeeper.core.ledger.Ledger` runs an effect on its case (``casekeeper.core.on_record``, and
``casekeeper.core.on_record_later`` for the reconciler's and a person's writes) or, for data written before,
as a row of the ``effects`` container (``casekeeper.core.on_rows``). Those modules use the ledger's settings
and the checks both layouts share (the send deadline, the late-outcome report) through :class:`LedgerParts`,
named here rather than imported: the ledger imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from casekeeper.core.cases import CaseRepository
    from casekeeper.core.effect import Effect, EffectStatus
    from casekeeper.core.errors import EffectError
    from casekeeper.core.ports import DocumentStore

Call = Callable[[str], Mapping[str, Any]]
"""A guarded call: receives the effect key (to forward as ``Idempotency-Key``) and returns a JSON
object. It raises ``DownstreamRejected`` for a definite refusal and ``OutcomeUnknown`` (or anything
else) when it cannot tell whether the effect happened."""


class AlertSink(Protocol):
    """Raises an alert, the shape of ``Alerter.raise_alert``: recorded once per kind and ``dedupe_key``."""

    def __call__(self, alert_kind: str, message: str, fields: Mapping[str, Any], *, dedupe_key: str) -> object: ...


class LedgerParts(Protocol):
    """What of :class:`~casekeeper.core.ledger.Ledger` its writers use."""

    _store: DocumentStore
    _cases: CaseRepository
    _call_timeout: float
    _probe: Callable[[str], None]
    _observe: Callable[[str, Effect], None]
    _monotonic: Callable[[], float]

    def _check_send_deadline(self, effect: Effect, claimed_at: float) -> None: ...

    def _outcome_discarded(self, claimed: Effect, current: Effect, status: EffectStatus) -> None: ...

    def _late_outcome_recorded(self, closed: Effect) -> None: ...

    def _alert_left_version(self, effect: Effect, case_version: int, reason: str) -> None: ...

    def _not_done(self, existing: Effect, *, current_version: int | None) -> EffectError: ...

    def get(self, case_id: str, key: str) -> Effect | None: ...

    def age(self, effect: Effect) -> float: ...

    def record_outcome(
        self,
        effect: Effect,
        status: EffectStatus,
        *,
        result: Mapping[str, Any] | None = None,
        reason: str | None = None,
        stale: bool = False,
        source: str,
    ) -> Effect: ...
