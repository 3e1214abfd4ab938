"""The versioned case store (rule R5): every status change is conditional on the case version.

A case document carries ``id``, ``status``, ``version``, ``schemaVersion``, ``facts`` and a short
``history`` of its transitions. ``version`` moves by exactly one on every change of status or facts,
and every such change is a conditional write (ETag ``If-Match``): of two writers that decided on the
same version, exactly one commits; the other is told ``False`` and must re-read and decide again.

Notes (``note``) and free-form ``data`` fields written alongside a commit do not change the facts, so
a note does not move the version; it does change the ETag, which a commit absorbs by re-reading.

The status values are the domain's business: this module treats them as opaque strings.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from casekeeper.core.clock import Clock
from casekeeper.core.errors import AlreadyExists, CaseNotFound, CaseTooLarge, ConcurrencyConflict
from casekeeper.core.ports import Document, DocumentStore, OnMalformed, Query, decode_all
from casekeeper.core.watch import AlertSink, Finding

CASES = "cases"
CASE_SCHEMA_VERSION = 1
"""The shape of the case document this build writes and reads. Until 1.0 the shape changes freely and this
stays 1 (no store holds a case an earlier build wrote); from 1.0, a change of the stored shape bumps it and
comes with a reader of the old shape and a test that loads a stored document of it (docs/design.md#formats).
A document of any other schema version is refused as malformed, never read as if it were this one."""

_HISTORY_LIMIT = 100
_MAX_CONFLICT_RETRIES = 8

MAX_CASE_BYTES = 1_000_000
"""The bound of a case document, well under Cosmos DB's 2 MB item limit (docs/design.md#case-bounds). A write
that would take a case's reserved size (:func:`reserved_bytes`) past it is refused with :class:`CaseTooLarge`
and writes nothing: new facts, a decision, bookkeeping about the facts, the claim of a new effect. What
records something that already happened is never refused: an effect's outcome with the status commit that
goes with it, a hand-over to a person (an escalation), a note. Those have the rest of the 2 MB: the
outcomes of the open effects were reserved (:data:`OUTCOME_ROOM_BYTES` each), the history holds at most
``_HISTORY_LIMIT`` transitions and the notes at most ``_HISTORY_LIMIT`` notes, each text cut at
:data:`MAX_TEXT_CHARS`."""
OUTCOME_ROOM_BYTES = 4096
"""The room a refusable write leaves for the outcome of each open effect on the case (its result, reason and
the commit that goes with it), so an outcome is always recordable."""
MAX_TEXT_CHARS = 2000
"""A note's text and a transition's reason are cut here (marked as cut): they are never refused, so each
must be small."""


def case_bytes(body: Mapping[str, Any]) -> int:
    """A case document's size: the body as compact UTF-8 JSON (what a store holds, without its system
    fields)."""
    return len(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))


def reserved_bytes(body: Mapping[str, Any]) -> int:
    """What :data:`MAX_CASE_BYTES` bounds: the document's size plus :data:`OUTCOME_ROOM_BYTES` for each open
    effect (its outcome is still to be written, and may not be refused)."""
    open_effects = sum(1 for e in body.get("effects") or () if e.get("status") in _OPEN_ENTRY_STATUSES)
    return case_bytes(body) + OUTCOME_ROOM_BYTES * open_effects


def checked_body(case: Case, *, limit: int | None) -> dict[str, Any]:
    """``case.to_body()``; raises ``CaseTooLarge`` when ``limit`` is set and the body's reserved size
    (:func:`reserved_bytes`) is over it (``None``: a write that may not be refused)."""
    body = case.to_body()
    if limit is not None:
        size = reserved_bytes(body)
        if size > limit:
            raise CaseTooLarge(case.id, size=size, limit=limit)
    return body


def version_after(version: int) -> int:
    """The version a case has after a change committed on ``version``: every change moves it by exactly
    one (rule R5). So an approval asked by a commit on the decided-on version is asked on the version after
    it (what the approver sees); the one place that says so."""
    return version + 1


@dataclass(frozen=True)
class Answer:
    """A person's answer that a transition commits (rule R6): who decided what, on which version, to which
    request. Recorded as a field of the transition, so a reader never parses it back out of reason prose."""

    request_id: str
    approved: bool
    by: str
    on_version: int
    reason: str | None = None

    @property
    def decision(self) -> str:
        """``approved`` or ``rejected``."""
        return "approved" if self.approved else "rejected"

    def to_json(self) -> dict[str, Any]:
        """The answer as stored in the transition's ``answer``."""
        return {
            "requestId": self.request_id,
            "approved": self.approved,
            "by": self.by,
            "onVersion": self.on_version,
            **({"reason": self.reason} if self.reason else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Answer:
        """The answer stored by :meth:`to_json`."""
        reason = data.get("reason")
        return cls(
            request_id=str(data["requestId"]),
            approved=bool(data["approved"]),
            by=str(data["by"]),
            on_version=int(data["onVersion"]),
            reason=str(reason) if reason else None,
        )


@dataclass(frozen=True)
class Transition:
    """One committed change: from ``from_version`` to ``from_version + 1``."""

    from_version: int
    status: str
    reason: str | None
    effect_key: str | None
    facts_changed: bool
    at: float
    changes: dict[str, Any] | None = None
    """The facts this transition changed: each one's new value, or for a list fact what was added and removed
    (:func:`changed`); ``None`` when it changed none."""
    escalation: bool = False
    """Made by :meth:`CaseRepository.escalate`: the case handed to a person, not a decision."""
    proposed_by: str | None = None
    """Who proposed the decision this transition commits, as the proposer labels itself (``rules``,
    ``model <deployment>``); ``None`` for changes nobody proposed (facts, a person's answer)."""
    delivery_id: str | None = None
    """The delivery whose report made this change of facts (``None``: not a reported fact)."""
    answer: Answer | None = None
    """The person's answer this transition commits (``None``: it commits none)."""

    @property
    def to_version(self) -> int:
        """The version this transition moved the case to."""
        return version_after(self.from_version)


@dataclass(frozen=True)
class Case:
    """A case as read from the store. ``etag`` is what the next conditional write compares."""

    id: str
    status: str
    version: int
    schema_version: int
    facts: dict[str, Any]
    data: dict[str, Any]
    history: tuple[Transition, ...]
    notes: tuple[dict[str, Any], ...]
    etag: str = field(repr=False)
    ts: float = field(repr=False)
    entries: tuple[dict[str, Any], ...] = field(default=(), repr=False)
    """The effects claimed on this case (``casekeeper.core.entries``): one entry per key, the open ones and the
    latest closed ones. Each entry's ``changedTs`` is filled in at read time when the write that last
    changed it left it out (see :func:`_stamped`)."""
    effects_archived: int = 0
    """How many closed entries were moved to the archive (the ``effects`` container)."""

    @classmethod
    def from_document(cls, doc: Document) -> Case:
        """The case a stored document holds. Raises ``ValueError`` for a document of another schema version
        than :data:`CASE_SCHEMA_VERSION` (and ``KeyError``/``TypeError`` for a malformed one)."""
        body = doc.body
        schema = int(body["schemaVersion"])
        if schema != CASE_SCHEMA_VERSION:
            raise ValueError(
                f"case {doc.id!r} has schema version {schema}; this build reads version {CASE_SCHEMA_VERSION}"
            )
        return cls(
            id=doc.id,
            status=str(body["status"]),
            version=int(body["version"]),
            schema_version=schema,
            facts=dict(body.get("facts") or {}),
            data=dict(body.get("data") or {}),
            history=tuple(
                Transition(
                    from_version=int(t["fromVersion"]),
                    status=str(t["status"]),
                    reason=t.get("reason"),
                    effect_key=t.get("effectKey"),
                    facts_changed=bool(t.get("factsChanged", False)),
                    at=float(t.get("at", 0.0)),
                    changes=dict(t["changes"]) if t.get("changes") else None,
                    escalation=bool(t.get("escalation", False)),
                    proposed_by=t.get("proposedBy"),
                    delivery_id=t.get("deliveryId"),
                    answer=Answer.from_json(t["answer"]) if t.get("answer") else None,
                )
                for t in body.get("history") or ()
            ),
            notes=tuple(dict(n) for n in body.get("notes") or ()),
            etag=doc.etag,
            ts=doc.ts,
            entries=_stamped(body.get("effects") or (), doc.ts),
            effects_archived=int(body.get("effectsArchived") or 0),
        )

    def summary(self) -> dict[str, Any]:
        """What a reader needs first: id, status, version, schema version and facts (the API's ``case``)."""
        return {
            "id": self.id,
            "status": self.status,
            "version": self.version,
            "schemaVersion": self.schema_version,
            "facts": self.facts,
        }

    def transition_from(self, version: int) -> Transition | None:
        """The transition committed on ``version``, if it is still in the history."""
        for transition in reversed(self.history):
            if transition.from_version == version:
                return transition
        return None

    def transitions_of(self, effect_key: str) -> tuple[Transition, ...]:
        """Every transition that names ``effect_key``: its status commit, an escalation. Never trimmed from
        the history (see :func:`_trimmed`), so "did this effect's commit land?" has an exact answer."""
        return tuple(t for t in self.history if t.effect_key == effect_key)

    def to_body(self) -> dict[str, Any]:
        """The case as its stored document body (what ``from_document`` reads back)."""
        return {
            "id": self.id,
            "kind": "case",
            "status": self.status,
            "version": self.version,
            "schemaVersion": self.schema_version,
            "facts": self.facts,
            "data": self.data,
            "history": [
                {
                    "fromVersion": t.from_version,
                    "status": t.status,
                    "reason": t.reason,
                    "effectKey": t.effect_key,
                    "factsChanged": t.facts_changed,
                    "at": t.at,
                    **({"changes": t.changes} if t.changes else {}),
                    **({"escalation": True} if t.escalation else {}),
                    **({"proposedBy": t.proposed_by} if t.proposed_by else {}),
                    **({"deliveryId": t.delivery_id} if t.delivery_id is not None else {}),
                    **({"answer": t.answer.to_json()} if t.answer is not None else {}),
                }
                for t in self.history
            ],
            "notes": list(self.notes),
            "effects": list(self.entries),
            # Indexed flag of the timer's backstop sweep: the cases with an effect whose outcome is unknown, or
            # one a person resolved failed that the guard still looks up by key (its late watch).
            "openEffects": any(e.get("status") in _OPEN_ENTRY_STATUSES or e.get("watching") for e in self.entries),
            "effectsArchived": self.effects_archived,
        }


class Watch(Protocol):
    """The application's judgment of every case the guard is about to write, whoever writes it: the
    :class:`~casekeeper.core.watch.Finding` s it returns are raised through the guard's alert sink before
    the write, once each (``casekeeper.core.watch``)."""

    def __call__(self, case: Case, /) -> Iterable[Finding]:
        """What ``case``, as it is about to be written, warrants (empty when nothing)."""
        ...


class CaseRepository:
    """Create, read and conditionally change cases over any :class:`DocumentStore`.

    ``watch`` judges every case this repository is about to write (every write of a case goes through it:
    its own methods and the ledger's, :meth:`replace`); each :class:`Finding` the case as read did not
    already warrant is raised through ``alert`` before the write (``casekeeper.core.watch``). ``max_bytes``:
    the bound a refusable write must keep the case within (:data:`MAX_CASE_BYTES`); a write it refuses
    raises no finding."""

    def __init__(
        self,
        store: DocumentStore,
        clock: Clock,
        *,
        watch: Watch | None = None,
        alert: AlertSink | None = None,
        max_bytes: int = MAX_CASE_BYTES,
    ) -> None:
        if watch is not None and alert is None:
            raise ValueError("a watch needs an alert sink to raise what it finds")
        self._store = store
        self._clock = clock
        self._watch = watch
        self._alert = alert
        self.max_bytes = max_bytes

    def now(self) -> float:
        """The time this repository stamps on what it writes (its clock), for a caller that records it too."""
        return self._clock.now()

    def create(
        self, case_id: str, facts: Mapping[str, Any], *, status: str = "open", data: Mapping[str, Any] | None = None
    ) -> Case:
        """Create a case at version 1 (``data``: its first ``data`` fields). Raises ``AlreadyExists`` when the
        case exists."""
        body = {
            "id": case_id,
            "kind": "case",
            "status": status,
            "version": 1,
            "schemaVersion": CASE_SCHEMA_VERSION,
            "facts": dict(facts),
            "data": dict(data or {}),
            "history": [],
            "notes": [],
        }
        if (size := reserved_bytes(body)) > self.max_bytes:
            raise CaseTooLarge(case_id, size=size, limit=self.max_bytes)
        self._judge(None, Case.from_document(Document(CASES, case_id, case_id, body, "", 0.0)))
        return Case.from_document(self._store.create(CASES, case_id, case_id, body))

    def create_if_absent(
        self, case_id: str, facts: Mapping[str, Any], *, status: str = "open", data: Mapping[str, Any] | None = None
    ) -> tuple[Case, bool]:
        """Create the case, or return the existing one; the flag says whether this call created it."""
        try:
            return self.create(case_id, facts, status=status, data=data), True
        except AlreadyExists:
            return self.require(case_id), False

    def get(self, case_id: str) -> Case | None:
        """The case with this id, or ``None``: one point read."""
        doc = self._store.read(CASES, case_id, case_id)
        return Case.from_document(doc) if doc is not None else None

    def require(self, case_id: str) -> Case:
        """Like :meth:`get`; raises ``CaseNotFound`` when absent."""
        case = self.get(case_id)
        if case is None:
            raise CaseNotFound(case_id)
        return case

    def commit_status(
        self,
        case_id: str,
        decided_on_version: int,
        new_status: str,
        *,
        reason: str | None = None,
        effect_key: str | None = None,
        data: Mapping[str, Any] | None = None,
        expected: Case | None = None,
        escalation: bool = False,
        proposed_by: str | None = None,
        answer: Answer | None = None,
    ) -> Case | None:
        """Move the case to ``new_status`` if it is still at ``decided_on_version``.

        Increments the version and returns the case as written. Returns ``None`` when the case moved on
        (another writer got there first, or the facts changed): the caller re-reads and decides again.
        ``expected``, a case read just before (for instance by the version gate), saves a read.
        ``data`` fields are merged into the case's ``data`` in the same write. ``proposed_by``: who
        proposed the decision, ``answer``: the person's answer it commits (the transition records both).
        Raises ``CaseNotFound``; ``ConcurrencyConflict`` only if notes keep racing past the retry bound.
        """

        def mutate(case: Case) -> Case:
            merged = {**case.data, **(data or {})}
            return advance(
                case,
                new_status,
                reason,
                effect_key,
                self._clock.now(),
                data=merged,
                escalation=escalation,
                proposed_by=proposed_by,
                answer=answer,
            )

        # An effect's status commit and a hand-over to a person record what happened: never refused.
        refusable = effect_key is None and not escalation
        return self._conditional(case_id, decided_on_version, mutate, expected=expected, refusable=refusable)

    def update_facts(
        self,
        case_id: str,
        expected_version: int,
        changes: Mapping[str, Any],
        *,
        reason: str,
        new_status: str | None = None,
        data: Mapping[str, Any] | None = None,
        expected: Case | None = None,
        delivery_id: str | None = None,
    ) -> Case | None:
        """Change facts (a PO edit, a credit note) if the case is at ``expected_version``; bumps the version.

        Returns the case as written, or ``None`` when the case moved on. The transition records the
        changed facts (``changes``) and the delivery that reported them. ``expected`` saves a read.
        Raises ``CaseNotFound``.
        """

        def mutate(case: Case) -> Case:
            facts = {**case.facts, **changes}
            merged = {**case.data, **(data or {})}
            advanced = advance(
                case,
                new_status or case.status,
                reason,
                None,
                self._clock.now(),
                data=merged,
                changes=changed(case.facts, changes),
                delivery_id=delivery_id,
            )
            return _replace(advanced, facts=facts)

        return self._conditional(case_id, expected_version, mutate, expected=expected)

    def annotate(
        self,
        case_id: str,
        version: int,
        change: Callable[[dict[str, Any]], dict[str, Any]],
        *,
        expected: Case | None = None,
    ) -> Case | None:
        """Replace the case's ``data`` with ``change(data)`` if the case is still at ``version``, without
        moving the version: what is written is bookkeeping about the facts (their order, a report set aside
        as superseded), not a change of facts or status. ``change`` is applied again to the case as re-read
        when a note raced the write. Returns ``None`` when the version moved. Raises ``CaseNotFound``."""
        return self._conditional(
            case_id, version, lambda case: _replace(case, data=change(dict(case.data))), expected=expected
        )

    def escalate(
        self,
        case_id: str,
        status: str,
        reason: str,
        *,
        effect_key: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> bool:
        """Move the case to ``status`` from whatever version it is at: for handing it to a person, not for
        a decision (which commits on the version it was made on).

        With ``effect_key``, the transition records which effect caused it, once: returns ``False`` when
        a transition to ``status`` carrying that key is already in the history. Raises ``CaseNotFound``;
        ``ConcurrencyConflict`` if the case keeps changing past the retry bound.
        """
        for _ in range(_MAX_CONFLICT_RETRIES):
            case = self.require(case_id)
            if effect_key is not None and any(t.effect_key == effect_key and t.status == status for t in case.history):
                return False
            if self.commit_status(
                case_id,
                case.version,
                status,
                reason=reason,
                effect_key=effect_key,
                data=data,
                expected=case,
                escalation=True,
            ):
                return True
        raise ConcurrencyConflict(f"case {case_id!r} kept changing while escalating", container=CASES, doc_id=case_id)

    def in_status_since(self, status: str, older_than: float, *, on_malformed: OnMalformed | None = None) -> list[Case]:
        """Cases in ``status`` that have not changed for ``older_than`` seconds (store clock)."""
        cutoff = self._store.now() - older_than
        docs = self._store.query(CASES, Query(equals={"status": status}, ts_before=cutoff, order_by_ts="asc"))
        return decode_all(docs, Case.from_document, on_malformed)

    def in_status(self, status: str, *, on_malformed: OnMalformed | None = None) -> list[Case]:
        """Every case in ``status``, least recently changed first (the approval and operations pages)."""
        docs = self._store.query(CASES, Query(equals={"status": status}, order_by_ts="asc"))
        return decode_all(docs, Case.from_document, on_malformed)

    def note(self, case_id: str, text: str, **fields: Any) -> Case:
        """Append an operator-facing note; does not move the version. Raises ``CaseNotFound``."""
        for _ in range(_MAX_CONFLICT_RETRIES):
            case = self.require(case_id)
            entry = {"text": _cut(text), "at": self._clock.now(), "atVersion": case.version, **fields}
            notes = ((*case.notes, entry))[-_HISTORY_LIMIT:]
            try:
                return self.replace(case, _replace(case, notes=notes), limit=None)
            except ConcurrencyConflict:
                continue
        raise ConcurrencyConflict(
            f"case {case_id!r} kept changing while adding a note", container=CASES, doc_id=case_id
        )

    def replace(self, read: Case, updated: Case, *, limit: int | None) -> Case:
        """Write ``updated`` over ``read`` (``If-Match`` on ``read``'s ETag) and return the case as written:
        the one write of an existing case, after the watch's alerts. Raises ``CaseTooLarge`` when ``limit`` is
        set and the case would pass it (nothing written, nothing raised; ``None``: a write that may not be
        refused), ``ConcurrencyConflict`` on a 412 (the caller re-reads and re-applies)."""
        body = checked_body(updated, limit=limit)
        self._judge(read, updated)
        return Case.from_document(self._store.replace(CASES, read.id, read.id, body, etag=read.etag))

    def _judge(self, read: Case | None, updated: Case) -> None:
        """Raise what the watch finds on ``updated`` and did not find on ``read``: a case in the store has had
        its findings raised before it was written, so only what this write adds is new."""
        if self._watch is None or self._alert is None:
            return
        found = list(self._watch(updated))
        if not found:
            return
        held = {(f.kind, f.dedupe_key) for f in self._watch(read)} if read is not None else set()
        for finding in found:
            if (finding.kind, finding.dedupe_key) not in held:
                self._alert(finding.kind, finding.message, finding.fields, dedupe_key=finding.dedupe_key)

    def _conditional(
        self,
        case_id: str,
        version: int,
        mutate: Callable[[Case], Case],
        *,
        expected: Case | None = None,
        refusable: bool = True,
    ) -> Case | None:
        """Write ``mutate(case)`` if the case is at ``version``. ``refusable``: raise ``CaseTooLarge`` (nothing
        written) when the result would pass :attr:`max_bytes`."""
        case = expected if expected is not None and expected.id == case_id else self.require(case_id)
        limit = self.max_bytes if refusable else None
        for _ in range(_MAX_CONFLICT_RETRIES):
            if case.version != version:
                return None
            try:
                return self.replace(case, mutate(case), limit=limit)
            except ConcurrencyConflict:
                # Someone wrote meanwhile: a commit (version moved: we lost) or a note (retry).
                case = self.require(case_id)
        raise ConcurrencyConflict(f"case {case_id!r} kept changing", container=CASES, doc_id=case_id)


def changed(facts: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """What a transition records of ``changes`` to ``facts``: a fact's new value, except for a list fact,
    where it records ``{"added": [...], "removed": [...]}`` (each side only when not empty): what the change
    added and took away, not the whole list again (docs/design.md#case-bounds)."""
    recorded: dict[str, Any] = {}
    for name, new in changes.items():
        old = facts.get(name)
        if isinstance(new, list) and isinstance(old, list):
            added = list(new)
            removed = []
            for item in old:
                if item in added:
                    added.remove(item)
                else:
                    removed.append(item)
            recorded[name] = {**({"added": added} if added else {}), **({"removed": removed} if removed else {})}
        else:
            recorded[name] = new
    return recorded


def applied(facts: Mapping[str, Any], recorded: Mapping[str, Any]) -> dict[str, Any]:
    """``facts`` after a transition whose ``changes`` are ``recorded`` (what :func:`changed` made of them): a
    reader that replays the history gets the facts each version had."""
    after = dict(facts)
    for name, value in recorded.items():
        old = after.get(name)
        if isinstance(value, dict) and set(value) <= {"added", "removed"} and isinstance(old, list | None):
            items = list(old or ())  # a list fact the reader's starting facts lack was empty
            for item in value.get("removed") or ():
                if item in items:
                    items.remove(item)
            after[name] = [*items, *(value.get("added") or ())]
        else:
            after[name] = value
    return after


def _cut(text: str) -> str:
    if len(text) <= MAX_TEXT_CHARS:
        return text
    return text[: MAX_TEXT_CHARS - 40] + f" ... (cut: {len(text)} characters in all)"


def advance(
    case: Case,
    status: str,
    reason: str | None,
    effect_key: str | None,
    at: float,
    *,
    data: dict[str, Any],
    changes: dict[str, Any] | None = None,
    escalation: bool = False,
    proposed_by: str | None = None,
    delivery_id: str | None = None,
    answer: Answer | None = None,
) -> Case:
    transition = Transition(
        from_version=case.version,
        status=status,
        reason=_cut(reason) if reason is not None else None,
        effect_key=effect_key,
        facts_changed=changes is not None,
        at=at,
        changes=changes,
        escalation=escalation,
        proposed_by=proposed_by,
        delivery_id=delivery_id,
        answer=answer,
    )
    history = _trimmed((*case.history, transition))
    return _replace(case, status=status, version=version_after(case.version), history=history, data=data)


def _trimmed(history: tuple[Transition, ...]) -> tuple[Transition, ...]:
    """The history, at most ``_HISTORY_LIMIT`` transitions, dropping the oldest that name no effect first.

    Transitions that name an effect (its status commit, an escalation) are how anyone tells whether that
    effect's commit landed; a case with many PO edits must not push them out. There are few of them: one
    per supplier request and escalation."""
    excess = len(history) - _HISTORY_LIMIT
    if excess <= 0:
        return history
    kept: list[Transition] = []
    for transition in history:
        if excess > 0 and transition.effect_key is None:
            excess -= 1
            continue
        kept.append(transition)
    return tuple(kept)


_OPEN_ENTRY_STATUSES = frozenset({"started", "needs_reconciliation"})


def _stamped(entries: Any, ts: float) -> tuple[dict[str, Any], ...]:
    """The entries as read, each with its ``changedTs``: an entry written without one (the write that
    claimed it or recorded its outcome cannot know its own ``_ts`` in advance) gets the ``_ts`` of the
    document read, an upper bound on when it changed. Every later write of the case goes through
    :meth:`Case.to_body` and so persists the stamp: from then on the entry's time is frozen, and a stream
    of notes or fact updates (each moving ``_ts``) cannot postpone its reconciliation (rule R3)."""
    stamped: list[dict[str, Any]] = []
    for entry in entries:
        item = dict(entry)
        if item.get("changedTs") is None:
            item["changedTs"] = ts
        stamped.append(item)
    return tuple(stamped)


def _replace(case: Case, **changes: Any) -> Case:
    return replace(case, **changes)
