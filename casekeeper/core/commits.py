"""The status commit that follows a ``done`` effect, finished from one place (rules R2, R4, R5; F5).

The effect's outcome and the case's status commit are two writes in two containers. Whoever holds a
``done`` effect (the workflow right after the call, a resumed run, the reconciler, an operator's
resolution, the timer's sweep) finishes the second write through :meth:`CommitFinisher.finish`:

=================================================  ===============================================
the case                                           then
=================================================  ===============================================
names the effect in a transition from the          ``already``: it landed; nothing is written
effect's version to the intent's status
names the effect otherwise (an escalation)         ``with_person``: a person has it; nothing is
                                                   written
is still at the effect's version                   ``committed``: the commit the effect's intent
                                                   names, conditional on the version; its
                                                   transition names the effect
has moved on                                       ``needs_review``: the effect happened on facts
                                                   the case has left; deciding again could act
                                                   twice, so the case is escalated to a person by
                                                   a transition that names the effect
is gone                                           ``gone``: nothing is written
=================================================  ===============================================

A ``done`` effect whose row names no commit intent raises ``MissingCommitIntent``: nobody can tell what
the case should become, and answering with a quiet no-op would leave its gate open for ever. The
reconciler hands such a case to a person (:meth:`casekeeper.core.reconcile.Reconciler.finish_commit`).

What else is written with the commit (the case ``data`` an action's result fills, or a field the
decision clears) is the caller's business, passed as ``data``: this module knows no field of the
case's data.

Nothing is written on the effect: the effect row stays ``done`` as the ledger left it. What is written
is on the case: a transition that names the effect (the commit or the escalation), which also closes the
case's version gate (``casekeeper.core.cases.Gate``) when the gate is open on that effect.

Whether the commit landed is read from the case's transitions that name the effect, which the history
never trims (``casekeeper.core.cases``). Until one lands, the case's version gate stays open: the sweep
that looks for unfinished commits asks only for cases with an open gate.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from casekeeper.core.cases import Answer, Case, CaseRepository
from casekeeper.core.effect import left_version_alert
from casekeeper.core.errors import ConcurrencyConflict, MissingCommitIntent
from casekeeper.core.ledger import AlertSink, Effect, EffectStatus, Ledger

log = logging.getLogger("casekeeper.commits")

_MAX_ATTEMPTS = 8

Finished = Literal["already", "committed", "needs_review", "with_person", "gone"]


@dataclass(frozen=True)
class FinishResult:
    """What :meth:`CommitFinisher.finish` did, and the case as it last saw it (``None``: no such case)."""

    outcome: Finished
    case: Case | None


@dataclass
class CommitFinisher:
    cases: CaseRepository
    ledger: Ledger
    review_status: str = "needs_review"
    alert: AlertSink | None = None
    """Told when an effect is found to have happened on a version the case left (``effect_on_left_version``)."""

    def finish(
        self,
        effect: Effect,
        *,
        data: Mapping[str, Any] | None = None,
        expected: Case | None = None,
        reason_suffix: str = "",
    ) -> FinishResult:
        """Make the case show ``effect``'s commit, or hand the case to a person. The outcome is ``already``
        (it landed before), ``committed`` (now), ``needs_review`` (the case had moved on: handed to a person
        now), ``with_person`` (an escalation naming the effect is already there) or ``gone`` (no such case).
        Harmless to repeat.

        ``data`` is merged into the case's data with the commit; ``expected`` (the case as the version
        gate left it) saves a read on the happy path. Raises ``ValueError`` for an effect that is not
        ``done``, ``MissingCommitIntent`` for one without a commit intent, ``StoreUnavailable``, and
        ``ConcurrencyConflict`` if the case keeps changing past a bound."""
        if effect.status is not EffectStatus.DONE:
            raise ValueError(f"effect {effect.key[:12]} is {effect.status.value}: only a done effect commits")
        intent = effect.request.get("commit")
        if not isinstance(intent, Mapping) or not intent.get("status"):
            raise MissingCommitIntent(key=effect.key, case_id=effect.case_id, action=effect.action)
        target = str(intent["status"])
        payload = dict(data or {})
        case = expected if expected is not None and expected.id == effect.case_id else None
        for _ in range(_MAX_ATTEMPTS):
            case = case or self.cases.get(effect.case_id)
            if case is None:
                return FinishResult("gone", None)
            named = case.transitions_of(effect.key)
            if any(t.from_version == effect.case_version and t.status == target for t in named):
                return FinishResult("already", case)
            if named:
                return FinishResult("with_person", case)
            if case.version != effect.case_version:
                break
            reason = f"{intent.get('reason') or ''} {reason_suffix}".strip()
            committed = self.cases.commit_status(
                effect.case_id,
                effect.case_version,
                target,
                reason=reason or None,
                effect_key=effect.key,
                data=payload,
                expected=case,
                proposed_by=intent.get("proposedBy"),
                answer=Answer.from_json(intent["answer"]) if intent.get("answer") else None,
            )
            if committed is not None:
                log.info(
                    "case %s: commit of effect %s landed",
                    effect.case_id,
                    effect.key[:12],
                    extra={"caseId": effect.case_id, "effectKey": effect.key},
                )
                return FinishResult("committed", committed)
            case = None  # someone moved it meanwhile: look again
        else:
            raise ConcurrencyConflict(f"case {effect.case_id!r} kept changing", doc_id=effect.case_id)
        reason = (
            f"effect {effect.action} ({effect.key[:12]}) happened on v{effect.case_version} "
            f"but the case moved to v{case.version} before it was committed"
        )
        # The alert before the escalation: a repeat after a crash between the two finds the escalation's
        # transition and stops early (``with_person``), so an alert raised after it could be lost.
        self._alert_left_version(effect, case.version, reason)
        self.to_review(effect.case_id, reason, payload, effect_key=effect.key)
        return FinishResult("needs_review", self.cases.get(effect.case_id))

    def _alert_left_version(self, effect: Effect, case_version: int, reason: str) -> None:
        if self.alert is not None:
            message, fields = left_version_alert(effect, case_version, reason)
            self.alert("effect_on_left_version", message, fields, dedupe_key=effect.key)

    def to_review(self, case_id: str, reason: str, data: Mapping[str, Any], *, effect_key: str) -> None:
        """Hand the case to a person because of ``effect_key``, once per effect (the transition names it)."""
        if self.cases.get(case_id) is not None:
            self.cases.escalate(case_id, self.review_status, reason, effect_key=effect_key, data=dict(data))
