"""The reconciler: Cosmos DB change feed on ``cases`` (where effects are claimed and closed), with a
``leases`` container made by infra (identity-based connections cannot create it); its leases carry the
prefix ``cases-``, apart from those the trigger held on ``effects`` before the effects moved onto the cases.
A batch that raises is retried by ``@retry``; without it, the batch would be lost."""

from __future__ import annotations

import azure.functions as func

from shared.app.bootstrap import services
from shared.functions import CONTAINER_CASES, CONTAINER_LEASES, LEASE_PREFIX_CASES
from shared.functions.failures import reported
from shared.handlers.effect_changes import handle_effect_changes

bp = func.Blueprint()


@bp.function_name("reconciler")
@bp.retry(strategy="exponential_backoff", max_retry_count="8", minimum_interval="00:00:02", maximum_interval="00:05:00")
@bp.cosmos_db_trigger(
    arg_name="changes",
    connection="CosmosDBConnection",
    database_name="%COSMOS_DATABASE%",
    container_name=CONTAINER_CASES,
    lease_container_name=CONTAINER_LEASES,
    lease_container_prefix=LEASE_PREFIX_CASES,
    create_lease_container_if_not_exists=False,
    # With no lease yet (the first deployment, or after the leases container is reset), read the cases
    # container's change feed from its beginning, not only changes made from now on, as the local host's
    # feed does: effects claimed before the trigger first held a lease (the case worker may run first) are
    # then reconciled too instead of waiting for the timer's sweep. Reconciling an effect is idempotent, so
    # reading old changes again does no harm. Once leases exist, the trigger resumes from them and this
    # setting has no effect. azure-functions annotates the parameter as a time for the 4.x trigger; the
    # Cosmos DB extension reads a bool, and the binding carries "startFromBeginning": true.
    start_from_beginning=True,  # type: ignore[arg-type]
)
@reported
def reconciler(changes: func.DocumentList) -> None:
    handle_effect_changes(services().effect_changes, [doc.to_dict() for doc in changes])
