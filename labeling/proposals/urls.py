"""Proposal-generation jobs: the page that shows one, and its API (status, cancel)."""

from django.urls import path

from . import api as proposal_api
from . import views as proposal_views

urlpatterns = [
    path("projects/<int:pk>/proposals/<int:job>/", proposal_views.proposal_job_page, name="project-proposal-job"),
    path("api/proposal-jobs/<int:job_id>", proposal_api.ProposalJobView.as_view(), name="api-proposal-job"),
    path(
        "api/proposal-jobs/<int:job_id>/cancel",
        proposal_api.ProposalJobCancelView.as_view(),
        name="api-proposal-job-cancel",
    ),
]
