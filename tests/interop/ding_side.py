"""Run tests/interop/ding_runner.py (DI-engine 0.5.3's released code with `reward_client`) in the interop
environment, and the app-side pieces its tests share."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from .conftest import ROOT, SIDE_PYTHON

RUNNER = Path(__file__).with_name("ding_runner.py")


def ding_run(command: str, timeout: float = 300, **args) -> dict:
    """`ding_runner.py COMMAND` in the interop environment with `args` as JSON; its JSON answer. Only the
    client package is importable from the project (PYTHONPATH is the repository root for `reward_client`)."""
    if not SIDE_PYTHON.is_file():
        pytest.fail(
            f"the interop environment ({SIDE_PYTHON.parent.parent}) is missing: run scripts/test.sh once "
            "(it builds it from requirements-interop.txt), or `source scripts/lib.sh; ensure_interop_env`"
        )
    done = subprocess.run(
        [str(SIDE_PYTHON), str(RUNNER), command],
        input=json.dumps(args, default=str),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(Path.home()),
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(ROOT),
            "WANDB_MODE": "disabled",
        },
    )
    if done.returncode != 0:
        raise AssertionError(f"ding_runner {command} failed ({done.returncode}):\n{done.stderr[-6000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def served_uint8(frames: np.ndarray) -> np.ndarray:
    """The env's float32 [B,3,H,W] frames in [0, 1] as the uint8 [B,H,W,3] images the service should get."""
    return np.clip(np.rint(frames.astype(np.float64) * 255), 0, 255).astype(np.uint8).transpose(0, 2, 3, 1)


def served_count(deployment) -> int:
    """Frames the deployment has served (the gallery's Redis counter; counts while `sample_every` > 0)."""
    import redis
    from django.conf import settings

    from inference.broker import SAMPLE_COUNTER_PREFIX

    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        return int(client.get(f"{SAMPLE_COUNTER_PREFIX}{deployment.name}:{deployment.id}") or 0)
    finally:
        client.close()


def app_args(url: str, token: str, deployment, tmp_path: Path) -> dict:
    """What every ding_runner command against the app takes: the service, the token, the deployment, a workdir."""
    return {"url": url, "token": token, "deployment": deployment.name, "workdir": str(tmp_path)}


def pipeline_run(app: dict, **args) -> tuple[dict, np.ndarray]:
    """ding_runner's `pipeline` with `app` (app_args) and `args`: its answer, and the next_obs of every
    transition the learner trained on, in order."""
    frames_path = Path(app["workdir"]) / "trained_next_obs.npy"
    result = ding_run("pipeline", **app, frames_path=str(frames_path), **args)
    return result, np.load(frames_path)
