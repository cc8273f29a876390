"""Records episodes with RLinf 0.3.0's own `CollectEpisode` wrapper (`rlinf/envs/wrappers/collect_episode.py`)
around a small camera env of ours, in either of its formats, for tests/interop/test_rlinf_recordings.py.

Invoked as `python side_rlinf_record.py record` with a JSON object on stdin (`root`, `export_format`:
"pickle" or "lerobot", `steps`); prints one JSON object on stdout. It imports only RLinf, gymnasium, numpy and
torch (and, for "lerobot", LeRobot), never the project, so the files are what an RLinf user's collection writes.

- "pickle" runs in the interop environment (rlinf 0.3.0).
- "lerobot" runs in the LeRobot environment (lerobot 0.4.4), which lacks RLinf: the interop environment's
  site-packages are put after its own on sys.path, so LeRobot and its pins come first and RLinf is found.
  RLinf 0.3.0's writer (`rlinf/data/lerobot_writer.py`) imports `lerobot.common.datasets.lerobot_dataset`, the
  module's name before LeRobot moved it to `lerobot.datasets.lerobot_dataset`; no release on the package index
  has the old name (0.3.x and 0.4.x have the new one), so 0.3.0 users ran a LeRobot checkout from source. The old
  name is pointed at 0.4.4's module (the same `LeRobotDataset` class); nothing of RLinf or LeRobot is changed.
  LeRobot 0.4.4 writes the v3.0 layout; RLinf's writer never calls `LeRobotDataset.finalize()` but drops the
  dataset, whose destructor closes the parquet writers.

The env is shaped like RLinf's vectorised envs (maniskill_env.py, robotwin_env.py): 2 envs, observations a dict
of batched torch tensors (`main_images` [B,H,W,3], `wrist_images` [B,H,W,3], `extra_view_images` [B,2,H,W,3],
`third_view_images` [B,H,W,3] uint8, `states` [B,4], `task_descriptions` a list), rewards, terminations and
truncations [B], infos with `success` and `episode.success_once` [B], and auto-reset: a done env is reset in
the same step, its last observation and info in `info["final_observation"]` / `info["final_info"]`.
Env 0 ends its episodes by termination after 3 steps, a success when its episode index is even (from its
2nd step on); env 1 is truncated after 4 steps and never succeeds. Every image is one colour that says where it
came from (`pixel`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

H, W = 24, 32
NUM_ENVS = 2
LENGTHS = (3, 4)  # steps per episode of env 0 (terminated) and env 1 (truncated)
# the env's views: main_images, wrist_images, extra_view_images[0] and [1], third_view_images
CAMERAS = ("main", "wrist", "extra0", "extra1", "third")
TASK = "put the cube in the bowl"


def pixel(env: int, episode: int, t: int, camera: int) -> tuple[int, int, int]:
    """The colour of observation `t` of `episode` of `env` on `camera` (an index into CAMERAS)."""
    return (100 * env + 10 * episode + t, 40 * camera, 7)


def succeeded(env: int, episode: int, t: int) -> bool:
    return env == 0 and episode % 2 == 0 and t >= 2


class TinyCameraEnv:
    """A vectorised env as RLinf's are (not a gym.Env: CollectEpisode takes those as they are)."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.num_envs = NUM_ENVS
        self.t = [0] * NUM_ENVS
        self.episode = [0] * NUM_ENVS
        self.success_once = torch.zeros(NUM_ENVS, dtype=torch.bool)

    def reset(self, *, seed=None, options=None):
        self.t = [0] * NUM_ENVS
        self.episode = [0] * NUM_ENVS
        self.success_once[:] = False
        return self._obs(), self._info()

    def step(self, action):
        torch = self.torch
        assert action.shape == (NUM_ENVS, 2), action.shape
        self.t = [t + 1 for t in self.t]
        obs, info = self._obs(), self._info()
        reward = torch.tensor([0.1 * t + env for env, t in enumerate(self.t)], dtype=torch.float32)
        terminated = torch.tensor([env == 0 and t == LENGTHS[0] for env, t in enumerate(self.t)])
        truncated = torch.tensor([env == 1 and t == LENGTHS[1] for env, t in enumerate(self.t)])
        dones = terminated | truncated
        if dones.any():
            final_obs, final_info = obs, info
            for env in range(NUM_ENVS):
                if dones[env]:
                    self.t[env], self.episode[env] = 0, self.episode[env] + 1
                    self.success_once[env] = False
            obs, info = self._obs(), self._info()
            info |= {"final_observation": final_obs, "final_info": final_info}
        return obs, reward, terminated, truncated, info

    def _obs(self) -> dict[str, Any]:
        torch = self.torch

        def images(camera: int):
            return torch.stack(
                [
                    torch.tensor(pixel(env, self.episode[env], self.t[env], camera), dtype=torch.uint8).expand(H, W, 3)
                    for env in range(NUM_ENVS)
                ]
            )

        return {
            "main_images": images(0),
            "wrist_images": images(1),
            "extra_view_images": torch.stack([images(2), images(3)], dim=1),
            "third_view_images": images(4),
            "states": torch.tensor(
                [[env, self.episode[env], self.t[env], 0.5] for env in range(NUM_ENVS)], dtype=torch.float32
            ),
            "task_descriptions": [TASK] * NUM_ENVS,
        }

    def _info(self) -> dict[str, Any]:
        torch = self.torch
        success = torch.tensor([succeeded(env, self.episode[env], self.t[env]) for env in range(NUM_ENVS)])
        self.success_once |= success
        return {"success": success, "episode": {"success_once": self.success_once.clone()}}


def record(args: dict) -> dict:
    if args["export_format"] == "lerobot":
        _lerobot_with_rlinf()
    import torch
    from rlinf.envs.wrappers.collect_episode import CollectEpisode

    root = Path(args["root"])
    env = CollectEpisode(TinyCameraEnv(), str(root), num_envs=NUM_ENVS, export_format=args["export_format"], fps=10)
    env.reset()
    for step in range(int(args["steps"])):
        env.step(torch.full((NUM_ENVS, 2), 0.5 * step))
    env.close()
    if args["export_format"] == "pickle":
        return {"files": sorted(path.name for path in root.glob("*.pkl"))}
    dataset = root / "rank_0" / "id_0"
    info = json.loads((dataset / "meta" / "info.json").read_text())
    return {"dataset": str(dataset), "codebase_version": info["codebase_version"], "features": sorted(info["features"])}


def _lerobot_with_rlinf() -> None:
    import importlib
    import site

    interop = Path(__file__).resolve().parents[2] / ".interop"
    found = sorted((interop / "lib").glob("python3*/site-packages"))
    if not found:
        raise SystemExit(
            f"{interop}: no interop environment to take RLinf from (source scripts/lib.sh; ensure_interop_env)"
        )
    for packages in found:
        site.addsitedir(str(packages))  # after this environment's own site-packages
    sys.modules["lerobot.common.datasets.lerobot_dataset"] = importlib.import_module("lerobot.datasets.lerobot_dataset")


if __name__ == "__main__":
    command = sys.argv[1]
    if command != "record":
        raise SystemExit(f"unknown command {command!r}; expected record")
    print(json.dumps(record(json.loads(sys.stdin.read()))))
