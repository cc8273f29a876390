"""DI-engine's `BaseRewardModel` over a Reward Studio deployment (numpy and requests; Pillow for uploads).

`DIEngineRewardModel(config, device, tb_logger)`: `estimate`, `train`, `collect_data`, `clear_data`,
`load_expert_data`: `collect_data` uploads finished episodes, `train` builds a snapshot, queues a job, waits
for it and redeploys the new model. DI-engine replaces an item's `reward`, so the adapter says explicitly
where the env reward goes: `env_reward="service"` (sent; the deployment's combine formula decides),
`"local"` (not sent; added here to `reward_weight * output`) or `"ignore"`.

With DI-engine imported first (its `import_names: ["reward_client.di_engine"]`), importing this module
registers the class in DI-engine's reward-model registry as type `reward_studio`.
"""

from __future__ import annotations

import copy
import sys
import time
import uuid
from typing import Any

import numpy as np

from .arrays import like_input, png_base64, scalar, to_numpy, uint8_frame
from .client import RewardClient
from .config import cfg_get
from .errors import RewardServiceError

ENV_REWARD_CHOICES = ("service", "local", "ignore")


class DIEngineRewardModel:
    """DI-engine's `BaseRewardModel` over a Reward Studio deployment.

    Built like DI-engine's registry builds reward models: `DIEngineRewardModel(config, device, tb_logger)`,
    `config` an EasyDict/dict with `url`, `token`, `deployment` and the options in `config` below. Each
    transition is a dict with `obs` (an image, or a dict holding one under `image_key`), `reward`, `done`
    and optionally `info` (`success`) and `env_id`. `DIEngineRewardModel(client)` works too. Its token
    needs the project and the scopes `rewards` (estimate), `ingest` (collect), `labels` and `training` (train).
    """

    # Values come from the caller's (untyped) DI-engine config; each is checked or converted where used.
    config: dict[str, Any] = dict(
        type="reward_studio",
        url="http://127.0.0.1:8000",
        token=None,
        deployment="",
        obs_key="obs",
        image_key="main_images",
        camera="main",
        env_reward="service",  # where the env reward goes: service | local | ignore (never added twice)
        project=None,  # project id or name for uploads; default: the deployment's project
        snapshot_options={"sources": ["human", "proposal"], "trend": False},
        job_kind="resnet",
        job_config={},
        train_timeout_s=3600.0,
        poll_s=2.0,
        chunk_steps=50,
    )

    def __init__(self, config: Any = None, device: str = "cpu", tb_logger: Any = None, **overrides: Any) -> None:
        if isinstance(config, RewardClient):
            client, config = config, {}
        else:
            client = None
        cfg = copy.deepcopy(self.config)
        for key in list(cfg):
            cfg[key] = cfg_get(config, key, cfg[key])
        cfg.update(overrides)
        if cfg["env_reward"] not in ENV_REWARD_CHOICES:
            raise ValueError(f"env_reward must be one of {', '.join(ENV_REWARD_CHOICES)}, got {cfg['env_reward']!r}")
        self.cfg = cfg
        self.device, self.tb_logger = device, tb_logger
        self.client = client or RewardClient(cfg["url"], cfg["token"], deployment=cfg["deployment"])
        self.obs_key, self.image_key = cfg["obs_key"], cfg["image_key"]
        self.train_data: list[dict] = []  # transitions collected and not yet cleared
        self._open: dict[Any, list[dict]] = {}  # per env: transitions of the episode under way
        self.uploaded: list[str] = []  # episode uuids sent to the service
        self.last_train: dict = {}

    @classmethod
    def default_config(cls) -> dict:
        cfg = copy.deepcopy(cls.config)
        cfg["cfg_type"] = cls.__name__ + "Dict"
        return cfg

    # ---- estimate ------------------------------------------------------------------------------------

    def _image(self, item: dict) -> np.ndarray:
        obs = item[self.obs_key]
        return np.asarray(to_numpy(obs[self.image_key] if isinstance(obs, dict) else obs))

    def estimate(self, data: list) -> list[dict]:
        """The items with `reward` replaced (copies: the replay buffer's rewards stay as they were)."""
        if not data:
            return []
        out = [{k: copy.deepcopy(v) if k == "reward" else v for k, v in item.items()} for item in data]
        env = np.array([scalar(item.get("reward", 0.0)) for item in data], dtype=np.float32)
        dones = [bool(scalar(item.get("done", False))) for item in data]
        mode = self.cfg["env_reward"]
        result = self.client.compute_rewards(
            np.stack([self._image(item) for item in data]),
            env_rewards=env if mode == "service" else None,
            dones=dones,
        )
        rewards = result.rewards + (env if mode == "local" else 0.0)
        for item, reward in zip(out, rewards, strict=True):
            item["reward"] = like_input(np.array([reward], dtype=np.float32), item.get("reward"))
        return out

    # ---- data ------------------------------------------------------------------------------------------

    def collect_data(self, data: list) -> None:
        """Keep the transitions and upload every episode that finished (its `done` arrived)."""
        for item in data:
            self.train_data.append(item)
            key = item.get("env_id", 0)
            self._open.setdefault(key, []).append(item)
            if bool(scalar(item.get("done", False))):
                self._upload(self._open.pop(key), source="sim")

    def clear_data(self) -> None:
        """Forget the local buffer (uploaded episodes stay in the project)."""
        self.train_data.clear()
        self._open.clear()

    def load_expert_data(self, data: Any = None) -> None:
        """Import expert episodes: a list of episodes, each a list of transitions (or one flat list ended
        by `done`s). They are uploaded as import episodes marked `expert` in their metadata."""
        if data is None:
            return
        episodes = data if data and isinstance(data[0], list) else _split_episodes(data)
        for episode in episodes:
            if episode:
                self._upload(episode, source="import", metadata={"expert": True})

    def _project(self) -> Any:
        if self.cfg["project"] is None:
            info = self.client.call("GET", f"/api/deployments/{self.client.deployment}/")
            self.cfg["project"] = info["project"]
        return self.cfg["project"]

    def _upload(self, episode: list[dict], *, source: str, metadata: dict | None = None) -> str:
        episode_uuid = str(uuid.uuid4())
        self.client.call(
            "POST",
            "/api/episodes",
            json={
                "project": str(self._project()),
                "uuid": episode_uuid,
                "source": source,
                "metadata": {"uploaded_by": "di-engine", **(metadata or {})},
            },
        )
        success_any = False
        chunk = int(self.cfg["chunk_steps"])
        for start in range(0, len(episode), chunk):
            steps = []
            for index, item in enumerate(episode[start : start + chunk], start=start):
                info = item.get("info") or {}
                success = bool(scalar(info.get("success", item.get("success", False))))
                success_any |= success
                done = bool(scalar(item.get("done", False)))
                steps.append(
                    {
                        "index": index,
                        "reward": float(scalar(item.get("reward", 0.0))),
                        "terminated": done,
                        "truncated": False,
                        "success": success,
                        "images": {self.cfg["camera"]: png_base64(uint8_frame(self._image(item)))},
                    }
                )
            self.client.call("POST", f"/api/episodes/{episode_uuid}/steps", json={"steps": steps})
        self.client.call("POST", f"/api/episodes/{episode_uuid}/finish", json={"success": success_any})
        self.uploaded.append(episode_uuid)
        return episode_uuid

    # ---- train -----------------------------------------------------------------------------------------

    def train(self, data: Any = None) -> dict:
        """Snapshot the project's labels (env success turned into frame proposals first), wait for the
        snapshot's build, queue a training job, wait for it and serve the new model from the deployment
        (`train_timeout_s` bounds the build and the training together). Returns what happened."""
        if data:
            self.collect_data(data)
        project = self._project()
        if not isinstance(project, int) and not str(project).isdigit():
            raise ValueError("train needs the project's id (config.project), or leave it unset")
        base = f"/api/projects/{int(project)}"
        deadline = time.monotonic() + float(self.cfg["train_timeout_s"])
        generation = self.client.call("POST", f"{base}/proposals/generate", json={}) or {}
        while generation.get("status") in ("queued", "running"):  # a background job; the snapshot needs it done
            if time.monotonic() > deadline:
                raise RewardServiceError(f"proposals not generated in {self.cfg['train_timeout_s']} s")
            time.sleep(float(self.cfg["poll_s"]))
            generation = self.client.call("GET", generation["url"])
        if generation.get("status") in ("failed", "cancelled"):
            raise RewardServiceError(f"proposal generation {generation['status']}: {generation.get('error')}")
        snapshot = self.client.call("POST", f"{base}/snapshots", json={"options": self.cfg["snapshot_options"]})
        while snapshot["status"] == "building":  # the build runs as a task; a job needs a ready snapshot
            if time.monotonic() > deadline:
                raise RewardServiceError(f"snapshot #{snapshot['number']} not built in {self.cfg['train_timeout_s']} s")
            time.sleep(float(self.cfg["poll_s"]))
            snapshot = self.client.call("GET", snapshot.get("url") or f"/api/snapshots/{snapshot['id']}")
        if snapshot["status"] != "ready":
            raise RewardServiceError(f"snapshot #{snapshot['number']} {snapshot['status']}: {snapshot.get('error')}")
        job = self.client.call(
            "POST",
            f"{base}/jobs",
            json={"snapshot": snapshot["number"], "kind": self.cfg["job_kind"], "config": self.cfg["job_config"]},
        )
        while job["status"] not in ("succeeded", "failed", "cancelled"):
            if time.monotonic() > deadline:
                raise RewardServiceError(f"training job {job['id']} did not finish in {self.cfg['train_timeout_s']} s")
            time.sleep(float(self.cfg["poll_s"]))
            job = self.client.call("GET", f"/api/jobs/{job['id']}")
        if job["status"] != "succeeded" or not job.get("models"):
            raise RewardServiceError(f"training job {job['id']} {job['status']}: {job.get('error') or 'no model'}")
        deployment = self.client.call(
            "POST", f"/api/deployments/{self.client.deployment}/model", json={"trained_model": job["models"][0]}
        )
        self.last_train = {"snapshot": snapshot["number"], "job": job["id"], "model": job["models"][0], **deployment}
        return self.last_train

    def state_dict(self) -> dict:
        return {"deployment": self.client.deployment, "last_train": self.last_train}

    def load_state_dict(self, state: dict) -> None:
        self.last_train = dict(state.get("last_train") or {})


def _split_episodes(transitions: list[dict]) -> list[list[dict]]:
    episodes, current = [], []
    for item in transitions:
        current.append(item)
        if bool(scalar(item.get("done", False))):
            episodes.append(current)
            current = []
    if current:
        episodes.append(current)
    return episodes


if "ding" in sys.modules:  # register with DI-engine when it is present, under type "reward_studio"
    try:
        from ding.utils import REWARD_MODEL_REGISTRY

        REWARD_MODEL_REGISTRY.register("reward_studio")(DIEngineRewardModel)
    except Exception:  # an older DI-engine without the registry: construct the class directly
        pass
