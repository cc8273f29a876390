"""URLs of the reward-hacking monitor (included by inference/urls.py)."""

from django.urls import path

from . import views as monitor_views

urlpatterns = [
    path("api/deployments/<slug:name>/health", monitor_views.DeploymentHealthView.as_view(), name="deployment-health"),
    path(
        "api/deployments/<slug:name>/monitor",
        monitor_views.DeploymentMonitorView.as_view(),
        name="api-deployment-monitor",
    ),
    path("deployments/<slug:name>/monitor", monitor_views.monitor_page, name="deployment-monitor"),
]
