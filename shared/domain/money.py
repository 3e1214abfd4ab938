"""Amounts: parsed in one place, printed in one place, and added up without rounding.

:func:`parse_amount` is the only way a stored or received amount becomes a ``Decimal``, and
:func:`amount_text` the only way one becomes text again (the case document, the effect ledger, the
supplier's request body), so what is written reads back as the same number.

An amount is accepted only with at most :data:`MAX_INTEGER_DIGITS` digits before the point and at most
:data:`MINOR_UNIT_DIGITS` after it (the minor unit of every currency Casekeeper handles today; the ISO
code is checked separately). That keeps every sum the money rule makes far inside the precision of
:data:`MONEY`, so it is exact.

Every operation of the money rule goes through this module's functions, which compute in :data:`MONEY`:
a context whose traps include ``Inexact`` and ``Rounded``. An amount from before the bound (a stored
case), or any sum that would not fit, therefore raises :class:`AmountTooLarge` (a ``ValueError``, which
sends the case to a person with the reason) instead of quietly asking a supplier for a rounded amount.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from decimal import (
    ROUND_HALF_EVEN,
    Clamped,
    Context,
    Decimal,
    DecimalException,
    DivisionByZero,
    Inexact,
    InvalidOperation,
    Overflow,
    Rounded,
    Subnormal,
    Underflow,
)

MAX_INTEGER_DIGITS = 15
"""Digits before the decimal point: up to 999 999 999 999 999.99, beyond any invoice."""
MINOR_UNIT_DIGITS = 2
"""Digits after the decimal point."""

MONEY = Context(
    prec=34,
    rounding=ROUND_HALF_EVEN,
    traps=[InvalidOperation, DivisionByZero, Overflow, Underflow, Subnormal, Clamped, Inexact, Rounded],
)
"""34 digits hold any sum of up to 10^16 bounded amounts exactly; anything that would round raises."""

ZERO = Decimal("0")


class AmountTooLarge(ValueError):
    """An amount, or a sum of amounts, that cannot be computed exactly."""


_AMOUNT = re.compile(r"^-?[0-9]+(\.[0-9]{1,2})?$")
_INTEGER_PART = re.compile(r"^-?0*([0-9]+)")


def parse_amount(value: object, name: str) -> Decimal:
    """A decimal amount from a JSON string like ``"1250.40"``: digits, an optional ``-``, at most two
    decimals and at most fifteen digits before the point. Numbers are refused (a float is not exact), and
    so are exponents, signs like ``+``, separators like ``_`` and surrounding spaces, which ``Decimal()``
    would accept. Raises ``ValueError`` naming ``name``."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a decimal string, got {type(value).__name__}")
    if not _AMOUNT.match(value):
        if re.match(r"^-?[0-9]+\.[0-9]{3,}$", value):
            raise ValueError(f"{name} has more than two decimal places: {value!r}")
        raise ValueError(f"{name} is not a decimal amount like '1250.40': {value!r}")
    integer = _INTEGER_PART.match(value)
    if integer is not None and len(integer.group(1)) > MAX_INTEGER_DIGITS:
        raise ValueError(f"{name} has more than {MAX_INTEGER_DIGITS} digits before the decimal point")
    try:
        return Decimal(value)
    except InvalidOperation:  # unreachable after the pattern; kept so a bad edit fails loudly
        raise ValueError(f"{name} is not a decimal amount: {value!r}") from None


def amount_text(amount: Decimal) -> str:
    """The amount as a plain decimal string, as :func:`parse_amount` reads it back: never a float, never
    exponent notation (``str(Decimal("1E+3"))`` is ``"1E+3"``). Raises ``TypeError`` for anything but a
    ``Decimal`` and ``ValueError`` for NaN or infinity."""
    if not isinstance(amount, Decimal):
        raise TypeError(f"amount must be a Decimal, got {type(amount).__name__}")
    if not amount.is_finite():
        raise ValueError(f"amount must be finite, got {amount}")
    return format(amount, "f")


def _exact(operation: str, compute: Callable[[], Decimal]) -> Decimal:
    try:
        return compute()
    except DecimalException as exc:
        raise AmountTooLarge(f"{operation} cannot be computed exactly ({type(exc).__name__})") from None


def total(amounts: Iterable[Decimal]) -> Decimal:
    """The exact sum; raises :class:`AmountTooLarge` rather than round."""
    result = ZERO
    for amount in amounts:
        result = add(result, amount)
    return result


def add(a: Decimal, b: Decimal) -> Decimal:
    """``a + b`` exactly; raises :class:`AmountTooLarge` rather than round."""
    return _exact(f"{a} + {b}", lambda: MONEY.add(a, b))


def sub(a: Decimal, b: Decimal) -> Decimal:
    """``a - b`` exactly; raises :class:`AmountTooLarge` rather than round."""
    return _exact(f"{a} - {b}", lambda: MONEY.subtract(a, b))


def neg(a: Decimal) -> Decimal:
    """``-a`` exactly (unary minus, like ``abs``, rounds to the thread's context otherwise)."""
    return _exact(f"-{a}", lambda: MONEY.minus(a))


def magnitude(a: Decimal) -> Decimal:
    """``abs(a)`` exactly."""
    return _exact(f"|{a}|", lambda: MONEY.abs(a))
