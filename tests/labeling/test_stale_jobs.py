"""Import and proposal jobs whose worker is gone (killed, out of memory): a running job keeps a heartbeat, and
the beat sweep (`labeling.tasks.fail_stale_jobs`) requeues one whose heartbeat is older than
JOBS_STALE_AFTER_SECONDS, or fails it with the reason once it lost JOBS_MAX_ATTEMPTS runs. A requeued
import is imported by a real worker from the upload it kept."""

from __future__ import annotations

import pickle
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from labeling.job_liveness import Heartbeat
from labeling.models import Episode, ImportJob, ProposalJob
from labeling.tasks import fail_stale_jobs
from tests.labeling.import_builders import rlinf_episode


def _aged(model, *, status: str, seconds: float, **fields):
    row = model.objects.create(status=status, **fields)
    model.objects.filter(pk=row.pk).update(updated_at=timezone.now() - timedelta(seconds=seconds))
    return row


def _upload(folder, episode_number: int = 5):
    (folder / "0").mkdir(parents=True)
    name = f"rank_0_env_0_episode_{episode_number}_success.pkl"
    (folder / "0" / name).write_bytes(pickle.dumps(rlinf_episode(num_actions=2)))
    return folder


@pytest.mark.django_db
def test_the_sweep_requeues_silent_jobs_and_fails_them_after_the_last_attempt(project, user_client, settings, tmp_path):
    settings.JOBS_STALE_AFTER_SECONDS, settings.JOBS_MAX_ATTEMPTS = 180, 3
    settings.PROPOSALS_TIME_LIMIT_SECONDS = 600
    lost_import = _aged(
        ImportJob, status="running", seconds=200, attempt=1, project=project, folder=str(tmp_path / "a")
    )
    spent = _upload(tmp_path / "b")
    spent_import = _aged(ImportJob, status="running", seconds=200, attempt=3, project=project, folder=str(spent))
    beating_import = _aged(ImportJob, status="running", seconds=100, attempt=1, project=project, folder="c")
    waiting_import = _aged(ImportJob, status="queued", seconds=7000, project=project, folder=str(tmp_path / "d"))
    lost_proposals = _aged(ProposalJob, status="running", seconds=200, attempt=2, project=project)
    spent_proposals = _aged(ProposalJob, status="running", seconds=200, attempt=3, project=project)
    untaken_proposals = _aged(ProposalJob, status="queued", seconds=700, project=project)

    swept = fail_stale_jobs()

    assert swept["imports"] == {"requeued": [lost_import.pk], "failed": [spent_import.pk]}
    assert sorted(swept["proposals"]["requeued"]) == [lost_proposals.pk]
    assert sorted(swept["proposals"]["failed"]) == sorted([spent_proposals.pk, untaken_proposals.pk])
    statuses = {row.pk: row.status for row in ImportJob.objects.all()}
    assert statuses == {
        lost_import.pk: "queued",
        spent_import.pk: "failed",
        beating_import.pk: "running",
        waiting_import.pk: "queued",
    }
    assert not spent.exists()  # the failed import's upload is removed
    spent_import.refresh_from_db()
    assert spent_import.finished_at is not None
    page = user_client.get(f"/projects/{project.pk}/import/{spent_import.pk}/").content.decode()
    assert "no heartbeat for over 180 s" in page and "JOBS_MAX_ATTEMPTS" in page
    assert ProposalJob.objects.get(pk=lost_proposals.pk).status == "queued"
    assert "PROPOSALS_TIME_LIMIT_SECONDS" in ProposalJob.objects.get(pk=untaken_proposals.pk).error
    assert fail_stale_jobs() == {  # nothing twice; the requeued ones wait for their worker again
        "imports": {"requeued": [], "failed": []},
        "proposals": {"requeued": [], "failed": []},
    }


@pytest.mark.django_db(transaction=True)
def test_a_heartbeat_keeps_only_its_own_run_fresh(project):
    old = timezone.now() - timedelta(minutes=30)
    job = ImportJob.objects.create(project=project, status="running", attempt=2, folder="x")
    ImportJob.objects.filter(pk=job.pk).update(updated_at=old)
    with Heartbeat(ImportJob, job.pk, status="running", attempt=1, field="updated_at", interval=0.05):
        time.sleep(0.3)  # a run the sweep presumed dead (its job was requeued and taken again): no heartbeat
    assert ImportJob.objects.get(pk=job.pk).updated_at == old
    with Heartbeat(ImportJob, job.pk, status="running", attempt=2, field="updated_at", interval=0.05):
        time.sleep(0.3)
    assert ImportJob.objects.get(pk=job.pk).updated_at > old + timedelta(minutes=29)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_import_whose_worker_died_is_requeued_and_imported_by_a_worker(project, tmp_path, celery_worker_process):
    """The row as a `kill -9` of the ingest worker leaves it: running, its upload kept, no heartbeat since."""
    folder = _upload(tmp_path / "upload")
    job = ImportJob.objects.create(project=project, status="running", attempt=1, total=1, folder=str(folder))
    stale_after = timedelta(seconds=200)  # older than JOBS_STALE_AFTER_SECONDS (180 s by default)
    ImportJob.objects.filter(pk=job.pk).update(updated_at=timezone.now() - stale_after)

    assert fail_stale_jobs()["imports"]["requeued"] == [job.pk]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.finished:
            break
        time.sleep(0.5)
    assert job.status == "done", (job.status, job.error)
    assert job.attempt == 2 and job.summary["episodes"] == 1
    assert Episode.objects.filter(project=project).count() == 1
    assert not folder.exists()
