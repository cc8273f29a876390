"""3Dconnexion SpaceMouse input through pyspacemouse, mapped to end-effector delta actions.

The mapping is plain math over a recorded device state (unit-tested); the device itself is optional.
Action layout (ManiSkill `pd_ee_delta_pose`): [dx, dy, dz, droll, dpitch, dyaw, gripper], each in
[-1, 1]; gripper -1 closes, +1 opens.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

GRIPPER_OPEN = 1.0
GRIPPER_CLOSED = -1.0


class SpaceMouseUnavailable(RuntimeError):
    """No SpaceMouse can be read; the message says why and what to install."""


@dataclass(frozen=True)
class SpaceMouseState:
    """One reading of the device: axes in [-1, 1], buttons (left, right) as 0/1."""

    x: float = 0.0
    y: float = 0.0
    z: float = 0.0
    roll: float = 0.0
    pitch: float = 0.0
    yaw: float = 0.0
    buttons: tuple[int, ...] = (0, 0)

    @classmethod
    def from_pyspacemouse(cls, state: Any) -> SpaceMouseState:  # pyspacemouse's untyped state tuple
        return cls(
            float(state.x),
            float(state.y),
            float(state.z),
            float(state.roll),
            float(state.pitch),
            float(state.yaw),
            tuple(int(b) for b in state.buttons),
        )


@dataclass
class SpaceMouseMapping:
    """Axes -> action: dead zone, then scale, then clip. `signs` flips axes to match the robot's frame."""

    dead_zone: float = 0.1
    translation_scale: float = 1.0
    rotation_scale: float = 0.5
    # robot (x, y, z, roll, pitch, yaw) <- device (y, -x, z, -pitch, roll, -yaw): pushing the cap away
    # from you moves the gripper forward, to the right moves it right.
    signs: tuple[float, ...] = (1.0, -1.0, 1.0, -1.0, 1.0, -1.0)
    gripper: float = field(default=GRIPPER_OPEN)

    def __post_init__(self) -> None:
        if not 0.0 <= self.dead_zone < 1.0:
            raise ValueError("dead_zone must be in [0, 1)")
        if len(self.signs) != 6:
            raise ValueError("signs needs six values")

    def apply_dead_zone(self, value: float) -> float:
        magnitude = abs(value)
        if magnitude <= self.dead_zone:
            return 0.0
        return float(np.sign(value) * min(1.0, (magnitude - self.dead_zone) / (1.0 - self.dead_zone)))

    def is_active(self, state: SpaceMouseState) -> bool:
        axes = (state.x, state.y, state.z, state.roll, state.pitch, state.yaw)
        return any(self.apply_dead_zone(v) != 0.0 for v in axes) or any(state.buttons[:2])

    def action(self, state: SpaceMouseState) -> np.ndarray:
        """The 7-value action for this reading; buttons set (and latch) the gripper."""
        buttons = tuple(state.buttons) + (0, 0)
        if buttons[0]:
            self.gripper = GRIPPER_CLOSED
        elif buttons[1]:
            self.gripper = GRIPPER_OPEN
        device = (state.y, state.x, state.z, state.pitch, state.roll, state.yaw)
        scales = (self.translation_scale,) * 3 + (self.rotation_scale,) * 3
        motion = [self.apply_dead_zone(v) * s * k for v, s, k in zip(device, self.signs, scales, strict=True)]
        return np.clip(np.array([*motion, self.gripper], dtype=np.float32), -1.0, 1.0)


class SpaceMouseDevice:
    """Reads the device through pyspacemouse; raises SpaceMouseUnavailable with a clear message."""

    def __init__(self) -> None:
        self._module: ModuleType | None = None

    def open(self) -> SpaceMouseDevice:
        try:
            import pyspacemouse
        except ImportError:
            raise SpaceMouseUnavailable("pyspacemouse is not installed: pip install pyspacemouse") from None
        try:
            ok = pyspacemouse.open()
        except (RuntimeError, OSError, AttributeError) as exc:
            text = str(exc)
            if "HID" in text or "hid" in text:
                raise SpaceMouseUnavailable(
                    "the HID library is missing: install it (Debian/Ubuntu: sudo apt-get install libhidapi-hidraw0)"
                ) from None
            raise SpaceMouseUnavailable(f"no SpaceMouse found: {text or 'plug one in'}") from None
        if not ok:
            raise SpaceMouseUnavailable("no SpaceMouse found: plug one in (and check /dev/hidraw* permissions)")
        self._module = pyspacemouse
        return self

    def read(self) -> SpaceMouseState:
        if self._module is None:
            raise SpaceMouseUnavailable("the SpaceMouse is not open: call open() first")
        return SpaceMouseState.from_pyspacemouse(self._module.read())

    def close(self) -> None:
        if self._module is not None:
            with contextlib.suppress(Exception):  # closing a vanished device is not an error
                self._module.close()
            self._module = None


def spacemouse_status() -> str:
    """One line for `robot_agent check`."""
    try:
        device = SpaceMouseDevice().open()
    except SpaceMouseUnavailable as exc:
        return f"unavailable: {exc}"
    device.close()
    return "ready"


class Clock:
    """Monotonic time, replaceable in tests."""

    def __call__(self) -> float:
        return time.monotonic()
