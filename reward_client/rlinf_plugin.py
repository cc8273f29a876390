"""Reward Studio deployments as RLinf 0.3.0's own `resnet` and `history_vlm` reward models, through RLinf's hook.

RLinf's reward worker (`rlinf/workers/reward/reward_worker.py`, `EmbodiedRewardWorker`) builds its model from
`rlinf.models.embodiment.reward.reward_model_registry` by `reward.model.model_type`, as `cls(cfg.reward.model)`
(an OmegaConf DictConfig with `num_envs` added), calls `.to(device)` and `.eval()`, and per batch
`compute_reward(observations)`, whose answer must be a tensor [B] (the worker unsqueezes it to [B, 1] and
moves it to the CPU). RLinf imports the module named by env `RLINF_EXT_MODULE` and calls its `register()`
in every worker process (`rlinf/scheduler/cluster/utils.py` `load_user_extension_module`), so

    export RLINF_EXT_MODULE=reward_client.rlinf_plugin

installs both types. A `reward.model` with a `reward_studio` block (`url`, `deployment`, `token`; an empty
block takes env RS_URL, RS_DEPLOYMENT, RS_TOKEN) asks that deployment; any other config builds RLinf's own
class as before, so registering never changes a local-files config. `register("resnet_reward")` adds a type
name RLinf lacks (from your own extension module's `register()`). torch is imported only when rewards are
computed (RLinf's worker has it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .arrays import to_numpy
from .config import cfg_get
from .rlinf import RLinfHistoryRewardModel, RLinfRewardModel

ENV_VAR = "RLINF_EXT_MODULE"


def float32_tensor(values: Any) -> Any:
    """A float32 CPU tensor [B], as RLinf's own reward models return."""
    import torch

    return torch.from_numpy(np.asarray(to_numpy(values), dtype=np.float32).reshape(-1).copy())


class WorkerModel:
    """What RLinf's reward worker calls besides `compute_reward`: `.to()`, `.eval()` and `.train()` keep
    nothing on a device (the model runs on the service) and return self."""

    device: Any = "cpu"
    training = False

    def to(self, device: Any = None, *args: Any, **kwargs: Any) -> Any:
        if device is not None and not hasattr(device, "is_floating_point"):  # .to(dtype) or .to(tensor) aside
            self.device = device
        return self

    def eval(self) -> Any:
        return self.train(False)

    def train(self, mode: bool = True) -> Any:
        self.training = mode
        return self

    def forward(self, input_data: Any, labels: Any = None) -> dict[str, Any]:
        raise NotImplementedError("this reward model is trained in Reward Studio, not by RLinf")


def kind_checked(info: dict, kind: str, model_type: str) -> dict:
    """The deployment's settings; ValueError where it serves another kind of model than `model_type` needs."""
    if info.get("kind") != kind:
        raise ValueError(
            f"RLinf's {model_type} needs a {kind} deployment; {info.get('name')!r} serves a {info.get('kind')} model"
        )
    return info


class RLinfResNetRewardModel(WorkerModel, RLinfRewardModel):
    """RLinf's `ResNetRewardModel` contract (`compute_reward(observations)` over `main_images` -> float32 CPU
    [B], probabilities zeroed at or below `reward_threshold` when set) answered by a deployment."""

    def check_deployment(self) -> dict:
        kind_checked(self.client.call("GET", f"/api/deployments/{self.client.deployment}/"), "resnet", "resnet")
        return super().check_deployment()

    def compute_reward(self, observations: dict, env_rewards: Any = None) -> Any:
        return float32_tensor(super().compute_reward(observations, env_rewards))


class RLinfHistoryVLMRewardModel(WorkerModel, RLinfHistoryRewardModel):
    """RLinf's `HistoryVLMRewardModel` contract (`vlm_reward_model.py`): `compute_reward(reward_input)` over
    the env worker's `history_input` windows (its HistoryManager's) -> float32 CPU [B]: `interval_reward`
    where an env has no window, the label reward (`reward_parser_params`) of the deployment's judgement of
    the window where it has one, plus `gt_success_bonus` where `env_infos` say success. The deployment judges
    with the prompt it was trained on (RLinf's `task_descriptions` are not sent)."""

    def __init__(self, cfg: Any, **kwargs: Any) -> None:
        if cfg_get(cfg, "history_buffers") is None:
            raise ValueError("RLinf's history_vlm needs reward.model.history_buffers (its HistoryManager reads them)")
        super().__init__(cfg, **kwargs)

    def check_deployment(self) -> dict:
        return kind_checked(super().check_deployment(), "vlm", "history_vlm")

    def compute_reward(self, observations: dict, env_rewards: Any = None) -> Any:
        if not isinstance(observations, dict) or "history_input" not in observations:
            raise ValueError(
                "history_vlm scores RLinf's history_input windows: set reward.reward_mode to history_buffer"
            )
        return float32_tensor(super().compute_reward(observations, env_rewards))


REMOTE = {"resnet": RLinfResNetRewardModel, "history_vlm": RLinfHistoryVLMRewardModel}


def studio_or_local(remote: type, local: type | None, model_type: str) -> type:
    """A class for RLinf's registry under `model_type`: `cls(model_cfg)` builds `remote` when the config holds
    a `reward_studio` block, else `local` (RLinf's own class), unchanged."""

    def __new__(cls: type, cfg: Any, *args: Any, **kwargs: Any) -> Any:
        if cfg_get(cfg, "reward_studio") is None:
            if local is None:
                raise ValueError(
                    f"model_type {model_type!r} has no RLinf class: give reward.model a reward_studio block "
                    "(url, deployment, token)"
                )
            return local(cfg, *args, **kwargs)  # not an instance of cls: Python skips cls.__init__
        return object.__new__(cls)

    return type(
        f"Studio{remote.__name__.removeprefix('RLinf')}",
        (remote,),
        {"__new__": __new__, "local_class": local, "__doc__": f"{remote.__name__}, or {local} without reward_studio"},
    )


def register(name: str | None = None, registry: dict | None = None, *, kind: str = "resnet") -> dict:
    """RLinf's extension hook (`register()`): `resnet` and `history_vlm` ask a deployment where the config has
    a `reward_studio` block. `register(name, kind=...)`: also `model_type: <name>` (e.g. `resnet_reward`),
    falling back to RLinf's class of that name if it has one. Calling it again changes nothing. In RLinf's
    registry, or in `registry` where given; the entries set."""
    if registry is None:
        from rlinf.models.embodiment import reward

        registry = reward.reward_model_registry
    if kind not in REMOTE:
        raise ValueError(f"kind must be one of {sorted(REMOTE)}, got {kind!r}")
    names = {name: kind} if name else {"resnet": "resnet", "history_vlm": "history_vlm"}
    for type_name, type_kind in names.items():
        current = registry.get(type_name)
        if getattr(current, "local_class", False) is not False:  # registered before: keep RLinf's class under it
            continue
        registry[type_name] = studio_or_local(REMOTE[type_kind], current, type_name)
    return {type_name: registry[type_name] for type_name in names}
