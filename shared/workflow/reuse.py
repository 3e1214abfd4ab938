"""Workflow objects built once per process and reused, one run at a time each.

Building the graph (``WorkflowBuilder.build``: type validation, the executors' handler discovery, the graph
signature) costs about as much CPU as a whole run of it, and a case event runs it once or more. Agent
Framework documents a ``Workflow`` as keeping state between runs (its shared state, its last checkpoint id,
the requests it waits on), and refuses two runs at once on one object. So a :class:`WorkflowPool` hands each
run a workflow object no other run holds, and takes one back only when the run left nothing behind:

- it started from a message (not a restored checkpoint: that imports the checkpoint's state wholesale);
- it ended ``IDLE``: converged, no message in flight, no request waiting for a person (a paused run's object
  keeps its pending request, and is dropped);
- it raised nothing.

Before the next run the pool clears the object's shared state and forgets its last checkpoint id, which a
fresh run would otherwise inherit as its first checkpoint's parent (another case's checkpoint); and it checks
that no message, event or pending request is left in its runner context. An object that fails a check is
dropped, and a new one built. The executors hold no per-run state: what one run knows about its case comes
from :func:`shared.workflow.deps.run_knowing`, per task. The graph, and so its hash (rule R8), is the same
for every object the pool builds.

This module is the one place the app reaches into Agent Framework's runner, which 1.23 does not make public:
the reset uses ``Workflow._runner`` and the runner's ``_previous_checkpoint_id`` (there is no public way to
reset a workflow object), and it and :func:`build_only_needed_checkpoints` read the runner context's
``_messages``, ``_pending_request_info_events``, ``_event_queue`` and ``_get_effective_checkpoint_storage``
(its public readers are coroutines, and these are read where nothing can await: in the context's synchronous
``has_checkpointing`` and in the pool's ``take``). :func:`reusable` checks that those attributes exist on the
installed version, and where they do not, the pool builds a new object for every run
(``tests/workflow/test_workflow_reuse.py`` pins the behaviour on the installed version;
``tests/unit/test_private_names.py`` keeps the list to these names and this module).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from agent_framework import Workflow, WorkflowRunResult, WorkflowRunState

log = logging.getLogger("casekeeper.worker")

MAX_IDLE = 16
"""Idle workflow objects kept per pool: one per run in flight is all a process needs (8 sessions by default)."""


def reusable(workflow: Workflow) -> bool:
    """Whether this Agent Framework version lets :class:`WorkflowPool` reset ``workflow`` between runs."""
    runner = getattr(workflow, "_runner", None)
    return runner is not None and hasattr(runner, "_previous_checkpoint_id") and hasattr(runner, "state")


def ended_clean(result: WorkflowRunResult) -> bool:
    """Whether a run that returned ``result`` left its workflow object idle, with nothing pending."""
    try:
        return result.get_final_state() == WorkflowRunState.IDLE
    except RuntimeError:  # no status event: nothing is known about its end
        return False


class WorkflowPool:
    """Workflow objects of one build, each lent to one run at a time (:meth:`take`, :meth:`give_back`)."""

    def __init__(self, build: Callable[[], Workflow], *, max_idle: int = MAX_IDLE) -> None:
        def new() -> Workflow:
            return build_only_needed_checkpoints(build())

        self._build: Callable[[], Workflow] = new
        self._max_idle = max_idle
        self._idle: list[Workflow] = []
        first = self._build()
        self.graph_hash: str = first.graph_signature_hash
        """The build's graph hash (every object the pool builds has it)."""
        self.reuses = reusable(first)
        """Whether objects are reused at all (see :func:`reusable`)."""
        self.built = 1
        """How many objects this pool built (for the tests)."""
        if self.reuses:
            self._idle.append(first)

    def take(self) -> Workflow:
        """A workflow object no other run holds: an idle one, reset, or a new one."""
        while self._idle:
            workflow = self._idle.pop()
            if _reset(workflow):
                return workflow
        self.built += 1
        return self._build()

    def give_back(self, workflow: Workflow, *, started_from_message: bool, result: WorkflowRunResult | None) -> None:
        """Keep ``workflow`` for a later run if its run (which returned ``result``; ``None`` when it raised)
        started from a message and ended clean; otherwise drop it."""
        if (
            self.reuses
            and started_from_message
            and result is not None
            and ended_clean(result)
            and len(self._idle) < self._max_idle
        ):
            self._idle.append(workflow)


def build_only_needed_checkpoints(workflow: Workflow) -> Workflow:
    """Have ``workflow`` build a superstep's checkpoint only when its run's checkpoint storage says it
    ``needs_checkpoint`` (``shared.workflow.run_checkpoints.RunCheckpoints``); returns ``workflow``.

    Agent Framework builds a checkpoint after every superstep (the executors' states saved into the shared
    state, then all of it deep-copied), and the run's storage writes only a few: a pause, the step after a
    model call, the run's end. The others are held until the next replaces them, never written, yet they
    were most of the framework's CPU in a run. The runner asks its context ``has_checkpointing()`` just
    before it builds one; here that answer also asks the storage whether this one is needed, from the
    messages in flight and the requests pending, which is all that decides it. Every checkpoint that is
    written is built in full; a storage without ``needs_checkpoint`` gets every one. Left as it is when
    the installed Agent Framework's runner context does not look as expected."""
    context: Any = workflow._runner.context
    effective = getattr(context, "_get_effective_checkpoint_storage", None)
    if effective is None or not hasattr(context, "_messages") or not hasattr(context, "_pending_request_info_events"):
        return workflow

    def has_checkpointing() -> bool:
        storage = effective()
        if storage is None:
            return False
        needs = getattr(storage, "needs_checkpoint", None)
        return needs is None or bool(needs(context._messages, context._pending_request_info_events))

    context.has_checkpointing = has_checkpointing
    return workflow


def _reset(workflow: Workflow) -> bool:
    """Make ``workflow`` start its next run as a new object would; ``False`` when something is left in it."""
    runner: Any = workflow._runner
    context: Any = runner.context
    # Read synchronously: the in-process context keeps them in plain containers (checked, not assumed).
    messages = getattr(context, "_messages", None)
    pending = getattr(context, "_pending_request_info_events", None)
    events = getattr(context, "_event_queue", None)
    if messages is None or pending is None or any(messages.values()) or pending:
        log.debug("workflow %s: not reused (messages or requests left from its last run)", workflow.id)
        return False
    if events is not None and not events.empty():
        log.debug("workflow %s: not reused (events left from its last run)", workflow.id)
        return False
    runner.state.clear()
    runner._previous_checkpoint_id = None
    return True
