"""Every failed invocation leaves a record that sampling never drops.

The function-failures alert (``infra/app/alerts.bicep``) once counted Application Insights' failed
requests. With traces sampled (``TRACE_SAMPLING_RATIO``, 0.25 in Azure) the host records no request for
an invocation whose trace was dropped, so three failures in four went unseen. Log records are never
sampled (``shared.app.telemetry``), so each trigger is wrapped in :func:`reported`: an invocation that
raises, or an HTTP one that answers 5xx, logs one ERROR record on ``casekeeper.invocations`` with the
function's name, and the alert counts those (``infra/app/function-failures.kql``). A deliberate 4xx
answer (a sender's mistake) is not a failure and logs nothing.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, TypeVar, cast

log = logging.getLogger("casekeeper.invocations")

F = TypeVar("F", bound=Callable[..., Any])


def _record(function: str, *, error: BaseException | None = None, status: int | None = None) -> None:
    if error is not None:
        log.error(
            "function %s failed: %s: %s",
            function,
            type(error).__name__,
            error,
            extra={"function": function, "errorType": type(error).__name__},
        )
    else:
        log.error("function %s answered %s", function, status, extra={"function": function, "statusCode": status})


def _check_status(function: str, result: object) -> None:
    status = getattr(result, "status_code", None)
    if isinstance(status, int) and status >= 500:
        _record(function, status=status)


def reported(fn: F) -> F:
    """Wrap a trigger so its failures are recorded (see the module docstring); sync or async alike. The
    wrapper keeps the function's name, signature and annotations, which the Functions host indexes."""
    name = fn.__name__

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            try:
                result = await fn(*args, **kwargs)
            except Exception as exc:
                _record(name, error=exc)
                raise
            _check_status(name, result)
            return result

        return cast(F, run_async)

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            _record(name, error=exc)
            raise
        _check_status(name, result)
        return result

    return cast(F, run)
