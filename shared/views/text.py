"""How values read for people, in the commands' output and on the pages alike."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any


def short(key: str | None) -> str:
    """An effect key as people read it: the first 12 of its 64 hex characters."""
    return key[:12] if key else "-"


def age_text(seconds: float) -> str:
    """``45s``, ``12m05s``, ``3h04m``, ``2d03h``."""
    s = max(int(seconds), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def time_text(epoch: float) -> str:
    """Seconds since the epoch as UTC, to the second."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def compact(value: Any) -> str:
    """A value on one line: strings as they are, everything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(", ", ": "), default=str)
