"""Reward-hacking alarm -> labeling queue: the served frames that fooled the model become training data.

When an alarm is raised, its disagreeing served frames (model success, env fail) are copied into the
deployment's project as the steps of one "monitor" episode (through labeling's services: a sim episode
whose steps carry the env's flag, so they are ordinary frames to label), and pushed to the head of the
project's labeling queue (training's `label_queue_push`) with the reason below. Labeling one of them is
one key on the labeling page; the label is an ordinary human label.
"""

from __future__ import annotations

import logging
import uuid as uuid_lib
from datetime import datetime

from django.conf import settings
from django.db import transaction

from common.images.checks import ImageError, check_image
from labeling.ingest.services import StepInput, episode_create, episode_finish, steps_append
from labeling.models import Episode, Step
from projects.models import Project
from training.queue.services import label_queue_push

from ..models import Deployment, ServedFrame

log = logging.getLogger(__name__)

ALARM_REASON = "reward-hacking alarm: model said success, env said no"
MAX_FRAMES = 200  # frames one alarm adds to the queue


def monitor_episode_uuid(*, deployment_id: int, raised_at: datetime) -> uuid_lib.UUID:
    return uuid_lib.uuid5(uuid_lib.NAMESPACE_URL, f"reward-studio/monitor/{deployment_id}/{raised_at.isoformat()}")


def alarm_frames_enqueue(*, deployment_id: int, frame_ids: list[int], raised_at: datetime) -> Episode | None:
    """Copy the alarm's served frames into a monitor episode of the deployment's project and queue them
    first. None when there is nothing to queue or the deployment has no project. Idempotent per alarm."""
    deployment = Deployment.objects.select_related("project", "trained_model__project").filter(pk=deployment_id).first()
    if deployment is None:
        return None
    project: Project | None = deployment.project or deployment.trained_model.project
    if project is None:
        return None
    frames = list(ServedFrame.objects.filter(pk__in=frame_ids).order_by("created_at", "pk")[:MAX_FRAMES])
    if not frames:
        return None
    camera = project.camera_views[0] if project.camera_views else "main"
    steps: list[StepInput] = []
    kept: list[ServedFrame] = []
    for frame in frames:
        try:
            with frame.image.open("rb") as handle:
                raw = handle.read()
            image = check_image(raw, max_side=settings.MAX_IMAGE_SIDE, max_pixels=settings.MAX_IMAGE_PIXELS)
        except (ImageError, OSError) as exc:  # a damaged or missing file: the alarm's other frames still go
            log.warning("monitor alarm of %s: served frame %s skipped: %s", deployment.name, frame.pk, exc)
            continue
        index = len(kept)
        kept.append(frame)
        info = {
            "served_frame": frame.pk,
            "probability": frame.probability,
            "run": frame.run,
            "episode_ref": frame.episode_ref,
            "episode_step": frame.episode_step,
        }
        steps.append(StepInput(index=index, success=bool(frame.env_success), info=info, images={camera: image}))
    if not kept:
        return None
    frames = kept
    with transaction.atomic():
        episode, _ = episode_create(
            project=project,
            uuid=monitor_episode_uuid(deployment_id=deployment.pk, raised_at=raised_at),
            source=Episode.Source.SIM,
            metadata={"monitor": deployment.name, "alarm_at": raised_at.isoformat(), "served_frames": len(frames)},
        )
        steps_append(episode=episode, steps=steps)
        episode_finish(episode=episode, success=False)
        rows = list(Step.objects.filter(episode=episode).select_related("episode").order_by("index"))
        label_queue_push(
            project=project,
            steps=rows,
            probabilities=[f.probability for f in frames],
            reasons=[
                ALARM_REASON,
                f"deployment {deployment.name}" + (f", run {frames[0].run}" if frames[0].run else ""),
            ],
        )
    return episode
