"""``casekeeper dev`` and the other local stand-ins for what only Azure has. Production code imports
nothing from here.

- :mod:`shared.localhost.host`: the local host, serving the function app's functions as Azure would.
- :mod:`shared.localhost.changefeed`: Cosmos DB's change feed over the SQLite document store.
- :mod:`shared.localhost.schedule`: NCRONTAB timer schedules (the 6-field Functions form).
- :mod:`shared.localhost.http_server`: the HTTP front end.
- :mod:`shared.localhost.supplier_stub`: a supplier portal with fault injection.
- :mod:`shared.localhost.cosmos_server`: the Cosmos DB test server (``@vercel/cosmosdb-server``).
- :mod:`shared.localhost.demo`: the failure modes in one table (``casekeeper demo``).

The SQLite session queue the local host uses is an adapter like the SQLite store:
``shared.messaging.sqlite_queue`` (``CASEKEEPER_QUEUE=local``).
"""
