"""Every way the chat client fails maps to one of Casekeeper's errors, or is left alone (a bug): the
mapping at the boundary, complete over what the Azure OpenAI SDK raises, with ``Retry-After`` as data."""

from __future__ import annotations

import email.utils
import time

import httpx2
import pytest
from agent_framework.exceptions import ChatClientException
from azure.core.exceptions import ClientAuthenticationError
from openai import APIConnectionError, APIStatusError, APITimeoutError

from shared.errors import InvalidProposal, ModelUnavailable
from shared.workflow.model_client import classify, retry_after

REQUEST = httpx2.Request("POST", "https://x.openai.azure.com/openai/deployments/d/chat/completions")


def status_error(status: int, headers: dict[str, str] | None = None) -> APIStatusError:
    response = httpx2.Response(status, headers=headers or {}, request=REQUEST)
    return APIStatusError("failed", response=response, body={"message": f"service says {status}"})


def wrapped(inner: BaseException) -> ChatClientException:
    """As Agent Framework raises it: ``ChatClientException(...) from`` the SDK's error."""
    try:
        try:
            raise inner
        except BaseException as exc:
            raise ChatClientException("service failed to complete the prompt", inner_exception=exc) from exc
    except ChatClientException as outer:
        return outer


@pytest.mark.parametrize(
    ("inner", "kind", "status"),
    [
        (status_error(429, {"Retry-After": "7"}), "throttled", 429),
        (status_error(500), "server_error", 500),
        (status_error(503), "server_error", 503),
        (status_error(408), "server_error", 408),
        (status_error(401), "token", 401),
        (status_error(403), "token", 403),
        (APITimeoutError(REQUEST), "timeout", None),
        (TimeoutError(), "timeout", None),
        (APIConnectionError(request=REQUEST), "unreachable", None),
        (ClientAuthenticationError("no identity endpoint"), "token", None),
    ],
)
def test_what_can_pass_with_time_is_model_unavailable(inner: BaseException, kind: str, status: int | None) -> None:
    error = classify(wrapped(inner), case_id="C-1", deployment="gpt")
    assert isinstance(error, ModelUnavailable) and error.retryable and not error.wait_in_place
    assert (error.kind, error.status, error.case_id, error.deployment) == (kind, status, "C-1", "gpt")


@pytest.mark.parametrize("status", [400, 404, 422])
def test_a_request_the_service_refuses_goes_to_a_person(status: int) -> None:
    error = classify(wrapped(status_error(status)), case_id="C-1", deployment="gpt")
    assert isinstance(error, InvalidProposal)
    assert error.reason == f"the model service refused the request ({status}): service says {status}"


def test_what_is_not_a_model_failure_is_left_to_raise() -> None:
    assert classify(wrapped(ValueError("a bug")), case_id="C-1", deployment="gpt") is None
    assert classify(KeyError("x"), case_id="C-1", deployment="gpt") is None


def test_retry_after_in_milliseconds_seconds_or_as_a_date() -> None:
    assert retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after({"retry-after": "12"}) == 12.0
    later = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert 55 <= (retry_after({"retry-after": later}) or 0) <= 60
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({}) is None
    error = classify(wrapped(status_error(429, {"retry-after-ms": "250"})), case_id="C-1", deployment=None)
    assert isinstance(error, ModelUnavailable) and error.retry_after == 0.25
