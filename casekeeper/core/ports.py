"""The storage port: the few conditional-write primitives every backend supplies.

All of Casekeeper's records (cases, the effect ledger, checkpoints, health records) are JSON documents
in named containers. A document lives in one partition (Cosmos DB's logical partition key); the policy
code above this port never sees a vendor type or a vendor error.

A backend implements :class:`DocumentStore` and passes the contract suite in
``tests/contract/test_document_store.py``; a backend that passes it is interchangeable.

Containers and their partition keys (the same names as the Cosmos DB containers):

- ``cases``: partition = case id (``/id``)
- ``effects``: partition = case id (``/caseId``)
- ``checkpoints``: partition = case id (``/caseId``)
- ``health``: partition = ``/kind``: the record's kind, spread over shards where one kind can be many
  (alerts: ``alert-00`` ... ``alert-15``, see ``shared.app.alerts``), so that an incident's records do not
  all land on one logical partition
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, Protocol, TypeVar, runtime_checkable

HEALTH: Final = "health"
"""The container of health records (alerts, checkpoint failures, the timer's cursors, the store's clock): the
one place its name is written."""

CONTAINERS: dict[str, str] = {
    "cases": "id",
    "effects": "caseId",
    "checkpoints": "caseId",
    HEALTH: "kind",
}
"""Container name -> the body field that holds its partition key."""

Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class Document:
    """One stored document, as a backend returned it.

    ``body`` is the caller's JSON object, without backend system fields. ``etag`` changes on every
    write and is what conditional writes compare. ``ts`` is the time of the last write in seconds
    since the epoch, **by the store's clock** (Cosmos ``_ts``, SQLite's own clock), never the caller's.
    """

    container: str
    partition: str
    id: str
    body: dict[str, Any] = field(repr=False)
    etag: str
    ts: float


@dataclass(frozen=True)
class Query:
    """A small, portable query: equality on top-level fields, an optional ``ts`` bound, ordering.

    ``partition=None`` queries across partitions (Cosmos cross-partition query).
    """

    partition: str | None = None
    equals: Mapping[str, Scalar] = field(default_factory=dict)
    ts_before: float | None = None
    ts_after: float | None = None
    order_by_ts: Literal["asc", "desc"] | None = None
    limit: int | None = None
    paged: bool = False
    """Keyset paging: order by ``(ts, id)`` ascending (``order_by_ts`` is ignored), so that a page ends at a
    key and :attr:`after` continues exactly there, however many documents share one ``ts`` (Cosmos DB's
    ``_ts`` has whole seconds). See :func:`next_page`."""
    after: tuple[float, str] | None = None
    """With ``paged``: only documents after this ``(ts, id)`` key (the last one of the previous page)."""


@runtime_checkable
class DocumentStore(Protocol):
    """Conditional-write primitives over JSON documents.

    Every method raises :class:`~casekeeper.core.errors.StoreUnavailable` for a transient backend failure.
    ``partition`` must equal the body's partition field (see :data:`CONTAINERS`); backends check it.
    """

    def create(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any]) -> Document:
        """Insert if absent. Raises ``AlreadyExists`` when a document with this id is in the partition."""
        ...

    def read(self, container: str, partition: str, doc_id: str) -> Document | None:
        """Point read; ``None`` when absent."""
        ...

    def replace(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any], *, etag: str) -> Document:
        """Replace if the stored ETag equals ``etag``. Raises ``ConcurrencyConflict`` when it does not,
        or when the document is gone."""
        ...

    def update_if(
        self,
        container: str,
        partition: str,
        doc_id: str,
        *,
        where: Mapping[str, Scalar],
        set_fields: Mapping[str, Any],
    ) -> Document:
        """Set top-level fields of a document if its top-level fields equal ``where`` when the write lands.

        One conditional write, judged by the backend against its latest state: unlike a read, it can
        never be answered from a lagging replica, so its success proves the condition held at that
        moment (Cosmos DB: a patch with a filter predicate; SQLite: an ``UPDATE ... WHERE``). Raises
        ``ConcurrencyConflict`` when a condition does not hold or the document is gone."""
        ...

    def upsert(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any]) -> Document:
        """Create or overwrite unconditionally. Only for records nobody races on (health records)."""
        ...

    def delete(self, container: str, partition: str, doc_id: str, *, etag: str | None = None) -> bool:
        """Delete (conditionally when ``etag`` is given). ``False`` when absent; ``ConcurrencyConflict``
        when ``etag`` does not match."""
        ...

    def query(self, container: str, query: Query) -> list[Document]:
        """Documents matching ``query``; order is unspecified unless ``order_by_ts`` is set."""
        ...

    def count(self, container: str, query: Query) -> int:
        """How many documents match ``query`` (its ordering, limit and paging ignored): one aggregate
        request (Cosmos DB ``SELECT VALUE COUNT(1)``, SQLite ``count(*)``), never the documents themselves."""
        ...

    def now(self) -> float:
        """The store's current time, in seconds since the epoch, comparable with ``Document.ts``."""
        ...

    def close(self) -> None:
        """Release connections; the store is unusable afterwards."""
        ...


@dataclass(frozen=True)
class Page:
    """One page of a keyset-paged query: ``documents`` in ``(ts, id)`` order and ``after``, the key to pass
    as :attr:`Query.after` for the next page (``None`` when this page was the last)."""

    documents: list[Document]
    after: tuple[float, str] | None


def next_page(store: DocumentStore, container: str, query: Query, size: int) -> Page:
    """The page of ``query`` after ``query.after`` (from the start when ``None``), at most ``size`` documents.

    A page shorter than ``size`` is the last. A document written while a caller pages gets a new ``ts``: it
    is met later in the same walk, or (written within the second a page ended at, on Cosmos DB) by the
    next walk from the start; a document that matched throughout is met exactly once.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise ValueError(f"page size must be a positive int, got {size!r}")
    docs = store.query(container, replace(query, paged=True, limit=size))
    after = (docs[-1].ts, docs[-1].id) if len(docs) == size else None
    return Page(docs, after)


def walk(store: DocumentStore, container: str, query: Query, size: int = 200) -> Iterator[Document]:
    """Every document matching ``query``, read a keyset page of ``size`` at a time (see :func:`next_page`)."""
    current = replace(query, paged=True, after=None)
    while True:
        page = next_page(store, container, current, size)
        yield from page.documents
        if page.after is None:
            return
        current = replace(current, after=page.after)


def partition_of(container: str, body: Mapping[str, Any]) -> str:
    """The partition key value of ``body`` in ``container``."""
    try:
        field_name = CONTAINERS[container]
    except KeyError:
        raise ValueError(f"unknown container {container!r}; known: {sorted(CONTAINERS)}") from None
    value = body.get(field_name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{container} document needs a non-empty string {field_name!r}")
    return value


T = TypeVar("T")
OnMalformed = Callable[[Document, Exception], None]
"""Told about a document that cannot be read as what its container holds (a field missing, a bad value)."""


def decode_all(docs: Iterable[Document], decode: Callable[[Document], T], on_malformed: OnMalformed | None) -> list[T]:
    """``decode`` each document. Without ``on_malformed`` the first failure raises; with it, a malformed
    document is reported and skipped, so one bad document cannot stop a sweep over the others."""
    decoded: list[T] = []
    for doc in docs:
        try:
            decoded.append(decode(doc))
        except (KeyError, TypeError, ValueError) as exc:
            if on_malformed is None:
                raise
            on_malformed(doc, exc)
    return decoded
