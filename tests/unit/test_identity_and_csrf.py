"""Reading App Service Authentication's principal, and the pages' form tokens and origin check."""

from __future__ import annotations

import base64
import json

import pytest

from shared.web import csrf
from shared.web.identity import (
    APPROVER_ROLE,
    OPERATOR_ROLE,
    STAND_IN_HEADER,
    PrincipalError,
    encode_principal,
    parse_principal,
    principal_from_headers,
    role_name,
    stand_in_token,
)


def encoded(body: object) -> str:
    return base64.b64encode(json.dumps(body).encode()).decode()


ANA_OID = "5f0c7a1e-1b2d-4c3e-9f8a-0a1b2c3d4e5f"
# As Easy Auth sends it for Microsoft Entra ID: long claim type URIs, app roles under "roles".
ENTRA = {
    "auth_typ": "aad",
    "name_typ": "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name",
    "role_typ": "http://schemas.microsoft.com/ws/2008/06/identity/claims/role",
    "claims": [
        {"typ": "aud", "val": "00000000-0000-0000-0000-000000000001"},
        {"typ": "http://schemas.microsoft.com/identity/claims/objectidentifier", "val": ANA_OID},
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
    # Known by the immutable object id; the display name is only for reading.
    assert principal.id == f"oid:{ANA_OID}"
    assert principal.recorded == f"ana@contoso.com <oid:{ANA_OID}>"


def test_a_principal_without_an_object_id_is_refused_unless_it_is_the_local_stand_in() -> None:
    body = {"auth_typ": "aad", "claims": [{"typ": "name", "val": "ana@contoso.com"}]}
    with pytest.raises(PrincipalError, match="no object id"):
        parse_principal(encoded(body))
    local = parse_principal(encode_principal("dev", []))
    assert local.id == "dev:dev" and local.recorded == "dev <dev:dev>"


def test_the_name_falls_back_to_the_usual_claims_and_unpadded_base64_is_read() -> None:
    body = {
        "auth_typ": "aad",
        "claims": [{"typ": "preferred_username", "val": "olga@contoso.com"}, {"typ": "oid", "val": "o-1"}],
    }
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


EASY_AUTH = {"EASY_AUTH_ENABLED": "true", "WEBSITE_SITE_NAME": "ck", "WEBSITE_AUTH_ENABLED": "True"}


def test_the_header_is_trusted_only_where_easy_auth_is_known_to_be_in_front() -> None:
    headers = {"X-MS-CLIENT-PRINCIPAL": encoded(ENTRA)}
    assert principal_from_headers(headers, env=EASY_AUTH) is not None
    # func start, a container, any host outside App Service: anyone could have sent it.
    assert principal_from_headers(headers, env={}) is None
    # Each of the three missing is enough: the app's own setting, the site, the platform's auth flag.
    for name in EASY_AUTH:
        assert principal_from_headers(headers, env={k: v for k, v in EASY_AUTH.items() if k != name}) is None
    assert principal_from_headers({}, env=EASY_AUTH) is None


def test_the_dev_front_ends_stand_in_token_makes_the_header_trusted_and_a_guess_does_not() -> None:
    principal = encode_principal("dev", [APPROVER_ROLE])
    marked = {"X-MS-CLIENT-PRINCIPAL": principal, STAND_IN_HEADER: stand_in_token()}
    assert principal_from_headers(marked, env={}) is not None
    guessed = {"X-MS-CLIENT-PRINCIPAL": principal, STAND_IN_HEADER: "0" * 32}
    assert principal_from_headers(guessed, env={}) is None


SECRETS = ("new-secret", "old-secret")


NOW = 1_800_000_000.0


def test_a_token_is_bound_to_the_person_and_the_purpose() -> None:
    token = csrf.token(SECRETS, "ana", "approval:C-1:apr-1", now=NOW)
    assert csrf.valid(SECRETS, "ana", "approval:C-1:apr-1", token, now=NOW)
    assert not csrf.valid(SECRETS, "bob", "approval:C-1:apr-1", token, now=NOW)
    assert not csrf.valid(SECRETS, "ana", "approval:C-1:apr-2", token, now=NOW)
    assert not csrf.valid(SECRETS, "ana", "approval:C-1:apr-1", None, now=NOW)
    assert not csrf.valid(SECRETS, "ana", "approval:C-1:apr-1", "", now=NOW)
    # Name and purpose cannot be shifted into each other.
    assert csrf.token(SECRETS, "ana|x", "y", now=NOW) != csrf.token(SECRETS, "ana", "x|y", now=NOW)


def test_a_token_expires_and_its_issue_time_cannot_be_moved() -> None:
    token = csrf.token(SECRETS, "ana", "ops:redrive:m-1", now=NOW)
    assert csrf.valid(SECRETS, "ana", "ops:redrive:m-1", token, now=NOW + csrf.MAX_AGE_SECONDS)
    assert not csrf.valid(SECRETS, "ana", "ops:redrive:m-1", token, now=NOW + csrf.MAX_AGE_SECONDS + 1)
    # A later issue time on the same MAC does not verify: the time is signed.
    moved = f"{int(NOW) + 3600}.{token.split('.', 1)[1]}"
    assert not csrf.valid(SECRETS, "ana", "ops:redrive:m-1", moved, now=NOW + csrf.MAX_AGE_SECONDS + 1)
    assert not csrf.valid(SECRETS, "ana", "ops:redrive:m-1", "²." + token.split(".", 1)[1], now=NOW)


def test_a_token_made_before_a_rotation_still_verifies() -> None:
    old = csrf.token(("old-secret",), "ana", "redrive", now=NOW)
    assert csrf.valid(SECRETS, "ana", "redrive", old, now=NOW)
    assert not csrf.valid(("other",), "ana", "redrive", old, now=NOW)


def test_a_form_token_is_not_the_webhook_signature_of_the_same_text() -> None:
    import hashlib
    import hmac

    plain = hmac.new(b"new-secret", b"3:ana|redrive", hashlib.sha256).hexdigest()
    assert csrf.token(SECRETS, "ana", "redrive", now=NOW).split(".", 1)[1] != plain


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
