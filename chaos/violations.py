"""What the checks find: the invariants by number, and a violation of one. The checks of invariants 1, 2
and 5 (:mod:`chaos.checks`) and of 3 and 4 (:mod:`chaos.consistency`) return them; :mod:`chaos.report`
shows them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

INVARIANTS: dict[int, str] = {
    1: "no request for a key whose note already existed (unless a lookup said not found)",
    2: "money: requested + received never exceeds what the facts justified",
    3: "every accepted event reflected or set aside; the last fact in source order stands",
    4: "every effect settled or escalated (alerted once); status consistent; queue drained",
    5: "no 5xx or dropped answer to a valid signed request outside a kill window",
}


@dataclass(frozen=True)
class Violation:
    invariant: int
    case_id: str | None
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
