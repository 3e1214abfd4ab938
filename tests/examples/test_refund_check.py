"""The refund example checked the way a user checks their own workflow (``casekeeper.check``,
``examples/refund/check.py``): a fixed budget of seeds keeps every invariant, a seed replays exactly, and the
checker finds what breaks on purpose (a payments service that does not honour idempotency keys, a workflow
that does not forward the guard's key), shrinks it and prints the command that reproduces it.

The fixed budget is what ``make test`` asks of the example (about 15 s on one core). On a workflow that
breaks an invariant it fails with the seed, the shrunk steps and the violations.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from casekeeper import Guard, open_sqlite
from casekeeper.check import Env, Plan, Step, View, Workflow, describe, main, make_plan, run_plan, search, shrink
from casekeeper.check_processes import run_processes
from chaos.run import main as chaos_main
from examples.refund.app import RefundApp
from examples.refund.check import RefundFacts, checked, refunded_within_paid, world
from examples.refund.payments import Payments
from sim.run import main as sim_main

SEEDS = 150
STEPS = 30
ROOT = Path(__file__).resolve().parents[2]
HERE = "tests.examples.test_refund_check"


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    """The example logs every fault the checker injects; the findings are in the assertions."""
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_refund_example_keeps_every_invariant_over_a_fixed_budget_of_seeds() -> None:
    found = search(world, 0, steps=STEPS, seeds=SEEDS)
    failing = found.failing
    if failing is not None:
        small = shrink(world, failing, seconds=30)
        shown = run_plan(world, small)
        reproduce = "python -m casekeeper.check examples.refund.check:world"
        pytest.fail(describe(failing, small, shown if shown.violations else failing, reproduce=reproduce, steps=STEPS))
    assert len(found.outcomes) == SEEDS


def test_a_seed_replays_exactly() -> None:
    """Two runs of one plan store the same cases and leave the same journal; another seed does not."""
    first, again, other = (run_plan(world, make_plan(seed, STEPS)) for seed in (11, 11, 12))
    assert first.digest == again.digest
    assert first.digest != other.digest


def test_a_payment_that_lands_after_its_retry_was_refused_as_stale_is_found_by_key() -> None:
    """The checker's first finding on the guard (seeds 0, 11, 37): a call stalls past the call timeout; meanwhile the
    facts change and the reconciler finds no payment, so its retry is refused by the version gate and the
    entry closed failed (stale); then the stalled call pays and its process dies before the reply (F3). The
    entry is watched: the reconciler's lookup by key finds the payment and records it, done late, with an
    alert, instead of leaving a payment behind a failed entry."""
    plan = Plan(
        0,
        (
            Step("open", (0, 5000)),
            Step("fault", ("stall", ("change", "reconcile"))),
            Step("crash", ("F3",)),
            Step("run", (0,)),
        ),
    )
    outcome = run_plan(world, plan)
    assert outcome.violations == [], [str(v) for v in outcome.violations]


def test_refunded_more_than_paid_is_a_violation_unless_the_guard_names_a_late_refund(tmp_path: Path) -> None:
    """The refund's own invariant, on the case of seed 668: a refund stalled past its call timeout lands after
    the facts changed and a second decision refunded the new request (61.08 of 53.58 paid); the guard records
    the late one and raises ``late_outcome`` naming the case. Without that alert it is a violation."""
    guard = Guard(open_sqlite(tmp_path / "store.sqlite"))
    case, _ = guard.create("r", {"paid": "53.58", "requested": "40.00"}, status="refunded")
    journal = ({"key": "a", "caseId": "r", "amount": "40.00"}, {"key": "b", "caseId": "r", "amount": "21.08"})
    late = {"kind": "late_outcome", "message": "a late refund", "fields": {"caseId": "r"}}
    silent = View({"r": case}, {"r": ()}, journal, (), quiescent=True)
    assert list(refunded_within_paid(silent)) == ["r: refunded 61.08, paid 53.58"]
    assert list(refunded_within_paid(View({"r": case}, {"r": ()}, journal, (late,), quiescent=True))) == []
    guard.store.close()


# --- the checker finds what breaks on purpose ---------------------------------------------------------------


class PaysEveryRequest(Payments):
    """A payments service that does not honour idempotency keys: every request pays, whatever its key (each
    payment stored under the key and the request's number; the journal shows the key it came with)."""

    def pay(self, key: str, case_id: str, amount: str) -> dict[str, Any]:
        return super().pay(f"{key}/{self.requests()}", case_id, amount)

    def find(self, key: str) -> dict[str, Any] | None:
        return next((p for p in self.payments() if p["key"] == key), None)

    def payments(self, case_id: str | None = None) -> list[dict[str, Any]]:
        return [{**p, "key": p["key"].split("/")[0]} for p in super().payments(case_id)]


def pays_every_request(env: Env) -> Workflow:
    """The refund example over a payments service that pays again for a key it has seen."""
    return checked(RefundApp(env.store, PaysEveryRequest(env.path("payments.sqlite")), **env.guard_options))


class ForgetsTheKey(RefundApp):
    """The user's mistake: the guarded call sends a key of its own instead of the guard's."""

    def pay(self, key: str, args: Any) -> dict[str, Any]:
        return self.payments.pay(uuid.uuid4().hex, args["caseId"], args["amount"])


def forgets_the_key(env: Env) -> Workflow:
    return checked(ForgetsTheKey(env.store, Payments(env.path("payments.sqlite")), **env.guard_options))


@pytest.mark.parametrize(
    ("factory", "broken"),
    [(pays_every_request, {"once"}), (forgets_the_key, {"settled", "refunded", "once"})],
    ids=["stand-in-pays-every-request", "workflow-forgets-the-key"],
)
def test_the_checker_finds_a_broken_refund_and_shrinks_it(factory: Any, broken: set[str]) -> None:
    found = search(factory, 0, steps=STEPS, seeds=60)
    failing = found.failing
    assert failing is not None, f"no violation in {len(found.outcomes)} seeds"
    assert failing.violations[0].invariant in broken, [str(v) for v in failing.violations]
    small = shrink(factory, failing, seconds=30)
    assert len(small.steps) < failing.at_step
    again = run_plan(factory, small)
    assert failing.violations[0].invariant in {v.invariant for v in again.violations}
    text = describe(failing, small, again, reproduce="python -m casekeeper.check x:y", steps=STEPS)
    assert f"reproduce: python -m casekeeper.check x:y --seed {failing.plan.seed} --seeds 1 --steps {STEPS}" in text
    assert all(str(step) in text for step in small.steps)


def test_the_command_line_reports_a_finding_with_its_reproduce_command(capsys: pytest.CaptureFixture[str]) -> None:
    target = f"{HERE}:pays_every_request"
    assert main([target, "--seeds", "60", "--shrink-seconds", "20"]) == 1
    printed = capsys.readouterr().out
    assert f"reproduce: python -m casekeeper.check {target} --seed " in printed
    assert "once: the downstream acted 2 times under key" in printed
    seed = int(printed.split("seed ", 1)[1].split(":", 1)[0])
    # The seed alone reproduces it; --expect-violation makes the finding the exit code's success.
    assert main([target, "--seed", str(seed), "--seeds", "1", "--no-shrink", "--expect-violation", "once"]) == 0


def test_casekeeper_sim_delegates_a_user_workflow(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main(["--workflow", "examples.refund.check:world", "--seeds", "3"]) == 0
    assert "no violation: 3 seeds (0..2)" in capsys.readouterr().out
    target = f"{HERE}:pays_every_request"
    assert sim_main(["--workflow", target, "--seeds", "60", "--no-shrink"]) == 1
    assert f"reproduce: casekeeper sim --workflow {target} --seed " in capsys.readouterr().out


def test_a_user_with_only_the_guard_runs_it_as_a_module() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "casekeeper.check", "examples.refund.check:world", "--seeds", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "no violation: 2 seeds (0..1)" in done.stdout


def unprobed(env: Env) -> Workflow:
    """A factory that builds its guard without the checker's options: the checker cannot see its failure
    points, and says so rather than report a run it did not check."""
    app = RefundApp(env.store, Payments(env.path("payments.sqlite")))
    return Workflow(Guard(env.store), [app.pay_once], RefundFacts(app), app.payments.payments)


def test_a_guard_built_without_the_checkers_options_is_refused() -> None:
    with pytest.raises(TypeError, match=r"\*\*env.guard_options"):
        run_plan(unprobed, Plan(1, (Step("open", (0, 5000)), Step("run", (0,)))))


# --- with real processes under kill -9 (casekeeper.check_processes) ----------------------------------------


@pytest.mark.serial  # real processes against the clock, as the app's chaos run: alone, after the parallel pass
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_refund_example_holds_under_kill_9_and_a_workflow_that_forgets_the_key_does_not() -> None:
    held = run_processes("examples.refund.check:world", processes=2, seconds=8, seed=0)
    assert held.violations == [], [str(v) for v in held.violations]
    assert held.acts >= 3 and held.kills >= 3, str(held)  # it did refund, and processes did die
    broken = run_processes(f"{HERE}:forgets_the_key", processes=2, seconds=4, seed=0)
    assert broken.acts >= 1 and {v.invariant for v in broken.violations} >= {"settled"}, str(broken)
    assert "which no case's effect holds" in str(broken.violations[0])


@pytest.mark.serial
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_casekeeper_chaos_delegates_a_user_workflow(capsys: pytest.CaptureFixture[str]) -> None:
    assert chaos_main(["--workflow", "examples.refund.check:world", "--processes", "1", "--seconds", "2"]) == 0
    assert "no violation: 1 processes under kill -9" in capsys.readouterr().out
