"""A page's refresh never overlaps a load still running: the next load is asked for only when the one before
has answered. The browser's clock is Playwright's (``page.clock``), so the periods pass at once; the loads go
to the real local host, held back by the test for as long as it likes."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import DevHost


def test_a_slow_load_is_never_overlapped_by_the_next(page: Any, host: DevHost) -> None:
    held: list[Any] = []

    def hold(route: Any) -> None:
        if route.request.resource_type == "fetch":
            held.append(route)  # answered later: a load still running
        else:
            route.continue_()

    page.clock.install()
    page.route("**/api/approvals", hold)
    page.goto(f"{host.url}/api/approvals")
    period = int(page.locator("main").get_attribute("data-refresh")) * 1000

    page.clock.run_for(period * 6)  # six periods while the first load hangs
    page.wait_for_timeout(200)
    assert len(held) == 1, f"{len(held)} loads in flight at once"

    held.pop().continue_()  # it answers: the next is asked for one period later, not at once
    page.wait_for_function("() => !document.getElementById('refresh-failed').textContent")
    page.clock.run_for(period // 2)
    page.wait_for_timeout(200)
    assert held == []
    page.clock.run_for(period)
    page.wait_for_timeout(200)
    assert len(held) == 1
    held.pop().continue_()
    assert page.evaluate("window.casekeeperLoads") == 2
