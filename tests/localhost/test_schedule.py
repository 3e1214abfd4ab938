"""NCRONTAB timer schedules: the 6-field Functions form, next occurrences, the TimerRequest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone, tzinfo

import azure.functions as func
import pytest

from devhost.schedule import NcrontabSchedule, schedule_status, timer_request


def ts(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, *, tz: tzinfo = UTC) -> float:
    return datetime(year, month, day, hour, minute, second, tzinfo=tz).timestamp()


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("0 */5 * * * *", ts(2026, 1, 1, 0, 0, 7), ts(2026, 1, 1, 0, 5)),
        # Strictly after: an exact occurrence yields the next one.
        ("0 */5 * * * *", ts(2026, 1, 1, 0, 5), ts(2026, 1, 1, 0, 10)),
        ("0 */5 * * * *", ts(2026, 1, 1, 0, 4, 59) + 0.5, ts(2026, 1, 1, 0, 5)),
        ("*/10 * * * * *", ts(2026, 1, 1, 0, 0, 7), ts(2026, 1, 1, 0, 0, 10)),
        ("30 * * * * *", ts(2026, 1, 1, 0, 0, 31), ts(2026, 1, 1, 0, 1, 30)),
        # 2026-01-02 is a Friday: weekdays at 09:30 skip to Monday.
        ("0 30 9 * * 1-5", ts(2026, 1, 2, 10), ts(2026, 1, 5, 9, 30)),
        ("0 30 9 * * MON-FRI", ts(2026, 1, 2, 10), ts(2026, 1, 5, 9, 30)),
        ("0 0 0 1 JAN *", ts(2026, 6, 1), ts(2027, 1, 1)),
        # NCRONTAB requires day AND day-of-week: Friday the 13th (classic cron would take every 13th
        # and every Friday, i.e. Friday 2026-01-02).
        ("0 0 0 13 * 5", ts(2026, 1, 1), ts(2026, 2, 13)),
    ],
)
def test_next_after(expression: str, after: float, expected: float) -> None:
    assert NcrontabSchedule(expression).next_after(after) == expected


def test_time_zone() -> None:
    plus2 = timezone(timedelta(hours=2))
    schedule = NcrontabSchedule("0 0 9 * * *", tz=plus2)
    assert schedule.next_after(ts(2026, 1, 1)) == ts(2026, 1, 1, 9, tz=plus2) == ts(2026, 1, 1, 7)


def test_five_fields_are_rejected_with_a_hint() -> None:
    with pytest.raises(ValueError, match="Azure Functions uses 6") as info:
        NcrontabSchedule("*/5 * * * *")
    assert "'0 */5 * * * *'" in str(info.value)


@pytest.mark.parametrize(
    "expression",
    [
        "0 0 0 1 1 * 2027",  # a year field
        "",
        "60 * * * * *",  # out of range
        "0 0 0 L * *",  # croniter extensions NCRONTAB lacks
        "0 0 0 * * 5#2",
        "0 0 0 ? * *",
        "H * * * * *",
        "0 0 0 * FOO *",
        "0 0 0 * * MON/x",
    ],
)
def test_invalid_expressions_are_rejected(expression: str) -> None:
    with pytest.raises(ValueError, match="timer schedule"):
        NcrontabSchedule(expression)


def test_timer_request() -> None:
    status = schedule_status(last=None, next_run=ts(2026, 1, 1, 0, 5), last_updated=ts(2026, 1, 1))
    assert status == {
        "Last": "0001-01-01T00:00:00",
        "Next": "2026-01-01T00:05:00+00:00",
        "LastUpdated": "2026-01-01T00:00:00+00:00",
    }
    request = timer_request(True, status)
    assert isinstance(request, func.TimerRequest)
    assert request.past_due is True
    assert request.schedule_status == status
    assert request.schedule == {"AdjustForDST": True}
    plain = timer_request(False)
    assert plain.past_due is False and plain.schedule_status == {}
