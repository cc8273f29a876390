"""Training presets: named starting points for the job form, each a set of form values over the defaults.

`pickcube` trains a good PickCube reward that RLinf's own `ResNetRewardModel` scores exactly as the service
does: the whole frame at the camera's own resolution (no crop, which RLinf's preprocessing lacks, and no
resize), with a higher learning rate decayed by a cosine schedule and the last epoch's weights
(bench/tour_model.py measures it, RLinf's class included). The plain defaults (lr 1e-4, constant, the epoch
with the lowest validation loss) on the run command's demo gave a model no better than always answering
"fail" one run in two (bench/tour_model.py --preset defaults).

`WORKSPACE_CROP` is what `manage.py demo` trains its teleop model on (webapp/demo/services.py): a model with a
crop is served by Reward Studio only (RLinf's class would score the whole frame; training.resnet.rlinf_match).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The main camera's workspace on PickCube (where the cube rests, the gripper closes on it and the lift starts)
# as [top, left, height, width] fractions of the frame.
WORKSPACE_CROP = [0.2, 0.25, 0.5, 0.5]


def whole_frame_input_size(camera_size: int) -> int:
    """The model's input side for the whole frame at the camera's resolution (one pixel per pixel)."""
    return max(16, min(1024, camera_size))


def workspace_input_size(camera_size: int) -> int:
    """The model's input side for the workspace crop at the camera's resolution (one pixel per pixel)."""
    return max(16, round(camera_size * WORKSPACE_CROP[2]))


@dataclass(frozen=True)
class Preset:
    label: str
    description: str
    values: dict[str, Any] = field(default_factory=dict)  # job-form fields; the rest keep their defaults

    def form_initial(self, camera_size: int | None) -> dict[str, Any]:
        values = dict(self.values)
        if values.pop("image_side_from_camera", False) and camera_size:
            side = whole_frame_input_size(camera_size)
            values["image_height"] = values["image_width"] = side
            values["crop_padding"] = max(1, camera_size // 16)
        if isinstance(values.get("crop"), list):
            values["crop"] = ", ".join(str(v) for v in values["crop"])
        return values


PRESETS: dict[str, Preset] = {
    "defaults": Preset(
        "Plain defaults", "The whole frame at 128x128, lr 1e-4 constant, the epoch with the lowest validation loss."
    ),
    "pickcube": Preset(
        "PickCube",
        "The whole frame at the camera's resolution (RLinf's own ResNetRewardModel scores it exactly as the "
        "service does), lr 1e-3 with a cosine schedule, the last epoch's weights, 10% synthetic fail frames "
        "(blank, one colour, noise) in the training split.",
        {
            "image_side_from_camera": True,
            "crop": [],
            "lr": 1e-3,
            "warmup_steps": 20,
            "schedule": "cosine",
            "select": "last",
            "patience": 0,
            "epochs": 8,
            "batch_size": 32,
            "hidden_dim": 256,
            "dropout": 0.1,
            "bn_recalibrate": False,
            "synthetic_negatives": 0.1,
        },
    ),
}
