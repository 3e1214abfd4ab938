"""Item 7 of the ids-and-amounts rule: dot segments are not ids, amounts have a bounded size, and the money
rule's arithmetic is exact or refuses (it never asks a supplier for a rounded amount)."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from urllib.parse import quote, urljoin

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from casekeeper.core.ids import id_problem
from shared.domain import events as ev
from shared.domain.credit import CreditRequest, position
from shared.domain.invoice import Credit, InvoiceFacts, parse_amount
from shared.domain.money import MAX_INTEGER_DIGITS
from shared.errors import InvalidEvent

BASE = "https://casekeeper.example/api/cases/"


@given(st.text(min_size=1, max_size=8, alphabet=st.sampled_from("./%a é")))
@example(".")
@example("..")
def test_every_accepted_id_reaches_its_own_url(candidate: str) -> None:
    """An id the rule accepts is addressable: as a path segment it survives URL resolution unchanged, so
    ``/api/cases/{id}`` and the approval page's links reach that case and no other. ``.`` and ``..`` do not
    (they resolve to the collection and its parent), so the rule refuses them."""
    if id_problem(candidate) is not None:
        return
    segment = quote(candidate, safe="")
    assert urljoin(BASE, segment) == BASE + segment


@pytest.mark.parametrize("dots", [".", ".."])
def test_dot_segments_are_refused_at_the_door_naming_the_field(dots: str) -> None:
    with pytest.raises(InvalidEvent) as caught:
        ev.parse_event({"type": ev.CASE_INVESTIGATE, "caseId": dots, "data": {}})
    assert list(caught.value.fields) == ["caseId"]
    assert ". or .." in caught.value.fields["caseId"]
    assert id_problem("...") is None  # only the two segments a URL resolves


def invoice(invoice_amount: str, po_amount: str = "0") -> dict[str, object]:
    return {
        "type": ev.INVOICE_RECEIVED,
        "caseId": "INV-big",
        "data": {
            "invoiceId": "INV-big",
            "supplierId": "S-1",
            "poNumber": "PO-1",
            "invoiceAmount": invoice_amount,
            "poAmount": po_amount,
            "currency": "EUR",
        },
    }


def test_an_amount_past_fifteen_integer_digits_is_refused_naming_the_field() -> None:
    """The issue's case: 99999999999999999999999999999.99 against a PO of 0 was accepted, and the money rule
    rounded it and asked the supplier for 0.01 more than owed."""
    with pytest.raises(InvalidEvent) as caught:
        ev.parse_event(invoice("99999999999999999999999999999.99"))
    assert list(caught.value.fields) == ["data.invoiceAmount"]
    assert "more than 15 digits before the decimal point" in caught.value.fields["data.invoiceAmount"]
    largest = "9" * MAX_INTEGER_DIGITS + ".99"
    assert ev.parse_event(invoice(largest)).data["invoiceAmount"] == largest
    with pytest.raises(InvalidEvent):
        ev.parse_event(invoice("1" + "0" * MAX_INTEGER_DIGITS))
    assert parse_amount("000000000000000000001.50", "amount") == Decimal("1.50")  # leading zeros add nothing


amounts = st.decimals(min_value=0, max_value=Decimal("9" * 40), places=2, allow_nan=False, allow_infinity=False)


@given(inv=amounts, po=amounts, credits=st.lists(amounts, max_size=3), asked=st.lists(amounts, max_size=3))
@example(inv=Decimal("99999999999999999999999999999.99"), po=Decimal("0"), credits=[], asked=[])
def test_the_money_rule_is_exact_or_refuses(
    inv: Decimal, po: Decimal, credits: list[Decimal], asked: list[Decimal]
) -> None:
    """Facts stored before the bound (or anything else) may hold amounts of any size: the money rule's numbers
    are then exactly right, or computing them raises ``ValueError`` (the case goes to a person). Never a
    rounded number, which would be a request for money nobody owes."""
    facts = InvoiceFacts(
        "INV-1", "S-1", "PO-1", inv, po, "EUR", credits=tuple(Credit(f"CN-{i}", a) for i, a in enumerate(credits))
    )
    requests = [CreditRequest(f"k{i}", a, i + 1, known=True) for i, a in enumerate(asked)]
    try:
        pos = position(facts, requests)
        remaining = pos.remaining
    except ValueError:
        return
    taken = sum(map(Fraction, [*credits, *asked]), Fraction(0))
    exact = Fraction(inv) - Fraction(po) - taken
    assert Fraction(remaining) == exact
    assert Fraction(pos.excess) == max(Fraction(0), -exact)
