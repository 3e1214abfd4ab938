"""Deterministic keys (rule R1).

A key is derived only from values that are stable across replays and duplicate runs: the case id,
the action and the case version the decision was made on. Never a per-attempt uuid, never a time.
The encoding is canonical JSON (sorted keys, fixed separators, UTF-8) hashed with SHA-256, so the
same decision computes the same key in every process and every release.

**These functions are pinned by golden tests** (``tests/unit/test_keys.py``). Changing the encoding
changes every key, which would let a retried decision call a supplier again. Add a new key space
with a new ``kind`` instead.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> bytes:
    """The one canonical encoding: sorted keys, no whitespace, UTF-8, no NaN or Infinity."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def _digest(kind: str, case_id: str, action: str, case_version: int, part: str | None = None) -> str:
    if not case_id:
        raise ValueError("case_id must be non-empty")
    if not action:
        raise ValueError("action must be non-empty")
    if isinstance(case_version, bool) or not isinstance(case_version, int) or case_version < 0:
        raise ValueError(f"case_version must be a non-negative int, got {case_version!r}")
    payload: dict[str, Any] = {"kind": kind, "caseId": case_id, "action": action, "caseVersion": case_version}
    if part is not None:
        if not isinstance(part, str) or not part:
            raise ValueError(f"part must be a non-empty string or None, got {part!r}")
        payload["part"] = part  # only when named: a key without a part is exactly the key of one effect
    return hashlib.sha256(canonical_json(payload)).hexdigest()


def effect_key(case_id: str, action: str, case_version: int, part: str | None = None) -> str:
    """The idempotency key of one external effect: 64 hex characters.

    ``part`` names one of several effects of one action in one decision (an order line): it joins the key.
    Without it the key is the one effect of (case, action, version). Forwarded downstream as the
    ``Idempotency-Key`` header.
    """
    return _digest("effect", case_id, action, case_version, part)


def args_digest(args: Any) -> str:
    """The digest of an effect's arguments recorded with its claim: SHA-256 of their canonical JSON. A run of
    the same key with arguments of another digest is refused (``ArgumentsMismatch``), never replayed."""
    return hashlib.sha256(canonical_json(args)).hexdigest()


def approval_request_id(case_id: str, action: str, case_version: int) -> str:
    """The id of the approval request for one decision (rule R6): the same decision asks once."""
    return "apr-" + _digest("approval", case_id, action, case_version)[:40]
