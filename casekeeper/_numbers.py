"""Numbers that a store keeping JSON numbers as doubles (Cosmos DB) would not give back as they were."""

from __future__ import annotations

import math
from typing import Any

EXACT_INTEGER_LIMIT = 2**53
"""Integers beyond ± this do not survive a trip through a store that keeps JSON numbers as doubles."""


def inexact_numbers(value: Any, path: str = "$", *, integral_floats: bool = True) -> list[str]:
    """Where ``value`` (JSON-shaped) holds a number a double-based store would not give back as it was:
    an ``int`` beyond ±2^53, or (with ``integral_floats``) a ``float`` with an integral value (``2.0``
    comes back as ``2``)."""
    found: list[str] = []
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return found
    if isinstance(value, int):
        if abs(value) > EXACT_INTEGER_LIMIT:
            found.append(f"{path} = {value} (integer beyond 2^53)")
    elif isinstance(value, float):
        if integral_floats and math.isfinite(value) and value.is_integer():
            found.append(f"{path} = {value!r} (would load back as {int(value)})")
    elif isinstance(value, dict):
        for k, v in value.items():
            found.extend(inexact_numbers(v, f"{path}.{k}", integral_floats=integral_floats))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found.extend(inexact_numbers(v, f"{path}[{i}]", integral_floats=integral_floats))
    return found
