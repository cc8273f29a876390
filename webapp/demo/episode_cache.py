"""The demo's rendered PickCube episodes as files: one `.npz` per episode, keyed by a cache version, size and
seed, rendered (once) by the scripted agent in parallel worker processes. No Django: a worker process
imports only this module and the robot agent.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .lift import lift_step

if TYPE_CHECKING:
    from robot_agent.collect import CollectedEpisode

CACHE_VERSION = 2  # bump when what is rendered or stored changes (policy, cameras, hold steps, arrays)
FIRST_SEED = 2000
Progress = Callable[[int, int, str], None]


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


def episode_save(path: Path, episode: DemoEpisode) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")  # one per process: two renders never share it
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


def episode_load(path: Path, seed: int, perturbed: bool) -> DemoEpisode:
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


def episode_from_collected(collected: CollectedEpisode) -> DemoEpisode:
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


def render_workers(missing: int, cpus: int | None = None) -> int:
    """Worker processes for `missing` episodes: one per CPU, each simulating its share in its own env."""
    return max(1, min(missing, cpus or os.cpu_count() or 1))


def render_shares(plan: list[tuple[int, bool]], workers: int) -> list[list[tuple[int, bool]]]:
    """The episodes dealt round-robin to the workers, so each gets as many of the costlier ones."""
    return [plan[i::workers] for i in range(workers) if plan[i::workers]]


def render_share(folder: str, share: list[tuple[int, bool]], size: int) -> int:
    """A worker's part: simulate its episodes in one env (ManiSkill's start costs more than an episode) and
    write each to the cache as soon as it is done. Runs in its own process."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one CPU per worker; the workers run side by side
    from robot_agent.collect import collect_scripted

    perturb = {s for s, p in share if p}
    done = 0
    for collected in collect_scripted([s for s, _ in share], size=size, perturb=perturb):
        episode_save(
            cache_path(Path(folder), collected.seed, collected.perturbed, size), episode_from_collected(collected)
        )
        done += 1
    return done


def render_missing(
    folder: Path, plan: list[tuple[int, bool]], *, size: int, workers: int, progress: Progress | None = None
) -> None:
    """Render the episodes of `plan` not in the cache yet, `workers` processes side by side; progress counts
    the files written. A worker's error (no Vulkan, no simulator) is raised here."""
    missing = [(s, p) for s, p in plan if not cache_path(folder, s, p, size).exists()]
    if not missing:
        return
    if progress:
        progress(0, len(missing), f"starting the simulator ({workers} processes)")
    shares = render_shares(missing, workers)
    with ProcessPoolExecutor(len(shares), mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(render_share, str(folder), share, size) for share in shares]
        reported = 0
        while True:
            finished, pending = wait(futures, timeout=1.0)
            written = sum(cache_path(folder, s, p, size).exists() for s, p in missing)
            if progress and reported < written < len(missing):
                reported = written
                progress(written, len(missing), f"episodes rendered ({len(shares)} processes)")
            for future in finished:
                future.result()  # a worker's error stops the render here
            if not pending:
                break
            time.sleep(0.5)
    if progress:
        progress(len(missing), len(missing), "rendered")
