"""Reading App Service Authentication's principal, and the pages' form tokens and origin check."""

from __future__ import annotations

import base64
import json

import pytest

from shared.web import csrf
from shared.web.identity import (
    APPROVER_ROLE,
    OPERATOR_ROLE,
    PrincipalError,
    encode_principal,
    parse_principal,
    principal_from_headers,
    role_name,
)


def encoded(body: object) -> str:
    return base64.b64encode(json.dumps(body).encode()).decode()


# As Easy Auth sends it for Microsoft Entra ID: long claim type URIs, app roles under "roles".
ENTRA = {
    "auth_typ": "aad",
    "name_typ": "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name",
    "role_typ": "http://schemas.microsoft.com/ws/2008/06/identity/claims/role",
    "claims": [
        {"typ": "aud", "val": "00000000-0000-0000-0000-000000000001"},
        {"typ": "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name", "val": "ana@contoso.com"},
        {"typ": "roles", "val": "Casekeeper.Approver"},
        {"typ": "http://schemas.microsoft.com/ws/2008/06/identity/claims/role", "val": "Casekeeper.Operator"},
        {"typ": "groups", "val": "Casekeeper.Admin"},
    ],
}


def test_an_entra_principal_gives_its_name_and_app_roles() -> None:
    principal = parse_principal(encoded(ENTRA))
    assert principal.name == "ana@contoso.com"
    assert principal.roles == {APPROVER_ROLE, OPERATOR_ROLE}  # a group claim is not a role
    assert principal.auth_type == "aad" and not principal.local


def test_the_name_falls_back_to_the_usual_claims_and_unpadded_base64_is_read() -> None:
    body = {"auth_typ": "aad", "claims": [{"typ": "preferred_username", "val": "olga@contoso.com"}]}
    value = encoded(body).rstrip("=")
    principal = parse_principal(value)
    assert (principal.name, principal.roles) == ("olga@contoso.com", frozenset())


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("not base64!", "not base64-encoded JSON"),
        (base64.b64encode(b"[1, 2]").decode(), "not a principal"),
        (encoded({"claims": "x"}), "not a principal"),
        (encoded({"auth_typ": "aad", "claims": [{"typ": "roles", "val": APPROVER_ROLE}]}), "names nobody"),
        ("A" * 20000, "too large"),
    ],
)
def test_an_unreadable_principal_is_refused_with_the_reason(value: str, why: str) -> None:
    with pytest.raises(PrincipalError, match=why):
        parse_principal(value)


def test_the_local_identity_round_trips_and_is_marked_local() -> None:
    principal = parse_principal(encode_principal("dev", [role_name("approver"), role_name("Casekeeper.Operator")]))
    assert principal.name == "dev" and principal.local
    assert principal.roles == {APPROVER_ROLE, OPERATOR_ROLE}


def test_the_header_is_ignored_on_an_app_service_site_without_authentication() -> None:
    headers = {"X-MS-CLIENT-PRINCIPAL": encoded(ENTRA)}
    assert principal_from_headers(headers, env={}) is not None  # local host, tests
    assert principal_from_headers(headers, env={"WEBSITE_SITE_NAME": "ck", "WEBSITE_AUTH_ENABLED": "True"}) is not None
    # Easy Auth off: anyone could have sent the header, so nobody is signed in.
    assert principal_from_headers(headers, env={"WEBSITE_SITE_NAME": "ck"}) is None
    assert principal_from_headers({}, env={}) is None


SECRETS = ("new-secret", "old-secret")


def test_a_token_is_bound_to_the_person_and_the_purpose() -> None:
    token = csrf.token(SECRETS, "ana", "approval:C-1:apr-1")
    assert csrf.valid(SECRETS, "ana", "approval:C-1:apr-1", token)
    assert not csrf.valid(SECRETS, "bob", "approval:C-1:apr-1", token)
    assert not csrf.valid(SECRETS, "ana", "approval:C-1:apr-2", token)
    assert not csrf.valid(SECRETS, "ana", "approval:C-1:apr-1", None)
    assert not csrf.valid(SECRETS, "ana", "approval:C-1:apr-1", "")
    # Name and purpose cannot be shifted into each other.
    assert csrf.token(SECRETS, "ana|x", "y") != csrf.token(SECRETS, "ana", "x|y")


def test_a_token_made_before_a_rotation_still_verifies() -> None:
    old = csrf.token(("old-secret",), "ana", "redrive")
    assert csrf.valid(SECRETS, "ana", "redrive", old)
    assert not csrf.valid(("other",), "ana", "redrive", old)


def test_a_form_token_is_not_the_webhook_signature_of_the_same_text() -> None:
    import hashlib
    import hmac

    plain = hmac.new(b"new-secret", b"3:ana|redrive", hashlib.sha256).hexdigest()
    assert csrf.token(SECRETS, "ana", "redrive") != plain


@pytest.mark.parametrize(
    ("headers", "problem"),
    [
        ({"Origin": "http://127.0.0.1:7071", "Host": "127.0.0.1:7071"}, None),
        ({"Referer": "http://127.0.0.1:7071/api/approvals", "Host": "127.0.0.1:7071"}, None),
        ({"Origin": "http://evil.example", "Host": "127.0.0.1:7071"}, "another origin"),
        ({"Origin": "https://127.0.0.1:7071", "Host": "127.0.0.1:7071"}, "another origin"),
        ({"Referer": "http://evil.example/x", "Host": "127.0.0.1:7071"}, "another page's origin"),
        ({"Host": "127.0.0.1:7071"}, "neither"),
        ({"Origin": "null", "Host": "127.0.0.1:7071"}, "neither"),
        # Behind a TLS-terminating front end the app may see http while the browser used https.
        ({"Origin": "https://127.0.0.1:7071", "Host": "127.0.0.1:7071", "X-Forwarded-Proto": "https"}, None),
        ({"Origin": "https://evil.example", "Host": "127.0.0.1:7071", "X-Forwarded-Proto": "https"}, "another"),
    ],
)
def test_same_origin(headers: dict[str, str], problem: str | None) -> None:
    found = csrf.same_origin_problem(headers, "http://127.0.0.1:7071/api/approvals/C-1/apr-1")
    assert found is None if problem is None else (found is not None and problem in found)
