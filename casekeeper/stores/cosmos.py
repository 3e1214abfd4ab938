"""Cosmos DB backend of the storage port (:class:`casekeeper.core.ports.DocumentStore`), azure-cosmos sync client.

What this module promises, beyond the port:

- Constructing a store does no network I/O. azure-cosmos' ``CosmosClient`` reads the account metadata in
  its constructor, so the client is built on first use (once, under a lock) and reused; container clients
  are cached.
- Vendor errors are translated in one place, :func:`_translate` (the pure part is
  :func:`translate_error`); the table is data (:data:`STATUS_ERRORS`, :data:`TRANSIENT_ERRORS`) so a test
  can check it. No azure type or azure error leaves this module.
- ``Document.body`` never holds Cosmos system fields; ``etag`` is ``_etag`` and ``ts`` is ``_ts`` (whole
  seconds, the server's clock). :meth:`CosmosDocumentStore.now` reads that same clock.
- Arguments the port forbids (partition not matching the body, id not matching ``doc_id``, unsafe query
  field names) raise ``ValueError``, and ids outside the project's id rule (``casekeeper.core.ids``, which
  covers what Cosmos cannot address) raise ``InvalidDocumentId``, before any request is sent.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType, TracebackType
from typing import Any, Final, Literal

from azure.core import MatchConditions
from azure.core.credentials import TokenCredential
from azure.core.exceptions import AzureError, HttpResponseError, ServiceRequestError, ServiceResponseError
from azure.cosmos import ContainerProxy, CosmosClient, PartitionKey
from azure.cosmos.exceptions import CosmosClientTimeoutError

from casekeeper.core.errors import AlreadyExists, ConcurrencyConflict, ConfigurationError, StoreError, StoreUnavailable
from casekeeper.core.ids import check_document_id
from casekeeper.core.ports import CONTAINERS, HEALTH, Document, Query, partition_of

__all__ = [
    "CLOCK_CONTAINER",
    "CLOCK_ID",
    "KEYSET_COMPOSITE_INDEX",
    "NOT_FOUND",
    "STATUS_ERRORS",
    "SYSTEM_FIELDS",
    "TRANSIENT_ERRORS",
    "CosmosDocumentStore",
    "OnMissing",
    "build_conditional_patch",
    "build_query",
    "cosmos_store_from_settings",
    "translate_error",
]

# --- error translation -------------------------------------------------------------------------

STATUS_ERRORS: Final[Mapping[int, type[StoreError]]] = MappingProxyType(
    {
        408: StoreUnavailable,  # request timeout
        409: AlreadyExists,  # create (or a unique key) found the id taken
        412: ConcurrencyConflict,  # If-Match lost: someone wrote since our read
        429: StoreUnavailable,  # throttled, and the SDK's own 429 retries are exhausted
        449: StoreUnavailable,  # "retry with": a transient server-side write conflict
        500: StoreUnavailable,
        503: StoreUnavailable,
    }
)
"""HTTP status -> project error, for every status whose meaning does not depend on the operation.

404 is not here: its meaning depends on the operation (see :data:`OnMissing`). Any status not listed
(400, 401, 403, 413, ...) becomes a plain, non-retryable :class:`StoreError`."""

TRANSIENT_ERRORS: Final[tuple[type[AzureError], ...]] = (
    ServiceRequestError,  # could not send: refused, DNS, TLS, connect timeout
    ServiceResponseError,  # sent, but the answer broke off or timed out
    CosmosClientTimeoutError,  # the client-side ``timeout=`` budget ran out
)
"""Transport-level azure errors that mean "try later" (:class:`StoreUnavailable`)."""

NOT_FOUND: Final = 404
# Cosmos DB sets this sub-status on a 404 when the container or database itself is missing: that is a
# deployment fault, never "the document is absent".
_OWNER_MISSING_SUBSTATUS: Final = 1003

OnMissing = Literal["absent", "conflict", "error"]
"""What a 404 means for the operation at hand:

- ``"absent"``: a normal answer (point read -> ``None``, unconditional delete -> ``False``);
- ``"conflict"``: the document vanished under a conditional write -> :class:`ConcurrencyConflict`;
- ``"error"``: the container or database is missing (create, upsert, query) -> :class:`StoreError`.
"""


def _summary(exc: BaseException) -> str:
    # azure messages span several lines and may carry a long diagnostics blob; one short line is enough
    # in our message, and the whole original stays reachable as __cause__.
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


def translate_error(
    exc: AzureError, *, container: str | None, doc_id: str | None, on_missing: OnMissing
) -> StoreError | None:
    """The project error for an azure error, or ``None`` when ``exc`` is a 404 and ``on_missing`` is
    ``"absent"`` (the caller then reports absence). Pure: it only builds the error, the caller raises it."""
    where = container or "<account>"
    if doc_id is not None:
        where = f"{where}/{doc_id}"
    status = exc.status_code if isinstance(exc, HttpResponseError) else None
    if status == NOT_FOUND:
        if getattr(exc, "sub_status", None) == _OWNER_MISSING_SUBSTATUS:
            return StoreError(
                f"Cosmos DB container or database missing for {where}: {_summary(exc)}",
                container=container,
                doc_id=doc_id,
            )
        if on_missing == "absent":
            return None
        if on_missing == "conflict":
            return ConcurrencyConflict(
                f"{where} vanished before the conditional write", container=container, doc_id=doc_id
            )
        return StoreError(
            f"Cosmos DB answered 404 for {where} (container or database missing?): {_summary(exc)}",
            container=container,
            doc_id=doc_id,
        )
    if status is not None:
        error_class = STATUS_ERRORS.get(status, StoreError)
        return error_class(
            f"Cosmos DB answered {status} for {where}: {_summary(exc)}", container=container, doc_id=doc_id
        )
    if isinstance(exc, TRANSIENT_ERRORS):
        return StoreUnavailable(
            f"Cosmos DB unreachable for {where}: {_summary(exc)}", container=container, doc_id=doc_id
        )
    return StoreError(
        f"Cosmos DB call failed for {where}: {_summary(exc)}",
        container=container,
        doc_id=doc_id,
    )


@dataclass
class _Outcome:
    """Filled in by :func:`_translate`: ``missing`` is True when a 404 was swallowed as "absent"."""

    missing: bool = False


class _Translation:
    """The context manager :func:`_translate` returns. A class rather than ``@contextmanager`` so that
    ``__exit__`` is typed ``-> bool``: type checkers then know the block may end without its exception
    (the "absent" case) and do not treat the code after it as unreachable."""

    def __init__(self, container: str | None, doc_id: str | None, on_missing: OnMissing) -> None:
        self._container = container
        self._doc_id = doc_id
        self._on_missing = on_missing
        self._outcome = _Outcome()

    def __enter__(self) -> _Outcome:
        return self._outcome

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        if not isinstance(exc, AzureError):
            return False  # no error, or not a vendor error: let it propagate as it is
        error = translate_error(
            exc,
            container=self._container,
            doc_id=self._doc_id,
            on_missing=self._on_missing,
        )
        if error is None:
            self._outcome.missing = True
            return True  # swallowed: the caller reports absence
        raise error from exc


def _translate(
    container: str | None,
    doc_id: str | None,
    *,
    on_missing: OnMissing = "error",
) -> _Translation:
    """The one place where azure errors become project errors.

    Every :class:`~azure.core.exceptions.AzureError` raised in the block is re-raised as the
    :class:`StoreError` subclass :func:`translate_error` picks, chained (``raise ... from exc``). With
    ``on_missing="absent"`` a 404 is swallowed instead and the outcome (the ``as`` target) has ``missing``
    set. Anything that is not an azure error (``ValueError`` for a bad argument, our own errors) passes
    through unchanged.
    """
    return _Translation(container, doc_id, on_missing)


# --- documents ---------------------------------------------------------------------------------

SYSTEM_FIELDS: Final[frozenset[str]] = frozenset({"_rid", "_self", "_etag", "_attachments", "_ts"})
"""Fields Cosmos DB adds to every document; never part of ``Document.body``."""

KEYSET_COMPOSITE_INDEX: Final[tuple[dict[str, str], ...]] = (
    {"path": "/_ts", "order": "ascending"},
    {"path": "/id", "order": "ascending"},
)
"""The composite index a paged query's ``ORDER BY c._ts ASC, c.id ASC`` needs, on every container (Cosmos DB
and the test server refuse such an ``ORDER BY`` without it). :meth:`CosmosDocumentStore.ensure_containers`
creates containers with it; in Azure the container's indexing policy in ``infra/`` must hold it."""

CLOCK_CONTAINER: Final = HEALTH
CLOCK_ID: Final = "clock"
"""The document :meth:`CosmosDocumentStore.now` upserts (partition ``kind="clock"``) to read the clock."""

# Field names are interpolated into SQL (parameters cannot name a property), so only identifier
# characters are allowed; they are then written as c["name"] so that reserved words (value, order...)
# also work.
_FIELD_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_id(container: str, doc_id: str) -> None:
    # The project's one id rule (Cosmos DB's own ban on / \\ ? # included): a bad id raises
    # InvalidDocumentId before a request is sent, exactly as on SQLite.
    check_document_id(container, doc_id)


def _prepare_body(container: str, partition: str, doc_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``body`` ready to send: system fields dropped, ``id`` set to ``doc_id``.

    Raises ``ValueError`` when the container is unknown, when the body's ``id`` differs from ``doc_id``, or
    when the body's partition field is not ``partition``."""
    _check_id(container, doc_id)
    prepared = {key: value for key, value in body.items() if key not in SYSTEM_FIELDS}
    existing_id = prepared.setdefault("id", doc_id)
    if existing_id != doc_id:
        raise ValueError(f"body id {existing_id!r} differs from doc_id {doc_id!r}")
    body_partition = partition_of(container, prepared)
    if body_partition != partition:
        field_name = CONTAINERS[container]
        raise ValueError(f"{container} body has {field_name}={body_partition!r}, partition is {partition!r}")
    return prepared


def _to_document(container: str, partition: str | None, raw: Mapping[str, Any]) -> Document:
    """A port document from a Cosmos item. Raises ``StoreError`` when the item lacks ``_etag``/``_ts``
    (a client configured to skip write responses would cause that)."""
    try:
        etag = str(raw["_etag"])
        ts = float(raw["_ts"])
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(
            f"Cosmos DB item without _etag/_ts in {container}", container=container, doc_id=raw.get("id")
        ) from exc
    body = {key: value for key, value in raw.items() if key not in SYSTEM_FIELDS}
    doc_id = str(body.get("id", ""))
    return Document(
        container=container,
        partition=partition if partition is not None else partition_of(container, body),
        id=doc_id,
        body=body,
        etag=etag,
        ts=ts,
    )


def build_query(container: str, query: Query, *, count: bool = False) -> tuple[str, list[dict[str, object]]]:
    """The parameterised Cosmos SQL for ``query`` and its parameters (``count``: ``SELECT VALUE COUNT(1)``,
    without ordering or limit).

    Only the SQL that ``@vercel/cosmosdb-server`` (our test server) also runs is used: ``TOP n`` for the
    limit (it has no ``OFFSET ... LIMIT``), ``ORDER BY c._ts`` or, for a paged query, ``ORDER BY c._ts,
    c.id`` (a composite index ``(/_ts ASC, /id ASC)``: :data:`KEYSET_COMPOSITE_INDEX`, which both Cosmos DB
    and the test server require), and ``COUNT`` without ``GROUP BY`` (the test server has none). A
    partition query also filters on the partition field: Cosmos does so implicitly, the test server does not.

    Raises ``ValueError`` for an unknown container, a field name that is not an identifier or is a system
    field, a non-scalar value, a non-finite ``ts`` bound, a negative or non-integer limit, an unknown
    ordering, or ``after`` without ``paged``.
    """
    if container not in CONTAINERS:
        raise ValueError(f"unknown container {container!r}; known: {sorted(CONTAINERS)}")
    conditions: list[str] = []
    parameters: list[dict[str, object]] = []
    if query.partition is not None:
        if not isinstance(query.partition, str) or not query.partition:
            raise ValueError(f"partition must be a non-empty string or None, got {query.partition!r}")
        conditions.append(f'c["{CONTAINERS[container]}"] = @pk')
        parameters.append({"name": "@pk", "value": query.partition})
    for index, (name, value) in enumerate(query.equals.items()):
        if not isinstance(name, str) or not _FIELD_NAME.fullmatch(name):
            raise ValueError(f"query field {name!r} is not a plain identifier")
        if name in SYSTEM_FIELDS:
            raise ValueError(f"query field {name!r} is a Cosmos system field; use ts_before/ts_after")
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise ValueError(f"query value for {name!r} must be a scalar, got {type(value).__name__}")
        conditions.append(f'c["{name}"] = @p{index}')
        parameters.append({"name": f"@p{index}", "value": value})
    for bound, operator, parameter in (
        (query.ts_before, "<", "@tsBefore"),
        (query.ts_after, ">", "@tsAfter"),
    ):
        if bound is None:
            continue
        _check_ts(bound)
        conditions.append(f"c._ts {operator} {parameter}")
        parameters.append({"name": parameter, "value": bound})
    if query.after is not None:
        if not query.paged:
            raise ValueError("Query.after continues a paged query: set paged=True")
        after_ts, after_id = query.after
        _check_ts(after_ts)
        if not isinstance(after_id, str):
            raise ValueError(f"the id of Query.after must be a string, got {after_id!r}")
        conditions.append("(c._ts > @afterTs OR (c._ts = @afterTs AND c.id > @afterId))")
        parameters.extend([{"name": "@afterTs", "value": after_ts}, {"name": "@afterId", "value": after_id}])
    where = " WHERE " + " AND ".join(conditions) if conditions else ""
    if count:
        return f"SELECT VALUE COUNT(1) FROM c{where}", parameters
    top = ""
    if query.limit is not None:
        if isinstance(query.limit, bool) or not isinstance(query.limit, int) or query.limit < 0:
            raise ValueError(f"limit must be a non-negative int, got {query.limit!r}")
        # An int literal, checked above, so interpolating it is safe.
        top = f"TOP {query.limit} "
    # Only checked identifiers and an int literal are interpolated; every value is a parameter.
    sql = f"SELECT {top}* FROM c{where}"
    if query.paged:
        sql += " ORDER BY c._ts ASC, c.id ASC"
    elif query.order_by_ts is not None:
        if query.order_by_ts not in ("asc", "desc"):
            raise ValueError(f"order_by_ts must be 'asc', 'desc' or None, got {query.order_by_ts!r}")
        sql += f" ORDER BY c._ts {query.order_by_ts.upper()}"
    return sql, parameters


def _check_ts(bound: object) -> None:
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound):
        raise ValueError(f"ts bound must be a finite number, got {bound!r}")


def build_conditional_patch(
    container: str, where: Mapping[str, Any], set_fields: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], str | None]:
    """The patch operations and the filter predicate of :meth:`CosmosDocumentStore.update_if`.

    A filter predicate is SQL text without parameters, so each value is written as a JSON literal (a
    string, a finite number, a boolean or null), which Cosmos SQL reads the same way; field names are
    checked identifiers. Raises ``ValueError`` for anything else, and for setting ``id`` or the
    partition key field (Cosmos cannot patch them)."""
    if container not in CONTAINERS:
        raise ValueError(f"unknown container {container!r}; known: {sorted(CONTAINERS)}")
    if not set_fields:
        raise ValueError("update_if needs at least one field to set")
    for name in (*where, *set_fields):
        if not isinstance(name, str) or not _FIELD_NAME.fullmatch(name) or name in SYSTEM_FIELDS:
            raise ValueError(f"field {name!r} is not a plain identifier")
        if name in ("id", CONTAINERS[container]):
            raise ValueError(f"update_if may not test or set {name!r}")
    operations = [{"op": "set", "path": f"/{name}", "value": value} for name, value in set_fields.items()]
    conditions: list[str] = []
    for name, value in where.items():
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise ValueError(f"condition on {name!r} must be a scalar, got {type(value).__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"condition on {name!r} must be finite, got {value!r}")
        conditions.append(f'c["{name}"] = {json.dumps(value)}')
    predicate = "from c where " + " AND ".join(conditions) if conditions else None
    return operations, predicate


# --- the store ---------------------------------------------------------------------------------


class CosmosDocumentStore:
    """:class:`~casekeeper.core.ports.DocumentStore` on Cosmos DB (NoSQL API), one database.

    ``client`` is either a ready ``CosmosClient`` (left open by :meth:`close`: its owner closes it) or an
    account endpoint; with an endpoint, ``credential`` is required (a key string for a local server, an
    azure-identity ``TokenCredential`` in Azure) and ``client_options`` go to ``CosmosClient``. The client
    is built on first use, so constructing a store never touches the network.

    Thread-safe: one client and one container client per container are shared by all threads.
    Every method raises ``StoreUnavailable`` for a transient failure, ``StoreError`` for any other backend
    failure, and ``ValueError`` for arguments the port forbids.
    """

    def __init__(
        self,
        client: CosmosClient | str,
        database: str,
        *,
        credential: str | TokenCredential | None = None,
        owns_credential: bool = False,
        container_names: Mapping[str, str] | None = None,
        **client_options: Any,
    ) -> None:
        """``owns_credential=True`` makes :meth:`close` also close ``credential`` (when it can be closed).
        ``container_names`` maps the port's container names (``cases``, ``effects``, ...) to the Cosmos DB
        containers that hold them, so two applications can share a database; unmapped names are used as
        they are.

        Raises ``ValueError`` when ``database`` is empty, when an endpoint comes without a credential, or
        when a ready client comes with a credential or client options."""
        if not isinstance(database, str) or not database:
            raise ValueError("database name must be a non-empty string")
        self._database_name = database
        unknown = sorted(set(container_names or {}) - set(CONTAINERS))
        if unknown:
            raise ValueError(f"container_names maps unknown container(s) {unknown}; known: {sorted(CONTAINERS)}")
        self._names: dict[str, str] = {name: (container_names or {}).get(name, name) for name in CONTAINERS}
        self._lock = threading.Lock()
        self._containers: dict[str, ContainerProxy] = {}
        self._closed = False
        if isinstance(client, CosmosClient):
            if credential is not None or client_options:
                raise ValueError("pass a CosmosClient, or an endpoint with credential and options; not both")
            self._client: CosmosClient | None = client
            self._owns_client = False
            self._endpoint: str | None = None
        else:
            if not isinstance(client, str) or not client:
                raise ValueError("client must be a CosmosClient or a non-empty endpoint URL")
            if credential is None:
                raise ValueError("an endpoint needs a credential (account key or TokenCredential)")
            self._client = None
            self._owns_client = True
            self._endpoint = client
        self._credential = credential
        self._owns_credential = owns_credential
        self._client_options = dict(client_options)

    def __repr__(self) -> str:
        return f"CosmosDocumentStore(endpoint={self._endpoint!r}, database={self._database_name!r})"

    # -- clients --

    def _get_client(self) -> CosmosClient:
        """The shared client, built on first call (which reads the account metadata: network I/O).
        Call inside :func:`_translate`. Raises ``StoreError`` after :meth:`close`."""
        with self._lock:
            if self._closed:
                raise StoreError("the Cosmos DB store is closed")
            if self._client is None:
                # __init__ sets both whenever it leaves the client to be built here.
                assert self._endpoint is not None
                assert self._credential is not None
                self._client = CosmosClient(
                    self._endpoint,
                    credential=self._credential,
                    **self._client_options,
                )
            return self._client

    def _container(self, name: str) -> ContainerProxy:
        """The cached container client for ``name``. Raises ``ValueError`` for an unknown container."""
        if name not in CONTAINERS:
            raise ValueError(f"unknown container {name!r}; known: {sorted(CONTAINERS)}")
        cached = self._containers.get(name)
        if cached is not None:
            return cached
        client = self._get_client()
        with self._lock:
            # get_*_client builds proxies only; no request is sent until an item call.
            proxy = self._containers.get(name)
            if proxy is None:
                proxy = client.get_database_client(self._database_name).get_container_client(self._names[name])
                self._containers[name] = proxy
            return proxy

    # -- setup (local and test use; in Azure, infra creates the containers) --

    def ensure_containers(self, *, lease_containers: tuple[str, ...] = ()) -> None:
        """Create the database and every container of :data:`~casekeeper.core.ports.CONTAINERS` (partition key
        ``/<field>``) when missing, and each of ``lease_containers`` (partition key ``/id``, as the Functions
        Cosmos DB trigger requires of its leases; the store itself never reads them). Raises
        ``ConfigurationError`` when a container exists with another partition key path."""
        wanted = {name: f"/{field_name}" for name, field_name in CONTAINERS.items()}
        wanted.update(dict.fromkeys(lease_containers, "/id"))
        with _translate(None, None):
            client = self._get_client()
            database = client.create_database_if_not_exists(id=self._database_name)
            for name, path in wanted.items():
                # Time to live on without a default, as infra/app/cosmos.bicep has it: only a document carrying
                # its own "ttl" (shared/app/retention.py) expires. Not on lease containers.
                options: dict[str, Any] = {}
                if name in CONTAINERS:
                    options["default_ttl"] = -1
                    options["indexing_policy"] = {
                        "indexingMode": "consistent",
                        "includedPaths": [{"path": "/*"}],
                        "compositeIndexes": [list(KEYSET_COMPOSITE_INDEX)],
                    }
                proxy = database.create_container_if_not_exists(
                    id=self._names.get(name, name),  # a lease container keeps its own name
                    partition_key=PartitionKey(path=path),
                    **options,
                )
                paths = (proxy.read().get("partitionKey") or {}).get("paths")
                if paths != [path]:
                    expected = [path]
                    physical = self._names.get(name, name)
                    raise ConfigurationError(f"container {physical!r} has partition key {paths}, not {expected}")
                if name in CONTAINERS:
                    with self._lock:
                        self._containers[name] = proxy

    # -- the port --

    def create(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any]) -> Document:
        """Insert if absent. Raises ``AlreadyExists`` when ``doc_id`` is taken in the partition."""
        prepared = _prepare_body(container, partition, doc_id, body)
        with _translate(container, doc_id):
            raw = self._container(container).create_item(body=prepared, no_response=False)
        return _to_document(container, partition, raw)

    def read(self, container: str, partition: str, doc_id: str) -> Document | None:
        """Point read; ``None`` when absent."""
        _check_id(container, doc_id)
        raw: Mapping[str, Any] | None = None
        with _translate(container, doc_id, on_missing="absent") as outcome:
            raw = self._container(container).read_item(item=doc_id, partition_key=partition)
        if outcome.missing or raw is None:
            return None
        return _to_document(container, partition, raw)

    def replace(
        self,
        container: str,
        partition: str,
        doc_id: str,
        body: Mapping[str, Any],
        *,
        etag: str,
    ) -> Document:
        """Replace if the stored ETag equals ``etag``. Raises ``ConcurrencyConflict`` when it does not (412)
        or when the document is gone (404). Raises ``ValueError`` for an empty ``etag``: the SDK would then
        send no ``If-Match`` and replace unconditionally."""
        if not isinstance(etag, str) or not etag:
            raise ValueError("replace needs the non-empty etag of the version it read")
        prepared = _prepare_body(container, partition, doc_id, body)
        with _translate(container, doc_id, on_missing="conflict"):
            raw = self._container(container).replace_item(
                item=doc_id,
                body=prepared,
                etag=etag,
                match_condition=MatchConditions.IfNotModified,
                no_response=False,
            )
        return _to_document(container, partition, raw)

    def update_if(
        self,
        container: str,
        partition: str,
        doc_id: str,
        *,
        where: Mapping[str, Any],
        set_fields: Mapping[str, Any],
    ) -> Document:
        """A patch (``set`` operations) with a filter predicate: Cosmos DB evaluates the predicate on the
        primary, against the latest committed document, so success proves it held (a point read under
        Session consistency could come from a lagging replica). 412 (predicate false) and 404 (gone) raise
        ``ConcurrencyConflict``."""
        _check_id(container, doc_id)
        operations, predicate = build_conditional_patch(container, where, set_fields)
        with _translate(container, doc_id, on_missing="conflict"):
            raw = self._container(container).patch_item(
                item=doc_id,
                partition_key=partition,
                patch_operations=operations,
                filter_predicate=predicate,
                no_response=False,
            )
        return _to_document(container, partition, raw)

    def upsert(self, container: str, partition: str, doc_id: str, body: Mapping[str, Any]) -> Document:
        """Create or overwrite unconditionally (last writer wins)."""
        prepared = _prepare_body(container, partition, doc_id, body)
        with _translate(container, doc_id):
            raw = self._container(container).upsert_item(body=prepared, no_response=False)
        return _to_document(container, partition, raw)

    def delete(self, container: str, partition: str, doc_id: str, *, etag: str | None = None) -> bool:
        """Delete; with ``etag``, only if the stored ETag equals it. ``True`` when deleted, ``False`` when
        absent (unconditional delete). Raises ``ConcurrencyConflict`` when ``etag`` does not match or the
        document is gone (a conditional delete of a missing document is a lost race, not a no-op)."""
        _check_id(container, doc_id)
        proxy_kwargs: dict[str, Any] = {}
        on_missing: OnMissing = "absent"
        if etag is not None:
            if not isinstance(etag, str) or not etag:
                raise ValueError("a conditional delete needs a non-empty etag")
            proxy_kwargs = {"etag": etag, "match_condition": MatchConditions.IfNotModified}
            on_missing = "conflict"
        with _translate(container, doc_id, on_missing=on_missing) as outcome:
            self._container(container).delete_item(item=doc_id, partition_key=partition, **proxy_kwargs)
        return not outcome.missing

    def query(self, container: str, query: Query) -> list[Document]:
        """Documents matching ``query`` (see :func:`build_query`); ``partition=None`` queries across
        partitions. Order is unspecified unless ``order_by_ts`` is set, and among documents with the same
        ``_ts`` (whole seconds) even then."""
        sql, parameters = build_query(container, query)
        if query.limit == 0:
            return []
        options: dict[str, Any] = {"partition_key": query.partition}
        if query.partition is None:
            options = {"enable_cross_partition_query": True}
        with _translate(container, None):
            # list() drains every page inside the translation block: paging requests can fail too.
            items = list(self._container(container).query_items(query=sql, parameters=parameters, **options))
        return [_to_document(container, query.partition, item) for item in items]

    def count(self, container: str, query: Query) -> int:
        """How many documents match ``query``: one ``SELECT VALUE COUNT(1)`` (across partitions when
        ``partition`` is ``None``; the SDK sums the partitions' counts). Ordering, limit and paging are ignored."""
        sql, parameters = build_query(container, replace(query, limit=None, paged=False, after=None), count=True)
        options: dict[str, Any] = {"partition_key": query.partition}
        if query.partition is None:
            options = {"enable_cross_partition_query": True}
        with _translate(container, None):
            values: list[Any] = list(
                self._container(container).query_items(query=sql, parameters=parameters, **options)
            )
        return sum(int(value) for value in values)

    def now(self) -> float:
        """The server's clock in seconds since the epoch (whole seconds), the same clock as ``Document.ts``.

        Upserts the clock document (``health``/``kind="clock"``/``id="clock"``) and returns its ``_ts``:
        Cosmos SQL's ``GetCurrentTimestamp()`` would avoid the write, but the test server lacks it.
        Costs one small write per call."""
        body = {"id": CLOCK_ID, "kind": "clock"}
        with _translate(CLOCK_CONTAINER, CLOCK_ID):
            proxy = self._container(CLOCK_CONTAINER)
            raw: Mapping[str, Any] = proxy.upsert_item(body=body, no_response=False)
            if "_ts" not in raw:
                # A client set to skip write responses returns no body; the read gets the same _ts.
                raw = proxy.read_item(item=CLOCK_ID, partition_key="clock")
        return _to_document(CLOCK_CONTAINER, "clock", raw).ts

    def close(self) -> None:
        """Release connections: closes the client if this store built it, and the credential if it owns
        it. Idempotent; any later call raises ``StoreError``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            client, self._client = self._client, None
            self._containers.clear()
        if client is not None and self._owns_client:
            client.close()
        close_credential = getattr(self._credential, "close", None)
        if self._owns_credential and callable(close_credential):
            close_credential()

    def __enter__(self) -> CosmosDocumentStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def cosmos_store_from_settings(
    endpoint: str,
    database: str,
    key: str | None,
    *,
    container_names: Mapping[str, str] | None = None,
    **client_options: Any,
) -> CosmosDocumentStore:
    """A store for ``endpoint``/``database``: with ``key`` (a local or test server, or the emulator, whose
    ``CosmosDBConnection`` string the settings split into endpoint and key) key auth, without it
    (``None`` or empty, as an unset setting reads) ``DefaultAzureCredential()`` (managed identity in
    Azure, a developer login locally), which the store then owns and closes. No network I/O happens here.
    ``client_options`` go to ``CosmosClient`` (``read_timeout``, say).

    ``container_names``: see :class:`CosmosDocumentStore`.
    Raises ``ConfigurationError`` when ``endpoint`` or ``database`` is empty."""
    missing = tuple(name for name, value in (("endpoint", endpoint), ("database", database)) if not value)
    if missing:
        raise ConfigurationError(f"Cosmos DB settings missing: {', '.join(missing)}", missing=missing)
    if key:
        return CosmosDocumentStore(
            endpoint, database, credential=key, container_names=container_names, **client_options
        )
    # Imported here so that key-only use (tests, local runs) does not need azure-identity at import time.
    from azure.identity import DefaultAzureCredential

    return CosmosDocumentStore(
        endpoint,
        database,
        credential=DefaultAzureCredential(),
        owns_credential=True,
        container_names=container_names,
        **client_options,
    )
