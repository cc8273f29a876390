"""DI-engine's `BaseRewardModel` over a Reward Studio deployment (numpy and requests; Pillow for uploads).

The contract is di-engine 0.5.3's: `ding/reward_model/base_reward_model.py`, the serial pipeline
`ding/entry/serial_entry_reward_model_offpolicy.py` (calls `collect_data` after each collect, `train()` and
`clear_data()` every iteration, uses what `estimate` returns, `save(path=, name=)` at evaluation and at the
end) and the middleware `reward_estimator` (`ding/framework/middleware/functional/enhancer.py`: ignores what
`estimate` returns; the batch must change in place).

- Observations as DI-engine's envs give them (reward_client.frames): RGB frames channels last or first,
  grayscale frames and frame stacks (Atari's [4,84,84]: the newest frame, `stack_index` -1, replicated to
  3 channels), uint8 or float (`image_scale`: auto scales a batch in [0, 1] by 255). The layout is read from
  the first observation (or `obs_shape`, at construction) with `obs_format`; a vector observation or one
  whose layout cannot be told is refused at the first call, naming its shape and what to set.
- At construction the service says what the token may do (`GET /api/deployments/<name>/access`): a token
  that lacks a scope the settings need (rewards; ingest when `uploads` is on; labels and training when the
  retrain is on) is refused before the run starts, naming the scope and the setting that needs it.
- `estimate(batch)` scores each transition's `next_obs` (the reward belongs to the state reached: the
  terminal success frame is scored), sets `reward` in place and returns the same list. The env reward is
  kept in `env_reward` the first time, so a transition sampled again is not combined twice. With
  `monitor_run` set, each request also carries the env's success of its frames (by `success_rule`, e.g.
  `done_reward>=1`) and the run's name, for the deployment's reward-hacking monitor and its RL run panel.
- `collect_data` keeps the transitions and uploads finished episodes (reset frame, then every `next_obs`)
  to the deployment's project: `uploads` off (the default), all, or N (every N-th, the first included).
  Each step's success comes from `success_rule` (reward_client.success: `info['success']` when the
  transitions carry it, or the env reward, e.g. `done_reward>=1`); DI-engine's own transitions carry no
  `info`, so without a rule the uploads (and a retrain's proposals) have no success: said at the first call.
- With a `tb_logger` (DI-engine passes its SummaryWriter to the constructor), each `estimate` writes
  `reward_studio/{reward_mean,probability_mean,served_frames,latency_ms,model_version}`, uploads
  `reward_studio/{uploaded_episodes,success_episodes}` and each finished retrain
  `reward_studio/retrain_{new_accuracy,old_accuracy,redeployed}`.
- `train()` returns at once. After `retrain_after_transitions` new transitions (default 0: never) it starts a retrain
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
from .errors import AuthenticationError, NotFoundError, RewardServiceError
from .frames import OBS_FORMATS, FrameLayout, ObservationError, layout_for
from .retrain import Retrain, retrain_advance, retrain_start
from .success import SuccessRule, done, env_reward, has_success_flag, success_rule

log = logging.getLogger(__name__)

ENV_REWARD_CHOICES = ("service", "local", "ignore")
ENV_REWARD_KEY = "env_reward"  # where estimate keeps a transition's own reward
TB = "reward_studio"  # the tb_logger tags' prefix


class DIEngineRewardModel:
    """DI-engine's `BaseRewardModel` over a Reward Studio deployment.

    Built like DI-engine's registry builds reward models: `DIEngineRewardModel(config, device, tb_logger)`,
    `config` an EasyDict/dict with `url`, `token`, `deployment` and the options in `config` below. Each
    transition is a dict with `obs` and `next_obs` (an image, or a dict holding one under `image_key`),
    `reward`, `done` and optionally `info` (`success`) and `env_id`. `DIEngineRewardModel(client)` or
    `client=` (anything with RewardClient's `call`, `compute_rewards` and `deployment`) works too.
    Its token needs the project and the scopes `rewards` (estimate), `ingest` (uploads), `labels` and
    `training` (retrain); construction asks the service and refuses a token that lacks one the settings need.
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
        obs_format="auto",  # auto | rgb | gray | gray_stack | rgb_stack (reward_client.frames)
        stack_index=-1,  # the frame of a stack that is scored and uploaded (-1: the newest)
        obs_shape=None,  # one observation's shape, checked at construction (else at the first call)
        camera="main",
        image_scale="auto",  # float frames times this are 0..255; auto: 255 for frames in [0, 1], else 1
        env_reward="service",  # where the env reward goes: service | local | ignore (never added twice)
        estimate_batch=256,  # images per reward request
        project=None,  # project id for uploads and retrains; default: the deployment's project
        uploads="off",  # finished episodes uploaded: off | all | N (every N-th, the first included)
        success_rule="auto",  # auto | info | none | reward>=X | done_reward>=X | return>=X (reward_client.success)
        check_access=True,  # ask the service at construction whether the token may do what the settings need
        retrain_after_transitions=0,  # new transitions that start a retrain (0: never; it needs uploads' labels)
        snapshot_options={"sources": ["human", "proposal"], "trend": False},
        job_kind="resnet",
        job_config={},
        train_timeout_s=3600.0,  # a retrain not done by then is given up (the served model stays)
        poll_s=2.0,  # retrain_wait's pause between looks
        chunk_steps=50,  # steps per upload request
        monitor_run=None,  # a name: each scored batch also sends the env's success (success_rule) to the monitor
        exp_name=None,  # save()'s default folder (DI-engine's exp_name)
        # read by DI-engine's serial pipelines from this config
        clear_buffer_per_iters=1,
        target_new_data_count=1,
    )

    def __init__(
        self, config: Any = None, device: str = "cpu", tb_logger: Any = None, *, client: Any = None, **overrides: Any
    ) -> None:
        if isinstance(config, RewardClient):
            client, config = config, {}
        cfg = copy.deepcopy(self.config)
        for key in list(cfg):
            cfg[key] = cfg_get(config, key, cfg[key])
        cfg.update(overrides)
        if cfg["env_reward"] not in ENV_REWARD_CHOICES:
            raise ValueError(f"env_reward must be one of {', '.join(ENV_REWARD_CHOICES)}, got {cfg['env_reward']!r}")
        if cfg["obs_format"] not in OBS_FORMATS:
            raise ValueError(f"obs_format must be one of {', '.join(OBS_FORMATS)}, got {cfg['obs_format']!r}")
        self.upload_every = upload_every(cfg["uploads"])
        self.rule: SuccessRule = success_rule(cfg["success_rule"])
        self.cfg = cfg
        self.device, self.tb_logger = device, tb_logger
        self.client = client or RewardClient(
            cfg["url"], cfg["token"], deployment=cfg["deployment"], transport=cfg["transport"]
        )
        self.obs_key, self.image_key = cfg["obs_key"], cfg["image_key"]
        self.layout: FrameLayout | None = None  # how observations become RGB frames (from the first one)
        if cfg["obs_shape"] is not None:
            self.layout = layout_for(list(cfg["obs_shape"]), cfg["obs_format"], int(cfg["stack_index"]))
        self.train_data: list[dict] = []  # transitions collected and not yet cleared
        self._open: dict[Any, list[dict]] = {}  # per env: transitions of the episode under way
        self.finished_episodes = 0  # episodes that ended (uploaded or not)
        self.uploaded: list[str] = []  # episode uuids sent to the service
        self.uploaded_success = 0  # of them, episodes with a success step
        self.new_transitions = 0  # collected since the last retrain started
        self.retrain: Retrain | None = None  # the retrain under way
        self.retrains = 0  # retrains finished
        self.last_train: dict = {}  # what the last finished retrain did (or its error)
        self.served_frames = 0  # frames estimate had scored
        self.estimates = 0  # estimate calls (the tb_logger's step)
        self.warnings: list[str] = []  # what was said at start about the labels
        self.retrain_labels: dict = {}  # the last retrain's new labels (episodes, successes)
        self._labels_mark = (0, 0)  # uploads and successes counted when the last retrain started
        self._started = False
        if cfg["check_access"]:
            self.check_access()
        self._say_labels_at_construction()

    @classmethod
    def default_config(cls) -> dict:
        cfg = copy.deepcopy(cls.config)
        cfg["cfg_type"] = cls.__name__ + "Dict"
        return cfg

    @property
    def retrain_on(self) -> bool:
        return int(self.cfg["retrain_after_transitions"]) > 0

    # ---- start -------------------------------------------------------------------------------------------

    def needed_actions(self) -> dict[str, str]:
        """What the settings make the adapter do on the service: action -> the setting that needs it."""
        needed = {"rewards": "estimate (every reward)"}
        if self.upload_every:
            needed["ingest"] = f"uploads={self.cfg['uploads']!r} (set uploads='off' to upload nothing)"
        if self.retrain_on:
            why = f"retrain_after_transitions={self.cfg['retrain_after_transitions']} (0: no retrain)"
            needed.update(propose_labels=why, train=why, switch_model=why)
        return needed

    def check_access(self) -> dict:
        """Ask the service what the token may do with the deployment; PermissionError naming each missing
        scope and the setting that needs it. Fills `project` from the answer when it is unset."""
        name = self.client.deployment
        try:
            answer = self.client.call("GET", f"/api/deployments/{name}/access")
        except NotFoundError as exc:
            raise NotFoundError(
                f"deployment {name!r} does not exist or this token may not see it ({exc.detail})", exc.status
            ) from exc
        except AuthenticationError as exc:
            who = "the token" if self._has_token() else "a caller without a token (outside TRUSTED_CIDRS)"
            raise AuthenticationError(f"the service refused {who}: {exc.detail}", exc.status) from exc
        refused = [
            f"{action} ({answer.get('refused', {}).get(action, 'refused')}), needed by {why}"
            for action, why in self.needed_actions().items()
            if not answer.get("allowed", {}).get(action)
        ]
        if refused:
            raise PermissionError(
                f"the token may not do what this DI-engine config needs on deployment {name!r}: "
                + "; ".join(refused)
                + ". Give the token those scopes on the project, or change the settings named."
            )
        if self.cfg["project"] is None and answer.get("project") is not None:
            self.cfg["project"] = answer["project"]
        return answer

    def _has_token(self) -> bool:
        headers = getattr(getattr(self.client, "session", None), "headers", None) or {}
        return bool(self.cfg["token"] or headers.get("Authorization"))

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        log.warning("Reward Studio: %s", message)

    def _say_labels_at_construction(self) -> None:
        if not self.retrain_on:
            return
        if not self.upload_every:
            self._warn(
                "uploads are off: the retrain gets no new episodes and trains on the project's labels as they are"
            )
        elif not self.rule.labels:
            self._warn(
                "success_rule='none': uploaded episodes carry no success, so the retrain's proposals are all fail; "
                "set success_rule (e.g. 'done_reward>=1' or 'return>=X')"
            )

    def _start(self, items: list[dict]) -> None:
        """At the first call: the observations' layout (a vector or an unreadable one is refused here) and,
        with `success_rule` auto, where success comes from."""
        if self._started or not items:
            return
        if self.layout is None:
            raw = self._raw(items[0])
            self.layout = layout_for(raw.shape, self.cfg["obs_format"], int(self.cfg["stack_index"]))
        if self.rule.kind == "auto":
            self.rule = self.rule.resolved(items)
            if self.rule.kind == "none" and (self.upload_every or self.retrain_on):
                self._warn(
                    "the transitions carry no info['success'] (DI-engine's policies keep obs, next_obs, action, "
                    "reward and done): uploaded episodes have no success and a retrain no success labels of its "
                    "own; set success_rule, e.g. 'done_reward>=1' (env reward at a done step) or 'return>=X'"
                )
        elif self.rule.kind == "info" and not any(has_success_flag(t) for t in items):
            raise ValueError(
                "success_rule='info' but the transitions carry no info['success'] (DI-engine's policies keep obs, "
                "next_obs, action, reward and done): set success_rule to 'done_reward>=X', 'reward>=X' or 'return>=X'"
            )
        self._started = True

    # ---- estimate ------------------------------------------------------------------------------------

    def _raw(self, item: dict, key: str | None = None) -> np.ndarray:
        key = key or self.obs_key
        if key not in item:
            raise ValueError(f"a transition has no {key!r} to score (keys: {sorted(item)}); set obs_key")
        obs = item[key]
        if isinstance(obs, dict):
            if self.image_key not in obs:
                raise ObservationError(
                    f"the observation is a dict without {self.image_key!r} (keys: {sorted(obs)}); set image_key"
                )
            obs = obs[self.image_key]
        return np.asarray(to_numpy(obs))

    def _frames_of(self, items: list[dict], key: str | None = None) -> np.ndarray:
        """uint8 [B,H,W,3]: the items' observations rendered as the deployment scores them."""
        if self.layout is None:
            self._start(items)
        assert self.layout is not None
        raw = np.stack([self._raw(item, key) for item in items])
        return uint8_images(self.layout.render(raw), self.cfg["image_scale"])

    def estimate(self, data: list) -> list:
        """Set each transition's `reward` to the service's reward for its `next_obs`, in place; returns `data`."""
        self._start(data)
        mode = self.cfg["env_reward"]
        for item in data:
            if ENV_REWARD_KEY not in item:
                item[ENV_REWARD_KEY] = copy.deepcopy(item.get("reward", 0.0))
        size = max(1, int(self.cfg["estimate_batch"]))
        rewards_all, probabilities, version, elapsed = [], [], 0, 0.0
        for start in range(0, len(data), size):
            batch = data[start : start + size]
            env = np.array([scalar(item[ENV_REWARD_KEY]) for item in batch], dtype=np.float32)
            begun = time.perf_counter()
            result = self.client.compute_rewards(
                self._frames_of(batch),
                env_rewards=env if mode == "service" else None,
                dones=[bool(scalar(item.get("done", False))) for item in batch],
                **self._monitor_fields(batch),
            )
            elapsed += time.perf_counter() - begun
            rewards = result.rewards + (env if mode == "local" else 0.0)
            for item, reward in zip(batch, rewards, strict=True):
                item["reward"] = like_input(np.array([reward], dtype=np.float32), item[ENV_REWARD_KEY])
            rewards_all.append(rewards)
            probabilities.append(result.probabilities)
            version = result.version
        if data:
            self.served_frames += len(data)
            self.estimates += 1
            requests = -(-len(data) // size)
            self._log_scalars(
                self.estimates,
                reward_mean=float(np.mean(np.concatenate(rewards_all))),
                probability_mean=float(np.nanmean(np.concatenate(probabilities))),
                served_frames=self.served_frames,
                latency_ms=1000.0 * elapsed / requests,
                model_version=version,
            )
        return data

    def _monitor_fields(self, batch: list[dict]) -> dict:
        """With `monitor_run`, the batch's env success (by `success_rule`, each transition on its own) and the
        run's name as the stream: the deployment's reward-hacking monitor counts them under that run."""
        run = self.cfg["monitor_run"]
        flags = self.rule.per_transition(batch) if run else None
        return {"env_success": flags, "stream": str(run)} if flags is not None else {}

    def _log_scalars(self, step: int, **values: float) -> None:
        if self.tb_logger is None:
            return
        for name, value in values.items():
            if value == value:  # NaN (nothing scored) is left out
                self.tb_logger.add_scalar(f"{TB}/{name}", value, step)

    # ---- data ------------------------------------------------------------------------------------------

    def collect_data(self, data: list) -> None:
        """Keep the transitions and upload the finished episodes `uploads` asks for (their `done` arrived).
        An episode whose next transition does not start where it ended (its `obs` is not the last
        `next_obs`: DI-engine's sample collector drops a collect's extra transitions, `drop_extra`) ends
        there, uploaded truncated."""
        self._start(data)
        for item in data:
            self.train_data.append(item)
            self.new_transitions += 1
            if not self.upload_every:
                continue
            key = scalar(item.get("env_id", 0))
            episode = self._open.get(key)
            if episode and not self._follows(episode[-1], item):
                self._episode_ended(self._open.pop(key), truncated=True)
            self._open.setdefault(key, []).append(item)
            if done(item):
                self._episode_ended(self._open.pop(key))

    def _episode_ended(self, episode: list[dict], truncated: bool = False) -> None:
        self.finished_episodes += 1
        if (self.finished_episodes - 1) % self.upload_every == 0:
            self._upload(episode, source="sim", truncated=truncated)

    def _follows(self, previous: dict, item: dict) -> bool:
        if "obs" not in item or "next_obs" not in previous:
            return True  # nothing to compare: trust the order
        return bool(np.array_equal(self._raw(previous, "next_obs"), self._raw(item, "obs")))

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
                self._start(episode)
                self._upload(episode, source="import", metadata={"expert": True})

    def _project(self) -> Any:
        if self.cfg["project"] is None:
            info = self.client.call("GET", f"/api/deployments/{self.client.deployment}/")
            self.cfg["project"] = info["project"]
        return self.cfg["project"]

    def _upload(
        self, episode: list[dict], *, source: str, metadata: dict | None = None, truncated: bool = False
    ) -> str:
        """The reset frame (the first `obs`, no transition) where there is one, then each transition's scored
        frame (`next_obs`), the terminal one included; each step's success from `success_rule`."""
        episode_uuid = str(uuid.uuid4())
        self.client.call(
            "POST",
            "/api/episodes",
            json={
                "project": str(self._project()),
                "uuid": episode_uuid,
                "source": source,
                "metadata": {"uploaded_by": "di-engine", "success_rule": str(self.rule), **(metadata or {})},
            },
        )
        reset = self.obs_key != "obs" and "obs" in episode[0]
        steps_of: list[dict | None] = ([None] if reset else []) + list(episode)
        images = np.concatenate(([self._frames_of(episode[:1], "obs")] if reset else []) + [self._frames_of(episode)])
        flags = ([False] if reset else []) + self.rule.flags(episode)
        chunk = int(self.cfg["chunk_steps"])
        for start in range(0, len(steps_of), chunk):
            steps = []
            for index, item in enumerate(steps_of[start : start + chunk], start=start):
                item = item or {}
                steps.append(
                    {
                        "index": index,
                        "reward": env_reward(item, ENV_REWARD_KEY) if item else 0.0,
                        "terminated": done(item),
                        "truncated": truncated and index == len(steps_of) - 1,
                        "success": flags[index],
                        "images": {self.cfg["camera"]: png_base64(images[index])},
                    }
                )
            self.client.call("POST", f"/api/episodes/{episode_uuid}/steps", json={"steps": steps})
        self.client.call("POST", f"/api/episodes/{episode_uuid}/finish", json={"success": any(flags)})
        self.uploaded.append(episode_uuid)
        self.uploaded_success += any(flags)
        self._log_scalars(
            len(self.uploaded), uploaded_episodes=len(self.uploaded), success_episodes=self.uploaded_success
        )
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
            self._say_retrain_labels()
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
                self.last_train = {"error": str(exc), "labels": self.retrain_labels}
                log.warning("Reward Studio retrain not started: %s", exc)
                return self.retrain_status()
            self._finish_if_done()
        return self.retrain_status()

    def _say_retrain_labels(self) -> None:
        """What the retrain's new labels are: the episodes uploaded since the last one, and how many of them
        succeeded (by `success_rule`); a warning when none did."""
        episodes = len(self.uploaded) - self._labels_mark[0]
        success = self.uploaded_success - self._labels_mark[1]
        self._labels_mark = (len(self.uploaded), self.uploaded_success)
        self.retrain_labels = {"episodes": episodes, "success_episodes": success, "success_rule": str(self.rule)}
        if self.upload_every and success == 0:
            self._warn(
                f"the retrain starts with no success among the {episodes} episodes uploaded since the last one "
                f"(success_rule {str(self.rule)!r}): it learns only from the project's other labels"
            )
        else:
            log.info("Reward Studio retrain: %s", self.retrain_labels)

    def retrain_wait(self, timeout_s: float | None = None) -> dict:
        """Block until the retrain under way ends (at most `timeout_s`); what it did."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self.retrain is not None and (deadline is None or time.monotonic() < deadline):
            time.sleep(float(self.cfg["poll_s"]))
            self._advance()
        return self.last_train if self.retrain is None else self.retrain_status()

    def retrain_status(self) -> dict:
        if self.retrain is not None:
            return {
                "phase": self.retrain.phase,
                "snapshot": self.retrain.snapshot.get("number"),
                "labels": self.retrain_labels,
                **self.retrain.result,
            }
        return {"phase": "idle", "new_transitions": self.new_transitions, "last": self.last_train}

    def _advance(self) -> None:
        assert self.retrain is not None
        retrain_advance(self.client, self.retrain)
        self._finish_if_done()

    def _finish_if_done(self) -> None:
        if self.retrain is not None and self.retrain.finished:
            self.last_train = {"phase": self.retrain.phase, "labels": self.retrain_labels, **self.retrain.result}
            self.retrains += 1
            result = self.retrain.result
            self._log_scalars(
                self.retrains,
                retrain_new_accuracy=float(result.get("new_accuracy", float("nan"))),
                retrain_old_accuracy=float(result.get("old_accuracy") or float("nan")),
                retrain_redeployed=float(bool(result.get("redeployed"))),
            )
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


def upload_every(value: Any) -> int:
    """`uploads` as N (upload every N-th finished episode, the first included; 0 = none): all, off, N."""
    if value in ("all", True):
        return 1
    if value in ("off", False, None, 0, "0"):
        return 0
    try:
        every = int(value)
    except (TypeError, ValueError):
        every = -1
    if every < 1 or isinstance(value, float):
        raise ValueError(f"uploads must be 'all', 'off' or N >= 1 (every N-th finished episode), got {value!r}")
    return every


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
