"""Inference URLs: the deployments API, the rewards endpoint and the served-frames gallery, then the
inference rooms' own URL modules (teleop, VLM, reward-hacking monitor)."""

from django.urls import include, path

from . import access_api, api
from .pages import deploy, manage
from .shm import api as shm_api

urlpatterns = [
    path("api/deployments/", api.DeploymentListView.as_view(), name="deployment-list"),
    path("api/deployments/<slug:name>/", api.DeploymentDetailView.as_view(), name="deployment-detail"),
    path("api/deployments/<slug:name>/rewards", api.RewardsView.as_view(), name="deployment-rewards"),
    path("api/shm", shm_api.SameHostView.as_view(), name="same-host"),
    path("api/deployments/<slug:name>/model", api.DeploymentModelView.as_view(), name="deployment-model"),
    path("api/deployments/<slug:name>/pause", api.DeploymentPauseView.as_view(), name="deployment-pause"),
    path("api/deployments/<slug:name>/resume", api.DeploymentResumeView.as_view(), name="deployment-resume"),
    path("api/deployments/<slug:name>/history", api.DeploymentHistoryView.as_view(), name="deployment-history"),
    path("api/deployments/<slug:name>/access", access_api.DeploymentAccessView.as_view(), name="deployment-access"),
    path("deployments/", deploy.deployment_list, name="deployments"),
    path("models/<int:model_id>/deploy", deploy.deploy_model, name="model-deploy"),
    path("deployments/<slug:name>/", manage.deployment_page, name="deployment-page"),
    path("deployments/<slug:name>/switch", manage.deployment_switch, name="deployment-switch"),
    path("deployments/<slug:name>/settings", manage.deployment_settings, name="deployment-settings"),
    path("deployments/<slug:name>/pause", manage.deployment_pause, name="deployment-pause-page"),
    path("deployments/<slug:name>/delete", manage.deployment_delete, name="deployment-delete"),
    path("deployments/<slug:name>/gallery", deploy.gallery, name="deployment-gallery"),
    path("deployments/<slug:name>/gallery/<int:frame_id>/label", deploy.gallery_label, name="deployment-gallery-label"),
    path("", include("inference.teleop.urls")),
    path("", include("inference.vlm.urls")),
    path("", include("inference.monitor.urls")),
]
