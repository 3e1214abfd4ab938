"""The guard's examples in README.md and docs/guard.md run as written (with a payments object of the shape
they assume), so a reader who copies them gets a guarded effect that works."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


class Payments:
    """The payments client the examples assume: refunds once per idempotency key, looks up by key."""

    def __init__(self) -> None:
        self.refunds: dict[str, dict[str, Any]] = {}
        self.calls = 0

    def refund(self, *, amount: str, idempotency_key: str) -> dict[str, Any]:
        self.calls += 1
        return self.refunds.setdefault(idempotency_key, {"amount": amount})

    def find_by_key(self, key: str) -> dict[str, Any] | None:
        return self.refunds.get(key)


def first_python_block(text: str, heading: str) -> str:
    section = text[text.index(heading) :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    return match.group(1)


@pytest.mark.parametrize(
    ("document", "heading"),
    [("README.md", "## Use the guard in your own workflow"), ("docs/guard.md", "## The shortest use")],
)
def test_the_first_example_runs_and_refunds_once(
    document: str, heading: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the examples open "app.sqlite" in the working directory
    code = first_python_block((ROOT / document).read_text(), heading)
    payments = Payments()
    namespace: dict[str, Any] = {"payments": payments}
    exec(compile(code, document, "exec"), namespace)
    again = namespace["refund"].run(namespace["decision"], {"amount": "50.00"})  # the same decision, run twice
    assert again.replayed and again.commit == "already"
    assert payments.calls == 1 and len(payments.refunds) == 1
    guard = namespace["guard"]
    case = guard.get("refund-42")
    assert case.status == "refunded" and case.version == 2
    guard.store.close()
