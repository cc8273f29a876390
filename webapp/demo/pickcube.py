"""The demo project's real data: ManiSkill PickCube-v1 episodes from the project's scripted agent.

Rendered once (both cameras, a mix of successes and failed grasps, one simulator process per CPU), cached as
one `.npz` per episode under `DEMO_CACHE_DIR` (`webapp.demo.episode_cache`), so later starts read files
instead of simulating.
Both the run command's demo project and `manage.py demo` label frames by `webapp.demo.lift` (the cube held up
off the table, what a camera frame shows; PickCube's own success flag needs the invisible goal) and windows
by the trend rule (accepted proposals).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from django.conf import settings
from django.db import transaction

from common.images.checks import encode_array
from labeling.ingest.selectors import stored_frame_width
from labeling.ingest.services import StepInput, episode_create, episode_finish, steps_append
from labeling.models import Episode, FrameLabel
from projects.models import Project

from .episode_cache import (
    FIRST_SEED,
    DemoEpisode,
    cache_path,
    demo_seeds,
    episode_load,
    render_missing,
    render_workers,
)
from .lift import frame_labels

EPISODE_VERSION = 1  # part of the stored episodes' ids: bump only when the episodes themselves change
NAMESPACE = uuid.UUID("3f1e2a4c-9b7d-4e0a-8c55-0d6b1f2e9a31")
INSTALL_HINT = (
    "ManiSkill needs a Vulkan driver: run scripts/setup_vulkan.sh (it unpacks Mesa's lavapipe from "
    "bookworm-backports into .vendor/vulkan) or install mesa-vulkan-drivers >= 25 and libvulkan1, "
    "then start again. See docs/teleop.md."
)


class Writer(Protocol):
    """Where progress and figures go: a text stream or a management command's `self.stdout`."""

    def write(self, text: str, /) -> object: ...

    def flush(self) -> object: ...


def progress_bar(stream: Writer | None = None) -> Callable[[int, int, str], None]:
    stream = stream or sys.stdout

    def show(done: int, total: int, what: str) -> None:
        filled = int(30 * done / max(1, total))
        stream.write(f"\r  [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} {what:<40}")
        if done == total:
            stream.write("\n")
        stream.flush()

    return show


def demo_episodes(
    count: int,
    *,
    size: int = 64,
    first_seed: int = FIRST_SEED,
    folder: Path | None = None,
    workers: int | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> list[DemoEpisode]:
    """The demo's episodes, from the cache, rendering (once) those missing in `workers` processes side by
    side (default: one per CPU). Raises RobotError (with what to install) or ImportError when the simulator
    cannot run here."""
    folder = folder or settings.DEMO_CACHE_DIR
    plan = demo_seeds(count, first_seed)
    missing = sum(not cache_path(folder, s, p, size).exists() for s, p in plan)
    render_missing(folder, plan, size=size, workers=workers or render_workers(missing), progress=progress)
    return [episode_load(cache_path(folder, s, p, size), s, p) for s, p in plan]


ENV_SUCCESS, LIFTED = "env success", "lifted"


def _frame_values(demo: DemoEpisode, labels: str) -> list[str | None]:
    if labels == ENV_SUCCESS:
        return [FrameLabel.Value.SUCCESS if s else FrameLabel.Value.FAIL for s in demo.success]
    if labels == LIFTED:
        return frame_labels(demo.cube_height, demo.grasped)
    raise ValueError(f"labels must be {ENV_SUCCESS!r} or {LIFTED!r}, got {labels!r}")


def seed_pickcube_episodes(*, project: Project, episodes: list[DemoEpisode], labels: str = LIFTED) -> int:
    """Store the episodes in the project (idempotent) with human frame labels from the cube held up
    (`labels="lifted"`, some frames left unlabeled) or from the env's success flag (`"env success"`), and
    trend-rule windows. Episodes stored earlier keep their labels, except seeded labels of the other rule that
    nobody edited: those follow `labels`, so a project never mixes the two."""
    from labeling.labels.services import Actor
    from labeling.proposals.services import proposals_accept, proposals_generate

    created = []
    for demo in episodes:
        episode_uuid = uuid.uuid5(NAMESPACE, f"{project.pk}/{demo.seed}/{demo.perturbed}/{EPISODE_VERSION}")
        stored = Episode.objects.filter(uuid=episode_uuid).first()
        if stored is not None:
            _seeded_labels_follow(stored, _frame_values(demo, labels), labels)
            continue
        n = len(demo.success)
        values = _frame_values(demo, labels)
        rows = [
            StepInput(
                index=i,
                action=demo.actions[i].tolist() if i else [],
                reward=float(demo.reward[i]),
                success=bool(demo.success[i]),
                info={"is_grasped": bool(demo.grasped[i]), "cube_height": round(float(demo.cube_height[i]), 4)},
                images={
                    camera: encode_array(frames[i], max_side=4096, max_pixels=1 << 24)
                    for camera, frames in demo.images.items()
                    if camera in project.camera_views
                },
            )
            for i in range(n)
        ]
        with transaction.atomic():
            episode, _ = episode_create(
                project=project,
                uuid=episode_uuid,
                source=Episode.Source.SIM,
                env_id="PickCube-v1",
                metadata={"seed": demo.seed, "policy": "scripted", "grasp_perturbed": demo.perturbed, "demo": True},
            )
            steps_append(episode=episode, steps=rows)
            episode_finish(episode=episode, success=bool(demo.success.any()))
            FrameLabel.objects.bulk_create(
                [
                    FrameLabel(
                        project=project,
                        episode=episode,
                        step=step,
                        value=value,
                        source="human",
                        params={"seeded": "demo", "from": labels},
                    )
                    for step in episode.steps.all()
                    if (value := values[step.index]) is not None
                ]
            )
        created.append(episode.pk)
    if created:
        chosen = Episode.objects.filter(pk__in=created)
        proposals_generate(project=project, episodes=chosen)
        for episode in chosen:
            proposals_accept(project=project, kind="window", actor=Actor(), episode=episode)
    return len(created)


def _seeded_labels_follow(episode: Episode, values: list[str | None], labels: str) -> None:
    """Seeded labels of another rule that no person or agent edited take `values` (None: removed)."""
    stale = FrameLabel.objects.filter(
        episode=episode, source="human", params__seeded="demo", author=None, agent=None
    ).exclude(params__from=labels)
    rows = list(stale.select_related("step"))
    if not rows:
        return
    with transaction.atomic():
        kept = []
        for row in rows:
            value = values[row.step.index]
            if value is not None:
                row.value, row.params = value, {**row.params, "from": labels}
                kept.append(row)
        FrameLabel.objects.filter(pk__in=[row.pk for row in rows if values[row.step.index] is None]).delete()
        FrameLabel.objects.bulk_update(kept, ["value", "params"])


DEMO_PROJECT = "PickCube demo"
PLACEHOLDER_PROJECT = "Placeholder demo (generated scenes, not a simulator)"
DEMO_TASK = "Pick up the red cube and lift it off the table."


def seed_demo_project(
    *, episodes: int = 24, size: int = 128, stdout: Writer | None = None, placeholder: bool = False
) -> Project:
    """What the run command seeds: real PickCube episodes, or (when the simulator cannot run here, saying why
    and what to install) a clearly named placeholder project of generated scenes."""
    from .generated import seed_generated_episodes

    stdout = stdout or sys.stdout
    if not placeholder:
        existing = Project.objects.filter(name=DEMO_PROJECT).first()
        stored = stored_frame_width(project=existing, camera="main") if existing else None
        if stored is not None and stored != size:  # one size per project: a snapshot would resize, not crop
            stdout.write(
                f"{DEMO_PROJECT!r} holds episodes rendered at {stored} px: its new episodes are rendered at "
                f"{stored} px too (delete the project for {size} px ones).\n"
            )
            size = stored
        try:
            rendered = demo_episodes(episodes, size=size, progress=progress_bar(stdout))
        except Exception as exc:  # no Vulkan, no simulator, a broken driver: fall back, loudly
            stdout.write(
                f"\nThe PickCube demo could not be rendered on this machine: {exc.__class__.__name__}: {exc}\n"
                f"{INSTALL_HINT}\nUsing the placeholder project {PLACEHOLDER_PROJECT!r} instead.\n"
            )
        else:
            project, _ = Project.objects.get_or_create(
                name=DEMO_PROJECT, defaults={"task_description": DEMO_TASK, "camera_views": ["main", "extra"]}
            )
            added = seed_pickcube_episodes(project=project, episodes=rendered)
            if added:
                stdout.write(f"Seeded {added} PickCube episodes in '{project.name}'.\n")
            return project
    project, _ = Project.objects.get_or_create(
        name=PLACEHOLDER_PROJECT,
        defaults={
            "task_description": "Generated scenes standing in for the simulator.",
            "camera_views": ["main", "extra"],
        },
    )
    added = seed_generated_episodes(project=project, episodes=episodes)
    if added:
        stdout.write(f"Seeded {added} generated placeholder episodes in '{project.name}'.\n")
    return project
