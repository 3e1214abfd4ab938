"""The app's ports: what the workflow reports through, and what it reports.

The workflow (``shared.workflow``) calls them; the composition root fills them with the app's adapters
(``shared.app.telemetry.Telemetry`` is a :class:`WorkflowTelemetry`, its ``model_call`` a
:data:`ModelObserver`). Neither side imports the other: both import this module, which imports neither.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class ModelCall:
    """One answered model call, for telemetry: what it cost and who answered."""

    case_id: str
    deployment: str
    model: str | None
    input_tokens: int | None
    output_tokens: int | None
    outcome: str
    """``proposed``, ``invalid`` (malformed, refused, filtered) or ``unavailable:<kind>``."""


ModelObserver = Callable[[ModelCall], None]


class WorkflowTelemetry(Protocol):
    """What the workflow reports: spans around its stages (``propose``, ``commit_status``, ``workflow.run``,
    and the guard's, to which ``span`` is handed as its ``trace``) and the status commits it lost to a race.
    The app's ``shared.app.telemetry.Telemetry`` is one (OpenTelemetry); the workflow never imports it."""

    def span(self, name: str, attributes: Mapping[str, Any] | None = None) -> AbstractContextManager[Any]:
        """A context manager around one stage; what it yields takes ``set_attribute(key, value)``. An
        exception raised inside marks the stage as failed and propagates."""
        ...

    def lost_commit(self, where: str) -> None:
        """A status commit at ``where`` (``commit``, ``approval-gate``) lost to another writer."""
        ...


class _NoSpan:
    def set_attribute(self, key: str, value: Any) -> None:
        pass


class NoTelemetry:
    """Reports nothing: what a workflow built without the composition root's telemetry reports through (the
    tests' harness, the benchmarks)."""

    @contextmanager
    def span(self, name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[_NoSpan]:
        yield _NoSpan()

    def lost_commit(self, where: str) -> None:
        pass
