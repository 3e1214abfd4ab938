"""What the guard costs: store round trips and time per guarded effect, against two baselines.

``python -m benchmarks.guarded_effect [--n 200] [--backends sqlite,cosmos]`` (``make bench``).

One *effect* is the happy path of one external call and its status change, on a case of its own:

``guarded``
    Casekeeper: ``Ledger.run`` (casekeeper.core.entries): the claim is the version gate, one conditional
    replace of the case (If-Match on the case as the decision read it) adding the ``started`` entry; call;
    then one conditional replace of the case recording ``done`` and committing the status together. Target:
    at most two round trips.
``unguarded``
    The call, then an unconditional status write (upsert). One round trip, and none of the guarantees:
    the floor the guard is measured against.
``read-first``
    The straightforward read-first ledger (docs/design.md#create-first): read the ledger row, read
    the case, create the row, replace it with ``done``, read the case again, replace the case. Six.

How it measures:

- Round trips are counted by :class:`CountingStore`, a wrapper around the
  :class:`~casekeeper.core.ports.DocumentStore`: each port method call is one round trip (one SQL
  transaction, one HTTP request to Cosmos DB). ``now()`` counts too, because on Cosmos it is itself a
  write (it upserts a clock document); the happy path never calls it, and the per-method breakdown
  shows that.
- The downstream call is an in-process function (no network), so the times are the store's.
- The variants are interleaved effect by effect (rotating which goes first) on the same store, so drift
  (caches warming, the disk, other load) hits them alike. Each effect's case is created beforehand,
  outside the count and the clock. A few warm-up effects per variant are discarded.
- Each effect is checked after it ran (it called once, it committed), so a number always describes the
  happy path it claims to.
- ``effects/s`` is one worker, serially: ``n / (sum of the effect times)``.

The Cosmos backend is the local test server (``@vercel/cosmosdb-server``, started here through
``devhost/cosmos_server.py``; it needs ``node`` and ``npm ci``): its times say little about Azure, its
round-trip counts are exact.

Exit status: 0 when every requested backend ran and the guarded variant met the target on each; 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from casekeeper.core.cases import CASES, Case, CaseRepository
from casekeeper.core.effect import EFFECTS, Effect, EffectStatus
from casekeeper.core.entries import CommitPlan
from casekeeper.core.keys import effect_key
from casekeeper.core.ledger import Ledger
from casekeeper.core.ports import Document, DocumentStore, Query
from casekeeper.errors import CasekeeperError
from casekeeper.stores.sqlite import SqliteDocumentStore

TARGET_ROUND_TRIPS = 2
"""The budget of one guarded effect on the happy path (the claim that is the version gate; the outcome with
the commit)."""

VARIANTS = ("guarded", "unguarded", "read-first")
BACKENDS = ("sqlite", "cosmos")
ACTION = "request_credit_note"
DECIDED = "credit_note_requested"
DEFAULT_N = 200
DEFAULT_WARMUP = 10


class BenchmarkError(RuntimeError):
    """An effect did not take the happy path it was meant to measure; its numbers would be meaningless."""


# --- counting -----------------------------------------------------------------------------------


class CountingStore:
    """A :class:`DocumentStore` that counts every port method call (one call = one round trip).

    Delegates everything to ``inner``. Each call is tallied by method and by container (``now()`` and
    ``close()`` belong to none: their container is ``"-"``), with the JSON size of the bodies it read
    (``read``, ``query``) and wrote (``create``, ``replace``, ``upsert``; ``update_if`` its fields).
    :meth:`take` returns the calls by method since the last take and starts a new count;
    :meth:`take_tally` does the same with the full :class:`Tally`. Thread-safe: the end-to-end
    benchmark shares one between the case worker and the change feed.
    """

    def __init__(self, inner: DocumentStore) -> None:
        self.inner = inner
        self._tally = Tally()
        self._lock = threading.Lock()
        self.documents_read: Counter[str] = Counter()
        """Documents the queries returned, by container, since construction (not reset by :meth:`take`)."""

    def _count(self, method: str, container: str = "-", *, read: int = 0, written: int = 0) -> None:
        with self._lock:
            self._tally.calls[(container, method)] += 1
            self._tally.bytes_read[container] += read
            self._tally.bytes_written[container] += written

    def take(self) -> Counter[str]:
        return self.take_tally().by_method()

    def take_tally(self) -> Tally:
        with self._lock:
            taken, self._tally = self._tally, Tally()
        return taken

    def create(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any]) -> Document:
        self._count("create", container, written=_size(body))
        return self.inner.create(container, partition, doc_id, body)

    def read(self, container: str, partition: str, doc_id: str) -> Document | None:
        doc = self.inner.read(container, partition, doc_id)
        self._count("read", container, read=_size(doc.body) if doc is not None else 0)
        return doc

    def replace(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any], *, etag: str) -> Document:
        self._count("replace", container, written=_size(body))
        return self.inner.replace(container, partition, doc_id, body, etag=etag)

    def update_if(
        self, container: str, partition: str, doc_id: str, *, where: Mapping[str, Any], set_fields: Mapping[str, Any]
    ) -> Document:
        self._count("update_if", container, written=_size(set_fields))
        return self.inner.update_if(container, partition, doc_id, where=where, set_fields=set_fields)

    def upsert(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any]) -> Document:
        self._count("upsert", container, written=_size(body))
        return self.inner.upsert(container, partition, doc_id, body)

    def delete(self, container: str, partition: str, doc_id: str, *, etag: str | None = None) -> bool:
        self._count("delete", container)
        return self.inner.delete(container, partition, doc_id, etag=etag)

    def query(self, container: str, query: Query) -> list[Document]:
        docs = self.inner.query(container, query)
        self._count("query", container, read=sum(_size(d.body) for d in docs))
        with self._lock:
            self.documents_read[container] += len(docs)
        return docs

    def count(self, container: str, query: Query) -> int:
        self._count("count", container)
        return self.inner.count(container, query)

    def now(self) -> float:
        self._count("now")  # on Cosmos DB this is a write (the clock document's upsert)
        return self.inner.now()

    def close(self) -> None:
        self.inner.close()


@dataclass
class Tally:
    """What a :class:`CountingStore` counted: calls by (container, method), bytes by container."""

    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    bytes_read: Counter[str] = field(default_factory=Counter)
    bytes_written: Counter[str] = field(default_factory=Counter)

    def by_method(self) -> Counter[str]:
        methods: Counter[str] = Counter()
        for (_, method), count in self.calls.items():
            methods[method] += count
        return methods

    def by_container(self) -> Counter[str]:
        containers: Counter[str] = Counter()
        for (container, _), count in self.calls.items():
            containers[container] += count
        return containers

    def total(self) -> int:
        return sum(self.calls.values())

    def add(self, other: Tally) -> None:
        self.calls.update(other.calls)
        self.bytes_read.update(other.bytes_read)
        self.bytes_written.update(other.bytes_written)


def _size(body: Mapping[str, Any]) -> int:
    """A body's size as JSON text, about what goes over the wire to Cosmos DB (or into the SQLite row)."""
    return len(json.dumps(body, separators=(",", ":"), default=str))


# --- the variants -------------------------------------------------------------------------------


class _FixedClock:
    """Case history timestamps; constant, so that no variant pays for reading a clock."""

    def now(self) -> float:
        return 1_800_000_000.0


class _Downstream:
    """The external call, in process: returns a credit note at once and counts calls per key."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def __call__(self, key: str) -> Mapping[str, Any]:
        self.calls[key] += 1
        return {"creditNoteId": f"CN-{sum(self.calls.values()):06d}", "idempotencyKey": key}


@dataclass
class _Bench:
    """One backend's fixtures, shared by the variants."""

    store: CountingStore
    cases: CaseRepository
    ledger: Ledger
    downstream: _Downstream
    seeded: dict[str, Case]  # the case each effect starts from, by case id


def _guarded(bench: _Bench, case_id: str) -> None:
    outcome = bench.ledger.run(
        case_id=case_id,
        action=ACTION,
        decided_on_version=1,
        call=bench.downstream,
        commit=_PLAN,
        request={"amount": "250.00"},
        expected=bench.seeded[case_id],
    )
    if outcome.replayed or outcome.commit != "committed":
        raise BenchmarkError(f"guarded effect on {case_id} left the happy path (replayed or commit lost)")


_PLAN = CommitPlan(DECIDED, data=lambda effect: {"creditNoteId": (effect.result or {}).get("creditNoteId")})


def _unguarded(bench: _Bench, case_id: str) -> None:
    result = bench.downstream(effect_key(case_id, ACTION, 1))
    case = bench.seeded[case_id]
    # Blind: no read, no condition; the body is what the writer believes the case to be.
    body = _committed(case, result).to_body()
    bench.store.upsert(CASES, case_id, case_id, body)


def _read_first(bench: _Bench, case_id: str) -> None:
    store = bench.store
    key = effect_key(case_id, ACTION, 1)
    if store.read(EFFECTS, case_id, key) is not None:  # 1: is it recorded already?
        raise BenchmarkError(f"read-first effect on {case_id} found a ledger row")
    gate = store.read(CASES, case_id, case_id)  # 2: version gate
    if gate is None or Case.from_document(gate).version != 1:
        raise BenchmarkError(f"read-first effect on {case_id}: case missing or moved")
    claimed = Effect.from_document(store.create(EFFECTS, case_id, key, _started_body(case_id, key)))  # 3: claim
    result = bench.downstream(key)
    done = replace(
        claimed,
        status=EffectStatus.DONE,
        result=dict(result),
        history=(*claimed.history, {"status": "done", "source": "call"}),
    )
    store.replace(EFFECTS, case_id, key, done.to_body(), etag=claimed.etag)  # 4: outcome
    current = store.read(CASES, case_id, case_id)  # 5: re-read for the commit
    if current is None:
        raise BenchmarkError(f"read-first effect on {case_id}: case vanished")
    case = Case.from_document(current)
    store.replace(CASES, case_id, case_id, _committed(case, result).to_body(), etag=case.etag)  # 6: commit


def _started_body(case_id: str, key: str) -> dict[str, Any]:
    """The same ``started`` row the ledger writes, so both ledgers move documents of the same size."""
    return {
        "id": key,
        "kind": "effect",
        "caseId": case_id,
        "action": ACTION,
        "caseVersion": 1,
        "status": EffectStatus.STARTED.value,
        "request": {"amount": "250.00"},
        "result": None,
        "reason": None,
        "stale": False,
        "attempts": 1,
        "resolution": None,
        "history": [{"status": "started", "attempt": 1}],
    }


def _committed(case: Case, result: Mapping[str, Any]) -> Case:
    return replace(
        case,
        status=DECIDED,
        version=case.version + 1,
        data={**case.data, "creditNoteId": result["creditNoteId"]},
    )


EFFECTS_BY_VARIANT: dict[str, Callable[[_Bench, str], None]] = {
    "guarded": _guarded,
    "unguarded": _unguarded,
    "read-first": _read_first,
}


# --- measuring ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class VariantResult:
    """What one variant measured on one backend. ``round_trips`` holds every effect's count (all equal on
    the happy path); ``per_method`` is the total per port method over the measured effects."""

    backend: str
    variant: str
    n: int
    round_trips: tuple[int, ...]
    per_method: Mapping[str, int]
    median_ms: float
    p95_ms: float
    effects_per_s: float

    @property
    def round_trips_per_effect(self) -> float:
        return sum(self.round_trips) / len(self.round_trips)

    @property
    def max_round_trips(self) -> int:
        return max(self.round_trips)

    def breakdown(self) -> str:
        """Round trips per effect by method, e.g. ``create 1, read 1, replace 2``."""
        return ", ".join(f"{m} {c / self.n:g}" for m, c in sorted(self.per_method.items()))


def measure(
    store: DocumentStore, backend: str, *, n: int = DEFAULT_N, warmup: int = DEFAULT_WARMUP
) -> list[VariantResult]:
    """Run ``n`` measured effects (after ``warmup`` discarded ones) of every variant on ``store``.

    ``store`` must be empty of the benchmark's case ids (each run uses fresh random ids, so any store
    works). Raises ``BenchmarkError`` when an effect leaves the happy path, ``ValueError`` for ``n < 1``.
    """
    if n < 1 or warmup < 0:
        raise ValueError("n must be >= 1 and warmup >= 0")
    counting = CountingStore(store)
    cases = CaseRepository(counting, _FixedClock())
    bench = _Bench(counting, cases, Ledger(counting, cases), _Downstream(), {})
    run_id = uuid.uuid4().hex[:8]
    total = n + warmup
    ids = {v: [f"bench-{run_id}-{v}-{i}" for i in range(total)] for v in VARIANTS}
    for variant in VARIANTS:  # setup: outside the count and the clock
        for case_id in ids[variant]:
            bench.seeded[case_id] = cases.create(case_id, {"invoiceAmount": "1250.00", "poAmount": "1000.00"})
    counting.take()

    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    trips: dict[str, list[int]] = {v: [] for v in VARIANTS}
    methods: dict[str, Counter[str]] = {v: Counter() for v in VARIANTS}
    for i in range(total):
        shift = i % len(VARIANTS)  # rotate who goes first, so no variant always runs on a cold path
        for variant in VARIANTS[shift:] + VARIANTS[:shift]:
            effect = EFFECTS_BY_VARIANT[variant]
            case_id = ids[variant][i]
            started = time.perf_counter()
            effect(bench, case_id)
            elapsed = time.perf_counter() - started
            counted = counting.take()
            if i >= warmup:
                times[variant].append(elapsed)
                trips[variant].append(sum(counted.values()))
                methods[variant].update(counted)
    _check_each_called_once(bench, ids)
    return [
        VariantResult(
            backend=backend,
            variant=v,
            n=n,
            round_trips=tuple(trips[v]),
            per_method=dict(methods[v]),
            median_ms=statistics.median(times[v]) * 1000,
            p95_ms=_percentile(times[v], 0.95) * 1000,
            effects_per_s=n / sum(times[v]) if sum(times[v]) > 0 else math.inf,
        )
        for v in VARIANTS
    ]


def _check_each_called_once(bench: _Bench, ids: Mapping[str, list[str]]) -> None:
    for variant, case_ids in ids.items():
        for case_id in case_ids:
            calls = bench.downstream.calls[effect_key(case_id, ACTION, 1)]
            if calls != 1:
                raise BenchmarkError(f"{variant} effect on {case_id} called downstream {calls} times")


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile: the smallest value with at least ``q`` of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


# --- backends -----------------------------------------------------------------------------------


@contextlib.contextmanager
def open_backend(name: str) -> Iterator[DocumentStore]:
    """A fresh, empty store of backend ``name``, closed (and its server stopped) afterwards."""
    if name == "sqlite":
        with tempfile.TemporaryDirectory(prefix="casekeeper-bench-") as tmp:
            store = SqliteDocumentStore(Path(tmp) / "bench.sqlite")
            try:
                yield store
            finally:
                store.close()
        return
    if name == "cosmos":
        # Imported here: only this backend needs node and the test server's package.
        from devhost.cosmos_server import make_cosmos_store, start_cosmos_server

        # The SDK skips TLS verification for the loopback server and urllib3 warns on every request.
        warnings.filterwarnings("ignore", message="Unverified HTTPS request")
        with start_cosmos_server() as server:
            cosmos = make_cosmos_store(server, f"bench{uuid.uuid4().hex[:12]}")
            try:
                yield cosmos
            finally:
                cosmos.close()
        return
    raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")


# --- output -------------------------------------------------------------------------------------


def render(results: list[VariantResult]) -> list[str]:
    """The table: backend | variant | round trips per effect | median ms | p95 ms | effects/s."""
    headers = (
        "backend",
        "variant",
        "round trips per effect",
        "median ms",
        "p95 ms",
        "effects/s",
        "round trips by method",
    )
    rows = [
        (
            r.backend,
            r.variant,
            _trips_text(r),
            f"{r.median_ms:.2f}",
            f"{r.p95_ms:.2f}",
            f"{r.effects_per_s:.0f}",
            r.breakdown(),
        )
        for r in results
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    numeric = {2, 3, 4, 5}

    def line(cells: tuple[str, ...]) -> str:
        padded = (
            c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )
        return "| " + " | ".join(padded) + " |"

    return [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *(line(row) for row in rows)]


def _trips_text(r: VariantResult) -> str:
    low, high = min(r.round_trips), max(r.round_trips)
    return str(low) if low == high else f"{r.round_trips_per_effect:.2f} ({low}-{high})"


def target_lines(results: list[VariantResult]) -> tuple[list[str], bool]:
    """One verdict per backend on the guarded variant's measured count, and whether all met the target."""
    lines: list[str] = []
    met_all = True
    for r in results:
        if r.variant != "guarded":
            continue
        met = r.max_round_trips <= TARGET_ROUND_TRIPS
        met_all = met_all and met
        verdict = "met" if met else "NOT met"
        lines.append(
            f"Target: at most {TARGET_ROUND_TRIPS} round trips per guarded effect on {r.backend}: {verdict} "
            f"(measured {_trips_text(r)})."
        )
    return lines, met_all


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.guarded_effect",
        description="Store round trips and time per guarded effect, against an unguarded and a read-first baseline.",
    )
    parser.add_argument("--n", type=positive_int, default=DEFAULT_N, help="measured effects per variant and backend")
    parser.add_argument("--warmup", type=non_negative_int, default=DEFAULT_WARMUP, help="discarded effects first")
    parser.add_argument(
        "--backends",
        type=backends_argument,
        default=list(BACKENDS),
        help="comma-separated: sqlite,cosmos (default: both)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Measure every requested backend and print the table. See the module docstring for the exit status."""
    args = build_parser().parse_args(argv)
    print("Casekeeper benchmark: the cost of one guarded effect (claim, version gate, call, record, commit)")
    print(
        f"n={args.n} effects per variant and backend (after {args.warmup} warm-up), interleaved, one case each; "
        "downstream in process."
    )
    print("Round trips: port method calls counted on the DocumentStore. Cosmos: the local test server.")
    print()
    results: list[VariantResult] = []
    failures: list[str] = []
    started = time.monotonic()
    for backend in args.backends:
        try:
            with open_backend(backend) as store:
                results.extend(measure(store, backend, n=args.n, warmup=args.warmup))
        except (CasekeeperError, BenchmarkError, OSError, RuntimeError) as exc:
            failures.append(f"{backend}: could not be measured: {type(exc).__name__}: {exc}")
    if results:
        for line in render(results):
            print(line)
        print()
    verdicts, met = target_lines(results)
    for line in verdicts + failures:
        print(line)
    print(f"({time.monotonic() - started:.1f} s)")
    return 0 if met and not failures and results else 1


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def backends_argument(text: str) -> list[str]:
    """``--backends``: a comma-separated subset of :data:`BACKENDS` (both benchmarks take it)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(names) - set(BACKENDS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"known backends: {', '.join(BACKENDS)}")
    return list(dict.fromkeys(names))


if __name__ == "__main__":
    sys.exit(main())
