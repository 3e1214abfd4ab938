"""NCRONTAB timer schedules, as Azure Functions reads them, for the local host's timer triggers.

Azure Functions timers use NCRONTAB with six fields::

    {second} {minute} {hour} {day} {month} {day-of-week}      e.g. "0 */5 * * * *"

Parsing and the next occurrence come from ``croniter`` (``second_at_beginning=True``), with two
adjustments so it agrees with NCRONTAB:

- **Day and day-of-week are both required to match** when both are restricted (NCRONTAB checks the
  day of week after finding the day; classic cron matches either). ``croniter(day_or=False)``.
- Only NCRONTAB's syntax is accepted: ``*``, numbers, names (``JAN``, ``MON``), ranges ``a-b``,
  steps ``/n`` and lists ``a,b``. croniter's extensions (``L``, ``W``, ``#``, ``?``, ``H``) and a
  year field are rejected, as the Functions host would reject them.

Times are seconds since the epoch; the schedule is evaluated in UTC unless another ``tz`` is given
(the Functions default; ``WEBSITE_TIME_ZONE`` / ``TZ`` change it in Azure).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Any

from croniter import croniter

if TYPE_CHECKING:
    from azure.functions.timer import TimerRequest

_FIELDS = ("second", "minute", "hour", "day", "month", "day-of-week")
_MONTHS = frozenset({"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"})
_DAYS = frozenset({"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"})
_ELEMENT = re.compile(r"^(?:\*|(?P<a>\d+|[A-Za-z]+)(?:-(?P<b>\d+|[A-Za-z]+))?)(?:/\d+)?$")


class NcrontabSchedule:
    """A parsed 6-field NCRONTAB expression.

    Raises ``ValueError`` when ``expression`` does not have exactly six fields (with a hint when it
    has the five of classic cron) or is not valid NCRONTAB.
    """

    def __init__(self, expression: str, *, tz: tzinfo = UTC) -> None:
        fields = expression.split()
        if len(fields) == 5:
            raise ValueError(
                f"timer schedule {expression!r} has 5 fields; Azure Functions uses 6 (NCRONTAB): "
                f"{{second}} {{minute}} {{hour}} {{day}} {{month}} {{day-of-week}}, e.g. '0 {expression.strip()}'"
            )
        if len(fields) != 6:
            raise ValueError(
                f"timer schedule {expression!r} has {len(fields)} fields; Azure Functions uses 6 (NCRONTAB): "
                "{second} {minute} {hour} {day} {month} {day-of-week}"
            )
        for name, value in zip(_FIELDS, fields, strict=True):
            _check_field(expression, name, value)
        self.expression = " ".join(fields)
        self.tz = tz
        try:
            # Validate now, so a bad schedule fails when the app is indexed, not at the first tick.
            croniter(self.expression, datetime.now(tz), second_at_beginning=True, day_or=False).get_next(float)
        except (ValueError, KeyError) as exc:  # croniter's errors subclass ValueError; names raise KeyError
            raise ValueError(f"timer schedule {expression!r} is not valid NCRONTAB: {exc}") from exc

    def next_after(self, t: float) -> float:
        """The first occurrence strictly after ``t`` (epoch seconds), as epoch seconds."""
        start = datetime.fromtimestamp(t, self.tz)
        return float(croniter(self.expression, start, second_at_beginning=True, day_or=False).get_next(float))

    def __repr__(self) -> str:
        return f"NcrontabSchedule({self.expression!r})"


def schedule_status(*, last: float | None, next_run: float, last_updated: float) -> dict[str, str]:
    """The ``ScheduleStatus`` object the Functions host passes to a timer function.

    Keys ``Last`` (the previous occurrence), ``Next`` (the coming one) and ``LastUpdated`` (when
    this status was written) as ISO 8601 UTC times. A missing ``last`` (no run yet) is written as
    .NET's ``DateTime.MinValue``, ``0001-01-01T00:00:00``, since the host is a .NET program.
    """
    return {
        "Last": _iso(last) if last is not None else "0001-01-01T00:00:00",
        "Next": _iso(next_run),
        "LastUpdated": _iso(last_updated),
    }


def timer_request(
    past_due: bool, schedule_status: dict[str, Any] | None = None, *, adjust_for_dst: bool = True
) -> TimerRequest:
    """The ``azure.functions.timer.TimerRequest`` a ``timer_trigger`` function receives.

    ``past_due`` is true when the invocation runs later than its scheduled time (the host missed
    it, e.g. it was down). ``azure.functions.TimerRequest`` is only the abstract base; the worker
    passes this concrete class.
    """
    from azure.functions.timer import TimerRequest

    return TimerRequest(
        past_due=past_due, schedule_status=dict(schedule_status or {}), schedule={"AdjustForDST": adjust_for_dst}
    )


def _check_field(expression: str, name: str, value: str) -> None:
    names = _MONTHS if name == "month" else _DAYS if name == "day-of-week" else frozenset()
    for element in value.split(","):
        match = _ELEMENT.match(element)
        ok = match is not None and all(
            part is None or part.isdigit() or part.upper() in names for part in (match["a"], match["b"])
        )
        if not ok:
            raise ValueError(
                f"timer schedule {expression!r}: {name} field {value!r} is not NCRONTAB "
                "(use *, numbers, names, a-b ranges, /n steps and lists; L, W, #, ? and H are not supported)"
            )


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()
