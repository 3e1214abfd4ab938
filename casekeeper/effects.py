"""What a guarded effect is: its declaration, the decision it runs on, and what running it returns.

:class:`GuardedEffect` is made by :meth:`~casekeeper.Guard.effect` (or ``register``); :class:`Decision`
by :meth:`~casekeeper.Guard.decide`, :meth:`~casekeeper.Guard.pinned` or an approval; :class:`Settled` by
:meth:`~casekeeper.Guard.settle`. The call contract (:data:`Call`, :data:`Lookup`) is in docs/guard.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from casekeeper.core.cases import Answer, Case
from casekeeper.core.ledger import Effect, EffectStatus

if TYPE_CHECKING:
    from casekeeper.guard import Guard

Record = Case
"""A record as read from the store: ``id``, ``status``, ``version``, ``facts``, ``data``, ``history``."""

CallResult = Mapping[str, Any]
Call = Callable[[str, Mapping[str, Any]], CallResult | Awaitable[CallResult]]
"""A guarded call: ``call(key, args)``. ``key`` (64 hex characters) is the same for every attempt of one
decision: forward it as the downstream's idempotency key. ``args`` are the JSON arguments given to
:meth:`GuardedEffect.run`. Returns a JSON object (the downstream's record of the effect). Raises
``DownstreamRejected`` for a definite refusal and ``OutcomeUnknown`` (or anything else) when it cannot
tell whether the effect happened. May be ``async``."""
Lookup = Callable[[str], CallResult | Awaitable[CallResult | None] | None]
"""``lookup(key)``: the downstream's record of the effect made with ``key``, ``None`` when it has none;
raises ``OutcomeUnknown`` when it cannot tell. May be ``async``."""
CommitData = Callable[[Effect], Mapping[str, Any]]
"""``commit_data_from(effect)``: record ``data`` fields written with the commit, given the whole ledger row
(key, request, result)."""
Trace = Callable[[str, Mapping[str, Any]], AbstractContextManager[Any]]
"""``trace(name, attributes)``: a context manager around each stage of running an effect, for an
application's tracing (an OpenTelemetry span, say): ``effect <action>`` (the claim, the gate, the call,
the outcome) and then ``commit_status`` (the commit it leads to). Attributes: ``casekeeper.case_id``,
``casekeeper.case_version``, ``casekeeper.effect_key``; if what the commit's context yields has
``set_attribute``, the guard sets ``casekeeper.committed`` on it."""
Escalate = Callable[[str, dict[str, Any]], object]
"""``on_escalate(message, fields)``: a person must settle an effect (fields: recordId, also as caseId,
effectKey, action, reason)."""


@dataclass(frozen=True)
class Decision:
    """A decision pinned to one version of one record, from :meth:`Guard.decide` or an approval.

    ``effects`` are the record's effects of earlier versions (this decision's own, on ``version``, are
    left out: they are the ones this decision will replay). ``approval`` is the answered approval this
    decision carries (``None`` when it was not approved by a person)."""

    record: Record
    effects: tuple[Effect, ...] = ()
    approval: dict[str, Any] | None = None
    guard_id: int = field(default=0, repr=False)
    pinned_version: int | None = None
    """Set by :meth:`Guard.pinned`: the version decided on, when the record read since may be newer."""

    @property
    def record_id(self) -> str:
        """The record's id."""
        return self.record.id

    @property
    def version(self) -> int:
        """The version this decision is pinned to: its effects' keys and commits are on this version."""
        return self.record.version if self.pinned_version is None else self.pinned_version

    def to_json(self) -> dict[str, Any]:
        """What to carry in a workflow message (plain JSON): give it back to :meth:`Guard.pinned`."""
        return {"recordId": self.record_id, "version": self.version, "approval": self.approval}

    @property
    def facts(self) -> dict[str, Any]:
        """The record's facts at :attr:`version`."""
        return self.record.facts

    def done(self, action: str | None = None) -> list[Effect]:
        """Earlier ``done`` effects (of ``action``, or all), oldest first: what was already done for the
        record, for instance to subtract amounts already refunded."""
        return [e for e in self.effects if e.status is EffectStatus.DONE and action in (None, e.action)]


@dataclass(frozen=True)
class EffectResult:
    """What :meth:`GuardedEffect.run` returns for an effect that happened.

    ``result`` is the call's JSON result (recorded in the ledger); ``replayed`` is True when it came from
    the ledger and no call was made now. ``commit`` says what happened to the record: ``committed`` (now),
    ``already`` (an earlier attempt committed it), ``needs_review`` (the record moved on before the commit:
    handed to a person) or ``with_person`` (a person has it already). ``record`` is the record after."""

    key: str
    result: dict[str, Any]
    replayed: bool
    commit: str
    record: Record | None


@dataclass(frozen=True)
class Settled:
    """What :meth:`Guard.settle` found: the ``record`` and its ``effects`` as they are now, and the
    crash-left commits it ``finished`` (each effect with ``committed`` or ``needs_review``)."""

    record: Record
    effects: tuple[Effect, ...]
    finished: tuple[tuple[Effect, str], ...]


class GuardedEffect:
    """One declared effect (see :meth:`Guard.effect`). Run it with :meth:`run` or :meth:`arun`."""

    def __init__(
        self,
        guard: Guard,
        action: str,
        call: Call,
        *,
        commit: str | Callable[[Mapping[str, Any]], str],
        lookup: Lookup | None,
        retry_same_key: bool,
        commit_data: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None,
        commit_data_from: CommitData | None = None,
        flat_request: bool = False,
        review_on_refusal: bool = True,
        retry_args: Callable[[Effect], Mapping[str, Any]] | None = None,
    ) -> None:
        if not action:
            raise ValueError("action must be a non-empty string")
        if not commit:
            raise ValueError(f"effect {action!r} needs a commit: the status the record moves to once it is done")
        if retry_same_key and lookup is None:
            raise ValueError(f"effect {action!r}: retry_same_key needs a lookup (retry only what was not found)")
        self._guard = guard
        self.action = action
        self.call = call
        self._commit = commit
        self.lookup = lookup
        self.retry_same_key = retry_same_key
        if commit_data is not None and commit_data_from is not None:
            raise ValueError(f"effect {action!r}: give commit_data or commit_data_from, not both")
        self._commit_data = commit_data
        self._commit_data_from = commit_data_from
        self.flat_request = flat_request
        self.review_on_refusal = review_on_refusal
        self._retry_args = retry_args
        self.__doc__ = getattr(call, "__doc__", None) or f"Guarded effect {action!r}."

    def __repr__(self) -> str:
        return f"GuardedEffect({self.action!r})"

    def commit_status(self, args: Mapping[str, Any]) -> str:
        """The status the record moves to once the effect made with ``args`` is done."""
        return self._commit(args) if callable(self._commit) else self._commit

    def data_for(self, effect: Effect) -> dict[str, Any]:
        """The record ``data`` fields written with the commit (``commit_data_from(effect)``, or
        ``commit_data(result)``)."""
        if self._commit_data_from is not None:
            return dict(self._commit_data_from(effect))
        if self._commit_data is None or effect.result is None:
            return {}
        return dict(self._commit_data(effect.result))

    def request_for(self, args: Mapping[str, Any], intent: Mapping[str, Any]) -> dict[str, Any]:
        """The ledger row's ``request``: the args (under ``args``, or at the top level for a
        ``flat_request`` effect) and the commit intent (under ``commit``)."""
        if self.flat_request:
            if "commit" in args:
                raise ValueError(f"effect {self.action!r} stores its args flat: no arg may be named 'commit'")
            return {**args, "commit": dict(intent)}
        return {"args": dict(args), "commit": dict(intent)}

    def args_of(self, effect: Effect) -> dict[str, Any]:
        """The args a ledger row was made with: what a same-key retry calls again with (``retry_args``,
        when declared, rebuilds them from the row)."""
        if self._retry_args is not None:
            return dict(self._retry_args(effect))
        if self.flat_request:
            return {k: v for k, v in effect.request.items() if k != "commit"}
        return dict(effect.request.get("args") or {})

    def run(
        self,
        decision: Decision | Mapping[str, Any],
        args: Mapping[str, Any],
        *,
        reason: str | None = None,
        proposed_by: str | None = None,
        answer: Answer | None = None,
        commit_fields: Mapping[str, Any] | None = None,
    ) -> EffectResult:
        """Run the effect for ``decision`` (or its :meth:`Decision.to_json`) at most once, then commit the record.

        Raises ``StaleDecision`` (the record moved since the decision: nothing called; decide again),
        ``EffectFailed`` (definite refusal, now or earlier: the record goes to the guard's review
        status), ``EffectInFlight`` (another attempt may be mid-call: try later), ``NeedsReconciliation``
        (outcome unknown past the call timeout: reconciliation settles it), ``MissingCommitIntent``, and
        re-raises the call's ``OutcomeUnknown`` (or other exception) with the ledger row left ``started``.

        The commit's transition records ``reason``, ``proposed_by`` (who proposed the decision) and
        ``answer`` (the person's answer it commits, if any). ``commit_fields`` are stored in the commit
        intent for your own readers of the ledger; the guard writes them and never reads them.
        """
        decision = self._guard.pin(decision)
        if decision.guard_id not in (0, id(self._guard)):
            raise ValueError("this decision was made by another guard")
        intent = self._intent(args, reason, proposed_by, answer, commit_fields)
        return self._guard._run(
            self, decision.record_id, decision.version, dict(args), intent, loop=None, expected=_read(decision)
        )

    def run_on(
        self,
        record_id: str,
        version: int,
        args: Mapping[str, Any],
        *,
        reason: str | None = None,
        proposed_by: str | None = None,
        answer: Answer | None = None,
        commit_fields: Mapping[str, Any] | None = None,
        record: Record | None = None,
    ) -> EffectResult:
        """:meth:`run` for the decision made on ``version`` of ``record_id``, without reading the record
        first: the version gate is the check (``StaleDecision`` if the record has moved). For a workflow
        step that carries the decided-on version in its message. ``record``: the record as the step last
        read it, if it has it (the claim is then written on it with no read; a record changed since costs
        one re-read)."""
        intent = self._intent(args, reason, proposed_by, answer, commit_fields)
        known = record if record is not None and record.id == record_id and record.version == version else None
        return self._guard._run(self, record_id, version, dict(args), intent, loop=None, expected=known)

    async def arun(
        self,
        decision: Decision | Mapping[str, Any],
        args: Mapping[str, Any],
        *,
        reason: str | None = None,
        proposed_by: str | None = None,
        answer: Answer | None = None,
        commit_fields: Mapping[str, Any] | None = None,
    ) -> EffectResult:
        """:meth:`run` off the event loop; an ``async`` call runs on this loop."""
        loop = asyncio.get_running_loop()
        guard = self._guard

        def run() -> EffectResult:
            pinned = guard.pin(decision)
            if pinned.guard_id not in (0, id(guard)):
                raise ValueError("this decision was made by another guard")
            intent = self._intent(args, reason, proposed_by, answer, commit_fields)
            return guard._run(
                self, pinned.record_id, pinned.version, dict(args), intent, loop=loop, expected=_read(pinned)
            )

        return await asyncio.to_thread(run)

    def _intent(
        self,
        args: Mapping[str, Any],
        reason: str | None,
        proposed_by: str | None,
        answer: Answer | None,
        commit_fields: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        reserved = {"status", "reason", "proposedBy", "answer"} & set(commit_fields or {})
        if reserved:
            raise ValueError(f"commit_fields may not set {sorted(reserved)}: pass them as arguments")
        return {
            **(commit_fields or {}),
            "status": self.commit_status(args),
            "reason": reason or f"{self.action} done",
            **({"proposedBy": proposed_by} if proposed_by else {}),
            **({"answer": answer.to_json()} if answer is not None else {}),
        }


def _read(decision: Decision) -> Record | None:
    """The record as the decision read it, when it is on the decided-on version: the claim is then a
    conditional write on it with no read first (a 412 re-reads)."""
    return decision.record if decision.record.version == decision.version else None
