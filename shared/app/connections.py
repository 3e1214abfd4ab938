"""The two forms a Functions connection takes, for Service Bus and Cosmos DB, read the way the extensions
read them.

A trigger's ``connection="ServiceBusConnection"`` names a *prefix*. The Functions extensions accept either

- a **connection string** in the setting of that name (``ServiceBusConnection``, ``CosmosDBConnection``):
  what the emulators take (a Service Bus shared access key, a Cosmos DB account key), or
- an **identity-based** connection in settings under that prefix (``ServiceBusConnection__fullyQualifiedNamespace``,
  ``CosmosDBConnection__accountEndpoint``): what Azure uses, with the managed identity or, on a developer's
  machine, the signed-in developer.

The code's own clients (the event sender, the store) read the same settings, so the host's triggers and the
code always talk to the same namespace and account. Parsing is pure (no azure import) and never echoes a key
in an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

SERVICE_BUS = "ServiceBusConnection"
"""The Service Bus connection prefix (``case_worker``'s trigger, the event sender, the dead-letter queue)."""
SERVICE_BUS_NAMESPACE = f"{SERVICE_BUS}__fullyQualifiedNamespace"
COSMOS_DB = "CosmosDBConnection"
"""The Cosmos DB connection prefix (the reconciler's trigger, the store)."""
COSMOS_DB_ENDPOINT = f"{COSMOS_DB}__accountEndpoint"


class ConnectionStringError(ValueError):
    """A connection string that cannot be used; the message names the setting and never the key."""


def _pairs(name: str, raw: str) -> dict[str, str]:
    """``Key=Value;Key=Value;`` -> {lowercased key: value}. Values may contain ``=`` (base64 keys do)."""
    pairs: dict[str, str] = {}
    for part in raw.strip().strip(";").split(";"):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ConnectionStringError(f"{name} is not a connection string of Key=Value; pairs")
        pairs[key.strip().lower()] = value.strip()
    return pairs


@dataclass(frozen=True)
class CosmosAccount:
    """A Cosmos DB account from a connection string: its endpoint and account key."""

    endpoint: str
    key: str


def parse_cosmos(raw: str, name: str = COSMOS_DB) -> CosmosAccount:
    """``AccountEndpoint=https://host:port/;AccountKey=...;`` -> :class:`CosmosAccount`.

    Raises :class:`ConnectionStringError` when either part is missing or the endpoint is not an http(s) URL."""
    pairs = _pairs(name, raw)
    endpoint, key = pairs.get("accountendpoint", ""), pairs.get("accountkey", "")
    missing = [part for part, value in (("AccountEndpoint", endpoint), ("AccountKey", key)) if not value]
    if missing:
        raise ConnectionStringError(f"{name} has no {' and no '.join(missing)}")
    url = urlparse(endpoint)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise ConnectionStringError(f"{name}'s AccountEndpoint must be an http(s) URL, not {endpoint!r}")
    return CosmosAccount(endpoint=endpoint, key=key)


@dataclass(frozen=True)
class ServiceBusNamespace:
    """A Service Bus namespace from a connection string (the string itself is what the SDK takes)."""

    host: str
    """``x.servicebus.windows.net``, or ``localhost:5672`` for the emulator."""
    emulator: bool
    """``UseDevelopmentEmulator=true``: plain AMQP (no TLS) to the emulator."""


def parse_service_bus(raw: str, name: str = SERVICE_BUS) -> ServiceBusNamespace:
    """``Endpoint=sb://host;SharedAccessKeyName=...;SharedAccessKey=...[;UseDevelopmentEmulator=true]``.

    Checks what the Service Bus SDK needs before it would fail at the first send: an ``sb://`` endpoint and
    either a shared access key with its name, or a shared access signature. Raises
    :class:`ConnectionStringError`."""
    pairs = _pairs(name, raw)
    endpoint = pairs.get("endpoint", "")
    url = urlparse(endpoint)
    if url.scheme != "sb" or not url.netloc:
        raise ConnectionStringError(f"{name} needs Endpoint=sb://<namespace host>, not {endpoint!r}")
    key, key_name = pairs.get("sharedaccesskey"), pairs.get("sharedaccesskeyname")
    signature = pairs.get("sharedaccesssignature")
    if not signature and not (key and key_name):
        raise ConnectionStringError(f"{name} needs SharedAccessKeyName and SharedAccessKey (or SharedAccessSignature)")
    if "entitypath" in pairs:
        # A queue-scoped string: the trigger would read that entity whatever %CASE_EVENTS_QUEUE% says.
        raise ConnectionStringError(f"{name} must be a namespace connection string, without EntityPath")
    return ServiceBusNamespace(host=url.netloc, emulator=pairs.get("usedevelopmentemulator", "").lower() == "true")
