"""A store outage: the real store, with the calls on chosen containers refused.

A thin wrapper, not a fake: every call it lets through reaches the real store. The fault under test is
"the store, or one of its containers, is unreachable", which a real store cannot be told to be.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from casekeeper.core.ports import CONTAINERS, DocumentStore
from casekeeper.errors import StoreUnavailable

ALL = frozenset(CONTAINERS)
"""Every container: the whole store is down."""


class OutageStore:
    """``inner``, but every port call on a container in ``down`` raises ``StoreUnavailable`` (counted in
    ``refused``). ``now`` and ``close`` name no container and always pass: a read or write made before
    ``now`` would be refused first."""

    def __init__(self, inner: DocumentStore) -> None:
        self.inner = inner
        self.down: frozenset[str] = frozenset()
        self.refuse: Callable[[str, str, tuple[Any, ...]], bool] | None = None
        """Refuses, besides ``down``, the calls it answers True for (container, method, positional args):
        one kind of write, say, while the others pass."""
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if name in ("close", "now") or not callable(attribute):
            return attribute

        def call(container: str, *args: Any, **kwargs: Any) -> Any:
            if container in self.down or (self.refuse is not None and self.refuse(container, name, args)):
                self.refused += 1
                raise StoreUnavailable(f"{container} unreachable (outage under test)")
            return attribute(container, *args, **kwargs)

        return call
