"""What a guarded effect is called with and returns: the call contract, the decision it runs on, its result.

:class:`Decision` is made by :meth:`~casekeeper.Guard.decide`, :meth:`~casekeeper.Guard.pinned` or an approval;
:class:`Settled` by :meth:`~casekeeper.Guard.settle`; :class:`EffectResult` by running a declared effect
(:class:`~casekeeper.GuardedEffect`, in :mod:`casekeeper.guard`). The call contract (:data:`Call`,
:data:`Lookup`) is in docs/guard.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from casekeeper.core.cases import Case
from casekeeper.core.effect import Effect, EffectStatus

CallResult = Mapping[str, Any]
"""What a guarded call returns and a lookup finds: a JSON object, the downstream's record of the effect."""


class Call(Protocol):
    """A guarded call: ``call(key, args)``, declared with :meth:`Guard.effect` or :meth:`Guard.register`.

    ``key`` (64 hex characters) is the same for every attempt of one decision (and part): forward it as the
    downstream's idempotency key. ``args`` are the JSON arguments given to :meth:`GuardedEffect.run`, as
    stored in the ledger (a reconciliation retry calls again with them, maybe in another process). Returns
    a JSON object (the downstream's record of the effect). Raises ``DownstreamRejected`` for a definite
    refusal and ``OutcomeUnknown`` (or anything else) when it cannot tell whether the effect happened.
    May be ``async``. Any function or method of this shape is one; parameter names are free."""

    def __call__(self, key: str, args: Mapping[str, Any], /) -> CallResult | Awaitable[CallResult]:
        """Make the effect under idempotency key ``key`` with ``args``."""
        ...


class Lookup(Protocol):
    """``lookup(key)``: how reconciliation asks the downstream what became of the effect made with ``key``.

    Returns the downstream's record of it (a JSON object), ``None`` when the downstream has none (it was
    never made, so a same-key retry is safe where declared); raises ``OutcomeUnknown`` when it cannot tell
    (the lookup is tried again later, and escalated after repeated failures). May be ``async``."""

    def __call__(self, key: str, /) -> CallResult | Awaitable[CallResult | None] | None:
        """The downstream's record of the effect made with ``key``, or ``None``."""
        ...


CommitData = Callable[[Effect], Mapping[str, Any]]
"""``commit_data_from(effect)``: the case's ``data`` fields written with the commit, given the whole ledger row
(key, request, result)."""
Trace = Callable[[str, Mapping[str, Any]], AbstractContextManager[Any]]
"""``trace(name, attributes)``: a context manager around each stage of running an effect, for an
application's tracing (an OpenTelemetry span, say): ``effect <action>`` (the claim, the gate, the call,
the outcome) and then ``commit_status`` (the commit it leads to). Attributes: ``casekeeper.case_id``,
``casekeeper.case_version``, ``casekeeper.effect_key``; if what the commit's context yields has
``set_attribute``, the guard sets ``casekeeper.committed`` on it."""
Escalate = Callable[[str, dict[str, Any]], object]
"""``on_escalate(message, fields)``: a person must settle an effect (fields: caseId,
effectKey, action, reason)."""


@dataclass(frozen=True)
class Decision:
    """A decision pinned to one version of one case, from :meth:`Guard.decide` or an approval.

    ``effects`` are the case's effects of earlier versions (this decision's own, on ``version``, are
    left out: they are the ones this decision will replay). ``approval`` is the answered approval this
    decision carries (``None`` when it was not approved by a person)."""

    case: Case
    effects: tuple[Effect, ...] = ()
    approval: dict[str, Any] | None = None
    guard_id: int = field(default=0, repr=False)
    pinned_version: int | None = None
    """Set by :meth:`Guard.pinned`: the version decided on, when the case read since may be newer."""

    @property
    def case_id(self) -> str:
        """The case's id."""
        return self.case.id

    @property
    def version(self) -> int:
        """The version this decision is pinned to: its effects' keys and commits are on this version."""
        return self.case.version if self.pinned_version is None else self.pinned_version

    def to_json(self) -> dict[str, Any]:
        """What to carry in a workflow message (plain JSON): give it back to :meth:`Guard.pinned`."""
        return {"caseId": self.case_id, "version": self.version, "approval": self.approval}

    @property
    def facts(self) -> dict[str, Any]:
        """The case's facts at :attr:`version`."""
        return self.case.facts

    def done(self, action: str | None = None) -> list[Effect]:
        """Earlier ``done`` effects (of ``action``, or all), oldest first: what was already done for the
        case, for instance to subtract amounts already refunded."""
        return [e for e in self.effects if e.status is EffectStatus.DONE and action in (None, e.action)]


@dataclass(frozen=True)
class EffectResult:
    """What :meth:`GuardedEffect.run` returns for an effect that happened.

    ``result`` is the call's JSON result (recorded in the ledger); ``replayed`` is True when it came from
    the ledger and no call was made now. ``commit`` says what happened to the case: ``committed`` (now),
    ``already`` (an earlier attempt committed it), ``needs_review`` (the case moved on before the commit:
    handed to a person) or ``with_person`` (a person has it already). ``case`` is the case after."""

    key: str
    result: dict[str, Any]
    replayed: bool
    commit: str
    case: Case | None


@dataclass(frozen=True)
class Settled:
    """What :meth:`Guard.settle` found: the ``case`` and its ``effects`` as they are now, none of an earlier
    version without a known outcome."""

    case: Case
    effects: tuple[Effect, ...]
