"""Opt-in hunt with the state machine of ``test_stateful`` (not collected by the suite: run it by path).

    HUNT_EXAMPLES=300 HUNT_STEPS=50 nice -n 10 .venv/bin/python -m pytest tests/faults/hunt_stateful.py \\
        -q -s -p no:cacheprovider --hypothesis-seed=1313

``test_hunt`` runs the machine as the suite does, with many more examples; ``test_hunt_frozen_workers``
makes every example's workers freeze at their gates (F2 and F3 in turn, up to three times), with
``HUNT_MEANWHILE`` messages taken by another instance meanwhile (default 2), because the freeze rule alone
rarely meets a request. No example database (a fresh seed explores afresh); a failure prints its
``@reproduce_failure`` blob and shrinks to its steps. Each prints what its examples exercised.
"""

from __future__ import annotations

import collections
import os

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

import tests.faults.test_stateful as stateful
from devhost.supplier_stub import SupplierStub


def _hunt(machine: type[stateful.CaseMachine], counts: collections.Counter[str]) -> None:
    counted = stateful.event
    stateful.event = lambda text: counts.update([text])  # type: ignore[assignment]  # counted, not Hypothesis's
    try:
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=int(os.environ.get("HUNT_EXAMPLES", "300")),
                stateful_step_count=int(os.environ.get("HUNT_STEPS", "50")),
                deadline=None,
                database=None,
                print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
    finally:
        stateful.event = counted  # type: ignore[assignment]
        print("\nexercised:", dict(counts.most_common()))


def test_hunt(supplier: SupplierStub) -> None:
    counts: collections.Counter[str] = collections.Counter()

    class Counted(stateful.machine_class(supplier)):  # type: ignore[misc]
        def teardown(self) -> None:
            counts.update(["examples"])
            super().teardown()

    _hunt(Counted, counts)


def test_hunt_frozen_workers(supplier: SupplierStub) -> None:
    counts: collections.Counter[str] = collections.Counter()
    meanwhile = int(os.environ.get("HUNT_MEANWHILE", "2"))

    class Freezing(stateful.machine_class(supplier)):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            world = self.world
            world.pause_at = "F2"
            pause = world._pause

            def and_again(point: str) -> None:
                pause(point)
                if world.pauses < 3:
                    world.pause_at = "F3" if point == "F2" else "F2"

            world._pause = and_again  # type: ignore[method-assign]
            self.deliveries_meanwhile = meanwhile

        def teardown(self) -> None:
            counts.update(["examples"])
            super().teardown()

    _hunt(Freezing, counts)
