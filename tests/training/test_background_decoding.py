"""Background work decodes within BACKGROUND_DECODE_PIXELS and skips frames that will not decode: the
label-queue recompute holds frames only at the model's input size, and a stored frame that will not
decode (written before ingest inflated PNG data, or damaged since) is left out of the label queue and of
snapshots with its reason instead of failing them (real PostgreSQL, storage and checkpoints)."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from django.core.files.storage import default_storage

from common.images.checks import decode_rgb
from labeling.models import Frame, FrameLabel
from tests.labeling.broken_pngs import broken_png

from .conftest import seed_episodes

pytestmark = pytest.mark.django_db


def break_frame(frame: Frame) -> str:
    """Overwrites a stored frame with a PNG of valid chunks whose image data will not inflate."""
    with open(default_storage.path(frame.image.name), "wb") as handle:
        handle.write(broken_png("corrupt stream", frame.width, frame.height))
    return frame.image.name


def unlabeled_frames(project) -> list[Frame]:
    FrameLabel.objects.filter(project=project).delete()
    camera = project.camera_views[0]
    return list(Frame.objects.filter(step__episode__project=project, camera=camera).order_by("pk"))


def test_recompute_memory_is_bounded_by_the_budget_not_by_the_frames(project, settings):
    from tests.inference.conftest import TINY_SIZE, direct_probabilities, make_trained_model
    from training.models import LabelQueueItem
    from training.queue.services import label_queue_rank

    size = 384
    seed_episodes(project, episodes=2, steps=12, size=size, windows=False)
    frames = unlabeled_frames(project)
    model = make_trained_model(project, seed=1)
    settings.BACKGROUND_DECODE_PIXELS = 8 * TINY_SIZE * TINY_SIZE  # 8 frames at the model's input size
    frame_bytes = size * size * 3
    label_queue_rank(project=project)  # first run: imports and torch's own set-up are not the frames
    tracemalloc.start()
    result = label_queue_rank(project=project)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert result.ranked == len(frames) == 24 and result.skipped == []
    # one frame at a time: its file, the decoded frame and Pillow's transient copies, about 3.5 frames' worth;
    # holding every decoded frame (as before this budget: 24 x 432 KiB, 10 MiB, and more for a copy) is far over
    assert peak < 4 * frame_bytes, f"peak {peak / 2**20:.1f} MiB for {len(frames)} frames of {size}x{size}"
    # frames decoded reduced (a box filter by a whole factor, at least twice the model's input: common/images/checks.py)
    # score close to the whole frames the service resizes itself, and rank them the same way: the queue only ranks
    items = {i.step_id: i.probability for i in LabelQueueItem.objects.filter(project=project)}
    whole = np.stack([decode_rgb(f.image.open("rb").read()) for f in frames])
    expected = np.asarray(direct_probabilities(model.checkpoint_path, whole))
    queued = np.array([items[f.step_id] for f in frames])
    np.testing.assert_allclose(queued, expected, atol=0.05)
    ranks = np.corrcoef(np.argsort(np.argsort(queued)), np.argsort(np.argsort(expected)))[0, 1]
    assert ranks > 0.9, (
        f"the queue ranks the frames otherwise than the served probabilities would (Spearman {ranks:.2f})"
    )


def test_recompute_skips_frames_that_will_not_decode_and_says_why(project):
    from tests.inference.conftest import make_trained_model
    from training.models import LabelQueueItem
    from training.tasks import recompute_label_queue

    seed_episodes(project, episodes=2, steps=5, windows=False)
    frames = unlabeled_frames(project)
    broken = break_frame(frames[3])
    gone = frames[6].image.name
    default_storage.delete(gone)
    make_trained_model(project, seed=1)
    make_trained_model(project, seed=2, bias=3.0)  # two models: both score the frames that decode
    result = recompute_label_queue(project.pk)  # the Celery task's body, run here
    assert result["ranked"] == 8
    reasons = {s["frame"]: s["reason"] for s in result["skipped"]}
    assert set(reasons) == {broken, gone}
    assert reasons[broken].startswith("undecodable image: ") and reasons[gone].startswith("unreadable file")
    queued = set(LabelQueueItem.objects.filter(project=project).values_list("step_id", flat=True))
    assert queued == {f.step_id for f in frames} - {frames[3].step_id, frames[6].step_id}


def test_a_snapshot_leaves_out_frames_that_will_not_decode_and_lists_them(project, user):
    from training.datasets.rlinf_binary import read_payload
    from training.snapshots.services import snapshot_create
    from training.storage import local_path

    seed_episodes(project, episodes=6, steps=10)
    main, extra = project.camera_views[:2]
    frames = list(Frame.objects.filter(step__episode__project=project, camera=main).order_by("pk"))
    broken = {break_frame(frames[2]), break_frame(frames[15])}
    extra_frame = Frame.objects.filter(step__episode__project=project, camera=extra).order_by("pk")[30]
    broken.add(break_frame(extra_frame))  # only trend windows read the second camera
    snapshot = snapshot_create(project=project, options={"fail_success_ratio": 1.0, "val_split": 0.34}, created_by=user)
    assert snapshot.status == "ready", snapshot.error
    skipped = snapshot.stats["skipped_frames"]
    assert skipped["count"] == 3 and {s["frame"] for s in skipped["frames"]} == broken
    assert all(s["reason"].startswith("undecodable image: ") for s in skipped["frames"])
    folder = local_path(snapshot.folder)
    rows = [json.loads(line) for line in (folder / "labels.jsonl").read_text().splitlines()]
    assert len(rows) == 58  # 60 labeled frames of the first camera, two of them broken
    left_out = {(str(f.step.episode.uuid), f.step.index) for f in (frames[2], frames[15])}
    assert not left_out & {(r["episode"], r["step"]) for r in rows}
    payload_frames = sum(len(read_payload(folder / name)["labels"]) for name in ("train.pt", "val.pt"))
    assert payload_frames == snapshot.stats["train"]["total"] + snapshot.stats["val"]["total"]
    assert snapshot.stats["trend"]["num_train_samples"] > 0  # the windows over the broken extra frame are left out


def test_a_snapshot_build_holds_the_budget_of_decoded_frames_not_the_split(project, user, settings):
    from training.datasets.rlinf_binary import read_payload
    from training.snapshots.services import snapshot_create
    from training.storage import local_path

    size = 256
    seed_episodes(project, episodes=6, steps=10, size=size, windows=False)
    frame_bytes = size * size * 3
    settings.BACKGROUND_DECODE_PIXELS = 4 * size * size  # the frame cache: four frames
    options = {"fail_success_ratio": 0.0, "val_split": 0.34, "trend": False, "png_folders": False}
    snapshot_create(project=project, options=options, created_by=user)  # first build: imports, torch set-up
    tracemalloc.start()
    snapshot = snapshot_create(project=project, options=options, created_by=user)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert snapshot.status == "ready", snapshot.error
    folder = local_path(snapshot.folder)
    train, val = read_payload(folder / "train.pt"), read_payload(folder / "val.pt")
    assert len(train["images"]) + len(val["images"]) == 60 and not list(folder.glob("*.frames"))
    assert all(image.shape == (size, size, 3) for image in train["images"])
    # every frame held (as before: the cache kept 4,096 frames and the payload a copy of each) is 60 frames'
    # worth twice; the cache's four, one frame being decoded and its file stay far below
    assert peak < 10 * frame_bytes, f"peak {peak / 2**20:.1f} MiB for 60 frames of {size}x{size}"


def test_a_served_frame_that_will_not_decode_is_left_out_of_an_alarm_and_refused_a_label(project):
    from django.utils import timezone

    from inference.monitor.alarm_queue import alarm_frames_enqueue
    from inference.services import DeploymentError, served_frame_create, served_frame_label
    from tests.inference.conftest import deploy, make_trained_model, random_images

    deployment = deploy(make_trained_model(project))
    served = [
        served_frame_create(deployment_id=deployment.pk, image=image, probability=0.9, success=True, model_version=1)
        for image in random_images(3)
    ]
    with open(default_storage.path(served[1].image.name), "wb") as handle:
        handle.write(broken_png("corrupt stream", 32, 32))
    episode = alarm_frames_enqueue(
        deployment_id=deployment.pk, frame_ids=[f.pk for f in served], raised_at=timezone.now()
    )
    assert episode is not None and episode.metadata["served_frames"] == 2  # the alarm's other frames still go
    assert [s.info["served_frame"] for s in episode.steps.order_by("index")] == [served[0].pk, served[2].pk]
    with pytest.raises(DeploymentError, match="cannot be labeled: undecodable image: "):
        served_frame_label(frame=served[1], value="success")
