"""The seeded plan of a chaos run: cases, the events sent to them, supplier faults and host kills.

Everything is drawn up front from ``random.Random(seed)`` as plain data, so one seed is one plan: the
same events with the same delivery ids at the same offsets, the same fault windows, the same kills.
Only what the plan cannot know is decided live (a note's id, an approval's request id), and the
driver records it.

The mix (per case, by kind):

- ``within``: an invoice within tolerance; sometimes its PO moves out of tolerance afterwards.
- ``over_small``: over-billed under the approval threshold. Then, in a random order: the requested
  note arrives (full or half), the PO goes up or down, an external credit arrives.
- ``over_large``: over-billed above the threshold. Its approval is answered once, twice (the same
  answer), twice with opposite answers, after it went stale (answered on the version first seen, after
  a PO change), or never.
- ``under``: under-billed; sometimes the PO comes down and makes it over-billed.

Every case gets ``case.investigate`` events; about 30 % of deliveries are sent again with the same
delivery id and about 10 % again under a new one; a few cases get a second, conflicting invoice (it
must be set aside with a reason). A few case ids contain ``/``, which the API allows.

Facts have an order (:mod:`chaos.order`). About a third of the cases are *stamped*: every fact
event of theirs carries ``data.occurredAt`` (RFC 3339, with offsets that differ from event to event, so
that the text does not sort as the time does), and they get a burst of two or three ``po.updated``
stamped in source order but delivered in another order, and sometimes a credit note reported twice
with two amounts (a correction), also delivered in any order. The store goes down (an
:class:`Outage`) once or twice, long enough that events outlast their in-place retries; a few
unstamped cases get two or three ``po.updated`` sent, in order, early in an outage: there the order in
which Casekeeper accepted them is the truth.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any

from chaos.config import HOLD_SECONDS
from chaos.disorder import KillSpec, Outage, Stamps, clear_of_outages, default_outages, outages_in, stamped
from chaos.order import OCCURRED_AT

INVOICE = "invoice.received"
PO = "po.updated"
CREDIT = "credit_note.issued"
INVESTIGATE = "case.investigate"

COUNTER_FAULTS = ("fail_before_create", "fail_after_create", "drop_after_create")
"""Faults that count down per request; armed when their window opens, disarmed when it closes."""
KEEP = "keep"
"""In :meth:`Plan.fault_changes`: post what remains of this counter (read from the stub first)."""

_KINDS = (("within", 0.20), ("over_small", 0.42), ("over_large", 0.23), ("under", 0.15))
_APPROVAL_MODES = (("once", 0.3), ("twice", 0.2), ("conflicting", 0.1), ("stale", 0.2), ("never", 0.2))
_KILL_MODES = (("now", 0.4), ("after_supplier_request", 0.35), ("after_fact_event", 0.25))
RESEND_SHARE = 0.30
COPY_SHARE = 0.10
STAMPED_SHARE = 0.35
"""Cases whose fact events carry ``occurredAt`` (and get out-of-order bursts)."""
OUTAGE_CASES = 5
"""Unstamped cases per outage that get ``po.updated`` sent while the store is down."""
_LATEST = 0.97  # no step after this share of the injection phase: the last events still get handled


@dataclass(frozen=True)
class CaseSpec:
    case_id: str
    kind: str
    invoice: dict[str, str]


@dataclass(frozen=True)
class Step:
    """One thing the driver does at ``at`` seconds into the injection phase.

    ``kind``: ``event`` (send ``event_type`` with ``data`` under ``delivery``), ``resend`` (step ``ref``
    again, same delivery id), ``copy`` (step ``ref``'s event again under a new delivery id),
    ``credit_for_request`` (a ``credit_note.issued`` for the note the case requested; ``fraction`` of
    its amount), ``observe_approval`` (remember the pending approval), ``approval`` (answer it:
    ``mode`` and ``decision``).
    """

    id: int
    at: float
    kind: str
    case_id: str
    host: int
    event_type: str = ""
    data: dict[str, str] = field(default_factory=dict)
    delivery: str = ""
    ref: int | None = None
    decision: str = ""
    mode: str = ""
    fraction: str = ""


@dataclass(frozen=True)
class FaultWindow:
    """A supplier fault in force from ``start`` to ``end`` (seconds into the injection phase)."""

    start: float
    end: float
    fault: str
    value: float | int | bool
    label: str


@dataclass(frozen=True)
class Plan:
    seed: int
    seconds: float
    hosts: int
    cases: tuple[CaseSpec, ...]
    steps: tuple[Step, ...]
    faults: tuple[FaultWindow, ...]
    kills: tuple[KillSpec, ...]
    outages: tuple[Outage, ...] = ()

    def fault_changes(self) -> list[tuple[float, dict[str, Any]]]:
        """The fault set to post at each change, in time order; the last one clears everything.

        A counter is armed with its value when its window opens; at later changes inside its window it
        is :data:`KEEP` (post what remains of it), and it is dropped when its window closes.
        """
        times = sorted({w.start for w in self.faults} | {w.end for w in self.faults} | {self.seconds})
        changes: list[tuple[float, dict[str, Any]]] = []
        for t in (t for t in times if t <= self.seconds):
            active: dict[str, Any] = {}
            for w in self.faults:
                if not w.start <= t < w.end or t >= self.seconds:
                    continue
                if w.fault in COUNTER_FAULTS and w.start != t:
                    active.setdefault(w.fault, KEEP)
                elif w.fault in COUNTER_FAULTS:
                    current = active.get(w.fault)
                    active[w.fault] = w.value + (current if isinstance(current, int) else 0)
                else:
                    active[w.fault] = w.value
            changes.append((t, active))
        return changes

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "seconds": self.seconds,
            "hosts": self.hosts,
            "cases": len(self.cases),
            "caseKinds": dict(Counter(c.kind for c in self.cases)),
            "steps": dict(Counter(s.kind for s in self.steps)),
            "events": dict(Counter(s.event_type for s in self.steps if s.kind == "event")),
            "approvalModes": dict(Counter(s.mode for s in self.steps if s.kind == "approval" and s.mode != "again")),
            "creditForRequest": dict(Counter(s.fraction for s in self.steps if s.kind == "credit_for_request")),
            "faultWindows": dict(Counter(w.label for w in self.faults)),
            "kills": dict(Counter(k.mode for k in self.kills)),
            "outages": len(self.outages),
            "outageSeconds": round(sum(o.end - o.start for o in self.outages), 1),
            "stampedFactEvents": sum(1 for s in self.steps if OCCURRED_AT in s.data),
            "outOfOrderSends": sum(1 for s in self.steps if s.mode == "out_of_order"),
            "sentDuringOutages": sum(1 for s in self.steps if s.mode == "during_outage"),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "cases": [asdict(c) for c in self.cases],
            "faults": [asdict(w) for w in self.faults],
            "kills": [asdict(k) for k in self.kills],
            "outages": [asdict(o) for o in self.outages],
        }


def make_plan(seed: int, *, cases: int, seconds: float, kills: int, hosts: int, outages: int | None = None) -> Plan:
    """The plan for ``seed``: a pure function of its arguments. ``outages``: default :func:`default_outages`."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible plan, not a secret
    downs = outages_in(rng, seconds, default_outages(seconds) if outages is None else outages)
    builder = _Builder(rng, seed, seconds, hosts, downs)
    specs = tuple(builder.case(n) for n in range(cases))
    faults = _fault_windows(rng, seconds)
    kill_specs = clear_of_outages(_kills(rng, seconds, kills, hosts), downs, latest=_LATEST * seconds)
    faults += tuple(_holds_for_kills(kill_specs))
    steps = builder.finish()
    ordered_faults = tuple(sorted(faults, key=lambda w: w.start))
    return Plan(seed, seconds, hosts, specs, steps, ordered_faults, kill_specs, downs)


def money(cents: int) -> str:
    return str((Decimal(cents) / 100).quantize(Decimal("0.01")))


class _Builder:
    def __init__(self, rng: random.Random, seed: int, seconds: float, hosts: int, outages: tuple[Outage, ...]) -> None:
        self.rng = rng
        self.seed = seed
        self.seconds = seconds
        self.hosts = hosts
        self.steps: list[Step] = []
        self.outage_quota = [OUTAGE_CASES] * len(outages)
        self.outages = outages

    # --- cases ------------------------------------------------------------------------------------

    def case(self, n: int) -> CaseSpec:
        rng = self.rng
        kind = _pick(rng, _KINDS)
        # A few ids with a space and a colon, which the id rule allows and a URL path must carry
        # percent-encoded. Not "/": the id rule refuses it (400 at the door, casekeeper.core.ids), so an
        # event for such a case would be an invalid request, not a fact the case lost.
        case_id = f"CH {self.seed}:{n:04d}" if rng.random() < 0.05 else f"CH-{self.seed}-{n:04d}"
        variance = {
            "within": rng.randint(-500, 500),
            "over_small": rng.randint(600, 99_000),
            "over_large": rng.randint(100_100, 250_000),
            "under": -rng.randint(600, 60_000),
        }[kind]
        po = rng.randint(max(10_000, -variance + 10_000), 400_000)
        invoice = {
            "invoiceId": f"INV-{n:04d}",
            "supplierId": f"SUP-{rng.randint(1, 9)}",
            "poNumber": f"PO-{n:04d}",
            "invoiceAmount": money(po + variance),
            "poAmount": money(po),
            "currency": "EUR",
        }
        t = rng.uniform(0.0, 0.7 * self.seconds)
        outage = self._outage_for(kind)
        if outage is not None:  # the invoice handled before the store goes down
            t = max(0.0, outage.start - rng.uniform(3.0, 10.0))
        stamps = Stamps(rng, n) if outage is None and kind != "over_large" and rng.random() < STAMPED_SHARE else None
        if stamps is not None:
            invoice = {**invoice, OCCURRED_AT: stamps.next()}
        t = self._event(t, case_id, INVOICE, invoice)
        script = getattr(self, f"_{kind}")(case_id, po + variance, po, variance)
        if stamps is not None:
            script.insert(rng.randint(0, len(script)), ("burst", self._po_burst(po + variance)))
            if rng.random() < 0.4:
                credit_id = f"EXT-{case_id.replace('/', '-')}-C"
                amounts = rng.sample(range(100, 20_000), 2)
                reports = [(CREDIT, {"creditNoteId": credit_id, "amount": money(a)}) for a in amounts]
                script.insert(rng.randint(0, len(script)), ("burst", reports))
        for _ in range(rng.randint(1, 3)):  # investigations anywhere after the invoice
            script.insert(rng.randint(0, len(script)), ("event", INVESTIGATE, {}))
        if rng.random() < 0.04:  # another invoice under the same case id: set aside, with a reason
            other = {**invoice, "invoiceAmount": money(po + variance + 100)}
            script.insert(rng.randint(0, len(script)), ("event", INVOICE, other))
        if outage is not None:
            self._during_outage(outage, case_id, po + variance)
        for item in script:
            t += rng.uniform(1.5, 4.0) if item[0] in ("credit_for_request", "approval") else rng.uniform(0.4, 2.5)
            t = self._item(t, case_id, stamped(item, stamps))
        return CaseSpec(case_id, kind, invoice)

    def _outage_for(self, kind: str) -> Outage | None:
        """The outage this case sends ``po.updated`` into, if it is one of the few that do."""
        if kind == "over_large" or self.rng.random() > 0.12:
            return None
        for i, outage in enumerate(self.outages):
            if self.outage_quota[i] > 0:
                self.outage_quota[i] -= 1
                return outage
        return None

    def _during_outage(self, outage: Outage, case_id: str, invoice: int) -> None:
        """Two or three ``po.updated`` without ``occurredAt``, in order, early in the outage: the order in
        which Casekeeper accepted them is the truth, and the last one must stand."""
        t = outage.start + self.rng.uniform(0.3, 1.5)
        for amount in self._distinct_pos(invoice, self.rng.randint(2, 3)):
            step = self._add(t, "event", case_id, event_type=PO, data={"poAmount": money(amount)}, mode="during_outage")
            self._maybe_resend(step)
            t += self.rng.uniform(0.4, 1.2)

    def _po_burst(self, invoice: int) -> list[tuple[str, dict[str, str]]]:
        return [(PO, {"poAmount": money(a)}) for a in self._distinct_pos(invoice, self.rng.randint(2, 3))]

    def _distinct_pos(self, invoice: int, count: int) -> list[int]:
        amounts: list[int] = []
        while len(amounts) < count:
            amount = self._po_moved(invoice)
            if amount not in amounts:
                amounts.append(amount)
        return amounts

    def _within(self, case_id: str, invoice: int, po: int, variance: int) -> list[tuple[Any, ...]]:
        if self.rng.random() < 0.3:
            return [("event", PO, {"poAmount": money(self._po_moved(invoice))})]
        return []

    def _over_small(self, case_id: str, invoice: int, po: int, variance: int) -> list[tuple[Any, ...]]:
        rng = self.rng
        script: list[tuple[Any, ...]] = []
        if rng.random() < 0.45:
            script.append(("credit_for_request", "1" if rng.random() < 0.6 else "0.5"))
        if rng.random() < 0.35:
            moved = po - rng.randint(1000, 30_000) if rng.random() < 0.5 else po + rng.randint(1000, variance + 10_000)
            script.append(("event", PO, {"poAmount": money(max(moved, 0))}))
        if rng.random() < 0.20:
            credit = {"creditNoteId": f"EXT-{case_id.replace('/', '-')}", "amount": money(rng.randint(100, variance))}
            script.append(("event", CREDIT, credit))
        rng.shuffle(script)
        return script

    def _over_large(self, case_id: str, invoice: int, po: int, variance: int) -> list[tuple[Any, ...]]:
        rng = self.rng
        mode = _pick(rng, _APPROVAL_MODES)
        decision = "approve" if rng.random() < 0.7 else "reject"
        if mode == "never":
            return []
        if mode == "stale":
            moved = {"poAmount": money(po - rng.randint(100, 5000))}
            return [("observe_approval",), ("event", PO, moved), ("approval", "stale", decision)]
        script: list[tuple[Any, ...]] = [("approval", mode, decision)]
        if decision == "approve" and mode != "conflicting" and rng.random() < 0.3:
            script.append(("credit_for_request", "1"))
        return script

    def _under(self, case_id: str, invoice: int, po: int, variance: int) -> list[tuple[Any, ...]]:
        rng = self.rng
        script: list[tuple[Any, ...]] = []
        if rng.random() < 0.3:
            script.append(("event", PO, {"poAmount": money(max(invoice - rng.randint(600, 50_000), 0))}))
        if rng.random() < 0.1:
            credit = {"creditNoteId": f"EXT-{case_id.replace('/', '-')}", "amount": money(rng.randint(100, 20_000))}
            script.append(("event", CREDIT, credit))
        return script

    def _po_moved(self, invoice: int) -> int:
        if self.rng.random() < 0.6:
            return max(invoice - self.rng.randint(600, 40_000), 0)
        return invoice + self.rng.randint(600, 20_000)

    # --- steps ------------------------------------------------------------------------------------

    def _item(self, t: float, case_id: str, item: tuple[Any, ...]) -> float:
        if item[0] == "event":
            return self._event(t, case_id, item[1], item[2])
        if item[0] == "burst":  # stamped in source order, delivered in another order
            events = list(item[1])
            delivered = events[:]
            while delivered == events:
                self.rng.shuffle(delivered)
            for event_type, data in delivered:
                step = self._add(t, "event", case_id, event_type=event_type, data=data, mode="out_of_order")
                self._maybe_resend(step, late=True)
                t += self.rng.uniform(0.3, 1.5)
            return t
        if item[0] == "credit_for_request":
            step = self._add(t, "credit_for_request", case_id, event_type=CREDIT, fraction=item[1])
            self._maybe_resend(step)
            return t
        if item[0] == "observe_approval":
            self._add(t, "observe_approval", case_id)
            return t
        _, mode, decision = item
        self._add(t, "approval", case_id, mode=mode, decision=decision)
        if mode in ("twice", "conflicting"):
            again = decision if mode == "twice" else ("reject" if decision == "approve" else "approve")
            t += self.rng.uniform(0.2, 3.0)
            self._add(t, "approval", case_id, mode="again", decision=again)
        return t

    def _event(self, t: float, case_id: str, event_type: str, data: dict[str, str]) -> float:
        step = self._add(t, "event", case_id, event_type=event_type, data=data)
        self._maybe_resend(step)
        return t

    def _maybe_resend(self, step: Step, *, late: bool = False) -> None:
        """``late``: the re-send comes after the rest of its burst, as a sender's retry of an old fact."""
        if self.rng.random() < (0.5 if late else RESEND_SHARE):
            wait = self.rng.uniform(3.0, 8.0) if late else self.rng.uniform(0.1, 6.0)
            self._add(step.at + wait, "resend", step.case_id, ref=step.id, delivery=step.delivery)
        if self.rng.random() < COPY_SHARE:
            self._add(step.at + self.rng.uniform(0.2, 6.0), "copy", step.case_id, ref=step.id)

    def _add(self, t: float, kind: str, case_id: str, **fields: Any) -> Step:
        n = len(self.steps)
        fields.setdefault(
            "delivery", f"chaos-{self.seed}-{n}" if kind in ("event", "copy", "credit_for_request") else ""
        )
        step = Step(n, min(t, _LATEST * self.seconds), kind, case_id, self.rng.randrange(self.hosts), **fields)
        self.steps.append(step)
        return step

    def finish(self) -> tuple[Step, ...]:
        # Time order; a case's own steps keep their order (ties and clipping keep creation order).
        return tuple(sorted(self.steps, key=lambda s: (s.at, s.id)))


def _fault_windows(rng: random.Random, seconds: float) -> tuple[FaultWindow, ...]:
    windows: list[FaultWindow] = []
    kinds = (
        ("hold", 0.25),
        ("fail_before_create", 0.2),
        ("fail_after_create", 0.2),
        ("drop_after_create", 0.2),
        ("lookup_down_a_while", 0.15),
    )
    for _ in range(max(2, int(seconds / 8))):
        start = rng.uniform(0.05 * seconds, 0.9 * seconds)
        label = _pick(rng, kinds)
        if label == "hold":
            windows.append(FaultWindow(start, start + rng.uniform(2.0, 6.0), "hold_seconds", HOLD_SECONDS, label))
        elif label == "lookup_down_a_while":  # shorter than the three failed lookups that escalate
            windows.append(FaultWindow(start, start + rng.uniform(1.0, 2.0), "lookup_down", True, label))
        else:
            windows.append(FaultWindow(start, start + rng.uniform(2.0, 6.0), label, rng.randint(1, 3), label))
    # Lookups down for good: from late in the phase to its end, so that effects whose outcome is unknown
    # then cannot be settled and must be escalated, and alerted, once each.
    windows.append(FaultWindow(0.62 * seconds, seconds, "lookup_down", True, "lookup_down_for_good"))
    # ...and calls whose outcome is unknown early in it, so that there are such effects in every run.
    # New cases start until 0.7 of the phase; after that few calls are made.
    windows.append(FaultWindow(0.63 * seconds, 0.69 * seconds, "hold_seconds", HOLD_SECONDS, "hold_while_lookup_down"))
    return tuple(windows)


def _kills(rng: random.Random, seconds: float, count: int, hosts: int) -> tuple[KillSpec, ...]:
    if count == 0:
        return ()
    begin, span = 0.08 * seconds, 0.84 * seconds
    slot = span / count
    kills = []
    for i in range(count):
        mode = _pick(rng, _KILL_MODES)
        at = begin + i * slot + rng.uniform(0.0, 0.6 * slot)
        delay = rng.uniform(0.0, 0.3) if mode == "after_fact_event" else 0.0
        kills.append(KillSpec(at, rng.randrange(hosts), mode, rng.uniform(0.1, 1.5), delay))
    return tuple(kills)


def _holds_for_kills(kills: tuple[KillSpec, ...]) -> list[FaultWindow]:
    """Every other kill at a supplier request gets a hold around it: the request has reached the
    supplier (the note exists) and the caller is still waiting for the reply when it dies (F3)."""
    timed = [k for k in kills if k.mode == "after_supplier_request"][::2]
    return [FaultWindow(k.at - 0.5, k.at + 3.0, "hold_seconds", HOLD_SECONDS, "hold_for_kill") for k in timed]


def _pick(rng: random.Random, weighted: tuple[tuple[str, float], ...]) -> str:
    names = [name for name, _ in weighted]
    return rng.choices(names, weights=[w for _, w in weighted])[0]
