"""The timer: checkpoint-health alerts and the backstop sweep of stuck effects, on a schedule from settings."""

from __future__ import annotations

import azure.functions as func

from shared.app.bootstrap import services
from shared.functions.failures import reported
from shared.handlers.health import run_health_checks

bp = func.Blueprint()


@bp.function_name("checkpoint_health")
@bp.timer_trigger(arg_name="timer", schedule="%CHECKPOINT_HEALTH_SCHEDULE%")
@reported
def checkpoint_health(timer: func.TimerRequest) -> None:
    run_health_checks(services().health)
