"""Project-wide proposal generation runs as a job (labeling/proposals/jobs.py): one active job per project,
progress on the row, cancellable between episodes, a stale job failed; its page and API."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from labeling.models import FrameLabel, ProposalJob

from .factories import episode_with_frames

pytestmark = pytest.mark.django_db


def start(client, project):
    return client.post(f"/api/projects/{project.pk}/proposals/generate", {}, "application/json")


def test_asking_twice_while_a_job_is_active_answers_the_same_job(user_client, project):
    first = start(user_client, project)
    assert first.status_code == 202
    job = first.json()
    assert (job["status"], job["finished"], job["percent"]) == ("queued", False, 0)
    assert job["page"] == f"/projects/{project.pk}/proposals/{job['id']}/"
    again = start(user_client, project)
    assert again.status_code == 200 and again.json()["id"] == job["id"]
    assert ProposalJob.objects.filter(project=project).count() == 1


def test_the_job_goes_through_every_episode_and_records_progress_and_counts(user_client, project, monkeypatch):
    from labeling.proposals import jobs as proposal_jobs

    episodes = [episode_with_frames(project=project, num_steps=6, size=16) for _ in range(3)]
    job_id = start(user_client, project).json()["id"]
    seen = []
    real = proposal_jobs.proposals_generate

    def watching(**kwargs):  # the real generation; notes the row after each episode
        inner = kwargs.pop("on_episode")

        def on_episode(result):
            going_on = inner(result)
            row = ProposalJob.objects.get(pk=job_id)
            seen.append((row.status, row.done, row.total))
            return going_on

        return real(**kwargs, on_episode=on_episode)

    monkeypatch.setattr(proposal_jobs, "proposals_generate", watching)
    assert proposal_jobs.proposal_job_run(job_id) == "succeeded"
    assert seen == [("running", 1, 3), ("running", 2, 3), ("running", 3, 3)]
    body = user_client.get(f"/api/proposal-jobs/{job_id}").json()
    assert (body["status"], body["percent"], body["summary"]["episodes"], body["summary"]["frames_created"]) == (
        "succeeded",
        100,
        3,
        18,
    )
    assert FrameLabel.objects.filter(episode__in=episodes, source="proposal").count() == 18
    assert proposal_jobs.proposal_job_run(job_id) == "succeeded"  # a task sent twice does nothing more
    page = user_client.get(body["page"]).content.decode()
    assert 'data-status="succeeded"' in page and 'id="summary-frames-created">18<' in page
    assert "proposal_job.js" not in page  # nothing left to follow


def test_cancelling_stops_after_the_current_episode_and_keeps_its_work(user_client, project, monkeypatch):
    from labeling.proposals import jobs as proposal_jobs

    for _ in range(3):
        episode_with_frames(project=project, num_steps=5, size=16)
    job_id = start(user_client, project).json()["id"]
    real = proposal_jobs.proposals_generate

    def cancelled_after_the_first(**kwargs):  # someone presses Cancel while episode 1 is generated
        inner = kwargs.pop("on_episode")

        def on_episode(result):
            if result.episodes == 1:
                assert user_client.post(f"/api/proposal-jobs/{job_id}/cancel").status_code == 200
            return inner(result)

        return real(**kwargs, on_episode=on_episode)

    monkeypatch.setattr(proposal_jobs, "proposals_generate", cancelled_after_the_first)
    assert proposal_jobs.proposal_job_run(job_id) == "cancelled"
    job = ProposalJob.objects.get(pk=job_id)
    assert (job.done, job.total, job.summary["episodes"], job.finished_at is not None) == (1, 3, 1, True)
    assert FrameLabel.objects.filter(project=project, source="proposal").count() == 5
    again = user_client.post(f"/api/proposal-jobs/{job_id}/cancel")
    assert again.status_code == 409 and "already ended (cancelled)" in again.json()["detail"]
    # a new request starts a new job
    assert start(user_client, project).status_code == 202


def test_a_job_cancelled_while_queued_never_runs(user_client, project):
    from labeling.proposals.jobs import proposal_job_run

    episode_with_frames(project=project, num_steps=5, size=16)
    job_id = start(user_client, project).json()["id"]
    assert user_client.post(f"/api/proposal-jobs/{job_id}/cancel").json()["status"] == "cancelled"
    assert proposal_job_run(job_id) == "cancelled"
    assert not FrameLabel.objects.filter(project=project).exists()


def test_a_stale_running_job_is_requeued_then_failed_after_its_last_attempt_and_a_new_one_starts(
    user_client, project, settings
):
    job_id = start(user_client, project).json()["id"]
    long_ago = timezone.now() - timedelta(seconds=settings.JOBS_STALE_AFTER_SECONDS + 60)
    ProposalJob.objects.filter(pk=job_id).update(status="running", heartbeat_at=long_ago, attempt=1)
    again = start(user_client, project)  # its worker died: the job is requeued, not started twice
    assert again.status_code == 200 and again.json()["id"] == job_id
    assert ProposalJob.objects.get(pk=job_id).status == "queued"
    attempts = settings.JOBS_MAX_ATTEMPTS
    ProposalJob.objects.filter(pk=job_id).update(status="running", heartbeat_at=long_ago, attempt=attempts)
    fresh = start(user_client, project)
    assert fresh.status_code == 202 and fresh.json()["id"] != job_id
    stale = ProposalJob.objects.get(pk=job_id)
    assert (
        stale.status == "failed"
        and f"gave up after {attempts} of {attempts} attempts (JOBS_MAX_ATTEMPTS)" in stale.error
    )


def test_agents_with_the_labels_scope_start_jobs_and_annotators_cannot_cancel(
    project, scoped_agent_client, member_client
):
    _, agent = scoped_agent_client(["labels"], projects=[project])
    answer = agent.post(f"/api/projects/{project.pk}/proposals/generate", {}, format="json")
    assert answer.status_code == 202
    job = ProposalJob.objects.get(pk=answer.json()["id"])
    assert job.created_by is None
    annotator = member_client(project, "annotator")
    assert annotator.get(f"/api/proposal-jobs/{job.pk}").status_code == 200
    assert annotator.post(f"/api/proposal-jobs/{job.pk}/cancel").status_code == 403
    page = annotator.get(f"/projects/{project.pk}/proposals/{job.pk}/").content.decode()
    assert 'id="proposal-bar"' in page and 'id="proposal-cancel"' not in page and "proposal_job.js" in page
    assert agent.post(f"/api/proposal-jobs/{job.pk}/cancel").json()["status"] == "cancelled"


def test_a_job_whose_generation_raises_ends_failed_with_the_reason(user_client, project):
    from labeling.proposals.jobs import proposal_job_run

    episode_with_frames(project=project, num_steps=5, size=16)
    job_id = start(user_client, project).json()["id"]
    project.__class__.objects.filter(pk=project.pk).update(trend_stride=0)  # a setting the trend rule refuses
    with pytest.raises(ValueError, match="stride must be at least 1"):
        proposal_job_run(job_id)
    body = user_client.get(f"/api/proposal-jobs/{job_id}").json()
    assert (body["status"], body["finished"]) == ("failed", True)
    assert body["error"] == "ValueError: stride must be at least 1"
    page = user_client.get(body["page"]).content.decode()
    assert "Generation failed" in page and "stride must be at least 1" in page
