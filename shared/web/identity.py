"""Who is signed in: the principal App Service Authentication (Easy Auth) puts in front of every request.

With Easy Auth on, the platform authenticates the browser with Microsoft Entra ID and passes the user to
the app as ``X-MS-CLIENT-PRINCIPAL``: base64 of ``{"auth_typ": ..., "name_typ": ..., "role_typ": ...,
"claims": [{"typ": ..., "val": ...}, ...]}``. The platform removes any such header a client sends, so
the app can trust it, **but only where the platform is in front**. Anywhere else (``func start``, a
container, a host outside App Service) anyone could send it and get every role. So
:func:`principal_from_headers` reads the header only where Easy Auth is known to be on
(:func:`easy_auth_on`: the setting ``EASY_AUTH_ENABLED``, which ``infra/`` sets when it configures
authentication, and App Service's own markers ``WEBSITE_SITE_NAME`` and ``WEBSITE_AUTH_ENABLED``), or where
``casekeeper dev`` stands in for it: its HTTP front end removes what a client sent, injects its own
``--as`` identity (marked with :data:`LOCAL_AUTH_TYPE` so the pages can say it is not a real login) and
proves the request passed through it with a random per-process token (:func:`stand_in_token`).

People are identified by their immutable Entra object id (claim ``oid``), never by a display name, which
can change or repeat: :attr:`Principal.recorded` is what every state change records (the display name
first, for reading). A non-local principal without an object id is refused.

Roles are the app registration's app roles, as claims of type ``role_typ`` (Entra ID's is ``roles``).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

PRINCIPAL_HEADER = "X-MS-CLIENT-PRINCIPAL"
APPROVER_ROLE = "Casekeeper.Approver"
OPERATOR_ROLE = "Casekeeper.Operator"
ROLE_ALIASES = {"approver": APPROVER_ROLE, "operator": OPERATOR_ROLE}
"""``casekeeper dev --role approver`` means the app role ``Casekeeper.Approver``."""
LOCAL_AUTH_TYPE = "casekeeper-dev"
"""``auth_typ`` of the identity ``casekeeper dev --as`` injects."""

_ROLE_CLAIMS = ("roles", "http://schemas.microsoft.com/ws/2008/06/identity/claims/role")
_NAME_CLAIMS = (
    "preferred_username",
    "name",
    "email",
    "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/emailaddress",
    "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name",
)
_OBJECT_ID_CLAIMS = ("http://schemas.microsoft.com/identity/claims/objectidentifier", "oid")
MAX_HEADER_BYTES = 16 * 1024
EASY_AUTH_SETTING = "EASY_AUTH_ENABLED"
"""Set to ``true`` by ``infra/`` when it puts App Service Authentication in front of the app."""
STAND_IN_HEADER = "X-Casekeeper-Dev-Stand-In"
"""Carries :func:`stand_in_token` on requests the ``casekeeper dev`` front end forwarded."""
_STAND_IN_TOKEN = secrets.token_hex(16)


class PrincipalError(Exception):
    """The principal header is present but cannot be read (the 401's reason)."""


@dataclass(frozen=True)
class Principal:
    name: str
    """The display name: for reading only, never to decide who someone is."""
    roles: frozenset[str]
    auth_type: str
    object_id: str = ""
    """The Entra object id (empty only for the local stand-in, which has none)."""

    @property
    def id(self) -> str:
        """Who this is, immutably: ``oid:<object id>``, or ``dev:<name>`` for ``casekeeper dev --as``."""
        return f"oid:{self.object_id}" if self.object_id else f"dev:{self.name}"

    @property
    def recorded(self) -> str:
        """What a state change records as its author: ``Display Name <oid:...>``."""
        return f"{self.name} <{self.id}>"

    @property
    def local(self) -> bool:
        """Injected by ``casekeeper dev --as``: a stand-in, not a login."""
        return self.auth_type == LOCAL_AUTH_TYPE

    def has(self, role: str) -> bool:
        return role in self.roles


def parse_principal(encoded: str) -> Principal:
    """Decode an ``X-MS-CLIENT-PRINCIPAL`` value. Raises :class:`PrincipalError` when it is not one, or
    names nobody."""
    if len(encoded) > MAX_HEADER_BYTES:
        raise PrincipalError(f"{PRINCIPAL_HEADER} is too large")
    try:
        padded = encoded.strip() + "=" * (-len(encoded.strip()) % 4)
        raw = json.loads(base64.b64decode(padded, validate=True).decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise PrincipalError(f"{PRINCIPAL_HEADER} is not base64-encoded JSON") from exc
    if not isinstance(raw, Mapping) or not isinstance(raw.get("claims", []), list):
        raise PrincipalError(f"{PRINCIPAL_HEADER} is not a principal (expected an object with claims)")
    claims = [
        (str(c["typ"]), str(c["val"]))
        for c in raw.get("claims", [])
        if isinstance(c, Mapping) and isinstance(c.get("typ"), str) and isinstance(c.get("val"), str)
    ]
    name_type = raw.get("name_typ") if isinstance(raw.get("name_typ"), str) else None
    role_type = raw.get("role_typ") if isinstance(raw.get("role_typ"), str) else None
    name = _first(claims, ((name_type,) if name_type else ()) + _NAME_CLAIMS)
    if not name:
        raise PrincipalError(f"{PRINCIPAL_HEADER} names nobody (no name claim)")
    role_types = {*_ROLE_CLAIMS, *((role_type,) if role_type else ())}
    roles = frozenset(val for typ, val in claims if typ in role_types and val)
    auth_type = str(raw.get("auth_typ") or "")
    object_id = _first(claims, _OBJECT_ID_CLAIMS) or ""
    if not object_id and auth_type != LOCAL_AUTH_TYPE:
        # A display name can change or be shared; a state change must name someone who stays the same.
        raise PrincipalError(f"{PRINCIPAL_HEADER} has no object id (oid) claim: the person cannot be identified")
    return Principal(name=name, roles=roles, auth_type=auth_type, object_id=object_id)


def _first(claims: list[tuple[str, str]], types: Iterable[str]) -> str | None:
    for wanted in types:
        for typ, val in claims:
            if typ == wanted and val.strip():
                return val.strip()
    return None


def _true(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() == "true"


def easy_auth_on(env: Mapping[str, str] | None = None) -> bool:
    """Whether App Service Authentication is known to be in front: the app's own setting says so and the
    platform's markers agree. Any one missing (``func start``, a container, a site whose authentication was
    turned off) and the header is not trusted."""
    env = os.environ if env is None else env
    return _true(env, EASY_AUTH_SETTING) and bool(env.get("WEBSITE_SITE_NAME")) and _true(env, "WEBSITE_AUTH_ENABLED")


def stand_in_token() -> str:
    """The random token with which this process's ``casekeeper dev`` front end marks what it forwarded."""
    return _STAND_IN_TOKEN


def header_trusted(headers: Mapping[str, str], env: Mapping[str, str] | None = None) -> bool:
    """Whether ``X-MS-CLIENT-PRINCIPAL`` can have come only from the platform or from ``casekeeper dev``
    (see the module doc)."""
    given = headers.get(STAND_IN_HEADER)
    if given and hmac.compare_digest(given.encode(), _STAND_IN_TOKEN.encode()):
        return True
    return easy_auth_on(env)


def principal_from_headers(headers: Mapping[str, str], env: Mapping[str, str] | None = None) -> Principal | None:
    """The signed-in principal, or ``None`` when nobody is (or the header cannot be trusted here).
    ``headers`` must be case-insensitive, as the Functions host's are. Raises :class:`PrincipalError` for a
    trusted header that is there but unreadable."""
    encoded = headers.get(PRINCIPAL_HEADER)
    if not encoded or not header_trusted(headers, env):
        return None
    return parse_principal(encoded)


def encode_principal(
    name: str, roles: Iterable[str], *, auth_type: str = LOCAL_AUTH_TYPE, object_id: str | None = None
) -> str:
    """An ``X-MS-CLIENT-PRINCIPAL`` value, shaped as Easy Auth's: what ``casekeeper dev --as`` injects
    (``object_id``: the ``oid`` claim Entra ID sends)."""
    claims = [{"typ": "name", "val": name}, *({"typ": "roles", "val": role} for role in roles)]
    if object_id:
        claims.append({"typ": "http://schemas.microsoft.com/identity/claims/objectidentifier", "val": object_id})
    body = {"auth_typ": auth_type, "name_typ": "name", "role_typ": "roles", "claims": claims}
    return base64.b64encode(json.dumps(body).encode()).decode()


def role_name(text: str) -> str:
    """``approver`` -> ``Casekeeper.Approver``; a full role name is kept as it is."""
    return ROLE_ALIASES.get(text.strip().lower(), text.strip())
