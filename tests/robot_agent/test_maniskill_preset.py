"""The `rlinf-pickcube` preset collects as RLinf's PickCube trend-reward collection does, in a real
ManiSkill env on the CPU (a few steps only).

Spec: `examples/embodiment/config/maniskill_ppo_mlp_vlm_trend_reward_collect.yaml` (env.eval.init_params:
id PickCube3View-v1, control_mode pd_joint_delta_pos, sim_freq 100 / control_freq 20, max_episode_steps
50, sensor_configs 224x224 with shader_pack minimal; use_3rd_view_as_extra), `rlinf/envs/maniskill/tasks/
pick_cube_3view.py` (sensor `3rd_view_camera` at PickCube's human render camera pose, fov 1.0) and
`rlinf/envs/maniskill/maniskill_env.py` (`_show_goal_site_visual`; `_wrap_obs` takes `base_camera` as
`main_images` and the other sensors as `extra_view_images`).
"""

from __future__ import annotations

import numpy as np
import pytest

from robot_agent.cli import build_parser, make_robot
from robot_agent.maniskill_presets import THIRD_VIEW, preset_get
from robot_agent.maniskill_robot import ManiSkillRobot
from robot_agent.robot import RobotError

pytestmark = pytest.mark.slow


def test_rlinf_pickcube_preset_runs_a_real_env_with_rlinfs_settings():
    robot = ManiSkillRobot.from_preset("rlinf-pickcube", max_episode_steps=4)
    robot.connect()
    try:
        env = robot.env.unwrapped
        assert env.spec.id == "PickCube3View-v1" and env.control_mode == "pd_joint_delta_pos"
        assert robot.action_dim == 8  # 7 joint deltas + gripper
        assert env.sim_freq == 100 and env.control_freq == 20
        assert set(env._sensors) == {"base_camera", THIRD_VIEW}
        assert env.goal_site not in env._hidden_objects  # the goal marker is shown to the cameras
        first = robot.reset(seed=0)
        assert first.images["main"].shape == first.images["extra"].shape == (224, 224, 3)
        assert first.images["main"].dtype == np.uint8
        # the extra view is the 3rd-view sensor, not the main camera
        assert np.abs(first.images["main"].astype(int) - first.images["extra"].astype(int)).mean() > 5
        step = robot.send_action(np.zeros(8, dtype=np.float32))
        assert step.images["extra"].shape == (224, 224, 3) and not step.terminated
        with pytest.raises(ValueError, match="takes 8"):
            robot.send_action(np.zeros(7, dtype=np.float32))
    finally:
        robot.disconnect()


def test_preset_is_a_cli_flag_and_refuses_the_joint_position_planner():
    args = build_parser().parse_args(
        ["run", "--project", "P", "--preset", "rlinf-pickcube", "--policy", "random", "--max-steps", "9"]
    )
    robot = make_robot(args)  # not connected: no env is built here
    preset = preset_get("rlinf-pickcube")
    assert (robot.env_id, robot.control_mode, robot.width, robot.height) == (
        preset.env_id,
        "pd_joint_delta_pos",
        224,
        224,
    )
    assert robot.extra_camera == THIRD_VIEW and robot.show_goal_site and robot.max_episode_steps == 9
    args = build_parser().parse_args(["run", "--project", "P", "--preset", "rlinf-pickcube", "--policy", "scripted"])
    with pytest.raises(RobotError, match="pd_joint_pos"):
        make_robot(args)
    with pytest.raises(ValueError, match="unknown ManiSkill preset"):
        preset_get("nope")
