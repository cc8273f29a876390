"""Inference URLs: the deployments API, the rewards endpoint and the served-frames gallery, then the
inference rooms' own URL modules (teleop, VLM, reward-hacking monitor)."""

from django.urls import include, path

from . import access_api, api, pages
from .shm import api as shm_api

urlpatterns = [
    path("api/deployments/", api.DeploymentListView.as_view(), name="deployment-list"),
    path("api/deployments/<slug:name>/", api.DeploymentDetailView.as_view(), name="deployment-detail"),
    path("api/deployments/<slug:name>/rewards", api.RewardsView.as_view(), name="deployment-rewards"),
    path("api/shm", shm_api.SameHostView.as_view(), name="same-host"),
    path("api/deployments/<slug:name>/model", api.DeploymentModelView.as_view(), name="deployment-model"),
    path("api/deployments/<slug:name>/access", access_api.DeploymentAccessView.as_view(), name="deployment-access"),
    path("deployments/", pages.deployment_list, name="deployments"),
    path("models/<int:model_id>/deploy", pages.deploy_model, name="model-deploy"),
    path("deployments/<slug:name>/gallery", pages.gallery, name="deployment-gallery"),
    path("deployments/<slug:name>/gallery/<int:frame_id>/label", pages.gallery_label, name="deployment-gallery-label"),
    path("", include("inference.teleop.urls")),
    path("", include("inference.vlm.urls")),
    path("", include("inference.monitor.urls")),
]
