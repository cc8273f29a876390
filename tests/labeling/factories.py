"""Test data for labeling: episodes with N steps and two cameras of tiny generated PNG frames."""

from __future__ import annotations

import math
import uuid as uuid_lib

import numpy as np

from common.images.checks import encode_array
from labeling.ingest.services import StepInput, episode_create, episode_finish, steps_append
from labeling.models import Episode
from projects.models import Project


def frame_array(step: int, camera: int, size: int = 64, num_steps: int = 100) -> np.ndarray:
    """A picture that changes with the step: a square moving across a tinted background."""
    image = np.zeros((size, size, 3), dtype=np.uint8)
    image[:] = (30 + 40 * camera, 40, 60 + (step * 7) % 120)
    x = int((size - 12) * step / max(1, num_steps - 1))
    y = size // 3 if camera == 0 else size // 2
    image[y : y + 12, x : x + 12] = (230, 60 + 150 * camera, 40)
    return image


def episode_with_frames(
    *,
    project: Project,
    num_steps: int,
    size: int = 64,
    success_from: int | None = None,
    rewards: list[float] | None = None,
    scores: list[float] | None = None,
    source: str = Episode.Source.SIM,
    agent=None,
    finish: bool = True,
    chunk: int = 250,
) -> Episode:
    """An episode whose env success flag turns on at `success_from` (default: the last fifth) and whose
    reward rises smoothly, with one frame per step for each of the project's cameras."""
    episode, _ = episode_create(
        project=project, uuid=uuid_lib.uuid4(), source=source, agent=agent, env_id="PickCube-v1"
    )
    success_from = num_steps - max(1, num_steps // 5) if success_from is None else success_from
    if rewards is None:
        rewards = [round(0.5 - 0.5 * math.cos(math.pi * i / max(1, num_steps - 1)), 4) for i in range(num_steps)]
    limits = {"max_side": 4096, "max_pixels": 4096 * 4096}
    for first in range(0, num_steps, chunk):
        steps = [
            StepInput(
                index=i,
                action=[round(0.01 * i, 3), -0.1, 0.0],
                reward=rewards[i],
                success=i >= success_from,
                score=None if scores is None else scores[i],
                images={
                    camera: encode_array(frame_array(i, c, size, num_steps), **limits)
                    for c, camera in enumerate(project.camera_views)
                },
            )
            for i in range(first, min(num_steps, first + chunk))
        ]
        steps_append(episode=episode, steps=steps)
    if finish:
        episode = episode_finish(episode=episode)
    return episode
