"""Fixtures for training tests: a project with labeled generated episodes (frames in storage)."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from training.synthetic import make_scene


def seed_episodes(project, *, episodes: int = 6, steps: int = 10, size: int = 32, windows: bool = True, seed: int = 0):
    """Episodes whose frames show the red square from step `first_success` on, with human labels on every
    step and (optionally) human trend windows. Returns the episodes in creation order."""
    from common.images.checks import encode_array
    from labeling.ingest.services import StepInput, episode_create, episode_finish, steps_append
    from labeling.models import FrameLabel, WindowLabel

    rng = np.random.default_rng(seed)
    created = []
    for number in range(episodes):
        first_success = steps // 2 if number % 3 != 2 else steps  # every third episode fails
        rows = []
        for index in range(steps):
            done = index >= first_success
            images = {
                camera: encode_array(make_scene(done, size, rng), max_side=4096, max_pixels=1 << 24)
                for camera in project.camera_views
            }
            rows.append(StepInput(index=index, reward=float(done), success=done, score=index / steps, images=images))
        episode, _ = episode_create(project=project, uuid=uuid.uuid4(), metadata={"episode_id": number, "env_idx": 0})
        steps_append(episode=episode, steps=rows)
        episode_finish(episode=episode, success=first_success < steps)
        FrameLabel.objects.bulk_create(
            [
                FrameLabel(
                    project=project,
                    episode=episode,
                    step=step,
                    value="success" if step.env_success else "fail",
                    source="human",
                )
                for step in episode.steps.all()
            ]
        )
        if windows:
            WindowLabel.objects.bulk_create(
                [
                    WindowLabel(
                        project=project,
                        episode=episode,
                        start=start,
                        end=start + 4,
                        value=["positive", "negative", "unclear"][start % 3],
                        source="human",
                    )
                    for start in range(0, steps - 4, 2)
                ]
            )
        created.append(episode)
    return created


@pytest.fixture
def labeled_project(project):
    """Files go to the session's MEDIA_ROOT (tests/conftest.py), which the worker processes share."""
    seed_episodes(project)
    return project
