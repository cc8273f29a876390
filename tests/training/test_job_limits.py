"""What a training job may ask of the machine: processes per node within the host's GPUs (or the admin's
TRAINING_MAX_PROCESSES), model paths inside MODEL_DIR (refused alike wherever outside, symlinks and `..`
included), a rendezvous that fails fast with a one-line reason and that a cancel ends in seconds, and job
errors that reach users as one line without a traceback or a server path."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from training.jobs.limits import host_gpus
from training.models import TrainingJob
from training.services import job_cancel, job_create, job_execute

from ..conftest import free_port
from .test_distributed_training import small_snapshot
from .test_training_job import SMALL


@pytest.fixture
def snapshot(project):
    return small_snapshot(project, episodes=3, steps=6)


def _post_job(client, snapshot, config: dict):
    url = f"/api/projects/{snapshot.project_id}/jobs"
    return client.post(url, {"snapshot": snapshot.number, "config": config}, content_type="application/json")


@pytest.mark.django_db
def test_processes_beyond_the_hosts_gpus_are_refused_naming_the_limit_unless_an_admin_allows_them(
    user_client, snapshot, settings
):
    settings.TRAINING_MAX_PROCESSES = 0  # the default: one process per GPU, one on a CPU host
    limit = max(1, host_gpus())
    refused = _post_job(user_client, snapshot, {**SMALL, "processes": limit + 1})
    assert refused.status_code == 400
    detail = refused.json()["detail"]
    assert f"processes must be at most {limit} per node on this host" in detail and "TRAINING_MAX_PROCESSES" in detail
    page = user_client.post(
        f"/projects/{snapshot.project_id}/training/jobs/new",
        {"snapshot": snapshot.pk, "kind": "resnet", "processes": limit + 1},
    )
    assert page.status_code == 400 and f"at most {limit} per node".encode() in page.content
    assert not TrainingJob.objects.exists()

    settings.TRAINING_MAX_PROCESSES = limit + 1
    made = _post_job(user_client, snapshot, {**SMALL, "processes": limit + 1})
    assert made.status_code == 201, made.content
    assert _post_job(user_client, snapshot, {**SMALL, "processes": limit + 2}).status_code == 400


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder outside MODEL_DIR holding a real weights file and a model folder."""
    (tmp_path / "weights.pth").write_bytes(b"secret")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    return tmp_path


@pytest.mark.django_db
def test_model_paths_outside_model_dir_are_refused_alike_revealing_nothing(user_client, snapshot, settings, outside):
    model_dir = Path(settings.MODEL_DIR)
    escape = model_dir / f"escape-{os.getpid()}.pth"
    escape.symlink_to(outside / "weights.pth")  # a symlink inside that points outside
    try:
        resnet_paths = [
            str(outside / "weights.pth"),  # exists, a file
            str(outside / "model"),  # exists, a folder
            str(outside / "missing.pth"),  # does not exist
            "/etc/passwd",
            "../" * 12 + "etc/passwd",  # `..` out of MODEL_DIR
            escape.name,  # the symlink, relative
        ]
        answers = []
        for path in resnet_paths:
            response = _post_job(user_client, snapshot, {**SMALL, "pretrained": True, "pretrained_path": path})
            assert response.status_code == 400, (path, response.content)
            answers.append(response.json()["detail"])
        assert len(set(answers)) == 1, answers  # the same words whatever is there
        assert "pretrained_path must name a path inside the model folder (MODEL_DIR)" in answers[0]
        assert str(outside) not in answers[0] and "passwd" not in answers[0]
        vlm = user_client.post(
            f"/api/projects/{snapshot.project_id}/jobs",
            {"snapshot": snapshot.number, "kind": "vlm", "config": {"base_model_path": str(outside / "model")}},
            content_type="application/json",
        )
        assert (
            vlm.status_code == 400
            and "base_model_path must name a path inside the model folder" in vlm.content.decode()
        )
    finally:
        escape.unlink()
    assert not TrainingJob.objects.exists()


@pytest.mark.django_db
def test_a_path_inside_model_dir_is_taken_relative_to_it_and_a_missing_one_named_relatively(
    user_client, snapshot, settings
):
    model_dir = Path(settings.MODEL_DIR)
    missing = _post_job(user_client, snapshot, {**SMALL, "pretrained": True, "pretrained_path": "nope/r18.pth"})
    assert missing.status_code == 400
    assert missing.json()["detail"] == "config: pretrained_path 'nope/r18.pth' is not a file in the model folder"
    (model_dir / "limits-r18.pth").write_bytes(b"x")
    try:
        made = _post_job(user_client, snapshot, {**SMALL, "pretrained": True, "pretrained_path": "limits-r18.pth"})
        assert made.status_code == 201, made.content
        assert made.json()["config"]["pretrained_path"] == "limits-r18.pth"  # shown relative to MODEL_DIR
    finally:
        (model_dir / "limits-r18.pth").unlink()
    page = user_client.get(f"/projects/{snapshot.project_id}/training/").content.decode()
    assert '"base_model_path": "qwen3-vl"' in page and str(model_dir) not in page  # the VLM default, relative


@pytest.mark.django_db(transaction=True)
def test_a_failed_job_shows_users_one_line_and_keeps_the_traceback_for_the_admin(
    project, snapshot, settings, user_client, admin_user, client
):
    broken = Path(settings.MODEL_DIR) / "limits-broken.pth"
    broken.write_bytes(b"this is not a torch checkpoint at all")
    try:
        config = {**SMALL, "pretrained": True, "pretrained_path": broken.name}
        job = job_create(project=project, snapshot=snapshot, config=config, enqueue=False)
        assert job_execute(job_id=job.pk) == "failed"
    finally:
        broken.unlink()
    job.refresh_from_db()
    server_paths = [str(Path(settings.MODEL_DIR)), str(settings.MEDIA_ROOT), str(settings.BASE_DIR)]
    assert "\n" not in job.error and "Traceback" not in job.error and job.error
    assert not any(path in job.error for path in server_paths), job.error
    assert "Traceback (most recent call last)" in job.error_detail
    api = user_client.get(f"/api/jobs/{job.pk}").json()
    assert api["error"] == job.error
    page = user_client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Traceback" not in page and not any(path in page for path in server_paths)
    assert f"failed: {job.error}" in job.log
    client.force_login(admin_user)
    admin_page = client.get(f"/admin/training/trainingjob/{job.pk}/change/").content.decode()
    assert "Traceback (most recent call last)" in admin_page


def _run_in_thread(job_id: int) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def run():
        outcome["status"] = job_execute(job_id=job_id)
        outcome["ended"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _wait_running(job: TrainingJob, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while "waiting at most" not in TrainingJob.objects.get(pk=job.pk).log:
        assert time.monotonic() < deadline, TrainingJob.objects.get(pk=job.pk).log
        time.sleep(0.2)


@pytest.mark.django_db(transaction=True)
def test_a_node_that_never_joins_fails_the_job_after_the_rendezvous_timeout(project, snapshot, settings):
    settings.TRAINING_RENDEZVOUS_TIMEOUT_SECONDS = 5
    spread = {"processes": 1, "nodes": 2, "master_addr": "127.0.0.1", "master_port": free_port()}
    job = job_create(project=project, snapshot=snapshot, config={**SMALL, **spread}, enqueue=False)
    started = time.monotonic()
    assert job_execute(job_id=job.pk) == "failed"
    took = time.monotonic() - started
    job.refresh_from_db()
    assert job.error.startswith("not all 2 nodes joined within 5 s (TRAINING_RENDEZVOUS_TIMEOUT_SECONDS)"), job.error
    assert f"manage.py training_node {job.pk} --node-rank N" in job.error and "\n" not in job.error
    assert took < 40, took  # the timeout plus starting torchrun (was: torchrun's own 600 s)


@pytest.mark.django_db(transaction=True)
def test_cancelling_a_job_waiting_at_the_rendezvous_takes_seconds(project, snapshot, settings):
    settings.TRAINING_RENDEZVOUS_TIMEOUT_SECONDS = 300
    spread = {"processes": 1, "nodes": 2, "master_addr": "127.0.0.1", "master_port": free_port()}
    job = job_create(project=project, snapshot=snapshot, config={**SMALL, **spread}, enqueue=False)
    thread, outcome = _run_in_thread(job.pk)
    _wait_running(job)
    time.sleep(1.0)  # torchrun is up and waiting for node 1
    cancelled_at = time.monotonic()
    job_cancel(job=TrainingJob.objects.get(pk=job.pk))
    thread.join(timeout=60)
    assert outcome.get("status") == "cancelled", outcome
    assert outcome["ended"] - cancelled_at < 10  # was: 66 s (the 60 s grace for running ranks, and more)


@pytest.mark.django_db
def test_a_one_process_job_is_queued_without_counting_the_hosts_gpus(user_client, snapshot, monkeypatch):
    """Counting GPUs imports torch in a child process (about 6 s the first time in a process): "Queue job"
    took 5.9 s for it. A one-process job (the default) never needs the count, as every host allows one."""
    import training.jobs.limits as limits

    def counted() -> int:
        raise AssertionError("a one-process job counted the host's GPUs")

    from training.forms import JobForm

    monkeypatch.setattr(limits, "host_gpus", counted)
    form = {  # the form as the page fills it in: every field's default
        name: "on" if field.initial is True else field.initial
        for name, field in JobForm(project=snapshot.project).fields.items()
        if field.initial is not None and field.initial is not False
    }
    form.update(snapshot=snapshot.pk, kind="resnet", processes=1)
    page = user_client.post(f"/projects/{snapshot.project_id}/training/jobs/new", form)
    assert page.status_code == 302, page.context["job_form"].errors if page.context else page.content[:300]
    assert _post_job(user_client, snapshot, dict(SMALL)).status_code == 201
    assert TrainingJob.objects.count() == 2
