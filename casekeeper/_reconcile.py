"""Reconciliation for :class:`~casekeeper.Guard`: the declared effects become the core reconciler's policies.

Private: use :meth:`Guard.reconcile`, :meth:`Guard.areconcile` and :meth:`Guard.reconcile_effect`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from casekeeper.core.ledger import Effect
from casekeeper.core.reconcile import ActionPolicy, RecheckResult, Reconciler

if TYPE_CHECKING:
    from casekeeper.effects import GuardedEffect
    from casekeeper.guard import Guard

log = logging.getLogger("casekeeper.guard")


def sweep(guard: Guard, *, loop: asyncio.AbstractEventLoop | None) -> list[RecheckResult]:
    """Re-check every effect past its call timeout and every gate a crash left open, once each."""
    rec = reconciler(guard, loop)
    seen: set[str] = set()
    results: list[RecheckResult] = []

    def malformed(doc: object, exc: Exception) -> None:
        log.error("skipping a malformed document during reconciliation: %r", exc)

    targets = [(e.case_id, e.key) for e in guard.ledger.overdue(on_malformed=malformed)]
    targets += [(c.id, c.gate.effect_key) for c in guard.ledger.stale_gates(on_malformed=malformed) if c.gate]
    for record_id, key in targets:
        if key not in seen:
            seen.add(key)
            results.append(recheck(guard, rec, record_id, key))
    return results


def recheck(guard: Guard, rec: Reconciler, record_id: str, key: str) -> RecheckResult:
    """The core re-check (a ``done`` row without a commit intent is escalated there: ``no_intent``)."""
    return rec.recheck(record_id, key)


def reconciler(guard: Guard, loop: asyncio.AbstractEventLoop | None) -> Reconciler:
    """The core reconciler, with one policy per declared effect that has a lookup."""

    def policy(declared: GuardedEffect) -> ActionPolicy:
        lookup = declared.lookup
        assert lookup is not None

        def retry(effect: Effect) -> Callable[[str], Mapping[str, Any]]:
            args = declared.args_of(effect)
            return lambda key: resolved(declared.call(key, args), loop)

        return ActionPolicy(
            lookup=lambda key: resolved(lookup(key), loop),
            retry_call=retry if declared.retry_same_key else None,
            commit_data=declared.data_for,
        )

    def alert(message: str, fields: dict[str, Any]) -> None:
        if guard._on_escalate is not None:
            # A record is what the core calls a case: both names, so either reader finds it.
            guard._on_escalate(message, {**fields, "recordId": fields.get("caseId")})

    policies = {a: policy(d) for a, d in guard._effects.items() if d.lookup is not None}
    return Reconciler(
        guard.ledger,
        guard.records,
        guard.store,
        policies,
        alert=alert,
        review_status=guard.review_status,
        lookup_backoff=guard._lookup_backoff,
        raise_alert=guard._alert,
    )


def resolved(value: Any, loop: asyncio.AbstractEventLoop | None) -> Any:
    """The value of a call that may be ``async``: awaited on ``loop`` (the caller's, from a worker thread),
    or in a fresh loop when there is none."""
    if not inspect.isawaitable(value):
        return value
    if loop is not None:
        return asyncio.run_coroutine_threadsafe(_awaited(value), loop).result()
    return asyncio.run(_awaited(value))


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value
