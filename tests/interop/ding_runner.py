"""Runs DI-engine 0.5.3's released code with `reward_client.di_engine` in the interop environment.

Invoked by tests/interop/test_ding_*.py through `python ding_runner.py COMMAND` with a JSON object on stdin;
prints one JSON object on stdout. It imports DI-engine, the shared libraries, `reward_client` (the RL-side
package, as `pip install ./reward_client` gives it) and the tiny env `ding_env` beside it, never the server.
What DI-engine's pipeline trains on is recorded by wrapping (not replacing) `BaseLearner.train`.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import struct
import sys
from typing import Any

import numpy as np

ENVS = {"reach": ("reward_studio_reach", [3, 32, 32]), "reach_stack": ("reward_studio_reach_stack", [4, 32, 32])}


def reward_model_config(args: dict) -> dict:
    """The adapter's DI-engine config; `args["adapter"]` adds or replaces settings (uploads, success_rule,
    retrain_after_transitions, ...)."""
    config = dict(
        type="reward_studio",
        import_names=["reward_client.di_engine"],
        url=args["url"],
        token=args["token"],
        deployment=args["deployment"],
        env_reward="ignore",  # the policy trains on the service's reward alone
        estimate_batch=16,
    )
    return {**config, **args.get("adapter", {})}


def configs(args: dict) -> tuple[dict, dict]:
    """A tiny DQN on the reach env (`args["env"]`: reach, RGB frames; reach_stack, Atari-style grayscale
    stacks): one collector and one evaluator env, 8 transitions per collect."""
    from easydict import EasyDict

    env_type, obs_shape = ENVS[args.get("env", "reach")]
    main = dict(
        exp_name=args["exp_name"],
        env=dict(
            collector_env_num=1,
            evaluator_env_num=1,
            n_evaluator_episode=1,
            stop_value=1e9,
            max_steps=int(args.get("max_steps", 6)),
        ),
        policy=dict(
            cuda=False,
            nstep=1,
            discount_factor=0.9,
            model=dict(obs_shape=obs_shape, action_shape=2),
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
        env=dict(type=env_type, import_names=["ding_env"]),
        env_manager=dict(type="base"),
        policy=dict(type="dqn"),
        reward_model=dict(type="reward_studio", import_names=["reward_client.di_engine"]),
    )
    return EasyDict(main), EasyDict(create)


def tiny_q_network(obs_shape: list[int]) -> Any:
    """DQN's model from DI-engine's own parts, sized for 32x32 frames (its default kernels need 84x84)."""
    import torch
    from ding.model.common import ConvEncoder, DiscreteHead

    class TinyDQN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = ConvEncoder(
                obs_shape, hidden_size_list=[8, 8, 16, 16], kernel_size=[4, 3, 3], stride=[2, 2, 1]
            )
            self.head = DiscreteHead(16, 2)

        def forward(self, x: Any) -> dict:
            return self.head(self.encoder(x))

    return TinyDQN()


def pipeline(args: dict) -> dict:
    """`serial_pipeline_reward_model_offpolicy` for `iterations` collect/train iterations; what the learner
    trained on (rewards, and the next_obs frames in `frames_path`), the reward model's calls and files, the
    scalars its tb_logger wrote (read back from the event file). With `retrain_wait_s`, the retrain the
    pipeline's train() calls started is then waited for (DI-engine's loop only advances it)."""
    import ding.entry.serial_entry_reward_model_offpolicy as entry
    from ding.worker import BaseLearner
    from ding.worker.collector.sample_serial_collector import SampleSerialCollector

    logging.getLogger("reward_client").addHandler(logging.StreamHandler(sys.stderr))

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
    main_cfg, create_cfg = configs(args)
    entry.serial_pipeline_reward_model_offpolicy(
        (main_cfg, create_cfg),
        seed=0,
        model=tiny_q_network(list(main_cfg.policy.model.obs_shape)),
        max_train_iter=int(args["iterations"]),
    )
    np.save(args["frames_path"], np.concatenate([t["next_obs"] for t in trained]))
    model = models[0]
    status_at_end = model.retrain_status()
    waited = model.retrain_wait(timeout_s=float(args["retrain_wait_s"])) if args.get("retrain_wait_s") else None
    model.tb_logger.flush()
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
        "layout": model.layout.describe(),
        "rule": str(model.rule),
        "finished_episodes": model.finished_episodes,
        "uploaded_success": model.uploaded_success,
        "warnings": model.warnings,
        "retrain_at_end": status_at_end,
        "retrain": waited,
        "scalars": tb_scalars(os.path.join(args["workdir"], args["exp_name"], "log")),
    }


def tb_scalars(folder: str) -> dict[str, list[list[float]]]:
    """The `reward_studio/...` scalars in the TensorBoard event files under `folder`: tag -> [[step, value]].
    Read with tensorboardX's own Event message from the TFRecord framing (length, crc, data, crc)."""
    from tensorboardX.proto.event_pb2 import Event

    out: dict[str, list[list[float]]] = {}
    for root, _, names in os.walk(folder):
        for name in sorted(n for n in names if "tfevents" in n):
            with open(os.path.join(root, name), "rb") as handle:
                raw = handle.read()
            offset = 0
            while offset + 12 <= len(raw):
                (length,) = struct.unpack("<Q", raw[offset : offset + 8])
                event = Event.FromString(raw[offset + 12 : offset + 12 + length])
                offset += 12 + length + 4
                for value in event.summary.value:
                    if value.tag.startswith("reward_studio/"):
                        out.setdefault(value.tag, []).append([event.step, value.simple_value])
    return out


def vector(args: dict) -> dict:
    """DI-engine's own CartPole DQN config (dizoo's cartpole_dqn_config: [4] float observations), one
    collector and one evaluator env, with the adapter as its reward model in
    `serial_pipeline_reward_model_offpolicy`: the error it ends with, and whether the learner trained first."""
    import ding.entry.serial_entry_reward_model_offpolicy as entry
    from ding.worker import BaseLearner
    from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config
    from easydict import EasyDict

    os.chdir(args["workdir"])
    trained: list[int] = []
    original_train = BaseLearner.train

    def train(self: Any, data: list, envstep: int = -1, policy_kwargs: Any = None) -> Any:
        trained.append(len(data))
        return original_train(self, data, envstep, policy_kwargs)

    BaseLearner.train = train
    main = EasyDict(copy.deepcopy(main_config))
    main.exp_name = args["exp_name"]
    main.env.update(collector_env_num=1, evaluator_env_num=1, n_evaluator_episode=1)
    main.reward_model = reward_model_config(args)
    create = EasyDict(copy.deepcopy(create_config))
    create.reward_model = dict(type="reward_studio", import_names=["reward_client.di_engine"])
    try:
        entry.serial_pipeline_reward_model_offpolicy((main, create), seed=0, max_train_iter=2)
    except Exception as exc:  # noqa: BLE001 - what DI-engine's run ended with is the answer
        return {"error": type(exc).__name__, "message": str(exc), "learner_trained": len(trained)}
    return {"error": None, "learner_trained": len(trained)}


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


COMMANDS = {"pipeline": pipeline, "compile_default": compile_default, "middleware": middleware, "vector": vector}


def main() -> None:
    command = sys.argv[1]
    args: dict[str, Any] = json.loads(sys.stdin.read() or "{}")
    result = COMMANDS[command](args)
    sys.stdout.write("\n" + json.dumps(result, default=str) + "\n")


if __name__ == "__main__":
    main()
