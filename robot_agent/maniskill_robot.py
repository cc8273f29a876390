"""ManiSkill3 PickCube-v1 on the CPU (physx_cpu physics, software-Vulkan rendering), two camera views.

`main` is the `base_camera` sensor; `extra` is the third-person render camera, or a second sensor
(`extra_camera`, as RLinf's `3rd_view_camera`). Both are rendered at `width`x`height`. Named presets
(`robot_agent.maniskill_presets`, e.g. RLinf's PickCube collection) set all of this at once. See
shared/reference/maniskill-cpu.md for the facts this rests on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .maniskill_presets import PICK_CUBE_3VIEW, goal_site_show, preset_get, register_pick_cube_3view
from .robot import Observation, Robot, RobotError
from .vulkan import ensure_vulkan_icd

EE_DELTA = "pd_ee_delta_pose"
JOINT_POS = "pd_joint_pos"


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "cpu"):
        value = value.cpu().numpy()
    return np.asarray(value)


class ManiSkillRobot(Robot):
    source = "sim"

    def __init__(
        self,
        env_id: str = "PickCube-v1",
        *,
        control_mode: str = EE_DELTA,
        width: int = 128,
        height: int = 128,
        max_episode_steps: int = 100,
        cameras: tuple[str, str] = ("main", "extra"),
        extra_camera: str | None = None,
        show_goal_site: bool = False,
        sim_config: dict | None = None,
        shader_pack: str | None = None,
        preset: str = "",
    ):
        self.env_id = env_id
        self.extra_camera = extra_camera
        self.show_goal_site = show_goal_site
        self.sim_config = dict(sim_config or {})
        self.shader_pack = shader_pack
        self.preset = preset
        self.control_mode = control_mode
        self.width, self.height = width, height
        self.max_episode_steps = max_episode_steps
        self.cameras = list(cameras)
        self.env: Any = None  # a gymnasium env once connected (gymnasium is imported lazily, untyped here)
        self.action_dim = 7 if control_mode == EE_DELTA else 8
        self._last: Observation | None = None

    @classmethod
    def from_preset(cls, name: str, *, max_episode_steps: int | None = None, **overrides: Any) -> ManiSkillRobot:
        """A robot with a named preset's env, control mode, frame size, cameras and goal marker."""
        preset = preset_get(name)
        return cls(
            preset.env_id,
            control_mode=overrides.pop("control_mode", preset.control_mode),
            width=overrides.pop("width", preset.width),
            height=overrides.pop("height", preset.height),
            max_episode_steps=max_episode_steps or preset.max_episode_steps,
            extra_camera=preset.extra_camera,
            show_goal_site=preset.show_goal_site,
            sim_config=preset.sim_config,
            shader_pack=preset.shader_pack,
            preset=preset.name,
            **overrides,
        )

    def connect(self) -> None:
        ensure_vulkan_icd()
        try:
            import gymnasium as gym
            import mani_skill.envs  # noqa: F401  (registers the environments)
        except ImportError as exc:
            raise RobotError(f"ManiSkill is not installed ({exc}); pip install mani-skill") from None
        if self.env_id == PICK_CUBE_3VIEW:
            register_pick_cube_3view()
        size = {"width": self.width, "height": self.height}
        sensors = dict(size, **({"shader_pack": self.shader_pack} if self.shader_pack else {}))
        extra_kwargs: dict[str, Any] = {"sim_config": self.sim_config} if self.sim_config else {}
        try:
            self.env = gym.make(
                self.env_id,
                obs_mode="rgb",
                control_mode=self.control_mode,
                num_envs=1,
                sim_backend="physx_cpu",
                render_backend="cpu",
                render_mode="rgb_array",
                sensor_configs=sensors,
                human_render_camera_configs=size,
                max_episode_steps=self.max_episode_steps,
                **extra_kwargs,
            )
        except RuntimeError as exc:
            if "rendering device" in str(exc) or "physical device" in str(exc):
                raise RobotError(
                    f"no usable Vulkan device ({exc}). Run scripts/setup_vulkan.sh and export the "
                    "VK_ICD_FILENAMES it prints."
                ) from None
            raise
        self.action_dim = int(self.env.action_space.shape[-1])
        if self.show_goal_site:
            goal_site_show(self.env)

    def disconnect(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None

    def _observation(
        self, obs: Any, reward: Any = 0.0, terminated: Any = False, truncated: Any = False, info: Any = None
    ) -> Observation:  # ManiSkill's dicts of tensors (or plain values)
        info = info or {}
        main = _numpy(obs["sensor_data"]["base_camera"]["rgb"])[0].astype(np.uint8)
        if self.extra_camera:
            extra = _numpy(obs["sensor_data"][self.extra_camera]["rgb"])[0].astype(np.uint8)
        else:
            extra = _numpy(self.env.render())[0].astype(np.uint8)
        success = bool(_numpy(info.get("success", False)).reshape(-1)[0]) if "success" in info else False
        plain_info = {}
        for key in ("is_grasped", "is_obj_placed", "is_robot_static", "elapsed_steps"):
            if key in info:
                plain_info[key] = _numpy(info[key]).reshape(-1)[0].item()
        self._last = Observation(
            images={self.cameras[0]: main, self.cameras[1]: extra},
            reward=float(_numpy(reward).reshape(-1)[0]),
            success=success,
            terminated=bool(_numpy(terminated).reshape(-1)[0]),
            truncated=bool(_numpy(truncated).reshape(-1)[0]),
            info=plain_info,
        )
        return self._last

    def reset(self, seed: int | None = None) -> Observation:
        obs, info = self.env.reset(seed=seed)
        if self.show_goal_site:
            goal_site_show(self.env)  # as RLinf does after every reset
        return self._observation(obs, info=info)

    def get_observation(self) -> Observation:
        if self._last is None:
            raise RobotError("no observation yet: call reset() first")
        return self._last

    def send_action(self, action: np.ndarray) -> Observation:
        action = np.asarray(action, dtype=np.float32).reshape(-1)
        if action.shape[0] != self.action_dim:
            raise ValueError(f"action has {action.shape[0]} values; {self.control_mode} takes {self.action_dim}")
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._observation(obs, reward, terminated, truncated, info)


def plan_pick_cube(env_id: str, seed: int | None) -> list[np.ndarray]:
    """ManiSkill's scripted pick-cube solution, run on a state-only env, as a list of pd_joint_pos actions.

    The planner steps its own env; we record the actions it sends and replay them on the camera env
    (same seed, same deterministic CPU physics), so the control loop keeps its own pace.
    """
    ensure_vulkan_icd()
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401
    from mani_skill.examples.motionplanning.panda.solutions.pick_cube import solve

    env: Any = _PLAN_ENVS.get(env_id)  # a gymnasium env; its step is swapped to record the planner's actions
    if env is None:
        env = gym.make(
            env_id,
            obs_mode="state",
            control_mode=JOINT_POS,
            num_envs=1,
            sim_backend="physx_cpu",
            render_backend="cpu",
            max_episode_steps=1000,
        )
        _PLAN_ENVS[env_id] = env
    actions: list[np.ndarray] = []
    real_step = env.step

    def recording_step(action: Any) -> Any:
        actions.append(np.asarray(action, dtype=np.float32).copy())
        return real_step(action)

    env.step = recording_step
    try:
        solve(env, seed=seed, debug=False, vis=False)
    finally:
        env.step = real_step
    return actions


_PLAN_ENVS: dict[str, Any] = {}
