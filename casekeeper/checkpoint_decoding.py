"""Checkpoint decoding that admits exactly the types Casekeeper's checkpoints are known to contain.

Agent Framework's restricted unpickler admits, besides the types it is given, every top-level class of
``agent_framework.*`` and ``openai.types.*``. A value planted in a stored checkpoint (write access to the
store needed) can therefore construct any of those classes with arguments of its choosing when the
checkpoint is decoded: by the worker on resume, by ``casekeeper drain check``, by the ops page. This
decoder is the framework's format and the framework's unpickler with that door closed: it admits only

- the framework's built-in value types (``datetime``, ``Decimal``, ``uuid``, ...),
- :data:`FRAMEWORK_CHECKPOINT_TYPES`, the four framework classes a workflow checkpoint holds (the
  messages between executors and the pending-request events), and
- the storage's allow-list (the application's message and state types) and types an
  application registered with ``agent_framework.register_checkpoint_type``.

Anything else is refused with the framework's own message ("blocked for type 'mod:Name'"), and the
refusal is reported to the handler :func:`on_refused` installed (the composition root raises an alert:
a refused type means a tampered store or a type this build forgot to list). Pickle stays what it is:
the allow-list narrows what a checkpoint can build; the store must still be writable by this app only.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import pickle
import re
from collections.abc import Callable, Iterable
from typing import Any, Final

from agent_framework._workflows import _checkpoint_encoding as framework
from agent_framework._workflows._events import WorkflowEvent, WorkflowEventSource
from agent_framework._workflows._runner_context import MessageType, WorkflowMessage
from agent_framework.exceptions import WorkflowCheckpointException

logger = logging.getLogger("casekeeper.checkpoints")


def _key(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


FRAMEWORK_CHECKPOINT_TYPES: Final = frozenset(
    _key(cls) for cls in (WorkflowMessage, MessageType, WorkflowEvent, WorkflowEventSource)
)
"""The framework classes found in this workflow's checkpoints (messages and pending-request events)."""

RefusalHandler = Callable[[list[str], str], object]
"""Called with the refused ``module:QualName`` keys and the SHA-256 of the refused pickle (hex)."""

_handler: RefusalHandler | None = None
_REFUSED: Final = re.compile(r"blocked for (?:nested )?type '([^']+)'")


def on_refused(handler: RefusalHandler | None) -> None:
    """Install the process-wide handler told of every refused type (``None``: none)."""
    global _handler  # noqa: PLW0603 - one handler per process, installed by the composition root
    _handler = handler


class _ExactUnpickler(framework._RestrictedUnpickler):
    """The framework's unpickler, admitting exactly the given keys: no module-prefix admission."""

    def _is_allowed_type(self, resolved: type) -> bool:
        key = _key(resolved)
        return key in framework._BUILTIN_ALLOWED_TYPE_KEYS or key in self._allowed_types

    def find_class(self, module: str, name: str) -> Any:
        key = f"{module}:{name}"
        if key in framework._GETATTR_GLOBAL_KEYS or key in framework._BUILTIN_ALLOWED_TYPE_KEYS:
            return super().find_class(module, name)
        if key in self._allowed_types and key not in framework._BLOCKED_FRAMEWORK_GLOBAL_KEYS:
            return super().find_class(module, name)  # the parent admits only a class under this key
        raise pickle.UnpicklingError(
            f"Checkpoint deserialization blocked for type '{key}': not a type Casekeeper's checkpoints contain"
        )


def decode_checkpoint_value(value: Any, *, allowed_types: Iterable[str]) -> Any:
    """Decode what ``encode_checkpoint_value`` encoded, admitting only the types above and
    ``allowed_types``. Raises ``WorkflowCheckpointException`` (naming a refused type as the framework
    does) when the data holds anything else, or is corrupt."""
    allowed = frozenset(allowed_types) | FRAMEWORK_CHECKPOINT_TYPES | framework._REGISTERED_CHECKPOINT_TYPE_KEYS
    return _decode(value, allowed)


def _decode(value: Any, allowed: frozenset[str]) -> Any:
    if isinstance(value, dict):
        if framework._PICKLE_MARKER in value and framework._TYPE_MARKER in value:
            obj = _unpickle(str(value[framework._PICKLE_MARKER]), allowed)
            framework._verify_type(obj, str(value[framework._TYPE_MARKER]))
            return obj
        return {k: _decode(v, allowed) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(item, allowed) for item in value]
    return value


def _unpickle(encoded: str, allowed: frozenset[str]) -> Any:
    try:
        pickled = base64.b64decode(encoded.encode("ascii"), validate=True)
        return _ExactUnpickler(pickled, allowed).load()
    except pickle.UnpicklingError as exc:
        refused = _REFUSED.findall(str(exc))
        if refused:
            _report(refused, hashlib.sha256(encoded.encode("ascii", "replace")).hexdigest())
        raise WorkflowCheckpointException(f"Failed to decode pickled checkpoint data: {exc}") from exc
    except Exception as exc:
        raise WorkflowCheckpointException(f"Failed to decode pickled checkpoint data: {exc}") from exc


def _report(refused: list[str], digest: str) -> None:
    logger.error("checkpoint data refused: it holds %s, outside the allow-list", ", ".join(refused))
    handler = _handler
    if handler is None:
        return
    try:
        handler(refused, digest)
    except Exception:  # the refusal stands whether or not it could be reported
        logger.exception("could not report a refused checkpoint type")
