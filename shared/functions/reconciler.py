"""The reconciler: Cosmos DB change feed on ``effects``, with a ``leases`` container made by infra
(identity-based connections cannot create it). A batch that raises is retried by ``@retry``; without
it, the batch would be lost."""

from __future__ import annotations

import azure.functions as func

from shared.bootstrap import services
from shared.functions import CONTAINER_EFFECTS, CONTAINER_LEASES
from shared.handlers.effect_changes import handle_effect_changes

bp = func.Blueprint()


@bp.function_name("reconciler")
@bp.retry(strategy="exponential_backoff", max_retry_count="8", minimum_interval="00:00:02", maximum_interval="00:05:00")
@bp.cosmos_db_trigger(
    arg_name="changes",
    connection="CosmosDBConnection",
    database_name="%COSMOS_DATABASE%",
    container_name=CONTAINER_EFFECTS,
    lease_container_name=CONTAINER_LEASES,
    create_lease_container_if_not_exists=False,
)
def reconciler(changes: func.DocumentList) -> None:
    handle_effect_changes(services(), [doc.to_dict() for doc in changes])
