"""Amounts are decimal strings with at most two decimals; anything Decimal() would also accept is refused.

An amount is parsed by one function and printed by one (``shared/domain/money.py``): what the case
document, the effect ledger, an approval request and the supplier's request body hold reads back as the
same number, and nothing else in the app turns text into an amount.
"""

import re
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from casekeeper.core.ledger import Effect, EffectStatus
from shared.domain.credit import CreditRequest, position
from shared.domain.invoice import Credit, InvoiceFacts
from shared.domain.money import amount_text, parse_amount
from shared.workflow.actions import REQUEST_CREDIT_NOTE, CreditNoteCall, credit_requests
from shared.workflow.messages import ApprovalRequest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("text", "value"), [("1250.40", "1250.40"), ("0", "0"), ("7.5", "7.5"), ("-3.20", "-3.20")])
def test_plain_decimal_strings_parse(text: str, value: str) -> None:
    assert parse_amount(text, "amount") == Decimal(value)


@pytest.mark.parametrize(
    "text", ["1_000.00", "+5.00", " 5.00", "5.00 ", "1e-2", "1E+3", "1000.", ".50", "NaN", "Infinity", "0x10", ""]
)
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a decimal amount"):
        parse_amount(text, "amount")


def test_sub_cent_amounts_and_numbers_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="more than two decimal places"):
        parse_amount("12.345", "amount")
    for number in (12.5, 100, True):
        with pytest.raises(ValueError, match="must be a decimal string"):
            parse_amount(number, "amount")


# Every bounded amount: up to 15 digits before the point and 0, 1 or 2 after it.
BOUNDED = st.sampled_from([0, 1, 2]).flatmap(
    lambda places: st.integers(-(10 ** (15 + places)) + 1, 10 ** (15 + places) - 1).map(
        lambda units: Decimal(units).scaleb(-places)
    )
)


@given(amount=BOUNDED)
def test_what_is_printed_parses_back_as_the_same_number(amount: Decimal) -> None:
    assert parse_amount(amount_text(amount), "amount") == amount


def test_the_printer_never_writes_exponents_or_anything_not_a_finite_decimal() -> None:
    assert str(Decimal("1E+3")) == "1E+3"  # what the second formatter, str(), wrote
    assert amount_text(Decimal("1E+3")) == "1000"
    assert amount_text(Decimal("0.00")) == "0.00"
    with pytest.raises(ValueError, match="finite"):
        amount_text(Decimal("NaN"))
    with pytest.raises(TypeError, match="Decimal"):
        amount_text(12.5)  # type: ignore[arg-type]


def test_the_money_rules_numbers_are_printed_by_the_one_printer() -> None:
    facts = InvoiceFacts(
        "INV-1", "S-1", "PO-1", Decimal("2E+3"), Decimal("1000.00"), "EUR", (Credit("CN-1", Decimal("1E+2")),)
    )
    shown = position(facts, ()).to_json()
    assert (shown["invoiceAmount"], shown["received"], shown["remaining"]) == ("2000", "100", "900.00")
    assert facts.to_dict()["invoiceAmount"] == "2000" and facts.to_dict()["credits"][0]["amount"] == "100"


REQUEST = {"effectKey": "k", "amount": "250.00", "decidedOnVersion": 2, "known": False, "creditNoteId": None}
APPROVAL = {
    "caseId": "C-1", "caseVersion": 3, "requestId": "r", "action": "request_credit_note", "amount": "1400.00",
    "currency": "EUR",
}  # fmt: skip


def ledger_row(request: dict[str, object]) -> Effect:
    return Effect(
        key="k", case_id="C-1", action=REQUEST_CREDIT_NOTE, case_version=2, status=EffectStatus.STARTED,
        request=request, result=None, reason=None, stale=False, attempts=1, resolution=None, history=(), etag="e",
        ts=0.0,
    )  # fmt: skip


@pytest.mark.parametrize("loose", [12.5, "1e3", " 250.00", "250.001", "NaN"])
def test_the_stored_forms_refuse_what_the_strict_parser_refuses(loose: object) -> None:
    """Before: ``Decimal(str(value))`` took a float, an exponent, padding, a third decimal and NaN."""
    with pytest.raises(ValueError, match="amount"):
        CreditRequest.from_json({**REQUEST, "amount": loose})
    with pytest.raises(ValueError, match="amount"):
        ApprovalRequest.from_json({**APPROVAL, "amount": loose})
    args = {"caseId": "C-1", "invoiceId": "I", "supplierId": "S", "amount": loose, "currency": "EUR"}
    effect = ledger_row(args)
    with pytest.raises(ValueError, match="amount"):
        CreditNoteCall.from_args(args)
    with pytest.raises(ValueError, match="amount"):
        credit_requests([effect])
    assert CreditRequest.from_json(REQUEST).to_json() == REQUEST
    assert ApprovalRequest.from_json(APPROVAL).to_json()["amount"] == "1400.00"


# A known exception, for the read-model change to take with it: the case page's test of the excess.
KNOWN_LOOSE = {"shared/handlers/case_page.py"}


def test_no_production_module_parses_an_amount_loosely() -> None:
    loose = re.compile(r"Decimal\(str\(")
    offending = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "shared").rglob("*.py")
        if path.parts[len(ROOT.parts) + 1] not in ("chaos", "localhost") and loose.search(path.read_text())
    )
    assert offending == sorted(KNOWN_LOOSE), "parse amounts with shared.domain.money.parse_amount"
