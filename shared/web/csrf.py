"""Forms that change something carry a token, and must come from the app's own pages.

Two checks, both required on every state-changing POST from a page:

- **same origin**: the browser's ``Origin`` header (or, failing it, ``Referer``) must be the origin the
  request was sent to. A cross-site form post carries the attacker's origin; a request with neither
  header is refused (every current browser sends ``Origin`` on a form POST).
- **token**: ``<issued>.<hex>``, the hex being HMAC-SHA256, keyed by the app's secret, of who is signed in
  (their immutable id), what the form acts on (``approval:<case>:<request>``, ``ops:redrive:<message
  id>``) and when it was issued. Another site cannot read it from our page, a token minted for one
  person or one request does not work for another, and it expires :data:`MAX_AGE_SECONDS` after the
  page was rendered (a leaked token is not good forever). It needs no server state. Any of the
  configured secrets verifies it, so rotating ``WEBHOOK_SECRET`` does not break open pages.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

FIELD = "csrf"
_CONTEXT = b"casekeeper-page-form-v2"
MAX_AGE_SECONDS = 12 * 3600
"""How long a rendered form stays good: a working day with the page left open."""
_FUTURE_SKEW_SECONDS = 300


def _key(secret: str) -> bytes:
    # A key of its own, so a form token can never be replayed as a webhook signature, or the reverse.
    return hmac.new(secret.encode(), _CONTEXT, hashlib.sha256).digest()


def token(secrets: Sequence[str], principal: str, purpose: str, *, now: float) -> str:
    """The token for ``principal`` (an immutable id) acting on ``purpose``, issued at ``now``, with the
    newest secret."""
    if not secrets:
        raise ValueError("no secret to sign forms with")
    issued = int(now)
    return f"{issued}.{_mac(secrets[0], principal, purpose, issued)}"


def _mac(secret: str, principal: str, purpose: str, issued: int) -> str:
    message = f"{len(principal)}:{principal}|{len(purpose)}:{purpose}|{issued}".encode()
    return hmac.new(_key(secret), message, hashlib.sha256).hexdigest()


def valid(secrets: Sequence[str], principal: str, purpose: str, given: str | None, *, now: float) -> bool:
    """Whether ``given`` is the token of ``principal`` for ``purpose`` under any of ``secrets``, issued no
    more than :data:`MAX_AGE_SECONDS` before ``now``."""
    if not given:
        return False
    issued_text, _, mac = given.partition(".")
    if not (issued_text.isascii() and issued_text.isdigit()) or len(issued_text) > 12:
        return False
    issued = int(issued_text)
    if not now - MAX_AGE_SECONDS <= issued <= now + _FUTURE_SKEW_SECONDS:
        return False
    matched = False
    for secret in secrets:
        matched |= hmac.compare_digest(mac.encode(), _mac(secret, principal, purpose, issued).encode())
    return matched


def _origin(url: str) -> str | None:
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def same_origin_problem(headers: Mapping[str, str], request_url: str) -> str | None:
    """Why the request does not come from our own page, or ``None`` when it does. ``headers`` must be
    case-insensitive. The expected origin is the request's own: its URL's scheme and the host it was
    sent to (the URL's, ``Host``, and ``X-Forwarded-Proto``/``X-Forwarded-Host`` where a front end set them)."""
    expected = _origin(request_url)
    if expected is None:
        return "the request URL has no origin"
    schemes = {expected.split("://", 1)[0]}
    if headers.get("X-Forwarded-Proto"):  # a TLS-terminating front end: the browser saw this scheme
        schemes.add(headers["X-Forwarded-Proto"].split(",")[0].strip().lower())
    hosts = {expected.split("://", 1)[1]}
    for name in ("X-Forwarded-Host", "Host"):
        if headers.get(name):
            hosts.add(headers[name].split(",")[0].strip().lower())
    # The forwarded headers only widen the set to what a front end says the browser used; a cross-site
    # form cannot set them, and its Origin is the other site's, which is never in the set.
    allowed = {f"{scheme}://{host}" for scheme in schemes for host in hosts}
    origin = headers.get("Origin")
    if origin and origin != "null":
        return None if origin.lower() in allowed else f"the form was posted from another origin ({origin})"
    referer = headers.get("Referer")
    if referer:
        ref_origin = _origin(referer)
        return None if ref_origin in allowed else "the form was posted from another page's origin"
    return "the request says neither where it comes from (Origin) nor which page sent it (Referer)"
