"""The ledger's reads: an effect by its key, the effects of a case, what is open or overdue (no writes).

:class:`~casekeeper.core.ledger.Ledger` is an :class:`EffectReads`: reconciliation, the operator commands and
the pages read effects through it. An effect is an entry of its case (``casekeeper.core.entries``) or a row
of the ``effects`` container (the archive of closed entries, and the rows of the two-container layout), so
each read looks in both, the case's entry winning.
"""

from __future__ import annotations

from casekeeper.core import entries
from casekeeper.core.cases import CASES, Case, CaseRepository
from casekeeper.core.effect import EFFECTS, OPEN_STATUSES, Effect, EffectStatus
from casekeeper.core.ports import DocumentStore, OnMalformed, Query, decode_all, walk


class EffectReads:
    """The reads of the ledger over its store and its case repository."""

    _store: DocumentStore
    _cases: CaseRepository
    _call_timeout: float

    def get(self, case_id: str, key: str) -> Effect | None:
        """The effect ``key`` of ``case_id``: its entry on the case, else its row in ``effects`` (the archive,
        or a row of the earlier layout)."""
        case = self._cases.get(case_id)
        if case is not None:
            found = entries.entry_of(case, key)
            if found is not None:
                return found
        doc = self._store.read(EFFECTS, case_id, key)
        return Effect.from_document(doc) if doc is not None else None

    def effects_of(self, case: Case) -> list[Effect]:
        """The effects on ``case`` as already read (no store access), oldest first. Complete unless
        ``case.effects_archived`` (then :meth:`for_case` adds the archive) or the case was written by the
        earlier layout (``schema_version`` 1: its effects are rows of ``effects``)."""
        return entries.effects_of(case)

    def effects_for(self, case: Case) -> list[Effect]:
        """Every effect of ``case`` as already read: its entries with no store access, unless some may be
        elsewhere (closed entries moved to the archive, a case of the two-container layout, or one whose legacy
        gate is open): then :meth:`for_case` (one more read and one query)."""
        if case.schema_version >= 2 and not case.effects_archived and case.gate is None:
            return entries.effects_of(case)
        return self.for_case(case.id)

    def for_case(self, case_id: str) -> list[Effect]:
        """Every effect of the case: its entries, plus the archive and the rows of the two-container layout
        (one query), deduplicated by key, the case's entry winning; oldest first."""
        case = self._cases.get(case_id)
        on_case = entries.effects_of(case) if case is not None else []
        # Always one query of ``effects`` while :meth:`run` (the two-container sequence) still writes rows
        # there; once every effect runs on its record, a case with ``effects_archived == 0`` and schema 2
        # can skip it (and a fresh decision should use :meth:`effects_of`, which reads nothing).
        docs = self._store.query(EFFECTS, Query(partition=case_id, order_by_ts="asc"))
        keys = {e.key for e in on_case}
        return [Effect.from_document(d) for d in docs if d.id not in keys] + on_case

    def find(self, key: str, *, case_id: str | None = None) -> Effect | None:
        """Find an effect by its key (operator use).

        With ``case_id`` (the case the effect belongs to, which the key alone cannot give): only there, as
        :meth:`get` does (one point read of the case, then, if the key is not among its entries, one point read
        of its row in ``effects``, the archive or the two-container layout); ``None`` if it is not that case's.

        Without it: an open entry on a case (one query of the indexed ``openEffects`` flag), else a row of
        ``effects`` (the archive, the two-container layout), else a closed entry still on its case (a walk over
        every case: as slow as the store is large, and what a mistyped or unknown key always pays)."""
        if case_id is not None:
            return self.get(case_id, key)
        found = next((e for e in self.open_entries() if e.key == key), None)
        if found is not None:
            return found
        docs = self._store.query(EFFECTS, Query(equals={"id": key}, limit=1))
        if docs:
            return Effect.from_document(docs[0])
        for doc in walk(self._store, CASES, Query()):
            entry = next((e for e in doc.body.get("effects") or () if e.get("id") == key), None)
            if entry is not None:
                return entries.entry_of(Case.from_document(doc), key)
        return None

    def started_older_than(self, age: float, *, on_malformed: OnMalformed | None = None) -> list[Effect]:
        """``started`` effects whose current attempt began more than ``age`` seconds ago (store clock)."""
        cutoff = self._store.now() - age
        docs = self._store.query(
            EFFECTS, Query(equals={"status": EffectStatus.STARTED.value}, ts_before=cutoff, order_by_ts="asc")
        )
        rows = decode_all(docs, Effect.from_document, on_malformed)
        on_cases = [e for e in self.open_entries(on_malformed=on_malformed) if e.status is EffectStatus.STARTED]
        return rows + sorted((e for e in on_cases if e.ts < cutoff), key=lambda e: e.ts)

    def open_entries(self, *, on_malformed: OnMalformed | None = None) -> list[Effect]:
        """The open entries (``started``, ``needs_reconciliation``) on every case: one query of the indexed
        ``openEffects`` flag, as large as what is open. No ``_ts`` bound on the case: a later note moves the
        case's ``_ts`` but not the entry's time (``casekeeper.core.entries``), so the entries are filtered here."""
        docs = self._store.query(CASES, Query(equals={"openEffects": True}))
        found = decode_all(docs, Case.from_document, on_malformed)
        return [e for case in found for e in entries.effects_of(case) if e.status in OPEN_STATUSES]

    def overdue(self, *, on_malformed: OnMalformed | None = None) -> list[Effect]:
        """``started`` effects past their call timeout: their outcome is unknown, and nobody is mid-call."""
        return self.started_older_than(self._call_timeout, on_malformed=on_malformed)

    def stale_gates(self, *, on_malformed: OnMalformed | None = None) -> list[Case]:
        """Cases whose version gate let an effect through longer ago than the call timeout, with neither
        its commit nor its escalation since: a run stopped between the gate and the commit."""
        return self._cases.with_open_gate(self._call_timeout, on_malformed=on_malformed)

    def with_status_since(self, status: EffectStatus, since: float) -> list[Effect]:
        """Effects in ``status`` that changed after store time ``since``, oldest first."""
        docs = self._store.query(EFFECTS, Query(equals={"status": status.value}, ts_after=since, order_by_ts="asc"))
        return [Effect.from_document(d) for d in docs]

    def with_status(self, *statuses: EffectStatus) -> list[Effect]:
        """Effects in ``statuses``: rows of ``effects`` and, for the open statuses, the open entries on cases
        (closed entries still on their case are not listed here: read them with :meth:`for_case`)."""
        found: list[Effect] = []
        for status in statuses:
            docs = self._store.query(EFFECTS, Query(equals={"status": status.value}, order_by_ts="asc"))
            found.extend(Effect.from_document(d) for d in docs)
        if any(status in OPEN_STATUSES for status in statuses):
            found.extend(e for e in self.open_entries() if e.status in statuses)
        return found
