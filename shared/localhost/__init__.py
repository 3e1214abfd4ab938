"""Local stand-ins for what only Azure has, used by ``casekeeper dev`` (the embedded local host).

- :mod:`shared.localhost.queue`: a durable Service Bus session queue on one SQLite file.
- :mod:`shared.localhost.changefeed`: Cosmos DB's change feed over the SQLite document store.
- :mod:`shared.localhost.schedule`: NCRONTAB timer schedules (the 6-field Functions form).
"""
