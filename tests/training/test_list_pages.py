"""The training page's models, jobs and snapshots come a page at a time (25 each, newest first), each list with
its own pager whose links keep the other lists' pages; none is cut off without a way to the rest."""

from __future__ import annotations

import re

import pytest

from training.models import DatasetSnapshot, TrainedModel, TrainingJob

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(project):
    snapshots = [
        DatasetSnapshot.objects.create(project=project, number=n, status="ready", stats={}) for n in range(1, 31)
    ]
    jobs = [TrainingJob.objects.create(project=project, snapshot=snapshots[0], name=f"job-{n}") for n in range(60)]
    models = [
        TrainedModel.objects.create(project=project, job=job, name=f"model-{n}", checkpoint_path=f"checkpoints/m{n}")
        for n, job in enumerate(jobs[:27])
    ]
    return snapshots, jobs, models


def names(html: str, pattern: str) -> list[str]:
    return re.findall(pattern, html)


def test_each_list_pages_on_its_own_and_its_links_keep_the_others(user_client, project, history):
    url = f"/projects/{project.pk}/training/"
    first = user_client.get(url).content.decode()
    assert names(first, r">(model-\d+)<")[:2] == ["model-26", "model-25"] and len(names(first, r">(model-\d+)<")) == 25
    assert len(names(first, r"#\d+ (job-\d+)<")) == 25
    assert names(first, r'<a href="/snapshots/\d+/">#(\d+)</a>')[:1] == ["30"]
    assert 'page 1 of 3 <span class="muted">(60 in all)</span>' in first  # jobs
    assert 'page 1 of 2 <span class="muted">(27 in all)</span>' in first  # models
    older_jobs = re.search(r'href="(\?jobs_page=2#jobs)" rel="next"', first)
    assert older_jobs

    page = user_client.get(url + "?models_page=2&jobs_page=3").content.decode()
    assert names(page, r">(model-\d+)<") == ["model-1", "model-0"]
    assert names(page, r"#\d+ (job-\d+)<") == [f"job-{n}" for n in range(9, -1, -1)]
    # the jobs pager's link back keeps the models' page
    assert 'href="?models_page=2&amp;jobs_page=2#jobs" rel="prev"' in page
    every = set()
    for number in (1, 2, 3):
        every |= set(names(user_client.get(f"{url}?jobs_page={number}").content.decode(), r"#\d+ (job-\d+)<"))
    assert every == {f"job-{n}" for n in range(60)}
    # a page past the end or not a number shows the nearest page, not an error
    assert user_client.get(url + "?jobs_page=99").status_code == 200
    assert user_client.get(url + "?jobs_page=x").status_code == 200
