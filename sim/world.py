"""The simulated world: one store, one session queue, several app instances with their own skewed clocks,
an in-process supplier, a scripted model, a network that can hold events back, and faults at every
failure point. Everything moves on one :class:`~casekeeper.clock.ManualClock` (the store's, the queue's),
stepped by one thread; the app runs as the Functions host runs it, through the indexed functions of
``function_app`` with ``azure.functions`` inputs.

Sources of nondeterminism the product uses, and how they are held still here:

- time: every clock the product is handed (the instances' clocks, the ledger's monotonic clock, the store's
  and the queue's) reads the world clock, an instance's plus its fixed skew;
- ``uuid.uuid4`` (checkpoint ids, queue lock tokens, failure ids): replaced, while a world is open, by ids
  drawn from the world's seeded generator (:func:`seeded_uuids`);
- the supplier over HTTP: an in-process stand-in behind httpx's ``MockTransport`` (:mod:`sim.supplier`);
- the model: a scripted proposer (:mod:`sim.model`);
- in-place retry waits: ``RETRY_BASE_SECONDS`` is a millisecond, so they are short and change nothing.

The store's own real-time reads (SQLite's busy wait, the queue's idle cache) never decide an answer while
one thread uses them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import azure.functions as func

from casekeeper import Document, DocumentStore, Query
from casekeeper.capture import uninstall
from casekeeper.check import seeded_uuids
from casekeeper.clock import ManualClock
from casekeeper.errors import StoreUnavailable
from casekeeper.stores.sqlite import SqliteDocumentStore
from devhost.changefeed import LocalChangeFeed, to_document_list
from devhost.schedule import timer_request
from shared.app import bootstrap
from shared.app.bootstrap import Services
from shared.app.retention import RetainingStore
from shared.app.settings import Settings
from shared.domain import events as ev
from shared.handlers import door
from shared.handlers.ingress import DELIVERY_HEADER, SIGNATURE_HEADER, sign
from shared.messaging.local import LocalDeadLetters, LocalQueueEventSender
from shared.messaging.sqlite_queue import LocalSessionQueue, LockLost, to_service_bus_message
from sim.model import ScriptedModel
from sim.supplier import Supplier

log = logging.getLogger("casekeeper.sim")

SECRET = "sim-secret"  # noqa: S105  # the simulated senders' signing secret
QUEUE = "case-events"
CALL_TIMEOUT = 120.0
LOCK_DURATION = 30.0
MAX_DELIVERIES = 10
EPOCH = 1_800_000_000.0
"""Where every world's clock starts (2027-01-15): a seed replays at the same instants."""

SKEW_BOUND_SECONDS = 5.0
"""How far an instance's clock may be from the store's: the bound the simulator skews instances by (NTP keeps
Azure hosts well inside it; the issue's repro used 3 s)."""

STORE_CLIENT_WAIT_SECONDS = {"outage": 30.0, "throttle": 30.0}
"""What one store call blocks for when its container is unavailable, before it raises: an outage waits out
SQLite's busy timeout (30 s, the store's default; Cosmos DB's SDK waits longer, 65 s); throttling waits out
the Cosmos SDK's 429 retries (30 s by default). The door is timed by it (see :meth:`FaultyStore.metered`)."""

CONTAINERS = ("cases", "effects", "checkpoints", "health")
REQUEST_SECONDS = 0.001
FUNCTIONS: dict[str, Any] = {}


def function(name: str) -> Callable[..., Any]:
    """The user function of the indexed Functions app's function ``name`` (``function_app`` is imported from
    the app's directory, on the path: the tests' root, or ``casekeeper sim --app-dir``)."""
    if not FUNCTIONS:
        import function_app

        FUNCTIONS.update({str(f.get_function_name()): f for f in function_app.create_app().get_functions()})
    return FUNCTIONS[name].get_user_function()  # type: ignore[no-any-return]


class Crash(BaseException):
    """The process died at a failure point (kill -9): nothing in the code under test catches it."""


class SkewedClock:
    """An instance's clock: the world's, off by a fixed ``offset`` seconds."""

    def __init__(self, world: ManualClock, offset: float) -> None:
        self.world = world
        self.offset = offset

    def now(self) -> float:
        return self.world.now() + self.offset


@dataclass
class Outage:
    """A container (or ``*``, all of them) unavailable until ``until`` (world time): ``mode`` outage or throttle."""

    until: float
    mode: str


class FaultyStore:
    """The store as the app sees it, with outages and throttling per container, and F7 (checkpoint saves that
    fail). A call on an unavailable container raises ``StoreUnavailable``; inside :meth:`metered` (the door
    answering a request) it first blocks for :data:`STORE_CLIENT_WAIT_SECONDS`, moving the world clock, as the
    real client waits before it gives up. The worker's calls raise at once: its waits in place are the
    product's own backoff, which runs with a millisecond base here."""

    def __init__(self, inner: DocumentStore, clock: ManualClock) -> None:
        self.inner = inner
        self.clock = clock
        self.outages: dict[str, Outage] = {}
        self.checkpoints_failing = False
        self.meter: float | None = None

    @contextmanager
    def metered(self) -> Iterator[list[float]]:
        """Time the store calls made inside: the list holds the seconds they blocked, once done."""
        self.meter = 0.0
        spent: list[float] = []
        try:
            yield spent
        finally:
            spent.append(self.meter or 0.0)
            self.meter = None

    def unavailable(self, container: str) -> Outage | None:
        now = self.clock.now()
        for name in (container, "*"):
            outage = self.outages.get(name)
            if outage is not None and now < outage.until:
                return outage
        return None

    def _check(self, container: str, *, write: bool) -> None:
        outage = self.unavailable(container)
        if outage is not None:
            if self.meter is not None:
                wait = STORE_CLIENT_WAIT_SECONDS[outage.mode]
                self.meter += wait
                self.clock.advance(wait)
            raise StoreUnavailable(f"simulated: the {container} container is unavailable ({outage.mode})")
        if write and self.checkpoints_failing and container == "checkpoints":
            raise StoreUnavailable("simulated: the checkpoint save failed (F7)")

    def create(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any]) -> Document:
        self._check(container, write=True)
        return self.inner.create(container, partition, doc_id, body)

    def read(self, container: str, partition: str, doc_id: str) -> Document | None:
        self._check(container, write=False)
        return self.inner.read(container, partition, doc_id)

    def replace(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any], *, etag: str) -> Document:
        self._check(container, write=True)
        return self.inner.replace(container, partition, doc_id, body, etag=etag)

    def update_if(self, container: str, partition: str, doc_id: str, *args: Any, **kwargs: Any) -> Any:
        self._check(container, write=True)
        return self.inner.update_if(container, partition, doc_id, *args, **kwargs)

    def upsert(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any]) -> Document:
        self._check(container, write=True)
        return self.inner.upsert(container, partition, doc_id, body)

    def delete(self, container: str, partition: str, doc_id: str, *, etag: str | None = None) -> bool:
        self._check(container, write=True)
        return self.inner.delete(container, partition, doc_id, etag=etag)

    def query(self, container: str, query: Query) -> list[Document]:
        self._check(container, write=False)
        return self.inner.query(container, query)

    def count(self, container: str, query: Query) -> int:
        self._check(container, write=False)
        return self.inner.count(container, query)

    def now(self) -> float:
        return self.inner.now()

    def close(self) -> None:
        self.inner.close()


class DoorStore(FaultyStore):
    """The door's own store client (``shared.app.bootstrap.open_door_store``): the same containers and the same
    outages, but a call gives up after the door's budget per call (``door.STORE_CALL_SECONDS``), as that client
    is configured to, instead of the worker's client's long waits. Closed with the world's store."""

    def __init__(self, shared: FaultyStore) -> None:
        super().__init__(shared.inner, shared.clock)
        self.shared = shared

    def _check(self, container: str, *, write: bool) -> None:
        outage = self.shared.unavailable(container)
        if outage is None:
            return
        if self.shared.meter is not None:
            wait = min(STORE_CLIENT_WAIT_SECONDS[outage.mode], door.STORE_CALL_SECONDS)
            self.shared.meter += wait
            self.clock.advance(wait)
        raise StoreUnavailable(f"simulated: the {container} container is unavailable ({outage.mode}), to the door")

    def close(self) -> None:
        pass


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        raw = json.loads(body)
    except ValueError:
        return {}
    return raw if isinstance(raw, dict) else {}


class Network:
    """What lies between the door and the queue: it can hold accepted fact events back and let them through
    later, in any order, perhaps twice (a proxy's retry, a redrive under another message id). It outlives
    a host restart, as a network does.

    A held event reaches the queue under an id of its own derived from its message id, as each of the app's
    own delayed copies and redrives does: the door answers 202 only once the broker has the event, so a real
    delay after it happens inside the queue, under a copy's id, and the broker's duplicate detection (ids
    within its window) never compares a late copy with a later send of the same delivery id."""

    def __init__(self, queue: LocalSessionQueue) -> None:
        self.inner = LocalQueueEventSender(queue, QUEUE)
        self.hold = 0
        self.held: list[tuple[ev.CaseEvent, str]] = []
        self.released = 0

    def send(self, event: ev.CaseEvent, *, message_id: str, schedule_at: float | None = None) -> None:
        if self.hold > 0 and schedule_at is None and event.type in ev.ORDERED_TYPES:
            self.hold -= 1
            self.held.append((event, message_id))
            return
        self.inner.send(event, message_id=message_id, schedule_at=schedule_at)

    def release(self, index: int, *, twice: bool) -> None:
        event, message_id = self.held.pop(index % len(self.held))
        self.released += 1
        self.inner.send(event, message_id=f"{message_id}:held:{self.released}")
        if twice:
            self.inner.send(event, message_id=f"{message_id}:again")


@dataclass
class Instance:
    """One app instance (a Functions host): its clock, and the services it built."""

    index: int
    clock: SkewedClock
    services: Services


@dataclass
class Answer:
    """How the door answered one request, and how long the answer took (world seconds)."""

    status: int
    body: dict[str, Any]
    seconds: float
    retry_after: str | None


class World:
    """One simulated deployment. ``offsets``: each instance's clock skew (seconds)."""

    def __init__(self, seed: int, offsets: list[float], *, scripted_model: bool) -> None:
        self.rng = random.Random(seed)
        self.directory = Path(tempfile.mkdtemp(prefix="casekeeper-sim-"))
        self.clock = ManualClock(start=EPOCH)
        self._uuids = seeded_uuids(self.rng)
        self._uuids.__enter__()
        self.settings = Settings.from_mapping(
            {
                "CASEKEEPER_STORE": "sqlite",
                "CASEKEEPER_SQLITE_PATH": str(self.directory / "store.sqlite"),
                "CASEKEEPER_QUEUE": "local",
                "CASEKEEPER_LOCAL_QUEUE_PATH": str(self.directory / "queue.sqlite"),
                "WEBHOOK_SECRET": SECRET,
                "SUPPLIER_PORTAL_URL": "http://supplier.sim",
                "SUPPLIER_TIMEOUT_SECONDS": "5",
                "CALL_TIMEOUT_SECONDS": str(CALL_TIMEOUT),
                "RETRY_BASE_SECONDS": "0.001",
            }
        )
        self.sqlite = SqliteDocumentStore(self.directory / "store.sqlite", clock=self.clock.now)
        self.store = FaultyStore(RetainingStore(self.sqlite, self.settings.retention), self.clock)
        self.feed = LocalChangeFeed(self.sqlite, "cases", "reconciler")
        self.queue = LocalSessionQueue(
            self.directory / "queue.sqlite",
            lock_duration=LOCK_DURATION,
            max_delivery_count=MAX_DELIVERIES,
            clock=self.clock.now,
        )
        self.network = Network(self.queue)
        self.reached: dict[tuple[str, str, str], float] = {}
        """Per (case, delivery id, body), the acceptance stamp of the first copy its case judged. The door
        gives every copy of a delivery its first stamp while it remembers the id; a copy posted again after
        that takes a stamp of its own, and which of the two reaches the case first is the one it judges."""
        self.supplier = Supplier(on_stall=self._stalled)
        self.model = ScriptedModel(self.rng) if scripted_model else None
        self.crash_at: str | None = None
        self.crashes: list[str] = []
        self.pause_at: str | None = None
        self.meanwhile: Callable[[], None] = lambda: None
        """What the rest of the world does while a worker is frozen (set by the runner)."""
        self.pauses: list[str] = []
        self.instances = [self._instance(i, offset) for i, offset in enumerate(offsets)]

    # --- building and rebuilding instances --------------------------------------------------------------

    def _instance(self, index: int, offset: float) -> Instance:
        clock = SkewedClock(self.clock, offset)
        services = bootstrap.build(
            self.settings,
            store=self.store,  # a DocumentStore by shape (the port is a Protocol)
            door_store=DoorStore(self.store),
            sender=self.network,
            dead_letters=LocalDeadLetters(self.queue, QUEUE),
            clock=clock,
            proposer=self.model,
            probe=self.probe,
            monotonic=clock.now,
        )
        portal = services.supplier
        # The portal's documented test seam: its HTTP client goes to the in-process supplier.
        portal._transport = self.supplier.transport()
        request = portal.request_credit_note

        def request_then_maybe_die(*args: Any, **kwargs: Any) -> Any:
            reply = request(*args, **kwargs)  # the supplier has the request (and made the note)
            self.probe("F3")
            return reply

        portal.request_credit_note = request_then_maybe_die  # type: ignore[method-assign]
        return Instance(index, clock, services)

    def restart(self, index: int) -> None:
        """The instance was killed (kill -9): built again from the same store and queue, nothing kept."""
        old = self.instances[index]
        old.services.supplier.close()
        self.instances[index] = self._instance(index, old.clock.offset)

    @contextmanager
    def on(self, index: int) -> Iterator[Instance]:
        """Run a function as instance ``index`` (the process-wide services are that instance's)."""
        instance = self.instances[index % len(self.instances)]
        bootstrap.use(bootstrap.start(instance.services))
        yield instance

    # --- failure points -----------------------------------------------------------------------------------

    def probe(self, point: str) -> None:
        if self.pause_at == point:
            self._pause(point)
        if self.crash_at == point:
            self.crash_at = None
            self.crashes.append(point)
            raise Crash(point)

    def _pause(self, point: str) -> None:
        """The worker freezes at ``point`` past the call timeout (a GC, a frozen VM, SIGSTOP); the rest of the
        world acts meanwhile. The other actors run on a thread started and joined here (the frozen worker's
        event loop cannot run another), so one thread runs at any moment. The frozen worker does not crash."""
        self.pause_at, armed, self.crash_at = None, self.crash_at, None
        self.pauses.append(point)
        self.clock.advance(CALL_TIMEOUT + 1)
        meanwhile = threading.Thread(target=self.meanwhile)
        meanwhile.start()
        meanwhile.join()
        self.crash_at = armed

    def _stalled(self) -> None:
        """A call hangs inside the supplier's HTTP exchange (F3, before the note is made) past the call
        timeout while the world acts; then the note is made and the reply comes back late."""
        self._pause("F3-stall")

    # --- the outside world's requests -------------------------------------------------------------------

    def post_event(self, instance: int, case_id: str, event_type: str, data: dict[str, Any], delivery: str) -> Answer:
        body = json.dumps({"type": event_type, "caseId": case_id, "data": data}).encode()
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(SECRET, body, int(self.clock.now()), delivery),
            DELIVERY_HEADER: delivery,
        }
        req = func.HttpRequest(method="POST", url="http://localhost/api/events", headers=headers, body=body)
        return self._call(instance, "events", req)

    def post_approval(self, instance: int, case_id: str, request_id: str, data: dict[str, Any]) -> Answer:
        req = func.HttpRequest(
            method="POST",
            url=f"http://localhost/api/cases/{case_id}/approvals/{request_id}",
            headers={"Content-Type": "application/json"},
            body=json.dumps(data).encode(),
            route_params={"caseId": case_id, "requestId": request_id},
        )
        return self._call(instance, "approvals", req)

    def post_withdrawal(self, instance: int, case_id: str, key: str) -> Answer:
        req = func.HttpRequest(
            method="POST",
            url=f"http://localhost/api/cases/{case_id}/requests/{key}/withdraw",
            headers={"Content-Type": "application/json"},
            body=json.dumps({"by": "ana", "why": "settled by phone"}).encode(),
            route_params={"caseId": case_id, "effectKey": key},
        )
        return self._call(instance, "withdraw_request", req)

    def _call(self, instance: int, name: str, req: func.HttpRequest) -> Answer:
        # A request takes a millisecond on the wire: no two acceptances share an instant of the store's clock.
        self.clock.advance(REQUEST_SECONDS)
        with self.on(instance), self.store.metered() as spent:
            try:
                response = function(name)(req)
            except Exception as exc:  # the Functions host answers 500 for a function that raised
                response = func.HttpResponse(json.dumps({"error": repr(exc)}), status_code=500)
        try:
            body = json.loads(response.get_body() or b"{}")
        except ValueError:
            body = {}
        return Answer(response.status_code, body, spent[0], response.headers.get("Retry-After"))

    def view(self, case_id: str) -> dict[str, Any] | None:
        """``GET /api/cases/{id}`` as instance 0 answers it (``None``: not found, or the store is down)."""
        req = func.HttpRequest(
            method="GET", url=f"http://localhost/api/cases/{case_id}", body=b"", route_params={"caseId": case_id}
        )
        saved, self.store.outages = self.store.outages, {}
        try:
            with self.on(0):
                response = function("get_case")(req)
        finally:
            self.store.outages = saved
        if response.status_code != 200:
            return None
        body: dict[str, Any] = json.loads(response.get_body())
        return body

    # --- the host's triggers ----------------------------------------------------------------------------

    def deliver_one(self, instance: int) -> bool:
        """Instance ``instance`` takes the next message of any session, as the Functions host would."""
        msg = self.queue.receive(QUEUE)
        if msg is None:
            return False
        try:
            with self.on(instance):
                asyncio.run(function("case_worker")(to_service_bus_message(msg)))
        except Crash:
            self.crashed(instance)
            return True
        except Exception:  # the host abandons the message: delivered again, dead-lettered past the limit
            self.store.checkpoints_failing = False
            self._settle(self.queue.abandon, msg)
            return True
        self.store.checkpoints_failing = False
        self._note_reached(msg.body)
        self._settle(self.queue.complete, msg)
        return True

    def _note_reached(self, body: bytes) -> None:
        """Remember the stamp of the first copy of each report its case judged: the handler finished without
        deferring it (a deferred report leaves a later copy of itself, with its stamp, in the queue; one whose
        facts were written and whose decision was deferred leaves a ``case.investigate`` instead)."""
        raw = _json_object(body)
        if raw.get("type") not in ev.ORDERED_TYPES or not raw.get("deliveryId") or "acceptedAt" not in raw:
            return
        for pending in self.queue.peek(QUEUE):
            copy = _json_object(pending.body)
            mine = (raw["type"], raw["deliveryId"], raw["acceptedAt"])
            same = (copy.get("type"), copy.get("deliveryId"), copy.get("acceptedAt")) == mine
            if same and int(copy.get("retry") or 0) > int(raw.get("retry") or 0):
                return
        key = (str(raw["caseId"]), str(raw["deliveryId"]), json.dumps(raw.get("data"), sort_keys=True))
        self.reached.setdefault(key, float(raw["acceptedAt"]))

    @staticmethod
    def _settle(settle: Callable[[Any], None], msg: Any) -> None:
        # A worker frozen past its lock lost it: the broker delivers the message again.
        with suppress(LockLost):
            settle(msg)

    def next_due(self) -> float | None:
        pending = self.queue.peek(QUEUE)
        return min((p.enqueued_time for p in pending), default=None) if pending else None

    def crashed(self, instance: int) -> None:
        """The instance died holding a message's lock: it comes back, and the lock expires."""
        self.store.checkpoints_failing = False
        self.restart(instance % len(self.instances))
        self.clock.advance(LOCK_DURATION + 1)

    def reconciler_tick(self, instance: int = 0) -> None:
        """The cases change feed delivers what changed."""
        batch = self.feed.poll()
        if not batch.documents:
            return
        try:
            with self.on(instance):
                function("reconciler")(to_document_list(batch))
        except Crash:
            self.crashed(instance)
            return
        except Exception:
            return  # the trigger retries the batch: the continuation does not move
        self.feed.commit(batch)

    def timer_tick(self, instance: int = 0) -> None:
        try:
            with self.on(instance):
                function("checkpoint_health")(timer_request(past_due=False))
        except Crash:
            self.crashed(instance)
        except Exception as exc:  # a failed check raises to be seen; the next tick runs it again
            log.info("the timer's checks failed: %s", exc)

    def services(self, instance: int = 0) -> Services:
        return self.instances[instance % len(self.instances)].services

    def case_document_bytes(self) -> dict[str, int]:
        """Each case document's size as stored (its JSON body), read past the faults."""
        return {
            doc.id: len(json.dumps(doc.body, separators=(",", ":")).encode())
            for doc in self.sqlite.query("cases", Query())
        }

    def watched_keys(self, case_id: str) -> set[str]:
        """The keys of the case's entries a person resolved failed that the late watch has not looked up to its
        end yet, read past the faults: the one thing the simulator reads of the store besides sizes, because
        the API does not show it."""
        doc = self.sqlite.read("cases", case_id, case_id)
        effects = (doc.body.get("effects") or ()) if doc is not None else ()
        return {str(e.get("id")) for e in effects if e.get("watching")}

    def close(self) -> None:
        bootstrap.use(None)
        uninstall()
        for instance in self.instances:
            instance.services.supplier.close()
        self.feed.close()
        self.queue.close()
        self.store.close()
        self._uuids.__exit__(None, None, None)
        shutil.rmtree(self.directory, ignore_errors=True)
