"""Labeling from the ranked queue in a real browser: "Label next" on the project page, a keyboard label,
`n` to the next queued frame, and the ranking updated after retraining: the keyboard label starts the
project's train-to-target loop, a real Celery worker trains a new model on a fresh snapshot and re-ranks
the queue, and the queue page shows the new ranking."""

from __future__ import annotations

import os
import re
import time
from unittest import mock

import pytest

from labeling.models import FrameLabel
from projects.models import Membership
from tests.conftest import login
from tests.inference.conftest import make_trained_model
from tests.training.conftest import seed_episodes

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
PASSWORD = "pw-queue-123"
TINY = {"hidden_dim": 8, "image_size": [3, 32, 32], "batch_size": 8, "epochs": 2, "patience": 0, "seed": 0,
        "num_threads": 1, "pretrained": False, "warmup_steps": 0}  # fmt: skip


def wait_saved(page) -> None:
    page.wait_for_function(
        "() => { const s = document.getElementById('save-status'); return s && s.dataset.state === 'idle' }"
    )


def queue_rows(page) -> list[tuple[str, str, str]]:
    """(episode, step, p(success)) of each row of the queue page, in rank order."""
    rows = page.eval_on_selector_all(
        "#queue tbody tr", "rows => rows.map(r => [r.dataset.episode, r.dataset.step, r.cells[3].textContent.trim()])"
    )
    return [tuple(row) for row in rows]


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(900)
def test_label_from_the_queue_with_the_keyboard_and_see_the_ranking_update_after_retraining(
    browser, live_server_url, project, django_user_model, celery_worker_process
):
    from common.jobs.models import JobStatus
    from labeling.labels.selectors import human_frame_label_count
    from training.models import LabelQueueItem, RetrainPolicy, TrainedModel
    from training.queue.retrain import retrain_sweep
    from training.queue.services import label_queue_items, label_queue_recompute

    queuer = django_user_model.objects.create_user("queuer", password=PASSWORD)
    Membership.objects.create(project=project, user=queuer, role=Membership.Role.ANNOTATOR)  # labels, sees queue
    with mock.patch("labeling.ingest.services._queue_proposals"):  # no proposal tasks ahead of the training job
        episodes = seed_episodes(project, episodes=6, steps=5, windows=False)
    FrameLabel.objects.filter(episode__in=episodes[:2]).delete()  # two unlabeled episodes to queue
    old_model = make_trained_model(project, seed=1)
    label_queue_recompute(project=project)
    first, second = list(label_queue_items(project=project, limit=2))
    RetrainPolicy.objects.create(  # one new human label retrains
        project=project,
        retrain_after_labels=1,
        job_config=TINY,
        labels_at_last_job=human_frame_label_count(project=project),
    )
    assert retrain_sweep() == 0  # nothing new yet

    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    page.set_default_timeout(120_000)  # a loaded machine
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, live_server_url, "queuer", PASSWORD)
    page.goto(f"{live_server_url}/projects/{project.pk}/")
    page.click("text=Label next")
    page.wait_for_url(re.compile(rf"/episodes/{first.step.episode.uuid}/label/\?step={first.step.index}&queue="))
    page.wait_for_selector("body[data-ready='1']")
    page.keyboard.press("c")  # success on the queued frame
    wait_saved(page)
    page.keyboard.press("n")  # the next most valuable frame
    page.wait_for_url(re.compile(rf"/episodes/{second.step.episode.uuid}/label/\?step={second.step.index}&queue="))
    label = FrameLabel.objects.get(step=first.step, source="human")  # beside the page's env proposals
    assert label.value == "success"

    page.goto(f"{live_server_url}/projects/{project.pk}/label-queue")
    before = queue_rows(page)
    labeled = (str(first.step.episode.uuid), str(first.step.index))
    assert len(before) == 9 and labeled not in {row[:2] for row in before}  # the labeled frame left the queue

    assert retrain_sweep() == 1  # the periodic check: the keyboard label queued a job on a fresh snapshot
    job = RetrainPolicy.objects.get(project=project).last_job
    assert job is not None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.status in (JobStatus.FAILED, JobStatus.CANCELLED):
            break
        if LabelQueueItem.objects.filter(project=project).exclude(model=old_model).exists():
            break  # the worker trained and re-ranked
        time.sleep(1.0)
    assert job.status == JobStatus.SUCCEEDED, job.error
    new_model = TrainedModel.objects.get(job=job)
    assert set(LabelQueueItem.objects.filter(project=project).values_list("model", flat=True)) == {new_model.pk}

    page.reload()
    after = queue_rows(page)
    assert {row[:2] for row in after} == {row[:2] for row in before}  # the same unlabeled frames...
    assert after != before  # ...ranked and scored by the new model
    assert "models disagree" in page.inner_text("#queue") or [r[2] for r in after] != [r[2] for r in before]
    assert errors == []
