"""A labeled project exported as a LeRobot dataset (the export URL's zip) and imported through the import page
comes back with the same labels, human-sourced, and with its env reward and success kept apart from them."""

from __future__ import annotations

import io
import zipfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from labeling.imports.jobs import import_job_run
from labeling.imports.services import import_paths
from labeling.models import Episode, FrameLabel, ImportJob, LabelSource, Step
from projects.models import Membership, Project
from tests.labeling.lerobot_builders import write_v21_dataset
from tests.labeling.test_lerobot_import import media  # noqa: F401  (the fixture: MEDIA_ROOT and IMPORT_DIR in tmp_path)

pytestmark = pytest.mark.usefixtures("media")

# per episode (by episode_index): the labels given, None for an unlabeled frame; they differ from the env's
# success on purpose (episode 0's env success is [False, False, True], episode 1's all False)
LABELS: dict[int, list[str | None]] = {0: ["success", "fail", None], 1: ["fail", "success"]}


@pytest.fixture
def labeled(project, tmp_path, user) -> Project:
    import_paths(project=project, paths=[write_v21_dataset(tmp_path / "ds", lengths=[3, 2], cameras=["front"])])
    for episode in Episode.objects.filter(project=project):
        steps = Step.objects.filter(episode=episode).order_by("index")
        for step, value in zip(steps, LABELS[episode.metadata["episode_index"]], strict=True):
            if value is not None:
                FrameLabel.objects.create(project=project, episode=episode, step=step, value=value, author=user)
    return project


def _exported_zip(client, project: Project) -> bytes:
    response = client.get(f"/projects/{project.pk}/export/lerobot/")
    assert response.status_code == 200
    return b"".join(response.streaming_content)


def _labels_by_episode(project: Project) -> dict[int, list[str | None]]:
    out = {}
    for episode in Episode.objects.filter(project=project):
        values = dict(FrameLabel.objects.filter(episode=episode).values_list("step__index", "value"))
        out[episode.metadata["episode_index"]] = [values.get(i) for i in range(episode.num_steps)]
    return out


@pytest.mark.django_db
def test_a_lerobot_export_of_a_labeled_project_imports_with_the_same_labels(user_client, labeled, user):
    archive = _exported_zip(user_client, labeled)
    copy = Project.objects.create(name="Copy", camera_views=["main"])
    Membership.objects.create(project=copy, user=user, role=Membership.Role.MANAGER)
    upload = SimpleUploadedFile("pickcube-lerobot.zip", archive)

    assert user_client.post(f"/projects/{copy.pk}/import/", {"files": [upload]}).status_code == 302
    job = import_job_run(ImportJob.objects.latest("pk").pk)

    assert job is not None and job.status == "succeeded", job and job.summary
    assert (job.summary["episodes"], job.summary["steps"], job.summary["labels"]) == (2, 5, 4)
    assert _labels_by_episode(copy) == _labels_by_episode(labeled) == LABELS
    imported = FrameLabel.objects.filter(project=copy)
    assert {row.source for row in imported} == {LabelSource.HUMAN}
    assert all(row.params["imported_from"].startswith("pickcube-lerobot") for row in imported)
    # the env's reward and success come back from env.* (next.success there is the label, not the env's)
    for episode in Episode.objects.filter(project=copy):
        original = Episode.objects.get(project=labeled, metadata__episode_index=episode.metadata["episode_index"])
        fields = ("env_success", "reward", "terminated")
        assert list(Step.objects.filter(episode=episode).order_by("index").values_list(*fields)) == list(
            Step.objects.filter(episode=original).order_by("index").values_list(*fields)
        )
        assert episode.success == original.success and episode.metadata["success_column"] == "env.success"


@pytest.mark.django_db
def test_a_label_column_with_a_value_other_than_1_0_or_minus_1_fails_that_episode_naming_it(
    user_client, labeled, tmp_path
):
    folder = tmp_path / "export"
    with zipfile.ZipFile(io.BytesIO(_exported_zip(user_client, labeled))) as archive:
        archive.extractall(folder)
    data = folder / "data" / "chunk-000" / "file-000.parquet"
    table = pq.read_table(data)
    table = table.set_column(table.schema.get_field_index("label"), "label", pa.array([1, 7, -1], pa.int64()))
    pq.write_table(table, data)
    copy = Project.objects.create(name="Copy", camera_views=["main"])

    summary = import_paths(project=copy, paths=[folder])

    assert summary.episodes == 1 and FrameLabel.objects.filter(project=copy).count() == 2
    ((name, reason),) = summary.failed
    assert name.endswith("episode 0") and reason == "episode 0 frame 1: `label` is 7; expected 1, 0 or -1"
