"""Casekeeper: guard code that makes agent workflows safe to resume, retry and run twice.

Layers, by path:

- ``casekeeper.core``: the policy (effect keys, ledger state machine, case store rules, errors).
  Imports nothing outside the standard library and itself: no ``azure.*``, no ``sqlite3``,
  no environment, no wall clock.
- ``casekeeper.stores``: one module per storage backend (SQLite, Cosmos DB), each implementing the
  document port of ``casekeeper.core.ports`` and translating its vendor errors once.
- everything else wires the core to the outside world (settings, CLI, supplier client).
"""

__version__ = "0.1.0"
