"""The guard: decide on a pinned (case, version), run each external effect at most once, commit it.

A **case** is one business object a workflow acts on (a refund request, an invoice): a JSON
document with ``id``, ``status``, ``version`` and ``facts``. Every change of status or facts is
conditional on the version and moves it by one (rule R5).

One decision, in four steps::

    decision = guard.decide(case_id)            # pinned to the case's version; settles leftovers first
    ... look at decision.facts, decide ...
    result = refund.run(decision, {"amount": "12.50"})   # at most one call per (case, action, version, part)
    # result.commit: "committed" | "already" | "needs_review" | "with_person"

The effect's claim and outcome are entries of the case itself: ``run`` is two conditional writes of the
case, the claim (which is the version gate) and the outcome with its commit.

What :meth:`Guard.decide` checks first (rules R3, R4): an effect of an **earlier** version without a known
outcome makes it refuse (``EffectInFlight`` while another attempt may be mid-call, ``NeedsReconciliation``
after the call timeout). An open effect of the case's **current** version is this decision's own (a crash
after its claim): it is left out, because running the effect again replays it through the ledger.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from casekeeper import approvals
from casekeeper._numbers import inexact_numbers
from casekeeper.approvals import ApprovalRequest
from casekeeper.clock import SystemClock
from casekeeper.core.cases import CASES, Answer, Case, CaseRepository, Watch
from casekeeper.core.clock import Clock
from casekeeper.core.effect import OPEN_STATUSES, Effect
from casekeeper.core.entries import CommitPlan
from casekeeper.core.errors import AlreadyExists, ApprovalPending, EffectInFlight, NeedsReconciliation
from casekeeper.core.keys import args_digest, canonical_json, effect_key
from casekeeper.core.ledger import DEFAULT_CALL_TIMEOUT, DEFAULT_LATE_WATCH, Ledger
from casekeeper.core.ports import DocumentStore
from casekeeper.core.reconcile import ActionPolicy, RecheckResult, Reconciler
from casekeeper.core.watch import AlertSink
from casekeeper.effects import (
    Call,
    CommitData,
    Decision,
    EffectResult,
    Escalate,
    Lookup,
    Settled,
    Trace,
)

log = logging.getLogger("casekeeper.guard")


@contextmanager
def _no_trace(name: str, attributes: Mapping[str, Any]) -> Iterator[None]:
    yield None


class Guard:
    """The guard over one store: cases, effects, approvals, reconciliation.

    ``store``: any :class:`~casekeeper.DocumentStore` (SQLite, Cosmos DB, or one passing the contract
    suite). ``clock`` stamps history for people (defaults to :class:`~casekeeper.SystemClock`); whether an
    effect is still in flight is judged by the **store's** clock. ``call_timeout`` (seconds): a ``started``
    effect younger than this may still be mid-call; older, its outcome is unknown. Set it above the
    call's own client timeout. ``on_escalate`` hears every effect handed to a person. ``review_status`` is
    the status a case is moved to when a person must look. ``observer(event, effect)`` hears the
    ledger's ``started``, ``done``, ``failed`` and ``stale`` (for telemetry); ``trace`` wraps the commit
    after an effect (see :data:`Trace`). ``alert`` (``alert(kind, message, fields, dedupe_key=...)``)
    hears what is not an escalation: an effect found done on a version the case left, a late outcome,
    re-checks given up. ``send_margin``: how much of ``call_timeout`` must be left after the version gate
    for the call to be sent (default a quarter), measured by ``monotonic`` (this process's clock; a test
    moves its own). ``watch(case)``: your judgment of every case the guard is about to write, whoever
    writes it (a decision, a fact update, an outcome recorded late, a person, reconciliation): the
    :class:`~casekeeper.cases.Finding` s it returns are raised through ``alert`` before the write, once
    each (``casekeeper.core.watch``). ``lookup_backoff``: seconds before a failed lookup is tried again.
    ``late_watch``: seconds an effect a person resolved failed is still looked up by key
    (docs/design.md#close-stale-claims).
    ``probe`` is a test hook, called at the failure points F1, F2, F4, F5 and F6 (docs/design.md#failure-points)."""

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
        monotonic: Callable[[], float] = time.monotonic,
        watch: Watch | None = None,
        late_watch: float = DEFAULT_LATE_WATCH,
    ) -> None:
        cases = CaseRepository(store, clock or SystemClock(), watch=watch, alert=alert)
        ledger = Ledger(
            store,
            cases,
            call_timeout=call_timeout,
            probe=probe,
            observer=observer,
            alert=alert,
            send_margin=send_margin,
            monotonic=monotonic,
            late_watch=late_watch,
        )
        self._assemble(
            store,
            cases,
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
        cases: CaseRepository,
        ledger: Ledger,
        *,
        on_escalate: Escalate | None = None,
        review_status: str = "needs_review",
        probe: Callable[[str], None] | None = None,
        alert: AlertSink | None = None,
        lookup_backoff: float = 30.0,
        trace: Trace | None = None,
    ) -> Guard:
        """A guard over a case repository and a ledger built elsewhere (``guard.cases`` and
        ``guard.ledger`` of another guard, or an application's composition root that configured its ledger
        with its own telemetry, probes and alerts). All three must be over ``store``."""
        guard = cls.__new__(cls)
        cls._assemble(
            guard,
            store,
            cases,
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
        cases: CaseRepository,
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
        self.cases = cases
        self.ledger = ledger
        self._probe = probe or (lambda point: None)
        self.review_status = review_status
        self._alert = alert
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
    ) -> Callable[[Call], GuardedEffect]:
        """Decorator declaring the guarded call of ``action``, once.

        ``commit``: the status the case moves to once the effect is done (or a function of the args).
        ``lookup``: how reconciliation asks the downstream by key (see :data:`Lookup`); without one, an
        unknown outcome goes to a person. ``retry_same_key``: after a lookup found nothing, call again with
        the same key (only if the downstream honours idempotency keys). ``commit_data(result)``: the
        case's ``data`` fields written with the commit; ``commit_data_from(effect)`` instead, given the whole ledger
        row. ``flat_request``: store the args at the top level of the ledger row's ``request`` (beside
        ``commit``) rather than under ``args``, for an application whose own readers read them there.
        ``review_on_refusal=False``: on a definite refusal, record ``failed`` and raise ``EffectFailed``
        but leave the case alone (the caller commits the refusal itself, conditionally on its version).
        Raises ``ValueError`` for a second declaration of ``action`` or a missing commit."""

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
    ) -> GuardedEffect:
        """:meth:`effect` without the decorator."""
        if action in self._effects:
            raise ValueError(f"effect {action!r} is already declared")
        declared = GuardedEffect(
            self,
            self._run,
            action,
            call,
            commit=commit,
            lookup=lookup,
            retry_same_key=retry_same_key,
            commit_data=commit_data,
            commit_data_from=commit_data_from,
            flat_request=flat_request,
            review_on_refusal=review_on_refusal,
        )
        self._effects[action] = declared
        return declared

    # --- cases ------------------------------------------------------------------------------------

    def create(
        self, case_id: str, facts: Mapping[str, Any], *, status: str = "open", exist_ok: bool = False
    ) -> tuple[Case, bool]:
        """Create the case at version 1 with ``facts``; returns it and ``True``.

        A case with this id that exists already is never overwritten: ``create`` raises ``AlreadyExists``
        (naming the case's status and version; nothing written), or with ``exist_ok=True`` returns the
        existing case, as it is, and ``False`` (its facts are not the ones given here: change them with
        :meth:`update`)."""
        try:
            return self.cases.create(case_id, facts, status=status), True
        except AlreadyExists:
            existing = self.cases.require(case_id)
            if exist_ok:
                return existing, False
            raise AlreadyExists(
                f"case {case_id!r} exists already (status {existing.status!r}, v{existing.version}); its facts "
                "were kept, nothing written: pass exist_ok=True to get the existing case, guard.update to change "
                "its facts",
                container=CASES,
                doc_id=case_id,
            ) from None

    def get(self, case_id: str) -> Case | None:
        """The case, or ``None``."""
        return self.cases.get(case_id)

    def update(self, case_id: str, expected_version: int, changes: Mapping[str, Any], *, reason: str) -> Case | None:
        """Change facts if the case is at ``expected_version`` (moves the version: decisions and approvals
        made on the old version go stale). ``None`` when the case moved on. Raises ``CaseNotFound``.

        A pending approval request is closed in the same write: the case goes back to the status the
        request was asked from, and the request is kept in ``data.staleApproval`` with ``reason`` and the
        version this change makes (an answer to it raises ``StaleApproval`` naming the change)."""
        case = self.cases.require(case_id)
        if case.version != expected_version:
            return None
        closed = approvals.closed_by_change(case, reason)
        if closed is None:
            return self.cases.update_facts(case_id, expected_version, changes, reason=reason, expected=case)
        status, data = closed
        return self.cases.update_facts(
            case_id, expected_version, changes, reason=reason, new_status=status, data=data, expected=case
        )

    def commit(
        self, decision: Decision, status: str, *, reason: str | None = None, data: Mapping[str, Any] | None = None
    ) -> Case | None:
        """Move the case to ``status`` without an effect, if it is still at the decision's version.
        ``None`` when it moved on (decide again).

        A pending approval request is closed in the same write, as by :meth:`update` (kept in
        ``data.staleApproval``): the commit moves the version, so the request could no longer be answered."""
        case = decision.case if decision.case.version == decision.version else self.cases.require(decision.case_id)
        if case.version != decision.version:
            return None
        closed = approvals.closed_by_change(case, f"status committed to {status}" + (f": {reason}" if reason else ""))
        merged = {**(data or {}), **(closed[1] if closed is not None else {})}
        return self.cases.commit_status(
            decision.case_id, decision.version, status, reason=reason, data=merged or None, expected=case
        )

    async def acreate(
        self, case_id: str, facts: Mapping[str, Any], *, status: str = "open", exist_ok: bool = False
    ) -> tuple[Case, bool]:
        """:meth:`create` off the event loop."""
        return await asyncio.to_thread(lambda: self.create(case_id, facts, status=status, exist_ok=exist_ok))

    async def aget(self, case_id: str) -> Case | None:
        """:meth:`get` off the event loop."""
        return await asyncio.to_thread(self.get, case_id)

    async def aupdate(
        self, case_id: str, expected_version: int, changes: Mapping[str, Any], *, reason: str
    ) -> Case | None:
        """:meth:`update` off the event loop."""
        return await asyncio.to_thread(lambda: self.update(case_id, expected_version, changes, reason=reason))

    async def acommit(
        self, decision: Decision, status: str, *, reason: str | None = None, data: Mapping[str, Any] | None = None
    ) -> Case | None:
        """:meth:`commit` off the event loop."""
        return await asyncio.to_thread(lambda: self.commit(decision, status, reason=reason, data=data))

    # --- approvals (rule R6) ---------------------------------------------------------------------

    def ask(
        self,
        decision: Decision | Mapping[str, Any],
        action: str,
        details: Mapping[str, Any],
        *,
        status: str = "awaiting_approval",
    ) -> ApprovalRequest:
        """Ask a person to approve ``action`` (with JSON ``details``) before it runs: commits the case to
        ``status`` with the request pending, conditionally on the decision's version. Returns the request
        (asked on the decision's version plus one). Asking again for the same decision returns the same
        request. Raises ``StaleDecision`` when the case moved on (decide again) and ``ApprovalPending`` when
        another request is pending on the decision's version (answer it first; nothing written).

        While the request is pending, :meth:`GuardedEffect.run` of ``action`` is refused (``ApprovalPending``)
        unless it carries the approval; a change of facts (:meth:`update`) closes the request."""
        return approvals.ask(self.cases, self.pin(decision), action, details, status=status)

    def answer(
        self,
        case_id: str,
        request_id: str,
        *,
        approve: bool,
        by: str,
        on_version: int,
        reason: str | None = None,
        approved_status: str = "approved",
        rejected_status: str = "rejected",
    ) -> Decision | None:
        """Answer a pending request, given on case version ``on_version`` (the request's ``version``).

        Approve: commits ``approved_status`` and returns the decision to run the approved effect on (pinned
        to the version after the answer). Reject: commits ``rejected_status`` and returns ``None``. One
        answer per request: raises ``ApprovalNotPending`` for a request answered already (a redelivery of
        the same approval, before anything else happened, returns the same decision again) or not pending,
        and ``StaleApproval`` when the case has left the version the answer was given on."""
        approved = approvals.answer(
            self.cases,
            case_id,
            request_id,
            approve=approve,
            by=by,
            on_version=on_version,
            reason=reason,
            approved_status=approved_status,
            rejected_status=rejected_status,
        )
        if approved is None:
            return None
        case, entry = approved
        earlier = tuple(e for e in self.effects_of(case) if e.case_version != case.version)
        return Decision(case, earlier, entry, id(self))

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

    async def aanswer(self, case_id: str, request_id: str, **kwargs: Any) -> Decision | None:
        """:meth:`answer` off the event loop (same keyword arguments)."""
        return await asyncio.to_thread(lambda: self.answer(case_id, request_id, **kwargs))

    # --- deciding ----------------------------------------------------------------------------------

    def decide(self, case_id: str) -> Decision:
        """Pin a decision to the case's current version, after checking what earlier runs left.

        Raises ``CaseNotFound``; ``EffectInFlight`` (``retry_after`` seconds) or ``NeedsReconciliation``
        while an earlier effect's outcome is unknown."""
        settled = self.settle(case_id)
        case = settled.case
        earlier = tuple(e for e in settled.effects if e.case_version != case.version)
        return Decision(case, earlier, None, id(self))

    def settle(
        self,
        case_id: str,
        *,
        case: Case | None = None,
        effects: Sequence[Effect] | None = None,
        include_current: bool = False,
    ) -> Settled:
        """What :meth:`decide` checks before it pins, for a workflow that reports each step itself. ``case``
        and ``effects`` (as just read) save reads.

        An effect without a known outcome of an earlier version (of any version, the current one too, with
        ``include_current``: for a workflow that waits even for its own decision's unsettled effect) raises
        ``EffectInFlight`` or ``NeedsReconciliation``. Raises ``CaseNotFound``."""
        case = case if case is not None and case.id == case_id else self.cases.require(case_id)
        effects = tuple(effects) if effects is not None else tuple(self.effects_of(case))
        for effect in effects:
            if effect.status in OPEN_STATUSES and (include_current or effect.case_version != case.version):
                self._refuse_open(effect)
        return Settled(case, effects)

    async def asettle(self, case_id: str, **kwargs: Any) -> Settled:
        """:meth:`settle` off the event loop (same keyword arguments)."""
        return await asyncio.to_thread(lambda: self.settle(case_id, **kwargs))

    def pinned(self, case_id: str, version: int, *, approval: Mapping[str, Any] | None = None) -> Decision:
        """The decision made earlier on ``version`` (from :meth:`Decision.to_json`, carried in a workflow
        message), for running its effect in a later step. Reads the case but keeps the version: if the
        case has moved since, the effect is refused (``StaleDecision``), never run on other facts."""
        case = self.cases.require(case_id)
        earlier = tuple(e for e in self.effects_of(case) if e.case_version != version)
        return Decision(case, earlier, dict(approval) if approval else None, id(self), version)

    def pin(self, decision: Decision | Mapping[str, Any]) -> Decision:
        """``decision`` itself, or the decision its :meth:`Decision.to_json` describes (see :meth:`pinned`)."""
        if isinstance(decision, Decision):
            return decision
        return self.pinned(str(decision["caseId"]), int(decision["version"]), approval=decision.get("approval"))

    def effects_of(self, case: Case) -> list[Effect]:
        """Every effect of ``case`` as read: its entries, with no store access, unless closed ones were moved
        to the archive (then one query)."""
        return self.ledger.effects_for(case)

    async def adecide(self, case_id: str) -> Decision:
        """:meth:`decide` off the event loop."""
        return await asyncio.to_thread(self.decide, case_id)

    async def apinned(self, case_id: str, version: int, *, approval: Mapping[str, Any] | None = None) -> Decision:
        """:meth:`pinned` off the event loop."""
        return await asyncio.to_thread(lambda: self.pinned(case_id, version, approval=approval))

    async def apin(self, decision: Decision | Mapping[str, Any]) -> Decision:
        """:meth:`pin` off the event loop."""
        return await asyncio.to_thread(self.pin, decision)

    async def aeffects_of(self, case: Case) -> list[Effect]:
        """:meth:`effects_of` off the event loop."""
        return await asyncio.to_thread(self.effects_of, case)

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

    # --- running an effect ----------------------------------------------------------------------

    def _run(
        self,
        declared: GuardedEffect,
        case_id: str,
        version: int,
        args: dict[str, Any],
        intent: dict[str, Any],
        *,
        loop: asyncio.AbstractEventLoop | None,
        expected: Case | None = None,
        part: str | None = None,
        approved: frozenset[str] = frozenset(),
    ) -> EffectResult:
        canonical_json(args)  # refuses what JSON cannot carry (NaN, sets, objects) before anything is written
        # A reconciliation retry rebuilds the call from the stored args: they must come back unchanged.
        inexact = inexact_numbers(args, "args", integral_floats=False)
        if inexact:
            raise ValueError(f"{declared.action}: {'; '.join(inexact)}: pass such numbers as strings")
        canonical_json(intent)
        request = declared.request_for(args, intent)
        attributes = {
            "casekeeper.case_id": case_id,
            "casekeeper.case_version": version,
            "casekeeper.effect_key": effect_key(case_id, declared.action, version, part),
        }

        def admit(case: Case, key: str) -> None:
            # A pending request guards its action: only a run that carries its approval may claim. One the
            # case has moved past (another effect's commit) can no longer be answered: still no run
            # without an approval, and asking again replaces it.
            pending = approvals.pending_of(case)
            if pending is not None and pending.get("action") == declared.action:
                request_id = str(pending.get("requestId"))
                if request_id not in approved:
                    detail = None if approvals.answerable(pending, case) else approvals.UNANSWERABLE
                    raise ApprovalPending(
                        key=key, case_id=case_id, action=declared.action, request_id=request_id, detail=detail
                    )

        plan = CommitPlan.from_intent(intent, data=declared.data_for, review_status=self.review_status)
        with self._trace(f"effect {declared.action}", attributes):
            # Two writes of the case: the claim (the version gate) and the outcome with its commit.
            outcome = self.ledger.run(
                case_id=case_id,
                action=declared.action,
                decided_on_version=version,
                call=lambda key: _resolved(declared.call(key, args), loop),
                commit=plan,
                request=request,
                expected=expected,
                refusal_review=self.review_status if declared.review_on_refusal else None,
                part=part,
                args_digest=args_digest(args),
                admit=admit,
            )
        effect = outcome.effect
        self._probe("F5")  # the outcome and its commit are written (docs/design.md#f5)
        with self._trace("commit_status", attributes) as span:
            commit, case = outcome.commit, outcome.case
            if span is not None and hasattr(span, "set_attribute"):
                span.set_attribute("casekeeper.committed", commit)
        self._probe("F6")
        return EffectResult(effect.key, dict(effect.result or {}), outcome.replayed, commit, case)

    # --- reconciliation ----------------------------------------------------------------------------

    def reconcile(self) -> list[RecheckResult]:
        """One sweep, from your own timer: every effect whose outcome is unknown past the call timeout is
        looked up by key (found: recorded and committed; not found: retried with the same key if declared
        safe, else handed to a person). Harmless to run any number of times, concurrently with workflow runs.
        Returns what each re-check did."""
        return self._sweep(loop=None)

    async def areconcile(self) -> list[RecheckResult]:
        """:meth:`reconcile` off the event loop; ``async`` lookups and calls run on this loop."""
        return await asyncio.to_thread(self._sweep, loop=asyncio.get_running_loop())

    @property
    def reconciler(self) -> Reconciler:
        """The reconciler this guard runs (its policies: the declared effects with a lookup), for tools that
        settle effects themselves (an operator's resolution) and want the guard's escalation and alerts."""
        return self._reconciler(None)

    def recheck_due(self, effect: Effect) -> float:
        """When (store clock, seconds) a ``started`` effect's outcome becomes unknown: schedule its
        :meth:`reconcile_effect` for then."""
        return self.ledger.recheck_due(effect)

    def rechecks_exhausted(self, result: RecheckResult, rechecks: int) -> None:
        """Say (one alert per effect and outcome) that re-checks of an effect stop at their cap while it is
        still unsettled: :meth:`reconcile` remains the backstop, a person should look."""
        self._reconciler(None).rechecks_exhausted(result, rechecks)

    def reconcile_effect(self, case_id: str, key: str) -> RecheckResult:
        """Re-check one effect (from a change feed that saw its ledger row): in flight (``retry_after``
        says when to look again), settled, recorded, retried, escalated. Harmless to repeat."""
        return self._reconciler(None).recheck(case_id, key)

    async def areconcile_effect(self, case_id: str, key: str) -> RecheckResult:
        """:meth:`reconcile_effect` off the event loop; ``async`` lookups and calls run on this loop."""
        loop = asyncio.get_running_loop()
        return await asyncio.to_thread(lambda: self._reconciler(loop).recheck(case_id, key))

    async def arechecks_exhausted(self, result: RecheckResult, rechecks: int) -> None:
        """:meth:`rechecks_exhausted` off the event loop (the alert sink may write)."""
        await asyncio.to_thread(self.rechecks_exhausted, result, rechecks)

    def _sweep(self, *, loop: asyncio.AbstractEventLoop | None) -> list[RecheckResult]:
        """Re-check every effect past its call timeout, and every one a person resolved failed that is still
        watched (a lookup by key), once each."""
        rec = self._reconciler(loop)
        seen: set[str] = set()
        results: list[RecheckResult] = []

        def malformed(doc: object, exc: Exception) -> None:
            log.error("skipping a malformed document during reconciliation: %r", exc)

        due = self.ledger.overdue(on_malformed=malformed) + self.ledger.watched_due(on_malformed=malformed)
        for effect in due:
            if effect.key not in seen:
                seen.add(effect.key)
                results.append(rec.recheck(effect.case_id, effect.key))
        return results

    def _reconciler(self, loop: asyncio.AbstractEventLoop | None) -> Reconciler:
        """The core reconciler, with one policy per declared effect that has a lookup (``async`` lookups and
        calls awaited on ``loop``)."""

        def policy(declared: GuardedEffect) -> ActionPolicy:
            lookup = declared.lookup
            assert lookup is not None

            def retry(effect: Effect) -> Callable[[str], Mapping[str, Any]]:
                args = declared.args_of(effect)
                return lambda key: _resolved(declared.call(key, args), loop)

            return ActionPolicy(
                lookup=lambda key: _resolved(lookup(key), loop),
                retry_call=retry if declared.retry_same_key else None,
                commit_data=declared.data_for,
            )

        def alert(message: str, fields: dict[str, Any]) -> None:
            if self._on_escalate is not None:
                self._on_escalate(message, fields)

        policies = {a: policy(d) for a, d in self._effects.items() if d.lookup is not None}
        return Reconciler(
            self.ledger,
            self.cases,
            self.store,
            policies,
            alert=alert,
            review_status=self.review_status,
            lookup_backoff=self._lookup_backoff,
            raise_alert=self._alert,
        )


class GuardedEffect:
    """One declared effect (see :meth:`Guard.effect`). Run it with :meth:`run` or :meth:`arun`."""

    def __init__(
        self,
        guard: Guard,
        execute: Callable[..., EffectResult],
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
    ) -> None:
        if not action:
            raise ValueError("action must be a non-empty string")
        if not commit:
            raise ValueError(f"effect {action!r} needs a commit: the status the case moves to once it is done")
        if retry_same_key and lookup is None:
            raise ValueError(f"effect {action!r}: retry_same_key needs a lookup (retry only what was not found)")
        self._guard = guard
        self._execute = execute  # the guard's own run of a declared effect (claim, call, record, commit)
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
        self.__doc__ = getattr(call, "__doc__", None) or f"Guarded effect {action!r}."

    def __repr__(self) -> str:
        return f"GuardedEffect({self.action!r})"

    def commit_status(self, args: Mapping[str, Any]) -> str:
        """The status the case moves to once the effect made with ``args`` is done."""
        return self._commit(args) if callable(self._commit) else self._commit

    def data_for(self, effect: Effect) -> dict[str, Any]:
        """The case's ``data`` fields written with the commit (``commit_data_from(effect)``, or
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
        """The args an effect was made with: what a same-key retry calls again with."""
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
        part: str | None = None,
    ) -> EffectResult:
        """Run the effect for ``decision`` (or its :meth:`Decision.to_json`) at most once, then commit the case.

        Raises ``StaleDecision`` (the case moved since the decision: nothing called; decide again),
        ``EffectFailed`` (definite refusal, now or earlier: the case goes to the guard's review
        status), ``EffectInFlight`` (another attempt may be mid-call: try later), ``NeedsReconciliation``
        (outcome unknown past the call timeout: reconciliation settles it), ``MissingCommitIntent``, and
        re-raises the call's ``OutcomeUnknown`` (or other exception) with the ledger row left ``started``.

        One effect per (case, action, version, ``part``): ``part`` names one of several effects of this
        action in one decision (an order line) and joins the key. The arguments' digest is recorded with the
        claim: the same key run with other arguments raises ``ArgumentsMismatch`` (nothing called) instead of
        replaying the first. While the case has a pending approval request for this action, the run is
        refused with ``ApprovalPending`` (nothing written) unless the decision carries that request's
        approval (the decision :meth:`Guard.answer` returns) or ``answer`` approves it.

        The commit's transition records ``reason``, ``proposed_by`` (who proposed the decision) and
        ``answer`` (the person's answer it commits, if any). ``commit_fields`` are stored in the commit
        intent for your own readers of the ledger; the guard writes them and never reads them.
        """
        decision = self._guard.pin(decision)
        if decision.guard_id not in (0, id(self._guard)):
            raise ValueError("this decision was made by another guard")
        intent = self._intent(args, reason, proposed_by, answer, commit_fields)
        return self._execute(
            self,
            decision.case_id,
            decision.version,
            dict(args),
            intent,
            loop=None,
            expected=_read(decision),
            part=part,
            approved=_approved(decision.approval, answer),
        )

    def run_on(
        self,
        case_id: str,
        version: int,
        args: Mapping[str, Any],
        *,
        reason: str | None = None,
        proposed_by: str | None = None,
        answer: Answer | None = None,
        commit_fields: Mapping[str, Any] | None = None,
        case: Case | None = None,
        part: str | None = None,
    ) -> EffectResult:
        """:meth:`run` for the decision made on ``version`` of ``case_id``, without reading the case
        first: the version gate is the check (``StaleDecision`` if the case has moved). For a workflow
        step that carries the decided-on version in its message. ``case``: the case as the step last
        read it, if it has it (the claim is then written on it with no read; a case changed since costs
        one re-read). ``part``, the argument digest and a pending approval request as in :meth:`run` (here
        only ``answer`` can carry the approval)."""
        intent = self._intent(args, reason, proposed_by, answer, commit_fields)
        known = case if case is not None and case.id == case_id and case.version == version else None
        return self._execute(
            self,
            case_id,
            version,
            dict(args),
            intent,
            loop=None,
            expected=known,
            part=part,
            approved=_approved(None, answer),
        )

    async def arun_on(
        self,
        case_id: str,
        version: int,
        args: Mapping[str, Any],
        *,
        reason: str | None = None,
        proposed_by: str | None = None,
        answer: Answer | None = None,
        commit_fields: Mapping[str, Any] | None = None,
        case: Case | None = None,
        part: str | None = None,
    ) -> EffectResult:
        """:meth:`run_on` off the event loop; an ``async`` call runs on this loop."""
        loop = asyncio.get_running_loop()
        intent = self._intent(args, reason, proposed_by, answer, commit_fields)
        known = case if case is not None and case.id == case_id and case.version == version else None
        return await asyncio.to_thread(
            lambda: self._execute(
                self,
                case_id,
                version,
                dict(args),
                intent,
                loop=loop,
                expected=known,
                part=part,
                approved=_approved(None, answer),
            )
        )

    async def arun(
        self,
        decision: Decision | Mapping[str, Any],
        args: Mapping[str, Any],
        *,
        reason: str | None = None,
        proposed_by: str | None = None,
        answer: Answer | None = None,
        commit_fields: Mapping[str, Any] | None = None,
        part: str | None = None,
    ) -> EffectResult:
        """:meth:`run` off the event loop; an ``async`` call runs on this loop."""
        loop = asyncio.get_running_loop()
        guard = self._guard

        def run() -> EffectResult:
            pinned = guard.pin(decision)
            if pinned.guard_id not in (0, id(guard)):
                raise ValueError("this decision was made by another guard")
            intent = self._intent(args, reason, proposed_by, answer, commit_fields)
            return self._execute(
                self,
                pinned.case_id,
                pinned.version,
                dict(args),
                intent,
                loop=loop,
                expected=_read(pinned),
                part=part,
                approved=_approved(pinned.approval, answer),
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


def _approved(approval: Mapping[str, Any] | None, answer: Answer | None) -> frozenset[str]:
    """The approval request ids a run carries the approval of: the decision's (from :meth:`Guard.answer`)
    and an approving ``answer``."""
    ids = set()
    if approval and approval.get("approved", True) and approval.get("requestId"):
        ids.add(str(approval["requestId"]))
    if answer is not None and answer.approved:
        ids.add(answer.request_id)
    return frozenset(ids)


def _read(decision: Decision) -> Case | None:
    """The case as the decision read it, when it is on the decided-on version: the claim is then a
    conditional write on it with no read first (a 412 re-reads)."""
    return decision.case if decision.case.version == decision.version else None


def _resolved(value: Any, loop: asyncio.AbstractEventLoop | None) -> Any:
    """The value of a call that may be ``async``: awaited on ``loop`` (the caller's, from a worker thread),
    or in a fresh loop when there is none."""
    if not inspect.isawaitable(value):
        return value
    if loop is not None:
        return asyncio.run_coroutine_threadsafe(_awaited(value), loop).result()
    return asyncio.run(_awaited(value))


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value
