"""Training pages, API and the job state machine (no worker: jobs run in-process where needed)."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from training.evaluation.metrics import precision_difference, sanity_check
from training.models import DatasetSnapshot, JobMetric, TrainedModel, TrainingJob
from training.resnet.val_predictions import VAL_PREDICTIONS, read_val_predictions, write_val_predictions_file
from training.selectors import job_state
from training.services import JobError, job_cancel, job_create, job_delete, job_execute, job_retry
from training.snapshots.services import snapshot_build, snapshot_create
from training.storage import local_path

TINY = {"hidden_dim": 16, "image_size": [3, 32, 32], "epochs": 1, "batch_size": 16, "warmup_steps": 0, "num_threads": 1}


@pytest.fixture
def snapshot(labeled_project):
    return snapshot_create(project=labeled_project, options={"val_split": 0.34, "trend": False})


@pytest.mark.django_db
def test_training_page_lists_and_creates_snapshots(user_client, labeled_project, django_capture_on_commit_callbacks):
    page = user_client.get(f"/projects/{labeled_project.pk}/training/")
    assert page.status_code == 200 and b"New dataset snapshot" in page.content
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = user_client.post(
            f"/projects/{labeled_project.pk}/training/snapshots/new",
            {
                "sources": ["human"],
                "camera": "main",
                "num_samples_per_episode": 0,
                "keep_last_frame": "on",
                "val_split": 0.34,
                "fail_success_ratio": 2.0,
                "seed": 42,
                "trend_val_split": 0.1,
            },
        )
    snapshot = DatasetSnapshot.objects.get(project=labeled_project)
    assert response.status_code == 302 and response["Location"] == f"/snapshots/{snapshot.pk}/"
    assert snapshot.status == "building" and snapshot.created_by.username == "alice"
    assert "snapshot_start.<locals>.<lambda>" in [c.__qualname__ for c in callbacks]  # the build is queued
    building = user_client.get(response["Location"])
    assert building.status_code == 200 and b'http-equiv="refresh"' in building.content
    assert b"Building snapshot #1" in building.content
    assert snapshot_build(snapshot_id=snapshot.pk) == "ready"  # what the task runs (no worker here)
    assert snapshot_build(snapshot_id=snapshot.pk) == "ready"  # idempotent: a second run changes nothing
    snapshot.refresh_from_db()
    assert snapshot.status == "ready" and snapshot.progress == 1.0 and snapshot.frames_total > 0
    done = user_client.get(response["Location"])
    assert b"Snapshot #1 written" in done.content and b'http-equiv="refresh"' not in done.content
    page = user_client.get(f"/projects/{labeled_project.pk}/training/")
    assert f'href="/snapshots/{snapshot.pk}/"'.encode() in page.content
    download = user_client.get(f"/snapshots/{snapshot.pk}/download")
    assert download.status_code == 200 and download["Content-Disposition"].startswith("attachment")
    bad = user_client.post(
        f"/projects/{labeled_project.pk}/training/snapshots/new", {"sources": ["human"], "val_split": 5}
    )
    assert bad.status_code == 400


@pytest.mark.django_db
def test_job_form_validates_config_and_queues(user_client, snapshot, django_capture_on_commit_callbacks):
    project = snapshot.project
    base = {
        "snapshot": snapshot.pk,
        "kind": "resnet",
        "arch": "resnet18",
        "hidden_dim": 16,
        "dropout": 0.1,
        "image_height": 32,
        "image_width": 32,
        "lr": 1e-3,
        "weight_decay": 0,
        "grad_clip": 1,
        "warmup_steps": 0,
        "batch_size": 8,
        "epochs": 1,
        "crop_padding": 4,
        "patience": 0,
        "min_delta": 0.001,
        "seed": 1,
        "device": "cpu",
        "num_threads": 1,
    }
    bad = user_client.post(f"/projects/{project.pk}/training/jobs/new", {**base, "device": "tpu"})
    assert bad.status_code == 400 and b"device must be" in bad.content
    assert not TrainingJob.objects.exists()
    with django_capture_on_commit_callbacks() as callbacks:
        ok = user_client.post(f"/projects/{project.pk}/training/jobs/new", base)
    job = TrainingJob.objects.get()
    assert ok.status_code == 302 and ok["Location"] == f"/jobs/{job.pk}/"
    assert job.config["image_size"] == [3, 32, 32] and job.config["pretrained"] is False
    assert len(callbacks) == 1  # enqueued after commit
    assert (job.config["schedule"], job.config["select"], job.config["crop"]) == ("constant", "val_loss", [])
    detail = user_client.get(f"/jobs/{job.pk}/")
    assert detail.status_code == 200 and b"job.js" in detail.content


@pytest.mark.django_db
def test_job_form_sets_the_crop_schedule_and_kept_model(user_client, snapshot):
    project = snapshot.project
    url = f"/projects/{project.pk}/training/jobs/new"
    base = {"snapshot": snapshot.pk, "kind": "resnet", "arch": "resnet18", "hidden_dim": 16, "dropout": 0.1,
            "image_height": 32, "image_width": 32, "lr": 1e-3, "weight_decay": 0, "grad_clip": 1,
            "warmup_steps": 0, "batch_size": 8, "epochs": 1, "crop_padding": 4, "patience": 0, "min_delta": 0.001,
            "seed": 1, "device": "cpu", "num_threads": 1}  # fmt: skip
    page = user_client.get(f"/projects/{project.pk}/training/")
    assert all(f'name="{name}"' in page.content.decode() for name in ("crop", "schedule", "select", "bn_recalibrate"))
    for crop, message in (("0.2, 0.3", b"crop must be"), ("top", b"four numbers"), ("0.5 0.5 0.6 0.1", b"inside")):
        bad = user_client.post(url, {**base, "crop": crop})
        assert bad.status_code == 400 and message in bad.content, crop
    bad = user_client.post(url, {**base, "schedule": "linear"})
    assert bad.status_code == 400 and not TrainingJob.objects.exists()
    extra = {"crop": "0.2, 0.25 0.5,0.5", "schedule": "cosine", "select": "last", "bn_recalibrate": "on"}
    assert user_client.post(url, {**base, **extra}).status_code == 302
    config = TrainingJob.objects.get().config
    assert config["crop"] == [0.2, 0.25, 0.5, 0.5] and config["schedule"] == "cosine"
    assert config["select"] == "last" and config["bn_recalibrate"] is True
    # the README's and the API's notation too
    assert user_client.post(url, {**base, **extra, "crop": "[0.2, 0.25, 0.5, 0.5]"}).status_code == 302
    assert TrainingJob.objects.order_by("-pk").first().config["crop"] == [0.2, 0.25, 0.5, 0.5]


@pytest.mark.django_db
def test_the_job_form_folds_what_most_jobs_keep_and_shows_help_and_presets(user_client, snapshot):
    project = snapshot.project  # frames of 32 px (seed_episodes)
    html = user_client.get(f"/projects/{project.pk}/training/").content.decode()
    common, advanced = html.split('<details id="job-advanced"')
    advanced, parallel = advanced.split('<details id="job-parallel"')
    assert 'name="lr"' in common and 'name="crop"' in common and 'name="dropout"' not in common
    assert 'name="dropout"' in advanced and 'name="weight_decay"' in advanced and 'name="nodes"' not in advanced
    assert 'name="nodes"' in parallel and 'name="master_port"' in parallel
    assert "Early stopping on val_loss; 0 = off." in html  # help shown, not only in a tooltip
    assert 'data-preset="pickcube"' in html and 'data-preset="defaults"' in html

    form = user_client.get(f"/projects/{project.pk}/training/?preset=pickcube").context["job_form"]
    assert form.initial["crop"] == "" and form.initial["lr"] == 1e-3  # no crop: RLinf's class scores it as we do
    assert form.initial["image_height"] == form.initial["image_width"] == 32  # the whole 32 px frame, no resize
    assert form.initial["schedule"] == "cosine" and form.initial["select"] == "last"
    assert user_client.get(f"/projects/{project.pk}/training/?preset=nope").context["job_form"].initial == {}


@pytest.mark.django_db
def test_train_again_with_changes_fills_the_form_with_the_jobs_config_and_names_carry_to_models(user_client, snapshot):
    job = job_create(
        project=snapshot.project,
        snapshot=snapshot,
        config={**TINY, "crop": [0.1, 0.1, 0.8, 0.8], "lr": 3e-3},
        name="wide crop",
        enqueue=False,
    )
    assert b"Train again with changes" in user_client.get(f"/jobs/{job.pk}/").content
    form = user_client.get(f"/projects/{snapshot.project.pk}/training/?from_job={job.pk}").context["job_form"]
    assert form.initial["snapshot"] == snapshot.pk and form.initial["name"] == "wide crop (changed)"
    assert form.initial["crop"] == "0.1, 0.1, 0.8, 0.8" and form.initial["lr"] == 3e-3
    assert form.initial["image_height"] == 32 and form.initial["hidden_dim"] == 16
    job_execute(job_id=job.pk)
    assert TrainedModel.objects.get(job=job).name == f"wide crop (job {job.pk})"
    unnamed = job_create(project=snapshot.project, snapshot=snapshot, config=TINY, enqueue=False)
    job_execute(job_id=unnamed.pk)
    assert TrainedModel.objects.get(job=unnamed).name == f"{snapshot.project.name} resnet #{unnamed.pk}"


@pytest.mark.django_db
def test_status_machine_guards_transitions(snapshot, django_capture_on_commit_callbacks):
    job = job_create(project=snapshot.project, snapshot=snapshot, config=TINY, enqueue=False)
    with pytest.raises(JobError):
        job_retry(job=job)  # queued jobs are not retried
    job_cancel(job=job)
    assert job.status == "cancelled"
    assert job_execute(job_id=job.pk) == "skipped"  # a cancelled job never starts
    with pytest.raises(JobError):
        job_cancel(job=job)
    with django_capture_on_commit_callbacks(execute=False):
        job_retry(job=job)
    assert job.status == "queued"
    assert job_execute(job_id=job.pk) == "succeeded"
    assert job_execute(job_id=job.pk) == "skipped"  # idempotent
    job.refresh_from_db()
    model = TrainedModel.objects.get(job=job)
    assert (local_path(model.checkpoint_path) / "model.safetensors").exists()
    assert JobMetric.objects.filter(job=job, kind="epoch").count() == 1
    folder, job_id = local_path(job.checkpoint_folder), job.pk
    with django_capture_on_commit_callbacks(execute=True):
        job_delete(job=job)
    assert not TrainingJob.objects.filter(pk=job_id).exists() and not folder.exists()


@pytest.mark.django_db
def test_evaluation_page_and_api_for_a_trained_model(user_client, snapshot):
    job = job_create(project=snapshot.project, snapshot=snapshot, config=TINY, enqueue=False)
    job_execute(job_id=job.pk)
    model = TrainedModel.objects.get(job=job)
    page = user_client.get(f"/models/{model.pk}/evaluation")
    assert page.status_code == 200 and b"evaluation.js" in page.content
    data = user_client.get(f"/api/models/{model.pk}/evaluation?threshold=0.3").json()
    assert data["threshold"] == 0.3 and len(data["probabilities"]) == snapshot.stats["val"]["total"]
    assert data["items"][0]["label_url"].startswith(f"/episodes/{data['items'][0]['episode']}/label")
    assert "?step=" in data["items"][0]["label_url"] and data["items"][0]["image"].startswith("/media/frames/")
    assert set(data["summary"]) >= {"roc", "pr", "reliability", "at_threshold", "rl_preview", "sanity"}
    # the sanity check judges this model's own validation predictions (tested on its own in test_evaluation.py)
    assert data["summary"]["sanity"] == sanity_check(data["probabilities"], data["labels"])
    # bf16 and fp16 against fp32 on the same frames: bf16 measured on this CPU, fp16 refused here with the reason
    bf16, fp16 = data["precisions"]
    assert bf16["precision"] == "bf16" and bf16["device"] == "cpu" and not bf16["refused"]
    assert len(bf16["probabilities"]) == bf16["frames"] == min(256, len(data["probabilities"]))
    assert (bf16["max_abs"], bf16["mean_abs"], bf16["flips"]) == precision_difference(
        data["probabilities"][: bf16["frames"]], bf16["probabilities"], 0.3
    )
    assert 0 < bf16["max_abs"] < 0.1 and bf16["mean_abs"] <= bf16["max_abs"]
    assert fp16["precision"] == "fp16" and fp16["probabilities"] == [] and "bf16 or fp32" in fp16["refused"]
    assert user_client.get(f"/api/models/{model.pk}/evaluation?threshold=2").status_code == 400
    other = job_create(project=snapshot.project, snapshot=snapshot, config={**TINY, "seed": 5}, enqueue=False)
    job_execute(job_id=other.pk)
    b = TrainedModel.objects.get(job=other)
    compare = user_client.get(f"/projects/{snapshot.project_id}/compare?a={model.pk}&b={b.pk}")
    assert compare.status_code == 200 and b"both on the validation split of snapshot" in compare.content
    assert user_client.get(f"/projects/{snapshot.project_id}/compare?a=x").status_code == 400


@pytest.mark.django_db
def test_api_creates_snapshots_and_jobs_with_clear_errors(
    user_client, labeled_project, django_capture_on_commit_callbacks
):
    from django.test import Client

    url = f"/api/projects/{labeled_project.pk}"
    assert Client().get(f"{url}/jobs").status_code in (401, 403)  # anonymous
    bad = user_client.post(f"{url}/snapshots", {"options": {"sources": ["nope"]}}, content_type="application/json")
    assert bad.status_code == 400 and "unknown label source" in bad.json()["detail"]
    bad = user_client.post(f"{url}/snapshots", {"options": {"camera": "roof"}}, content_type="application/json")
    assert bad.status_code == 400 and "'roof' is not one of the project's cameras" in bad.json()["detail"]
    form = user_client.post(f"{url}/snapshots", {"options": "x", "junk": "1"})  # multipart: options cannot nest
    assert form.status_code == 415 and "multipart/form-data" in form.json()["detail"]
    assert not DatasetSnapshot.objects.exists()  # cheap checks refuse before any row is written
    with django_capture_on_commit_callbacks(execute=False):
        made = user_client.post(
            f"{url}/snapshots", {"options": {"val_split": 0.34, "trend": False}}, content_type="application/json"
        )
    assert made.status_code == 202, made.content
    body = made.json()
    assert body["number"] == 1 and body["status"] == "building" and body["progress"] == 0.0
    assert body["url"] == f"/api/snapshots/{body['id']}" and body["page_url"] == f"/snapshots/{body['id']}/"
    early = user_client.post(f"{url}/jobs", {"snapshot": 1, "config": TINY}, content_type="application/json")
    assert early.status_code == 400 and "still building" in early.json()["detail"]
    assert user_client.get(body["url"]).json()["status"] == "building"
    snapshot_build(snapshot_id=body["id"])  # what the queued task runs (no worker in this test)
    polled = user_client.get(body["url"]).json()
    assert polled["status"] == "ready" and polled["progress"] == 1.0 and polled["stats"]["val"]["total"] > 0
    assert user_client.get("/api/snapshots/999999").status_code == 404
    job = user_client.post(f"{url}/jobs", {"snapshot": 1, "config": {"epochs": 0}}, content_type="application/json")
    assert job.status_code == 400 and "epochs" in job.json()["detail"]
    job = user_client.post(f"{url}/jobs", {"snapshot": 9, "config": {}}, content_type="application/json")
    assert job.status_code == 400 and "no snapshot #9" in job.json()["detail"]
    job = user_client.post(f"{url}/jobs", {"snapshot": 1, "config": TINY}, content_type="application/json")
    assert job.status_code == 201 and job.json()["status"] == "queued"
    job_id = job.json()["id"]
    assert user_client.post(f"/api/jobs/{job_id}/retry").status_code == 409
    assert user_client.post(f"/api/jobs/{job_id}/cancel").json()["status"] == "cancelled"
    assert user_client.get(f"/api/jobs/{job_id}/metrics").json() == []
    assert user_client.delete(f"/api/jobs/{job_id}").status_code == 204


@pytest.mark.django_db
def test_admin_lists_jobs_and_cancels_retries_deletes(client, admin_user, snapshot, django_capture_on_commit_callbacks):
    client.force_login(admin_user)
    job = job_create(project=snapshot.project, snapshot=snapshot, config=TINY, enqueue=False)
    changelist = client.get("/admin/training/trainingjob/")
    assert changelist.status_code == 200 and b"Cancel selected jobs" in changelist.content
    assert b"Delete selected jobs with their checkpoints" in changelist.content
    client.post("/admin/training/trainingjob/", {"action": "cancel_jobs", "_selected_action": [job.pk]})
    job.refresh_from_db()
    assert job.status == "cancelled"
    with django_capture_on_commit_callbacks(execute=False):
        client.post("/admin/training/trainingjob/", {"action": "retry_jobs", "_selected_action": [job.pk]})
    job.refresh_from_db()
    assert job.status == "queued"
    client.post("/admin/training/trainingjob/", {"action": "delete_jobs_with_files", "_selected_action": [job.pk]})
    assert not TrainingJob.objects.filter(pk=job.pk).exists()


@pytest.mark.django_db
def test_a_job_whose_model_is_deployed_is_not_deleted(user_client, snapshot):
    from inference.models import Deployment

    job = job_create(project=snapshot.project, snapshot=snapshot, config=TINY, enqueue=False)
    job_execute(job_id=job.pk)
    Deployment.objects.create(name="pick-reward", trained_model=TrainedModel.objects.get(job=job))
    with pytest.raises(JobError, match="pick-reward"):
        job_delete(job=job)
    response = user_client.delete(f"/api/jobs/{job.pk}")
    assert response.status_code == 409 and "still in use" in response.json()["detail"]
    assert (local_path(job.checkpoint_folder) / "best" / "model.safetensors").exists()


@pytest.mark.django_db
def test_snapshots_that_trained_jobs_are_kept(user_client, snapshot):
    job_create(project=snapshot.project, snapshot=snapshot, config=TINY, enqueue=False)
    response = user_client.post(f"/snapshots/{snapshot.pk}/delete", follow=True)
    assert b"trained jobs; delete those jobs first" in response.content
    assert DatasetSnapshot.objects.filter(pk=snapshot.pk).exists()
    spare = snapshot_create(project=snapshot.project, options={"val_split": 0.34, "trend": False})
    folder = local_path(spare.folder)
    user_client.post(f"/snapshots/{spare.pk}/delete")
    assert not DatasetSnapshot.objects.filter(pk=spare.pk).exists() and not folder.exists()


@pytest.mark.django_db
def test_a_job_failed_by_the_sweep_while_running_registers_no_model(snapshot, monkeypatch):
    from dataclasses import replace

    from training.families import FAMILIES
    from training.kit.family_parts import RunResult

    def runner(job, reporter):
        TrainingJob.objects.filter(pk=job.pk).update(status="failed", error="no heartbeat")  # the sweep won
        return RunResult(checkpoint_path=f"{job.checkpoint_folder}/best", metrics={"val_acc": 1.0})

    monkeypatch.setitem(FAMILIES, "resnet", replace(FAMILIES["resnet"], trainer=runner))
    job = job_create(project=snapshot.project, snapshot=snapshot, config=TINY, enqueue=False)
    assert job_execute(job_id=job.pk) == "failed"
    assert not TrainedModel.objects.filter(job=job).exists()


def test_heartbeat_thread_refreshes_a_running_job(transactional_db, labeled_project):
    from training.services import job_heartbeat

    snapshot = snapshot_create(
        project=labeled_project, options={"val_split": 0.34, "trend": False, "png_folders": False}
    )
    job = job_create(project=labeled_project, snapshot=snapshot, config=TINY, enqueue=False)
    old = timezone.now() - timedelta(minutes=5)
    TrainingJob.objects.filter(pk=job.pk).update(status="running", heartbeat_at=old, attempt=2)
    import time

    with job_heartbeat(job.pk, attempt=1, interval=0.05):  # a run that lost its job to a requeue: no heartbeat
        time.sleep(0.3)
    assert TrainingJob.objects.get(pk=job.pk).heartbeat_at == old
    with job_heartbeat(job.pk, attempt=2, interval=0.05):
        time.sleep(0.5)
    assert TrainingJob.objects.get(pk=job.pk).heartbeat_at > old + timedelta(minutes=4)


@pytest.mark.django_db
def test_train_again_queues_the_same_config_on_the_same_snapshot(
    user_client, snapshot, django_capture_on_commit_callbacks
):
    job = job_create(project=snapshot.project, snapshot=snapshot, config=TINY, enqueue=False)
    with django_capture_on_commit_callbacks() as callbacks:
        response = user_client.post(f"/jobs/{job.pk}/clone")
    clone = TrainingJob.objects.exclude(pk=job.pk).get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{clone.pk}/"
    assert clone.snapshot_id == job.snapshot_id and clone.config == job.config and len(callbacks) == 1
    assert user_client.post(f"/jobs/{job.pk}/explode").status_code == 404


@pytest.mark.django_db
def test_the_job_page_carries_its_models_sanity_findings_from_predictions_on_disk_only(user_client, snapshot):
    job = job_create(project=snapshot.project, snapshot=snapshot, config=TINY, enqueue=False)
    job_execute(job_id=job.pk)
    model = TrainedModel.objects.get(job=job)
    folder = local_path(model.checkpoint_path)
    probs, labels = read_val_predictions(folder)  # what its training wrote
    assert job_state(job.pk)["sanity"] == sanity_check(probs, labels)
    # a model that says "fail" everywhere: flagged on its job page (page data), as on its evaluation page
    write_val_predictions_file(folder, np.full(len(labels), 0.01), labels)
    findings = job_state(job.pk)["sanity"]
    assert findings and findings == sanity_check(np.full(len(labels), 0.01), labels)
    page = user_client.get(f"/jobs/{job.pk}/")
    data = re.search(r'<script id="page-data" type="application/json">(.*?)</script>', page.content.decode(), re.S)
    assert page.status_code == 200 and json.loads(data[1])["state"]["sanity"] == findings
    assert b'<div id="sanity"></div>' in page.content  # where job.ts renders the notice
    # the live state never scores a split: without predictions on disk the model is not judged yet
    (folder / VAL_PREDICTIONS).unlink()
    assert job_state(job.pk)["sanity"] == []
    assert not list(folder.glob("val_predictions_snapshot_*.json"))  # nothing was computed
