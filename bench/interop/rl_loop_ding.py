"""Trains a DQN on the corridor (bench/interop/corridor.py) with DI-engine 0.5.3's released serial pipelines, then
evaluates its greedy policy. Not a bench: bench/rl_loop.py runs it in the interop environment
(`.interop/bin/python`), with the repository root on PYTHONPATH for `reward_client` only (never the server).

JSON on stdin: `reward` ("env": `ding.entry.serial_pipeline` on the env's own reward; "learned":
`serial_pipeline_reward_model_offpolicy` with `reward_client.di_engine`'s adapter as its reward model, the env
reward ignored, every sampled transition scored by the deployment), `seed`, `env_steps` (the budget),
`eval_seeds`, `workdir`, and for "learned" `url`, `token`, `deployment`, `run` (the name the reward-hacking
monitor counts the run under). Prints one JSON object: the greedy success rate on `eval_seeds`, the collected
episodes' success over training, the frames the service scored and the seconds taken.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corridor import CELLS, MAX_STEPS, SIZE, Corridor  # noqa: E402

EPISODES: list[tuple[int, bool]] = []  # collector episodes in order: (steps so far, success)


def corridor_env() -> Any:
    """The corridor as a DI-engine env: float32 [3, 32, 32] frames in [0, 1], registered as `rl_loop_corridor`."""
    import gym
    from ding.envs import BaseEnv, BaseEnvTimestep
    from ding.utils import ENV_REGISTRY

    @ENV_REGISTRY.register("rl_loop_corridor", force_overwrite=True)
    class DingCorridor(BaseEnv):
        def __init__(self, cfg: dict) -> None:
            self._env = Corridor()
            self._rng = np.random.default_rng(0)
            self._collecting, self._return = True, 0.0
            self._observation_space = gym.spaces.Box(0.0, 1.0, (3, SIZE, SIZE), np.float32)
            self._action_space = gym.spaces.Discrete(2)
            self._reward_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)

        def seed(self, seed: int, dynamic_seed: bool = True) -> None:
            self._rng, self._collecting = np.random.default_rng(seed), dynamic_seed  # the evaluator's is fixed

        def reset(self) -> np.ndarray:
            self._return = 0.0
            frame, _ = self._env.reset(seed=int(self._rng.integers(2**31)))
            return frame_obs(frame)

        def step(self, action: Any) -> Any:
            frame, reward, terminated, truncated, info = self._env.step(action)
            self._return += reward
            done = terminated or truncated
            if done:
                info["eval_episode_return"] = self._return
                if self._collecting:
                    EPISODES.append((len(EPISODES), bool(info["success"])))
            return BaseEnvTimestep(frame_obs(frame), np.array([reward], np.float32), done, info)

        def close(self) -> None:
            pass

        observation_space = property(lambda self: self._observation_space)
        action_space = property(lambda self: self._action_space)
        reward_space = property(lambda self: self._reward_space)

        def __repr__(self) -> str:
            return "DingCorridor()"

    return DingCorridor


def frame_obs(frame: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(frame.transpose(2, 0, 1), dtype=np.float32) / 255.0


def q_network() -> Any:
    """DQN's model from DI-engine's own parts, sized for 32x32 frames (its default kernels need 84x84)."""
    import torch
    from ding.model.common import ConvEncoder, DiscreteHead

    class TinyDQN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = ConvEncoder(
                [3, SIZE, SIZE], hidden_size_list=[16, 16, 32, 64], kernel_size=[4, 3, 3], stride=[2, 2, 1]
            )
            self.head = DiscreteHead(64, 2)

        def forward(self, x: Any) -> dict:
            return self.head(self.encoder(x))

    return TinyDQN()


def configs(args: dict) -> tuple[Any, Any]:
    """One collector env, 32 transitions a collect, 6 updates of 32 after each; the evaluator runs once."""
    from easydict import EasyDict

    steps = int(args["env_steps"])
    main = dict(
        exp_name=f"{args['reward']}_seed{args['seed']}",
        env=dict(collector_env_num=1, evaluator_env_num=1, n_evaluator_episode=1, stop_value=1e9),
        policy=dict(
            cuda=False,
            nstep=1,
            discount_factor=0.95,
            model=dict(obs_shape=[3, SIZE, SIZE], action_shape=2),
            learn=dict(update_per_collect=6, batch_size=32, learning_rate=1e-3, target_update_freq=25),
            collect=dict(n_sample=32),
            eval=dict(evaluator=dict(eval_freq=10**9)),
            other=dict(
                eps=dict(type="linear", start=1.0, end=0.05, decay=max(1, steps // 3)),
                replay_buffer=dict(replay_buffer_size=max(1000, steps)),
            ),
        ),
    )
    create = dict(
        env=dict(type="rl_loop_corridor", import_names=[]),
        env_manager=dict(type="base"),
        policy=dict(type="dqn"),
    )
    if args["reward"] == "learned":
        main["reward_model"] = dict(
            type="reward_studio",
            import_names=["reward_client.di_engine"],
            url=args["url"],
            token=args["token"],
            deployment=args["deployment"],
            env_reward="ignore",  # the policy learns from the deployment's reward alone
            estimate_batch=32,  # one request per sampled batch: every transition scored
            success_rule="done_reward>=1",  # the env reward of 1 at the goal: the flag the monitor gets
            monitor_run=args["run"],
        )
        create["reward_model"] = dict(type="reward_studio", import_names=["reward_client.di_engine"])
    return EasyDict(main), EasyDict(create)


def greedy_success(policy: Any, seeds: list[int]) -> float:
    """The share of `seeds` whose episode the greedy policy (DI-engine's eval mode) ends on the goal."""
    import torch

    won = 0
    for seed in seeds:
        env = Corridor()
        frame, _ = env.reset(seed=seed)
        for _ in range(MAX_STEPS):
            out = policy.forward({0: torch.from_numpy(frame_obs(frame))})
            frame, _, terminated, truncated, info = env.step(int(out[0]["action"]))
            if terminated or truncated:
                won += bool(info["success"])
                break
    return won / len(seeds)


def train(args: dict) -> dict:
    import torch
    from ding.entry import serial_pipeline
    from ding.entry.serial_entry_reward_model_offpolicy import serial_pipeline_reward_model_offpolicy

    torch.set_num_threads(1)
    os.chdir(args["workdir"])
    corridor_env()
    main, create = configs(args)
    entry = serial_pipeline if args["reward"] == "env" else serial_pipeline_reward_model_offpolicy
    started = time.monotonic()
    policy = entry((main, create), seed=int(args["seed"]), model=q_network(), max_env_step=int(args["env_steps"]))
    seconds = time.monotonic() - started
    third = max(1, len(EPISODES) // 3)
    return {
        "reward": args["reward"],
        "seed": args["seed"],
        "success": greedy_success(policy.eval_mode, list(args["eval_seeds"])),
        "episodes": len(EPISODES),
        "collect_success_first_third": float(np.mean([s for _, s in EPISODES[:third]] or [0.0])),
        "collect_success_last_third": float(np.mean([s for _, s in EPISODES[-third:]] or [0.0])),
        "seconds": seconds,
        "cells": CELLS,
    }


def main() -> None:
    import logging

    logging.disable(logging.WARNING)  # DI-engine's per-iteration tables; errors still raise
    result = train(json.loads(sys.stdin.read()))
    sys.stdout.write("\n" + json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
