"""Casekeeper's Azure Functions app (Python v2 programming model).

The Functions host imports this module to index the functions: it opens no connection. Everything is
built on first use by ``shared.app.bootstrap.services()``. Before anything else, it refuses to run on
packages compiled for another Python than the runtime's (``shared.app.runtime_check``): a build that used
another version fails here, loudly, instead of deep inside a dependency.
"""

from shared.app.runtime_check import require_matching_packages

require_matching_packages()

import azure.functions as func  # noqa: E402  (after the check: a mismatched build fails on it first)

from shared.functions.http import bp as http_bp  # noqa: E402
from shared.functions.pages import bp as pages_bp  # noqa: E402
from shared.functions.reconciler import bp as reconciler_bp  # noqa: E402
from shared.functions.timer import bp as timer_bp  # noqa: E402
from shared.functions.worker import bp as worker_bp  # noqa: E402


def create_app() -> func.FunctionApp:
    """A new app with every Blueprint registered. ``get_functions()`` may be called once per app, so
    the local host and tests each make their own."""
    application = func.FunctionApp()
    for blueprint in (http_bp, pages_bp, worker_bp, reconciler_bp, timer_bp):
        application.register_functions(blueprint)
    return application


app = create_app()
