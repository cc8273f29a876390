"""Reward Studio in the shapes RL frameworks' registries construct. Needs numpy, requests and Pillow only.

- `RLinfRewardModel(cfg)`: RLinf's reward-model interface (`compute_reward(observations) -> [B]` over
  `main_images`), built from RLinf's reward config: the `reward` section or its `model` part, plus a
  `reward_studio` block (`url`, `token`, `deployment`; or env RS_URL, RS_TOKEN, RS_DEPLOYMENT).
- `RLinfHistoryRewardModel(cfg)`: the history/VLM variant (RLinf's `buffered_vlm`): windows RLinf's env
  worker built (`observations["history_input"]`) are scored as they are; raw per-step observations are
  buffered by the service with the deployment's history settings instead.
- `DIEngineRewardModel(config, device, tb_logger)`: DI-engine's `BaseRewardModel` (`estimate`, `train`,
  `collect_data`, `clear_data`, `load_expert_data`) over the service: `collect_data` uploads finished
  episodes, `train` builds a snapshot, queues a job, waits for it and redeploys the new model.

The env reward is never counted twice. RLinf's env worker combines `env_reward_weight * env +
reward_weight * output` itself, so the RLinf adapters return the deployment's `model_output` (the model's
part before weighting) unless `combine_on_service` is set. DI-engine replaces an item's `reward`, so its
adapter says explicitly where the env reward goes: `env_reward="service"` (sent; the deployment's combine
formula decides), `"local"` (not sent; added here to `reward_weight * output`) or `"ignore"`.
"""

from __future__ import annotations

import base64
import copy
import io
import os
import sys
import time
import uuid
from typing import Any

import numpy as np

from inference.client import RewardClient, RewardServiceError, _as_uint8_batch, _like_input, _numpy

ENV_REWARD_CHOICES = ("service", "local", "ignore")


def cfg_get(cfg: Any, key: str, default: Any = None) -> Any:
    """`cfg[key]` for dicts, OmegaConf DictConfigs, EasyDicts and plain objects alike."""
    if cfg is None:
        return default
    if hasattr(cfg, "get"):
        value = cfg.get(key, default)
        return default if value is None else value
    return getattr(cfg, key, default)


def client_from_config(cfg: Any) -> RewardClient:
    """A RewardClient from a `reward_studio` block (or the config itself): url, token, deployment."""
    block = cfg_get(cfg, "reward_studio", cfg)
    url = cfg_get(block, "url") or os.environ.get("RS_URL")
    deployment = cfg_get(block, "deployment") or os.environ.get("RS_DEPLOYMENT")
    token = cfg_get(block, "token") or os.environ.get("RS_TOKEN")
    if not url or not deployment:
        raise ValueError("name the service: reward_studio.url and reward_studio.deployment (or RS_URL, RS_DEPLOYMENT)")
    return RewardClient(url, token, deployment=deployment, timeout=float(cfg_get(block, "timeout", 120.0)))


def png_base64(frame: np.ndarray) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(frame[..., :3])).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def env_success_from(observations: dict) -> np.ndarray | None:
    """Per-env success as RLinf's `apply_gt_success_bonus` finds it in `env_infos` (success,
    success_at_end, success_once; in the infos, their `episode`, `final_info` and its `episode`)."""
    infos = observations.get("env_infos") if isinstance(observations, dict) else None
    if not isinstance(infos, dict):
        return None
    final = infos.get("final_info", {})
    for scope in (infos, infos.get("episode"), final, final.get("episode") if isinstance(final, dict) else None):
        if not isinstance(scope, dict):
            continue
        for key in ("success", "success_at_end", "success_once"):
            if scope.get(key) is not None:
                return np.asarray(_numpy(scope[key])).reshape(-1).astype(bool)
    return None


class RLinfRewardModel:
    """RLinf's reward model over a Reward Studio deployment: `compute_reward(observations)` -> rewards [B].

    `cfg` is RLinf's `reward` section (or `reward.model`) with a `reward_studio` block. The deployment does
    the reward semantics (set `reward_type` `thresholded` and `threshold` = RLinf's
    `reward.model.reward_threshold` for RLinf's ResNet output); `check_deployment` compares them at start.
    `RLinfRewardModel(client)` (a RewardClient) works too.
    """

    def __init__(self, cfg: Any, image_key: str = "main_images", *, combine_on_service: bool | None = None):
        if isinstance(cfg, RewardClient):
            self.client, self.cfg, model_cfg = cfg, {}, {}
            legacy = True
        else:
            self.cfg = cfg
            self.client = client_from_config(cfg)
            model_cfg = cfg_get(cfg, "model", cfg)
            legacy = False
        self.model_cfg = model_cfg
        self.image_key = cfg_get(cfg_get(cfg, "reward_studio", {}), "image_key", image_key)
        block = cfg_get(cfg, "reward_studio", {})
        if combine_on_service is None:
            combine_on_service = bool(cfg_get(block, "combine_on_service", legacy))
        self.combine_on_service = combine_on_service
        self.stream = str(cfg_get(block, "stream", ""))
        if not legacy and cfg_get(block, "check_deployment", True) and self.client.session.headers.get("Authorization"):
            self.check_deployment()

    def check_deployment(self) -> dict:
        """The deployment's settings; ValueError where they contradict RLinf's config."""
        info = self.client.call("GET", f"/api/deployments/{self.client.deployment}/")
        threshold = cfg_get(self.model_cfg, "reward_threshold")
        mismatch = (
            info.get("reward_type") != "thresholded" or abs(float(info["threshold"]) - float(threshold or 0)) > 1e-9
        )
        if threshold is not None and mismatch:
            raise ValueError(
                f"RLinf's reward.model.reward_threshold={threshold} needs the deployment "
                f"{self.client.deployment!r} at reward_type 'thresholded' and threshold {threshold}; it has "
                f"{info.get('reward_type')!r} and {info.get('threshold')}"
            )
        return info

    def compute_reward(self, observations: dict, env_rewards: Any = None) -> Any:
        images = observations.get(self.image_key) if isinstance(observations, dict) else None
        if images is None:
            raise ValueError(f"Missing {self.image_key} in observations for the Reward Studio reward model.")
        dones = observations.get("dones")
        result = self.client.compute_rewards(
            images,
            env_rewards=env_rewards if self.combine_on_service else None,
            dones=dones,
            env_success=env_success_from(observations),
            stream=self.stream or None,
        )
        values = result.rewards if self.combine_on_service else result.model_outputs
        return _like_input(np.asarray(values, dtype=np.float32), images)

    def compute_rewards(self, observations: dict, env_rewards: Any = None, dones: Any = None) -> Any:
        """The older call shape: `dones` may come separately."""
        if dones is not None:
            observations = {**observations, "dones": dones}
        return self.compute_reward(observations, env_rewards=env_rewards)


class RLinfHistoryRewardModel(RLinfRewardModel):
    """RLinf's `buffered_vlm` reward over a VLM deployment. Label rewards come from RLinf's
    `reward.model.reward_parser_params` (positive/negative/unclear/invalid_reward), `interval_reward` and
    `gt_success_bonus` from `reward.model`, applied like RLinf's API reward worker."""

    def __init__(self, cfg: Any, **kwargs):
        super().__init__(cfg, **kwargs)
        model = self.model_cfg
        parser = cfg_get(model, "reward_parser_params", {})
        self.label_rewards = {
            "positive": float(cfg_get(parser, "positive_reward", 1.0)),
            "negative": float(cfg_get(parser, "negative_reward", -0.2)),
            "unclear": float(cfg_get(parser, "unclear_reward", 0.0)),
            "invalid": float(cfg_get(parser, "invalid_reward", 0.0)),
        }
        self.interval_reward = float(cfg_get(model, "interval_reward", 0.0))
        self.gt_success_bonus = float(cfg_get(model, "gt_success_bonus", 0.0))
        self.generate = bool(cfg_get(cfg_get(cfg, "reward_studio", {}), "generate", True))

    def check_deployment(self) -> dict:
        return self.client.call("GET", f"/api/deployments/{self.client.deployment}/")

    @property
    def vlm_url(self) -> str:
        return f"/api/deployments/{self.client.deployment}/vlm/rewards"

    def compute_reward(self, observations: dict, env_rewards: Any = None) -> Any:
        history = observations.get("history_input")
        if history is None:
            return self._steps(observations)
        window = next(iter(history.values()))  # RLinf's buffer (e.g. `history_window`)
        main = window.get("main_images") or []
        extra = window.get("extra_view_images") or [[] for _ in main]
        n = len(main)
        rewards = np.full(n, self.interval_reward, dtype=np.float32)
        valid = [i for i in range(n) if len(main[i]) and len(extra[i])]
        if valid:
            body = {
                "windows": [
                    {
                        "main": [png_base64(_frame(f)) for f in main[i]],
                        "extra": [png_base64(_frame(f)) for f in extra[i]],
                    }
                    for i in valid
                ],
                "generate": self.generate,
                "label_rewards": self.label_rewards,
                "gt_success_bonus": 0.0,  # added below for every env, like RLinf
            }
            items = self.client.call("POST", self.vlm_url, json=body)["items"]
            for i, item in zip(valid, items, strict=True):
                rewards[i] = item["model_output"]
        success = env_success_from(observations)
        if success is not None and self.gt_success_bonus and len(success) == n:
            rewards = rewards + self.gt_success_bonus * success.astype(np.float32)
        return _like_input(rewards, next(iter(observations.values()), None))

    def _steps(self, observations: dict) -> Any:
        """Raw steps: one frame per view and env; the service buffers each env's stream."""
        main = _as_uint8_batch(observations["main_images"])
        extra = np.asarray(_numpy(observations["extra_view_images"]))
        if extra.ndim == 5:  # [B, V, H, W, 3]: the first extra view, as RLinf's trend data
            extra = extra[:, 0]
        extra = _as_uint8_batch(extra)
        n = len(main)
        params = {"streams": ",".join(f"{self.stream}{i}" for i in range(n))}
        dones = observations.get("dones")
        if dones is not None:
            params["dones"] = ",".join("1" if bool(v) else "0" for v in np.asarray(_numpy(dones)).reshape(-1))
        success = env_success_from(observations)
        if success is not None:
            params["env_success"] = ",".join("1" if v else "0" for v in success)
        if self.generate:
            params["generate"] = "true"
        buffer = io.BytesIO()
        np.save(buffer, np.stack([main, extra], axis=1), allow_pickle=False)
        data = self.client.call(
            "POST",
            self.vlm_url,
            data=buffer.getvalue(),
            params=params,
            headers={"Content-Type": "application/x-npy"},
        )
        self.last_items = data["items"]
        return _like_input(
            np.array([i["model_output"] for i in data["items"]], dtype=np.float32), observations["main_images"]
        )


def _frame(frame: Any) -> np.ndarray:
    array = np.asarray(_numpy(frame))
    if array.ndim == 4:  # [1, H, W, 3]
        array = array[0]
    if array.dtype != np.uint8:
        array = np.clip(array, 0, 255).astype(np.uint8)
    return array


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

    def __init__(self, config: Any = None, device: str = "cpu", tb_logger: Any = None, **overrides):
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
        return np.asarray(_numpy(obs[self.image_key] if isinstance(obs, dict) else obs))

    def estimate(self, data: list) -> list[dict]:
        """The items with `reward` replaced (copies: the replay buffer's rewards stay as they were)."""
        if not data:
            return []
        out = [{k: copy.deepcopy(v) if k == "reward" else v for k, v in item.items()} for item in data]
        env = np.array([_scalar(item.get("reward", 0.0)) for item in data], dtype=np.float32)
        dones = [bool(_scalar(item.get("done", False))) for item in data]
        mode = self.cfg["env_reward"]
        result = self.client.compute_rewards(
            np.stack([self._image(item) for item in data]),
            env_rewards=env if mode == "service" else None,
            dones=dones,
        )
        rewards = result.rewards + (env if mode == "local" else 0.0)
        for item, reward in zip(out, rewards, strict=True):
            item["reward"] = _like_input(np.array([reward], dtype=np.float32), item.get("reward"))
        return out

    # ---- data ------------------------------------------------------------------------------------------

    def collect_data(self, data: list) -> None:
        """Keep the transitions and upload every episode that finished (its `done` arrived)."""
        for item in data:
            self.train_data.append(item)
            key = item.get("env_id", 0)
            self._open.setdefault(key, []).append(item)
            if bool(_scalar(item.get("done", False))):
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
                success = bool(_scalar(info.get("success", item.get("success", False))))
                success_any |= success
                done = bool(_scalar(item.get("done", False)))
                steps.append(
                    {
                        "index": index,
                        "reward": float(_scalar(item.get("reward", 0.0))),
                        "terminated": done,
                        "truncated": False,
                        "success": success,
                        "images": {self.cfg["camera"]: png_base64(_frame(self._image(item)))},
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


def _scalar(value: Any) -> Any:
    array = np.asarray(_numpy(value))
    return array.reshape(-1)[0] if array.size else 0


def _split_episodes(transitions: list[dict]) -> list[list[dict]]:
    episodes, current = [], []
    for item in transitions:
        current.append(item)
        if bool(_scalar(item.get("done", False))):
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
