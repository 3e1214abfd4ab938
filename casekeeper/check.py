"""Check your own guarded workflow the way Casekeeper's app is checked: seeded, deterministic, shrunk.

You write an entry point, a factory ``world(env) -> Workflow`` (``examples/refund/check.py`` is one): it
builds your guard on ``env.store`` with ``**env.guard_options``, names the effects it declared, a stand-in
of each downstream service that keeps a journal of what it really did, and a fact source (:class:`Facts`:
open a case, change its facts, run the workflow, answer an approval). Then::

    python -m casekeeper.check examples.refund.check:world --seeds 50

A seed becomes a plan: cases opened, runs delivered once, twice and concurrently, a crash (a
``BaseException``, as nothing catches ``kill -9``) before, inside or after the downstream call and the
restart that follows (a fresh workflow from your factory on the same store), the downstream answering 503
before or after it acted, refusing a key (and every later call with it), or stalling past the call timeout
while the world goes on, lookups down, facts changed before the call and while an approval waits,
approvals answered, twice, or after the facts moved, time jumps and the reconciler. Every run ends at a
quiescent point: faults end, time passes the call timeout, the reconciler runs and every case's workflow
runs again until nothing moves.

The checker stands between the guard and your stand-in: it wraps each named effect's ``call`` and
``lookup`` to play the network (the 503s, the stall, the crash inside the call). Judged after every step
and at quiescent points, from your stand-in's journal and the cases as the guard shows them:

- ``once``: the downstream acted at most once per effect key;
- ``fresh``: every call left while the case was at the version its decision was pinned to (the version
  gate held); where a writer changed the facts between the gate and the call, a race no gate closes, an
  alert or escalation named the case (the effect on a version the case left goes to a person);
- ``settled`` (quiescent points): no effect left ``started``; every one the guard could not settle was
  handed to a person (``on_escalate`` heard it); every act in the journal is a ``done`` effect of a
  case, or one a person has: never an act no case knows, never one the case calls ``failed``;
- your own, ``Workflow.invariants`` (a name and a function of the :class:`View`), after every step.

A failure prints its seed, the steps shrunk to the fewest that still break the same invariant, and the
command that reproduces it. Time is a :class:`~casekeeper.ManualClock` (the store's, the guard's and its
monotonic clock), ``uuid.uuid4`` draws from the seed while a world is open, and one thread runs at any
moment, so a seed replays exactly. The store is SQLite: its clock must be the world's.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import json
import logging
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from casekeeper.approvals import PENDING, ApprovalRequest
from casekeeper.cases import Case, Effect, EffectStatus
from casekeeper.clock import Clock, ManualClock
from casekeeper.effects import Call, Lookup
from casekeeper.errors import DownstreamRejected, OutcomeUnknown
from casekeeper.guard import Guard, GuardedEffect
from casekeeper.stores import DocumentStore, Query
from casekeeper.stores.sqlite import SqliteDocumentStore

CALL_TIMEOUT = 30.0
"""The guard's call timeout in the checked world (``env.guard_options``)."""
EPOCH = 1_800_000_000.0
"""Where every world's clock starts: a seed replays at the same instants."""
CASES = 2
"""Cases per plan."""
SETTLE_ROUNDS = 6
INVARIANTS = ("once", "fresh", "settled")
"""The checker's own invariants; a workflow adds its own by name."""
CRASH_POINTS = ("F1", "F2", "F3", "F4", "F5", "F6")
"""F1 decided, F2 claimed (before the call), F3 inside the call (the downstream acted, no reply yet), F4 the
reply is in, F5 the outcome and its commit written, F6 after (docs/design.md#failure-points)."""
CONCURRENT_POINTS = ("F1", "F2", "F4", "F5")
CHANGE_POINTS = ("F1", "F2")
"""Facts changed before the call: after the decision (the gate must refuse), after the claim (a race)."""
FAULTS = ("unavailable_before", "unavailable_after", "refuse", "stall")
MEANWHILE = ("reconcile", "run", "change")
"""What the world may do while a call stalls past the call timeout."""
TIME_JUMPS = (1.0, CALL_TIMEOUT / 2, CALL_TIMEOUT + 1, 3600.0, 86400.0)
WEIGHTS = {
    "run": 14,
    "duplicate": 4,
    "concurrent": 4,
    "crash": 5,
    "fault": 6,
    "lookup_down": 1,
    "change": 3,
    "change_at": 3,
    "answer": 6,
    "time": 4,
    "reconcile": 4,
    "settle": 1,
}

log = logging.getLogger("casekeeper.check")

__all__ = [
    "CALL_TIMEOUT",
    "INVARIANTS",
    "Crash",
    "Env",
    "Factory",
    "Facts",
    "Invariant",
    "Outcome",
    "Plan",
    "Search",
    "Send",
    "Step",
    "View",
    "Violation",
    "Workflow",
    "World",
    "describe",
    "judge",
    "load",
    "main",
    "make_plan",
    "run_plan",
    "search",
    "shrink",
]


class Crash(BaseException):
    """The process died at a failure point (``kill -9``): nothing in the code under test catches it."""


@dataclass
class Env:
    """What the checker gives your factory: a fresh ``directory`` for your stand-ins' files (the factory is
    called again after every crash with the same env: open them from here, so the restarted workflow meets
    the same downstream), the ``store`` (SQLite on the world's clock) and the ``guard_options`` to build
    your guard with (``Guard(env.store, **env.guard_options)``: the clocks, the call timeout, the failure
    points' probe, and the alert and escalation hooks the invariants read)."""

    directory: Path
    store: DocumentStore
    clock: Clock
    guard_options: dict[str, Any]

    def path(self, name: str) -> Path:
        """A file in :attr:`directory`."""
        return self.directory / name


class Facts(Protocol):
    """Your fact source: the events of your world, as your workflow receives them. ``n`` is a number the
    seed draws: make the facts from it (any mapping will do, as long as it is a function of ``n``)."""

    def open(self, case_id: str, n: int) -> object:
        """Create the case (``guard.create``) with facts made from ``n``."""
        ...

    def change(self, case_id: str, n: int) -> object:
        """Change the case's facts (``guard.update`` on its current version), as another writer would."""
        ...

    def run(self, case_id: str) -> object:
        """Deliver one run of the workflow for the case (the event that starts it), to its end."""
        ...

    def answer(self, request: ApprovalRequest, approve: bool, by: str) -> object:
        """Deliver a person's answer to ``request``, given on ``request.version``, to the workflow."""
        ...


@dataclass(frozen=True)
class View:
    """What the invariants judge: the cases as the guard shows them, their effects, the journal of what
    the downstream really did (each act a mapping with at least ``key``, the idempotency key it acted
    under), the alerts and escalations the guard raised (``kind``, ``message``, ``fields``), and whether the
    world is at a quiescent point."""

    cases: Mapping[str, Case]
    effects: Mapping[str, tuple[Effect, ...]]
    journal: tuple[Mapping[str, Any], ...]
    alerts: tuple[Mapping[str, Any], ...]
    quiescent: bool
    errors: tuple[str, ...] = ()
    """What escaped your workflow's deliveries (``repr`` of each exception): the host retries them, so the
    checker does not judge them; an invariant of yours may (an error the guard raises when the workflow misuses
    it, such as a second effect of one decision run with other arguments, belongs there)."""

    def named(self, case_id: str) -> bool:
        """Whether an alert or escalation names the case."""
        return any(case_id in (a["fields"].get("caseId"), a["fields"].get("caseId")) for a in self.alerts)


class Invariant(Protocol):
    """One of your invariants: a function of the :class:`View` returning the violations it sees (none: it
    holds). Judged after every step and at every quiescent point (``view.quiescent``)."""

    def __call__(self, view: View, /) -> Iterable[str]: ...


@dataclass
class Workflow:
    """What your factory returns. ``effects``: every effect your guard declared whose downstream the
    stand-in plays. ``journal()``: the stand-in's acts, read from where it keeps them (it outlives a
    restart). ``invariants``: yours, by name."""

    guard: Guard
    effects: Sequence[GuardedEffect]
    facts: Facts
    journal: Callable[[], Iterable[Mapping[str, Any]]]
    invariants: Mapping[str, Invariant] = field(default_factory=dict)


class Factory(Protocol):
    """Your entry point, ``module:name`` on the command line: the :class:`Workflow` built on ``env``. Called
    once per seed and again after every crash, with the same ``env``."""

    def __call__(self, env: Env, /) -> Workflow: ...


@dataclass(frozen=True)
class Step:
    """One step of a plan: its name and arguments (plain data, so a plan prints, replays and shrinks)."""

    name: str
    args: tuple[Any, ...] = ()

    def __str__(self) -> str:
        return f"{self.name}({', '.join(repr(a) for a in self.args)})"


@dataclass(frozen=True)
class Plan:
    """A seed's steps."""

    seed: int
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Violation:
    """An invariant broken, and how."""

    invariant: str
    message: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.message}"


@dataclass
class Outcome:
    """What a plan's run found."""

    plan: Plan
    violations: list[Violation]
    at_step: int
    """How many steps had run when the first violation was seen (all of them when none was)."""
    seconds: float
    digest: str = ""
    """The journal and the cases as stored, as one hash: two runs of one plan have the same."""


@dataclass(frozen=True)
class Send:
    """A call the guard let through to the downstream: the case's version when it left, and the version
    its decision was pinned to (``None``: no case holds the key)."""

    key: str
    case_id: str | None
    pinned: int | None
    at_send: int | None


def make_plan(seed: int, steps: int) -> Plan:
    """The plan a seed makes: ``steps`` steps, each case opened among them at any place in the first third."""
    rng = random.Random(seed)  # noqa: S311  # seeded on purpose: a seed replays its plan exactly
    names = list(WEIGHTS)
    weights = [WEIGHTS[n] for n in names]
    plan = [_step(rng, rng.choices(names, weights)[0]) for _ in range(steps)]
    for case in range(CASES):
        plan.insert(rng.randint(0, max(0, steps // 3)), Step("open", (case, rng.randrange(1_000_000))))
    return Plan(seed, tuple(plan))


def _step(rng: random.Random, name: str) -> Step:
    case = rng.randrange(CASES)
    if name in ("run", "duplicate"):
        return Step(name, (case,))
    if name == "concurrent":
        return Step(name, (case, rng.choice(CONCURRENT_POINTS)))
    if name == "crash":
        return Step(name, (rng.choice(CRASH_POINTS),))
    if name == "fault":
        fault = rng.choice(FAULTS)
        meanwhile = tuple(rng.sample(MEANWHILE, rng.randint(1, 3))) if fault == "stall" else ()
        return Step(name, (fault, meanwhile))
    if name == "change":
        return Step(name, (case, rng.randrange(1_000_000)))
    if name == "change_at":
        return Step(name, (case, rng.randrange(1_000_000), rng.choice(CHANGE_POINTS)))
    if name == "answer":
        return Step(name, (case, rng.random() < 0.8, rng.random() < 0.7, rng.random() < 0.3))
    if name == "time":
        return Step(name, (rng.choice(TIME_JUMPS),))
    return Step(name, ())


@contextmanager
def seeded_uuids(rng: random.Random) -> Iterator[None]:
    """``uuid.uuid4`` draws from ``rng`` while a world is open, so ids (a stand-in's, a checkpoint's) replay."""
    original = uuid.uuid4

    def uuid4() -> uuid.UUID:
        return uuid.UUID(int=rng.getrandbits(128), version=4)

    uuid.uuid4 = uuid4
    try:
        yield
    finally:
        uuid.uuid4 = original


class World:
    """One plan carried out over one workflow: the faults, the steps, the quiescent points, the judgment."""

    def __init__(self, factory: Factory, plan: Plan, directory: Path) -> None:
        self.factory = factory
        self.plan = plan
        self.rng = random.Random(plan.seed)  # noqa: S311  # seeded on purpose: ids replay
        self.clock = ManualClock(start=EPOCH)
        self.store = SqliteDocumentStore(directory / "store.sqlite", clock=self.clock.now)
        self.alerts: list[dict[str, Any]] = []
        self.escalated: set[str] = set()
        options: dict[str, Any] = {
            "clock": self.clock,
            "monotonic": self.clock.now,
            "call_timeout": CALL_TIMEOUT,
            "probe": self.probe,
            "alert": self.alert,
            "on_escalate": self.escalate,
        }
        self.env = Env(directory, self.store, self.clock, options)
        self.reader = Guard(self.store, clock=self.clock, monotonic=self.clock.now, call_timeout=CALL_TIMEOUT)
        """The checker's own reads of the cases (no effects declared, never writes)."""
        self.case_ids = [f"check{plan.seed}-r{i + 1}" for i in range(CASES)]
        self.opened: list[str] = []
        self.armed: dict[str, list[Callable[[], None]]] = {}
        self.faults: list[tuple[str, tuple[str, ...]]] = []
        self.lookup_down = False
        self.refused: set[str] = set()
        self.undelivered: list[Callable[[], object]] = []
        self.errors: list[str] = []
        self.sends: list[Send] = []
        self.requests: dict[str, list[ApprovalRequest]] = {}
        self.probed = False
        self.crashes = 0
        self.workflow = self._build()

    # --- building the workflow, and the network around its effects ----------------------------------------

    def _build(self) -> Workflow:
        workflow = self.factory(self.env)
        if not isinstance(workflow, Workflow):
            raise TypeError(f"the factory returned {type(workflow).__name__}, not a casekeeper.check.Workflow")
        if not workflow.effects:
            raise TypeError("the workflow names no effects: list the guarded effects its stand-ins play")
        for effect in workflow.effects:
            effect.call = self._network(effect.call)
            if effect.lookup is not None:
                effect.lookup = self._lookups(effect.lookup)
        return workflow

    def restart(self) -> None:
        """The process died: a fresh workflow from the factory, on the same store and downstream."""
        self.crashes += 1
        self.workflow = self._build()

    def _network(self, call: Call) -> Call:
        def through(key: str, args: Mapping[str, Any]) -> Any:
            self._note_send(key)
            fault, meanwhile = self.faults.pop(0) if self.faults else (None, ())
            if fault == "unavailable_before":
                raise OutcomeUnknown("checker: the downstream answered 503 before it acted")
            if fault == "refuse":
                self.refused.add(key)
            if fault == "stall":
                self._stall(meanwhile)
            if key in self.refused:  # a service that honours keys answers a key it refused the same way again
                raise DownstreamRejected("checker: the downstream refused this key", status=422)
            result = call(key, args)
            if inspect.isawaitable(result):
                return self._after_async(result, fault)
            return self._after(result, fault)

        return through

    async def _after_async(self, result: Awaitable[Any], fault: str | None) -> Any:
        return self._after(await result, fault)

    def _after(self, result: Any, fault: str | None) -> Any:
        self._fire("F3")  # the downstream acted; its reply is not back yet
        if fault == "unavailable_after":
            raise OutcomeUnknown("checker: the downstream answered 503 after it acted")
        return result

    def _lookups(self, lookup: Lookup) -> Lookup:
        def through(key: str) -> Any:
            if self.lookup_down:
                raise OutcomeUnknown("checker: lookups are down")
            return lookup(key)

        return through

    def _note_send(self, key: str) -> None:
        for case_id in self.opened:
            case = self.reader.get(case_id)
            if case is None:
                continue
            for effect in self.reader.effects_of(case):
                if effect.key == key:
                    self.sends.append(Send(key, case_id, effect.case_version, case.version))
                    return
        self.sends.append(Send(key, None, None, None))

    def _stall(self, meanwhile: tuple[str, ...]) -> None:
        """The call hangs past the call timeout before the downstream acts, while the world goes on."""
        self.clock.advance(CALL_TIMEOUT + 1)
        case_id = self.sends[-1].case_id or (self.opened[0] if self.opened else None)

        def act() -> None:
            for what in meanwhile:
                if what == "reconcile":
                    self._do(self.workflow.guard.reconcile)
                elif case_id is not None and what == "run":
                    self._do(lambda: self.workflow.facts.run(case_id))
                elif case_id is not None and what == "change":
                    self._do(lambda: self.workflow.facts.change(case_id, self.rng.randrange(1_000_000)))

        self._meanwhile(act)

    # --- failure points --------------------------------------------------------------------------------------

    def probe(self, point: str) -> None:
        """The guard's probe (``env.guard_options``): what is armed at ``point`` happens there."""
        self.probed = True
        self._fire(point)

    def _fire(self, point: str) -> None:
        for action in self.armed.pop(point, []):
            action()

    def _arm(self, point: str, action: Callable[[], None]) -> None:
        self.armed.setdefault(point, []).append(action)

    def _crash(self, point: str) -> None:
        raise Crash(point)

    @staticmethod
    def _meanwhile(action: Callable[[], object]) -> None:
        """Run ``action`` while the caller waits: on a thread started and joined here (the caller may hold a
        running event loop), so one thread runs at any moment."""
        other = threading.Thread(target=action)
        other.start()
        other.join()

    def _do(self, action: Callable[[], object]) -> bool:
        """One delivery or tick, as a host runs it: a crash restarts the workflow; an error is the host's
        to retry (a later step or the quiescent point delivers again). False when it did not finish."""
        try:
            action()
        except Crash:
            self.restart()
            return False
        except Exception as exc:
            log.info("checker: %r", exc)
            self.errors.append(repr(exc))
            return False
        return True

    def _deliver(self, action: Callable[[], object]) -> None:
        """A message delivered to the workflow: one that did not finish is delivered again at the next
        quiescent point, as a queue redelivers what its consumer never completed."""
        if not self._do(action):
            self.undelivered.append(action)

    # --- hooks the guard calls -------------------------------------------------------------------------------

    def alert(self, alert_kind: str, message: str, fields: Mapping[str, Any], *, dedupe_key: str) -> None:
        """The guard's ``alert`` hook: every alert is kept for the invariants (:attr:`View.alerts`)."""
        self.alerts.append({"kind": alert_kind, "message": message, "fields": dict(fields)})

    def escalate(self, message: str, fields: dict[str, Any]) -> None:
        """The guard's ``on_escalate`` hook: an effect handed to a person, kept with its key."""
        self.alerts.append({"kind": "escalation", "message": message, "fields": dict(fields)})
        if fields.get("effectKey"):
            self.escalated.add(str(fields["effectKey"]))

    # --- the steps -------------------------------------------------------------------------------------------

    def execute(self, step: Step) -> None:
        """Carry out one step (``settle`` is judged by the caller), then note the approvals now waiting."""
        if step.name != "settle":
            getattr(self, f"do_{step.name}")(*step.args)
        self._see_requests()

    def _opened(self, case: int) -> str | None:
        case_id = self.case_ids[case % CASES]
        return case_id if case_id in self.opened else None

    def do_open(self, case: int, n: int) -> None:
        """The fact source opens the case (once)."""
        case_id = self.case_ids[case % CASES]
        if case_id not in self.opened:
            self.opened.append(case_id)
            self._do(lambda: self.workflow.facts.open(case_id, n))

    def do_run(self, case: int) -> None:
        """One run of the workflow for the case."""
        if (case_id := self._opened(case)) is not None:
            self._do(lambda: self.workflow.facts.run(case_id))

    def do_duplicate(self, case: int) -> None:
        """The run delivered twice, one after the other."""
        self.do_run(case)
        self.do_run(case)

    def do_concurrent(self, case: int, point: str) -> None:
        """A second delivery of the run reaches another worker while the first is at ``point``."""
        if (case_id := self._opened(case)) is None:
            return
        self._arm(point, lambda: self._meanwhile(lambda: self._do(lambda: self.workflow.facts.run(case_id))))
        self.do_run(case)

    def do_crash(self, point: str) -> None:
        """The next process to reach ``point`` dies there (then restarts)."""
        self._arm(point, lambda: self._crash(point))

    def do_fault(self, fault: str, meanwhile: tuple[str, ...]) -> None:
        """The downstream's next call meets ``fault``; a stall lets ``meanwhile`` happen."""
        self.faults.append((fault, tuple(meanwhile)))

    def do_lookup_down(self) -> None:
        """Every lookup by key fails (cannot tell) until the next quiescent point."""
        self.lookup_down = True

    def do_change(self, case: int, n: int) -> None:
        """Another writer changes the case's facts now."""
        if (case_id := self._opened(case)) is not None:
            self._do(lambda: self.workflow.facts.change(case_id, n))

    def do_change_at(self, case: int, n: int, point: str) -> None:
        """Another writer changes the facts when the next run reaches ``point`` (before the call)."""
        if (case_id := self._opened(case)) is None:
            return
        self._arm(point, lambda: self._meanwhile(lambda: self._do(lambda: self.workflow.facts.change(case_id, n))))

    def do_answer(self, case: int, approve: bool, newest: bool, twice: bool) -> None:
        """A person answers the newest (or oldest) request seen on the case: perhaps one whose facts have
        moved since, perhaps answered already; ``twice``: the answer delivered again."""
        if (case_id := self._opened(case)) is None or not self.requests.get(case_id):
            return
        seen = self.requests[case_id]
        request = seen[-1] if newest else seen[0]
        for _ in range(2 if twice else 1):
            self._deliver(lambda: self.workflow.facts.answer(request, approve, "checker"))

    def do_time(self, seconds: float) -> None:
        """Time jumps (the store's, the guard's and its monotonic clock together)."""
        self.clock.advance(seconds)

    def do_reconcile(self) -> None:
        """One sweep of the reconciler, as the user's timer runs it."""
        self._do(self.workflow.guard.reconcile)

    def _see_requests(self) -> None:
        """Remember every approval request a case has waited on (the answers the people may give).

        A pending request is read where the guard's ``ask`` keeps it (``data.pendingApproval``); when the
        guard gains a public reader of a case's requests, this is the one place to use it."""
        for case_id in self.opened:
            case = self.reader.get(case_id)
            pending = case.data.get(PENDING) if case is not None else None
            if pending:
                request = ApprovalRequest.from_json(case_id, pending)
                seen = self.requests.setdefault(case_id, [])
                if request not in seen:
                    seen.append(request)

    # --- quiescent points and judgment -----------------------------------------------------------------------

    def settle(self) -> list[Violation]:
        """Faults end; time passes the call timeout, the reconciler runs and every case's workflow runs
        again, until nothing moves; then every invariant is judged."""
        self.faults.clear()
        self.armed.clear()
        self.lookup_down = False
        last = ""
        for _ in range(SETTLE_ROUNDS):
            self.clock.advance(CALL_TIMEOUT + 1)
            self.do_reconcile()
            undelivered, self.undelivered = self.undelivered, []
            for action in undelivered:
                self._deliver(action)
            for case_id in self.opened:
                self._do(lambda: self.workflow.facts.run(case_id))  # noqa: B023  # called at once
            self.do_reconcile()
            now = self.digest()
            if now == last:
                break
            last = now
        self._see_requests()
        return self.judge(quiescent=True)

    def view(self, *, quiescent: bool) -> View:
        """The cases as the guard shows them, their effects, the journal and the alerts."""
        cases: dict[str, Case] = {}
        effects: dict[str, tuple[Effect, ...]] = {}
        for case_id in self.opened:
            case = self.reader.get(case_id)
            if case is not None:
                cases[case_id] = case
                effects[case_id] = tuple(self.reader.effects_of(case))
        journal = tuple(dict(act) for act in self.workflow.journal())
        return View(cases, effects, journal, tuple(self.alerts), quiescent, tuple(self.errors))

    def judge(self, *, quiescent: bool) -> list[Violation]:
        """The violations now: ``once`` and the workflow's own at every step, all at a quiescent point."""
        view = self.view(quiescent=quiescent)
        return judge(view, self.workflow.invariants, escalated=self.escalated, sends=self.sends)

    def digest(self) -> str:
        """The journal, the cases as stored and the calls sent, as one hash."""
        stored = [(d.id, d.body) for d in sorted(self.store.query("cases", Query()), key=lambda d: d.id)]
        journal = [dict(act) for act in self.workflow.journal()]
        text = json.dumps([journal, stored, [s.__dict__ for s in self.sends]], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def close(self) -> None:
        """Close the store."""
        self.store.close()


def judge(
    view: View, invariants: Mapping[str, Invariant], *, escalated: set[str], sends: Sequence[Send] = ()
) -> list[Violation]:
    """Every invariant's violations in ``view``: ``once`` and ``invariants`` always, ``fresh`` (over the
    ``sends`` noted) and ``settled`` (``escalated``: the keys ``on_escalate`` heard) at a quiescent point."""
    found = [Violation("once", m) for m in _once(view)]
    if view.quiescent:
        found += [Violation("fresh", m) for m in _fresh(view, sends)]
        found += [Violation("settled", m) for m in _settled(view, escalated)]
    for name, invariant in invariants.items():
        found += [Violation(name, str(m)) for m in invariant(view)]
    return found


def _once(view: View) -> Iterator[str]:
    counts: dict[str, int] = {}
    for act in view.journal:
        counts[str(act["key"])] = counts.get(str(act["key"]), 0) + 1
    for key, count in counts.items():
        if count > 1:
            yield f"the downstream acted {count} times under key {key[:12]}"


def _fresh(view: View, sends: Sequence[Send]) -> Iterator[str]:
    acted = {str(act["key"]) for act in view.journal}
    for send in sends:
        if send.case_id is None or send.pinned == send.at_send or send.key not in acted:
            continue
        if view.named(send.case_id):
            continue  # the facts moved between the gate and the call, and a person was told
        yield (
            f"effect {send.key[:12]} of {send.case_id} was decided on v{send.pinned} and reached the downstream "
            f"with the case at v{send.at_send}, and no person was told"
        )


def _settled(view: View, escalated: set[str]) -> Iterator[str]:
    by_key: dict[str, Effect] = {}
    for case_id, effects in view.effects.items():
        for effect in effects:
            by_key[effect.key] = effect
            if effect.status is EffectStatus.STARTED:
                yield f"effect {effect.action} {effect.key[:12]} of {case_id} is still started after reconciliation"
            elif effect.status is EffectStatus.NEEDS_RECONCILIATION and effect.key not in escalated:
                yield f"effect {effect.action} {effect.key[:12]} of {case_id} needs a person, and none was told"
    for act in view.journal:
        key = str(act["key"])
        known = by_key.get(key)
        if known is None:
            yield f"the downstream acted under key {key[:12]}, which no case's effect holds: {dict(act)}"
        elif known.status is EffectStatus.FAILED:
            yield f"the downstream acted under key {key[:12]}; its case {known.case_id} says it failed"


# --- running plans, searching seeds, shrinking ----------------------------------------------------------------


def run_plan(factory: Factory, plan: Plan) -> Outcome:
    """Carry out ``plan`` in a fresh world; stops at the first step that breaks an invariant."""
    started = time.monotonic()
    directory = Path(tempfile.mkdtemp(prefix="casekeeper-check-"))
    world: World | None = None
    try:
        with seeded_uuids(random.Random(plan.seed)):  # noqa: S311  # seeded on purpose: ids replay
            world = World(factory, plan, directory)
            for index, step in enumerate(plan.steps):
                world.execute(step)
                found = world.settle() if step.name == "settle" else world.judge(quiescent=False)
                if found:
                    return Outcome(plan, found, index + 1, time.monotonic() - started, world.digest())
            if not world.probed and world.sends:
                raise TypeError("the guard never called the checker's probe: build it with **env.guard_options")
            found = world.settle()
            return Outcome(plan, found, len(plan.steps), time.monotonic() - started, world.digest())
    finally:
        if world is not None:
            world.close()
        shutil.rmtree(directory, ignore_errors=True)


@dataclass
class Search:
    """The outcomes of the seeds run, in order."""

    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failing(self) -> Outcome | None:
        """The first outcome that broke an invariant, if any."""
        return next((o for o in self.outcomes if o.violations), None)


def search(
    factory: Factory, first_seed: int, *, steps: int, seeds: int | None = None, seconds: float | None = None
) -> Search:
    """Seeds from ``first_seed`` on, for ``seeds`` seeds or ``seconds``, until one breaks an invariant."""
    started = time.monotonic()
    result = Search()
    seed = first_seed
    while (seeds is None or seed - first_seed < seeds) and (seconds is None or time.monotonic() - started < seconds):
        outcome = run_plan(factory, make_plan(seed, steps))
        result.outcomes.append(outcome)
        if outcome.violations:
            break
        seed += 1
    return result


def shrink(factory: Factory, outcome: Outcome, *, seconds: float = 60.0) -> Plan:
    """A shorter plan that still breaks the first violation's invariant: the steps after the failing one are
    dropped, then chunks of steps, halving the chunk size, while the budget lasts."""
    target = outcome.violations[0].invariant
    started = time.monotonic()

    def still_fails(candidate: Plan) -> bool:
        return any(v.invariant == target for v in run_plan(factory, candidate).violations)

    plan = Plan(outcome.plan.seed, outcome.plan.steps[: outcome.at_step])
    if not still_fails(plan):
        return outcome.plan
    chunk = max(1, len(plan.steps) // 2)
    while chunk >= 1 and time.monotonic() - started < seconds:
        index = 0
        while index < len(plan.steps) and time.monotonic() - started < seconds:
            candidate = Plan(plan.seed, plan.steps[:index] + plan.steps[index + chunk :])
            if candidate.steps and still_fails(candidate):
                plan = candidate
            else:
                index += chunk
        chunk //= 2
    return plan


def describe(outcome: Outcome, plan: Plan, shown: Outcome, *, reproduce: str, steps: int) -> str:
    """The finding as a person reads it: the seed and the command that reproduces it, the (shrunk) steps,
    and the violations the shown plan breaks."""
    shrunk = ", shrunk" if len(plan.steps) < outcome.at_step else ""
    lines = [
        f"seed {outcome.plan.seed}: {outcome.violations[0].invariant} broken at step {outcome.at_step}; "
        f"reproduce: {reproduce} --seed {outcome.plan.seed} --seeds 1 --steps {steps}",
        f"steps ({len(plan.steps)} of {len(outcome.plan.steps)}{shrunk}; a quiescent point follows the last):",
        *(f"  {i + 1:>3}. {step}" for i, step in enumerate(plan.steps)),
        "violations:",
        *(f"  {v}" for v in shown.violations),
    ]
    return "\n".join(lines)


def load(target: str) -> Factory:
    """The factory ``module:name`` names (the current directory is on the path)."""
    module_name, _, name = target.partition(":")
    if not module_name or not name:
        raise ValueError(f"name the factory as module:name (e.g. examples.refund.check:world), not {target!r}")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    factory = getattr(importlib.import_module(module_name), name, None)
    if not callable(factory):
        raise ValueError(f"{target}: {module_name} has no callable {name!r}")
    return factory  # type: ignore[no-any-return]


def build_parser(prog: str) -> argparse.ArgumentParser:
    """The command line's options (``prog``: how the user called it, for the reproduce command)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("workflow", help="your factory, module:name (e.g. examples.refund.check:world)")
    parser.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--steps", type=int, default=30, help="steps per seed (default 30)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--seconds", type=float, help="run seeds for this long (default 60 unless --seeds)")
    budget.add_argument("--seeds", type=int, help="run this many seeds")
    parser.add_argument("--expect-violation", metavar="NAME", help="exit 0 only if the invariant NAME breaks")
    parser.add_argument("--no-shrink", action="store_true", help="print the failing plan as it ran")
    parser.add_argument("--shrink-seconds", type=float, default=60.0, help="budget for shrinking (default 60)")
    parser.add_argument("--verbose", action="store_true", help="show your workflow's log lines")
    return parser


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m casekeeper.check") -> int:
    """Check a guarded workflow over seeds until an invariant breaks or the budget ends (exit 1 on a violation)."""
    args = build_parser(prog).parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO)
    else:
        logging.disable(logging.CRITICAL)
    try:
        factory = load(args.workflow)
    except (ImportError, ValueError) as exc:
        print(f"cannot load the workflow: {exc}", file=sys.stderr)
        return 2
    seconds = args.seconds if args.seconds is not None or args.seeds is not None else 60.0
    started = time.monotonic()
    found = search(factory, args.seed, steps=args.steps, seeds=args.seeds, seconds=seconds)
    failing = found.failing
    if failing is None:
        last = args.seed + len(found.outcomes) - 1
        print(
            f"no violation: {len(found.outcomes)} seeds ({args.seed}..{last}) of {args.steps} steps in "
            f"{time.monotonic() - started:.1f}s; judged: {', '.join(INVARIANTS)} and the workflow's own"
        )
        return 1 if args.expect_violation else 0
    plan = failing.plan if args.no_shrink else shrink(factory, failing, seconds=args.shrink_seconds)
    shown = run_plan(factory, plan) if plan is not failing.plan else failing
    if not shown.violations:
        plan, shown = failing.plan, failing
    reproduce = f"{prog} {args.workflow}"
    print(describe(failing, plan, shown, reproduce=reproduce, steps=args.steps))
    broken = {v.invariant for v in failing.violations}
    if args.expect_violation:
        return 0 if args.expect_violation in broken else 1
    return 1


if __name__ == "__main__":
    # Run as a script this module is ``__main__``; the user's factory imports ``casekeeper.check``: one module,
    # one ``Workflow`` class, so the checker runs from the imported one.
    sys.exit(importlib.import_module("casekeeper.check").main())
