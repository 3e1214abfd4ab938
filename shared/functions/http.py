"""HTTP triggers: ``POST /api/events`` (HMAC-signed, anonymous), approvals and case reads (function keys)."""

from __future__ import annotations

import azure.functions as func

from shared.app.bootstrap import services
from shared.functions.failures import reported
from shared.handlers import http as handlers
from shared.handlers.ingress import Response

bp = func.Blueprint()


def _reply(response: Response) -> func.HttpResponse:
    return func.HttpResponse(response.json(), status_code=response.status, mimetype="application/json")


@bp.function_name("events")
@bp.route(route="events", methods=["POST"], auth_level=func.AuthLevel.ANONYMOUS)
@reported
def events(req: func.HttpRequest) -> func.HttpResponse:
    """The event webhook. Anonymous at the host: the HMAC signature is its authentication."""
    return _reply(handlers.post_event(services().api, req.headers, req.get_body()))


@bp.function_name("approvals")
# A machine client's answer: a function key, naming itself in "approver" (recorded as key:<name>); or,
# behind App Service Authentication, a signed-in approver (recorded by that identity).
@bp.route(route="cases/{caseId}/approvals/{requestId}", methods=["POST"], auth_level=func.AuthLevel.FUNCTION)
@reported
def approvals(req: func.HttpRequest) -> func.HttpResponse:
    case_id, request_id = req.route_params["caseId"], req.route_params["requestId"]
    return _reply(handlers.post_approval(services().api, case_id, request_id, req.get_body(), req.headers))


@bp.function_name("withdraw_request")
@bp.route(route="cases/{caseId}/requests/{effectKey}/withdraw", methods=["POST"], auth_level=func.AuthLevel.FUNCTION)
@reported
def withdraw_request(req: func.HttpRequest) -> func.HttpResponse:
    """A person takes an outstanding credit-note request off the books (with who and why)."""
    case_id, effect_key = req.route_params["caseId"], req.route_params["effectKey"]
    return _reply(handlers.post_withdrawal(services().api, case_id, effect_key, req.get_body(), req.headers))


@bp.function_name("get_case")
@bp.route(route="cases/{caseId}", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
@reported
def get_case(req: func.HttpRequest) -> func.HttpResponse:
    return _reply(handlers.get_case(services().api, req.route_params["caseId"]))


@bp.function_name("health")
@bp.route(route="health", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
@reported
def health(req: func.HttpRequest) -> func.HttpResponse:
    return _reply(handlers.health(services().api))
