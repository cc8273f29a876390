"""Building ingest requests in tests: tiny PNG frames and multipart step chunks."""

from __future__ import annotations

import io
import json

import numpy as np
from PIL import Image


def png_bytes(seed: int, size: int = 32, mode: str = "RGB") -> bytes:
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    pixels = rng.integers(0, 256, (size, size, channels), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels.squeeze(-1) if channels == 1 else pixels, mode).save(buffer, format="PNG")
    return buffer.getvalue()


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def step_rows(indices, *, reward_offset: float = 0.0) -> list[dict]:
    return [
        {
            "index": i,
            "action": [0.1 * i, -0.1],
            "reward": reward_offset + i / 10,
            "terminated": False,
            "truncated": False,
            "success": i >= 3,
            "info": {"k": i},
        }
        for i in indices
    ]


def multipart_chunk(indices, cameras=("main", "extra"), size: int = 32, images: dict | None = None) -> dict:
    """Form data for a chunk: `steps` as JSON plus one file per step and camera."""
    data: dict = {"steps": json.dumps(step_rows(indices))}
    for i in indices:
        for camera in cameras:
            raw = (images or {}).get((i, camera)) or png_bytes(i * 10 + len(camera), size)
            data[f"frame.{i}.{camera}"] = io.BytesIO(raw)
    return data
