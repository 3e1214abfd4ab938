"""Operator commands: look at cases and effects, settle what only a person can, check before a deploy.

Each command is a module with ``main(argv) -> int`` (registered in ``shared.cli``):

=============================  ==========================================================================
command                        what it does
=============================  ==========================================================================
``casekeeper case show ID``    the case, its history, effects, approvals, notes, rejected events and
                               checkpoints (and whether this build can resume them)    (:mod:`.cases`)
``casekeeper effects pending`` every effect without a known outcome, oldest first     (:mod:`.effects`)
``casekeeper effects resolve`` record an outcome a person established; finish the case's commit
``casekeeper drain check``     the in-flight runs this build could not resume (rule R8) (:mod:`.drain`)
``casekeeper alerts``          recent alerts and whether the webhook got them           (:mod:`.alerts`)
=============================  ==========================================================================

All of them choose the store the same way (:mod:`.context`): ``--data DIR`` for the local host's SQLite
store, or ``--from-settings`` for whatever the app's settings configure (SQLite or Cosmos DB). Output is
for people by default and one JSON document with ``--json``. Exit codes: 0 fine, 1 the command found a
problem or refused, 2 a usage or configuration error.

Operator commands never enqueue events: what they change (an effect's outcome, the case's status) they
change in the store, with the same conditional writes the workers use (rules R2, R5).
"""
