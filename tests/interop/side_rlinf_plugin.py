"""Runs RLinf 0.3.0's own reward worker with `reward_client.rlinf_plugin` installed through RLinf's own hook.

Invoked by tests/interop/test_rlinf_plugin.py through conftest's `side_run(..., runner="side_rlinf_plugin.py")`:
`python side_rlinf_plugin.py COMMAND` with a JSON object on stdin, one JSON object on stdout. The JSON's `env`
(`RLINF_EXT_MODULE`, `PYTHONPATH` naming a folder that holds only `reward_client`, and the variables RLinf's
scheduler gives a worker process) is the environment of a fresh process that does the work, as `export`
before `python` would set it; nothing else of the project is importable there.

What runs is RLinf's code: `EmbodiedRewardWorker.__new__` (its per-process set-up, which calls
`load_user_extension_module`, which imports `RLINF_EXT_MODULE` and calls its `register()`), `__init__`,
`init_worker` (`model_provider_func`: `get_reward_model_class(cfg.reward.model.model_type)(cfg.reward.model)`,
`.to(device)`, `.eval()`) and `compute_image_rewards`; the reward input comes from `EnvWorker`'s own
`get_reward_model_output` (with its `HistoryManager` windows). Left out, because they need a Ray cluster or a
GPU: `Worker.__init__` (joins the Ray cluster), the `Cluster()` handle and `HybridComponentPlacement` in the
reward worker's `__init__` (placement is not used by the methods run here), and `torch.cuda.set_device` /
`torch.cuda.current_device` (first run as they are, to show where a CPU machine stops; then CPU stand-ins).
The env worker's channel to the reward worker is a direct call of the reward worker's `compute_image_rewards`.
`ray_launch` leaves nothing out: RLinf's own `Cluster` and launch, up to where a machine without a GPU stops.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import subprocess
import sys
import traceback
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

import numpy as np
import torch


def digest(frame: Any) -> str:
    array = np.ascontiguousarray(np.asarray(frame.numpy() if hasattr(frame, "numpy") else frame, dtype=np.uint8))
    return hashlib.sha256(array.reshape(-1, *array.shape[-3:])[0].tobytes()).hexdigest()[:16]


def qualname(cls: Any) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class NoPlacement:
    """Stands in for `Cluster()` and `HybridComponentPlacement(cfg, cluster)`, which need a Ray cluster."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


@contextmanager
def without_ray():
    from rlinf.scheduler import Worker

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(Worker, "__init__", lambda self, *a, **k: None))
        for name in ("Cluster", "HybridComponentPlacement"):
            stack.enter_context(mock.patch(f"rlinf.workers.reward.reward_worker.{name}", NoPlacement))
        yield


@contextmanager
def cuda_on_cpu():
    with (
        mock.patch("torch.cuda.set_device", lambda device: None),
        mock.patch("torch.cuda.current_device", lambda: "cpu"),
    ):
        yield


class EnvSide:
    """The attributes `EnvWorker.get_reward_model_output` reads (set as `EnvWorker.__init__` sets them for one
    pipeline stage), RLinf's own `HistoryManager`, and its channel to the reward worker as a direct call."""

    def __init__(self, cfg: Any, reward_worker: Any, num_envs: int) -> None:
        from rlinf.workers.env.env_worker import EnvWorker
        from rlinf.workers.env.history_manager import HistoryManager

        self.cfg = cfg
        self.reward_mode = cfg.reward.get("reward_mode", "per_step")
        self.env_infos_reward_keys = ("success", "episode", "final_info")
        self.train_num_envs_per_stage = num_envs
        self.train_batch_size = num_envs
        self.env_decoupled_mode = False
        if self.reward_mode == "history_buffer":
            self.train_history_managers = [HistoryManager(cfg.reward, num_envs)]
            self.history_lengths: list[dict] = [{}]
        self.reward_worker = reward_worker
        self.select = EnvWorker._select_reward_env_infos
        self.get_output = inspect.unwrap(EnvWorker.get_reward_model_output)  # without its profiling timer
        self.sent: dict = {}

    def _select_reward_env_infos(self, env_infos: dict) -> dict:
        return self.select(self, env_infos)

    def send_to(self, *, data: dict, **_: Any) -> None:
        self.sent = data
        self.answer = self.reward_worker.compute_image_rewards(observations=data)

    def recv_from(self, **_: Any) -> Any:
        return self.answer

    def step(self, env_output: Any) -> Any:
        return self.get_output(self, env_output, send_channel=None, recv_channel=None, stage_id=0)


def windows_of(history_input: dict) -> dict:
    """Each buffer's windows as frame digests: {buffer: {key: [[digest per frame] per env]}}."""
    return {
        name: {key: [[digest(frame) for frame in env] for env in envs] for key, envs in buffer.items()}
        for name, buffer in history_input.items()
    }


def run_config(yaml_text: str, steps: dict, max_steps: int | None = None) -> dict:
    """One reward worker built from `yaml_text` by RLinf, fed `steps` through RLinf's env worker code."""
    from omegaconf import OmegaConf
    from rlinf.data.embodied_io_struct import EnvOutput
    from rlinf.models.embodiment import reward
    from rlinf.workers.reward.reward_worker import EmbodiedRewardWorker

    cfg = OmegaConf.create(yaml_text)
    result: dict = {"registry_before": {k: qualname(v) for k, v in reward.reward_model_registry.items()}}
    worker = EmbodiedRewardWorker.__new__(EmbodiedRewardWorker, cfg)  # RLinf's per-process set-up and hook
    result["registry"] = {k: qualname(v) for k, v in reward.reward_model_registry.items()}
    try:
        with without_ray():
            EmbodiedRewardWorker.__init__(worker, cfg)
        result["gpu_stop"] = None
    except RuntimeError as exc:
        frame = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith("reward_worker.py")][-1]
        result["gpu_stop"] = {"file": frame.filename, "line": frame.line, "error": str(exc)[:200]}
    with without_ray(), cuda_on_cpu():
        EmbodiedRewardWorker.__init__(worker, cfg)
        try:
            worker.init_worker()
        except (ValueError, OSError) as exc:
            return {**result, "error": f"{type(exc).__name__}: {exc}"}
    model = worker.model
    result.update(model_class=qualname(type(model)), steps=[])
    env = EnvSide(cfg, worker, num_envs=len(steps["main"][0]))
    for i, main in enumerate(steps["main"][:max_steps]):
        obs: dict = {"main_images": torch.from_numpy(main)}
        if "extra" in steps:
            obs["extra_view_images"] = torch.from_numpy(steps["extra"][i])
        obs["task_descriptions"] = [steps.get("task", "")] * len(main)
        dones = torch.from_numpy(steps["dones"][i]).reshape(-1, 1) if "dones" in steps else None
        infos = {"success": torch.from_numpy(steps["success"][i])} if "success" in steps else None
        env_output = EnvOutput(obs=obs, dones=dones, env_infos=infos, rewards=torch.zeros(len(main), 1))
        output = env.step(env_output)
        result["steps"].append(
            {
                "rewards": output.reshape(-1).tolist(),
                "shape": list(output.shape),
                "dtype": str(output.dtype),
                "device": str(output.device),
                "windows": windows_of(env.sent["history_input"]) if "history_input" in env.sent else None,
                "sent_keys": sorted(env.sent),
            }
        )
    return result


def worker(args: dict) -> dict:
    """Each of `configs` (RLinf YAML texts) in turn, in this one process, on the arrays of `steps` (.npz:
    `main` [S,B,H,W,3] uint8; optional `extra` [S,B,1,H,W,3], `dones` and `success` [S,B]); `max_steps`
    ({config index: n}) stops a config's run after n steps."""
    with np.load(args["steps"]) as data:
        steps: dict = {key: data[key] for key in data.files}
    steps["task"] = args.get("task", "")
    limits = args.get("max_steps", {})
    runs = [run_config(text, steps, limits.get(str(i))) for i, text in enumerate(args["configs"])]
    return {"ext_module": os.environ.get("RLINF_EXT_MODULE"), "runs": runs}


def ray_launch(args: dict) -> dict:
    """RLinf's own launch, nothing left out: a one-node `Cluster` (a local Ray), `EmbodiedRewardWorker`
    placed on node 0 by `create_group(cfg).launch(...)`, then `init_worker()`; on a machine without a GPU the
    worker process dies in `__init__`. What its process logged comes back through the relay (`log_grep`)."""
    from omegaconf import OmegaConf
    from rlinf.scheduler import Cluster, NodePlacementStrategy
    from rlinf.workers.reward.reward_worker import EmbodiedRewardWorker

    cluster = Cluster(num_nodes=1)
    cfg = OmegaConf.create(args["yaml"])
    group = EmbodiedRewardWorker.create_group(cfg).launch(
        cluster=cluster, placement_strategy=NodePlacementStrategy([0]), name=cfg.reward.group_name
    )
    try:
        group.init_worker().wait()
    except Exception as exc:  # the worker's death, as RLinf's driver sees it
        return {"launched": True, "init_worker": f"failed: {type(exc).__name__}"}
    return {"launched": True, "init_worker": "ok"}


COMMANDS = {"worker": worker, "ray_launch": ray_launch}


def main() -> None:
    command, raw = sys.argv[1], sys.stdin.read()
    args = json.loads(raw or "{}")
    if len(sys.argv) == 2 and args.get("env"):  # the work runs in a fresh process with the environment asked for
        done = subprocess.run(
            [sys.executable, __file__, command, "in-env"],
            input=raw,
            capture_output=True,
            text=True,
            env={**os.environ, **args["env"]},
        )
        sys.stderr.write(done.stderr)
        if done.returncode or not args.get("log_grep"):
            sys.stdout.write(done.stdout)
            sys.exit(done.returncode)
        answer = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
        lines = (done.stdout + done.stderr).splitlines()
        answer["log"] = {text: [line for line in lines if text in line] for text in args["log_grep"]}
        print(json.dumps(answer))
        return
    print(json.dumps(COMMANDS[command](args)))


if __name__ == "__main__":
    main()
