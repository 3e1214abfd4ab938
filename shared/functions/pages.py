"""HTTP triggers of the approver's and the operator's pages (``shared.handlers.pages``).

Anonymous at the Functions host, like the webhook, because their authentication is elsewhere: a browser
cannot send a function key, and App Service Authentication (Easy Auth, ``infra/app/functionapp.bicep``)
signs people in and hands the app their identity in ``X-MS-CLIENT-PRINCIPAL``. Each handler refuses
a request without a principal (401) or without the app role the page needs (403).
"""

from __future__ import annotations

import azure.functions as func

from shared.app.bootstrap import services
from shared.functions.failures import reported
from shared.handlers import pages
from shared.web.render import Page

bp = func.Blueprint()


def _reply(page: Page) -> func.HttpResponse:
    headers = {k: v for k, v in page.headers.items() if k.lower() != "content-type"}
    return func.HttpResponse(page.body, status_code=page.status, headers=headers, mimetype="text/html", charset="utf-8")


@bp.function_name("approvals_page")
@bp.route(route="approvals", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
@reported
def approvals_page(req: func.HttpRequest) -> func.HttpResponse:
    """The pending approvals, oldest first."""
    return _reply(pages.approvals_list(services().pages, req.headers))


@bp.function_name("approval_page")
@bp.route(route="approvals/{caseId}/{requestId}", methods=["GET", "POST"], auth_level=func.AuthLevel.ANONYMOUS)
@reported
def approval_page(req: func.HttpRequest) -> func.HttpResponse:
    """One approval request (GET), and its form's answer (POST)."""
    case_id, request_id = req.route_params["caseId"], req.route_params["requestId"]
    if req.method.upper() == "POST":
        return _reply(
            pages.answer_approval(services().pages, req.headers, req.url, case_id, request_id, body=req.get_body())
        )
    return _reply(pages.approval_page(services().pages, req.headers, case_id, request_id, dict(req.params)))


@bp.function_name("case_page")
@bp.route(route="cases/{caseId}/page", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
@reported
def case_page(req: func.HttpRequest) -> func.HttpResponse:
    """One case: facts, the money rule, effects, timeline, approvals, and what to do next."""
    return _reply(pages.case_page(services().pages, req.headers, req.route_params["caseId"]))


@bp.function_name("ops_page")
@bp.route(route="ops", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
@reported
def ops_page(req: func.HttpRequest) -> func.HttpResponse:
    """What is stuck: cases by status, pending effects, escalations, alerts, dead letters, drain check."""
    return _reply(pages.ops_page(services().pages, req.headers))


@bp.function_name("ops_redrive")
@bp.route(route="ops/redrive", methods=["POST"], auth_level=func.AuthLevel.ANONYMOUS)
@reported
def ops_redrive(req: func.HttpRequest) -> func.HttpResponse:
    """The ops page's redrive button."""
    return _reply(pages.ops_redrive(services().pages, req.headers, req.url, req.get_body()))


@bp.function_name("ops_resolve")
@bp.route(route="ops/resolve", methods=["POST"], auth_level=func.AuthLevel.ANONYMOUS)
@reported
def ops_resolve(req: func.HttpRequest) -> func.HttpResponse:
    """The ops page's form that settles an escalated effect (as ``casekeeper effects resolve``)."""
    return _reply(pages.ops_resolve(services().pages, req.headers, req.url, req.get_body()))
