"""``casekeeper chaos``: Casekeeper's promise, shown holding under faults and kills, or shown broken.

A dev tool on top of the local host (``devhost``), not part of the deployed app: no other package imports
it (import-linter holds it).

Modules, one job each: :mod:`.plan` (the seeded plan, plain data), :mod:`.driver` (events over HTTP,
every answer recorded), :mod:`.injector` (supplier faults, store outages and kills on schedule),
:mod:`.outage` (the store taken down from outside), :mod:`.cluster` and :mod:`.processes` (the stub and
the hosts as process groups), :mod:`.collect` (quiescence and evidence from outside), :mod:`.facts` (a
case's facts at each version), :mod:`.order` (the source order of facts), :mod:`.checks` and
:mod:`.consistency` (the invariants, pure), :mod:`.report` (table and JSON), :mod:`.run` (the command).
"""
