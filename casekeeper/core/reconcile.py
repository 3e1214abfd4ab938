"""Reconciliation (rule R3; failure points F2-F4): settle an effect whose outcome nobody knows, never blindly.

:meth:`Reconciler.recheck` looks at one effect. A ``done`` one is settled (its outcome and its commit were one
write); a ``started`` one younger than the call timeout (store clock) is still in flight: look again later.
Older, its outcome is unknown, so **ask the downstream by key**:

========================  ===============================================================
lookup says               then
========================  ===============================================================
found                     record ``done`` with what was found, and its commit, in one write
not found, retry is safe  retry with the same key (it passes the version gate, R4)
not found, not safe       escalate
lookup keeps failing      escalate after ``max_lookup_failures``
========================  ===============================================================

Escalated: the effect is ``needs_reconciliation`` with the reason, the case ``needs_review``, and
an alert is raised. A person settles it (``casekeeper effects resolve``).

What "safe to retry" and "look up" mean is the domain's business: each action supplies an
:class:`ActionPolicy`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from casekeeper.core.cases import CaseRepository
from casekeeper.core.effect import Effect, EffectStatus
from casekeeper.core.entries import CommitPlan
from casekeeper.core.errors import (
    EffectFailed,
    EffectInFlight,
    MissingCommitIntent,
    NeedsReconciliation,
    OutcomeAlreadyRecorded,
    OutcomeUnknown,
    StaleDecision,
)
from casekeeper.core.ledger import Call, Ledger
from casekeeper.core.ports import DocumentStore
from casekeeper.core.watch import AlertSink

log = logging.getLogger("casekeeper.reconcile")

HEALTH = "health"
KIND_LOOKUP_FAILURES = "lookup_failures"
RECONCILED_SUFFIX = "(commit finished by reconciliation)"
"""Ends the reason of a status commit that reconciliation made, not a workflow run."""


@dataclass(frozen=True)
class ActionPolicy:
    """How one action is reconciled.

    ``lookup(key)`` returns the downstream's record of the effect, ``None`` when it has none, and
    raises ``OutcomeUnknown`` when it cannot tell. ``retry_call(effect)`` builds the same call again
    (same key) when the downstream honours idempotency keys; ``None`` means never retry automatically.
    ``commit_data(effect)`` gives the case ``data`` fields written with the status commit.
    """

    lookup: Callable[[str], Mapping[str, Any] | None]
    retry_call: Callable[[Effect], Call] | None
    commit_data: Callable[[Effect], dict[str, Any]]


@dataclass(frozen=True)
class RecheckResult:
    """What a re-check did. ``retry_after`` (seconds) asks for another re-check; ``reinvestigate`` asks
    the caller to have the case decided again (the retried decision was stale)."""

    # settled | in_flight | recorded | recorded_late | retried | stale | failed | escalated | lookup_failed
    # | watching | gone | no_intent
    outcome: str
    key: str
    case_id: str
    detail: str = ""
    retry_after: float | None = None
    reinvestigate: bool = False
    committed: bool = False


def _no_alert(message: str, fields: dict[str, Any]) -> None:
    """The default escalation hook: none (the application passes its own)."""


@dataclass
class Reconciler:
    """Rule R3 over one ledger: :meth:`recheck` settles one effect by the table above, with one
    :class:`ActionPolicy` per action it can look up. ``alert(message, fields)`` hears every escalation;
    ``raise_alert`` the other alerts (re-checks given up)."""

    ledger: Ledger
    cases: CaseRepository
    store: DocumentStore
    policies: Mapping[str, ActionPolicy]
    alert: Callable[[str, dict[str, Any]], object] = field(default=_no_alert)
    review_status: str = "needs_review"
    max_lookup_failures: int = 3
    max_attempts: int = 3
    lookup_backoff: float = 30.0
    raise_alert: AlertSink | None = None
    """Alerts of other kinds than an escalation: an effect on a left version, re-checks given up."""

    # --- started effects ----------------------------------------------------------------------------

    def recheck(self, case_id: str, key: str) -> RecheckResult:
        """Apply R3 to one effect. Safe to call at any time and any number of times."""
        effect = self.ledger.get(case_id, key)
        if effect is None:
            return RecheckResult("gone", key, case_id, "no such effect")
        if effect.status is EffectStatus.DONE:
            return RecheckResult("settled", key, case_id, "done; its commit was written with its outcome")
        # The follow-ups below are derived from the entry on every re-check, so a re-check redelivered after
        # a crash (between the ledger write and the follow-up) does the follow-up again; each is idempotent.
        if effect.status is EffectStatus.FAILED and effect.stale:
            # A retry refused as stale never called: have the case decided again. The attempt before it may
            # have (its outcome was unknown): while its watch lasts, its key is looked up too.
            if effect.watching:
                return replace(self._watch(effect), reinvestigate=True)
            return RecheckResult("stale", key, case_id, effect.reason or "stale", reinvestigate=True)
        if effect.status is EffectStatus.FAILED and effect.watching:
            return self._watch(effect)
        if effect.status is EffectStatus.FAILED:
            reason = f"{effect.action} was refused: {effect.reason}"
            self._to_review(case_id, reason, {}, effect_key=effect.key)
            return RecheckResult("failed", key, case_id, effect.reason or "failed")
        if effect.status is EffectStatus.NEEDS_RECONCILIATION:
            return self._escalated(effect, effect.reason or "needs reconciliation")
        left = self.ledger.in_flight_for(effect)
        if left is not None:
            started = f"started {self.ledger.age(effect):.0f}s ago"
            return RecheckResult("in_flight", key, case_id, started, retry_after=left)
        policy = self.policies.get(effect.action)
        if policy is None:
            return self._escalate(effect, f"no reconciliation policy for action {effect.action}")
        try:
            found = policy.lookup(effect.key)
        except OutcomeUnknown as exc:
            failures = self._count_lookup_failure(effect, exc)
            if failures >= self.max_lookup_failures:
                return self._escalate(effect, f"lookup by key failed {failures} times: {exc.reason}")
            return RecheckResult(
                "lookup_failed",
                key,
                case_id,
                f"lookup failed ({failures}/{self.max_lookup_failures}): {exc.reason}",
                retry_after=self.lookup_backoff,
            )
        if found is not None:
            return self._record_found(effect, dict(found))
        if policy.retry_call is None:
            return self._escalate(effect, "the downstream has no record of it and the action is not safe to retry")
        if effect.attempts >= self.max_attempts:
            return self._escalate(effect, f"not found downstream after {effect.attempts} attempts")
        return self._retry(effect, policy.retry_call(effect))

    def _watch(self, watched: Effect) -> RecheckResult:
        """The late watch over an entry a person resolved ``failed``: look it up by key, never call again (a
        person said it failed). Found: ``done`` (late) over the failure, with the ``late_outcome`` alert. Not
        found, or the lookup cannot tell: look again later, until the watch ends; then it stays ``failed`` and
        is no longer watched (a lookup that could not tell at the end raises ``late_watch_unanswered``)."""
        ctx = (watched.key, watched.case_id)
        policy = self.policies.get(watched.action)
        unanswered: str | None = None
        if policy is None:
            unanswered = f"no reconciliation policy for action {watched.action}"
        else:
            try:
                found = policy.lookup(watched.key)
            except OutcomeUnknown as exc:
                unanswered = f"lookup by key failed: {exc.reason}"
            else:
                if found is not None:
                    return self._record_late(watched, dict(found))
        left = self.ledger.watch_left(watched)
        if left > 0:
            wait = self.ledger.next_watch_lookup(watched)
            if unanswered is not None:
                wait = min(wait, self.lookup_backoff)
            detail = unanswered or "not found by key"
            return RecheckResult("watching", *ctx, f"{detail}; late watch ends in {left:.0f}s", retry_after=wait)
        try:
            self.ledger.end_watch(watched)
        except OutcomeAlreadyRecorded:
            return self.recheck(watched.case_id, watched.key)
        if unanswered is not None and self.raise_alert is not None:
            message = (
                f"effect {watched.key[:12]} of case {watched.case_id}, resolved failed by a person, could not be "
                f"looked up when its late watch ended ({unanswered}); a person checks the downstream for it"
            )
            fields = {"caseId": watched.case_id, "effectKey": watched.key, "action": watched.action}
            fields["detail"] = unanswered
            self.raise_alert("late_watch_unanswered", message, fields, dedupe_key=watched.key)
        return RecheckResult("failed", *ctx, f"late watch ended: {unanswered or 'not found by key'}")

    def _record_late(self, watched: Effect, found: dict[str, Any]) -> RecheckResult:
        try:
            done, committed = self.ledger.record_late_found(
                watched, found, commit=self.commit_plan(watched), source="reconciler-lookup"
            )
        except OutcomeAlreadyRecorded:
            return self.recheck(watched.case_id, watched.key)  # recorded or ended meanwhile: follow that
        return RecheckResult(
            "recorded_late", done.key, done.case_id, f"found downstream after a person's failed; commit {committed}"
        )

    def rechecks_exhausted(self, result: RecheckResult, rechecks: int) -> None:
        """Re-checks of an effect stop at their cap while it still is not settled: say so, once per effect and
        outcome, rather than go quiet. The timer's sweeps still look at it; a person should too."""
        if self.raise_alert is None:
            return
        message = (
            f"effect {result.key[:12]} of case {result.case_id} is still {result.outcome} after {rechecks} "
            f"re-checks ({result.detail}); no more are scheduled: the timer's sweep is the backstop, a person "
            "should look"
        )
        fields = {
            "caseId": result.case_id,
            "effectKey": result.key,
            "outcome": result.outcome,
            "detail": result.detail,
            "rechecks": rechecks,
        }
        self.raise_alert("rechecks_exhausted", message, fields, dedupe_key=f"{result.key}:{result.outcome}")

    def _record_found(self, effect: Effect, found: dict[str, Any]) -> RecheckResult:
        try:
            # The outcome and its commit are one write.
            done, committed = self.ledger.record_done(
                effect, found, commit=self.commit_plan(effect), source="reconciler-lookup"
            )
        except OutcomeAlreadyRecorded:
            return self.recheck(effect.case_id, effect.key)  # someone settled it meanwhile: follow theirs
        if committed == "no_intent":
            self._escalated(done, "done, but its entry names no commit intent")
            return RecheckResult("no_intent", effect.key, effect.case_id, "found downstream; no commit intent")
        return RecheckResult(
            "recorded",
            effect.key,
            effect.case_id,
            f"found downstream; commit {committed}",
            committed=committed == "committed",
        )

    def _retry(self, effect: Effect, call: Call) -> RecheckResult:
        ctx = (effect.key, effect.case_id)
        try:
            outcome = self.ledger.retry_same_key(
                effect, call, source="reconciler-retry", commit=self.commit_plan(effect)
            )
        except StaleDecision as exc:
            return RecheckResult("stale", *ctx, str(exc), reinvestigate=True)
        except EffectFailed as exc:
            self._to_review(
                effect.case_id, f"retried {effect.action} was refused: {exc.reason}", {}, effect_key=effect.key
            )
            return RecheckResult("failed", *ctx, exc.reason)
        except (OutcomeUnknown, EffectInFlight) as exc:
            # The retry started a new attempt on the row: it has its full call timeout from now.
            current = self.ledger.get(effect.case_id, effect.key)
            left = self.ledger.in_flight_for(current) if current is not None else None
            return RecheckResult("in_flight", *ctx, f"retry outcome unknown: {exc}", retry_after=left or 0.0)
        except NeedsReconciliation as exc:
            return RecheckResult("escalated", *ctx, exc.reason)
        except MissingCommitIntent:
            return self._escalate(effect, "not found downstream, and its entry names no commit to retry it for")
        except OutcomeAlreadyRecorded:
            return self.recheck(effect.case_id, effect.key)
        return RecheckResult(
            "retried",
            *ctx,
            f"retried with the same key; commit {outcome.commit}",
            committed=outcome.commit == "committed",
        )

    def commit_plan(self, effect: Effect) -> CommitPlan | None:
        """The commit an effect's stored intent names, with its policy's commit data (``None``: no intent), for
        whoever records its outcome (the reconciler, an operator's resolution)."""
        intent = effect.request.get("commit")
        if not isinstance(intent, Mapping) or not intent.get("status"):
            return None
        policy = self.policies.get(effect.action)
        return CommitPlan.from_intent(
            intent,
            data=policy.commit_data if policy is not None else None,
            review_status=self.review_status,
            reason_suffix=RECONCILED_SUFFIX,
        )

    def _escalate(self, effect: Effect, reason: str) -> RecheckResult:
        try:
            marked = self.ledger.mark_needs_reconciliation(effect, reason)
        except OutcomeAlreadyRecorded:
            return self.recheck(effect.case_id, effect.key)
        return self._escalated(marked, reason)

    def _escalated(self, effect: Effect, reason: str) -> RecheckResult:
        """The case to a person and one alert: both idempotent, so repeating them is harmless."""
        self._to_review(
            effect.case_id, f"effect {effect.action} needs reconciliation: {reason}", {}, effect_key=effect.key
        )
        fields = {"caseId": effect.case_id, "effectKey": effect.key, "action": effect.action, "reason": reason}
        self.alert(f"effect {effect.key[:12]} of case {effect.case_id} needs a person: {reason}", fields)
        return RecheckResult("escalated", effect.key, effect.case_id, reason)

    def _to_review(self, case_id: str, reason: str, data: dict[str, Any], *, effect_key: str) -> None:
        """Hand the case to a person because of ``effect_key``, once per effect (the transition names it)."""
        if self.cases.get(case_id) is not None:
            self.cases.escalate(case_id, self.review_status, reason, effect_key=effect_key, data=data)

    def _count_lookup_failure(self, effect: Effect, exc: OutcomeUnknown) -> int:
        doc_id = f"{effect.key}-{effect.attempts}"
        current = self.store.read(HEALTH, KIND_LOOKUP_FAILURES, doc_id)
        count = int(current.body.get("count", 0)) + 1 if current is not None else 1
        body = {
            "id": doc_id,
            "kind": KIND_LOOKUP_FAILURES,
            "caseId": effect.case_id,
            "effectKey": effect.key,
            "count": count,
            "lastError": exc.reason,
        }
        self.store.upsert(HEALTH, KIND_LOOKUP_FAILURES, doc_id, body)
        return count
