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
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any

from shared.chaos.config import HOLD_SECONDS

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
class Plan:
    seed: int
    seconds: float
    hosts: int
    cases: tuple[CaseSpec, ...]
    steps: tuple[Step, ...]
    faults: tuple[FaultWindow, ...]
    kills: tuple[KillSpec, ...]

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
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "cases": [asdict(c) for c in self.cases],
            "faults": [asdict(w) for w in self.faults],
            "kills": [asdict(k) for k in self.kills],
        }


def make_plan(seed: int, *, cases: int, seconds: float, kills: int, hosts: int) -> Plan:
    """The plan for ``seed``: a pure function of its arguments."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible plan, not a secret
    builder = _Builder(rng, seed, seconds, hosts)
    specs = tuple(builder.case(n) for n in range(cases))
    faults = _fault_windows(rng, seconds)
    kill_specs = _kills(rng, seconds, kills, hosts)
    faults += tuple(_holds_for_kills(kill_specs))
    steps = builder.finish()
    return Plan(seed, seconds, hosts, specs, steps, tuple(sorted(faults, key=lambda w: w.start)), kill_specs)


def money(cents: int) -> str:
    return str((Decimal(cents) / 100).quantize(Decimal("0.01")))


class _Builder:
    def __init__(self, rng: random.Random, seed: int, seconds: float, hosts: int) -> None:
        self.rng = rng
        self.seed = seed
        self.seconds = seconds
        self.hosts = hosts
        self.steps: list[Step] = []

    # --- cases ------------------------------------------------------------------------------------

    def case(self, n: int) -> CaseSpec:
        rng = self.rng
        kind = _pick(rng, _KINDS)
        # A few ids with "/", which the API allows for ids (and which must survive routing).
        case_id = f"CH/{self.seed}/{n:04d}" if rng.random() < 0.05 else f"CH-{self.seed}-{n:04d}"
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
        t = self._event(t, case_id, INVOICE, invoice)
        script = getattr(self, f"_{kind}")(case_id, po + variance, po, variance)
        for _ in range(rng.randint(1, 3)):  # investigations anywhere after the invoice
            script.insert(rng.randint(0, len(script)), ("event", INVESTIGATE, {}))
        if rng.random() < 0.04:  # another invoice under the same case id: set aside, with a reason
            other = {**invoice, "invoiceAmount": money(po + variance + 100)}
            script.insert(rng.randint(0, len(script)), ("event", INVOICE, other))
        for item in script:
            t += rng.uniform(1.5, 4.0) if item[0] in ("credit_for_request", "approval") else rng.uniform(0.4, 2.5)
            t = self._item(t, case_id, item)
        return CaseSpec(case_id, kind, invoice)

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

    def _maybe_resend(self, step: Step) -> None:
        if self.rng.random() < RESEND_SHARE:
            self._add(step.at + self.rng.uniform(0.1, 6.0), "resend", step.case_id, ref=step.id, delivery=step.delivery)
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
