"""``tests/chaos``: the chaos command's plan and checks (fast), and one small seeded run (marked ``chaos``:
select it with ``-m chaos``, or leave it out with ``-m "not chaos"``)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: a seeded chaos run against real local hosts (about a minute)")
