"""Builders for the files the importer reads: RLinf episode pickles, reward payloads, image folders,
and pickles crafted to run code (their payload touches a marker file)."""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

import numpy as np
import torch
from PIL import Image


def image(seed: int, size: int = 16) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)


def rlinf_episode(
    *, num_actions: int = 4, use_torch: bool = False, success: bool = True, extra_views: int = 1, gae: bool = False
) -> dict:
    """An episode dict of our own in the layout of formats.md section 1 (what RLinf's `CollectEpisode` writes:
    tests/interop/test_rlinf_recordings.py imports files written by RLinf's code), for unit tests of edge cases.

    Per-step success uses both spellings: steps 1-2 report `episode.success_once` only, steps 3+
    report `success` (step 3 False while success_once is True: `success` wins).
    """
    wrap = (lambda a: torch.from_numpy(np.asarray(a))) if use_torch else np.asarray
    n = num_actions
    observations = []
    for i in range(n + 1):
        obs = {
            "main_images": wrap(image(100 + i)),
            "states": wrap(np.arange(3, dtype=np.float32) + i),
            "task_descriptions": "pick up the red cube",
        }
        if extra_views:
            obs["extra_view_images"] = wrap(np.stack([image(200 + 10 * i + v) for v in range(extra_views)]))
        observations.append(obs)
    infos: list[dict] = [{}]
    for i in range(1, n + 1):
        if i <= 2:
            infos.append({"episode": {"success_once": wrap(np.array(i == 2))}, "elapsed_steps": wrap(np.array(i))})
        else:
            infos.append({"success": wrap(np.array(i == n)), "episode": {"success_once": wrap(np.array(True))}})
    data = {
        "rank": 0,
        "env_idx": 3,
        "episode_id": 7,
        "step": 1200,
        "success": success,
        "observations": observations,
        "actions": [wrap(np.full(7, 0.1 * i, dtype=np.float32)) for i in range(n)],
        "rewards": [wrap(np.float32(0.25 * i)) for i in range(n + 1)],
        "terminated": [wrap(np.array(i == n)) for i in range(n + 1)],
        "truncated": [wrap(np.array(False)) for _ in range(n + 1)],
        "infos": infos,
    }
    if gae:
        data["gae"] = [wrap(np.float32(1.0 - 0.1 * i)) for i in range(n + 1)]
    return data


def expected_step_success(num_actions: int) -> list[bool]:
    return [False, False, True] + [i == num_actions for i in range(3, num_actions + 1)]


def write_pickle(path: Path, obj) -> Path:
    path.write_bytes(pickle.dumps(obj, protocol=4))
    return path


class RunsShell:
    """Unpickling this runs a shell command (the classic pickle attack)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class TorchStorageAttack:
    """Names torch.storage._load_from_bytes with bytes that, loaded without weights_only, run a command."""

    def __init__(self, marker: Path):
        buffer = io.BytesIO()
        torch.save(RunsShell(marker), buffer, _use_new_zipfile_serialization=False)
        self.payload = buffer.getvalue()

    def __reduce__(self):
        return (torch.storage._load_from_bytes, (self.payload,))


def reward_payload(labels: list[int], size: int = 16) -> dict:
    images = [torch.from_numpy(image(300 + i, size)) for i in range(len(labels))]
    return {"images": images, "labels": labels, "metadata": {"val_split": 0.2, "random_seed": 42}}


def png_bytes(array: np.ndarray, mode: str = "RGB") -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array, "RGB").convert(mode).save(buffer, format="PNG")
    return buffer.getvalue()


def label_folders(root: Path, *, success: int = 2, failure: int = 3) -> Path:
    """root/success/frame_<i>.png and root/failure/frame_<i>.png (names out of lexical order)."""
    for folder, count, base in (("success", success, 400), ("failure", failure, 500)):
        (root / folder).mkdir(parents=True)
        for i in range(count):
            (root / folder / f"frame_{i * 5}.png").write_bytes(png_bytes(image(base + i)))
    return root
