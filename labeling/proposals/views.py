"""The page of a project-wide proposal generation: a progress bar while the task runs (polled by
frontend/src/pages/proposal_job.ts), a cancel button, then the counts."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render

from common.jobs.payload import job_progress_payload
from labeling import permissions as labeling_perms
from projects import access
from projects.models import Project

from ..models import ProposalJob
from ..page_data import ProposalJobPageData


@login_required
def proposal_job_page(request, pk: int, job: int):
    project = get_object_or_404(Project, pk=pk)
    access.require_page(request, labeling_perms.VIEW, project)
    proposal_job = get_object_or_404(ProposalJob, pk=job, project=project)
    context = {
        "project": project,
        "job": proposal_job,
        "progress": job_progress_payload(proposal_job),
        "can_cancel": access.can(request.user, labeling_perms.REVIEW, project),
        "page_data": ProposalJobPageData(job=proposal_job.pk),
    }
    return render(request, "labeling/proposal_job.html", context)
