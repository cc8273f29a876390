"""The demo project's real data: ManiSkill PickCube-v1 episodes from the project's scripted agent.

Rendered once (both cameras, a mix of successes and failed grasps), cached as one `.npz` per episode under
`DEMO_CACHE_DIR` keyed by a cache version, size and seed, so later starts read files instead of simulating.
The run command's demo project takes its frame labels from the env's success flag and its window labels
from the trend rule (accepted proposals); `manage.py demo` stores the same episodes labeled by
`webapp.demo.lift` (the cube held up off the table), what its reward model learns.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
from django.conf import settings
from django.db import transaction

from .lift import frame_labels, lift_step

if TYPE_CHECKING:
    from robot_agent.collect import CollectedEpisode

from labeling.images import encode_array
from labeling.models import Episode, FrameLabel, Project
from labeling.services import StepInput, episode_create, episode_finish, steps_append

CACHE_VERSION = 2  # bump when what is rendered or stored changes (policy, cameras, hold steps, arrays)
EPISODE_VERSION = 1  # part of the stored episodes' ids: bump only when the episodes themselves change
FIRST_SEED = 2000
NAMESPACE = uuid.UUID("3f1e2a4c-9b7d-4e0a-8c55-0d6b1f2e9a31")
INSTALL_HINT = (
    "ManiSkill needs a Vulkan driver: run scripts/setup_vulkan.sh (it unpacks Mesa's lavapipe from "
    "bookworm-backports into .vendor/vulkan) or install mesa-vulkan-drivers >= 25 and libvulkan1, "
    "then start again. See README, 'Live teleop'."
)


class Writer(Protocol):
    """Where progress and figures go: a text stream or a management command's `self.stdout`."""

    def write(self, text: str, /) -> object: ...

    def flush(self) -> object: ...


@dataclass
class DemoEpisode:
    seed: int
    perturbed: bool
    images: dict[str, np.ndarray]  # camera -> uint8 [N, H, W, 3]
    success: np.ndarray  # bool [N]
    reward: np.ndarray  # float [N]
    actions: np.ndarray  # float [N, A] (row 0: zeros, the reset)
    cube_height: np.ndarray  # float [N]: the cube's height (m) from the env state
    grasped: np.ndarray  # bool [N]: PickCube's is_grasped

    @property
    def lift_step(self) -> int | None:
        return lift_step(self.cube_height, self.grasped)


def demo_seeds(count: int, first_seed: int = FIRST_SEED) -> list[tuple[int, bool]]:
    """(seed, perturbed) for `count` episodes: every third one has its grasp perturbed (a failure)."""
    return [(first_seed + i, i % 3 == 2) for i in range(count)]


def cache_path(folder: Path, seed: int, perturbed: bool, size: int) -> Path:
    kind = "openhand" if perturbed else "scripted"
    return folder / f"pickcube-v{CACHE_VERSION}-{size}px-{kind}-{seed}.npz"


def _save(path: Path, episode: DemoEpisode) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    arrays = {f"image_{camera}": frames for camera, frames in episode.images.items()}
    np.savez_compressed(
        tmp,
        success=episode.success,
        reward=episode.reward,
        actions=episode.actions,
        cube_height=episode.cube_height,
        grasped=episode.grasped,
        **arrays,
    )
    tmp.replace(path)  # whole files only: an interrupted render is redone, never half-read


def _load(path: Path, seed: int, perturbed: bool) -> DemoEpisode:
    with np.load(path) as data:
        images = {k[len("image_") :]: data[k] for k in data.files if k.startswith("image_")}
        return DemoEpisode(
            seed,
            perturbed,
            images,
            data["success"],
            data["reward"],
            data["actions"],
            data["cube_height"],
            data["grasped"],
        )


def _from_collected(collected: CollectedEpisode) -> DemoEpisode:
    obs = collected.observations
    cameras = list(obs[0].images)
    width = len(collected.actions[0]) if collected.actions else 0
    actions = np.zeros((len(obs), width), np.float32)
    for i, action in enumerate(collected.actions, start=1):
        actions[i] = action
    return DemoEpisode(
        seed=collected.seed,
        perturbed=collected.perturbed,
        images={c: np.stack([o.images[c] for o in obs]) for c in cameras},
        success=np.array([bool(o.success) for o in obs]),
        reward=np.array([float(o.reward) for o in obs], np.float32),
        actions=actions,
        cube_height=np.asarray(collected.cube_heights, np.float32),
        grasped=np.asarray(collected.grasped, bool),
    )


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
    progress: Callable[[int, int, str], None] | None = None,
) -> list[DemoEpisode]:
    """The demo's episodes, from the cache, rendering (once) those missing. Raises RobotError (with what to
    install) or ImportError when the simulator cannot run here."""
    folder = folder or settings.DEMO_CACHE_DIR
    plan = demo_seeds(count, first_seed)
    missing = [(s, p) for s, p in plan if not cache_path(folder, s, p, size).exists()]
    if missing:
        from robot_agent.collect import collect_scripted

        if progress:
            progress(0, len(missing), "starting the simulator")
        perturb = {s for s, p in missing if p}
        for done, collected in enumerate(
            collect_scripted([s for s, _ in missing], size=size, perturb=perturb), start=1
        ):
            _save(cache_path(folder, collected.seed, collected.perturbed, size), _from_collected(collected))
            if progress:
                progress(
                    done, len(missing), f"seed {collected.seed}{' (grasp perturbed)' if collected.perturbed else ''}"
                )
    return [_load(cache_path(folder, s, p, size), s, p) for s, p in plan]


ENV_SUCCESS, LIFTED = "env success", "lifted"


def _frame_values(demo: DemoEpisode, labels: str) -> list[str | None]:
    if labels == ENV_SUCCESS:
        return [FrameLabel.Value.SUCCESS if s else FrameLabel.Value.FAIL for s in demo.success]
    if labels == LIFTED:
        return frame_labels(demo.cube_height, demo.grasped)
    raise ValueError(f"labels must be {ENV_SUCCESS!r} or {LIFTED!r}, got {labels!r}")


def seed_pickcube_episodes(*, project: Project, episodes: list[DemoEpisode], labels: str = ENV_SUCCESS) -> int:
    """Store the episodes in the project (idempotent) with human frame labels from the env's success flag
    (`labels="env success"`) or from the cube held up (`"lifted"`, some frames left unlabeled), and trend-rule
    windows."""
    from labeling.label_services import Actor
    from labeling.proposals import proposals_accept, proposals_generate

    created = []
    for demo in episodes:
        episode_uuid = uuid.uuid5(NAMESPACE, f"{project.pk}/{demo.seed}/{demo.perturbed}/{EPISODE_VERSION}")
        if Episode.objects.filter(uuid=episode_uuid).exists():
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


DEMO_PROJECT = "PickCube demo"
PLACEHOLDER_PROJECT = "Placeholder demo (generated scenes, not a simulator)"
DEMO_TASK = "Pick up the red cube and lift it to the goal."


def seed_demo_project(
    *, episodes: int = 9, size: int = 64, stdout: Writer | None = None, placeholder: bool = False
) -> Project:
    """What the run command seeds: real PickCube episodes, or (when the simulator cannot run here, saying why
    and what to install) a clearly named placeholder project of generated scenes."""
    from .generated import seed_generated_episodes

    stdout = stdout or sys.stdout
    if not placeholder:
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
