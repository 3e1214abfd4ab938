"""The Azure Functions triggers, as Blueprints: thin. Each one parses its binding, calls a handler in
``shared.handlers`` and maps the result (or the error type) to a response or a settlement.

Binding names are the settings' names (``%CASE_EVENTS_QUEUE%``, ``%COSMOS_DATABASE%``...), so a test
can check that what the host indexes matches the configuration.
"""

CONTAINER_CASES = "cases"
CONTAINER_EFFECTS = "effects"
LEASE_PREFIX_CASES = "cases-"
"""The reconciler's leases on the ``cases`` feed (kept apart from the ones it held on ``effects``)."""
CONTAINER_LEASES = "leases"
