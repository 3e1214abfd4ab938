"""The money invariant, checked from outside: what the supplier was asked against the facts of each decision.

Independent of the code it checks: it reads the supplier stub's record of requests (what was really
asked, under which key, for how much), the ledger only to learn the case version each key was decided
on, and the case history's ``changes`` to rebuild the facts at that version from the invoice the test
sent. It does not use ``shared.domain.credit``.

For every credit note the supplier created for a case (one per key), decided on version ``v``::

    received(v) + outstanding before it (v) + its amount  <=  invoice - PO at v

where ``received(v)`` sums the credit notes recorded in the facts at ``v`` and ``outstanding`` sums the
earlier requests whose note is not among them and that no person had withdrawn by ``v``. A request that
breaks it is excused only when the over-ask was made visible: an ``over_requested`` alert names the case
with an excess at least as large (docs/design.md#money).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from casekeeper.core.cases import Case, applied
from casekeeper.core.ledger import Effect


def facts_by_version(initial: Mapping[str, Any], case: Case) -> dict[int, dict[str, Any]]:
    """The case's facts at every version, from the facts it was created with and each transition's
    ``changes`` (the new values of the facts it changed, what a list gained and lost)."""
    facts = {1: dict(initial)}
    current = dict(initial)
    for transition in sorted(case.history, key=lambda t: t.from_version):
        if transition.changes:
            current = applied(current, transition.changes)
        facts[transition.from_version + 1] = dict(current)
    return facts


def money_violations(
    initial: Mapping[str, Any],
    case: Case,
    effects: Iterable[Effect],
    supplier_requests: Iterable[Mapping[str, Any]],
    *,
    over_requested: Iterable[Mapping[str, Any]] = (),
) -> list[str]:
    """Each request that broke the invariant, in words (empty: it held). ``over_requested``: the fields of the
    ``over_requested`` alerts raised (``caseId``, ``excess``)."""
    told = [Decimal(str(fields["excess"])) for fields in over_requested if fields.get("caseId") == case.id]
    version_of = {e.key: e.case_version for e in effects}
    created: dict[str, tuple[Decimal, str]] = {}  # key -> (amount, note id), for notes the supplier created
    for record in supplier_requests:
        body = record.get("body")
        if record.get("method") != "POST" or not record.get("created") or not isinstance(body, dict):
            continue
        if body.get("caseId") != case.id:
            continue
        created.setdefault(str(record["idempotencyKey"]), (Decimal(str(body["amount"])), str(record["creditNoteId"])))
    facts_at = facts_by_version(initial, case)
    ordered = sorted(created, key=lambda key: version_of.get(key, 0))
    problems: list[str] = []
    for position, key in enumerate(ordered):
        if key not in version_of:
            problems.append(f"the supplier created a note for key {key[:12]} that the ledger does not know")
            continue
        version = version_of[key]
        facts = facts_at.get(version)
        if facts is None:
            problems.append(f"request {key[:12]} was decided on v{version}, which the history does not reach")
            continue
        credits = {str(c["creditNoteId"]): Decimal(str(c["amount"])) for c in facts.get("credits") or ()}
        withdrawn = {str(w["effectKey"]) for w in facts.get("withdrawn") or ()}
        received = sum(credits.values(), Decimal("0"))
        outstanding = sum(
            (
                created[earlier][0]
                for earlier in ordered[:position]
                if earlier not in withdrawn and created[earlier][1] not in credits
            ),
            Decimal("0"),
        )
        amount = created[key][0]
        justified = Decimal(str(facts["invoiceAmount"])) - Decimal(str(facts["poAmount"]))
        excess = received + outstanding + amount - justified
        if excess > 0 and not any(named >= excess for named in told):
            problems.append(
                f"request {key[:12]} for {amount} on v{version}: received {received} + outstanding {outstanding} "
                f"+ {amount} exceeds invoice - PO = {justified}"
            )
    return problems
