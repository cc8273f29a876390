"""Reward Studio in the shapes RLinf's reward workers construct (numpy and requests; Pillow for windows).

- `RLinfRewardModel(cfg)`: RLinf's reward-model interface (`compute_reward(observations) -> [B]` over
  `main_images`), built from RLinf's reward config: the `reward` section or its `model` part, plus a
  `reward_studio` block (`url`, `token`, `deployment`; or env RS_URL, RS_TOKEN, RS_DEPLOYMENT).
- `RLinfHistoryRewardModel(cfg)`: the history/VLM variant (RLinf 0.3.0's `history_vlm`, head's
  `buffered_vlm`): windows RLinf's env worker built (`observations["history_input"]`) are scored as they are;
  raw per-step observations are buffered by the service with the deployment's history settings instead.
- `rlinf_plugin`: both registered in RLinf's own registry through its `RLINF_EXT_MODULE` hook.

The env reward is never counted twice: RLinf's env worker combines `env_reward_weight * env +
reward_weight * output` itself, so these return the deployment's `model_output` (the model's part before
weighting) unless `combine_on_service` is set.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from .arrays import like_input, png_base64, to_numpy, uint8_batch, uint8_frame
from .client import RewardClient
from .config import cfg_get, client_from_config


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
                return np.asarray(to_numpy(scope[key])).reshape(-1).astype(bool)
    return None


class RLinfRewardModel:
    """RLinf's reward model over a Reward Studio deployment: `compute_reward(observations)` -> rewards [B].

    `cfg` is RLinf's `reward` section (or `reward.model`) with a `reward_studio` block. The deployment does
    the reward semantics (`reward_type` `thresholded` at RLinf's `reward.model.reward_threshold`, or `soft`
    where RLinf's config sets none); `check_deployment` compares them at start (with a token).
    `RLinfRewardModel(client)` (a RewardClient) works too.
    """

    def __init__(self, cfg: Any, image_key: str = "main_images", *, combine_on_service: bool | None = None) -> None:
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
        """The deployment's settings; ValueError where its output is not what RLinf's ResNet gives for this
        config: with `reward.model.reward_threshold` set, the probability zeroed at or below it (reward_type
        `thresholded` at that threshold); without it, the raw probability (reward_type `soft`)."""
        info = self.client.call("GET", f"/api/deployments/{self.client.deployment}/")
        threshold = cfg_get(self.model_cfg, "reward_threshold")
        if threshold is None:
            if info.get("reward_type") != "soft":
                raise ValueError(
                    f"RLinf's ResNet reward without reward.model.reward_threshold is the raw probability: the "
                    f"deployment {self.client.deployment!r} needs reward_type 'soft', it has {info.get('reward_type')!r} "
                    "(or set reward_threshold and make it 'thresholded')"
                )
        elif info.get("reward_type") != "thresholded" or abs(float(info["threshold"]) - float(threshold)) > 1e-9:
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
        return like_input(np.asarray(values, dtype=np.float32), images)

    def compute_rewards(self, observations: dict, env_rewards: Any = None, dones: Any = None) -> Any:
        """The older call shape: `dones` may come separately."""
        if dones is not None:
            observations = {**observations, "dones": dones}
        return self.compute_reward(observations, env_rewards=env_rewards)


class RLinfHistoryRewardModel(RLinfRewardModel):
    """RLinf's `history_vlm` (head: `buffered_vlm`) reward over a VLM deployment. Label rewards come from RLinf's
    `reward.model.reward_parser_params` (positive/negative/unclear/invalid_reward), `interval_reward` and
    `gt_success_bonus` from `reward.model`, applied like RLinf's API reward worker."""

    def __init__(self, cfg: Any, **kwargs: Any) -> None:
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
        # RLinf 0.3.0's qwentrend input builder: the `history_window` buffer's main and extra views; an env is
        # scored where every buffer and key holds a window for it (HistoryVLMInputBuilder.get_valid_input_ids)
        histories = [h for buffer in history.values() for h in buffer.values()]
        if not histories:  # no env due this step (input_interval above 1): every env gets interval_reward
            histories = [[[] for _ in range(len(observations.get("main_images", [])))]]
        window: dict = history.get("history_window") or next(iter(history.values()), {})
        n = len(histories[0])
        main = window.get("main_images") or [[] for _ in range(n)]
        extra = window.get("extra_view_images") or [[] for _ in range(n)]
        rewards = np.full(n, self.interval_reward, dtype=np.float32)
        valid = [i for i in range(n) if all(len(h[i]) for h in histories) and len(main[i]) and len(extra[i])]
        if valid:
            body = {
                "windows": [
                    {
                        "main": [png_base64(uint8_frame(f)) for f in main[i]],
                        "extra": [png_base64(uint8_frame(f)) for f in extra[i]],
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
        return like_input(rewards, next(iter(observations.values()), None))

    def _steps(self, observations: dict) -> Any:
        """Raw steps: one frame per view and env; the service buffers each env's stream."""
        main = uint8_batch(observations["main_images"])
        extra = np.asarray(to_numpy(observations["extra_view_images"]))
        if extra.ndim == 5:  # [B, V, H, W, 3]: the first extra view, as RLinf's trend data
            extra = extra[:, 0]
        extra = uint8_batch(extra)
        n = len(main)
        params = {"streams": ",".join(f"{self.stream}{i}" for i in range(n))}
        dones = observations.get("dones")
        if dones is not None:
            params["dones"] = ",".join("1" if bool(v) else "0" for v in np.asarray(to_numpy(dones)).reshape(-1))
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
        return like_input(
            np.array([i["model_output"] for i in data["items"]], dtype=np.float32), observations["main_images"]
        )
