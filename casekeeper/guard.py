"""The guard: decide on a pinned (record, version), run each external effect at most once, commit it.

A **record** is one business object a workflow acts on (a refund request, an invoice case): a JSON
document with ``id``, ``status``, ``version`` and ``facts``. Every change of status or facts is
conditional on the version and moves it by one (rule R5).

One decision, in four steps::

    decision = guard.decide(record_id)          # pinned to the record's version; settles leftovers first
    ... look at decision.facts, decide ...
    result = refund.run(decision, {"amount": "12.50"})   # at most one call per (record, action, version)
    # result.commit: "committed" | "already" | "needs_review" | "with_person"

The effect's claim and outcome are entries of the record itself (``casekeeper.core.entries``): ``run`` is two
conditional writes of the record, the claim (which is the version gate) and the outcome with its commit.

What :meth:`Guard.decide` settles first (rules R3, R4): a ``done`` effect whose commit a crash left
unfinished (only a record written by the earlier two-container layout can hold one, docs/design.md#f5) has
its commit finished now; an effect of an **earlier** version without a known outcome makes
it refuse (``EffectInFlight`` while another attempt may be mid-call, ``NeedsReconciliation`` after the
call timeout). An open effect of the record's **current** version is this decision's own (a crash after
its claim): it is left out, because running the effect again replays it through the ledger.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from casekeeper import _reconcile, approvals
from casekeeper._numbers import inexact_numbers
from casekeeper.approvals import ApprovalRequest
from casekeeper.clock import SystemClock
from casekeeper.core.cases import CaseRepository
from casekeeper.core.clock import Clock
from casekeeper.core.commits import CommitFinisher
from casekeeper.core.entries import CommitPlan
from casekeeper.core.errors import EffectInFlight, NeedsReconciliation
from casekeeper.core.keys import canonical_json, effect_key
from casekeeper.core.ledger import DEFAULT_CALL_TIMEOUT, OPEN_STATUSES, AlertSink, Effect, EffectStatus, Ledger
from casekeeper.core.ports import DocumentStore
from casekeeper.core.reconcile import RecheckResult, Reconciler
from casekeeper.effects import (
    Call,
    CommitData,
    Decision,
    EffectResult,
    Escalate,
    GuardedEffect,
    Lookup,
    Record,
    Settled,
    Trace,
)

log = logging.getLogger("casekeeper.guard")


@contextmanager
def _no_trace(name: str, attributes: Mapping[str, Any]) -> Iterator[None]:
    yield None


class Guard:
    """The guard over one store: records, effects, approvals, reconciliation.

    ``store``: any :class:`~casekeeper.DocumentStore` (SQLite, Cosmos DB, or one passing the contract
    suite). ``clock`` stamps history for people (defaults to :class:`~casekeeper.SystemClock`); whether an
    effect is still in flight is judged by the **store's** clock. ``call_timeout`` (seconds): a ``started``
    effect younger than this may still be mid-call; older, its outcome is unknown. Set it above the
    call's own client timeout. ``on_escalate`` hears every effect handed to a person. ``review_status`` is
    the status a record is moved to when a person must look. ``observer(event, effect)`` hears the
    ledger's ``started``, ``done``, ``failed`` and ``stale`` (for telemetry); ``trace`` wraps the commit
    after an effect (see :data:`Trace`). ``alert`` (``alert(kind, message, fields, dedupe_key=...)``)
    hears what is not an escalation: an effect found done on a version the record left, a late outcome,
    re-checks given up. ``send_margin``: how much of ``call_timeout`` must be left after the version gate
    for the call to be sent (default a quarter). ``lookup_backoff``: seconds before a failed lookup is
    tried again. ``probe`` is a test hook, called at the failure points F1, F2, F4, F5 and F6
    (docs/design.md#failure-points)."""

    def __init__(
        self,
        store: DocumentStore,
        *,
        clock: Clock | None = None,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        on_escalate: Escalate | None = None,
        review_status: str = "needs_review",
        probe: Callable[[str], None] | None = None,
        observer: Callable[[str, Effect], None] | None = None,
        alert: AlertSink | None = None,
        send_margin: float | None = None,
        lookup_backoff: float = 30.0,
        trace: Trace | None = None,
    ) -> None:
        records = CaseRepository(store, clock or SystemClock())
        ledger = Ledger(
            store,
            records,
            call_timeout=call_timeout,
            probe=probe,
            observer=observer,
            alert=alert,
            send_margin=send_margin,
        )
        self._assemble(
            store,
            records,
            ledger,
            on_escalate=on_escalate,
            review_status=review_status,
            probe=probe,
            alert=alert,
            lookup_backoff=lookup_backoff,
            trace=trace,
        )

    @classmethod
    def from_parts(
        cls,
        store: DocumentStore,
        records: CaseRepository,
        ledger: Ledger,
        *,
        on_escalate: Escalate | None = None,
        review_status: str = "needs_review",
        probe: Callable[[str], None] | None = None,
        alert: AlertSink | None = None,
        lookup_backoff: float = 30.0,
        trace: Trace | None = None,
    ) -> Guard:
        """A guard over a record repository and a ledger built elsewhere (``guard.records`` and
        ``guard.ledger`` of another guard, or an application's composition root that configured its ledger
        with its own telemetry, probes and alerts). All three must be over ``store``."""
        guard = cls.__new__(cls)
        guard._assemble(
            store,
            records,
            ledger,
            on_escalate=on_escalate,
            review_status=review_status,
            probe=probe,
            alert=alert,
            lookup_backoff=lookup_backoff,
            trace=trace,
        )
        return guard

    def _assemble(
        self,
        store: DocumentStore,
        records: CaseRepository,
        ledger: Ledger,
        *,
        on_escalate: Escalate | None,
        review_status: str,
        probe: Callable[[str], None] | None,
        alert: AlertSink | None,
        lookup_backoff: float,
        trace: Trace | None,
    ) -> None:
        self.store = store
        self._trace: Trace = trace or _no_trace
        self.records = records
        self.ledger = ledger
        self._probe = probe or (lambda point: None)
        self.review_status = review_status
        self._alert = alert
        self._finisher = CommitFinisher(records, ledger, review_status, alert=alert)
        self._on_escalate = on_escalate
        self._lookup_backoff = lookup_backoff
        self._effects: dict[str, GuardedEffect] = {}

    # --- declaring effects ----------------------------------------------------------------------

    def effect(
        self,
        action: str,
        *,
        commit: str | Callable[[Mapping[str, Any]], str],
        lookup: Lookup | None = None,
        retry_same_key: bool = False,
        commit_data: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
        commit_data_from: CommitData | None = None,
        flat_request: bool = False,
        review_on_refusal: bool = True,
        retry_args: Callable[[Effect], Mapping[str, Any]] | None = None,
    ) -> Callable[[Call], GuardedEffect]:
        """Decorator declaring the guarded call of ``action``, once.

        ``commit``: the status the record moves to once the effect is done (or a function of the args).
        ``lookup``: how reconciliation asks the downstream by key (see :data:`Lookup`); without one, an
        unknown outcome goes to a person. ``retry_same_key``: after a lookup found nothing, call again with
        the same key (only if the downstream honours idempotency keys). ``commit_data(result)``: record
        ``data`` fields written with the commit; ``commit_data_from(effect)`` instead, given the whole ledger
        row. ``flat_request``: store the args at the top level of the ledger row's ``request`` (beside
        ``commit``) rather than under ``args``, for an application whose own readers read them there.
        ``review_on_refusal=False``: on a definite refusal, record ``failed`` and raise ``EffectFailed``
        but leave the record alone (the caller commits the refusal itself, conditionally on its version).
        ``retry_args(effect)``: the args of a same-key retry, rebuilt from the ledger row (for rows
        written before the args held everything the call needs). Raises ``ValueError`` for a second
        declaration of ``action`` or a missing commit."""

        def declare(call: Call) -> GuardedEffect:
            return self.register(
                action,
                call,
                commit=commit,
                lookup=lookup,
                retry_same_key=retry_same_key,
                commit_data=commit_data,
                commit_data_from=commit_data_from,
                flat_request=flat_request,
                review_on_refusal=review_on_refusal,
                retry_args=retry_args,
            )

        return declare

    def register(
        self,
        action: str,
        call: Call,
        *,
        commit: str | Callable[[Mapping[str, Any]], str],
        lookup: Lookup | None = None,
        retry_same_key: bool = False,
        commit_data: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
        commit_data_from: CommitData | None = None,
        flat_request: bool = False,
        review_on_refusal: bool = True,
        retry_args: Callable[[Effect], Mapping[str, Any]] | None = None,
    ) -> GuardedEffect:
        """:meth:`effect` without the decorator."""
        if action in self._effects:
            raise ValueError(f"effect {action!r} is already declared")
        declared = GuardedEffect(
            self,
            action,
            call,
            commit=commit,
            lookup=lookup,
            retry_same_key=retry_same_key,
            commit_data=commit_data,
            commit_data_from=commit_data_from,
            flat_request=flat_request,
            review_on_refusal=review_on_refusal,
            retry_args=retry_args,
        )
        self._effects[action] = declared
        return declared

    # --- records ----------------------------------------------------------------------------------

    def create(self, record_id: str, facts: Mapping[str, Any], *, status: str = "open") -> tuple[Record, bool]:
        """Create the record at version 1, or return the existing one; the flag says whether it was created."""
        return self.records.create_if_absent(record_id, facts, status=status)

    def get(self, record_id: str) -> Record | None:
        """The record, or ``None``."""
        return self.records.get(record_id)

    def update(
        self, record_id: str, expected_version: int, changes: Mapping[str, Any], *, reason: str
    ) -> Record | None:
        """Change facts if the record is at ``expected_version`` (moves the version: decisions and approvals
        made on the old version go stale). ``None`` when the record moved on. Raises ``RecordNotFound``."""
        return self.records.update_facts(record_id, expected_version, changes, reason=reason)

    def commit(
        self, decision: Decision, status: str, *, reason: str | None = None, data: Mapping[str, Any] | None = None
    ) -> Record | None:
        """Move the record to ``status`` without an effect, if it is still at the decision's version.
        ``None`` when it moved on (decide again)."""
        return self.records.commit_status(decision.record_id, decision.version, status, reason=reason, data=data)

    # --- approvals (rule R6) ---------------------------------------------------------------------

    def ask(
        self,
        decision: Decision | Mapping[str, Any],
        action: str,
        details: Mapping[str, Any],
        *,
        status: str = "awaiting_approval",
    ) -> ApprovalRequest:
        """Ask a person to approve ``action`` (with JSON ``details``) before it runs: commits the record to
        ``status`` with the request pending, conditionally on the decision's version. Returns the request
        (asked on the decision's version plus one). Asking again for the same decision returns the same
        request. Raises ``StaleDecision`` when the record moved on (decide again)."""
        return approvals.ask(self, self.pin(decision), action, details, status=status)

    def answer(
        self,
        record_id: str,
        request_id: str,
        *,
        approve: bool,
        by: str,
        on_version: int,
        reason: str | None = None,
        approved_status: str = "approved",
        rejected_status: str = "rejected",
    ) -> Decision | None:
        """Answer a pending request, given on record version ``on_version`` (the request's ``version``).

        Approve: commits ``approved_status`` and returns the decision to run the approved effect on (pinned
        to the version after the answer). Reject: commits ``rejected_status`` and returns ``None``. One
        answer per request: raises ``ApprovalNotPending`` for a request answered already (a redelivery of
        the same approval, before anything else happened, returns the same decision again) or not pending,
        and ``StaleApproval`` when the record has left the version the answer was given on."""
        return approvals.answer(
            self,
            record_id,
            request_id,
            approve=approve,
            by=by,
            on_version=on_version,
            reason=reason,
            approved_status=approved_status,
            rejected_status=rejected_status,
        )

    async def aask(
        self,
        decision: Decision | Mapping[str, Any],
        action: str,
        details: Mapping[str, Any],
        *,
        status: str = "awaiting_approval",
    ) -> ApprovalRequest:
        """:meth:`ask` off the event loop."""
        return await asyncio.to_thread(self.ask, decision, action, details, status=status)

    async def aanswer(self, record_id: str, request_id: str, **kwargs: Any) -> Decision | None:
        """:meth:`answer` off the event loop (same keyword arguments)."""
        return await asyncio.to_thread(lambda: self.answer(record_id, request_id, **kwargs))

    # --- deciding ----------------------------------------------------------------------------------

    def decide(self, record_id: str) -> Decision:
        """Pin a decision to the record's current version, after settling what earlier runs left.

        Finishes a crash-left commit first (the returned decision is then on the version after it).
        Raises ``RecordNotFound``; ``EffectInFlight`` (``retry_after`` seconds) or ``NeedsReconciliation``
        while an earlier effect's outcome is unknown; ``MissingCommitIntent``."""
        for _ in range(4):
            settled = self.settle(record_id)
            if not settled.finished:
                break
        else:  # pragma: no cover - a record whose gates keep reopening is a bug elsewhere
            raise RuntimeError(f"record {record_id!r}: crash-left commits keep appearing")
        record = settled.record
        earlier = tuple(e for e in settled.effects if e.case_version != record.version)
        return Decision(record, earlier, None, id(self))

    def settle(
        self,
        record_id: str,
        *,
        record: Record | None = None,
        effects: Sequence[Effect] | None = None,
        include_current: bool = False,
    ) -> Settled:
        """What :meth:`decide` does before it pins, one step at a time, for a workflow that reports each
        step itself. ``record`` and ``effects`` (as just read) save reads.

        A crash-left commit (a ``done`` effect the record's gate is still open on) is finished; then
        ``Settled.finished`` names it with its outcome and ``record`` is the record after it (the
        caller decides again on that, or stops), and nothing else is checked. Otherwise an effect
        without a known outcome of an earlier version (of any version, the current one too, with
        ``include_current``: for a workflow that waits even for its own decision's unsettled effect)
        raises ``EffectInFlight`` or ``NeedsReconciliation``. Raises ``RecordNotFound`` and
        ``MissingCommitIntent``."""
        record = record if record is not None and record.id == record_id else self.records.require(record_id)
        effects = tuple(effects) if effects is not None else tuple(self.effects_of(record))
        gate = record.gate
        left = next((e for e in effects if gate and e.key == gate.effect_key and e.status is EffectStatus.DONE), None)
        if left is not None:
            outcome, after = self._finish(left)
            if outcome in ("committed", "needs_review"):
                after = after if after is not None else self.records.require(record_id)
                return Settled(after, tuple(self.effects_of(after)), ((left, outcome),))
        for effect in effects:
            if effect.status in OPEN_STATUSES and (include_current or effect.case_version != record.version):
                self._refuse_open(effect)
        return Settled(record, effects, ())

    async def asettle(self, record_id: str, **kwargs: Any) -> Settled:
        """:meth:`settle` off the event loop (same keyword arguments)."""
        return await asyncio.to_thread(lambda: self.settle(record_id, **kwargs))

    def pinned(self, record_id: str, version: int, *, approval: Mapping[str, Any] | None = None) -> Decision:
        """The decision made earlier on ``version`` (from :meth:`Decision.to_json`, carried in a workflow
        message), for running its effect in a later step. Reads the record but keeps the version: if the
        record has moved since, the effect is refused (``StaleDecision``), never run on other facts."""
        record = self.records.require(record_id)
        earlier = tuple(e for e in self.effects_of(record) if e.case_version != version)
        return Decision(record, earlier, dict(approval) if approval else None, id(self), version)

    def pin(self, decision: Decision | Mapping[str, Any]) -> Decision:
        """``decision`` itself, or the decision its :meth:`Decision.to_json` describes (see :meth:`pinned`)."""
        if isinstance(decision, Decision):
            return decision
        return self.pinned(str(decision["recordId"]), int(decision["version"]), approval=decision.get("approval"))

    def effects_of(self, record: Record) -> list[Effect]:
        """Every effect of ``record`` as read: its entries, with no store access, unless some may be elsewhere
        (closed ones moved to the archive, or a record written by the two-container layout: then one query)."""
        return self.ledger.effects_for(record)

    async def adecide(self, record_id: str) -> Decision:
        """:meth:`decide` off the event loop."""
        return await asyncio.to_thread(self.decide, record_id)

    def _refuse_open(self, effect: Effect) -> None:
        remaining = self.ledger.in_flight_for(effect)
        if remaining is not None:
            raise EffectInFlight(key=effect.key, case_id=effect.case_id, action=effect.action, retry_after=remaining)
        raise NeedsReconciliation(
            key=effect.key,
            case_id=effect.case_id,
            action=effect.action,
            age=self.ledger.age(effect),
            reason=f"effect {effect.action} on v{effect.case_version} is {effect.status.value}: settle it first",
        )

    def _finish(self, effect: Effect, *, expected: Record | None = None, suffix: str = "") -> tuple[str, Record | None]:
        declared = self._effects.get(effect.action)
        data = declared.data_for(effect) if declared is not None else {}
        finished = self._finisher.finish(effect, data=data, expected=expected, reason_suffix=suffix)
        return finished.outcome, finished.case

    # --- running an effect ----------------------------------------------------------------------

    def _run(
        self,
        declared: GuardedEffect,
        record_id: str,
        version: int,
        args: dict[str, Any],
        intent: dict[str, Any],
        *,
        loop: asyncio.AbstractEventLoop | None,
        expected: Record | None = None,
    ) -> EffectResult:
        canonical_json(args)  # refuses what JSON cannot carry (NaN, sets, objects) before anything is written
        # A reconciliation retry rebuilds the call from the stored args: they must come back unchanged.
        inexact = inexact_numbers(args, "args", integral_floats=False)
        if inexact:
            raise ValueError(f"{declared.action}: {'; '.join(inexact)}: pass such numbers as strings")
        canonical_json(intent)
        request = declared.request_for(args, intent)
        attributes = {
            "casekeeper.case_id": record_id,
            "casekeeper.case_version": version,
            "casekeeper.effect_key": effect_key(record_id, declared.action, version),
        }
        plan = CommitPlan.from_intent(intent, data=declared.data_for, review_status=self.review_status)
        with self._trace(f"effect {declared.action}", attributes):
            # Two writes of the record: the claim (the version gate) and the outcome with its commit. There is
            # no point between the outcome and the commit for a crash to fall into (the F5 of the earlier
            # layout); the probe is still told "F5" right after the outcome-and-commit write, where it was.
            outcome = self.ledger.run_on_record(
                case_id=record_id,
                action=declared.action,
                decided_on_version=version,
                call=lambda key: _reconcile.resolved(declared.call(key, args), loop),
                commit=plan,
                request=request,
                expected=expected,
                refusal_review=self.review_status if declared.review_on_refusal else None,
            )
        effect = outcome.effect
        self._probe("F5")
        with self._trace("commit_status", attributes) as span:
            commit, record = outcome.commit, outcome.case
            if span is not None and hasattr(span, "set_attribute"):
                span.set_attribute("casekeeper.committed", commit)
        self._probe("F6")
        return EffectResult(effect.key, dict(effect.result or {}), outcome.replayed, commit, record)

    # --- reconciliation ----------------------------------------------------------------------------

    def reconcile(self) -> list[RecheckResult]:
        """One sweep, from your own timer: every effect whose outcome is unknown past the call timeout is
        looked up by key (found: recorded and committed; not found: retried with the same key if declared
        safe, else handed to a person), and every commit a crash left unfinished is finished. Harmless to
        run any number of times, concurrently with workflow runs. Returns what each re-check did."""
        return _reconcile.sweep(self, loop=None)

    async def areconcile(self) -> list[RecheckResult]:
        """:meth:`reconcile` off the event loop; ``async`` lookups and calls run on this loop."""
        return await asyncio.to_thread(_reconcile.sweep, self, loop=asyncio.get_running_loop())

    @property
    def reconciler(self) -> Reconciler:
        """The reconciler this guard runs (its policies: the declared effects with a lookup), for tools that
        settle effects themselves (an operator's resolution) and want the guard's escalation and alerts."""
        return _reconcile.reconciler(self, None)

    def finish_commit(self, effect: Effect) -> str:
        """Make the record show a ``done`` effect's commit: ``already``, ``committed``, ``needs_review`` (the
        record had moved on: handed to a person), ``with_person``, ``gone``, or ``no_intent`` (it names no
        commit: handed to a person, never a silent no-op). Harmless to repeat. An effect on its record was
        committed in the write that recorded it (``already`` or ``with_person`` here); this finishes a
        ``done`` row of the two-container layout whose commit a crash left."""
        return _reconcile.reconciler(self, None).finish_commit(effect)

    def recheck_due(self, effect: Effect) -> float:
        """When (store clock, seconds) a ``started`` effect's outcome becomes unknown: schedule its
        :meth:`reconcile_effect` for then."""
        return self.ledger.recheck_due(effect)

    def rechecks_exhausted(self, result: RecheckResult, rechecks: int) -> None:
        """Say (one alert per effect and outcome) that re-checks of an effect stop at their cap while it is
        still unsettled: :meth:`reconcile` remains the backstop, a person should look."""
        _reconcile.reconciler(self, None).rechecks_exhausted(result, rechecks)

    def reconcile_effect(self, record_id: str, key: str) -> RecheckResult:
        """Re-check one effect (from a change feed that saw its ledger row): in flight (``retry_after``
        says when to look again), settled, recorded, retried, escalated. Harmless to repeat."""
        return _reconcile.recheck(self, _reconcile.reconciler(self, None), record_id, key)
