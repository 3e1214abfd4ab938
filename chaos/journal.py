"""The supplier's own request log (the stub's JSON-lines journal), read as it grows.

The stub appends one record per request and flushes it before answering, so a record is there as soon
as the request has reached the supplier: the killer waits on it to kill a host just after its request
arrived. Records carry the method, path, key, body, the status answered (``None``: dropped unanswered),
the note's id and whether this request created it.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._offset = 0
        self._partial = b""
        self._records: list[dict[str, Any]] = []

    def refresh(self) -> list[dict[str, Any]]:
        """Read what was appended since the last call; returns every record so far (a copy)."""
        with self._lock:
            try:
                with self.path.open("rb") as f:
                    f.seek(self._offset)
                    chunk = f.read()
            except FileNotFoundError:
                return []
            self._offset += len(chunk)
            lines = (self._partial + chunk).split(b"\n")
            self._partial = lines.pop()  # an unfinished last line waits for the rest of it
            for line in lines:
                if line.strip():
                    try:
                        self._records.append(json.loads(line))
                    except ValueError:
                        continue
            return list(self._records)

    def credit_note_posts(self) -> int:
        return sum(1 for r in self.refresh() if is_credit_post(r))


def is_credit_post(record: dict[str, Any]) -> bool:
    return record.get("method") == "POST" and record.get("path") == "/credit-notes"


def is_lookup(record: dict[str, Any]) -> bool:
    return record.get("method") == "GET" and record.get("path") == "/credit-notes"
