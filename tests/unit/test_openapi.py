"""The OpenAPI description: kept in the repository as generated from the ingress's own models, valid
OpenAPI 3.1 by a maintained validator, and saying what the ingress does for every public event type."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import validate

from shared.domain import events as ev
from shared.errors import InvalidEvent
from shared.web import openapi

SPEC: dict[str, Any] = json.loads(openapi.SPEC_FILE.read_text())


def test_the_file_is_what_the_models_generate() -> None:
    assert openapi.SPEC_FILE.read_text() == openapi.text(), (
        "shared/web/openapi.json is stale: .venv/bin/python -m shared.web.openapi > shared/web/openapi.json"
    )


def test_it_is_valid_openapi_3_1() -> None:
    validate(SPEC)  # raises with the path of the first problem
    assert SPEC["openapi"].startswith("3.1")


def test_every_public_event_type_and_field_is_described() -> None:
    mapping = SPEC["components"]["schemas"]["Event"]["discriminator"]["mapping"]
    assert set(mapping) == set(ev.PUBLIC_TYPES)
    for event_type in ev.PUBLIC_TYPES:
        schema = SPEC["components"]["schemas"][mapping[event_type].rsplit("/", 1)[1]]
        described = schema["properties"]["data"]
        assert set(described["properties"]) == set(ev.SCHEMAS[event_type]) | set(ev.OPTIONAL.get(event_type, {}))
        assert set(described.get("required", [])) == set(ev.SCHEMAS[event_type])


def _validator(name: str) -> OAS31Validator:
    schema = {"$ref": f"#/components/schemas/{name}", "components": SPEC["components"]}
    return OAS31Validator(schema)


def accepted_by_ingress(event: dict[str, Any]) -> bool:
    try:
        ev.parse_event(event, allowed_types=ev.PUBLIC_TYPES)
    except InvalidEvent:
        return False
    return True


VALID = {
    ev.INVOICE_RECEIVED: {
        "invoiceId": "INV-1",
        "supplierId": "SUP-1",
        "poNumber": "PO-1",
        "invoiceAmount": "1250.00",
        "poAmount": "1000.00",
        "currency": "EUR",
    },
    ev.PO_UPDATED: {"poAmount": "1200.00"},
    ev.CREDIT_NOTE_ISSUED: {"creditNoteId": "CN-1", "amount": "250.00"},
    ev.CASE_INVESTIGATE: {},
}
# Values that probe each rule's edges: ids (slashes, padding, control characters, length), amounts
# (numbers, exponents, three decimals, signs, zero), currencies, and wrong types.
PROBES = st.sampled_from(
    [
        "INV-1", "INV/1", " INV-1", "INV-1 ", "IN\tV", "a" * 128, "a" * 129, "", "x?y", "x#y", "x\\y", "INV 1",
        "1250.00", "1250", "0", "0.00", "-0", "-1.00", "1.234", "1e3", "+1", "1_000", " 1", "0.01",
        "EUR", "eur", "EURO", 3400, 3400.5, None, True, [], {},
    ]
)  # fmt: skip


@given(
    event_type=st.sampled_from(ev.PUBLIC_TYPES),
    name=st.text(max_size=3)
    | st.sampled_from(
        ["invoiceId", "supplierId", "poNumber", "invoiceAmount", "poAmount", "currency", "creditNoteId", "amount"]
    ),
    value=PROBES,
    case_id=PROBES,
)
def test_the_description_accepts_exactly_what_the_ingress_accepts(
    event_type: str, name: str, value: object, case_id: object
) -> None:
    event = {"type": event_type, "caseId": case_id, "data": {**VALID[event_type], name: value}}
    described = _validator("Event").is_valid(event)
    assert described == accepted_by_ingress(event), (event, described)


@pytest.mark.parametrize("event_type", ev.PUBLIC_TYPES)
def test_a_valid_event_of_each_type_is_described_as_valid(event_type: str) -> None:
    event = {"type": event_type, "caseId": "C-1", "data": VALID[event_type]}
    assert accepted_by_ingress(event) and _validator("Event").is_valid(event)
