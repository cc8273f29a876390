"""The page data has one description (webapp/page_data.py): the TypeScript generated from it is the
committed one, and every page embeds exactly the shape its script's entry in PAGES describes."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Literal, NotRequired

import pytest
from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

from labeling.page_data import EpisodeLabelingData, ProjectPageData
from tests.training.conftest import seed_episodes
from training.page_data import ModelEvaluation
from webapp.page_data import PAGES, MonitorPageData
from webapp.typescript import typescript_module

SCRIPT = re.compile(r'src="[^"]*/pages/(\w+)\.js"')
PAGE_DATA = re.compile(r'<script id="page-data" type="application/json">(.*?)</script>', re.S)
TINY = {"hidden_dim": 16, "image_size": [3, 32, 32], "epochs": 1, "batch_size": 16, "warmup_steps": 0, "num_threads": 1}


class Inner(TypedDict):
    """Inner doc."""

    values: list[float | None]


class Outer(TypedDict):
    mode: Literal["a", "b"]
    inner: Inner
    by_name: dict[str, Inner]
    extra: NotRequired[Any]


def exactly(data_type: type, raw: str) -> list[str]:
    """What is wrong with `raw` (JSON) as `data_type`: wrong types, missing keys, or keys it does not describe."""
    adapter: TypeAdapter[Any] = TypeAdapter(data_type)
    try:
        checked = adapter.validate_json(raw, strict=True)
    except ValidationError as exc:
        return [str(exc)]
    sent = json.loads(raw)
    described = adapter.dump_python(checked, mode="json")
    return [] if described == sent else [f"keys the description lacks: sent {sent!r}, described {described!r}"]


def test_the_generated_typescript_is_the_committed_one():
    from scripts.page_types import TARGET

    assert TARGET.read_text() == typescript_module(PAGES), "run .venv/bin/python scripts/page_types.py"


def test_the_generator_writes_optional_keys_literals_and_nested_types():
    text = typescript_module({"outer": Outer})
    assert text.index("export interface Inner") < text.index("export interface Outer")
    assert "/** Inner doc. */" in text and "  values: (number | null)[];" in text
    assert '  mode: "a" | "b";' in text and "  by_name: Record<string, Inner>;" in text
    assert "  extra?: unknown;" in text and "  outer: Outer;" in text
    with pytest.raises(TypeError, match="no TypeScript"):
        typescript_module({"bad": TypedDict("Bad", {"when": set[int]})})  # type: ignore[operator]  # functional TypedDict


def test_the_check_refuses_wrong_types_missing_and_undescribed_keys():
    assert exactly(ProjectPageData, '{"project": 1, "api": "/api/projects/1"}') == []
    assert exactly(ProjectPageData, '{"project": "1", "api": "/api/projects/1"}')
    assert exactly(ProjectPageData, '{"project": 1}')
    assert exactly(ProjectPageData, '{"project": 1, "api": "/api/projects/1", "more": 2}')


@pytest.mark.django_db
def test_every_page_embeds_exactly_what_its_script_expects(user_client, project):
    from inference.models import Deployment
    from inference.teleop.models import TeleopSession
    from labeling.models import ProposalJob
    from projects.services import agent_create
    from training.models import TrainedModel
    from training.queue.efficiency import label_efficiency_store
    from training.services import job_create, job_execute
    from training.snapshots.services import snapshot_create

    episodes = seed_episodes(project)
    snapshot = snapshot_create(project=project, options={"val_split": 0.34, "trend": False})
    job = job_create(project=project, snapshot=snapshot, config=TINY, enqueue=False)
    job_execute(job_id=job.pk)
    model = TrainedModel.objects.get(job=job)
    deployment = Deployment.objects.create(name=f"pd-{uuid.uuid4().hex[:6]}", trained_model=model, project=project)
    agent, _token = agent_create(name="pd-teleop", scopes=["teleop"], projects=[project])
    session = TeleopSession.objects.create(agent=agent, project=project)
    proposal_job = ProposalJob.objects.create(project=project)
    curves = {"ranked": [[[4, 0.5], [8, 0.9]]], "random": [[[4, 0.5], [8, 0.6]]]}
    label_efficiency_store(
        project=project, result={"all_labels_accuracy": 0.9, "target": 0.855, "curves": curves}, command="bench"
    )
    urls = [
        f"/projects/{project.pk}/",
        f"/episodes/{episodes[0].uuid}/label/",
        f"/projects/{project.pk}/training/",
        f"/jobs/{job.pk}/",
        f"/models/{model.pk}/evaluation",
        f"/projects/{project.pk}/compare?a={model.pk}&b={model.pk}",
        f"/deployments/{deployment.name}/monitor",
        f"/teleop/{session.pk}/",
        f"/projects/{project.pk}/proposals/{proposal_job.pk}/",
        f"/projects/{project.pk}/runs/?jobs={job.pk}&smoothing=0.5",
    ]
    seen, wrong = set(), []
    for url in urls:
        response = user_client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        page, raw = SCRIPT.search(html), PAGE_DATA.search(html)
        assert page and raw, f"{url}: no page script or no page data"
        seen.add(page.group(1))
        wrong += [f"{url} ({page.group(1)}): {problem}" for problem in exactly(PAGES[page.group(1)], raw.group(1))]
    assert not wrong, "\n".join(wrong)
    assert seen == set(PAGES), f"pages without a check here: {set(PAGES) - seen}"
    # the APIs the pages refresh from send the same shapes
    for url, data_type in [
        (f"/api/episodes/{episodes[0].uuid}/labeling", EpisodeLabelingData),
        (f"/api/models/{model.pk}/evaluation", ModelEvaluation),
        (f"/api/deployments/{deployment.name}/monitor", MonitorPageData),
    ]:
        response = user_client.get(url)
        assert response.status_code == 200, url
        wrong += [f"{url}: {problem}" for problem in exactly(data_type, response.content.decode())]
    assert not wrong, "\n".join(wrong)
