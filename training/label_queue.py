"""The labeling queue ranked by value (services and selectors; the ranking itself is active_queue.py).

`label_queue_recompute` scores the project's frames that have no human label with its newest ResNet
model (and the one before it, when there is one), ranks them and replaces the project's queue. It runs
in the background after each training job and on demand. A share of the queue (settings
`LABEL_QUEUE_EXPLORE_PERCENT`) is coverage picks: frames least like any labeled or queued one in the
newest model's embedding (up to `MAX_LABELED_EMBEDDED` labeled frames are embedded for it). `label_queue_push` puts given steps at the
head of the queue, pinned there until labeled (the reward-hacking alarm pushes the frames that fooled
the model); recomputes rank the rest after them. `label_queue_next` is the first queued frame still
without a human label: "Label next" and the labeling page's `n` key (from the queue) go there.
"""

from __future__ import annotations

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.urls import reverse

from labeling.images import decode_rgb
from labeling.models import Episode, Frame, Project, Step
from labeling.selectors import human_labeled_steps

from .active_queue import Candidate, rank, value_of
from .models import LabelQueueItem, ModelKind, TrainedModel
from .storage import local_path

MAX_CANDIDATES = 5000  # newest unlabeled frames scored per recompute
QUEUE_SIZE = 200
MAX_LABELED_EMBEDDED = 2000  # newest human-labeled frames the coverage picks keep away from


def _unlabeled_frames(project: Project, limit: int, exclude_steps: set[int]) -> list[Frame]:
    camera = project.camera_views[0] if project.camera_views else "main"
    return list(
        Frame.objects.filter(step__episode__project=project, camera=camera)
        .exclude(step_id__in=human_labeled_steps(project=project))
        .exclude(step_id__in=exclude_steps)
        .select_related("step__episode")
        .order_by("-step__episode__created_at", "step__index")[:limit]
    )


def _labeled_frames(project: Project, limit: int) -> list[Frame]:
    camera = project.camera_views[0] if project.camera_views else "main"
    return list(
        Frame.objects.filter(step__episode__project=project, camera=camera)
        .filter(step_id__in=human_labeled_steps(project=project))
        .order_by("-step__episode__created_at", "step__index")[:limit]
    )


def _decoded(frames: list[Frame]) -> list[np.ndarray]:
    images = []
    for frame in frames:
        with frame.image.open("rb") as handle:
            images.append(decode_rgb(handle.read()))
    return images


def _predictions(model: TrainedModel, images: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The model's success probabilities and embeddings of `images`."""
    import torch

    from .resnet.checkpoint import load_checkpoint
    from .resnet.model import predict_proba_and_features
    from .resnet.train import stack_images

    net, config = load_checkpoint(local_path(model.checkpoint_path))
    if not images:
        return np.zeros(0), np.zeros((0, config.feature_dim), dtype=np.float32)
    batch = stack_images([torch.from_numpy(i) for i in images], config.image_size).numpy()
    probabilities, features = predict_proba_and_features(net, batch)
    return probabilities.astype(np.float64), features


def label_queue_recompute(*, project: Project, limit: int = QUEUE_SIZE) -> int:
    """Rank the project's unlabeled frames and replace its queue (pinned items stay at its head until
    labeled); returns how many were ranked."""
    pinned = list(
        LabelQueueItem.objects.filter(project=project, pinned=True)
        .exclude(step_id__in=human_labeled_steps(project=project))
        .order_by("rank")
    )
    models = list(TrainedModel.objects.filter(project=project, kind=ModelKind.RESNET).order_by("-created_at")[:2])
    if not models:
        LabelQueueItem.objects.filter(project=project).exclude(pk__in=[i.pk for i in pinned]).delete()
        return 0
    frames = _unlabeled_frames(project, MAX_CANDIDATES, {i.step_id for i in pinned})
    images = _decoded(frames)
    probs, features = _predictions(models[0], images)
    others = _predictions(models[1], images)[0] if frames and len(models) > 1 else None
    explore_share = settings.LABEL_QUEUE_EXPLORE_PERCENT / 100
    labeled = (
        _predictions(models[0], _decoded(_labeled_frames(project, MAX_LABELED_EMBEDDED)))[1] if explore_share else None
    )
    candidates, by_key = [], {}
    for i, frame in enumerate(frames):
        step = frame.step
        env = step.env_success if step.episode.source == Episode.Source.SIM else None
        key = (str(step.episode.uuid), step.index)
        by_key[key] = step
        other = None if others is None else float(others[i])
        candidates.append(Candidate(key[0], key[1], float(probs[i]), other, env, features=features[i]))
    ranked = rank(candidates, limit=limit, explore_share=explore_share, labeled_features=labeled)
    with transaction.atomic():
        LabelQueueItem.objects.filter(project=project).exclude(pk__in=[i.pk for i in pinned]).delete()
        for n, item in enumerate(pinned):
            LabelQueueItem.objects.filter(pk=item.pk).update(rank=n)
        LabelQueueItem.objects.bulk_create(
            LabelQueueItem(
                project=project,
                step=by_key[(r.candidate.episode, r.candidate.step)],
                model=models[0],
                rank=len(pinned) + n,
                score=r.score,
                probability=r.candidate.probability,
                reasons=r.reasons,
            )
            for n, r in enumerate(ranked)
        )
    return len(ranked)


def label_queue_push(*, project: Project, steps: list[Step], probabilities: list[float], reasons: list[str]) -> int:
    """Put `steps` (in this order) at the head of the project's queue, pinned until labeled; the items
    already queued move down. `probabilities` are what the model that served each step said."""
    if len(steps) != len(probabilities):
        raise ValueError("one probability per step")
    if any(step.episode.project_id != project.pk for step in steps):
        raise ValueError("every step must belong to the project")
    ids = [step.pk for step in steps]
    with transaction.atomic():
        LabelQueueItem.objects.filter(project=project, step_id__in=ids).delete()
        LabelQueueItem.objects.filter(project=project).update(rank=F("rank") + len(steps))
        LabelQueueItem.objects.bulk_create(
            LabelQueueItem(
                project=project,
                step=step,
                rank=n,
                score=value_of(Candidate(str(step.episode.uuid), step.index, p, None, step.env_success))[0],
                probability=p,
                reasons=list(reasons),
                pinned=True,
            )
            for n, (step, p) in enumerate(zip(steps, probabilities, strict=True))
        )
    return len(steps)


def label_queue_items(*, project: Project, limit: int = 50):
    return (
        LabelQueueItem.objects.filter(project=project)
        .exclude(step_id__in=human_labeled_steps(project=project))
        .select_related("step__episode", "model")
        .order_by("rank")[:limit]
    )


def label_queue_next(*, project: Project) -> LabelQueueItem | None:
    return label_queue_items(project=project, limit=1).first()


def label_url(item: LabelQueueItem) -> str:
    return f"{reverse('episode-label', args=[item.step.episode.uuid])}?step={item.step.index}&queue={item.project_id}"
