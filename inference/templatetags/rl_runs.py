"""`{% rl_runs_panel deployment %}`: on a deployment's page, the RL runs that sent the env's success with their
reward requests, each with its env success and mean reward over training (inference/monitor/run_progress.py)."""

from __future__ import annotations

import time

from django import template

from ..monitor import run_progress
from ..monitor.services import ref_of

register = template.Library()
HOURS = 48.0  # the monitor keeps its buckets two days


@register.inclusion_tag("inference/_deployment_rl_runs.html")
def rl_runs_panel(deployment) -> dict:
    points = run_progress.run_progress_points(ref_of(deployment.name, deployment.pk), hours=HOURS, now=time.time())
    return {
        "deployment": deployment,
        "runs": run_progress.panel_runs(points),
        "width": run_progress.CHART_W,
        "height": run_progress.CHART_H,
    }
