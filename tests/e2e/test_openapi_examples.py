"""Every example in the OpenAPI description, sent to a real local host over a real socket: each is answered
with the status it documents, and the answer fits the schema documented for that status. The host serves
the same description it is checked against."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any
from urllib.parse import quote

import httpx
from openapi_schema_validator import OAS31Validator

from shared.handlers.ingress import DELIVERY_HEADER, SIGNATURE_HEADER, sign
from shared.web import openapi
from tests.support.dev_host import SECRET, DevHost

SPEC: dict[str, Any] = json.loads(openapi.SPEC_FILE.read_text())


def examples() -> list[tuple[str, str, str, dict[str, Any]]]:
    """(method, path template, example name, example) in document order: the webhook's first."""
    found = []
    for template, item in SPEC["paths"].items():
        for method, operation in item.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            for name, example in body.get("examples", {}).items():
                found.append((method, template, name, example))
            for param in operation.get("parameters", []):
                for name, example in param.get("examples", {}).items():
                    found.append((method, template, name, {**example, "x-path": {param["name"]: example["value"]}}))
            if not body and not any("examples" in p for p in operation.get("parameters", [])):
                found.append((method, template, "plain", {"x-status": 200}))
    return found


def response_schema(template: str, method: str, status: int) -> OAS31Validator:
    answer = SPEC["paths"][template][method]["responses"][str(status)]
    schema = answer["content"]["application/json"]["schema"]
    return OAS31Validator({**schema, "components": SPEC["components"]})


def send(host: DevHost, method: str, template: str, example: dict[str, Any]) -> httpx.Response:
    path = template
    for name, value in example.get("x-path", {}).items():
        path = path.replace("{" + name + "}", quote(str(value), safe=""))
    url = f"{host.url}/api{path}"
    if method == "get":
        return httpx.get(url, timeout=10)
    body = json.dumps(example["value"]).encode()
    headers = {"Content-Type": "application/json"}
    if template == "/events":  # signed as the description's header parameters say
        delivery = f"openapi-{uuid.uuid4().hex}"
        headers[SIGNATURE_HEADER] = sign(SECRET, body, int(time.time()), delivery)
        headers[DELIVERY_HEADER] = delivery
    return httpx.post(url, content=body, headers=headers, timeout=10)


def test_every_example_gets_its_documented_answer(host: DevHost) -> None:
    every = examples()
    assert len(every) >= 15 and every[0][2] == "invoiceReceived"
    served = httpx.get(f"{host.url}/api/openapi.json", timeout=10)
    assert served.status_code == 200 and served.json() == SPEC
    wrong = []
    for method, template, name, example in every:
        answer = send(host, method, template, example)
        if name == "invoiceReceived":  # the later examples answer and read the approval it makes wait
            host.wait_for(openapi.EXAMPLE_CASE, lambda v: v["case"]["status"] == "awaiting_approval")
            pending = host.case(openapi.EXAMPLE_CASE)
            assert pending is not None and pending["pendingApproval"]["requestId"] == openapi.EXAMPLE_REQUEST
        if answer.status_code != example["x-status"]:
            wrong.append(f"{method} {template} {name}: {answer.status_code} {answer.text[:200]}")
            continue
        errors = list(response_schema(template, method, answer.status_code).iter_errors(answer.json()))
        if errors:
            wrong.append(f"{method} {template} {name}: the answer does not fit its schema: {errors[0].message}")
    assert not wrong, "\n".join(wrong)
    # The approval example was applied as documented: approved by the function-key caller it names.
    done = host.wait_for(openapi.EXAMPLE_CASE, lambda v: v["case"]["status"] == "credit_requested")
    assert any("approved by key:ana@example.com" in (t["reason"] or "") for t in done["history"])
