"""A "third store" for the contract suites' factory hook (``CASEKEEPER_STORE_FACTORY``): what a store
author points the hook at. This one is SQLite under another class, which is enough to prove that the hook
runs every contract test against whatever the factory opens."""

from __future__ import annotations

from pathlib import Path

from casekeeper.core.ports import DocumentStore
from casekeeper.stores.sqlite import SqliteDocumentStore

OPENED: list[str] = []


class ThirdStore(SqliteDocumentStore):
    """Stands in for a new backend."""


def open_store(directory: str) -> DocumentStore:
    """Open (or reopen) the store kept in ``directory``."""
    OPENED.append(directory)
    return ThirdStore(Path(directory) / "third.sqlite")
