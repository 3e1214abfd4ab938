"""What a chaos plan adds to put facts out of order and take the store down (:mod:`chaos.plan`
uses it): the store outages, kills kept clear of them, and ``occurredAt`` stamps for a case's facts.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from chaos.order import CREDIT, INVOICE, OCCURRED_AT, PO

OUTAGE_SECONDS = (20.0, 24.0)
"""How long the store stays down: past the in-place retries (four attempts of ``STORE_TIMEOUT_SECONDS``
each, :data:`chaos.config.HOST_ENV`, plus their short waits), so events take the delayed copies."""
_OFFSETS = (0, 2, -5, 5.5, -3)  # hours; 5.5 for the half-hour zones


@dataclass(frozen=True)
class KillSpec:
    """``kill -9`` of host ``host``'s process group at ``at`` (mode ``now``), or at the first credit-note
    request the supplier receives from then on (``after_supplier_request``), or ``delay`` seconds after
    the next ``po.updated``/``credit_note.issued`` a host accepts (``after_fact_event``: while the fact
    change and the decision it owes are being made). Waits are bounded. Restarted after
    ``restart_after`` seconds."""

    at: float
    host: int
    mode: str
    restart_after: float
    delay: float = 0.0


@dataclass(frozen=True)
class Outage:
    """The store is down from ``start`` to ``end`` (seconds into the injection phase): on SQLite an
    outside process holds the store's write lock (``BEGIN IMMEDIATE``; writes wait and fail, reads go on),
    on the Cosmos DB test server the server is paused (``SIGSTOP``, then ``SIGCONT``)."""

    start: float
    end: float


def default_outages(seconds: float) -> int:
    """Two outages in a default-length run, one in a short one."""
    return 2 if seconds >= 100 else 1


def outages_in(rng: random.Random, seconds: float, count: int) -> tuple[Outage, ...]:
    """``count`` outages, spread over the first 60 % of the phase: the delayed copies they cause come back
    and settle well before the end."""
    outages = []
    for i in range(count):
        start = seconds * (0.1 + 0.5 * i / max(count, 1)) + rng.uniform(0.0, 0.05 * seconds)
        outages.append(Outage(start, min(start + rng.uniform(*OUTAGE_SECONDS), 0.9 * seconds)))
    return tuple(outages)


def clear_of_outages(
    kills: tuple[KillSpec, ...], outages: tuple[Outage, ...], *, latest: float
) -> tuple[KillSpec, ...]:
    """A host restarting while the store is down may not get up in time (its start writes): a kill due
    in an outage (or just before it, while it may still wait for its moment) waits for the outage's end."""
    moved: list[KillSpec] = []
    after: Counter[int] = Counter()  # kills moved behind each outage so far: spaced out there
    for planned in kills:
        kill = planned
        for i, outage in enumerate(outages):
            if outage.start - 9.0 <= kill.at <= outage.end + 1.0:
                kill = replace(kill, at=min(outage.end + 2.0 + 3.0 * after[i], latest))
                after[i] += 1
        moved.append(kill)
    return tuple(sorted(moved, key=lambda k: k.at))


class Stamps:
    """``occurredAt`` values for one case, each later than the one before, in varying UTC offsets."""

    def __init__(self, rng: random.Random, n: int) -> None:
        self.rng = rng
        self.at = datetime(2026, 1, 5, 8, 0, tzinfo=UTC) + timedelta(minutes=37 * n)

    def next(self) -> str:
        self.at += timedelta(seconds=self.rng.randint(1, 5400))
        zone = timezone(timedelta(hours=self.rng.choice(_OFFSETS)))
        return self.at.astimezone(zone).isoformat(timespec="milliseconds")


def stamped(item: tuple[Any, ...], stamps: Stamps | None) -> tuple[Any, ...]:
    """A stamped case's script item with ``occurredAt`` on its fact events, in script (source) order; a
    burst's members are stamped in their order here and delivered in another by the plan's builder."""
    if stamps is None:
        return item
    if item[0] == "event" and item[1] in (INVOICE, PO, CREDIT):
        return ("event", item[1], {**item[2], OCCURRED_AT: stamps.next()})
    if item[0] == "burst":
        return ("burst", [(event_type, {**data, OCCURRED_AT: stamps.next()}) for event_type, data in item[1]])
    return item
