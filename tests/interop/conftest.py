"""Helpers for the interop tests: run RLinf's released code in the side environment (tests/interop/side_runner.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SIDE_PYTHON = ROOT / ".interop" / "bin" / "python"
RUNNER = Path(__file__).with_name("side_runner.py")
SIDES = {
    "interop": (SIDE_PYTHON, RUNNER),
    # .interop with the newest peft (RLinf's `embodied` extra leaves it unpinned): scripts/lib.sh ensure_interop_peft_env
    "interop-peft": (ROOT / ".interop-peft" / "bin" / "python", RUNNER),
    "lerobot": (ROOT / ".lerobot" / "bin" / "python", Path(__file__).with_name("lerobot_side.py")),
}


def side_run(command: str, timeout: float = 300, *, side: str = "interop", runner: str = "", **args) -> dict:
    """`side_runner.py COMMAND` in the interop environment (or, with side="lerobot", `lerobot_side.py COMMAND` in
    the LeRobot environment) with `args` as JSON; its JSON answer. `runner`: another script of this folder to
    run instead (e.g. "side_rlinf_plugin.py"), which takes COMMAND and JSON the same way."""
    python, runner_path = SIDES[side]
    if runner:
        runner_path = Path(__file__).with_name(runner)
    if not python.is_file():
        pytest.fail(
            f"the {side} environment ({python.parent.parent}) is missing: run scripts/test.sh once "
            f"(it builds it from requirements-{side}.txt), or `source scripts/lib.sh; ensure_{side.replace('-', '_')}_env`"
        )
    done = subprocess.run(
        [str(python), str(runner_path), command],
        input=json.dumps(args, default=str),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",  # nothing of the project on sys.path
        env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
    )
    if done.returncode != 0:
        raise AssertionError(f"{runner_path.name} {command} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def hub_qwen3_vl(vlm_fixture_dir, tmp_path_factory) -> Path:
    """The tiny Qwen3-VL in the hub's folder layout, which both transformers 4.57 (RLinf) and 5.24 read."""
    from .hub_layout import hub_layout_copy

    return hub_layout_copy(vlm_fixture_dir, tmp_path_factory.mktemp("hub") / "qwen3-vl-tiny")
