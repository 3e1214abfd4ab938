"""``casekeeper init-store``: create the Cosmos DB database and containers the app's settings name.

For the Cosmos DB emulator (and any account you may write containers in with a key). In Azure, infra creates
them (``infra/app/cosmos.bicep``), and the app's identity may not: its data-plane role cannot create
containers. The containers are the store's (``casekeeper.core.ports.CONTAINERS``, partition key ``/<field>``)
and the reconciler trigger's lease container (``leases``, partition key ``/id``), which the trigger does not
create itself (``create_lease_container_if_not_exists=False``).

Settings come from the environment, falling back to ``./local.settings.json``, as every ``--from-settings``
command reads them. Running it again changes nothing. Exit codes: 0 done, 2 settings or store error.
"""

from __future__ import annotations

import argparse
import sys

from casekeeper import CONTAINERS
from casekeeper.errors import CasekeeperError, StoreUnavailable
from shared.app.settings import Settings
from shared.functions import CONTAINER_LEASES
from shared.operator.context import app_settings_values, error

PROG = "casekeeper init-store"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.parse_args(argv)
    try:
        settings = Settings.from_mapping(app_settings_values(), receives_events=False)
    except CasekeeperError as exc:
        error(PROG, str(exc))
        return 2
    if settings.store != "cosmos" or not settings.cosmos_endpoint:
        error(PROG, "the settings select no Cosmos DB store (CASEKEEPER_STORE=cosmos): nothing to create")
        return 2
    from casekeeper.stores.cosmos import cosmos_store_from_settings

    store = cosmos_store_from_settings(settings.cosmos_endpoint, settings.cosmos_database, settings.cosmos_key)
    try:
        store.ensure_containers(lease_containers=(CONTAINER_LEASES,))
    except StoreUnavailable as exc:
        error(PROG, f"{exc} (is the emulator running? docker compose -f emulators/compose.yaml ps)")
        return 2
    except CasekeeperError as exc:
        error(PROG, str(exc))
        return 2
    finally:
        store.close()
    names = [*CONTAINERS, CONTAINER_LEASES]
    print(f"{settings.cosmos_endpoint} database {settings.cosmos_database}: containers {', '.join(names)} ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
