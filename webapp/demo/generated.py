"""Seeding the demo project with generated, labeled episodes (enough to train a reward model on a CPU)."""

from __future__ import annotations

import uuid

import numpy as np
from django.db import transaction

from common.images.checks import encode_array
from labeling.ingest.services import StepInput, episode_create, episode_finish, steps_append
from labeling.models import Episode, FrameLabel
from projects.models import Project
from training.synthetic import make_scene

DEMO_NAMESPACE = uuid.UUID("6a0f3f5e-2f7e-4f63-9d53-4a0f0b1e2d11")


def seed_generated_episodes(*, project: Project, episodes: int = 12, steps: int = 20, size: int = 64) -> int:
    """Episodes whose frames show the goal (a red square) from a random step on; labeled by a human.

    Idempotent: episode ids are derived from the project and the episode number.
    """
    rng = np.random.default_rng(0)
    created = 0
    for number in range(episodes):
        episode_uuid = uuid.uuid5(DEMO_NAMESPACE, f"{project.pk}/{number}")
        if Episode.objects.filter(uuid=episode_uuid).exists():
            continue
        succeeds = number % 3 != 2
        first_success = int(rng.integers(steps // 3, steps - 2)) if succeeds else steps
        rows = []
        for index in range(steps):
            done = index >= first_success
            images = {
                camera: encode_array(make_scene(done, size, rng), max_side=4096, max_pixels=1 << 24)
                for camera in project.camera_views
            }
            rows.append(StepInput(index=index, action=[0.0] * 7, reward=float(done), success=done, images=images))
        with transaction.atomic():
            episode, _ = episode_create(
                project=project,
                uuid=episode_uuid,
                source=Episode.Source.SIM,
                env_id="GeneratedScenes-v0",
                metadata={"generated": True},
            )
            steps_append(episode=episode, steps=rows)
            episode_finish(episode=episode, success=succeeds)
            FrameLabel.objects.bulk_create(
                [
                    FrameLabel(
                        project=project,
                        episode=episode,
                        step=step,
                        value=FrameLabel.Value.SUCCESS if step.env_success else FrameLabel.Value.FAIL,
                        source="human",
                        params={"seeded": "demo"},
                    )
                    for step in episode.steps.all()
                ]
            )
        created += 1
    return created
