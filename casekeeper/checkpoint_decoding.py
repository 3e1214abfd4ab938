"""How a checkpoint is stored and loaded back: as JSON text, decoded admitting only the types it may hold.

**The stored form.** :func:`encode_checkpoint` turns a checkpoint into the framework's JSON-safe encoding
(plain JSON for dicts, lists and primitives, base64 pickles for everything else) written out as one JSON
*text*, a string. A store keeps a string as it is, while Cosmos DB (and its test server) keeps a JSON number
as an IEEE double: stored as numbers, 2^60 + 1 would come back as 1152921504606847000 and ``2.0`` as ``2``.
As text every number comes back exactly, on every backend, as Agent Framework's own storages give them
back. NaN and infinity, which JSON has no numbers for, are refused with the path where they sit.

**Decoding.** Agent Framework's restricted unpickler admits, besides the types it is given, every top-level
class of ``agent_framework.*`` and ``openai.types.*``. A value planted in a stored checkpoint (write access
to the store needed) can therefore construct any of those classes with arguments of its choosing when the
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

This is the one module of Casekeeper that uses names Agent Framework 1.23 does not export: its encoder, its
unpickler and the key sets the unpickler checks (``agent_framework._workflows._checkpoint_encoding``), and
``MessageType`` (``agent_framework._workflows._runner_context``). tests/unit/test_private_names.py keeps
them here.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import pickle
import re
from collections.abc import Callable, Iterable
from typing import Any, Final

from agent_framework import WorkflowCheckpoint, WorkflowEvent, WorkflowEventSource, WorkflowMessage

# Not exported by Agent Framework 1.23 (see the module docstring): used here and nowhere else.
from agent_framework._workflows._checkpoint_encoding import (
    _BLOCKED_FRAMEWORK_GLOBAL_KEYS,
    _BUILTIN_ALLOWED_TYPE_KEYS,
    _GETATTR_GLOBAL_KEYS,
    _PICKLE_MARKER,
    _REGISTERED_CHECKPOINT_TYPE_KEYS,
    _TYPE_MARKER,
    _RestrictedUnpickler,
    _verify_type,
    encode_checkpoint_value,
)
from agent_framework._workflows._runner_context import MessageType
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


def encode_checkpoint(checkpoint: WorkflowCheckpoint) -> str:
    """``checkpoint`` as the JSON text a store keeps (see the module docstring).

    Raises ``ValueError`` naming the path of every NaN or infinity (JSON cannot carry them), and whatever the
    framework's encoding raises for a value it cannot pickle."""
    encoded = encode_checkpoint_value(checkpoint.to_dict())
    try:
        return json.dumps(encoded, separators=(",", ":"), allow_nan=False)
    except ValueError:
        paths = ", ".join(_non_finite_numbers(encoded)) or "a number"
        raise ValueError(f"{paths}: JSON has no such number (keep it as a string or Decimal)") from None


def decode_checkpoint(text: object, *, allowed_types: Iterable[str]) -> WorkflowCheckpoint:
    """The checkpoint :func:`encode_checkpoint` wrote as ``text``, admitting only the types above and
    ``allowed_types``. Raises ``WorkflowCheckpointException`` when ``text`` is not a checkpoint's JSON text,
    or holds a type outside them (named as the framework names it)."""
    decoded = decode_checkpoint_value(_parsed(text), allowed_types=allowed_types)
    if not isinstance(decoded, dict):
        raise WorkflowCheckpointException(f"stored checkpoint data is a {type(decoded).__name__}, not an object")
    try:
        return WorkflowCheckpoint.from_dict(decoded)
    except Exception as exc:
        raise WorkflowCheckpointException(f"stored checkpoint data is not a checkpoint: {exc!r}") from exc


def stored_value(text: object) -> Any:
    """The framework's encoding inside a checkpoint's JSON text, parsed but not decoded (nothing unpickled).
    Raises ``WorkflowCheckpointException`` when ``text`` is not JSON text."""
    return _parsed(text)


def is_pickled(value: object) -> bool:
    """Whether ``value`` (part of :func:`stored_value`) is the framework's envelope of a pickled value."""
    return isinstance(value, dict) and _PICKLE_MARKER in value and _TYPE_MARKER in value


def _non_finite_numbers(value: Any, path: str = "$") -> list[str]:
    """Where ``value`` (JSON-shaped) holds NaN or an infinity, as ``path = value``."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{path} = {value!r}"]
    if isinstance(value, dict):
        return [found for k, v in value.items() for found in _non_finite_numbers(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [found for i, v in enumerate(value) for found in _non_finite_numbers(v, f"{path}[{i}]")]
    return []


def _parsed(text: object) -> Any:
    if not isinstance(text, str):
        raise WorkflowCheckpointException(f"stored checkpoint data is not JSON text but {type(text).__name__}")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise WorkflowCheckpointException(f"stored checkpoint data is not valid JSON: {exc}") from exc


class _ExactUnpickler(_RestrictedUnpickler):
    """The framework's unpickler, admitting exactly the given keys: no module-prefix admission."""

    def _is_allowed_type(self, resolved: type) -> bool:
        key = _key(resolved)
        return key in _BUILTIN_ALLOWED_TYPE_KEYS or key in self._allowed_types

    def find_class(self, module: str, name: str) -> Any:
        key = f"{module}:{name}"
        if key in _GETATTR_GLOBAL_KEYS or key in _BUILTIN_ALLOWED_TYPE_KEYS:
            return super().find_class(module, name)
        if key in self._allowed_types and key not in _BLOCKED_FRAMEWORK_GLOBAL_KEYS:
            return super().find_class(module, name)  # the parent admits only a class under this key
        raise pickle.UnpicklingError(
            f"Checkpoint deserialization blocked for type '{key}': not a type Casekeeper's checkpoints contain"
        )


def decode_checkpoint_value(value: Any, *, allowed_types: Iterable[str]) -> Any:
    """Decode a value of the framework's encoding (part of :func:`stored_value`), admitting only the types above and
    ``allowed_types``. Raises ``WorkflowCheckpointException`` (naming a refused type as the framework
    does) when the data holds anything else, or is corrupt."""
    allowed = frozenset(allowed_types) | FRAMEWORK_CHECKPOINT_TYPES | _REGISTERED_CHECKPOINT_TYPE_KEYS
    return _decode(value, allowed)


def _decode(value: Any, allowed: frozenset[str]) -> Any:
    if isinstance(value, dict):
        if is_pickled(value):
            obj = _unpickle(str(value[_PICKLE_MARKER]), allowed)
            _verify_type(obj, str(value[_TYPE_MARKER]))
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
