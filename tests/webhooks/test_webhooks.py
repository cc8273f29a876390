"""Webhooks: a real Celery worker delivers a signed event to an HTTP server when a training job finishes;
failed attempts are logged and retried with backoff; only subscribed events are sent."""

from __future__ import annotations

import json
import time
from unittest import mock

import pytest

from tests.training.conftest import seed_episodes
from webhooks import events
from webhooks.models import Webhook, WebhookDelivery
from webhooks.services import delivery_attempt, webhook_emit

TINY = {
    "hidden_dim": 8,
    "image_size": [3, 32, 32],
    "batch_size": 8,
    "epochs": 1,
    "patience": 0,
    "seed": 0,
    "num_threads": 1,
    "pretrained": False,
    "warmup_steps": 0,
}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_celery_delivers_a_signed_webhook_when_a_job_finishes(project, receiver, celery_worker_process):
    from training.services import job_create
    from training.snapshot_services import snapshot_create

    hook = Webhook.objects.create(project=project, url=receiver.url, events=[events.JOB_SUCCEEDED, events.JOB_FAILED])
    Webhook.objects.create(project=project, url=receiver.url + "/snapshots-only", events=[events.DEPLOYMENT_SWITCHED])
    with mock.patch("labeling.services._queue_proposals"):  # no proposal tasks racing the test's teardown
        seed_episodes(project, episodes=3, steps=6, windows=False)
    snapshot = snapshot_create(
        project=project,
        options={"val_split": 0.34, "fail_success_ratio": 1.0, "seed": 0, "trend": False, "png_folders": False},
    )
    job = job_create(project=project, snapshot=snapshot, config=TINY)

    deadline = time.monotonic() + 180
    while not receiver.received and time.monotonic() < deadline:
        time.sleep(0.3)
    job.refresh_from_db()
    assert receiver.received, f"no webhook arrived; job {job.status}: {job.error}"
    got = receiver.received[0]
    assert got["headers"][events.EVENT_HEADER] == "job.succeeded", job.error
    assert events.verify(hook.secret, got["body"], got["headers"][events.SIGNATURE_HEADER])
    assert not events.verify("another-secret", got["body"], got["headers"][events.SIGNATURE_HEADER])
    payload = json.loads(got["body"])
    assert payload["event"] == "job.succeeded" and payload["project"]["name"] == project.name
    assert payload["data"]["job"]["id"] == job.pk and payload["data"]["models"]
    delivery = WebhookDelivery.objects.get(pk=payload["id"])
    assert delivery.status == "delivered" and delivery.attempts == 1 and delivery.response_status == 200
    assert len(receiver.received) == 1  # the deployment-only hook got nothing


@pytest.mark.django_db
def test_failed_attempts_are_logged_and_retried_with_backoff(project, receiver, django_capture_on_commit_callbacks):
    hook = Webhook.objects.create(project=project, url=receiver.url, events=[events.SNAPSHOT_READY])
    with django_capture_on_commit_callbacks() as queued:
        (delivery_id,) = webhook_emit(project_id=project.pk, event=events.SNAPSHOT_READY, data={"snapshot": {"id": 7}})
    assert len(queued) == 1  # handed to Celery only once the emitter's transaction commits

    receiver.statuses = [500, 503]
    assert delivery_attempt(delivery_id=delivery_id) == events.backoff_s(1) == 10
    assert delivery_attempt(delivery_id=delivery_id) == events.backoff_s(2) == 20
    delivery = WebhookDelivery.objects.get(pk=delivery_id)
    assert (delivery.status, delivery.attempts, delivery.response_status) == ("pending", 2, 503)
    assert delivery.next_attempt_at and delivery.last_attempt_at
    assert delivery.error == "HTTP 503" and delivery.next_attempt_at > delivery.last_attempt_at
    assert delivery_attempt(delivery_id=delivery_id) is None
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.response_body) == ("delivered", 3, "thanks")
    bodies = {r["body"] for r in receiver.received}
    assert len(bodies) == 1  # every attempt sends the same signed body
    assert all(events.verify(hook.secret, r["body"], r["headers"][events.SIGNATURE_HEADER]) for r in receiver.received)

    hook.url = "http://127.0.0.1:9/unreachable"
    hook.save()
    (gone,) = webhook_emit(project_id=project.pk, event=events.SNAPSHOT_READY, data={})
    for _ in range(events.MAX_ATTEMPTS - 1):
        assert delivery_attempt(delivery_id=gone) is not None
    assert delivery_attempt(delivery_id=gone) is None
    failed = WebhookDelivery.objects.get(pk=gone)
    assert failed.status == "failed" and failed.attempts == events.MAX_ATTEMPTS and "Connection" in failed.error
    assert events.backoff_s(30) == events.BACKOFF_MAX_S


@pytest.mark.django_db
def test_only_subscribed_events_and_known_names(project):
    from django.core.exceptions import ValidationError

    Webhook.objects.create(project=project, url="http://127.0.0.1:9/x", events=[events.JOB_FAILED])
    Webhook.objects.create(project=project, url="http://127.0.0.1:9/y", events=[events.JOB_FAILED], active=False)
    assert webhook_emit(project_id=project.pk, event=events.JOB_SUCCEEDED, data={}) == []
    assert len(webhook_emit(project_id=project.pk, event=events.JOB_FAILED, data={})) == 1
    with pytest.raises(ValueError, match="unknown webhook event"):
        webhook_emit(project_id=project.pk, event="job.exploded", data={})
    bad = Webhook(project=project, url="ftp://example.org/x", events=["job.exploded"])
    with pytest.raises(ValidationError) as err:
        bad.full_clean()
    assert "url" in err.value.message_dict and "unknown event(s) job.exploded" in str(err.value.message_dict["events"])


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_reward_hacking_alarm_fires_a_signed_alarm_webhook_retried_by_celery(
    project, receiver, celery_worker_process
):
    """The monitor's alarm emits `alarm.raised`; a real Celery worker delivers it, and retries it after the
    receiver's first answer (503) with the usual backoff."""
    from asgiref.sync import async_to_sync

    from inference.broker import dump_npy
    from inference.models import DeploymentMonitor
    from inference.monitor_store import ServedBatch, monitor_flush, monitor_submit
    from inference.serving import deployment_config
    from tests.inference.conftest import deploy, make_trained_model, random_images

    hook = Webhook.objects.create(project=project, url=receiver.url, events=[events.ALARM_RAISED])
    Webhook.objects.create(project=project, url=receiver.url + "/jobs-only", events=[events.JOB_SUCCEEDED])
    receiver.statuses = [503]
    deployment = deploy(make_trained_model(project))
    DeploymentMonitor.objects.create(deployment=deployment, hold_s=1.0, min_items=4, false_success_threshold=0.3)
    config, payload, start = async_to_sync(deployment_config)(deployment.name), dump_npy(random_images(4)), time.time()
    with mock.patch("labeling.services._queue_proposals"):  # the alarm's monitor episode queues none here
        for t in range(4):
            monitor_submit(ServedBatch(config, payload, [0.9] * 4, [False] * 4, ["ep"] * 4, "rl-7", start + 0.5 * t))
        monitor_flush()
        deadline = time.monotonic() + 60 + events.backoff_s(1)
        while len(receiver.received) < 2 and time.monotonic() < deadline:
            time.sleep(0.3)
    assert len(receiver.received) == 2, receiver.received  # 503, then delivered on the retry
    first, second = receiver.received
    assert first["body"] == second["body"] and second["headers"][events.EVENT_HEADER] == "alarm.raised"
    assert events.verify(hook.secret, second["body"], second["headers"][events.SIGNATURE_HEADER])
    payload_json = json.loads(second["body"])
    data = payload_json["data"]
    assert payload_json["event"] == "alarm.raised" and payload_json["project"]["id"] == project.pk
    assert data["deployment"]["name"] == deployment.name and data["run"] == "rl-7"
    assert data["false_success_rate"] > 0.3 and data["threshold"] == 0.3 and data["frames_queued"] > 0
    assert data["health"] == f"/api/deployments/{deployment.name}/health"
    delivery = WebhookDelivery.objects.get(pk=payload_json["id"])
    assert (delivery.status, delivery.attempts, delivery.response_status) == ("delivered", 2, 200)
