"""The case worker: a session-enabled Service Bus trigger, session id = case id (rule R10).

Settlement comes from ``shared.handlers.case_events``: returning completes the message
(``autoCompleteMessages``), raising abandons it for redelivery (Service Bus triggers ignore
``@retry``; past ``maxDeliveryCount`` the broker dead-letters it). The message's application properties
carry the sender's trace context (``Diagnostic-Id``), which the ``case_event`` span continues.
"""

from __future__ import annotations

import azure.functions as func

from shared.app.bootstrap import services
from shared.functions.failures import reported
from shared.handlers.case_events import handle_case_message

bp = func.Blueprint()


@bp.function_name("case_worker")
@bp.service_bus_queue_trigger(
    arg_name="msg", connection="ServiceBusConnection", queue_name="%CASE_EVENTS_QUEUE%", is_sessions_enabled=True
)
@reported
async def case_worker(msg: func.ServiceBusMessage) -> None:
    await handle_case_message(
        services().case_events,
        msg.get_body(),
        session_id=msg.session_id,
        message_id=msg.message_id or "",
        delivery_count=msg.delivery_count or 1,
        properties=msg.application_properties,
    )
