"""The import page: upload RLinf pickles, train.pt/val.pt payloads, mp4 videos or zips of image folders or of
LeRobot datasets."""

from __future__ import annotations

from pathlib import Path

from django import forms
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render

from common.jobs.models import JobStatus
from common.jobs.payload import job_progress_payload
from labeling import permissions as labeling_perms
from projects import access
from projects.models import Project

from ..models import ImportJob
from .jobs import import_job_create, summary_from_json
from .sources import PAYLOAD_SUFFIXES, PICKLE_SUFFIXES, ZIP_SUFFIXES
from .video_frames import VIDEO_SUFFIXES

UPLOAD_SUFFIXES = sorted(PICKLE_SUFFIXES | PAYLOAD_SUFFIXES | ZIP_SUFFIXES | VIDEO_SUFFIXES)


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", MultipleFileInput(attrs={"accept": ",".join(UPLOAD_SUFFIXES)}))
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None):
        if isinstance(data, list | tuple):
            return [super(MultipleFileField, self).clean(item, initial) for item in data]
        return [super().clean(data, initial)]


class ImportForm(forms.Form):
    # a field named like BaseForm.files: the form metaclass moves it into base_fields, so the attribute stays
    files = MultipleFileField(  # type: ignore[assignment]
        help_text=(
            "RLinf episode pickles (.pkl), train.pt / val.pt, mp4 videos (NAME.mp4, or NAME.<camera>.mp4 per camera), "
            "or a .zip of folders or of a LeRobot dataset."
        )
    )
    env_id = forms.CharField(
        required=False, max_length=100, label="Env id", help_text="For files that name none, e.g. PickCube-v1."
    )

    def clean_files(self):
        files = self.cleaned_data["files"]
        for upload in files:
            if Path(upload.name).suffix.lower() not in UPLOAD_SUFFIXES:
                raise forms.ValidationError(
                    f"{upload.name}: unsupported file type; upload {', '.join(UPLOAD_SUFFIXES)} files"
                )
        return files


@login_required
def project_import(request, pk: int):
    """The upload form; a valid upload is stored and queued, and the browser goes to the job's page."""
    project = get_object_or_404(Project, pk=pk)
    access.require_page(request, labeling_perms.MANAGE, project)
    status = 200
    if request.method == "POST":
        form = ImportForm(request.POST, request.FILES)
        if form.is_valid():
            job = import_job_create(
                project=project,
                files=form.cleaned_data["files"],
                env_id=form.cleaned_data["env_id"],
                user=request.user,
            )
            return redirect("project-import-job", pk=project.pk, job=job.pk)
        status = 400
    else:
        form = ImportForm()
    recent = ImportJob.objects.filter(project=project)[:10]
    context = {"project": project, "form": form, "suffixes": UPLOAD_SUFFIXES, "recent": recent}
    return render(request, "labeling/import.html", context, status=status)


@login_required
def project_import_job(request, pk: int, job: int):
    """Progress of one import (the page refreshes itself until the job ends), then its summary."""
    project = get_object_or_404(Project, pk=pk)
    access.require_page(request, labeling_perms.MANAGE, project)
    import_job = get_object_or_404(ImportJob, pk=job, project=project)
    summary = summary_from_json(import_job.summary) if import_job.status == JobStatus.SUCCEEDED else None
    failed = import_job.status == JobStatus.FAILED or bool(summary and summary.failed)
    context = {
        "project": project,
        "job": import_job,
        "progress": job_progress_payload(import_job),
        "summary": summary,
        "failed": failed,
        "uploaded": _uploaded_files(import_job),
    }
    return render(request, "labeling/import_job.html", context)


def _uploaded_files(job: ImportJob) -> int:
    """Files uploaded for the job (one folder each, import_job_create), shown until the worker has counted what
    it can import in them: a zip may hold many."""
    folder = Path(job.folder)
    return sum(1 for part in folder.iterdir() if part.is_dir()) if folder.is_dir() else 0
