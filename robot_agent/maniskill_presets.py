"""Named ManiSkill collection presets (no Django): settings that match a known RLinf setup.

`rlinf-pickcube`: RLinf's PickCube data collection for VLM trend rewards
(`examples/embodiment/config/maniskill_ppo_mlp_vlm_trend_reward_collect.yaml`, `env.eval`): the env
`PickCube3View-v1` (`rlinf/envs/maniskill/tasks/pick_cube_3view.py`: PickCube with a second sensor,
`3rd_view_camera`, posed like PickCube's human render camera, fov 1.0), `pd_joint_delta_pos` control,
sim 100 Hz / control 20 Hz, 50-step episodes, 224x224 sensor frames with the `minimal` shader, the goal
site shown (`ManiSkillEnv._show_goal_site_visual` in `rlinf/envs/maniskill/maniskill_env.py`), and the
extra view taken from `3rd_view_camera` (`use_3rd_view_as_extra`; RLinf's `_wrap_obs` stacks every
sensor but `base_camera` as `extra_view_images`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

THIRD_VIEW = "3rd_view_camera"
PICK_CUBE_3VIEW = "PickCube3View-v1"


@dataclass(frozen=True)
class ManiSkillPreset:
    name: str
    env_id: str
    control_mode: str
    width: int
    height: int
    max_episode_steps: int
    extra_camera: str | None  # a sensor name; None: the env's human render camera
    show_goal_site: bool
    sim_config: dict = field(default_factory=dict)
    shader_pack: str | None = None
    description: str = ""


PRESETS = {
    "rlinf-pickcube": ManiSkillPreset(
        name="rlinf-pickcube",
        env_id=PICK_CUBE_3VIEW,
        control_mode="pd_joint_delta_pos",
        width=224,
        height=224,
        max_episode_steps=50,
        extra_camera=THIRD_VIEW,
        show_goal_site=True,
        sim_config={"sim_freq": 100, "control_freq": 20},
        shader_pack="minimal",
        description="RLinf's PickCube trend-reward collection: PickCube3View-v1, pd_joint_delta_pos, 224x224, "
        "goal site shown, extra view = 3rd_view_camera",
    ),
}


def preset_get(name: str) -> ManiSkillPreset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown ManiSkill preset {name!r}; known: {', '.join(PRESETS)}") from None


_REGISTERED: set[str] = set()


def register_pick_cube_3view() -> None:
    """Register `PickCube3View-v1` with ManiSkill once: PickCube plus a `3rd_view_camera` sensor where the
    human render camera looks from (both sensors 128x128 unless `sensor_configs` sizes them)."""
    if PICK_CUBE_3VIEW in _REGISTERED:
        return
    import numpy as np
    from mani_skill.envs.tasks.tabletop.pick_cube import PickCubeEnv
    from mani_skill.sensors.camera import CameraConfig
    from mani_skill.utils import sapien_utils
    from mani_skill.utils.registration import REGISTERED_ENVS, register_env

    if PICK_CUBE_3VIEW not in REGISTERED_ENVS:

        @register_env(PICK_CUBE_3VIEW, max_episode_steps=50)
        class PickCube3View(PickCubeEnv):
            @property
            def _default_sensor_configs(self) -> list[Any]:
                main = sapien_utils.look_at(eye=self.sensor_cam_eye_pos, target=self.sensor_cam_target_pos)
                third = sapien_utils.look_at(eye=self.human_cam_eye_pos, target=self.human_cam_target_pos)
                return [
                    CameraConfig("base_camera", main, 128, 128, np.pi / 2, 0.01, 100),
                    CameraConfig(THIRD_VIEW, third, 128, 128, 1.0, 0.01, 100),
                ]

    _REGISTERED.add(PICK_CUBE_3VIEW)


def goal_site_show(env: Any) -> bool:
    """Make the goal marker visible in every camera (ManiSkill hides it from observations by default)."""
    base = env.unwrapped
    site = getattr(base, "goal_site", None)
    if site is None:
        return False
    hidden = getattr(base, "_hidden_objects", None)
    if hidden is not None:
        while site in hidden:
            hidden.remove(site)
    if hasattr(site, "show_visual"):
        site.show_visual()
    return True
