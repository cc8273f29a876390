"""The evaluation page never scores: its figures are on disk when the job finishes, and a model trained before
that gets them from a queued task while the page shows the stage reached and reloads."""

from __future__ import annotations

import json
import re
import time

import pytest

from training.evaluation import model_evaluation
from training.evaluation.precompute import PROGRESS_FILE, evaluation_precompute_by_id
from training.models import TrainedModel
from training.resnet.val_predictions import VAL_PREDICTIONS
from training.services import job_create, job_execute
from training.snapshots.services import snapshot_build, snapshot_create
from training.storage import local_path

TINY = {"hidden_dim": 16, "image_size": [3, 32, 32], "epochs": 1, "batch_size": 16, "warmup_steps": 0, "num_threads": 1}


@pytest.fixture
def trained(labeled_project):
    snapshot = snapshot_create(project=labeled_project, options={"val_split": 0.34, "trend": False})
    snapshot_build(snapshot_id=snapshot.pk)
    job = job_create(project=labeled_project, snapshot=snapshot, config=TINY, enqueue=False)
    job_execute(job_id=job.pk)
    return TrainedModel.objects.get(job=job)


@pytest.fixture
def no_scoring(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the evaluation page scored frames")

    monkeypatch.setattr(model_evaluation, "_predictions_within_budget", refuse)


def _page_data(page) -> dict:
    found = re.search(r'<script id="page-data" type="application/json">(.*?)</script>', page.content.decode(), re.S)
    assert found is not None
    return json.loads(found[1])


@pytest.mark.django_db
def test_the_first_open_after_the_job_finished_reads_figures_on_disk_and_scores_nothing(
    user_client, trained, no_scoring, django_capture_on_commit_callbacks
):
    folder = local_path(trained.checkpoint_path)
    snapshot_id = trained.snapshot_id
    assert (folder / VAL_PREDICTIONS).exists()  # written right after job_execute, before anyone opened the page
    assert list(folder.glob(f"val_precisions_snapshot_{snapshot_id}_*.json"))
    assert not (folder / PROGRESS_FILE).exists()
    # the user comes from the job page (it also loads this process's URLconf and templates, a one-off cost)
    assert user_client.get(f"/jobs/{trained.job_id}/").status_code == 200
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        started = time.perf_counter()
        page = user_client.get(f"/models/{trained.pk}/evaluation")
        elapsed = time.perf_counter() - started
    assert page.status_code == 200 and b"evaluation-progress" not in page.content
    assert b'http-equiv="refresh"' not in page.content and callbacks == []  # nothing queued
    (evaluation,) = _page_data(page)["evaluations"]
    assert len(evaluation["probabilities"]) == trained.snapshot.stats["val"]["total"]
    assert [row["precision"] for row in evaluation["precisions"]] == ["bf16", "fp16"]
    print(f"evaluation page first open: {elapsed:.3f} s")
    assert elapsed < 1.0, f"the first open took {elapsed:.2f} s"


@pytest.mark.django_db
def test_an_older_models_page_shows_progress_at_once_queues_once_and_fills_when_computed(
    user_client, trained, django_capture_on_commit_callbacks, monkeypatch
):
    folder = local_path(trained.checkpoint_path)
    for stale in [folder / VAL_PREDICTIONS, *folder.glob("val_precisions_snapshot_*.json")]:
        stale.unlink()  # as a model trained before the figures were computed at the job's end
    real = model_evaluation._predictions_within_budget
    monkeypatch.setattr(model_evaluation, "_predictions_within_budget", None)  # the page must not score
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        page = user_client.get(f"/models/{trained.pk}/evaluation")
    assert page.status_code == 200 and b'http-equiv="refresh"' in page.content
    assert b"Computing this model's evaluation figures" in page.content and b"step 1 of 3: queued" in page.content
    assert _page_data(page)["evaluations"] == [] and len(callbacks) == 1
    with django_capture_on_commit_callbacks(execute=False) as again:
        assert b"step 1 of 3: queued" in user_client.get(f"/models/{trained.pk}/evaluation").content
    assert again == []  # a reload while it is queued queues nothing more

    monkeypatch.setattr(model_evaluation, "_predictions_within_budget", real)
    evaluation_precompute_by_id(model_id=trained.pk)  # what the queued task runs
    assert not (folder / PROGRESS_FILE).exists()
    done = user_client.get(f"/models/{trained.pk}/evaluation")
    assert done.status_code == 200 and b'http-equiv="refresh"' not in done.content
    (evaluation,) = _page_data(done)["evaluations"]
    assert len(evaluation["probabilities"]) == trained.snapshot.stats["val"]["total"]


@pytest.mark.django_db
def test_a_failed_computation_is_shown_with_its_reason_and_the_page_stops_reloading(user_client, trained, monkeypatch):
    folder = local_path(trained.checkpoint_path)
    for stale in [folder / VAL_PREDICTIONS, *folder.glob("val_precisions_snapshot_*.json")]:
        stale.unlink()

    def broken(*args, **kwargs):
        raise RuntimeError("checkpoint unreadable")

    monkeypatch.setattr(model_evaluation, "_predictions_within_budget", broken)
    evaluation_precompute_by_id(model_id=trained.pk)
    page = user_client.get(f"/models/{trained.pk}/evaluation")
    assert page.status_code == 400 and b'http-equiv="refresh"' not in page.content
    assert b"RuntimeError: checkpoint unreadable" in page.content


EVALUATION_API_IN_A_WEB_PROCESS = """
import sys, django
django.setup()
from django.contrib.auth import get_user_model
from django.test import Client
client = Client()
client.force_login(get_user_model().objects.get(pk=int(sys.argv[1])))
response = client.get(f"/api/models/{sys.argv[2]}/evaluation", HTTP_HOST="localhost")
print(response.status_code, len(response.json()["probabilities"]), "torch" in sys.modules)
"""


@pytest.mark.django_db(transaction=True)
def test_the_evaluation_api_answers_from_figures_on_disk_without_loading_torch(user, trained, process_env):
    """A web process asked for a model's evaluation over the API reads what the job wrote: no torch (hundreds
    of MB kept by the web process), the same figures as the page."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", EVALUATION_API_IN_A_WEB_PROCESS, str(user.pk), str(trained.pk)],
        env={**process_env, "DJANGO_SETTINGS_MODULE": "webapp.settings", "ALLOWED_HOSTS": "localhost"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    status, probabilities, torch_loaded = done.stdout.split()[-3:]
    assert status == "200" and int(probabilities) > 0
    assert torch_loaded == "False"
