"""HTML from the templates in ``templates/``, autoescaped: every value a page shows is text, never markup.

Every page goes out with ``Cache-Control: no-store`` (an approval page shows facts that change, and a
shared machine must not keep them), a Content-Security-Policy that runs only the page's own script (by
nonce) and lets forms post only to this origin, and no framing.
"""

from __future__ import annotations

import functools
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import jinja2

from shared.views.text import age_text, short, time_text


@dataclass(frozen=True)
class Page:
    """An HTML answer: status, body and headers (the security headers included)."""

    status: int
    html: str
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def body(self) -> bytes:
        return self.html.encode("utf-8")


def _compact(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(", ", ": "), default=str, ensure_ascii=False)


def approval_path(case_id: str, request_id: str) -> str:
    """The page of one approval request: ``/api/approvals/{caseId}/{requestId}`` (``shared.handlers.pages``)."""
    return f"/api/approvals/{quote(case_id, safe='')}/{quote(request_id, safe='')}"


def case_href(case_id: str) -> str:
    """The page of a case: ``/api/cases/{caseId}/page`` (``shared.handlers.case_page``)."""
    return f"/api/cases/{quote(str(case_id), safe='')}/page"


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("shared.web", "templates"),
        autoescape=True,  # every template, whatever its name: the CSS is included, not rendered from data
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(age=age_text, when=time_text, short=short, compact=_compact, casehref=case_href)
    return env


def security_headers(nonce: str) -> dict[str, str]:
    return {
        "Cache-Control": "no-store",
        "Pragma": "no-cache",
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "same-origin",
        "Content-Security-Policy": (
            f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; connect-src 'self'; "
            "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        ),
    }


def render(template: str, status: int = 200, *, headers: Mapping[str, str] | None = None, **context: Any) -> Page:
    """Render ``template`` with ``context``; the page's nonce is made here."""
    nonce = secrets.token_urlsafe(16)
    context = {"refresh": 0, "login": None, "principal": None, **context}
    html = environment().get_template(template).render(nonce=nonce, **context)
    return Page(
        status, html, {**security_headers(nonce), "Content-Type": "text/html; charset=utf-8", **(headers or {})}
    )


def redirect(location: str) -> Page:
    """303 See Other: after a form post, the browser GETs ``location`` (a reload does not post again)."""
    return Page(303, "", {**security_headers(secrets.token_urlsafe(16)), "Location": location})
