"""A store wrapper that counts the operations reaching the real store, by (operation, container)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from casekeeper.core.ports import DocumentStore

COUNTED = frozenset({"create", "read", "replace", "update_if", "upsert", "delete", "query", "count"})


class Counting:
    """Counts the operations that reach the real store, by (operation, container)."""

    def __init__(self, inner: DocumentStore) -> None:
        self.inner = inner
        self.ops: Counter[tuple[str, str]] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name in COUNTED:

            def counted(container: str, *args: Any, **kwargs: Any) -> Any:
                self.ops[(name, container)] += 1
                return attr(container, *args, **kwargs)

            return counted
        return attr

    def reset(self) -> None:
        self.ops.clear()

    @property
    def total(self) -> int:
        return sum(self.ops.values())
