"""The Azure OpenAI chat client the model proposer uses, and what its failures mean to Casekeeper.

The client is Agent Framework's ``OpenAIChatCompletionClient`` over an ``openai.AsyncAzureOpenAI``
built here, so that the budget is Casekeeper's own (:class:`ModelConfig`):

- **no retries in the SDK** (``max_retries=0``): the SDK would sleep in place for the service's
  ``Retry-After`` (up to two minutes per retry) holding the case's session. A retryable failure becomes
  :class:`~shared.errors.ModelUnavailable`, carrying ``retry_after``, and the case worker defers the
  event by a delayed copy (``shared.handlers.case_events``);
- **one timeout** for the whole call, token fetch included (``timeout``, seconds; the SDK's default is
  600 s, the whole function timeout);
- **key or identity**: with ``api_key`` the ``api-key`` header; without, a bearer token from the async
  ``azure.identity.aio.DefaultAzureCredential`` (the app's managed identity in Azure), so a slow token
  endpoint never blocks the event loop that serves every session of the worker.

:func:`classify` maps what the client raises (Agent Framework wraps the SDK's error in
``ChatClientException``, the original as its ``__cause__``) to Casekeeper's errors.
"""

from __future__ import annotations

import email.utils
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shared.errors import InvalidProposal, ModelUnavailable

if TYPE_CHECKING:
    from agent_framework.openai import OpenAIChatCompletionClient

DEFAULT_API_VERSION = "2024-10-21"
"""The newest GA Azure OpenAI data-plane version with structured outputs (``json_schema``)."""
TOKEN_SCOPE = "https://cognitiveservices.azure.com/.default"  # noqa: S105 - an OAuth scope, not a secret


@dataclass(frozen=True)
class ModelConfig:
    """Where the model is and how long it may take (``AZURE_OPENAI_*`` settings)."""

    endpoint: str
    deployment: str
    api_key: str | None = None
    api_version: str = DEFAULT_API_VERSION
    timeout: float = 30.0

    @property
    def auth(self) -> str:
        return "key" if self.api_key else "identity"


def chat_client(config: ModelConfig, *, credential: Any | None = None) -> OpenAIChatCompletionClient:
    """The chat client for ``config``. Creates no connection and fetches no token until first use.

    ``credential``: an async token credential (``azure.core.credentials_async.AsyncTokenCredential``) for
    identity auth; by default ``azure.identity.aio.DefaultAzureCredential``. Ignored with a key."""
    from agent_framework.openai import OpenAIChatCompletionClient
    from openai import AsyncAzureOpenAI

    auth: dict[str, Any]
    if config.api_key:
        auth = {"api_key": config.api_key}
    else:
        from azure.identity.aio import DefaultAzureCredential, get_bearer_token_provider

        auth = {
            "azure_ad_token_provider": get_bearer_token_provider(credential or DefaultAzureCredential(), TOKEN_SCOPE)
        }
    sdk = AsyncAzureOpenAI(
        azure_endpoint=config.endpoint,
        azure_deployment=config.deployment,
        api_version=config.api_version,
        max_retries=0,
        timeout=config.timeout,
        **auth,
    )
    return OpenAIChatCompletionClient(model=config.deployment, async_client=sdk)


def classify(exc: BaseException, *, case_id: str, deployment: str | None) -> ModelUnavailable | InvalidProposal | None:
    """What a failed model call means: ``ModelUnavailable`` (retry later), ``InvalidProposal`` (a person
    looks: the content filter, a request the service refuses), or ``None`` (not a model failure: a bug,
    raised as it is)."""
    from agent_framework.exceptions import ChatClientContentFilterException
    from azure.core.exceptions import ClientAuthenticationError
    from openai import APIConnectionError, APIStatusError, APITimeoutError

    def unavailable(kind: str, reason: str, **extra: Any) -> ModelUnavailable:
        return ModelUnavailable(reason, kind=kind, case_id=case_id, deployment=deployment, **extra)

    chain = _chain(exc)
    for cause in chain:
        if isinstance(cause, ChatClientContentFilterException):
            service = next((c for c in chain if isinstance(c, APIStatusError)), None)
            said = _service_message(service) if service is not None else _first_line(cause)
            return InvalidProposal(f"the model's content filter withheld the answer: {said}", case_id=case_id)
        if isinstance(cause, APIStatusError):
            status = cause.status_code
            said = _service_message(cause)
            if status == 429:
                wait = retry_after(cause.response.headers)
                return unavailable(
                    "throttled", f"the model is throttled (429): {said}", status=status, retry_after=wait
                )
            if status in (401, 403):
                # A key rotated in Key Vault, a role assignment still propagating: both pass with time.
                return unavailable("token", f"the model refused the credentials ({status}): {said}", status=status)
            if status == 408 or status >= 500:
                wait = retry_after(cause.response.headers)
                return unavailable(
                    "server_error", f"the model failed ({status}): {said}", status=status, retry_after=wait
                )
            return InvalidProposal(f"the model service refused the request ({status}): {said}", case_id=case_id)
        if isinstance(cause, (APITimeoutError, TimeoutError)):
            return unavailable("timeout", "the model did not answer in time")
        if isinstance(cause, APIConnectionError):
            return unavailable("unreachable", f"the model could not be reached: {_first_line(cause)}")
        if isinstance(cause, ClientAuthenticationError):
            return unavailable("token", f"no token for the model: {_first_line(cause)}")
    return None


def retry_after(headers: Any) -> float | None:
    """The wait a response asks for, in seconds: ``retry-after-ms``, else ``Retry-After`` in seconds or as an
    HTTP date; ``None`` when absent or unreadable."""
    if headers is None:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw) / divisor
        except ValueError:
            continue
        if math.isfinite(value) and value >= 0:
            return value
    raw = headers.get("retry-after")
    if raw:
        parsed = email.utils.parsedate_to_datetime(raw) if _looks_like_date(raw) else None
        if parsed is not None:
            return max(0.0, parsed.timestamp() - time.time())
    return None


def _looks_like_date(raw: str) -> bool:
    return email.utils.parsedate_tz(raw) is not None


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes, outermost first (Agent Framework raises ``... from`` the SDK's error)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 10:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _service_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        message = body.get("message") or (body.get("error") or {}).get("message")
        if message:
            return _first_line(str(message))
    return _first_line(getattr(exc, "message", "") or str(exc))


def _first_line(value: object, limit: int = 300) -> str:
    text = str(value).strip().splitlines()[0] if str(value).strip() else type(value).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
