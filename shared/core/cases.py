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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from shared.core.clock import Clock
from shared.core.errors import AlreadyExists, CaseNotFound, ConcurrencyConflict
from shared.core.ports import Document, DocumentStore

CASES = "cases"
CASE_SCHEMA_VERSION = 1
"""Bumped when the case document's shape changes; readers migrate older documents (rule R8)."""

_HISTORY_LIMIT = 100
_MAX_CONFLICT_RETRIES = 8


@dataclass(frozen=True)
class Transition:
    """One committed change: from ``from_version`` to ``from_version + 1``."""

    from_version: int
    status: str
    reason: str | None
    effect_key: str | None
    facts_changed: bool
    at: float


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

    @classmethod
    def from_document(cls, doc: Document) -> Case:
        body = doc.body
        return cls(
            id=doc.id,
            status=str(body["status"]),
            version=int(body["version"]),
            schema_version=int(body.get("schemaVersion", 1)),
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
                )
                for t in body.get("history") or ()
            ),
            notes=tuple(dict(n) for n in body.get("notes") or ()),
            etag=doc.etag,
            ts=doc.ts,
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

    def to_body(self) -> dict[str, Any]:
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
                }
                for t in self.history
            ],
            "notes": list(self.notes),
        }


class CaseRepository:
    """Create, read and conditionally change cases over any :class:`DocumentStore`."""

    def __init__(self, store: DocumentStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    def create(self, case_id: str, facts: Mapping[str, Any], *, status: str = "open") -> Case:
        """Create a case at version 1. Raises ``AlreadyExists`` when the case exists."""
        body = {
            "id": case_id,
            "kind": "case",
            "status": status,
            "version": 1,
            "schemaVersion": CASE_SCHEMA_VERSION,
            "facts": dict(facts),
            "data": {},
            "history": [],
            "notes": [],
        }
        return Case.from_document(self._store.create(CASES, case_id, case_id, body))

    def create_if_absent(self, case_id: str, facts: Mapping[str, Any], *, status: str = "open") -> tuple[Case, bool]:
        """Create the case, or return the existing one; the flag says whether this call created it."""
        try:
            return self.create(case_id, facts, status=status), True
        except AlreadyExists:
            return self.require(case_id), False

    def get(self, case_id: str) -> Case | None:
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
    ) -> bool:
        """Move the case to ``new_status`` if it is still at ``decided_on_version``.

        Increments the version. Returns ``False`` when the case moved on (another writer got there
        first, or the facts changed): the caller re-reads and decides again. ``expected``, a case read
        just before (for instance by the ledger's version gate), saves a read on the happy path.
        ``data`` fields are merged into the case's ``data`` in the same write.
        Raises ``CaseNotFound``; ``ConcurrencyConflict`` only if notes keep racing past the retry bound.
        """

        def mutate(case: Case) -> Case:
            merged = {**case.data, **(data or {})}
            return _advance(case, new_status, reason, effect_key, self._clock.now(), data=merged)

        return self._conditional(case_id, decided_on_version, mutate, expected=expected)

    def update_facts(
        self,
        case_id: str,
        expected_version: int,
        changes: Mapping[str, Any],
        *,
        reason: str,
        new_status: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> bool:
        """Change facts (a PO edit, a credit note) if the case is at ``expected_version``; bumps the version.

        Returns ``False`` when the case moved on. Raises ``CaseNotFound``.
        """

        def mutate(case: Case) -> Case:
            facts = {**case.facts, **changes}
            merged = {**case.data, **(data or {})}
            advanced = _advance(case, new_status or case.status, reason, None, self._clock.now(), data=merged)
            history = (*advanced.history[:-1], _replace_facts_flag(advanced.history[-1]))
            return _replace(advanced, facts=facts, history=history)

        return self._conditional(case_id, expected_version, mutate)

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
                case_id, case.version, status, reason=reason, effect_key=effect_key, data=data, expected=case
            ):
                return True
        raise ConcurrencyConflict(f"case {case_id!r} kept changing while escalating", container=CASES, doc_id=case_id)

    def note(self, case_id: str, text: str, **fields: Any) -> Case:
        """Append an operator-facing note; does not move the version. Raises ``CaseNotFound``."""
        for _ in range(_MAX_CONFLICT_RETRIES):
            case = self.require(case_id)
            entry = {"text": text, "at": self._clock.now(), "atVersion": case.version, **fields}
            notes = ((*case.notes, entry))[-_HISTORY_LIMIT:]
            updated = _replace(case, notes=notes)
            try:
                return Case.from_document(
                    self._store.replace(CASES, case_id, case_id, updated.to_body(), etag=case.etag)
                )
            except ConcurrencyConflict:
                continue
        raise ConcurrencyConflict(
            f"case {case_id!r} kept changing while adding a note", container=CASES, doc_id=case_id
        )

    def _conditional(
        self, case_id: str, version: int, mutate: Callable[[Case], Case], *, expected: Case | None = None
    ) -> bool:
        case = expected if expected is not None and expected.id == case_id else self.require(case_id)
        for _ in range(_MAX_CONFLICT_RETRIES):
            if case.version != version:
                return False
            updated = mutate(case)
            try:
                self._store.replace(CASES, case_id, case_id, updated.to_body(), etag=case.etag)
                return True
            except ConcurrencyConflict:
                # Someone wrote meanwhile: a commit (version moved: we lost) or a note (retry).
                case = self.require(case_id)
        raise ConcurrencyConflict(f"case {case_id!r} kept changing", container=CASES, doc_id=case_id)


def _advance(
    case: Case, status: str, reason: str | None, effect_key: str | None, at: float, *, data: dict[str, Any]
) -> Case:
    transition = Transition(
        from_version=case.version, status=status, reason=reason, effect_key=effect_key, facts_changed=False, at=at
    )
    history = ((*case.history, transition))[-_HISTORY_LIMIT:]
    return _replace(case, status=status, version=case.version + 1, history=history, data=data)


def _replace_facts_flag(t: Transition) -> Transition:
    return replace(t, facts_changed=True)


def _replace(case: Case, **changes: Any) -> Case:
    return replace(case, **changes)
