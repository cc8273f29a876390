"""A Reward Studio deployment as RLinf's `resnet` reward model, without patching RLinf (rlinf 0.3.0).

RLinf builds its reward model from a fixed dict (`rlinf.models.embodiment.reward.reward_model_registry`,
looked up by `reward.model.model_type`), as `cls(cfg.reward.model)`, then calls `.to(device)` and `.eval()`
on it and, per batch, `compute_reward(observations)`, whose answer must be a torch tensor of shape [B]
(`EmbodiedRewardWorker.compute_image_rewards` calls `.dim()` on it). `register()` puts
`RLinfResNetRewardModel` into that dict; the config's `reward.model` then needs a `reward_studio` block
(`url`, `deployment`, `token`; or env RS_URL, RS_DEPLOYMENT, RS_TOKEN):

    import reward_client.rlinf_plugin as studio
    studio.register()            # model_type "resnet" now asks the deployment; register("reward_studio") adds a type

Registration changes the dict in the process that calls it: call it where RLinf builds its reward worker
(its entry script in one process; with Ray workers, in the worker process, e.g. from the module that
defines the env). torch is imported only when rewards are computed (RLinf has it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .arrays import to_numpy
from .rlinf import RLinfRewardModel


class RLinfResNetRewardModel(RLinfRewardModel):
    """RLinf's `ResNetRewardModel` contract (`compute_reward(observations)` over `main_images` -> [B]
    probabilities, zeroed at or below `reward_threshold` when set) answered by a deployment; `.to()`,
    `.eval()` and `.train()` keep nothing on a device (the model runs on the service) and return self."""

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.device: Any = "cpu"
        self.training = False

    def to(self, device: Any = None, *args: Any, **kwargs: Any) -> RLinfResNetRewardModel:
        if device is not None and not hasattr(device, "is_floating_point"):  # .to(dtype) or .to(tensor) aside
            self.device = device
        return self

    def eval(self) -> RLinfResNetRewardModel:
        return self.train(False)

    def train(self, mode: bool = True) -> RLinfResNetRewardModel:
        self.training = mode
        return self

    def forward(self, input_data: Any, labels: Any = None) -> dict[str, Any]:
        raise NotImplementedError("this reward model is trained in Reward Studio, not by RLinf")

    def compute_reward(self, observations: dict, env_rewards: Any = None) -> Any:
        """A float32 CPU tensor [B] (RLinf's reward worker moves rewards to the CPU itself)."""
        import torch

        values = np.asarray(to_numpy(super().compute_reward(observations, env_rewards)), dtype=np.float32)
        return torch.from_numpy(values.reshape(-1).copy())


def register(name: str = "resnet", registry: dict | None = None) -> type[RLinfResNetRewardModel]:
    """Make `reward.model.model_type: <name>` build RLinfResNetRewardModel: in RLinf's registry, or in
    `registry` where given. The class registered."""
    if registry is None:
        from rlinf.models.embodiment import reward

        registry = reward.reward_model_registry
    registry[name] = RLinfResNetRewardModel
    return RLinfResNetRewardModel
