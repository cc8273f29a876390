"""The job WebSocket: rejects anonymous users, sends the history on connect, then live events."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from training.consumers import JobConsumer
from training.jobs.reporter import JobReporter, push
from training.models import JobMetric
from training.services import job_create
from training.snapshots.services import snapshot_create


def communicator(job_id: int, user) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(JobConsumer.as_asgi(), f"/ws/jobs/{job_id}/")
    comm.scope["user"] = user
    comm.scope["url_route"] = {"kwargs": {"job_id": job_id}}
    return comm


@pytest.mark.django_db(transaction=True)
def test_job_socket_sends_history_then_live_points(labeled_project, user):
    snapshot = snapshot_create(
        project=labeled_project, options={"val_split": 0.34, "trend": False, "png_folders": False}
    )
    job = job_create(project=labeled_project, snapshot=snapshot, config={"epochs": 1}, enqueue=False)
    JobMetric.objects.create(job=job, kind="step", step=1, values={"train_loss": 0.7})

    def live():
        reporter = JobReporter(job.pk, attempt=0, interval=0.0)  # no run holds the job: nothing is stored
        reporter.report_step(2, 10, train_loss=0.5, train_acc=1.0)
        push(job.pk, {"event": "status", "status": "cancelled"})

    async def scenario():
        anonymous = communicator(job.pk, AnonymousUser())
        connected, code = await anonymous.connect()
        assert not connected and code == 4401
        comm = communicator(job.pk, user)
        connected, _ = await comm.connect()
        assert connected
        history = await comm.receive_json_from(timeout=5)
        assert history["event"] == "history" and history["status"] == "queued"
        assert history["points"] == [{"kind": "step", "step": 1, "epoch": None, "train_loss": 0.7}]
        await sync_to_async(live)()
        progress = await comm.receive_json_from(timeout=5)
        assert progress["event"] == "progress" and progress["points"][0]["step"] == 2
        assert progress["progress"] == pytest.approx(0.2)
        status = await comm.receive_json_from(timeout=5)
        assert status == {"event": "status", "status": "cancelled"}
        await comm.disconnect()

    async_to_sync(scenario)()
    assert JobMetric.objects.filter(job=job).count() == 2
