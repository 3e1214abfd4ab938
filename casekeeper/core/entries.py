"""How effects sit on the case they guard (rules R2-R5): their entries, the commit that goes with a ``done`` one,
and the archive of closed ones.

An effect's claim and outcome are **entries of the case document** (``effects``): one document, one partition
key, one ETag. So

- **the claim is the version gate**: one conditional replace of the case (``If-Match`` on the case as the
  decision read it) that adds the entry ``started`` only if the case is still at the decided-on version and
  has no entry under that key. It fails as a whole or lands as a whole: a claim on a version the case has
  left writes nothing and calls nothing (``StaleDecision``);
- **the outcome and the status commit are one write**: the entry becomes ``done`` and, in the same
  conditional replace, the case commits the effect's :class:`CommitPlan` (or, if the facts moved while the
  call was in flight, is handed to a person by a transition naming the effect). There is no state "done but
  not committed".

The writes themselves, and when each is made, are :class:`~casekeeper.core.ledger.Ledger`'s.

**The store's clock for "in flight" (R3).** A ``started`` entry's age is measured from its ``changedTs``.
The claim cannot know its own ``_ts``; the case's next reader fills it in with the ``_ts`` of the
document it read (an upper bound on the claim time) and every later write persists it
(``casekeeper.core.cases._stamped``). So a later note moves the document's ``_ts`` but never the entry's time
once stamped: reconciliation may come later than the claim's true age says, never earlier. A re-claim
(same-key retry) writes the entry without ``changedTs``, restarting its clock.

**The case stays bounded.** At most :data:`CLOSED_KEPT` closed entries stay on the case; older closed
ones are moved to the ``effects`` container, the archive (the same body shape): the archive document is
created first (``AlreadyExists``: already there), then the next case write drops the entry and counts it in
``effectsArchived``, so a reader queries the archive only when there is something in it. Open entries, stale
ones and those a person closed as failed (a late outcome may still be recorded over them), and those of the
case's current version (a claim on that version must find them) are never archived. An entry is a few
hundred bytes to a few KB (its request, result and a short history), so 16 closed entries plus the open ones
keep the effects far below Cosmos DB's 2 MB document limit, however many effects a case has over its life;
how many are open, or closed failed by a person, is bounded by the case's size bound, which refuses a claim
on a full case (``casekeeper.core.cases.MAX_CASE_BYTES``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from casekeeper.core.cases import Answer, Case, advance
from casekeeper.core.effect import Effect

CLOSED_KEPT = 16
"""Closed entries kept on the case. A decision reads the earlier effects of its case (what was already
asked, to subtract it) from the case it already read; 16 covers every case the invoice app has seen
(a few credit notes each) without a query, and bounds what every case write carries."""

Committed = Literal["committed", "already", "needs_review", "with_person"]

_OPEN = ("started", "needs_reconciliation")


@dataclass(frozen=True)
class CommitPlan:
    """What the case becomes once the effect is done, written in the same write as the outcome.

    ``status``, ``reason``, ``proposed_by`` and ``answer`` go on the commit's transition; ``data(effect)``
    gives the case ``data`` fields the result fills (``None``: none). ``review_status`` is where the case
    goes when the effect happened on a version the case has since left."""

    status: str
    reason: str | None = None
    proposed_by: str | None = None
    answer: Answer | None = None
    data: Callable[[Effect], Mapping[str, Any]] | None = None
    review_status: str = "needs_review"

    @classmethod
    def from_intent(
        cls,
        intent: Mapping[str, Any],
        *,
        data: Callable[[Effect], Mapping[str, Any]] | None = None,
        review_status: str = "needs_review",
        reason_suffix: str = "",
    ) -> CommitPlan:
        """The plan a stored commit intent (``request.commit``) names. Raises ``ValueError`` without a status."""
        if not intent.get("status"):
            raise ValueError("a commit intent needs a status")
        reason = f"{intent.get('reason') or ''} {reason_suffix}".strip() or None
        answer = Answer.from_json(intent["answer"]) if intent.get("answer") else None
        return cls(
            status=str(intent["status"]),
            reason=reason,
            proposed_by=intent.get("proposedBy"),
            answer=answer,
            data=data,
            review_status=review_status,
        )


def effects_of(case: Case) -> list[Effect]:
    """The effects on ``case`` as read (no store access): what a fresh decision needs."""
    return [Effect.from_entry(case, entry) for entry in case.entries]


def entry_of(case: Case, key: str) -> Effect | None:
    """The effect ``key`` on ``case``, or ``None``."""
    for entry in case.entries:
        if entry.get("id") == key:
            return Effect.from_entry(case, entry)
    return None


def put(case: Case, effect: Effect) -> Case:
    """``case`` with ``effect``'s entry added or replaced. The entry is written without ``changedTs``: the
    next reader stamps it with the ``_ts`` of this write."""
    body = effect.to_body()
    entries = [e for e in case.entries if e.get("id") != effect.key]
    index = next((i for i, e in enumerate(case.entries) if e.get("id") == effect.key), len(entries))
    entries.insert(index, body)
    return replace(case, entries=tuple(entries))


def settle(case: Case, done: Effect, plan: CommitPlan, at: float) -> tuple[Case, Committed, str | None]:
    """``case`` with ``done`` recorded and its commit applied, as one write, judged on the case as read:

    ==============================================  =============================================
    the case                                        then
    ==============================================  =============================================
    names the effect in a transition from the       ``already``: the commit landed; the entry is
    effect's version to the plan's status           written, nothing else
    names the effect otherwise (an escalation)      ``with_person``: a person has it
    is still at the effect's version                ``committed``: the plan's commit, its
                                                    transition naming the effect
    has moved on                                    ``needs_review``: the effect happened on facts
                                                    the case has left; deciding again could act
                                                    twice, so a person decides
    ==============================================  =============================================

    Returns the case to write, what happened to the commit, and, for ``needs_review``, the reason (the
    caller raises the ``effect_on_left_version`` alert)."""
    named = case.transitions_of(done.key)
    data: dict[str, Any] = dict(plan.data(done)) if plan.data is not None else {}
    if landed(case, done, plan.status):
        return put(case, done), "already", None
    if named:
        return put(case, done), "with_person", None
    if case.version == done.case_version or (done.part is not None and on_decision(case, done.case_version)):
        committed = advance(
            case,
            plan.status,
            plan.reason,
            done.key,
            at,
            data={**case.data, **data},
            proposed_by=plan.proposed_by,
            answer=plan.answer,
        )
        return put(committed, done), "committed", None
    reason = (
        f"effect {done.action} ({done.key[:12]}) happened on v{done.case_version} "
        f"but the case moved to v{case.version} before it was committed"
    )
    escalated = advance(case, plan.review_status, reason, done.key, at, data={**case.data, **data}, escalation=True)
    return put(escalated, done), "needs_review", reason


def on_decision(case: Case, version: int) -> bool:
    """Whether ``case`` still stands on the facts decided on ``version`` for a named part of that decision:
    it is at that version, or moved from it only by the commits of that decision's own parts (several
    effects of one action in one decision, each committing as it is done). Any other step (a change of
    facts, an escalation, another decision's commit, a part whose entry is no longer on the case) means
    the decision is stale."""
    if case.version == version:
        return True
    if case.version < version:
        return False
    parts = {e.get("id") for e in case.entries if e.get("caseVersion") == version and e.get("part") is not None}
    steps = sorted((t for t in case.history if t.from_version >= version), key=lambda t: t.from_version)
    if [t.from_version for t in steps] != list(range(version, case.version)):
        return False  # a step is not in the history any more: nobody can tell what it was
    return all(t.effect_key in parts and not t.escalation and not t.facts_changed for t in steps)


def landed(case: Case, done: Effect, status: str) -> bool:
    """Whether ``done``'s commit to ``status`` is in ``case``'s history: a transition naming it from its
    version (a named part commits from whichever version its siblings' commits left, so any commit naming
    it that is not an escalation)."""
    named = case.transitions_of(done.key)
    if done.part is not None:
        return any(t.status == status and not t.escalation for t in named)
    return any(t.from_version == done.case_version and t.status == status for t in named)


def escalate(case: Case, effect: Effect, review_status: str, reason: str, at: float) -> Case:
    """``case`` with ``effect``'s entry as given and, unless a transition to ``review_status`` naming the
    effect is there already, handed to a person by one."""
    if any(t.effect_key == effect.key and t.status == review_status for t in case.history):
        return put(case, effect)
    return put(advance(case, review_status, reason, effect.key, at, data=dict(case.data), escalation=True), effect)


def over_bound(case: Case) -> list[dict[str, Any]]:
    """The closed entries beyond :data:`CLOSED_KEPT`, oldest first: what to archive before the next write.

    Kept on the case whatever their number: a ``failed`` entry closed as stale or by a person (a call that
    was in flight may still report it happened, and that late outcome is recorded over the entry:
    ``casekeeper.core.effect.superseded_by_ignorance``), and the entries of the case's current version (a
    claim on that version looks for its key among the case's entries)."""
    closed = [
        e
        for e in case.entries
        if e.get("status") not in _OPEN
        and not e.get("stale")
        and not (e.get("status") == "failed" and e.get("resolution"))
        and e.get("caseVersion") != case.version
    ]
    excess = len(closed) - CLOSED_KEPT
    return closed[:excess] if excess > 0 else []


def without(case: Case, keys: set[str]) -> Case:
    """``case`` without the entries ``keys`` (archived), counted in ``effectsArchived``."""
    kept = tuple(e for e in case.entries if e.get("id") not in keys)
    return replace(case, entries=kept, effects_archived=case.effects_archived + len(case.entries) - len(kept))


def archive_body(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The archive document of a closed entry: the effect row's body (``changedTs`` kept as ``closedTs``)."""
    body = {k: v for k, v in entry.items() if k != "changedTs"}
    if entry.get("changedTs") is not None:
        body["closedTs"] = entry["changedTs"]
    return body
