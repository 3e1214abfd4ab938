"""Who is signed in: the principal App Service Authentication (Easy Auth) puts in front of every request.

With Easy Auth on, the platform authenticates the browser with Microsoft Entra ID and passes the user to
the app as ``X-MS-CLIENT-PRINCIPAL``: base64 of ``{"auth_typ": ..., "name_typ": ..., "role_typ": ...,
"claims": [{"typ": ..., "val": ...}, ...]}``. The platform removes any such header a client sends, so
the app can trust it, **but only where the platform is in front**. Hence :func:`principal_from_headers`
ignores the header on an App Service / Functions site whose authentication is off
(``WEBSITE_SITE_NAME`` set, ``WEBSITE_AUTH_ENABLED`` not ``true``): there, anyone could send it. Off
Azure (the local host, tests) it is read; ``casekeeper dev`` removes what a client sent and injects its
own ``--as`` identity, marked with :data:`LOCAL_AUTH_TYPE` so the pages can say it is not a real login.

Roles are the app registration's app roles, as claims of type ``role_typ`` (Entra ID's is ``roles``).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
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
MAX_HEADER_BYTES = 16 * 1024


class PrincipalError(Exception):
    """The principal header is present but cannot be read (the 401's reason)."""


@dataclass(frozen=True)
class Principal:
    name: str
    roles: frozenset[str]
    auth_type: str

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
    return Principal(name=name, roles=roles, auth_type=auth_type)


def _first(claims: list[tuple[str, str]], types: Iterable[str]) -> str | None:
    for wanted in types:
        for typ, val in claims:
            if typ == wanted and val.strip():
                return val.strip()
    return None


def header_trusted(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``X-MS-CLIENT-PRINCIPAL`` can have come only from the platform (see the module doc)."""
    env = os.environ if env is None else env
    if not env.get("WEBSITE_SITE_NAME"):
        return True  # not on App Service: the local host or a test, which set the header themselves
    return env.get("WEBSITE_AUTH_ENABLED", "").strip().lower() == "true"


def principal_from_headers(headers: Mapping[str, str], env: Mapping[str, str] | None = None) -> Principal | None:
    """The signed-in principal, or ``None`` when nobody is. ``headers`` must be case-insensitive, as the
    Functions host's are. Raises :class:`PrincipalError` for a header that is there but unreadable."""
    encoded = headers.get(PRINCIPAL_HEADER)
    if not encoded or not header_trusted(env):
        return None
    return parse_principal(encoded)


def encode_principal(name: str, roles: Iterable[str], *, auth_type: str = LOCAL_AUTH_TYPE) -> str:
    """An ``X-MS-CLIENT-PRINCIPAL`` value, shaped as Easy Auth's: what ``casekeeper dev --as`` injects."""
    body = {
        "auth_typ": auth_type,
        "name_typ": "name",
        "role_typ": "roles",
        "claims": [{"typ": "name", "val": name}, *({"typ": "roles", "val": role} for role in roles)],
    }
    return base64.b64encode(json.dumps(body).encode()).decode()


def role_name(text: str) -> str:
    """``approver`` -> ``Casekeeper.Approver``; a full role name is kept as it is."""
    return ROLE_ALIASES.get(text.strip().lower(), text.strip())
