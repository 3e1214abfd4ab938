"""Each trigger records its own failures where sampling cannot drop them (``shared.functions.failures``):
the function-failures alert counts these records."""

from __future__ import annotations

import asyncio
import logging

import azure.functions as func
import pytest

from function_app import create_app
from shared.functions.failures import reported


def _records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "casekeeper.invocations"]


@pytest.mark.parametrize(("status", "recorded"), [(202, False), (400, False), (409, False), (500, True), (503, True)])
def test_an_http_answer_is_a_failure_only_at_5xx(caplog: pytest.LogCaptureFixture, status: int, recorded: bool) -> None:
    @reported
    def events(req: func.HttpRequest) -> func.HttpResponse:
        return func.HttpResponse("{}", status_code=status)

    caplog.set_level(logging.INFO, logger="casekeeper.invocations")
    assert events(func.HttpRequest("POST", "/api/events", body=b"")).status_code == status
    records = _records(caplog)
    assert len(records) == (1 if recorded else 0)
    if recorded:
        assert records[0].levelno == logging.ERROR and records[0].function == "events"  # type: ignore[attr-defined]
        assert records[0].statusCode == status  # type: ignore[attr-defined]


def test_an_async_trigger_that_raises_is_recorded_once_and_still_raises(caplog: pytest.LogCaptureFixture) -> None:
    @reported
    async def case_worker(msg: func.ServiceBusMessage) -> None:
        raise ConnectionError("queue gone")

    with pytest.raises(ConnectionError):
        asyncio.run(case_worker(None))  # type: ignore[arg-type]
    [record] = _records(caplog)
    assert record.function == "case_worker" and record.errorType == "ConnectionError"  # type: ignore[attr-defined]


def test_every_indexed_function_is_wrapped() -> None:
    functions = create_app().get_functions()
    assert functions
    for function in functions:
        user = function.get_user_function()
        assert getattr(user, "__wrapped__", None) is not None, f"{function.get_function_name()} is not @reported"
