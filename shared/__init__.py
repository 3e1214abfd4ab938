"""The invoice-review app on Azure Functions: Casekeeper's first user of its guard (``casekeeper``).

Layers, by path (the import-linter contracts in pyproject.toml hold them):

- ``shared.domain``: the invoice domain, pure (facts, statuses, the money rule).
- ``shared.workflow``: the Agent Framework workflow (intake -> propose -> approval gate -> commit).
- ``shared.handlers`` and ``shared.functions``: what each trigger does, and the triggers themselves.
- ``shared.app``: the composition root (settings -> stores, clients, the guard), telemetry, alerts.
- ``shared.messaging``, ``shared.supplier``: the queue's and the supplier portal's adapters.
- ``shared.views``, ``shared.web``, ``shared.operator``: the read model, the pages, the operator commands.
- ``devhost``, ``chaos``: the local host and the chaos run, never loaded in production.

The guard itself is ``casekeeper`` (its policy in ``casekeeper.core``, its stores in
``casekeeper.stores``); the app reaches it only through its public modules.
"""

__version__ = "0.1.0"
