"""Images and per-image values from numpy arrays, torch tensors or lists, without importing torch."""

from __future__ import annotations

import base64
import io
import sys
from typing import Any

import numpy as np


def to_numpy(value: Any) -> Any:
    """Tensors (torch or anything with .numpy()) to numpy without importing torch."""
    if hasattr(value, "detach"):
        value = value.detach()
    if hasattr(value, "cpu"):
        value = value.cpu()
    if hasattr(value, "numpy"):
        return value.numpy()
    return value


def flat(values: Any, dtype: Any = None) -> list:
    """A per-image argument (list, numpy array or tensor) as a flat list of Python values."""
    return np.asarray(to_numpy(values), dtype=dtype).reshape(-1).tolist()


def scalar(value: Any) -> Any:
    """The first value of a scalar, a one-element array or tensor (0 when empty)."""
    array = np.asarray(to_numpy(value))
    return array.reshape(-1)[0] if array.size else 0


def uint8_batch(images: Any) -> np.ndarray:
    """uint8 [B,H,W,3] from a batch or a single [H,W,3] image (NCHW is turned channels-last)."""
    array = np.asarray(to_numpy(images))
    if array.ndim == 3:
        array = array[None]
    if array.ndim == 4 and array.shape[-1] != 3 and array.shape[1] == 3:  # NCHW -> NHWC
        array = array.transpose(0, 2, 3, 1)
    if array.dtype != np.uint8:
        raise ValueError(f"images must be uint8 [B,H,W,3], got {array.dtype}")
    if array.ndim != 4 or array.shape[-1] != 3:
        raise ValueError(f"images must be uint8 [B,H,W,3], got shape {list(array.shape)}")
    return np.ascontiguousarray(array)


def uint8_images(images: Any, scale: float | str = "auto") -> np.ndarray:
    """uint8 [B,H,W,3] from uint8 or float images, channels last or first (a single image is a batch of one).

    Float images are multiplied by `scale`, rounded and clipped to 0..255; `scale="auto"` takes a batch whose
    values all lie in [0, 1] (DI-engine's image envs) as [0, 1] (scale 255) and any other as 0..255."""
    array = np.asarray(to_numpy(images))
    if array.ndim == 3:
        array = array[None]
    if array.ndim == 4 and array.shape[-1] != 3 and array.shape[1] == 3:  # NCHW -> NHWC
        array = array.transpose(0, 2, 3, 1)
    if array.dtype != np.uint8:
        if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
            raise ValueError(f"images must be uint8 or float [B,H,W,3], got {array.dtype}")
        if scale == "auto":
            unit = np.issubdtype(array.dtype, np.floating) and array.size and array.min() >= 0.0 and array.max() <= 1.0
            factor = 255.0 if unit else 1.0
        else:
            factor = float(scale)
        array = np.clip(np.rint(array.astype(np.float64) * factor), 0, 255).astype(np.uint8)
    if array.ndim != 4 or array.shape[-1] != 3:
        raise ValueError(f"images must be [B,H,W,3] or [B,3,H,W], got shape {list(array.shape)}")
    return np.ascontiguousarray(array)


def uint8_frame(frame: Any) -> np.ndarray:
    """One [H,W,3] frame ([1,H,W,3] accepted; other dtypes clipped to uint8)."""
    array = np.asarray(to_numpy(frame))
    if array.ndim == 4:  # [1, H, W, 3]
        array = array[0]
    if array.dtype != np.uint8:
        array = np.clip(array, 0, 255).astype(np.uint8)
    return array


def like_input(values: np.ndarray, template: Any) -> Any:
    """A torch tensor when the caller passed one (torch is then already imported), else numpy."""
    if hasattr(template, "detach") and "torch" in sys.modules:
        return sys.modules["torch"].from_numpy(values)
    return values


def png_base64(frame: np.ndarray) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(frame[..., :3])).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")
