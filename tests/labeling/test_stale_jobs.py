"""What the job sweep (beat's `webapp.sweep_stale_jobs`) owes imports and proposal jobs beyond the rule every
kind shares (tests/webapp/test_job_kit.py): a failed import's upload is removed and its page says why,
a queued import waits as long as it takes, a queued proposal job no worker took is failed, and a requeued
import is imported by a real worker from the upload it kept."""

from __future__ import annotations

import pickle
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from labeling.models import Episode, ImportJob, ProposalJob
from tests.labeling.import_builders import rlinf_episode
from webapp.celery import sweep_stale_jobs


def _aged(model, *, status: str, seconds: float, **fields):
    at = timezone.now() - timedelta(seconds=seconds)
    moment = {"heartbeat_at": at} if status == "running" else {"enqueued_at": at}
    return model.objects.create(status=status, **moment, **fields)


def _upload(folder, episode_number: int = 5):
    (folder / "0").mkdir(parents=True)
    name = f"rank_0_env_0_episode_{episode_number}_success.pkl"
    (folder / "0" / name).write_bytes(pickle.dumps(rlinf_episode(num_actions=2)))
    return folder


@pytest.mark.django_db
def test_the_sweep_removes_a_failed_imports_upload_and_fails_untaken_proposal_jobs(
    project, user_client, settings, tmp_path
):
    settings.JOBS_STALE_AFTER_SECONDS, settings.JOBS_MAX_ATTEMPTS = 180, 3
    settings.PROPOSALS_TIME_LIMIT_SECONDS = 600
    spent = _upload(tmp_path / "b")
    spent_import = _aged(ImportJob, status="running", seconds=200, attempt=3, project=project, folder=str(spent))
    waiting_import = _aged(ImportJob, status="queued", seconds=7000, project=project, folder=str(tmp_path / "d"))
    untaken_proposals = _aged(ProposalJob, status="queued", seconds=700, project=project)
    waiting_proposals = _aged(ProposalJob, status="queued", seconds=100, project=project)

    swept = sweep_stale_jobs()

    assert swept["imports"] == {"requeued": [], "failed": [spent_import.pk], "resent": []}
    assert swept["proposals"] == {"requeued": [], "failed": [untaken_proposals.pk], "resent": []}
    assert not spent.exists()  # the failed import's upload is removed
    assert ImportJob.objects.get(pk=waiting_import.pk).status == "queued"  # its message may wait behind others
    page = user_client.get(f"/projects/{project.pk}/import/{spent_import.pk}/").content.decode()
    assert "no heartbeat from its worker for over 180 s" in page and "JOBS_MAX_ATTEMPTS" in page
    assert "Upload the files again" in page
    assert "PROPOSALS_TIME_LIMIT_SECONDS" in ProposalJob.objects.get(pk=untaken_proposals.pk).error
    assert ProposalJob.objects.get(pk=waiting_proposals.pk).status == "queued"
    assert sweep_stale_jobs()["proposals"]["failed"] == []  # nothing twice


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_import_whose_worker_died_is_requeued_and_imported_by_a_worker(project, tmp_path, celery_worker_process):
    """The row as a `kill -9` of the ingest worker leaves it: running, its upload kept, no heartbeat since."""
    folder = _upload(tmp_path / "upload")
    # older than JOBS_STALE_AFTER_SECONDS (180 s by default)
    job = _aged(ImportJob, status="running", seconds=200, project=project, attempt=1, total=1, folder=str(folder))

    assert sweep_stale_jobs()["imports"]["requeued"] == [job.pk]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.finished:
            break
        time.sleep(0.5)
    assert job.status == "succeeded", (job.status, job.error)
    assert job.attempt == 2 and job.summary["episodes"] == 1
    assert Episode.objects.filter(project=project).count() == 1
    assert not folder.exists()
