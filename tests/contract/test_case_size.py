"""The largest case the bounds allow fits a Cosmos DB item (2 MB), on every store (docs/design.md#case-bounds).

The Cosmos DB test server refuses an item over 2 MB as Cosmos DB does (devhost/cosmos_server.js), so a
case the bounds let grow past it fails here on the ``cosmos`` run. The case is built the way the bounds
allow the most: every refusable write up to ``MAX_CASE_BYTES`` (a full history of transitions with the
longest reasons kept, open effects, data), then every write that is never refused on top: the open
effects' outcomes with the longest results the portal client keeps, hand-overs to a person, a full set of
notes of the longest text kept. Its size is reported (``-s`` prints it; also a JUnit property).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from casekeeper.cases import EffectStatus
from casekeeper.core.cases import (
    _HISTORY_LIMIT,
    MAX_CASE_BYTES,
    MAX_TEXT_CHARS,
    CaseRepository,
    case_bytes,
    reserved_bytes,
)
from casekeeper.core.clock import ManualClock
from casekeeper.core.errors import CaseTooLarge, StoreError
from casekeeper.core.ledger import Ledger
from casekeeper.core.ports import DocumentStore
from shared.supplier.portal import KEPT_FIELDS, MAX_FIELD_CHARS
from tests.support.downstream import leave_started
from tests.support.invoices import invoice

COSMOS_ITEM_LIMIT = 2 * 1024 * 1024
OPEN_EFFECTS = 8


def test_the_largest_case_the_bounds_allow_fits_a_cosmos_item(
    store: DocumentStore, record_property: pytest.RecordProperty
) -> None:
    cases = CaseRepository(store, ManualClock())
    ledger = Ledger(store, cases, call_timeout=120.0)
    cases.create("C-big", invoice("1100.00"))
    # A full history, every reason as long as it is kept.
    for n in range(_HISTORY_LIMIT):
        case = cases.require("C-big")
        assert cases.commit_status("C-big", case.version, "open", reason="r" * (MAX_TEXT_CHARS + n), expected=case)
    # Open effects, whose outcomes are still to come.
    effects = []
    for _ in range(OPEN_EFFECTS):
        version = cases.require("C-big").version
        effects.append(leave_started(ledger, "C-big", request={"amount": "1.00", "currency": "EUR"}, version=version))
        case = cases.require("C-big")
        assert cases.commit_status("C-big", case.version, "open", reason="next", expected=case)
    # Data up to the bound.
    case = cases.require("C-big")
    empty_filler = replace(case, data={**case.data, "filler": ""})
    room = MAX_CASE_BYTES - reserved_bytes(empty_filler.to_body())
    case = cases.annotate("C-big", case.version, lambda data: {**data, "filler": "f" * room}, expected=case)
    assert case is not None
    assert reserved_bytes(case.to_body()) == MAX_CASE_BYTES
    with pytest.raises(CaseTooLarge):
        cases.annotate("C-big", case.version, lambda data: {**data, "more": "m"}, expected=case)

    # What may not be refused, each as large as it can be.
    longest = dict.fromkeys(KEPT_FIELDS, "x" * MAX_FIELD_CHARS)
    for effect in effects:
        ledger.record_outcome(effect, EffectStatus.DONE, result=longest, source="reconciler")
    for n in range(_HISTORY_LIMIT):
        assert cases.escalate("C-big", "needs_review", "e" * (MAX_TEXT_CHARS * 2), effect_key=f"escalated-{n}")
    for _ in range(_HISTORY_LIMIT):
        cases.note("C-big", "n" * (MAX_TEXT_CHARS * 2))

    doc = store.read("cases", "C-big", "C-big")
    assert doc is not None
    size = case_bytes(doc.body)
    record_property("largest_case_bytes", size)
    print(f"largest case: {size} bytes ({size / COSMOS_ITEM_LIMIT:.0%} of a Cosmos DB item)")
    assert size > MAX_CASE_BYTES  # the writes that are never refused did go on top of the bound
    assert size < COSMOS_ITEM_LIMIT
    assert all(e.status is EffectStatus.DONE for e in ledger.for_case("C-big"))


@pytest.mark.cosmos
def test_the_cosmos_test_server_refuses_an_item_over_2_mb(cosmos_server: object) -> None:
    """What makes the test above mean something on Cosmos DB: an item over 2 MB is refused, as in Azure."""
    from devhost.cosmos_server import make_cosmos_store

    with make_cosmos_store(cosmos_server, "too-large") as cosmos:  # type: ignore[arg-type]
        cosmos.create("cases", "C-fits", "C-fits", {"id": "C-fits", "filler": "f" * (COSMOS_ITEM_LIMIT - 4096)})
        with pytest.raises(StoreError, match="413"):
            cosmos.create("cases", "C-over", "C-over", {"id": "C-over", "filler": "f" * COSMOS_ITEM_LIMIT})
        assert cosmos.read("cases", "C-over", "C-over") is None
