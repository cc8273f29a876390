"""Import and proposal jobs whose worker is gone: the beat sweep (`labeling.tasks.fail_stale_jobs`) fails a
job whose row has not moved for longer than a task may run, with the reason on its page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from labeling.models import ImportJob, ProposalJob
from labeling.tasks import fail_stale_jobs


def _aged(model, *, status: str, seconds: float, **fields):
    row = model.objects.create(status=status, **fields)
    model.objects.filter(pk=row.pk).update(updated_at=timezone.now() - timedelta(seconds=seconds))
    return row


@pytest.mark.django_db
def test_the_sweep_fails_only_jobs_silent_longer_than_a_task_may_run(project, user_client, settings, tmp_path):
    settings.IMPORT_TIME_LIMIT_SECONDS = settings.PROPOSALS_TIME_LIMIT_SECONDS = 600
    uploads = tmp_path / "upload"
    (uploads / "0").mkdir(parents=True)
    lost_import = _aged(ImportJob, status="running", seconds=700, project=project, folder=str(uploads))
    busy_import = _aged(ImportJob, status="running", seconds=600, project=project, folder=str(tmp_path / "b"))
    waiting_import = _aged(ImportJob, status="queued", seconds=7000, project=project, folder=str(tmp_path / "c"))
    lost_proposals = _aged(ProposalJob, status="queued", seconds=700, project=project)
    busy_proposals = _aged(ProposalJob, status="running", seconds=600, project=project)

    assert fail_stale_jobs() == {"imports": [lost_import.pk], "proposals": [lost_proposals.pk]}

    statuses = {row.pk: row.status for row in ImportJob.objects.all()}
    assert statuses == {lost_import.pk: "failed", busy_import.pk: "running", waiting_import.pk: "queued"}
    assert not uploads.exists()  # the lost import's upload is removed
    assert ProposalJob.objects.get(pk=busy_proposals.pk).status == "running"
    lost_import.refresh_from_db()
    lost_proposals.refresh_from_db()
    assert lost_import.finished_at is not None and lost_proposals.finished_at is not None
    import_page = user_client.get(f"/projects/{project.pk}/import/{lost_import.pk}/").content.decode()
    assert "nothing moved for over 660 s" in import_page and "IMPORT_TIME_LIMIT_SECONDS" in import_page
    assert "PROPOSALS_TIME_LIMIT_SECONDS" in lost_proposals.error
    assert fail_stale_jobs() == {"imports": [], "proposals": []}  # nothing twice


@pytest.mark.django_db
def test_an_import_that_moves_keeps_its_row_fresh(project, settings, tmp_path, monkeypatch):
    from labeling import import_jobs

    folder = tmp_path / "upload"
    (folder / "0").mkdir(parents=True)
    (folder / "0" / "a.pkl").write_bytes(b"")
    job = _aged(ImportJob, status="queued", seconds=7200, project=project, folder=str(folder))
    seen = []

    def import_paths(*, on_sources, on_progress, **kwargs):
        on_sources(1)
        seen.append(ImportJob.objects.get(pk=job.pk).updated_at)
        raise import_jobs.SourceError("not an episode")

    monkeypatch.setattr(import_jobs, "import_paths", import_paths)
    import_jobs.import_job_run(job.pk)
    assert seen[0] > timezone.now() - timedelta(seconds=60)  # progress moved the row while running
    assert import_jobs.import_jobs_fail_stale() == []
