"""Money arithmetic that cannot round, and the bound on an amount's size.

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
