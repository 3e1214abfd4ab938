"""A run: a seed becomes a plan (the world's shape and a list of steps), the plan is carried out in a fresh
world, and the invariants are judged after every step and at every quiescent point.

A step is plain data (its name and arguments: amounts in cents, picks as indexes into what exists when
it runs), so a plan can be printed, replayed and shrunk (:func:`shrink`: steps are dropped while the same
invariant still breaks). The same plan always runs the same way (see :mod:`sim.world`).
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from casekeeper import Query
from casekeeper.check import Step
from casekeeper.errors import CasekeeperError, StoreError
from shared.app.alerts import KIND_ALERT
from shared.domain import events as ev
from shared.views.resolution import Refused, resolve
from sim import checks
from sim.checks import INVARIANTS, Post, Record, Violation
from sim.model import SCRIPTS
from sim.supplier import FAULTS, Note
from sim.world import CALL_TIMEOUT, CONTAINERS, LOCK_DURATION, QUEUE, SKEW_BOUND_SECONDS, Outage, World

DAY = 86400.0
TIME_JUMPS = (1.0, 5.0, LOCK_DURATION + 1, CALL_TIMEOUT + 1, 3600.0 + 1, DAY, 8 * DAY, 31 * DAY, 91 * DAY)
"""How far time may jump in one step: past the lock, the call timeout, the retry window (RETRY_FOR_SECONDS),
and past every retention (checkpoints 7 days, alerts and failures 30, closed cases, settled effects and the
door's records 90)."""
OUTAGE_SECONDS = (10.0, 120.0, 900.0, 3700.0)
"""How long a store outage lasts: shorter and longer than the waits in place and than the retry window."""
CRASH_POINTS = ("F1", "F2", "F3", "F4", "F5", "F6", "F7")
PAUSE_POINTS = ("F1", "F2", "F3", "F4", "F5", "F6")
MEANWHILE = ("reconciler", "timer", "deliver", "resolve", "post_po", "investigate")
SETTLE_ROUNDS = 10
CASES = 2
FUTURE_SKEWS = (0.0, 0.0, 0.0, 120.0, 900.0)
"""A sender's clock ahead of the world's (``occurredAt`` in the future): within and past the door's bound."""


@dataclass(frozen=True)
class Shape:
    """The world a plan runs in: each instance's clock skew, each case's sender, the proposer."""

    offsets: tuple[float, ...]
    senders: tuple[tuple[str, float], ...]
    """Per case: ``dated``, ``undated`` or ``equal`` (dated, often the same ``occurredAt`` again), and how far
    the sender's clock runs ahead of the world's."""
    scripted_model: bool

    def __str__(self) -> str:
        senders = ", ".join(
            f"C{i + 1} {mode}{f' +{ahead:g}s' if ahead else ''}" for i, (mode, ahead) in enumerate(self.senders)
        )
        clocks = ", ".join(f"{o:+g}s" for o in self.offsets)
        proposer = "scripted model" if self.scripted_model else "rules"
        return f"instances' clocks [{clocks}]; senders [{senders}]; proposer {proposer}"


@dataclass(frozen=True)
class Plan:
    seed: int
    shape: Shape
    steps: tuple[Step, ...]


WEIGHTS: dict[str, int] = {
    "po": 10,
    "ext_credit": 5,
    "credit_for_request": 3,
    "investigate": 3,
    "resend": 3,
    "copy": 2,
    "reuse": 3,
    "late_po": 2,
    "hold": 3,
    "release": 3,
    "deliver": 16,
    "outage": 2,
    "crash": 3,
    "pause": 3,
    "supplier_fault": 4,
    "lookup_down": 1,
    "script": 3,
    "approval": 6,
    "resolve": 3,
    "withdraw": 2,
    "redrive": 2,
    "retry_refused": 2,
    "time": 7,
    "reconciler": 3,
    "timer": 3,
    "settle": 2,
}


def make_plan(seed: int, steps: int) -> Plan:
    """The plan a seed makes: the world's shape, then ``steps`` steps (each case's invoice among them, at any
    place: facts may come first)."""
    rng = random.Random(seed)
    instances = rng.choice((1, 2, 2, 3))
    offsets = tuple(
        0.0 if i == 0 else rng.choice((-1, 1)) * rng.randint(0, int(SKEW_BOUND_SECONDS * 2)) / 2
        for i in range(instances)
    )
    senders = tuple(
        (rng.choice(("dated", "undated", "undated", "equal")), rng.choice(FUTURE_SKEWS)) for _ in range(CASES)
    )
    shape = Shape(offsets, senders, rng.random() < 0.5)
    names = list(WEIGHTS)
    weights = [WEIGHTS[n] for n in names]
    plan: list[Step] = [_step(rng, rng.choices(names, weights)[0]) for _ in range(steps)]
    for case in range(CASES):
        where = rng.randint(0, max(0, steps // 2))
        po = rng.choice((0, rng.randint(0, 300_000)))
        over = rng.choice((rng.randint(-5_000, 250_000), rng.randint(1, 150_000), 10_000))
        plan.insert(where, Step("invoice", (case, po, over, rng.randrange(3))))
    return Plan(seed, shape, tuple(plan))


def _step(rng: random.Random, name: str) -> Step:
    case = rng.randrange(CASES)
    inst = rng.randrange(3)
    pick = rng.randrange(20)
    if name == "po":
        return Step(name, (case, rng.choice((-1, 1)) * rng.randint(1, 100_000), inst))
    if name == "ext_credit":
        return Step(name, (case, rng.randint(1, 80_000), inst))
    if name in ("credit_for_request", "investigate", "withdraw", "resolve"):
        return Step(name, (case, pick, inst))
    if name in ("resend", "copy"):
        return Step(name, (pick, inst))
    if name == "reuse":
        return Step(name, (pick, rng.randint(1, 50_000), inst))
    if name == "late_po":
        return Step(name, (case, rng.randint(1, 6), rng.choice((-1, 1)) * rng.randint(1, 100_000), inst))
    if name == "hold":
        return Step(name, (rng.randint(1, 3),))
    if name == "release":
        return Step(name, (pick, rng.random() < 0.3))
    if name == "deliver":
        return Step(name, (rng.randint(1, 4), inst))
    if name == "outage":
        return Step(
            name, (rng.choice((*CONTAINERS, "*")), rng.choice(("outage", "throttle")), rng.choice(OUTAGE_SECONDS))
        )
    if name == "crash":
        return Step(name, (rng.choice(CRASH_POINTS),))
    if name == "pause":
        meanwhile = tuple(rng.sample(MEANWHILE, rng.randint(1, 3)))
        return Step(name, (rng.choice(PAUSE_POINTS), meanwhile))
    if name == "supplier_fault":
        fault = rng.choice(FAULTS)
        meanwhile = tuple(rng.sample(MEANWHILE, rng.randint(1, 3))) if fault == "stall" else ()
        return Step(name, (fault, meanwhile))
    if name == "script":
        return Step(name, (rng.choice(SCRIPTS),))
    if name == "approval":
        return Step(
            name,
            (
                case,
                rng.choice(("approve", "approve", "reject")),
                rng.random() < 0.5,
                rng.choice(("once", "twice", "both")),
                inst,
            ),
        )
    if name == "time":
        return Step(name, (rng.choice(TIME_JUMPS),))
    return Step(name, ())


def _cents(value: int) -> Decimal:
    return (Decimal(value) / 100).quantize(Decimal("0.01"))


@dataclass
class Outcome:
    plan: Plan
    violations: list[Violation]
    at_step: int
    """How many steps had run when the first violation was seen (all of them when none was)."""
    seconds: float
    digest: str = ""
    """What the run did, as one hash (the door's answers, the supplier's journal, the cases and effects as
    stored): two runs of one plan have the same."""


@dataclass
class Sender:
    """A case's sender: its clock (a minute a fact), its last PO amount and its delivery counter."""

    mode: str
    ahead: float
    minute: int = 0
    po: Decimal = Decimal("1000.00")
    invoice: dict[str, Any] | None = None


class Sim:
    """One plan carried out in one world."""

    def __init__(self, plan: Plan, invariants: Iterable[str] = INVARIANTS) -> None:
        self.plan = plan
        self.invariants = tuple(invariants)
        self.world = World(plan.seed, list(plan.shape.offsets), scripted_model=plan.shape.scripted_model)
        self.world.meanwhile = self._meanwhile
        self.record = Record(reached=self.world.reached)
        self.senders = [Sender(mode, ahead) for mode, ahead in plan.shape.senders]
        self.case_ids = [f"SIM{plan.seed}-C{i + 1}" for i in range(CASES)]
        self.asked: dict[int, list[dict[str, Any]]] = {i: [] for i in range(CASES)}
        self.refused: list[tuple[int, str, dict[str, Any], str, int]] = []
        """Posts the door refused with 503: the sender retries them."""
        self.step_no = 0
        self.seq = 0
        self._pending_meanwhile: tuple[str, ...] = ()
        self.checked_posts = 0
        self.expired: set[str] = set()

    # --- running ------------------------------------------------------------------------------------------

    def run(self, *, on_step: Callable[[int, Step], None] | None = None) -> Outcome:
        started = time.monotonic()
        try:
            for index, step in enumerate(self.plan.steps):
                self.step_no = index + 1
                if on_step:
                    on_step(self.step_no, step)
                self.execute(step)
                found = self.check_step()
                if step.name == "settle" and not found:
                    found = self.settle()
                if found:
                    return Outcome(self.plan, found, self.step_no, time.monotonic() - started, self.digest())
            self.step_no = len(self.plan.steps) + 1
            found = self.settle()
            return Outcome(self.plan, found, len(self.plan.steps), time.monotonic() - started, self.digest())
        finally:
            self.world.close()

    def digest(self) -> str:
        posts = [(p.kind, p.delivery, p.status, p.seconds, p.at) for p in self.record.posts]
        stored = [
            (container, doc.id, doc.body)
            for container in ("cases", "effects")
            for doc in sorted(self.world.sqlite.query(container, Query()), key=lambda d: d.id)
        ]
        text = json.dumps([posts, self.world.supplier.journal, stored], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def execute(self, step: Step) -> None:
        if step.name != "settle":  # judged in run(): a quiescent point
            getattr(self, f"do_{step.name}")(*step.args)

    # --- the senders ----------------------------------------------------------------------------------------

    def _occurred(self, case: int, *, back: int = 0) -> dict[str, Any]:
        """The sender's ``occurredAt`` for a new fact (none for an undated sender): its clock (the world's, plus
        how far it runs ahead), each fact a millisecond after its last at least; ``equal`` often gives a fact
        the same time as the one before; ``back``: a fact that happened that many minutes before."""
        sender = self.senders[case]
        if sender.mode == "undated":
            return {}
        if back == 0 and not (sender.mode == "equal" and sender.minute and self.world.rng.random() < 0.5):
            sender.minute += 1
        seconds = self.world.clock.now() + sender.ahead + sender.minute / 1000 - back * 60
        return {"occurredAt": datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")}

    def _post(self, case: int, event_type: str, data: dict[str, Any], delivery: str, inst: int) -> Post:
        case_id = self.case_ids[case]
        answer = self.world.post_event(inst, case_id, event_type, data, delivery)
        self.seq += 1
        post = Post(
            self.step_no,
            case_id,
            event_type,
            data,
            delivery,
            answer.status,
            self.world.clock.now(),
            answer.seconds,
            answer.retry_after,
            self.seq,
            str(answer.body.get("error") or "")[:200],
        )
        self.record.posts.append(post)
        if answer.status == 503:
            self.refused.append((case, event_type, data, delivery, inst))
        return post

    def _delivery(self, case: int) -> str:
        self.seq += 1
        return f"d-{self.case_ids[case]}-{self.seq}"

    def do_invoice(self, case: int, po: int, over: int, inst: int) -> None:
        sender = self.senders[case]
        if sender.invoice is not None:  # one invoice per case: sent again, under a new delivery id
            self._post(
                case, ev.INVOICE_RECEIVED, {**sender.invoice, **self._occurred(case)}, self._delivery(case), inst
            )
            return
        amount = max(Decimal("0.00"), _cents(po) + _cents(over))
        sender.po = _cents(po)
        sender.invoice = {
            "invoiceId": f"INV-{self.case_ids[case]}",
            "supplierId": "SUP-9",
            "poNumber": "PO-77",
            "invoiceAmount": str(amount),
            "poAmount": str(_cents(po)),
            "currency": "EUR",
        }
        self._post(case, ev.INVOICE_RECEIVED, {**sender.invoice, **self._occurred(case)}, self._delivery(case), inst)

    def do_po(self, case: int, move: int, inst: int) -> None:
        sender = self.senders[case]
        sender.po = max(Decimal("0.00"), sender.po + _cents(move))
        self._post(
            case, ev.PO_UPDATED, {"poAmount": str(sender.po), **self._occurred(case)}, self._delivery(case), inst
        )

    def do_late_po(self, case: int, back: int, move: int, inst: int) -> None:
        """A PO edit that happened ``back`` minutes before the sender's newest fact, delivered now."""
        sender = self.senders[case]
        if sender.mode == "undated" or sender.minute == 0:
            return
        amount = max(Decimal("0.00"), sender.po + _cents(move))
        self._post(
            case,
            ev.PO_UPDATED,
            {"poAmount": str(amount), **self._occurred(case, back=back)},
            self._delivery(case),
            inst,
        )

    def do_ext_credit(self, case: int, amount: int, inst: int) -> None:
        note = f"EXT-{self.case_ids[case]}-{self.seq + 1}"
        data = {"creditNoteId": note, "amount": str(_cents(amount)), **self._occurred(case)}
        self._post(case, ev.CREDIT_NOTE_ISSUED, data, self._delivery(case), inst)

    def do_credit_for_request(self, case: int, pick: int, inst: int) -> None:
        """The supplier issues the credit note it made for one of the case's requests, in full."""
        notes = self.world.supplier.notes_for(self.case_ids[case])
        if not notes:
            return
        note = notes[pick % len(notes)]
        data = {"creditNoteId": note.note_id, "amount": note.amount, **self._occurred(case)}
        self._post(case, ev.CREDIT_NOTE_ISSUED, data, self._delivery(case), inst)

    def do_investigate(self, case: int, pick: int, inst: int) -> None:
        self._post(case, ev.CASE_INVESTIGATE, {}, self._delivery(case), inst)

    def _earlier(self, pick: int) -> Post | None:
        earlier = [p for p in self.record.posts if p.accepted and p.kind in ev.ORDERED_TYPES]
        return earlier[pick % len(earlier)] if earlier else None

    def do_resend(self, pick: int, inst: int) -> None:
        """A sender retries a delivery: the same id, the same body."""
        if (again := self._earlier(pick)) is not None:
            self._post(self.case_ids.index(again.case_id), again.kind, dict(again.data), again.delivery, inst)

    def do_copy(self, pick: int, inst: int) -> None:
        """The same event again under a new delivery id (a sender's re-send after a crash)."""
        if (again := self._earlier(pick)) is not None:
            case = self.case_ids.index(again.case_id)
            self._post(case, again.kind, dict(again.data), self._delivery(case), inst)

    def do_reuse(self, pick: int, delta: int, inst: int) -> None:
        """A sender re-uses a delivery id with another body (its amount moved since)."""
        if (again := self._earlier(pick)) is None:
            return
        case = self.case_ids.index(again.case_id)
        name = "amount" if again.kind == ev.CREDIT_NOTE_ISSUED else "poAmount"
        data = {**again.data, name: str(Decimal(str(again.data[name])) + _cents(delta))}
        if again.kind != ev.CREDIT_NOTE_ISSUED:
            self.senders[case].po = Decimal(data[name])
        self._post(case, again.kind, data, again.delivery, inst)

    def do_retry_refused(self) -> None:
        """Senders retry what the door refused with 503."""
        refused, self.refused = self.refused, []
        for case, event_type, data, delivery, inst in refused:
            self._post(case, event_type, data, delivery, inst)

    # --- the network, the store, the hosts ------------------------------------------------------------------

    def do_hold(self, count: int) -> None:
        self.world.network.hold = count

    def do_release(self, pick: int, twice: bool) -> None:
        if self.world.network.held:
            self.world.network.release(pick, twice=twice)

    def do_deliver(self, count: int, inst: int) -> None:
        for _ in range(count):
            if not self.world.deliver_one(inst):
                return

    def do_outage(self, container: str, mode: str, seconds: float) -> None:
        self.world.store.outages[container] = Outage(self.world.clock.now() + seconds, mode)

    def do_crash(self, point: str) -> None:
        if point == "F7":
            self.world.store.checkpoints_failing = True
        else:
            self.world.crash_at = point

    def do_pause(self, point: str, meanwhile: tuple[str, ...]) -> None:
        self.world.pause_at = point
        self._pending_meanwhile = meanwhile

    def do_supplier_fault(self, fault: str, meanwhile: tuple[str, ...]) -> None:
        self.world.supplier.arm(fault)
        if fault == "stall":
            self._pending_meanwhile = meanwhile

    def do_lookup_down(self) -> None:
        self.world.supplier.lookup_down = True

    def do_script(self, mode: str) -> None:
        if self.world.model is not None:
            self.world.model.script.append(mode)

    def do_time(self, seconds: float) -> None:
        before = {}
        for case_id in self.case_ids:  # what the cases show now, before records expire
            before[case_id] = self.world.view(case_id)
            self.record.observe(case_id, before[case_id])
        self.world.clock.advance(seconds)
        self.world.sqlite.purge_expired()  # what expired is gone (reads never saw it anyway)
        for case_id, view in before.items():
            if view is not None and self.world.view(case_id) is None:
                self.record.removed[case_id] = self.step_no  # retention removed the case
                on_the_way = self._deliveries_on_the_way()
                retired = {(p.delivery, p.body_key) for p in self.record.posts if p.case_id == case_id} - on_the_way
                self.record.retired.setdefault(case_id, set()).update(retired)
                self.record.retired_notes.update(n.note_id for n in self.world.supplier.notes_for(case_id))
                for key in [k for k in self.world.reached if k[0] == case_id]:
                    del self.world.reached[key]  # the removed case's: a copy on its way reaches the new one

    def _deliveries_on_the_way(self) -> set[tuple[str, str]]:
        """The reports accepted and not yet handled, as (delivery id, body): held by the network, in the queue
        (active or scheduled) or in its dead-letter queue. By body too: a delivery id accepted again with
        another body after the door forgot it may have one body judged and the other still on its way."""
        queue = self.world.queue
        bodies = [m.body for m in (*queue.peek(QUEUE), *queue.dead_letters(QUEUE))]
        held = self.world.network.held
        found = {(str(e.delivery_id), json.dumps(e.data, sort_keys=True)) for e, _ in held if e.delivery_id}
        for body in bodies:
            with suppress(ValueError, TypeError, AttributeError):
                raw = json.loads(bytes(body))
                if raw.get("deliveryId"):
                    found.add((str(raw["deliveryId"]), json.dumps(raw.get("data"), sort_keys=True)))
        return found

    def do_reconciler(self) -> None:
        self.world.reconciler_tick()

    def do_timer(self) -> None:
        self.world.timer_tick()

    def do_redrive(self) -> None:
        dead = self.world.services().dead_letters
        try:
            if dead.counts().get("dead_lettered"):
                dead.redrive(None)
        except StoreError:
            pass

    def _meanwhile(self) -> None:
        """While a worker is frozen (or its call hangs): the other instances and people act."""
        actions, self._pending_meanwhile = self._pending_meanwhile or ("reconciler", "timer"), ()
        other = 1 % len(self.world.instances)
        for action in actions:
            if action == "reconciler":
                self.world.reconciler_tick(other)
            elif action == "timer":
                self.world.timer_tick(other)
            elif action == "deliver":
                self.do_deliver(2, other)
            elif action == "resolve":
                for case in range(CASES):
                    self.do_resolve(case, 0, other)
            elif action == "post_po":
                self.do_po(0, 1_000, other)
            elif action == "investigate":
                self.do_investigate(0, 0, other)

    # --- people -------------------------------------------------------------------------------------------

    def do_approval(self, case: int, decision: str, oldest: bool, how: str, inst: int) -> None:
        """An approver answers the oldest request seen (perhaps stale) or the newest: once, twice, or two
        approvers at once with both answers."""
        case_id = self.case_ids[case]
        view = self.world.view(case_id)
        pending = (view or {}).get("pendingApproval")
        if pending and pending not in self.asked[case]:
            self.asked[case].append(pending)
        if not self.asked[case]:
            return
        asked = self.asked[case][0 if oldest else -1]
        decisions = [decision] * (2 if how == "twice" else 1)
        if how == "both":
            decisions = [decision, "reject" if decision == "approve" else "approve"]
        for answer in decisions:
            data = {"decision": answer, "caseVersion": asked["caseVersion"], "approver": "ana"}
            reply = self.world.post_approval(inst, case_id, str(asked["requestId"]), data)
            self.seq += 1
            self.record.posts.append(
                Post(
                    self.step_no,
                    case_id,
                    "approval",
                    data,
                    str(asked["requestId"]),
                    reply.status,
                    self.world.clock.now(),
                    reply.seconds,
                    reply.retry_after,
                    self.seq,
                    str(reply.body.get("error") or "")[:200],
                )
            )
            if reply.status == 202 and answer == "approve":
                self.record.approved.add(case_id)

    def do_withdraw(self, case: int, pick: int, inst: int) -> None:
        """A person takes a done request off the books (settled by phone)."""
        case_id = self.case_ids[case]
        done = [e for e in (self.world.view(case_id) or {}).get("effects") or () if e["status"] == "done"]
        if not done:
            return
        key = str(done[pick % len(done)]["key"])
        reply = self.world.post_withdrawal(inst, case_id, key)
        self.seq += 1
        self.record.posts.append(
            Post(
                self.step_no,
                case_id,
                "withdrawal",
                {"effectKey": key},
                key,
                reply.status,
                self.world.clock.now(),
                reply.seconds,
                reply.retry_after,
                self.seq,
                str(reply.body.get("error") or "")[:200],
            )
        )

    def do_resolve(self, case: int, pick: int, inst: int) -> None:
        """An operator settles an open effect as ``effects resolve`` does, after looking at the supplier's
        portal: ``--done`` with the note if it has one for the key, else ``--failed``."""
        case_id = self.case_ids[case]
        effects = [
            e
            for e in (self.world.view(case_id) or {}).get("effects") or ()
            if e["status"] in ("started", "needs_reconciliation")
        ]
        if not effects:
            return
        key = str(effects[pick % len(effects)]["key"])
        note = self.world.supplier.notes.get(key)
        ops = self.world.services(inst).ops
        try:
            if note is not None:
                resolve(
                    ops, key, result=dict(note.body), reason=None, by="op", why="found at the supplier", case_id=case_id
                )
            else:
                resolve(
                    ops,
                    key,
                    result=None,
                    reason="no note at the supplier",
                    by="op",
                    why="none at the supplier",
                    case_id=case_id,
                )
        except (Refused, CasekeeperError):
            pass

    # --- judging --------------------------------------------------------------------------------------------

    def _see_alerts(self) -> None:
        for doc in self.world.sqlite.query("health", Query(equals={"record": KIND_ALERT})):
            self.record.alerts[doc.id] = (str(doc.body.get("alertKind")), dict(doc.body.get("fields") or {}))

    def notes_for(self, case_id: str) -> list[Note]:
        """The supplier's notes for the case as it stands: not those of a case retention removed before it."""
        return [n for n in self.world.supplier.notes_for(case_id) if n.note_id not in self.record.retired_notes]

    def check_step(self) -> list[Violation]:
        self._see_alerts()
        found: list[Violation] = []
        wanted = self.invariants
        if "door" in wanted:
            found += checks.check_door(self.record.posts[self.checked_posts :])
        self.checked_posts = len(self.record.posts)
        if "case_size" in wanted:
            found += checks.check_case_size(self.world.case_document_bytes())
        if "threshold" in wanted:
            for case_id in self.case_ids:
                view = self.world.view(case_id)
                # A note made by a call whose entry a person resolved failed meanwhile is the late watch's to
                # find (a lookup one call timeout after the resolve, docs/design.md#close-stale-claims): it
                # counts once the watch has looked, and at every quiescent point, where time has passed it.
                watched = self.world.watched_keys(case_id)
                notes = [n for n in self.notes_for(case_id) if n.key not in watched]
                if notes:
                    decided = [str(t["reason"]) for t in (view or {}).get("history") or () if t.get("effectKey")]
                    total = checks.requested(notes, view)
                    found += checks.check_threshold(self.record, case_id, total, decided)
        return found

    def settle(self) -> list[Violation]:
        """Bring the world to rest (faults cleared, everything held back delivered, senders' refused posts
        and missing invoices sent, dead letters redriven, time past the call timeout, the reconciler and the
        timer run), then judge every invariant."""
        world = self.world
        world.crash_at = world.pause_at = None
        world.store.outages.clear()
        world.store.checkpoints_failing = False
        world.supplier.clear()
        world.network.hold = 0
        if world.model is not None:
            world.model.script.clear()
        while world.network.held:
            world.network.release(0, twice=False)
        self.do_retry_refused()
        for case, sender in enumerate(self.senders):
            if sender.invoice is None:
                self.do_invoice(case, 100_000, 10_000, 0)
        for _ in range(SETTLE_ROUNDS):
            self.do_redrive()
            for _ in range(200):
                if world.deliver_one(0):
                    continue
                due = world.next_due()
                if due is None:
                    break
                world.clock.advance(max(0.0, due - world.clock.now()) + 0.01)
            world.clock.advance(CALL_TIMEOUT + 1)
            world.reconciler_tick()
            world.timer_tick()
            self.do_retry_refused()
            started = [
                e
                for cid in self.case_ids
                for e in (world.view(cid) or {}).get("effects") or ()
                if e["status"] == "started"
            ]
            if not started and world.next_due() is None:
                break
        found = self.check_step()
        for case_id in self.case_ids:
            view = world.view(case_id)
            found += checks.check_quiescent(self.record, case_id, view, self.notes_for(case_id), self.invariants)
        return found


@dataclass
class Search:
    """Seeds tried one after another until a violation or the budget ends."""

    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failing(self) -> Outcome | None:
        return next((o for o in self.outcomes if o.violations), None)


def search(
    first_seed: int,
    *,
    steps: int,
    seconds: float | None = None,
    seeds: int | None = None,
    invariants: Iterable[str] = INVARIANTS,
    stop_at_first: bool = True,
    progress: Callable[[Outcome], None] | None = None,
) -> Search:
    started = time.monotonic()
    result = Search()
    seed = first_seed
    wanted = tuple(invariants)
    while True:
        if seeds is not None and seed - first_seed >= seeds:
            break
        if seconds is not None and time.monotonic() - started >= seconds:
            break
        outcome = Sim(make_plan(seed, steps), wanted).run()
        result.outcomes.append(outcome)
        if progress:
            progress(outcome)
        if outcome.violations and stop_at_first:
            break
        seed += 1
    return result


def replay(plan: Plan, invariants: Iterable[str] = INVARIANTS) -> Outcome:
    return Sim(plan, invariants).run()


def shrink(outcome: Outcome, *, seconds: float = 60.0, invariants: Iterable[str] = INVARIANTS) -> Plan:
    """A shorter plan that still breaks the first violation's invariant: steps after the failing one are
    dropped, then chunks of steps, halving the chunk size, while the budget lasts."""
    target = outcome.violations[0].invariant
    wanted = tuple(invariants)
    plan = Plan(outcome.plan.seed, outcome.plan.shape, outcome.plan.steps[: outcome.at_step])
    started = time.monotonic()

    def still_fails(candidate: Plan) -> bool:
        result = replay(candidate, wanted)
        return any(v.invariant == target for v in result.violations)

    if not still_fails(plan):
        return Plan(outcome.plan.seed, outcome.plan.shape, outcome.plan.steps)
    chunk = max(1, len(plan.steps) // 2)
    while chunk >= 1 and time.monotonic() - started < seconds:
        index = 0
        while index < len(plan.steps) and time.monotonic() - started < seconds:
            candidate = Plan(plan.seed, plan.shape, plan.steps[:index] + plan.steps[index + chunk :])
            if candidate.steps and still_fails(candidate):
                plan = candidate
            else:
                index += chunk
        chunk //= 2
    return plan
