"""The job kit (common.jobs): guarded moves of a job, the heartbeat thread, the progress payload, and
the one beat sweep over every kind of job (training jobs, snapshot builds, imports, proposal generations)."""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta

import pytest
from django.apps import apps
from django.db.models import Max, Q
from django.utils import timezone

from common.jobs.api import JOB_PROGRESS_FIELDS
from common.jobs.models import Job
from common.jobs.payload import job_progress_payload
from common.jobs.services import JobHeartbeat, job_claim, job_finish, job_progress
from labeling.models import ImportJob, ProposalJob
from labeling.proposals.serializers import ProposalJobOut
from training.models import DatasetSnapshot, TrainingJob
from webapp import celery


def _snapshot(project, **fields) -> DatasetSnapshot:
    number = (DatasetSnapshot.objects.filter(project=project).aggregate(n=Max("number"))["n"] or 0) + 1
    return DatasetSnapshot.objects.create(project=project, number=number, **fields)


MAKE = {
    "training": lambda project, **f: TrainingJob.objects.create(
        project=project, snapshot=_snapshot(project, status="ready"), **f
    ),
    "snapshots": _snapshot,
    "imports": lambda project, **f: ImportJob.objects.create(project=project, folder="/nonexistent/upload", **f),
    "proposals": lambda project, **f: ProposalJob.objects.create(project=project, **f),
}


def test_every_job_row_is_the_kits_and_the_sweep_knows_every_kind():
    """A new kind of background job inherits the kit's row and joins the sweep (webapp.celery.job_kinds)."""
    models = apps.get_models()
    jobs = {model for model in models if issubclass(model, Job)}
    assert {model for model in models if any(f.name == "heartbeat_at" for f in model._meta.fields)} == jobs
    assert [kind.name for kind in celery.job_kinds()] == list(MAKE)
    assert {kind.model for kind in celery.job_kinds()} == jobs


@pytest.mark.parametrize("name", list(MAKE))
@pytest.mark.django_db
def test_the_sweep_requeues_a_job_lost_with_its_worker_and_fails_it_after_its_last_attempt(
    name, project, settings, monkeypatch, django_capture_on_commit_callbacks
):
    kinds = celery.job_kinds()
    kind = next(k for k in kinds if k.name == name)
    setattr(settings, kind.stale_after_setting, 60)
    setattr(settings, kind.max_attempts_setting, 2)
    sent: list[int] = []
    swept_kinds = tuple(dataclasses.replace(k, enqueue=sent.append) if k is kind else k for k in kinds)
    monkeypatch.setattr(celery, "job_kinds", lambda: swept_kinds)
    life, now = kind.model.lifecycle, timezone.now()
    lost, spent, alive = (
        MAKE[name](project, status=life.running, attempt=attempt, heartbeat_at=now - timedelta(seconds=age))
        for attempt, age in ((1, 600), (2, 600), (1, 5))
    )

    with django_capture_on_commit_callbacks(execute=True):
        swept = celery.sweep_stale_jobs()

    assert swept[name] == {"requeued": [lost.pk], "failed": [spent.pk], "resent": []}
    assert sent == [lost.pk]  # its message goes out again once the requeue commits
    rows = {row.pk: row for row in kind.model.objects.filter(pk__in=[lost.pk, spent.pk, alive.pk])}
    assert (rows[lost.pk].status, rows[lost.pk].heartbeat_at, rows[lost.pk].finished) == (life.queued, None, False)
    failed = rows[spent.pk]
    assert failed.status == life.failed and failed.finished and failed.finished_at is not None
    assert failed.error.startswith(
        f"no heartbeat from its worker for over 60 s; gave up after 2 of 2 attempts ({kind.max_attempts_setting})"
    )
    assert "\n" not in failed.error
    assert (rows[alive.pk].status, rows[alive.pk].attempt) == (life.running, 1)  # a fresh heartbeat is alive

    assert job_claim(kind.model, pk=lost.pk) == 2  # the next run takes the requeued job as its second attempt
    with django_capture_on_commit_callbacks(execute=True):
        again = celery.sweep_stale_jobs()
    assert again[name] == {"requeued": [], "failed": [], "resent": []} and sent == [lost.pk]


@pytest.mark.django_db
def test_a_job_moves_only_from_the_state_each_move_expects(project):
    job = ProposalJob.objects.create(project=project)
    assert job_claim(ProposalJob, pk=job.pk, where=Q(total=5)) is None  # not a job the caller wanted
    assert job_claim(ProposalJob, pk=job.pk, total=4) == 1
    assert job_claim(ProposalJob, pk=job.pk) is None  # a duplicate message: the job is taken
    assert job_progress(ProposalJob, pk=job.pk, attempt=1, progress=1.7, done=2)
    assert not job_progress(ProposalJob, pk=job.pk, attempt=0, progress=0.1)  # another run's write
    job.refresh_from_db()
    assert (job.status, job.attempt, job.total, job.done, job.progress) == ("running", 1, 4, 2, 1.0)
    assert job.started_at is not None and job.heartbeat_at is not None

    with pytest.raises(ValueError):
        job_finish(ProposalJob, pk=job.pk, attempt=1, status="running")
    assert not job_finish(ProposalJob, pk=job.pk, attempt=0, status="failed", error="a stale run")
    assert job_finish(ProposalJob, pk=job.pk, status="cancelled")  # a cancel ends any active job
    assert not job_finish(ProposalJob, pk=job.pk, attempt=1, status="succeeded")  # the run lost to the cancel
    job.refresh_from_db()
    assert (job.status, job.error, job.finished) == ("cancelled", "", True)

    done = ProposalJob.objects.create(project=project)
    attempt = job_claim(ProposalJob, pk=done.pk)
    assert attempt is not None and job_finish(ProposalJob, pk=done.pk, attempt=attempt, status="succeeded")
    done.refresh_from_db()
    assert (done.status, done.progress, done.percent) == ("succeeded", 1.0, 100)


@pytest.mark.django_db
def test_a_snapshot_building_is_queued_until_a_build_claims_it_and_running_while_that_build_beats(project):
    snapshot = _snapshot(project)
    no_live_build = Q(heartbeat_at__isnull=True)
    assert job_claim(DatasetSnapshot, pk=snapshot.pk, where=no_live_build) == 1
    assert job_claim(DatasetSnapshot, pk=snapshot.pk, where=no_live_build) is None  # a build holds it
    assert job_progress(DatasetSnapshot, pk=snapshot.pk, attempt=1, progress=0.25, frames_done=1, frames_total=4)
    snapshot.refresh_from_db()
    assert (snapshot.status, snapshot.percent, snapshot.finished) == ("building", 25, False)
    assert job_finish(DatasetSnapshot, pk=snapshot.pk, attempt=1, status="ready")
    assert DatasetSnapshot.objects.get(pk=snapshot.pk).finished


@pytest.mark.django_db(transaction=True)
def test_a_heartbeat_keeps_only_its_own_run_fresh(project):
    old = timezone.now() - timedelta(minutes=30)
    job = ImportJob.objects.create(project=project, status="running", attempt=2, folder="x", heartbeat_at=old)
    with JobHeartbeat(ImportJob, job.pk, attempt=1, interval=0.05):
        time.sleep(0.3)  # a run the sweep presumed dead (its job was requeued and taken again): no heartbeat
    assert ImportJob.objects.get(pk=job.pk).heartbeat_at == old
    with JobHeartbeat(ImportJob, job.pk, attempt=2, interval=0.05):
        time.sleep(0.3)
    assert ImportJob.objects.get(pk=job.pk).heartbeat_at > old + timedelta(minutes=29)


@pytest.mark.django_db
def test_pages_and_apis_show_one_progress_payload(project):
    job = ProposalJob.objects.create(project=project, status="running", attempt=1, progress=0.42, total=50, done=21)
    ProposalJob.objects.filter(pk=job.pk).update(started_at=timezone.now(), heartbeat_at=timezone.now())
    job.refresh_from_db()
    payload = job_progress_payload(job)
    assert list(payload) == JOB_PROGRESS_FIELDS
    assert (payload["status"], payload["percent"], payload["finished"], payload["attempt"]) == ("running", 42, False, 1)
    api = ProposalJobOut(job).data
    assert {key: api[key] for key in JOB_PROGRESS_FIELDS} == payload
