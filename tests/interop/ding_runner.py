"""Runs DI-engine 0.5.3's released code with `reward_client.di_engine` in the interop environment.

Invoked by tests/interop/test_ding_*.py through `python ding_runner.py COMMAND` with a JSON object on stdin;
prints one JSON object on stdout. It imports DI-engine, the shared libraries, `reward_client` (the RL-side
package, as `pip install ./reward_client` gives it) and the tiny env `ding_env` beside it, never the server.
What DI-engine's pipeline trains on is recorded by wrapping (not replacing) `BaseLearner.train`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np


def reward_model_config(args: dict) -> dict:
    return dict(
        type="reward_studio",
        import_names=["reward_client.di_engine"],
        url=args["url"],
        token=args["token"],
        deployment=args["deployment"],
        env_reward="ignore",  # the policy trains on the service's reward alone
        retrain_after_transitions=0,  # no retrain here (tests/reward_client covers it)
        estimate_batch=16,
    )


def configs(args: dict) -> tuple[dict, dict]:
    """A tiny DQN on the reach env: one collector and one evaluator env, 8 transitions per collect."""
    from easydict import EasyDict

    main = dict(
        exp_name=args["exp_name"],
        env=dict(collector_env_num=1, evaluator_env_num=1, n_evaluator_episode=1, stop_value=1e9, max_steps=6),
        policy=dict(
            cuda=False,
            nstep=1,
            discount_factor=0.9,
            model=dict(obs_shape=[3, 32, 32], action_shape=2),
            learn=dict(update_per_collect=1, batch_size=8, learning_rate=1e-3),
            collect=dict(n_sample=8),
            eval=dict(evaluator=dict(eval_freq=2)),
            other=dict(
                eps=dict(type="exp", start=1.0, end=0.1, decay=100),
                replay_buffer=dict(replay_buffer_size=200),
            ),
        ),
        reward_model=reward_model_config(args),
    )
    create = dict(
        env=dict(type="reward_studio_reach", import_names=["ding_env"]),
        env_manager=dict(type="base"),
        policy=dict(type="dqn"),
        reward_model=dict(type="reward_studio", import_names=["reward_client.di_engine"]),
    )
    return EasyDict(main), EasyDict(create)


def tiny_q_network() -> Any:
    """DQN's model from DI-engine's own parts, sized for 32x32 frames (its default kernels need 84x84)."""
    import torch
    from ding.model.common import ConvEncoder, DiscreteHead

    class TinyDQN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = ConvEncoder(
                [3, 32, 32], hidden_size_list=[8, 8, 16, 16], kernel_size=[4, 3, 3], stride=[2, 2, 1]
            )
            self.head = DiscreteHead(16, 2)

        def forward(self, x: Any) -> dict:
            return self.head(self.encoder(x))

    return TinyDQN()


def pipeline(args: dict) -> dict:
    """`serial_pipeline_reward_model_offpolicy` for `iterations` collect/train iterations; what the learner
    trained on (rewards, and the next_obs frames in `frames_path`), the reward model's calls and files."""
    import ding.entry.serial_entry_reward_model_offpolicy as entry
    from ding.worker import BaseLearner
    from ding.worker.collector.sample_serial_collector import SampleSerialCollector

    os.chdir(args["workdir"])
    trained: list[dict] = []
    collected: list[int] = []
    models: list[Any] = []

    original_train, original_collect, original_create = (
        BaseLearner.train,
        SampleSerialCollector.collect,
        entry.create_reward_model,
    )

    def train(self: Any, data: list, envstep: int = -1, policy_kwargs: Any = None) -> Any:
        trained.append(
            {
                "rewards": [float(np.asarray(item["reward"]).reshape(-1)[0]) for item in data],
                "next_obs": np.stack([np.asarray(item["next_obs"]) for item in data]),
            }
        )
        return original_train(self, data, envstep, policy_kwargs)

    def collect(self: Any, *a: Any, **kw: Any) -> list:
        data = original_collect(self, *a, **kw)
        collected.append(len(data))
        return data

    def create_reward_model(*a: Any, **kw: Any) -> Any:
        models.append(original_create(*a, **kw))
        return models[-1]

    BaseLearner.train, SampleSerialCollector.collect, entry.create_reward_model = train, collect, create_reward_model
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # ding_env, through import_names
    entry.serial_pipeline_reward_model_offpolicy(
        configs(args), seed=0, model=tiny_q_network(), max_train_iter=int(args["iterations"])
    )
    np.save(args["frames_path"], np.concatenate([t["next_obs"] for t in trained]))
    model = models[0]
    saved = sorted(
        os.path.relpath(os.path.join(folder, name), args["workdir"])
        for folder, _, names in os.walk(os.path.join(args["workdir"], args["exp_name"], "reward_model"))
        for name in names
    )
    return {
        "reward_model_class": f"{type(model).__module__}.{type(model).__name__}",
        "collects": collected,
        "train_batches": [len(t["rewards"]) for t in trained],
        "rewards": [t["rewards"] for t in trained],
        "uploaded": model.uploaded,
        "saved": saved,
        "saved_last": json.load(open(model.checkpoint_path(args["exp_name"], "last"))),
    }


def compile_default(args: dict) -> dict:
    """DI-engine's `compile_config` on a config whose reward model is the adapter's `default_config()`."""
    from ding.config import compile_config
    from ding.reward_model import get_reward_model_cls

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main, create = configs({**args, "url": "", "token": "", "deployment": ""})
    cls = get_reward_model_cls(create.reward_model)
    main.reward_model = cls.default_config()
    cfg = compile_config(main, seed=0, auto=True, create_cfg=create, save_cfg=False)
    return {"class": f"{cls.__module__}.{cls.__name__}", "reward_model": dict(cfg.reward_model)}


def middleware(args: dict) -> dict:
    """DI-engine's `reward_estimator` middleware over the adapter on a ctx of `n` reach transitions: whether
    ctx.train_data is the same list of the same dicts after, their rewards, and the next_obs frames."""
    import torch
    from ding.framework import OnlineRLContext
    from ding.framework.middleware.functional.enhancer import reward_estimator
    from ding.reward_model import create_reward_model
    from easydict import EasyDict

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from ding_env import ENV_REWARD, ReachEnv

    env = ReachEnv({})
    env.seed(1)
    obs = torch.from_numpy(env.reset())
    data = []
    for step in range(int(args["n"])):
        timestep = env.step(np.array([1 if step % 3 else 0]))
        next_obs = torch.from_numpy(timestep.obs)
        data.append({"obs": obs, "next_obs": next_obs, "reward": torch.tensor([ENV_REWARD]), "done": timestep.done})
        obs = next_obs if not timestep.done else torch.from_numpy(env.reset())
    model = create_reward_model(EasyDict(reward_model_config(args)), "cpu", None)
    ctx = OnlineRLContext()
    ctx.train_data = data
    items = list(data)
    reward_estimator(EasyDict({}), model)(ctx)
    np.save(args["frames_path"], np.stack([item["next_obs"].numpy() for item in data]))
    return {
        "same_list": ctx.train_data is data,
        "same_items": all(a is b for a, b in zip(ctx.train_data, items, strict=True)),
        "rewards": [float(item["reward"][0]) for item in ctx.train_data],
        "reward_types": sorted({type(item["reward"]).__name__ for item in ctx.train_data}),
        "env_rewards": [float(item["env_reward"][0]) for item in ctx.train_data],
    }


COMMANDS = {"pipeline": pipeline, "compile_default": compile_default, "middleware": middleware}


def main() -> None:
    command = sys.argv[1]
    args: dict[str, Any] = json.loads(sys.stdin.read() or "{}")
    result = COMMANDS[command](args)
    sys.stdout.write("\n" + json.dumps(result, default=str) + "\n")


if __name__ == "__main__":
    main()
