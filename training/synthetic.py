"""Generated, separable frames for demos, tests and benchmarks (no Django, no torch).

A success frame shows a red square on a noisy background; a fail frame shows the background without it
(with `distractor=True`, half the fail frames show a blue square instead, so colour matters and not just
"something is there"; that takes a from-scratch ResNet a few more epochs to learn).
"""

from __future__ import annotations

import numpy as np

SQUARE_COLOUR = (220, 40, 40)
DISTRACTOR_COLOUR = (40, 60, 220)


def make_scene(
    success: bool, size: int | tuple[int, int], rng: np.random.Generator, *, distractor: bool = False
) -> np.ndarray:
    """One uint8 HxWx3 RGB frame: a red square somewhere when `success`, none otherwise."""
    height, width = (size, size) if isinstance(size, int) else size
    if height < 8 or width < 8:
        raise ValueError(f"scene must be at least 8x8 pixels, got {height}x{width}")
    base = rng.integers(70, 150, size=3)
    noise = rng.integers(-20, 21, size=(height, width, 3))
    image = np.clip(base[None, None, :] + noise, 0, 255).astype(np.uint8)
    side = max(3, min(height, width) // 3)
    if success:
        _paint_square(image, side, SQUARE_COLOUR, rng)
    elif distractor and rng.random() < 0.5:
        _paint_square(image, side, DISTRACTOR_COLOUR, rng)
    return image


def make_scenes(labels: list[bool] | np.ndarray, size: int, seed: int = 0, *, distractor: bool = False) -> np.ndarray:
    """A uint8 [N,H,W,3] batch, one scene per label."""
    rng = np.random.default_rng(seed)
    return np.stack([make_scene(bool(label), size, rng, distractor=distractor) for label in labels])


def _paint_square(image: np.ndarray, side: int, colour: tuple[int, int, int], rng: np.random.Generator) -> None:
    height, width = image.shape[:2]
    top = int(rng.integers(0, height - side + 1))
    left = int(rng.integers(0, width - side + 1))
    image[top : top + side, left : left + side] = colour
