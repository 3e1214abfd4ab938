"""The OpenAPI 3.1 description of the machine API, generated from the models the ingress validates with.

The event bodies come from :data:`shared.domain.events.SCHEMAS` (each field's check mapped to a JSON
Schema), the statuses from :class:`~shared.domain.invoice.Status` and
:class:`~casekeeper.core.ledger.EffectStatus`, the limits from the ingress and the id rule. The generated
document is kept in the repository as ``shared/web/openapi.json`` (deployed with the app, which serves it
at ``GET /api/openapi.json``); a test checks that the file is what this module generates, validates it
with ``openapi-spec-validator``, and sends every example in it to a real local host. Regenerate it with::

    .venv/bin/python -m shared.web.openapi > shared/web/openapi.json

Each request example carries two extensions the test reads: ``x-status``, the status it is answered with,
and ``x-path``, the path parameters it is sent with. Examples run in order: the first creates the case
INV-2002 that waits for approval on v2, which the later examples answer and read.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from casekeeper import EffectStatus, approval_request_id
from casekeeper.stores import MAX_ID_LENGTH
from shared.domain import events as ev
from shared.domain.invoice import Status
from shared.handlers.door import RETRY_AFTER_SECONDS
from shared.handlers.ingress import DELIVERY_HEADER, MAX_BODY_BYTES, SIGNATURE_HEADER, TOLERANCE_SECONDS

SPEC_FILE = Path(__file__).with_name("openapi.json")
EXAMPLE_CASE = "INV-2002"
EXAMPLE_REQUEST = approval_request_id(EXAMPLE_CASE, "request_credit_note", 2)

_NOT_ID = r"\s/\\?#\u0000-\u001f\u007f-\u009f"
_NOT_ID_INNER = r"/\\?#\u0000-\u001f\u007f-\u009f"
ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_ID_LENGTH,
    "pattern": f"^(?!\\.{{1,2}}$)[^{_NOT_ID}](?:[^{_NOT_ID_INNER}]*[^{_NOT_ID}])?$",
    "description": "1-128 characters, no / \\ ? # nor control characters, no leading or trailing whitespace, "
    "not . or .. (the same rule on every backend)",
    "examples": ["INV-2026-0042"],
}
AMOUNT = {
    "type": "string",
    "pattern": r"^-?0+(?:\.0{1,2})?$|^0*[0-9]{1,15}(?:\.[0-9]{1,2})?$",
    "description": "a decimal string with at most two decimals and at most 15 digits before the point, never a "
    "JSON number; not negative",
    "examples": ["1250.40"],
}
POSITIVE_AMOUNT = {
    **AMOUNT,
    "pattern": r"^(?=[0-9.]*[1-9])0*[0-9]{1,15}(?:\.[0-9]{1,2})?$",
    "description": "as Amount, above 0",
}
CURRENCY = {"type": "string", "pattern": "^[A-Z]{3}$", "description": "an ISO 4217 code", "examples": ["EUR"]}
TEXT = {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"\S"}

# Each check of the event model, by name, and the JSON Schema that says the same.
CHECKS: dict[str, dict[str, Any]] = {
    "_identifier": {"$ref": "#/components/schemas/Id"},
    "_amount.<locals>.check": {"$ref": "#/components/schemas/Amount"},
    "_currency": {"$ref": "#/components/schemas/Currency"},
    "_text": {"$ref": "#/components/schemas/Text"},
    "_decision": {"type": "string", "enum": ["approve", "reject"]},
    "_version": {"type": "integer", "minimum": 1},
    "_timestamp": {"type": "number", "minimum": 0},
    "occurred_at_problem": {
        "type": "string",
        "format": "date-time",
        "pattern": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
        r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2})$",
        "description": "when the fact became true in the sender's system: RFC 3339 with an offset; orders reports "
        "of the same fact (docs/design.md#fact-order)",
        "examples": ["2026-12-03T10:15:00+01:00"],
    },
}


def _field_schema(name: str, check: Any) -> dict[str, Any]:
    qualname = check.__qualname__
    if qualname == "_amount.<locals>.check" and check.__closure__ and check.__closure__[0].cell_contents is True:
        return {"$ref": "#/components/schemas/PositiveAmount"}
    try:
        return dict(CHECKS[qualname])
    except KeyError:
        raise LookupError(f"no JSON Schema for the check {qualname} of field {name}") from None


def event_schema(event_type: str) -> dict[str, Any]:
    """The JSON Schema of one public event type, from the ingress's own field checks: the required fields of
    ``SCHEMAS`` and the optional ones of ``OPTIONAL``."""
    fields = ev.SCHEMAS[event_type]
    optional = ev.OPTIONAL.get(event_type, {})
    data: dict[str, Any] = {
        "type": "object",
        "properties": {name: _field_schema(name, check) for name, check in {**fields, **optional}.items()},
        "additionalProperties": False,
    }
    if fields:
        data["required"] = list(fields)
    return {
        "type": "object",
        "title": event_type,
        "required": ["type", "caseId", "data"] if fields else ["type", "caseId"],
        "properties": {
            "type": {"const": event_type},
            "caseId": {"$ref": "#/components/schemas/Id"},
            "data": data,
        },
        "additionalProperties": False,
    }


def _json(schema: str, examples: dict[str, Any] | None = None) -> dict[str, Any]:
    content: dict[str, Any] = {"schema": {"$ref": f"#/components/schemas/{schema}"}}
    if examples is not None:
        content["examples"] = examples
    return {"application/json": content}


def _answer(description: str, schema: str = "Error") -> dict[str, Any]:
    return {"description": description, "content": _json(schema)}


def _retry_later(description: str) -> dict[str, Any]:
    """A 503: the answer, and when to send again."""
    header = {
        "description": "seconds to wait before sending again",
        "schema": {"type": "integer", "example": RETRY_AFTER_SECONDS},
    }
    return {**_answer(description), "headers": {"Retry-After": header}}


def _example(summary: str, value: Any, status: int, **path: str) -> dict[str, Any]:
    example: dict[str, Any] = {"summary": summary, "value": value, "x-status": status}
    if path:
        example["x-path"] = path
    return example


def _case_param(examples: dict[str, Any] | None = None) -> dict[str, Any]:
    param: dict[str, Any] = {
        "name": "caseId",
        "in": "path",
        "required": True,
        "schema": {"$ref": "#/components/schemas/Id"},
    }
    if examples:
        param["examples"] = examples
    return param


INVOICE = {
    "invoiceId": EXAMPLE_CASE,
    "supplierId": "SUP-9",
    "poNumber": "PO-88",
    "invoiceAmount": "3400.00",
    "poAmount": "2000.00",
    "currency": "EUR",
}


def _events() -> dict[str, Any]:
    examples = {
        "invoiceReceived": _example(
            "An invoice over-billed by 1400.00 EUR: above the threshold, it waits for approval on v2",
            {"type": ev.INVOICE_RECEIVED, "caseId": EXAMPLE_CASE, "data": INVOICE},
            202,
        ),
        "poUpdated": _example(
            "The PO of another case changes",
            {"type": ev.PO_UPDATED, "caseId": "INV-1001", "data": {"poAmount": "1200.00"}},
            202,
        ),
        "creditNoteIssued": _example(
            "The supplier issued a credit note",
            {
                "type": ev.CREDIT_NOTE_ISSUED,
                "caseId": "INV-1001",
                "data": {"creditNoteId": "CN-77", "amount": "250.00"},
            },
            202,
        ),
        "caseInvestigate": _example(
            "Decide a case again", {"type": ev.CASE_INVESTIGATE, "caseId": "INV-1001", "data": {}}, 202
        ),
        "invalid": _example(
            "Refused whole, every bad field named: an id with /, an amount as a number, a lowercase currency",
            {
                "type": ev.INVOICE_RECEIVED,
                "caseId": "INV/2026/0042",
                "data": {**INVOICE, "invoiceId": "INV/2026/0042", "invoiceAmount": 3400, "currency": "eur"},
            },
            400,
        ),
    }
    return {
        "post": {
            "operationId": "postEvent",
            "summary": "The webhook: one signed fact event, enqueued into its case's session",
            "description": "Nothing is enqueued unless the answer is 202. An accepted event is never dropped: it is "
            "handled, set aside with its reason (see `rejectedEvents` on the case), or dead-lettered and alerted.",
            "security": [],
            "parameters": [
                {
                    "name": SIGNATURE_HEADER,
                    "in": "header",
                    "required": True,
                    "description": '`t=<unix seconds>,v2=<hex HMAC-SHA256 of "<t>.<delivery id>\\n<raw body>" keyed '
                    "by the secret>`; several `v2=` may be sent, any configured secret may match; refused more than "
                    f"{TOLERANCE_SECONDS} s from now",
                    "schema": {"type": "string", "pattern": r"^t=[0-9]+(,v2=[0-9a-f]{64})+$"},
                },
                {
                    "name": DELIVERY_HEADER,
                    "in": "header",
                    "required": True,
                    "description": "the delivery's id; the same id twice is one message (the broker drops the copy)",
                    "schema": {"$ref": "#/components/schemas/Id"},
                },
            ],
            "requestBody": {
                "required": True,
                "description": f"at most {MAX_BODY_BYTES} bytes",
                "content": _json("Event", examples),
            },
            "responses": {
                "202": {"description": "enqueued", "content": _json("EventAccepted")},
                "400": _answer(
                    "not a valid event, or no delivery id: `fields` names every offending field; or a "
                    "`data.occurredAt` more than `FUTURE_SKEW_SECONDS` (default 300) ahead of the store's clock"
                ),
                "401": _answer("signature missing, malformed, wrong or expired"),
                "409": _answer("the delivery id was already accepted with another body (an idempotency key reused)"),
                "413": _answer(f"body over {MAX_BODY_BYTES} bytes"),
                "415": _answer("not application/json, or not valid JSON"),
                "503": _retry_later(
                    "the queue, or the store that records delivery ids, could not be reached (or not within the "
                    "door's budget: every answer comes within 5 s): nothing was accepted, send again"
                ),
            },
        }
    }


def _approvals() -> dict[str, Any]:
    at = {"caseId": EXAMPLE_CASE, "requestId": EXAMPLE_REQUEST}
    examples = {
        "approve": _example(
            "Approve on the version it was asked on; a function-key caller names itself",
            {"decision": "approve", "caseVersion": 2, "approver": "ana@example.com"},
            202,
            **at,
        ),
        "rejectWithoutApprover": _example(
            "Without a signed-in identity the approver is required", {"decision": "reject", "caseVersion": 2}, 400, **at
        ),
        "unknownCase": _example(
            "No such case",
            {"decision": "approve", "caseVersion": 2, "approver": "ana@example.com"},
            404,
            caseId="NO-SUCH-CASE",
            requestId=EXAMPLE_REQUEST,
        ),
    }
    return {
        "post": {
            "operationId": "answerApproval",
            "summary": "Answer an approval request",
            "description": "Who is recorded: the signed-in principal (which must hold Casekeeper.Approver) when "
            "there is one, else the function-key caller, as `key:<approver>`. The case worker checks the "
            "answer against the case again: an answer on another version commits nothing.",
            "parameters": [
                _case_param(),
                {"name": "requestId", "in": "path", "required": True, "schema": {"$ref": "#/components/schemas/Id"}},
            ],
            "requestBody": {"required": True, "content": _json("ApprovalAnswer", examples)},
            "responses": {
                "202": {"description": "enqueued", "content": _json("ApprovalAccepted")},
                "400": _answer("invalid answer: `fields` names every offending field"),
                "401": _answer("an unreadable principal header"),
                "403": _answer("signed in without the app role Casekeeper.Approver"),
                "404": _answer("no such case"),
                "409": _answer(
                    "an unknown request, a request no longer pending, an answer on another version, or a request "
                    "already answered otherwise (the first accepted answer closes it): `error` says which"
                ),
                "413": _answer("body too large"),
                "415": _answer("not application/json, or not valid JSON"),
                "503": _retry_later(
                    "the queue or the store could not be reached (or not within the door's budget: every answer "
                    "comes within 5 s): nothing was accepted, send again"
                ),
            },
        }
    }


def _withdraw() -> dict[str, Any]:
    examples = {
        "withdraw": _example(
            "A person takes a request off the books (the worker refuses one that is not outstanding, "
            "and sets the event aside with the reason)",
            {"by": "ana@example.com", "why": "cancelled with the supplier, ticket 4411"},
            202,
            caseId=EXAMPLE_CASE,
            effectKey="0" * 64,
        ),
        "unknownField": _example(
            "Unknown fields are refused",
            {"by": "ana", "why": "x", "amount": "1.00"},
            400,
            caseId=EXAMPLE_CASE,
            effectKey="0" * 64,
        ),
    }
    return {
        "post": {
            "operationId": "withdrawRequest",
            "summary": "Take an outstanding credit-note request off the books",
            "parameters": [
                _case_param(),
                {"name": "effectKey", "in": "path", "required": True, "schema": {"$ref": "#/components/schemas/Id"}},
            ],
            "requestBody": {"required": True, "content": _json("Withdrawal", examples)},
            "responses": {
                "202": {"description": "enqueued", "content": _json("WithdrawalAccepted")},
                "400": _answer("invalid withdrawal: `fields` names every offending field"),
                "403": _answer("signed in without the app role Casekeeper.Operator"),
                "404": _answer("no such case"),
                "413": _answer("body too large"),
                "415": _answer("not valid JSON"),
                "503": _retry_later(
                    "the queue or the store could not be reached (or not within the door's budget: every answer "
                    "comes within 5 s): nothing was accepted, send again"
                ),
            },
        }
    }


def _case() -> dict[str, Any]:
    examples = {
        "existing": {"summary": "The case the webhook example made", "value": EXAMPLE_CASE, "x-status": 200},
        "unknown": {"summary": "No such case", "value": "NO-SUCH-CASE", "x-status": 404},
        "badId": {"summary": "An id outside the rule (leading space)", "value": " INV-1", "x-status": 400},
    }
    return {
        "get": {
            "operationId": "getCase",
            "summary": "The case: facts, the money rule's numbers, effects, approvals, history",
            "parameters": [_case_param(examples)],
            "responses": {
                "200": {"description": "the case", "content": _json("CaseDocument")},
                "400": _answer("an id outside the rule"),
                "404": _answer("no such case (events set aside for the id are still listed)"),
            },
        }
    }


def _plain_get(operation: str, summary: str, schema: str) -> dict[str, Any]:
    return {
        "get": {
            "operationId": operation,
            "summary": summary,
            "security": [],
            "responses": {"200": {"description": summary, "content": _json(schema)}},
        }
    }


def _components() -> dict[str, Any]:
    events = [ev.INVOICE_RECEIVED, ev.PO_UPDATED, ev.CREDIT_NOTE_ISSUED, ev.CASE_INVESTIGATE]
    assert tuple(events) == ev.PUBLIC_TYPES, "a public event type without a description"
    schemas: dict[str, Any] = {
        "Id": ID,
        "Amount": AMOUNT,
        "PositiveAmount": POSITIVE_AMOUNT,
        "Currency": CURRENCY,
        "Text": TEXT,
        "Event": {
            "oneOf": [{"$ref": f"#/components/schemas/{_schema_name(t)}"} for t in events],
            "discriminator": {
                "propertyName": "type",
                "mapping": {t: f"#/components/schemas/{_schema_name(t)}" for t in events},
            },
        },
        **{_schema_name(t): event_schema(t) for t in events},
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {"type": "string"},
                "fields": {"type": "object", "additionalProperties": {"type": "string"}},
                "rejectedEvents": {"type": "array"},
            },
        },
        "EventAccepted": _accepted({"deliveryId": {"$ref": "#/components/schemas/Id"}}),
        "ApprovalAccepted": _accepted(
            {"requestId": {"$ref": "#/components/schemas/Id"}, "approver": {"type": "string"}}
        ),
        "WithdrawalAccepted": _accepted({"effectKey": {"$ref": "#/components/schemas/Id"}}),
        "ApprovalAnswer": {
            "type": "object",
            "required": ["decision", "caseVersion"],
            "properties": {
                "decision": CHECKS["_decision"],
                "caseVersion": CHECKS["_version"],
                "approver": {"type": "string", "description": "required without a signed-in identity"},
                "reason": {"$ref": "#/components/schemas/Text"},
            },
            "additionalProperties": False,
        },
        "Withdrawal": {
            "type": "object",
            "required": ["by", "why"],
            "properties": {"by": {"$ref": "#/components/schemas/Text"}, "why": {"$ref": "#/components/schemas/Text"}},
            "additionalProperties": False,
        },
        "CaseDocument": _case_document(),
        "Health": {
            "type": "object",
            "required": ["status"],
            "properties": {"status": {"const": "ok"}, "store": {"type": "string"}, "queue": {"type": "string"}},
        },
        "OpenApi": {"type": "object", "required": ["openapi", "paths"]},
    }
    return {
        "schemas": schemas,
        "securitySchemes": {
            "functionKey": {"type": "apiKey", "in": "header", "name": "x-functions-key"},
            "functionKeyQuery": {"type": "apiKey", "in": "query", "name": "code"},
        },
    }


_SUMS = ("excess", "requested", "asked", "owed")
"""The money rule's sums over many requests: decimal strings that may run past one amount's bound."""


def _schema_name(event_type: str) -> str:
    return "".join(part.capitalize() for part in event_type.replace("_", ".").split(".")) + "Event"


def _accepted(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["accepted", *properties],
        "properties": {"accepted": {"const": True}, **properties},
    }


def _case_document() -> dict[str, Any]:
    nullable_object = {"type": ["object", "null"]}
    return {
        "type": "object",
        "required": ["case", "credit", "history", "effects", "pendingApproval", "approvals", "notes"],
        "properties": {
            "case": {
                "type": "object",
                "required": ["id", "status", "version", "schemaVersion", "facts"],
                "properties": {
                    "id": {"$ref": "#/components/schemas/Id"},
                    "status": {"enum": [str(s) for s in Status]},
                    "version": {"type": "integer", "minimum": 1},
                    "schemaVersion": {"type": "integer"},
                    "facts": {"type": "object"},
                },
            },
            "credit": {
                **nullable_object,
                "description": "the money rule's numbers (null while the facts are incomplete)",
                "properties": {
                    name: {"$ref": "#/components/schemas/Amount"} if name not in _SUMS else {"type": "string"}
                    for name in ("overBilled", "received", "outstanding", "remaining", *_SUMS)
                },
            },
            "history": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["fromVersion", "toVersion", "status", "at"],
                    "properties": {
                        "fromVersion": {"type": "integer"},
                        "toVersion": {"type": "integer"},
                        "status": {"enum": [str(s) for s in Status]},
                        "reason": {"type": ["string", "null"]},
                        "effectKey": {"type": ["string", "null"]},
                        "answer": {
                            "type": ["object", "null"],
                            "description": "the person's answer this transition committed: who decided what, on "
                            "which version, to which request (null when it committed none)",
                            "required": ["requestId", "approved", "by", "onVersion"],
                            "properties": {
                                "requestId": {"$ref": "#/components/schemas/Id"},
                                "approved": {"type": "boolean"},
                                "by": {"type": "string"},
                                "onVersion": {"type": "integer", "minimum": 1},
                                "reason": {"type": "string"},
                            },
                            "additionalProperties": False,
                        },
                        "at": {"type": "number"},
                    },
                },
            },
            "effects": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["key", "action", "caseVersion", "status", "attempts"],
                    "properties": {
                        "key": {"type": "string"},
                        "action": {"type": "string"},
                        "caseVersion": {"type": "integer"},
                        "status": {"enum": [str(s) for s in EffectStatus]},
                        "attempts": {"type": "integer"},
                        "result": nullable_object,
                        "reason": {"type": ["string", "null"]},
                    },
                },
            },
            "pendingApproval": {
                **nullable_object,
                "properties": {
                    "requestId": {"$ref": "#/components/schemas/Id"},
                    "caseVersion": {"type": "integer"},
                    "amount": {"$ref": "#/components/schemas/Amount"},
                    "currency": {"$ref": "#/components/schemas/Currency"},
                },
            },
            "approvals": {"type": "object"},
            "notes": {"type": "array"},
            "rejectedEvents": {"type": "array"},
            "awaitingInvoice": {
                **nullable_object,
                "description": "set while the case is `awaiting_invoice`: facts came before their invoice and are "
                "held (`case.facts` shows them: `poAmount`, `credits`); nothing is decided until the invoice comes, "
                "and the timer alerts `invoice_missing` `INVOICE_WAIT_SECONDS` after the last held fact",
                "required": ["heldSince", "lastFactAt", "deliveries"],
                "properties": {
                    "heldSince": {"type": "number"},
                    "lastFactAt": {"type": "number"},
                    "deliveries": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    }


def build() -> dict[str, Any]:
    """The OpenAPI 3.1 document, as ``shared/web/openapi.json`` holds it."""
    try:
        app_version = version("casekeeper")
    except PackageNotFoundError:  # a checkout without ``pip install -e .``
        app_version = "0.0.0"
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Casekeeper",
            "version": app_version,
            "description": "The machine API of Casekeeper: signed fact events in, approvals and withdrawals, case "
            "reads. Ids follow one rule (Id); amounts are decimal strings (Amount). Locally (casekeeper dev) "
            "function keys are not checked.",
        },
        "servers": [
            {"url": "http://127.0.0.1:7071/api", "description": "make run (casekeeper dev)"},
            {"url": "https://{app}.azurewebsites.net/api", "variables": {"app": {"default": "casekeeper"}}},
        ],
        "security": [{"functionKey": []}, {"functionKeyQuery": []}],
        "paths": {
            "/events": _events(),
            "/cases/{caseId}/approvals/{requestId}": _approvals(),
            "/cases/{caseId}/requests/{effectKey}/withdraw": _withdraw(),
            "/cases/{caseId}": _case(),
            "/health": _plain_get("getHealth", "liveness and one store round trip", "Health"),
            "/openapi.json": _plain_get("getOpenApi", "this description", "OpenApi"),
        },
        "components": _components(),
    }


def text() -> str:
    """The document as the file holds it: two-space indent, a final newline."""
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(text())
