"""Proposals: generating them and deciding on them over the API, and a generation job's page and API (status,
cancel)."""

from django.urls import path

from . import api as proposal_api
from . import views as proposal_views

urlpatterns = [
    path(
        "api/projects/<int:pk>/proposals/generate",
        proposal_api.ProposalsGenerateView.as_view(),
        name="api-proposals-generate",
    ),
    path(
        "api/projects/<int:pk>/proposals/accept",
        proposal_api.ProposalsAcceptView.as_view(),
        name="api-proposals-accept",
    ),
    path(
        "api/projects/<int:pk>/proposals/reject",
        proposal_api.ProposalsRejectView.as_view(),
        name="api-proposals-reject",
    ),
    path(
        "api/projects/<int:pk>/proposals/reopen",
        proposal_api.ProposalsReopenView.as_view(),
        name="api-proposals-reopen",
    ),
    path("projects/<int:pk>/proposals/<int:job>/", proposal_views.proposal_job_page, name="project-proposal-job"),
    path("api/proposal-jobs/<int:job_id>", proposal_api.ProposalJobView.as_view(), name="api-proposal-job"),
    path(
        "api/proposal-jobs/<int:job_id>/cancel",
        proposal_api.ProposalJobCancelView.as_view(),
        name="api-proposal-job-cancel",
    ),
]
