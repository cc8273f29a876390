"""Inference URLs: the deployments API, the rewards endpoint and the served-frames gallery."""

import importlib.util

from django.urls import include, path

from . import api, pages

urlpatterns = [
    path("api/deployments/", api.DeploymentListView.as_view(), name="deployment-list"),
    path("api/deployments/<slug:name>/", api.DeploymentDetailView.as_view(), name="deployment-detail"),
    path("api/deployments/<slug:name>/rewards", api.RewardsView.as_view(), name="deployment-rewards"),
    path("api/deployments/<slug:name>/model", api.DeploymentModelView.as_view(), name="deployment-model"),
    path("deployments/", pages.deployment_list, name="deployments"),
    path("deployments/<slug:name>/gallery", pages.gallery, name="deployment-gallery"),
    path("deployments/<slug:name>/gallery/<int:frame_id>/label", pages.gallery_label, name="deployment-gallery-label"),
]

# Other inference features (teleop, VLM) add their own URL modules without editing this one.
for _module in ("inference.teleop_urls", "inference.vlm_urls", "inference.monitor_urls"):
    if importlib.util.find_spec(_module) is not None:
        urlpatterns.append(path("", include(_module)))
