"""Amounts are decimal strings with at most two decimals; anything Decimal() would also accept is refused."""

from decimal import Decimal

import pytest

from shared.domain.invoice import parse_amount


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
