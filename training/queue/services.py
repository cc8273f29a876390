"""The labeling queue ranked by value (services and selectors; the ranking itself is active_queue.py).

`label_queue_recompute` scores the project's frames that have no human label with its newest ResNet
model (and the one before it, when there is one), ranks them and replaces the project's queue. It runs
in the background after each training job and on demand. Frames are decoded one at a time and kept only
at the model's input size, a batch of `BACKGROUND_DECODE_PIXELS` at a time (common.images.budget), so
its memory does not grow with the frames' number or size: a frame much larger than the model's input is
decoded reduced by a whole factor first (at least twice the size the model's input is cut from), and the
task fails with the reason if it grows its worker by more than `TASK_MEMORY_BUDGET_MB`
(common.memory; the worker hands freed memory back after each batch and each task). Frames that
will not decode are skipped, each
logged with its reason (`label_queue_rank` returns them). A share of the queue (settings
`LABEL_QUEUE_EXPLORE_PERCENT`) is coverage picks: frames least like any labeled or queued one in the
newest model's embedding (up to `MAX_LABELED_EMBEDDED` labeled frames are embedded for it). `label_queue_push` puts given steps at the
head of the queue, pinned there until labeled (the reward-hacking alarm pushes the frames that fooled
the model); recomputes rank the rest after them. `label_queue_next` is the first queued frame still
without a human label: "Label next" and the labeling page's `n` key (from the queue) go there.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.urls import reverse

from common.images.budget import FrameBatches, SkippedFrame
from common.memory import MIB, MemoryBudget, malloc_trim
from labeling.labels.selectors import human_labeled_steps
from labeling.models import Episode, Frame, Step
from projects.models import Project

from ..models import LabelQueueItem, ModelKind, TrainedModel
from ..storage import local_path
from .ranking import Candidate, rank, value_of

log = logging.getLogger(__name__)
MAX_CANDIDATES = 5000  # newest unlabeled frames scored per recompute
QUEUE_SIZE = 200
MAX_LABELED_EMBEDDED = 2000  # newest human-labeled frames the coverage picks keep away from
FORWARD_BATCH = 16  # frames per forward pass: the activations grow with it (64 at 224x224 peaked near +700 MiB)


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


def _read(frame: Frame) -> bytes:
    with frame.image.open("rb") as handle:
        return handle.read()


def _load(model: TrainedModel):
    from ..resnet.checkpoint import load_checkpoint
    from ..resnet.model import uncropped

    net, config = load_checkpoint(local_path(model.checkpoint_path))
    return uncropped(net), config


def _needed_size(config) -> tuple[int, int]:
    """(width, height) of the whole frame whose `config.crop` box is the model's input size: the size the
    frames need to be decoded at (fractions [top, left, height, width]; no crop: the input size itself)."""
    height, width = config.image_size[1:]
    if config.crop:
        return math.ceil(width / config.crop[3]), math.ceil(height / config.crop[2])
    return width, height


def _batches(config) -> FrameBatches:
    return FrameBatches(settings.BACKGROUND_DECODE_PIXELS, decode_at_least=_needed_size(config))


def _score(
    frames: list[Frame], nets: list, config, batches: FrameBatches, budget: MemoryBudget
) -> tuple[list[int], list[np.ndarray], np.ndarray]:
    """Scores stored frames with `nets` (uncropped ResNets that all take `config`'s input) within
    settings.BACKGROUND_DECODE_PIXELS: each frame is decoded, cut and resized to the model's input at
    once (input_frame), and scored a batch at a time; only probabilities and embeddings are kept. Returns
    (positions of the frames scored, each net's probabilities, the first net's embeddings); frames that
    will not decode are left out and listed in `batches.skipped`."""
    from ..resnet.model import input_frame, predict_proba_and_features

    kept: list[int] = []
    probabilities: list[list[np.ndarray]] = [[np.zeros(0)] for _ in nets]
    features = [np.zeros((0, config.feature_dim), dtype=np.float32)]
    by_name = {str(frame.image.name): frame for frame in frames}
    for positions, arrays in batches.batches(
        list(by_name),
        lambda name: _read(by_name[name]),
        lambda image: input_frame(image, config),
    ):
        batch = np.stack(arrays)
        kept.extend(positions)
        for n, net in enumerate(nets):
            p, f = predict_proba_and_features(net, batch, batch_size=FORWARD_BATCH)
            probabilities[n].append(p.astype(np.float64))
            if n == 0:
                features.append(f)
        del batch, arrays
        malloc_trim()  # the batch's decode buffers go back to the OS now, not after the task
        budget.check()
    return kept, [np.concatenate(p) for p in probabilities], np.concatenate(features)


def _log_skipped(project: Project, skipped: list[SkippedFrame]) -> None:
    for frame in skipped:
        log.warning("label queue of project %s: frame %s skipped: %s", project.pk, frame.name, frame.reason)


@dataclass(frozen=True)
class QueueRanking:
    """What a recompute did: frames ranked into the queue, and stored frames it left out (with why)."""

    ranked: int
    skipped: list[SkippedFrame] = field(default_factory=list)


def label_queue_recompute(*, project: Project, limit: int = QUEUE_SIZE) -> int:
    """Rank the project's unlabeled frames and replace its queue (pinned items stay at its head until
    labeled); returns how many were ranked."""
    return label_queue_rank(project=project, limit=limit).ranked


def label_queue_rank(*, project: Project, limit: int = QUEUE_SIZE) -> QueueRanking:
    """label_queue_recompute, saying also which frames were skipped because they will not decode."""
    pinned = list(
        LabelQueueItem.objects.filter(project=project, pinned=True)
        .exclude(step_id__in=human_labeled_steps(project=project))
        .order_by("rank")
    )
    models = list(TrainedModel.objects.filter(project=project, kind=ModelKind.RESNET).order_by("-created_at")[:2])
    if not models:
        LabelQueueItem.objects.filter(project=project).exclude(pk__in=[i.pk for i in pinned]).delete()
        return QueueRanking(0)
    budget = MemoryBudget(settings.TASK_MEMORY_BUDGET_MB * MIB, f"the label-queue recompute of project {project.pk}")
    (newest, config), *older = [_load(m) for m in models]
    batches = _batches(config)
    same_input = [net for net, c in older if (c.image_size, c.crop) == (config.image_size, config.crop)]
    frames = _unlabeled_frames(project, MAX_CANDIDATES, {i.step_id for i in pinned})
    kept, scores, features = _score(frames, [newest, *same_input], config, batches, budget)
    frames, probs = [frames[i] for i in kept], scores[0]
    others = scores[1] if same_input else None
    if older and not same_input and frames:  # the older model takes another input size: a second pass
        net, other_config = older[0]
        again, other_scores, _ = _score(frames, [net], other_config, _batches(other_config), budget)
        others = other_scores[0]
        if len(again) != len(frames):  # a file changed or went between the passes: keep the frames both scored
            frames, probs, features = [frames[i] for i in again], probs[again], features[again]
    explore_share = settings.LABEL_QUEUE_EXPLORE_PERCENT / 100
    labeled = None
    if explore_share:
        labeled = _score(_labeled_frames(project, MAX_LABELED_EMBEDDED), [newest], config, batches, budget)[2]
    _log_skipped(project, batches.skipped)
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
    return QueueRanking(len(ranked), batches.skipped)


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
