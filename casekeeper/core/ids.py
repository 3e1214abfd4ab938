"""The one rule for identifiers that Casekeeper stores or routes on, whatever the backend.

Case ids become Cosmos DB document ids and partition keys and Service Bus session ids; delivery ids
and approval request ids become message ids and document ids; all of them appear in URL paths. The
strictest of those places decides what is allowed, so that an id accepted at the door can be stored,
queued and addressed everywhere, on SQLite as on Cosmos DB:

- a string of 1 to :data:`MAX_ID_LENGTH` characters (Service Bus caps session and message ids at 128);
- none of ``/ \\ ? #`` (Cosmos DB refuses them in ids; in a URL path they split or end the path);
- no control characters (they cannot travel in a header or a log line intact);
- no leading or trailing whitespace (two ids that look the same must be the same id);
- not ``.`` or ``..``: as a URL path segment they mean "this" and "the parent" and are resolved away
  before a request is routed, so the case's API URL and the approval page's links could not reach them.

:func:`id_problem` says what is wrong with a value, for a 400 that names the field; stores call
:func:`check_document_id`, which raises :class:`~casekeeper.core.errors.InvalidDocumentId`.
"""

from __future__ import annotations

import hashlib
import unicodedata

from casekeeper.core.errors import InvalidDocumentId

MAX_ID_LENGTH = 128
MAX_DOCUMENT_ID_LENGTH = 255
FORBIDDEN_CHARACTERS = frozenset("/\\?#")
DOT_SEGMENTS = frozenset({".", ".."})


def id_problem(value: object, *, max_length: int = MAX_ID_LENGTH) -> str | None:
    """What makes ``value`` unusable as an identifier, in words fit for an API error; ``None`` if it is fine."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if len(value) > max_length:
        return f"must be at most {max_length} characters"
    forbidden = sorted(FORBIDDEN_CHARACTERS.intersection(value))
    if forbidden:
        return "must not contain " + " ".join(forbidden)
    if any(unicodedata.category(ch) == "Cc" for ch in value):
        return "must not contain control characters"
    if value != value.strip():
        return "must not begin or end with whitespace"
    if value in DOT_SEGMENTS:
        return "must not be . or .. (a URL path resolves them away)"
    return None


def check_document_id(container: str, doc_id: object) -> str:
    """``doc_id`` if every backend can store it; raises ``InvalidDocumentId`` naming the problem otherwise.

    The same rule as :func:`id_problem`, with Cosmos DB's own length limit (255): ids Casekeeper derives
    itself (``effect_escalated:<key>``) may be longer than an identifier that came from outside."""
    problem = id_problem(doc_id, max_length=MAX_DOCUMENT_ID_LENGTH)
    if problem is not None:
        raise InvalidDocumentId(
            f"{container} document id {doc_id!r} {problem}", container=container, doc_id=str(doc_id)
        )
    assert isinstance(doc_id, str)
    return doc_id


def storable_id(text: str, *, prefix: str = "h-") -> str:
    """``text`` itself when it is a valid document id, else a stable digest of it.

    For records keyed by something that came from outside and may be malformed (the message id of an
    event being set aside): that record must be writable precisely when its input is not."""
    if id_problem(text, max_length=MAX_DOCUMENT_ID_LENGTH) is None:
        return text
    return prefix + hashlib.sha256(str(text).encode("utf-8", "surrogatepass")).hexdigest()
