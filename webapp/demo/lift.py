"""When the demo counts the cube as lifted, from the env state (the cube's height and PickCube's `is_grasped`).

PickCube's own success flag means "the cube is at the goal and the arm is still"; the goal is an invisible
point in the air, so a camera frame cannot show it and a classifier trained on that flag has to guess while
the cube rises. "Held up off the table" is what a frame does show. The demo model is trained on it, with a
margin: frames where the cube has left the table but is not yet clearly up are left unlabeled. No Django.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

LIFTED_RISE = 0.01  # m above its resting height, grasped: the cube has left the table (the live check's "lift")
LABEL_RISE = 0.03  # m: clearly up in a 64 px frame; frames between the two rises get no label

FAIL, SUCCESS, UNLABELED = "fail", "success", None


def _rise(heights: ArrayLike) -> np.ndarray:
    h = np.asarray(heights, dtype=np.float64)
    return h - h[0] if len(h) else h  # step 0 is the reset: the cube rests on the table


def lifted_mask(heights: ArrayLike, grasped: ArrayLike, rise: float = LIFTED_RISE) -> np.ndarray:
    """Per step: the gripper holds the cube at least `rise` metres above where it rested."""
    return np.asarray(grasped, dtype=bool) & (_rise(heights) >= rise)


def lift_step(heights: ArrayLike, grasped: ArrayLike, rise: float = LIFTED_RISE) -> int | None:
    """The first step at which the cube is lifted, or None when it never is."""
    hits = np.flatnonzero(lifted_mask(heights, grasped, rise))
    return int(hits[0]) if len(hits) else None


def frame_labels(heights: ArrayLike, grasped: ArrayLike) -> list[str | None]:
    """success once held `LABEL_RISE` up, fail while below `LIFTED_RISE` (or not held), None in between."""
    up = lifted_mask(heights, grasped, LABEL_RISE)
    off = lifted_mask(heights, grasped, LIFTED_RISE)
    return [SUCCESS if u else UNLABELED if o else FAIL for u, o in zip(up, off, strict=True)]
