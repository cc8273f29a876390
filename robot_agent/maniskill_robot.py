"""ManiSkill3 PickCube-v1 on the CPU (physx_cpu physics, software-Vulkan rendering), two camera views.

`main` is the `base_camera` sensor; `extra` is the third-person render camera. Both are rendered at
`width`x`height`. See shared/reference/maniskill-cpu.md for the facts this rests on.
"""

from __future__ import annotations

import numpy as np

from .robot import Observation, Robot, RobotError
from .vulkan import ensure_vulkan_icd

EE_DELTA = "pd_ee_delta_pose"
JOINT_POS = "pd_joint_pos"


def _numpy(value) -> np.ndarray:
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
    ):
        self.env_id = env_id
        self.control_mode = control_mode
        self.width, self.height = width, height
        self.max_episode_steps = max_episode_steps
        self.cameras = list(cameras)
        self.env = None
        self.action_dim = 7 if control_mode == EE_DELTA else 8
        self._last: Observation | None = None

    def connect(self) -> None:
        ensure_vulkan_icd()
        try:
            import gymnasium as gym
            import mani_skill.envs  # noqa: F401  (registers the environments)
        except ImportError as exc:
            raise RobotError(f"ManiSkill is not installed ({exc}); pip install mani-skill") from None
        size = {"width": self.width, "height": self.height}
        try:
            self.env = gym.make(
                self.env_id,
                obs_mode="rgb",
                control_mode=self.control_mode,
                num_envs=1,
                sim_backend="physx_cpu",
                render_backend="cpu",
                render_mode="rgb_array",
                sensor_configs=size,
                human_render_camera_configs=size,
                max_episode_steps=self.max_episode_steps,
            )
        except RuntimeError as exc:
            if "rendering device" in str(exc) or "physical device" in str(exc):
                raise RobotError(
                    f"no usable Vulkan device ({exc}). Run scripts/setup_vulkan.sh and export the "
                    "VK_ICD_FILENAMES it prints."
                ) from None
            raise
        self.action_dim = int(self.env.action_space.shape[-1])

    def disconnect(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None

    def _observation(self, obs, reward=0.0, terminated=False, truncated=False, info=None) -> Observation:
        info = info or {}
        main = _numpy(obs["sensor_data"]["base_camera"]["rgb"])[0].astype(np.uint8)
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

    env = _PLAN_ENVS.get(env_id)
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

    def recording_step(action):
        actions.append(np.asarray(action, dtype=np.float32).copy())
        return real_step(action)

    env.step = recording_step
    try:
        solve(env, seed=seed, debug=False, vis=False)
    finally:
        env.step = real_step
    return actions


_PLAN_ENVS: dict = {}
