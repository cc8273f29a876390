"""DI-engine's `BaseRewardModel` over a Reward Studio deployment (numpy and requests; Pillow for uploads).

The contract is di-engine 0.5.3's: `ding/reward_model/base_reward_model.py`, the serial pipeline
`ding/entry/serial_entry_reward_model_offpolicy.py` (calls `collect_data` after each collect, `train()` and
`clear_data()` every iteration, uses what `estimate` returns, `save(path=, name=)` at evaluation and at the
end) and the middleware `reward_estimator` (`ding/framework/middleware/functional/enhancer.py`: ignores what
`estimate` returns; the batch must change in place).

- Frames may be uint8 or float (DI-engine's collector hands float32 tensors over), channels last or first;
  `image_scale` says how floats map to 0..255 (auto: a batch in [0, 1] is scaled by 255).
- `estimate(batch)` scores each transition's `next_obs` (the reward belongs to the state reached: the
  terminal success frame is scored), sets `reward` in place and returns the same list. The env reward is
  kept in `env_reward` the first time, so a transition sampled again is not combined twice.
- `collect_data` keeps the transitions and uploads each finished episode (reset frame, then every
  `next_obs`) to the deployment's project.
- `train()` returns at once. After `retrain_after_transitions` new transitions it starts a retrain
  (reward_client.retrain: proposals, snapshot, job, then the deployment switches to the new model only
  when it is more accurate on the new snapshot's validation split); each later `train()` call advances it
  by one look. `retrain_wait()` blocks until it ends (end of a run, tests).
- `save(path, name)` writes the state (the served model and version, the last retrain) as JSON where
  DI-engine keeps reward-model checkpoints; `load(path, name, restore=True)` reads it back and can switch the
  deployment back to the saved model.

With DI-engine imported first (`import_names: ["reward_client.di_engine"]` in the reward-model config),
importing this module registers the class in DI-engine's registry as type `reward_studio`.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import sys
import time
import uuid
from typing import Any

import numpy as np

from .arrays import like_input, png_base64, scalar, to_numpy, uint8_images
from .client import RewardClient
from .config import cfg_get
from .errors import RewardServiceError
from .retrain import Retrain, retrain_advance, retrain_start

log = logging.getLogger(__name__)

ENV_REWARD_CHOICES = ("service", "local", "ignore")
ENV_REWARD_KEY = "env_reward"  # where estimate keeps a transition's own reward


class DIEngineRewardModel:
    """DI-engine's `BaseRewardModel` over a Reward Studio deployment.

    Built like DI-engine's registry builds reward models: `DIEngineRewardModel(config, device, tb_logger)`,
    `config` an EasyDict/dict with `url`, `token`, `deployment` and the options in `config` below. Each
    transition is a dict with `obs` and `next_obs` (an image, or a dict holding one under `image_key`),
    `reward`, `done` and optionally `info` (`success`) and `env_id`. `DIEngineRewardModel(client)` works too.
    Its token needs the project and the scopes `rewards` (estimate), `ingest` (collect), `labels` and
    `training` (retrain).
    """

    # Values come from the caller's (untyped) DI-engine config; each is checked or converted where used.
    config: dict[str, Any] = dict(
        type="reward_studio",
        url="http://127.0.0.1:8000",
        token=None,
        deployment="",
        transport="auto",  # frames through shared memory when the service runs on this machine: auto | http | shm
        obs_key="next_obs",  # the frame a transition's reward is for
        image_key="main_images",
        camera="main",
        image_scale="auto",  # float frames times this are 0..255; auto: 255 for frames in [0, 1], else 1
        env_reward="service",  # where the env reward goes: service | local | ignore (never added twice)
        estimate_batch=256,  # images per reward request
        project=None,  # project id for uploads and retrains; default: the deployment's project
        retrain_after_transitions=5000,  # new transitions that start a retrain (0: never)
        snapshot_options={"sources": ["human", "proposal"], "trend": False},
        job_kind="resnet",
        job_config={},
        train_timeout_s=3600.0,  # a retrain not done by then is given up (the served model stays)
        poll_s=2.0,  # retrain_wait's pause between looks
        chunk_steps=50,  # steps per upload request
        exp_name=None,  # save()'s default folder (DI-engine's exp_name)
        # read by DI-engine's serial pipelines from this config
        clear_buffer_per_iters=1,
        target_new_data_count=1,
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
        self.client = client or RewardClient(
            cfg["url"], cfg["token"], deployment=cfg["deployment"], transport=cfg["transport"]
        )
        self.obs_key, self.image_key = cfg["obs_key"], cfg["image_key"]
        self.train_data: list[dict] = []  # transitions collected and not yet cleared
        self._open: dict[Any, list[dict]] = {}  # per env: transitions of the episode under way
        self.uploaded: list[str] = []  # episode uuids sent to the service
        self.new_transitions = 0  # collected since the last retrain started
        self.retrain: Retrain | None = None  # the retrain under way
        self.last_train: dict = {}  # what the last finished retrain did (or its error)

    @classmethod
    def default_config(cls) -> dict:
        cfg = copy.deepcopy(cls.config)
        cfg["cfg_type"] = cls.__name__ + "Dict"
        return cfg

    # ---- estimate ------------------------------------------------------------------------------------

    def _image(self, item: dict, key: str | None = None) -> np.ndarray:
        key = key or self.obs_key
        if key not in item:
            raise ValueError(f"a transition has no {key!r} to score (keys: {sorted(item)}); set obs_key")
        obs = item[key]
        return np.asarray(to_numpy(obs[self.image_key] if isinstance(obs, dict) else obs))

    def estimate(self, data: list) -> list:
        """Set each transition's `reward` to the service's reward for its `next_obs`, in place; returns `data`."""
        mode = self.cfg["env_reward"]
        for item in data:
            if ENV_REWARD_KEY not in item:
                item[ENV_REWARD_KEY] = copy.deepcopy(item.get("reward", 0.0))
        size = max(1, int(self.cfg["estimate_batch"]))
        for start in range(0, len(data), size):
            batch = data[start : start + size]
            env = np.array([scalar(item[ENV_REWARD_KEY]) for item in batch], dtype=np.float32)
            result = self.client.compute_rewards(
                uint8_images(np.stack([self._image(item) for item in batch]), self.cfg["image_scale"]),
                env_rewards=env if mode == "service" else None,
                dones=[bool(scalar(item.get("done", False))) for item in batch],
            )
            rewards = result.rewards + (env if mode == "local" else 0.0)
            for item, reward in zip(batch, rewards, strict=True):
                item["reward"] = like_input(np.array([reward], dtype=np.float32), item[ENV_REWARD_KEY])
        return data

    # ---- data ------------------------------------------------------------------------------------------

    def collect_data(self, data: list) -> None:
        """Keep the transitions and upload every episode that finished (its `done` arrived). An episode whose
        next transition does not start where it ended (its `obs` is not the last `next_obs`: DI-engine's
        sample collector drops a collect's extra transitions, `drop_extra`) is uploaded as it is, truncated."""
        for item in data:
            self.train_data.append(item)
            self.new_transitions += 1
            key = scalar(item.get("env_id", 0))
            episode = self._open.get(key)
            if episode and not self._follows(episode[-1], item):
                self._upload(self._open.pop(key), source="sim", truncated=True)
            self._open.setdefault(key, []).append(item)
            if bool(scalar(item.get("done", False))):
                self._upload(self._open.pop(key), source="sim")

    def _follows(self, previous: dict, item: dict) -> bool:
        if "obs" not in item or "next_obs" not in previous:
            return True  # nothing to compare: trust the order
        return bool(np.array_equal(self._image(previous, "next_obs"), self._image(item, "obs")))

    def clear_data(self, iter: int | None = None) -> None:
        """Forget the collected transitions (`iter`, which some callers pass, changes nothing). Uploaded
        episodes stay in the project, and episodes still under way are kept until their `done`."""
        self.train_data.clear()

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

    def _frames(self, episode: list[dict]) -> list[tuple[dict | None, np.ndarray]]:
        """(transition, frame) per step: the reset frame (the first `obs`, no transition) where there is one,
        then each transition's scored frame (`next_obs`), the terminal one included."""
        first = episode[0]
        reset = [(None, self._image(first, "obs"))] if self.obs_key != "obs" and "obs" in first else []
        return reset + [(item, self._image(item)) for item in episode]

    def _upload(
        self, episode: list[dict], *, source: str, metadata: dict | None = None, truncated: bool = False
    ) -> str:
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
        frames = self._frames(episode)
        images = uint8_images(np.stack([frame for _, frame in frames]), self.cfg["image_scale"])
        chunk = int(self.cfg["chunk_steps"])
        for start in range(0, len(frames), chunk):
            steps = []
            for index, (item, _) in enumerate(frames[start : start + chunk], start=start):
                item = item or {}
                info = item.get("info") or {}
                success = bool(scalar(info.get("success", item.get("success", False))))
                success_any |= success
                steps.append(
                    {
                        "index": index,
                        "reward": float(scalar(item.get(ENV_REWARD_KEY, item.get("reward", 0.0)))),
                        "terminated": bool(scalar(item.get("done", False))),
                        "truncated": truncated and index == len(frames) - 1,
                        "success": success,
                        "images": {self.cfg["camera"]: png_base64(images[index])},
                    }
                )
            self.client.call("POST", f"/api/episodes/{episode_uuid}/steps", json={"steps": steps})
        self.client.call("POST", f"/api/episodes/{episode_uuid}/finish", json={"success": success_any})
        self.uploaded.append(episode_uuid)
        return episode_uuid

    # ---- train -----------------------------------------------------------------------------------------

    def train(self, data: Any = None) -> dict:
        """Returns at once: advances the retrain under way by one look, or starts one when
        `retrain_after_transitions` new transitions were collected. What stands (see `retrain_status`)."""
        if data:
            self.collect_data(data)
        if self.retrain is not None:
            self._advance()
        elif 0 < int(self.cfg["retrain_after_transitions"]) <= self.new_transitions:
            self.retrain_now()
        return self.retrain_status()

    def retrain_now(self) -> dict:
        """Start a retrain now (unless one is under way), whatever was collected."""
        if self.retrain is None:
            project = self._project()
            if not isinstance(project, int) and not str(project).isdigit():
                raise ValueError("a retrain needs the project's id (config.project), or leave it unset")
            self.new_transitions = 0
            try:
                self.retrain = retrain_start(
                    self.client,
                    project=int(project),
                    timeout_s=float(self.cfg["train_timeout_s"]),
                    snapshot_options=self.cfg["snapshot_options"],
                    job_kind=self.cfg["job_kind"],
                    job_config=self.cfg["job_config"],
                )
            except RewardServiceError as exc:
                self.last_train = {"error": str(exc)}
                log.warning("Reward Studio retrain not started: %s", exc)
                return self.retrain_status()
            self._finish_if_done()
        return self.retrain_status()

    def retrain_wait(self, timeout_s: float | None = None) -> dict:
        """Block until the retrain under way ends (at most `timeout_s`); what it did."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self.retrain is not None and (deadline is None or time.monotonic() < deadline):
            time.sleep(float(self.cfg["poll_s"]))
            self._advance()
        return self.last_train if self.retrain is None else self.retrain_status()

    def retrain_status(self) -> dict:
        if self.retrain is not None:
            return {"phase": self.retrain.phase, "snapshot": self.retrain.snapshot.get("number"), **self.retrain.result}
        return {"phase": "idle", "new_transitions": self.new_transitions, "last": self.last_train}

    def _advance(self) -> None:
        assert self.retrain is not None
        retrain_advance(self.client, self.retrain)
        self._finish_if_done()

    def _finish_if_done(self) -> None:
        if self.retrain is not None and self.retrain.finished:
            self.last_train = {"phase": self.retrain.phase, **self.retrain.result}
            if self.retrain.phase == "failed":
                log.warning("Reward Studio retrain failed; the served model stays: %s", self.last_train.get("error"))
            self.retrain = None

    # ---- state -----------------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The deployment, the model it serves now and its version, the last retrain."""
        try:
            info = self.client.call("GET", f"/api/deployments/{self.client.deployment}/")
        except RewardServiceError as exc:  # a checkpoint at evaluation must not end the run
            info = {"error": str(exc)}
        return {
            "error": info.get("error"),
            "deployment": self.client.deployment,
            "trained_model": info.get("trained_model"),
            "version": info.get("version"),
            "last_train": self.last_train,
            "new_transitions": self.new_transitions,
        }

    def load_state_dict(self, state: dict) -> None:
        self.last_train = dict(state.get("last_train") or {})
        self.new_transitions = int(state.get("new_transitions") or 0)

    def checkpoint_path(self, path: str | None = None, name: str = "best") -> str:
        """Where DI-engine keeps reward-model checkpoints: `<path>/reward_model/ckpt/ckpt_<name>.json`."""
        folder = path or self.cfg["exp_name"] or "."
        return os.path.join(folder, "reward_model", "ckpt", f"ckpt_{name}.json")

    def save(self, path: str | None = None, name: str = "best") -> str:
        """Write `state_dict()` as JSON (whole or not at all); the file's path."""
        target = self.checkpoint_path(path, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        partial = f"{target}.{uuid.uuid4().hex[:8]}.tmp"
        with open(partial, "w") as handle:
            json.dump(self.state_dict(), handle, indent=1)
        os.replace(partial, target)
        return target

    def load(self, path: str | None = None, name: str = "best", *, restore: bool = False) -> dict:
        """Read what `save` wrote; with `restore`, serve the saved model again from the deployment."""
        with open(self.checkpoint_path(path, name)) as handle:
            state = json.load(handle)
        if state.get("deployment") != self.client.deployment:
            raise ValueError(
                f"the checkpoint is for deployment {state.get('deployment')!r}, not {self.client.deployment!r}"
            )
        self.load_state_dict(state)
        if restore and state.get("trained_model") is not None:
            self.client.call(
                "POST",
                f"/api/deployments/{self.client.deployment}/model",
                json={"trained_model": state["trained_model"]},
            )
        return state


def _split_episodes(transitions: list[dict]) -> list[list[dict]]:
    episodes: list[list[dict]] = []
    current: list[dict] = []
    for item in transitions:
        current.append(item)
        if bool(scalar(item.get("done", False))):
            episodes.append(current)
            current = []
    if current:
        episodes.append(current)
    return episodes


def register_with_ding() -> None:
    """Register the class in DI-engine's reward-model registry as `reward_studio` (done on import when
    DI-engine is already imported)."""
    from ding.utils import REWARD_MODEL_REGISTRY

    if "reward_studio" not in REWARD_MODEL_REGISTRY:
        REWARD_MODEL_REGISTRY.register("reward_studio")(DIEngineRewardModel)


if "ding" in sys.modules:
    register_with_ding()
