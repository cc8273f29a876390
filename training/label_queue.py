"""The labeling queue ranked by value (services and selectors; the ranking itself is active_queue.py).

`label_queue_recompute` scores the project's frames that have no human label with its newest ResNet
model (and the one before it, when there is one), ranks them and replaces the project's queue. It runs
in the background after each training job and on demand. `label_queue_push` puts given steps at the
head of the queue, pinned there until labeled (the reward-hacking alarm pushes the frames that fooled
the model); recomputes rank the rest after them. `label_queue_next` is the first queued frame still
without a human label: "Label next" and the labeling page's `n` key (from the queue) go there.
"""

from __future__ import annotations

import numpy as np
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


def _unlabeled_frames(project: Project, limit: int, exclude_steps: set[int]) -> list[Frame]:
    camera = project.camera_views[0] if project.camera_views else "main"
    return list(
        Frame.objects.filter(step__episode__project=project, camera=camera)
        .exclude(step_id__in=human_labeled_steps(project=project))
        .exclude(step_id__in=exclude_steps)
        .select_related("step__episode")
        .order_by("-step__episode__created_at", "step__index")[:limit]
    )


def _probabilities(model: TrainedModel, images: list[np.ndarray]) -> np.ndarray:
    import torch

    from .resnet.checkpoint import load_checkpoint
    from .resnet.model import predict_proba
    from .resnet.train import stack_images

    net, config = load_checkpoint(local_path(model.checkpoint_path))
    batch = stack_images([torch.from_numpy(i) for i in images], config.image_size).numpy()
    return predict_proba(net, batch).astype(np.float64)


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
    images = []
    for frame in frames:
        with frame.image.open("rb") as handle:
            images.append(decode_rgb(handle.read()))
    probs = _probabilities(models[0], images) if frames else np.zeros(0)
    others = _probabilities(models[1], images) if frames and len(models) > 1 else None
    candidates, by_key = [], {}
    for i, frame in enumerate(frames):
        step = frame.step
        env = step.env_success if step.episode.source == Episode.Source.SIM else None
        key = (str(step.episode.uuid), step.index)
        by_key[key] = step
        candidates.append(Candidate(key[0], key[1], float(probs[i]), None if others is None else float(others[i]), env))
    ranked = rank(candidates, limit=limit)
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
