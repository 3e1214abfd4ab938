"""Stores: where cases, the effect ledger, checkpoints and health records live.

Every store implements one protocol, :class:`DocumentStore` (conditional writes over JSON documents in
four containers: ``cases``, ``effects``, ``checkpoints``, ``health``), and passes one contract suite.
docs/guard.md#stores says what a store must provide and how to run the suite against a new one.
Every id must be one every store can keep: :func:`id_problem` says what is wrong with one (at most
:data:`MAX_ID_LENGTH` characters), :func:`storable_id` turns any text into one. :data:`CASES` names the
cases' container; :func:`decode_all` decodes query results, skipping (and reporting) a malformed one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from casekeeper.core.cases import CASES
from casekeeper.core.effect import EFFECTS
from casekeeper.core.ids import MAX_ID_LENGTH, id_problem, storable_id
from casekeeper.core.ports import (
    CONTAINERS,
    HEALTH,
    Document,
    DocumentStore,
    Page,
    Query,
    Scalar,
    decode_all,
    next_page,
    walk,
)
from casekeeper.stores.sqlite import SqliteDocumentStore

if TYPE_CHECKING:
    from casekeeper.stores.cosmos import CosmosDocumentStore


def open_sqlite(path: str | Path) -> SqliteDocumentStore:
    """A store in one SQLite file (created if missing); safe to share between processes on one machine."""
    return SqliteDocumentStore(path)


def open_cosmos(
    endpoint: str,
    database: str,
    *,
    key: str | None = None,
    credential: Any = None,
    container_names: Mapping[str, str] | None = None,
    create_containers: bool = False,
) -> CosmosDocumentStore:
    """A store on Cosmos DB (NoSQL API). Authenticates with ``key`` or ``credential`` (an azure-identity
    ``TokenCredential``; with neither, ``DefaultAzureCredential``). ``container_names`` maps ``cases``,
    ``effects``, ``checkpoints`` and ``health`` to your containers' names (partition keys ``/id``,
    ``/caseId``, ``/caseId``, ``/kind``). ``create_containers`` creates any that are missing (local use;
    in Azure, create them with your infrastructure). No network I/O unless ``create_containers``."""
    from casekeeper.stores.cosmos import CosmosDocumentStore, cosmos_store_from_settings

    if credential is not None:
        store = CosmosDocumentStore(endpoint, database, credential=credential, container_names=container_names)
    else:
        store = cosmos_store_from_settings(endpoint, database, key, container_names=container_names)
    if create_containers:
        store.ensure_containers()
    return store


__all__ = [
    "CASES",
    "CONTAINERS",
    "EFFECTS",
    "HEALTH",
    "MAX_ID_LENGTH",
    "Document",
    "DocumentStore",
    "Page",
    "Query",
    "Scalar",
    "SqliteDocumentStore",
    "decode_all",
    "id_problem",
    "next_page",
    "open_cosmos",
    "open_sqlite",
    "storable_id",
    "walk",
]
