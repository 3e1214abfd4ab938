"""``casekeeper dev`` and the other local stand-ins for what only Azure has: a dev tool, not part of the
deployed app, so the app, the guard and the examples import nothing from here (import-linter holds it).
The ``casekeeper`` command reaches its commands through the entry points ``pyproject.toml`` declares.

- :mod:`devhost.host`: the local host, serving the function app's functions as Azure would.
- :mod:`devhost.changefeed`: Cosmos DB's change feed over the SQLite document store.
- :mod:`devhost.schedule`: NCRONTAB timer schedules (the 6-field Functions form).
- :mod:`devhost.http_server`: the HTTP front end.
- :mod:`devhost.supplier_stub`: a supplier portal with fault injection.
- :mod:`devhost.cosmos_server`: the Cosmos DB test server (``@vercel/cosmosdb-server``).
- :mod:`devhost.demo`: the failure modes in one table (``casekeeper demo``).

The SQLite session queue the local host uses is an adapter like the SQLite store:
``shared.messaging.sqlite_queue`` (``CASEKEEPER_QUEUE=local``).
"""
