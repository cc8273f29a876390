"""Training presets: named starting points for the job form, each a set of form values over the defaults.

`pickcube` is the recipe `manage.py demo` trains a good PickCube reward with (webapp/demo/services.py uses
the same values): the model sees only the workspace, `WORKSPACE_CROP`, at the camera's own resolution, with
a higher learning rate decayed by a cosine schedule and the last epoch's weights. The plain defaults see the
whole frame at 128x128, where PickCube's cube is a few pixels: on the run command's demo (24 episodes at
128 px) one run in two gave a model no better than always answering "fail", in three times the preset's
training time (bench/tour_model.py --preset defaults).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The main camera's workspace on PickCube (where the cube rests, the gripper closes on it and the lift starts)
# as [top, left, height, width] fractions of the frame.
WORKSPACE_CROP = [0.2, 0.25, 0.5, 0.5]


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
            side = workspace_input_size(camera_size)
            values["image_height"] = values["image_width"] = side
            values["crop_padding"] = max(1, camera_size // 16)
        if isinstance(values.get("crop"), list):
            values["crop"] = ", ".join(str(v) for v in values["crop"])
        return values


PRESETS: dict[str, Preset] = {
    "defaults": Preset("Plain defaults", "RLinf's ResNet settings: the whole frame at 128x128, lr 1e-4."),
    "pickcube": Preset(
        "PickCube workspace",
        "manage.py demo's recipe: the workspace crop at the camera's resolution, lr 1e-3 with a cosine "
        "schedule, the last epoch's weights.",
        {
            "image_side_from_camera": True,
            "crop": WORKSPACE_CROP,
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
        },
    ),
}
